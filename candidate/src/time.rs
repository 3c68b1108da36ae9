//! Timestamps in RFC 3339, for logs and for the `Serialize` impls of transitions, and readings
//! of the monotonic clock, which orders events across the processes of one machine.

use conclave_core::time::Timestamp;
use serde::{Serialize, Serializer};

/// `at` in RFC 3339 with microseconds when it has them (`2025-11-30T10:53:20.123456Z`), as
/// Kubernetes writes a `MicroTime`. Out-of-range values (before year -9999 or after 9999) give
/// the raw microseconds.
#[must_use]
pub fn rfc3339(at: Timestamp) -> String {
    jiff::Timestamp::from_microsecond(at.as_micros())
        .map_or_else(|_| at.to_string(), |t| t.to_string())
}

/// `serialize_with` for a [`Timestamp`].
pub(crate) fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&rfc3339(*at))
}

/// `serialize_with` for an optional [`Timestamp`] (`null` when absent).
pub(crate) fn serialize_option<S: Serializer>(
    at: &Option<Timestamp>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serialize(at, serializer),
        None => serializer.serialize_none(),
    }
}

/// A reading of the system's monotonic clock: nanoseconds of `CLOCK_MONOTONIC` on Unix (the clock
/// std's `Instant` reads on Linux), which never steps with NTP or an operator's `date`. Readings
/// of different processes on one machine are comparable, so the leadership intervals of several
/// processes can be checked for overlap without trusting the wall clock (a
/// [`Transition`](crate::Transition) carries one). It means nothing across machines or reboots.
///
/// Outside Unix it counts from the first reading in the process, so readings are comparable
/// within one process only.
///
/// Serializes as a plain number of nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct MonotonicTime(u64);

impl MonotonicTime {
    /// Reads the clock now.
    #[must_use]
    pub fn now() -> Self {
        Self(monotonic_nanos())
    }

    /// A reading of `nanos` nanoseconds (for tests and for readings made elsewhere).
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// The reading in nanoseconds.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
}

#[cfg(unix)]
fn monotonic_nanos() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Never negative: CLOCK_MONOTONIC counts from boot.
    let seconds = u64::try_from(now.tv_sec).unwrap_or_default();
    let nanos = u64::try_from(now.tv_nsec).unwrap_or_default();
    seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(not(unix))]
fn monotonic_nanos() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed = START.get_or_init(std::time::Instant::now).elapsed();
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc3339() {
        assert_eq!(
            rfc3339(Timestamp::from_secs(1_764_500_000)),
            "2025-11-30T10:53:20Z"
        );
        assert_eq!(
            rfc3339(Timestamp::from_micros(1_764_500_000_000_250)),
            "2025-11-30T10:53:20.00025Z"
        );
    }

    #[test]
    fn monotonic_readings_follow_std_instant_and_serialize_as_nanoseconds() {
        let first = MonotonicTime::now();
        let instant = std::time::Instant::now();
        let second = MonotonicTime::now();
        let elapsed = instant.elapsed();
        let third = MonotonicTime::now();
        assert!(first <= second && second <= third);
        if cfg!(target_os = "linux") {
            // std's Instant reads the same clock there: the readings bracket its interval.
            assert!(third.as_nanos() - first.as_nanos() >= elapsed.as_nanos() as u64);
        }
        assert_eq!(
            serde_json::to_string(&MonotonicTime::from_nanos(12_345)).unwrap(),
            "12345"
        );
    }
}
