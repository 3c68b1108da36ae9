//! Timestamps in RFC 3339, for logs and for the `Serialize` impls of transitions.

use conclave_core::time::Timestamp;
use serde::Serializer;

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
}
