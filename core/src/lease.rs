//! The state of a Lease as plain data: who holds it, whether it has expired, whether it is free.

use crate::time::Timestamp;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

/// The fields of a `coordination.k8s.io/v1` Lease that elections depend on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
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
    /// When this controller watched the current renewal (holder and `renewTime`) arrive, by its
    /// own clock; `None` when it did not (first seen in a list, or not read from a watch). Expiry
    /// counts from the later of this and `renewTime`, so a holder whose clock runs behind is not
    /// replaced before its Lease has expired by the controller's clock (client-go's rule).
    pub observed_renewal: Option<Timestamp>,
    /// How long the holder took from its previous renewal to the current one, as this controller
    /// watched both arrive, by its own clock; `None` when it did not watch both, or the previous
    /// one was the holder's acquisition (a take-over lands at any point of its period).
    /// Pre-emptions are timed by it, early in the holder's renewal period
    /// ([`crate::plan::next_renewal_awaited`]).
    pub renew_period: Option<Duration>,
    /// Who released the Lease unasked (no `preferredHolder` had named someone else), as this
    /// controller watched its holder clear `holderIdentity`; `None` while the Lease has a holder,
    /// after a release a pre-emption asked for, or when nobody was seen releasing it. The instance
    /// that just let go is often stopping, and the deletion of its LeaseCandidate may not have been
    /// watched yet: until it shows it is alive after its release ([`LeaseRecord::released`]), it
    /// is pinged and not elected again while someone else can lead.
    pub released_by: Option<String>,
    /// The candidate a `preferredHolder` named when this controller watched the holder it
    /// pre-empted release the Lease (KEP-5366's graceful hand-off); `None` while the Lease has a
    /// holder, after an unasked release, or when nobody was seen releasing it. The controller
    /// checked that candidate was alive when it pre-empted, so the hand-off goes to it without a
    /// second ping ([`crate::plan::known_alive`]).
    pub released_for: Option<String>,
    /// When this controller first held back a pre-emption of the current holder to wait for its
    /// next renewal ([`crate::plan::next_renewal_awaited`]), by its own clock; `None` when it has
    /// not. The wait is bounded from then, so that it is not re-armed at every renewal when each
    /// reconcile runs late in the holder's period (a busy queue, a storm).
    pub preemption_held_since: Option<Timestamp>,
    /// Candidates of this Lease that were written as its holder and never renewed it, each
    /// sitting out its elections until a time ([`crate::plan::never_renewed_holder`]); kept by
    /// this controller, not stored in the Lease.
    pub sitting_out: Vec<SitOut>,
    /// Whether the holder is known dead by pod liveness ([`crate::pod::process_dead`]): the
    /// kubelet reported that the process behind its LeaseCandidate stopped, and the holder did not
    /// answer the ping sent when this controller saw that. The Lease then counts as expired
    /// ([`LeaseRecord::is_expired`]) and its holder takes no part in the election
    /// ([`crate::plan::considered`]). Kept by this controller, not stored in the Lease.
    pub holder_dead: bool,
}

/// A candidate that sits out a Lease's elections: it was written as holder and never renewed the
/// Lease before it expired ([`crate::plan::never_renewed_holder`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SitOut {
    /// The candidate's name (its holder identity).
    pub candidate: String,
    /// Until when it sits out.
    pub until: Timestamp,
}

impl SitOut {
    /// Whether this sit-out keeps `candidate` out of the Lease's elections at `now`.
    #[must_use]
    pub fn keeps_out(&self, candidate: &str, now: Timestamp) -> bool {
        self.candidate == candidate && self.until > now
    }
}

/// The annotation Conclave puts on Leases it creates.
pub const ELECTED_BY_ANNOTATION: &str = "coordination.conclave.dev/elected-by";

/// The value of [`ELECTED_BY_ANNOTATION`].
pub const ELECTED_BY_VALUE: &str = "conclave";

/// A watched release of a Lease ([`LeaseRecord::released`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release<'a> {
    /// The identity that held the Lease and released it.
    pub by: &'a str,
    /// The released Lease's `renewTime`: the moment of release by the releasing instance's clock,
    /// which also stamps its LeaseCandidate's `renewTime`.
    pub at: Timestamp,
    /// When this controller watched the release arrive, by the clock that stamps its pings.
    pub seen_at: Timestamp,
}

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

    /// When the current holder last renewed: `renewTime`, or when this controller saw that renewal
    /// arrive if that was later ([`LeaseRecord::observed_renewal`]).
    #[must_use]
    pub fn renewed_at(&self) -> Option<Timestamp> {
        let renew = self.renew_time?;
        Some(self.observed_renewal.map_or(renew, |seen| seen.max(renew)))
    }

    /// When the Lease expires: [`LeaseRecord::renewed_at`] plus `leaseDurationSeconds`; `None` if
    /// it lacks `renewTime` or a positive `leaseDurationSeconds`, which upstream treats as already
    /// expired.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        let renew = self.renewed_at()?;
        let seconds = u64::try_from(self.lease_duration_seconds?).ok()?;
        Some(renew + Duration::from_secs(seconds))
    }

    /// Whether the Lease has expired at `now`: [`LeaseRecord::expires_at`] is before it (upstream:
    /// `renewTime + duration < now`), or its holder is known dead ([`LeaseRecord::holder_dead`]).
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        (self.holder_dead && self.holder().is_some()) || self.expires_at().is_none_or(|at| at < now)
    }

    /// The release this record shows, if this controller watched it: who released the Lease,
    /// when by that instance's clock, and when the controller saw it by its own.
    #[must_use]
    pub fn released(&self) -> Option<Release<'_>> {
        if self.holder().is_some() {
            return None;
        }
        Some(Release {
            by: non_empty(self.released_by.as_ref())?,
            at: self.renew_time?,
            seen_at: self.observed_renewal?,
        })
    }

    /// The candidate a pre-empted holder stepped down for, while the Lease is free
    /// ([`LeaseRecord::released_for`]).
    #[must_use]
    pub fn handed_over_to(&self) -> Option<&str> {
        if self.holder().is_some() {
            return None;
        }
        non_empty(self.released_for.as_ref())
    }

    /// Whether `candidate` sits out this Lease's elections at `now` ([`LeaseRecord::sitting_out`]).
    #[must_use]
    pub fn sits_out(&self, candidate: &str, now: Timestamp) -> bool {
        self.sitting_out.iter().any(|s| s.keeps_out(candidate, now))
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

    #[test]
    fn expiry_counts_from_when_the_controller_saw_the_renewal_if_that_was_later() {
        // The holder's clock runs 12 s behind: by its renewTime the 10 s Lease expired already.
        let mut behind = lease(Some("a"), Some(88), Some(10));
        let now = Timestamp::from_secs(100);
        assert!(behind.is_free(now));
        behind.observed_renewal = Some(Timestamp::from_secs(99));
        assert_eq!(behind.renewed_at(), Some(Timestamp::from_secs(99)));
        assert!(!behind.is_free(now), "seen renewing a second ago");
        assert!(behind.is_expired(Timestamp::from_secs(110)));
        // A clock ahead: renewTime is the later, and counts.
        let mut ahead = lease(Some("a"), Some(105), Some(10));
        ahead.observed_renewal = Some(Timestamp::from_secs(100));
        assert_eq!(ahead.expires_at(), Some(Timestamp::from_secs(115)));
    }
}
