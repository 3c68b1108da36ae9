//! The state of a Lease as plain data: who holds it, whether it has expired, whether it is free.

use crate::time::Timestamp;
use alloc::string::String;
use core::time::Duration;

/// The fields of a `coordination.k8s.io/v1` Lease that elections depend on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion`, the precondition for every write.
    pub resource_version: String,
    /// `spec.holderIdentity` as stored; see [`LeaseRecord::holder`] for the normalised view.
    pub holder_identity: Option<String>,
    /// `spec.preferredHolder` as stored.
    pub preferred_holder: Option<String>,
    /// `spec.strategy` as stored.
    pub strategy: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `spec.leaseTransitions`.
    pub lease_transitions: Option<i32>,
    /// Whether Conclave created or elected into this Lease (annotation
    /// `coordination.conclave.dev/elected-by: conclave`).
    pub elected_by_conclave: bool,
}

/// The annotation Conclave puts on Leases it creates.
pub const ELECTED_BY_ANNOTATION: &str = "coordination.conclave.dev/elected-by";

/// The value of [`ELECTED_BY_ANNOTATION`].
pub const ELECTED_BY_VALUE: &str = "conclave";

fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(String::as_str).filter(|s| !s.is_empty())
}

impl LeaseRecord {
    /// The holder, treating an absent and an empty `holderIdentity` alike (upstream crashes on the
    /// difference, spec §6.6).
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        non_empty(self.holder_identity.as_ref())
    }

    /// The preferred holder, treating absent and empty alike.
    #[must_use]
    pub fn preferred(&self) -> Option<&str> {
        non_empty(self.preferred_holder.as_ref())
    }

    /// The strategy, treating absent and empty alike.
    #[must_use]
    pub fn strategy(&self) -> Option<&str> {
        non_empty(self.strategy.as_ref())
    }

    /// When the Lease expires by the timestamps it carries; `None` if it lacks `renewTime` or a
    /// positive `leaseDurationSeconds`, which upstream treats as already expired.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        let renew = self.renew_time?;
        let seconds = u64::try_from(self.lease_duration_seconds?).ok()?;
        Some(renew + Duration::from_secs(seconds))
    }

    /// Whether the Lease has expired at `now` (upstream: `renewTime + duration < now`).
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_none_or(|at| at < now)
    }

    /// Whether anyone may be elected into the Lease at once: it is expired or has no holder.
    #[must_use]
    pub fn is_free(&self, now: Timestamp) -> bool {
        self.holder().is_none() || self.is_expired(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renew: Option<i64>, duration: Option<i32>) -> LeaseRecord {
        LeaseRecord {
            holder_identity: holder.map(Into::into),
            renew_time: renew.map(Timestamp::from_secs),
            lease_duration_seconds: duration,
            ..Default::default()
        }
    }

    #[test]
    fn expiry_and_freedom() {
        let now = Timestamp::from_secs(100);
        let table = [
            (lease(Some("a"), Some(98), Some(5)), false, false),
            (lease(Some("a"), Some(95), Some(5)), false, false),
            (lease(Some("a"), Some(94), Some(5)), true, true),
            (lease(Some("a"), None, Some(5)), true, true),
            (lease(Some("a"), Some(99), None), true, true),
            (lease(Some("a"), Some(99), Some(0)), true, true),
            (lease(Some(""), Some(99), Some(5)), false, true),
            (lease(None, Some(99), Some(5)), false, true),
        ];
        for (i, (lease, expired, free)) in table.iter().enumerate() {
            assert_eq!(lease.is_expired(now), *expired, "case {i}");
            assert_eq!(lease.is_free(now), *free, "case {i}");
        }
    }

    #[test]
    fn empty_strings_read_as_absent() {
        let record = LeaseRecord {
            holder_identity: Some(String::new()),
            preferred_holder: Some(String::new()),
            strategy: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(
            (record.holder(), record.preferred(), record.strategy()),
            (None, None, None)
        );
    }
}
