//! Points in time as plain data, so the election core needs no clock and no date library.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time in microseconds since the Unix epoch, the precision of a Kubernetes `MicroTime`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Wraps a number of microseconds since the Unix epoch.
    #[must_use]
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// Wraps a number of whole seconds since the Unix epoch.
    #[must_use]
    pub const fn from_secs(secs: i64) -> Self {
        Self(secs.saturating_mul(1_000_000))
    }

    /// Microseconds since the Unix epoch.
    #[must_use]
    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// How long ago `self` was at `now`; zero when `self` is in the future.
    #[must_use]
    pub fn elapsed_at(self, now: Self) -> Duration {
        Duration::from_micros(u64::try_from(now.0.saturating_sub(self.0)).unwrap_or(0))
    }
}

fn micros_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Self;

    fn add(self, rhs: Duration) -> Self {
        Self(self.0.saturating_add(micros_of(rhs)))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Self;

    fn sub(self, rhs: Duration) -> Self {
        Self(self.0.saturating_sub(micros_of(rhs)))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_elapsed_never_goes_negative() {
        let t = Timestamp::from_secs(10);
        assert_eq!((t + Duration::from_secs(5)).as_micros(), 15_000_000);
        assert_eq!((t - Duration::from_secs(5)).as_micros(), 5_000_000);
        assert_eq!(
            t.elapsed_at(Timestamp::from_secs(12)),
            Duration::from_secs(2)
        );
        assert_eq!(t.elapsed_at(Timestamp::from_secs(8)), Duration::ZERO);
        assert_eq!(
            Timestamp::from_micros(i64::MAX) + Duration::MAX,
            Timestamp::from_micros(i64::MAX)
        );
    }
}
