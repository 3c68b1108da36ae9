//! What a controller remembers of one Lease between its steps, as plain data: the Lease's current
//! renewal as this controller saw it arrive (by its own clock), whether its last step found it
//! settled, until when a holder may still lead after the Lease's deletion, and which candidates
//! sit out its elections. One rule lives here once: `conclave-controller`'s index keeps one
//! [`LeaseMemory`] per Lease, converting each watched Lease at its edge ([`SeenLease`]), and the
//! model (`tests/model`) keeps the same type in its state, so the model checks this code, not a
//! copy of it.
//!
//! Expiry is judged from the moment of observation, as client-go does, not only from the holder's
//! timestamps; a releaser must show it lives before it is elected again
//! ([`crate::plan::liveness_since`]). A Lease deleted while held is not created again for anyone
//! before its holder may have stopped leading by its own reckoning: `kubectl delete lease` is a
//! common way to force a re-election, and a Lease recreated for someone else at once would have
//! a second leader while the first one has not yet seen the deletion (issue 34, finding 1).

use crate::lease::{LeaseRecord, SitOut};
use crate::time::Timestamp;
use alloc::borrow::ToOwned;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

/// A Lease as a watch event or a list delivers it: what its memory reads of it. The controller
/// reads a Kubernetes Lease in place (a renewal that decides nothing builds no record, issue 31);
/// the model hands in the core's [`LeaseRecord`].
pub trait SeenLease {
    /// `spec.holderIdentity`.
    fn holder_identity(&self) -> Option<&str>;
    /// `spec.renewTime`.
    fn renew_time(&self) -> Option<Timestamp>;
    /// `spec.preferredHolder`.
    fn preferred_holder(&self) -> Option<&str>;
    /// `spec.leaseDurationSeconds` (`None`: absent or negative).
    fn lease_duration(&self) -> Option<Duration>;
    /// Whether this Lease carries what `decided_by` (a record with `resourceVersion` and
    /// `renewTime` cleared, [`decided_by`]) does, but for those two: whether it only renewed it.
    fn same_but_renewal(&self, decided_by: &LeaseRecord) -> bool;
    /// The core's record of this Lease.
    fn record(&self) -> LeaseRecord;
}

/// `leaseDurationSeconds` as a duration: `None` when absent or negative.
#[must_use]
pub fn duration_of(seconds: Option<i32>) -> Option<Duration> {
    seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
}

impl SeenLease for LeaseRecord {
    fn holder_identity(&self) -> Option<&str> {
        self.holder_identity.as_deref()
    }

    fn renew_time(&self) -> Option<Timestamp> {
        self.renew_time
    }

    fn preferred_holder(&self) -> Option<&str> {
        self.preferred_holder.as_deref()
    }

    fn lease_duration(&self) -> Option<Duration> {
        duration_of(self.lease_duration_seconds)
    }

    fn same_but_renewal(&self, decided_by: &LeaseRecord) -> bool {
        decided_by == &self::decided_by(self)
    }

    fn record(&self) -> LeaseRecord {
        self.clone()
    }
}

/// Everything of a Lease's `record` a step reads but its renewal (`resourceVersion` and
/// `renewTime` cleared): whether a later event is a renewal and nothing else.
#[must_use]
pub fn decided_by(record: &LeaseRecord) -> LeaseRecord {
    LeaseRecord {
        resource_version: String::new(),
        renew_time: None,
        ..record.clone()
    }
}

/// A holder identity, with absent and empty alike.
fn named(holder: Option<&str>) -> Option<&str> {
    holder.filter(|h| !h.is_empty())
}

/// What a watched Lease event means for the Lease's election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// It may change the outcome: run a step.
    Elect,
    /// A renewal that decides nothing: the same holder renewed, before its Lease expired, and
    /// nothing else a step reads changed, while the Lease's last step found it settled and the
    /// clock has changed nothing it read since (`crate::step::settled_until`). The step it would
    /// trigger would find the Lease as it is and write, ping and record nothing; it would only
    /// look again at `recheck_at` ([`crate::plan::recheck_at`]: the holder overdue, then the
    /// expiry, both moved later by the renewal).
    Renewal {
        /// When to look at the Lease again, instead of any time set before.
        recheck_at: Option<Timestamp>,
    },
}

/// One Lease's current renewal: when this controller first saw it, by its own clock (watched
/// arriving, or listed or read: never by the holder's clock alone); whether it is the first of
/// its holder (an acquisition, or listed); whether it was watched arriving (a listed one arrived
/// at an unknown moment before); how long after the same holder's previous watched renewal
/// (`None`: not both watched, or the previous one was the acquisition, which a controller's
/// take-over writes at any point of the holder's period); the candidate any `preferredHolder`
/// seen during this holder's tenure named (kept when the `preferredHolder` is cleared again); the
/// holder whose watched write cleared `holderIdentity` unasked (`None`: held, asked to step down,
/// or release not watched); the candidate a pre-empted holder released it for (`None`: held,
/// released unasked, or release not watched); when a step first held back a pre-emption of this
/// holder to wait for its renewal (`None`: never); and what a step decides by besides.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Renewal {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    seen_at: Timestamp,
    watched: bool,
    first_of_holder: bool,
    period: Option<Duration>,
    asked_for: Option<String>,
    released_by: Option<String>,
    released_for: Option<String>,
    preemption_held_since: Option<Timestamp>,
    duration: Option<Duration>,
    /// Everything of the Lease a step reads but the renewal ([`decided_by`]): whether an event
    /// is a renewal and nothing else.
    decided_by: LeaseRecord,
}

impl Renewal {
    /// Whether this renewal is `holder`'s at `renew_time`.
    fn is(&self, holder: Option<&str>, renew_time: Option<Timestamp>) -> bool {
        self.holder.as_deref() == holder && self.renew_time == renew_time
    }

    /// What a next renewal that clears the holder means: who released the Lease unasked (this
    /// renewal's holder, unless a `preferredHolder` seen during its tenure named someone else)
    /// and for whom (that `preferredHolder`, who asked the holder to step down). For a Lease
    /// already free, what its release meant before.
    ///
    /// Any `preferredHolder` of the tenure counts, not only the latest: when the preferred
    /// candidate disappears while the holder drains, the controller clears `preferredHolder`, and
    /// the holder, asked to step down before, releases all the same; read as unasked, it was set
    /// aside, and a worse candidate got a term only to be pre-empted (issue 34, finding 7).
    fn release(&self) -> (Option<String>, Option<String>) {
        let Some(holder) = named(self.holder.as_deref()) else {
            return (self.released_by.clone(), self.released_for.clone());
        };
        match &self.asked_for {
            Some(successor) => (None, Some(successor.clone())),
            None => (Some(holder.to_owned()), None),
        }
    }

    /// The first renewal seen of a holder: `record`'s, seen at `now`, watched arriving or listed.
    fn first(
        record: &LeaseRecord,
        now: Timestamp,
        watched: bool,
        (released_by, released_for): (Option<String>, Option<String>),
    ) -> Self {
        let mut renewal = Self {
            holder: record.holder_identity.clone(),
            renew_time: record.renew_time,
            seen_at: now,
            watched,
            first_of_holder: true,
            period: None,
            asked_for: None,
            released_by,
            released_for,
            preemption_held_since: None,
            duration: duration_of(record.lease_duration_seconds),
            decided_by: decided_by(record),
        };
        renewal.saw_preferred(record.preferred_holder.as_deref());
        renewal
    }

    /// Whether the Lease, at this renewal, has a holder whose term has not ended at `now` by this
    /// controller's reckoning ([`crate::plan::without_leader`]).
    fn live_at(&mut self, now: Timestamp) -> bool {
        self.with_record(|record| !crate::plan::without_leader(Some(record), now))
    }

    /// When a step would look at the Lease again at `now`, after this renewal, if nothing
    /// happens ([`crate::plan::recheck_at`]).
    fn recheck_at(&mut self, now: Timestamp) -> Option<Timestamp> {
        self.with_record(|record| crate::plan::recheck_at(Some(record), now))
    }

    /// `read` of the Lease's record as a step would build and annotate it, as far as the Lease's
    /// timing goes (holder, duration, this renewal's time and when this controller saw it): what
    /// it decides by, with the renewal filled in for the call and cleared after it, so that no
    /// record is built.
    fn with_record<T>(&mut self, read: impl FnOnce(&LeaseRecord) -> T) -> T {
        let record = &mut self.decided_by;
        record.renew_time = self.renew_time;
        record.observed_renewal = Some(self.seen_at);
        let answer = read(record);
        record.renew_time = None;
        record.observed_renewal = None;
        answer
    }

    /// The renewal this one is seen again, in `record` (another `preferredHolder`, another
    /// strategy, or the same Lease relisted): what a step decides by follows it.
    fn seen_again(&mut self, record: &LeaseRecord) {
        self.saw_preferred(record.preferred_holder.as_deref());
        self.duration = duration_of(record.lease_duration_seconds);
        self.decided_by = decided_by(record);
    }

    /// Whether this renewal is by `holder`, a named one.
    fn held_by(&self, holder: Option<&str>) -> bool {
        named(self.holder.as_deref()).is_some() && self.holder.as_deref() == holder
    }

    /// The same holder renewed again at `now`, up to `renew_time`: timed from now, how long after
    /// this renewal if both were watched and this one was not its acquisition, and not a release;
    /// a `preferredHolder` asking it to step down and a held-back pre-emption still count.
    fn renewed(
        &mut self,
        renew_time: Option<Timestamp>,
        now: Timestamp,
        duration: Option<Duration>,
        preferred: Option<&str>,
    ) {
        self.period = (!self.first_of_holder && self.watched).then(|| self.seen_at.elapsed_at(now));
        self.renew_time = renew_time;
        self.seen_at = now;
        self.watched = true;
        self.first_of_holder = false;
        self.released_by = None;
        self.released_for = None;
        self.duration = duration;
        self.saw_preferred(preferred);
    }

    /// Records a `preferredHolder` seen on this renewal: it asks the holder to step down when it
    /// names someone else.
    fn saw_preferred(&mut self, preferred: Option<&str>) {
        if let Some(successor) = preferred.filter(|p| {
            !p.is_empty() && named(self.holder.as_deref()).is_some_and(|holder| holder != *p)
        }) {
            self.asked_for = Some(successor.to_owned());
        }
    }
}

/// A candidate that sits out a Lease's elections: how many times in a row it was written as
/// holder and never renewed, and until when it sits out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Strikes {
    /// Times in a row it never renewed.
    pub count: u32,
    /// Until when it sits out.
    pub until: Timestamp,
}

/// Everything one controller remembers of one Lease between its steps, kept by the Lease's key:
/// its current renewal while the Lease is cached, whether its last step found it settled, until
/// when the holder of the Lease, deleted while held, may still lead, and the candidates that sit
/// out its elections. A deletion or a relist ends the renewal, not the sit-outs: the step that
/// creates a deleted Lease again leaves them out too (`crate::step::StepInput::sitting_out`);
/// only their time ends them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LeaseMemory {
    /// The Lease's current renewal; `None` while the Lease is not cached (never seen, deleted,
    /// or missing from a relist).
    renewal: Option<Renewal>,
    /// Whether the Lease's last step found it settled (`crate::step::Outcome::settles`), until
    /// when (`Some(None)`: until an event), by `crate::step::settled_until`; `None`: not
    /// settled, or changed since.
    settled: Option<Option<Timestamp>>,
    /// Until when the holder of the Lease, deleted while held, may still lead by its own
    /// reckoning (its last renewal as first seen, plus its duration).
    deleted_while_held: Option<Timestamp>,
    /// Candidate -> its sit-out ([`LeaseMemory::sit_out`]).
    sitting_out: BTreeMap<String, Strikes>,
}

impl LeaseMemory {
    /// Whether the Lease is cached: watched or listed, and not deleted or missing from a relist
    /// since.
    #[must_use]
    pub const fn is_cached(&self) -> bool {
        self.renewal.is_some()
    }

    /// Whether there is nothing left to remember: the Lease is not cached, no deletion hold and
    /// no sit-out (a keyed map may forget the key).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.renewal.is_none() && self.deleted_while_held.is_none() && self.sitting_out.is_empty()
    }

    /// A watch event delivered `lease` at `now`: a new renewal is timed now; any other change
    /// (a `preferredHolder`, a strategy) keeps the time of the renewal it carries. A renewal that
    /// clears the holder records who held the Lease before it, unless a `preferredHolder` had
    /// asked that holder to step down (a pre-empted instance stays a follower, KEP-5366, and the
    /// one it made way for is elected anyway). A Lease seen again is no longer held after a
    /// deletion.
    ///
    /// Returns whether the event may change the election's outcome ([`Watched`]).
    pub fn watched(&mut self, lease: &impl SeenLease, now: Timestamp) -> Watched {
        self.deleted_while_held = None;
        let settled = self.settled.take();
        let Some(renewal) = self.renewal.as_mut() else {
            self.renewal = Some(Renewal::first(&lease.record(), now, true, (None, None)));
            return Watched::Elect;
        };
        let (holder, renew_time) = (lease.holder_identity(), lease.renew_time());
        if renewal.is(holder, renew_time) {
            renewal.seen_again(&lease.record());
            return Watched::Elect;
        }
        if renewal.held_by(holder) {
            // Judged before the renewal is recorded: the Lease's last step found it settled, the
            // previous renewal had not expired, and nothing else a step reads changed. Judged and
            // recorded in place, with no record of the Lease built.
            let decides_nothing = settled
                .is_some_and(|until| until.is_none_or(|until| now < until))
                && renewal.duration.is_some_and(|d| renewal.seen_at + d > now)
                && lease.same_but_renewal(&renewal.decided_by);
            renewal.renewed(
                renew_time,
                now,
                lease.lease_duration(),
                lease.preferred_holder(),
            );
            if decides_nothing {
                self.settled = settled;
                return Watched::Renewal {
                    recheck_at: renewal.recheck_at(now),
                };
            }
            renewal.decided_by = decided_by(&lease.record());
            return Watched::Elect;
        }
        let released = match named(holder) {
            Some(_) => (None, None),
            None => renewal.release(),
        };
        *renewal = Renewal::first(&lease.record(), now, true, released);
        Watched::Elect
    }

    /// A relist at `now` delivered `lease`: a renewal already watched keeps its time and
    /// releaser; a new one arrived while the watch was down, at an unknown moment, from an unknown
    /// writer, and counts as renewed when it was listed, by this controller's clock. Judged by
    /// its `renewTime` instead (the holder's clock), a holder whose clock runs behind would be
    /// replaced while it still leads, right after every controller start or relist (issue 34,
    /// finding 2; client-go stamps a renewal with the time it first observed it, too).
    pub fn listed(&mut self, lease: &impl SeenLease, now: Timestamp) {
        let record = lease.record();
        self.deleted_while_held = None;
        self.settled = None;
        match self.renewal.as_mut() {
            Some(renewal) if renewal.is(record.holder_identity.as_deref(), record.renew_time) => {
                renewal.seen_again(&record);
            }
            _ => self.renewal = Some(Renewal::first(&record, now, false, (None, None))),
        }
    }

    /// A watch event at `now` delivered the deletion of `lease`. If it was held, its holder may
    /// lead until its last renewal, as first seen by this controller, plus its duration: the
    /// Lease is not created again for anyone before then ([`LeaseMemory::held_after_deletion`]).
    pub fn deleted(&mut self, lease: &impl SeenLease, now: Timestamp) {
        let (holder, renew_time) = (lease.holder_identity(), lease.renew_time());
        let renewal = self.renewal.take();
        self.settled = None;
        let (Some(_), Some(duration)) = (named(holder), lease.lease_duration()) else {
            self.deleted_while_held = None;
            return;
        };
        let renewed = renewal
            .filter(|r| r.is(holder, renew_time))
            .map_or(now, |r| r.seen_at);
        self.deleted_while_held = Some(renewed + duration);
    }

    /// A relist at `now` is complete and did not list the Lease: it was deleted while the watch
    /// was down (or the server lost it), and counts as deleted now. Its holder may have renewed
    /// it while the watch was down, unseen, up to its deletion, which came before this list: it
    /// may lead until `now` plus its duration, not only until the last renewal this controller
    /// saw plus its duration (issue 47, finding 2: a Lease renewed during a 21 s outage and then
    /// deleted was created again for another candidate at once, 8 s before its holder's term
    /// ended).
    pub fn missing_from_relist(&mut self, now: Timestamp) {
        let Some(renewal) = self.renewal.take() else {
            return;
        };
        self.settled = None;
        if let (Some(_), Some(duration)) = (named(renewal.holder.as_deref()), renewal.duration) {
            self.deleted_while_held = Some(now + duration);
        }
    }

    /// The Lease's step found it settled until `until` (`None`: until an event): its holder's
    /// renewals before then decide nothing ([`Watched::Renewal`]). A Lease not cached is not
    /// settled: the event that brings it triggers a step.
    pub fn settle(&mut self, until: Option<Timestamp>) {
        if self.renewal.is_some() {
            self.settled = Some(until);
        }
    }

    /// A step of the Lease begins, or found it unsettled: its holder's renewals trigger steps
    /// again.
    pub fn unsettle(&mut self) {
        self.settled = None;
    }

    /// Whether the Lease, as last watched or listed, has a holder whose term has not ended at
    /// `now` by this controller's reckoning (`false` for a Lease not cached): the first half of
    /// [`crate::plan::leaderless`] on the Lease's record as [`LeaseMemory::annotate`] fills it
    /// in, without building that record.
    pub fn has_live_holder(&mut self, now: Timestamp) -> bool {
        self.renewal
            .as_mut()
            .is_some_and(|renewal| renewal.live_at(now))
    }

    /// A step at `now` held back a pre-emption of the current holder to wait for its renewal:
    /// the first such time of this holder's tenure bounds the whole wait
    /// (`LeaseRecord::preemption_held_since`).
    pub fn preemption_held_back(&mut self, now: Timestamp) {
        if let Some(renewal) = self.renewal.as_mut() {
            renewal.preemption_held_since.get_or_insert(now);
        }
    }

    /// `candidate`, written as holder of the Lease, let it expire without renewing it: it sits
    /// out the Lease's elections from `now` for [`crate::plan::never_renewed_backoff`], longer
    /// each time in a row (a candidate that sat out before and failed again within a sit-out's
    /// length of its end). Returns its strikes: how many times in a row, and until when.
    pub fn sit_out(&mut self, candidate: &str, now: Timestamp) -> Strikes {
        let count = self.sitting_out.get(candidate).map_or(1, |previous| {
            let backoff = crate::plan::never_renewed_backoff(previous.count);
            if previous.until + backoff > now {
                previous.count.saturating_add(1)
            } else {
                1
            }
        });
        let strikes = Strikes {
            count,
            until: now + crate::plan::never_renewed_backoff(count),
        };
        self.sitting_out.insert(candidate.to_owned(), strikes);
        strikes
    }

    /// The candidates that sit out the Lease's elections at `now` ([`LeaseMemory::sit_out`]),
    /// by name.
    #[must_use]
    pub fn sitting_out(&self, now: Timestamp) -> Vec<SitOut> {
        self.sitting_out
            .iter()
            .filter(|(_, strikes)| strikes.until > now)
            .map(|(candidate, strikes)| SitOut {
                candidate: candidate.clone(),
                until: strikes.until,
            })
            .collect()
    }

    /// Whether `candidate` sits out the Lease's elections at `now` ([`LeaseMemory::sit_out`]).
    #[must_use]
    pub fn sits_out(&self, candidate: &str, now: Timestamp) -> bool {
        self.sitting_out
            .get(candidate)
            .is_some_and(|strikes| strikes.until > now)
    }

    /// Every sit-out recorded, ended or not, by candidate name (the strikes of one that ended
    /// still count if it fails again soon).
    pub fn strikes(&self) -> impl Iterator<Item = (&str, Strikes)> {
        self.sitting_out
            .iter()
            .map(|(candidate, strikes)| (candidate.as_str(), *strikes))
    }

    /// Until when the holder of the Lease, deleted while held, may still lead by its own
    /// reckoning at `now`; `None` when the Lease was not deleted while held, was seen again, or
    /// that time has passed (then it is forgotten). A Lease not cached also counts as held until
    /// `unseen_held_until()`, when that is after `now`: the controller's hold on a Lease missing
    /// from its first list after a start, which nothing this process saw dates.
    pub fn held_after_deletion(
        &mut self,
        now: Timestamp,
        unseen_held_until: impl FnOnce() -> Option<Timestamp>,
    ) -> Option<Timestamp> {
        if let Some(until) = self.deleted_while_held {
            if until > now {
                return Some(until);
            }
            self.deleted_while_held = None;
        }
        if self.is_cached() {
            return None;
        }
        unseen_held_until().filter(|until| *until > now)
    }

    /// Fills in what this controller saw of the renewal `record` carries: the candidates sitting
    /// out at `now`, when it first saw the renewal (`observed_renewal`), how long after the same
    /// holder's previous one (`renew_period`), when a pre-emption of its holder was first held
    /// back, and, for a release, who released it unasked (`released_by`) or for whom
    /// (`released_for`). A record newer than the renewal last seen (a write of this controller's
    /// own, or a read after a write conflict) was first seen `now`: its renewal counts from then,
    /// never from the holder's `renewTime` alone, and nothing else is known of it.
    pub fn annotate(&self, record: &mut LeaseRecord, now: Timestamp) {
        record.sitting_out = self.sitting_out(now);
        let Some(renewal) = self
            .renewal
            .as_ref()
            .filter(|r| r.is(record.holder_identity.as_deref(), record.renew_time))
        else {
            record.observed_renewal = Some(now);
            record.renew_period = None;
            record.released_by = None;
            record.released_for = None;
            record.preemption_held_since = None;
            return;
        };
        record.observed_renewal = Some(renewal.seen_at);
        record.preemption_held_since = renewal.preemption_held_since;
        record.renew_period = renewal.period;
        record.released_by = renewal.released_by.clone();
        record.released_for = renewal.released_for.clone();
    }
}

#[cfg(test)]
mod tests;
