//! Planning one election step as pure data: which candidates count, whom to ping, when to look
//! again, and what to write into the Lease.
//!
//! [`crate::step`] composes them into one step per reconcile of a Lease key:
//!
//! 1. [`considered`]: live candidates, minus those that were pinged and never acked within the ack
//!    window (left out until they renew by themselves, so each is pinged at most once per window;
//!    the holder of an unexpired Lease stays in until the Lease expires);
//! 2. the strategy plugin names the best of the considered candidates;
//! 3. [`plan_writes`]: what the Lease would need if that candidate won; nothing means no election
//!    is needed (and [`recheck_at`] says when the Lease may expire);
//! 4. [`plan_pings`]: elect at once if the best candidate is fresh, otherwise ping every candidate
//!    that is not fresh (concurrently) and wait; when the window ends the best unacked candidate
//!    becomes unresponsive and step 1 leaves it out, so the election falls to the acked ones.
//!
//! Every function takes `now` as an input; nothing here reads a clock.

use crate::lease::{LeaseRecord, Release, SitOut};
use crate::request::CandidateView;
use crate::strategy::is_third_party;
use crate::time::Timestamp;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

/// Where a candidate stands with respect to pings, at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It renewed (or acked) within the ack window.
    Fresh,
    /// It was pinged less than one window ago and has not acked yet; the window closes at `until`.
    Pending {
        /// When the ping's window closes.
        until: Timestamp,
    },
    /// It was pinged at least one window ago and never acked: left out until it renews.
    Unresponsive,
    /// Not fresh and no ping outstanding: ping it before counting on it.
    Stale,
}

/// Classifies a candidate (upstream's ping rules, spec §6.4 step 3, with non-responsive
/// candidates left out as in PR #138071).
#[must_use]
pub fn liveness(candidate: &CandidateView, now: Timestamp, ack_window: Duration) -> Liveness {
    liveness_since(candidate, now, ack_window, None)
}

/// [`liveness`] of a candidate that may have released the Lease: when `release` names it, only a
/// renewal after the release (by its own clock, the clock of the release) makes it fresh, and
/// only a ping sent after this controller watched the release (by the controller's clock, the
/// clock of pings) counts as outstanding. An instance that lets its Lease go is usually stopping,
/// and the deletion of its LeaseCandidate can reach the controller after the release: without a
/// sign of life since, electing it again would hand the Lease to a leaver until the Lease expires.
#[must_use]
pub fn liveness_since(
    candidate: &CandidateView,
    now: Timestamp,
    ack_window: Duration,
    release: Option<Release<'_>>,
) -> Liveness {
    let release = release.filter(|r| r.by == candidate.name);
    if candidate
        .renew_time
        .filter(|renew| release.is_none_or(|r| *renew > r.at))
        .is_some_and(|renew| renew + ack_window > now)
    {
        return Liveness::Fresh;
    }
    match candidate.ping_time {
        Some(ping)
            if release.is_none_or(|r| ping >= r.seen_at)
                && candidate.renew_time.is_none_or(|renew| renew < ping) =>
        {
            let until = ping + ack_window;
            if until > now {
                Liveness::Pending { until }
            } else {
                Liveness::Unresponsive
            }
        }
        _ => Liveness::Stale,
    }
}

/// Whether a candidate has not renewed for `expiry` (or never): it takes no part in elections and
/// is garbage-collected (upstream: 30 minutes).
#[must_use]
pub fn candidate_expired(candidate: &CandidateView, now: Timestamp, expiry: Duration) -> bool {
    candidate_expires_at(candidate, expiry).is_none_or(|at| at < now)
}

/// When a candidate that does not renew again stops taking part and becomes due for garbage
/// collection: its last renewal plus `expiry`; `None` if it never renewed (expired already).
#[must_use]
pub fn candidate_expires_at(candidate: &CandidateView, expiry: Duration) -> Option<Timestamp> {
    candidate.renew_time.map(|renew| renew + expiry)
}

/// Whether a Lease under coordination is without a leader although it has candidates: it is
/// missing, has no holder or has expired ([`LeaseRecord::is_free`]), while at least one of
/// `candidates` has renewed within `expiry` (the candidates an election takes part in, as
/// [`candidate_expired`] counts them: a killed instance's LeaseCandidate stays one until it is
/// garbage-collected). The caller passes only valid candidates of a Lease it elects for.
///
/// A failover makes a Lease leaderless for a moment; one that stays so means no candidate takes
/// it: they are all dead, or the strategy fails, elects nobody, or is unknown
/// (`conclave_leases_without_holder`, alert `ConclaveLeaseWithoutHolder`).
///
/// Its first half, [`without_leader`], needs no candidates: a caller counting many Leases asks it
/// first and gathers the candidates only of the Leases without a leader.
#[must_use]
pub fn leaderless(
    lease: Option<&LeaseRecord>,
    candidates: &[CandidateView],
    now: Timestamp,
    expiry: Duration,
) -> bool {
    without_leader(lease, now)
        && candidates
            .iter()
            .any(|c| !candidate_expired(c, now, expiry))
}

/// Whether a Lease has no leader at `now`: it is missing, has no holder or has expired
/// ([`LeaseRecord::is_free`]). [`leaderless`] adds that candidates are waiting.
#[must_use]
pub fn without_leader(lease: Option<&LeaseRecord>, now: Timestamp) -> bool {
    lease.is_none_or(|lease| lease.is_free(now))
}

/// The candidates an election may consider: all but the unresponsive ones, except the holder of
/// `lease` while the Lease has not expired; and once it has expired, not its holder while a ping
/// sent after its last renewal ([`probe_holder`]) is unanswered.
///
/// A holder whose probe went unanswered is either dead or too slow to answer (its renewals and
/// its answer queue behind an overloaded API server). Pre-empting it for a worse candidate helps
/// neither: a dead holder never reads `preferredHolder`, so the Lease goes to the next best at
/// its expiry all the same, and a slow one would hand over a Lease it keeps renewing, with the
/// `preferredHolder` write racing those renewals, and be pre-empted back once its answer arrives.
/// So it keeps its Lease until the Lease expires, and is left out then, however long its probe's
/// ack window still runs: it neither renewed its Lease for a whole lease duration nor answered
/// the ping, so nothing says it lives, and waiting out the window put crash failover an ack
/// window past the expiry of any Lease shorter than two windows (7.2 to 7.6 s after a SIGKILL on
/// a 5 s Lease). A holder that answers later is a candidate like any other again.
///
/// A holder known dead by pod liveness ([`LeaseRecord::holder_dead`]) is left out at once: the
/// kubelet reported that its process stopped, and it did not answer the ping sent then.
#[must_use]
pub fn considered(
    candidates: &[CandidateView],
    lease: Option<&LeaseRecord>,
    now: Timestamp,
    ack_window: Duration,
) -> Vec<CandidateView> {
    let holder = lease.and_then(LeaseRecord::holder);
    let held = lease.filter(|lease| !lease.is_free(now)).is_some();
    let probe_unanswered_at_expiry = |c: &CandidateView| {
        !held
            && holder == Some(c.name.as_str())
            && matches!(liveness(c, now, ack_window), Liveness::Pending { .. })
            && c.ping_time
                .zip(lease.and_then(LeaseRecord::renewed_at))
                .is_some_and(|(ping, renewed)| ping >= renewed)
    };
    let dead_holder = lease
        .filter(|l| l.holder_dead)
        .and_then(LeaseRecord::holder);
    candidates
        .iter()
        .filter(|c| dead_holder != Some(c.name.as_str()))
        .filter(|c| {
            (held && holder == Some(c.name.as_str()))
                || (liveness(c, now, ack_window) != Liveness::Unresponsive
                    && !probe_unanswered_at_expiry(c))
        })
        .cloned()
        .collect()
}

/// Takes the instance that released the Lease out of `pool` while it has not shown life since
/// its release ([`liveness_since`]) and someone else can lead. A leaver (kube-scheduler on
/// SIGTERM, whose LeaseCandidate stays behind; a stopping replica whose candidate deletion is
/// still on its way) is then not elected, and the next best leads at once instead of an ack
/// window later. Returns its name when it needs a ping: if it lives, its ack brings it back into
/// the pool, and a pre-emption gives it the Lease if it is the best. Alone, it stays in the pool
/// and [`plan_pings`] asks it first.
pub fn set_aside_releaser(
    pool: &mut Vec<CandidateView>,
    release: Option<Release<'_>>,
    now: Timestamp,
    ack_window: Duration,
) -> Option<String> {
    let release = release?;
    let at = pool.iter().position(|c| c.name == release.by)?;
    if pool.len() < 2 {
        return None;
    }
    match liveness_since(&pool[at], now, ack_window, Some(release)) {
        Liveness::Fresh => None,
        Liveness::Stale => Some(pool.remove(at).name),
        Liveness::Pending { .. } | Liveness::Unresponsive => {
            pool.remove(at);
            None
        }
    }
}

/// The holder of `lease` if it was written by this controller (or by Conclave before it) and let
/// the Lease expire without ever renewing it (`renewTime` still equals `acquireTime`); `None`
/// otherwise, and while the Lease is live.
///
/// Such a holder answers pings but cannot write its Lease (RBAC that allows LeaseCandidate
/// updates but not Lease updates, an admission policy refusing its writes, a stuck transition
/// hook). Written back at every expiry, it would hold the Lease forever while a live rival never
/// leads (upstream does the same). So it sits out the Lease's elections for
/// [`never_renewed_backoff`] ([`set_aside_never_renewed`]), with an Event and a metric saying
/// why (issue 34, finding 6).
#[must_use]
pub fn never_renewed_holder(lease: &LeaseRecord, now: Timestamp) -> Option<&str> {
    let holder = lease.holder()?;
    let never_renewed = lease.elected_by_conclave
        && lease.acquire_time.is_some()
        && lease.renew_time == lease.acquire_time;
    (never_renewed && lease.is_expired(now)).then_some(holder)
}

/// How long a holder that never renewed sits out the Lease's elections, the `strikes`-th time
/// in a row: one minute, doubling each time, at most 16 minutes.
#[must_use]
pub fn never_renewed_backoff(strikes: u32) -> Duration {
    Duration::from_secs(60) * 2u32.pow(strikes.saturating_sub(1).min(4))
}

/// Takes out of `pool` the candidates that sit out the Lease's elections (`sitting_out`: the
/// Lease's own, [`LeaseRecord::sitting_out`], or, for a missing Lease, those recorded for its key,
/// [`crate::step::StepInput::sitting_out`]), and the holder of an expired Lease that never renewed
/// it ([`never_renewed_holder`]), as long as someone else is left to lead; returns the name of the
/// latter, so the caller records it as sitting out. A lone candidate stays: a Lease with a holder
/// that cannot renew is no worse than one with none.
pub fn set_aside_never_renewed(
    pool: &mut Vec<CandidateView>,
    lease: Option<&LeaseRecord>,
    sitting_out: &[SitOut],
    now: Timestamp,
) -> Option<String> {
    let failed = lease.and_then(|lease| never_renewed_holder(lease, now));
    let out = |c: &CandidateView| {
        failed == Some(c.name.as_str()) || sitting_out.iter().any(|s| s.keeps_out(&c.name, now))
    };
    if pool.iter().all(out) {
        return None;
    }
    pool.retain(|c| !out(c));
    failed.map(Into::into)
}

/// What to do about pings before electing `best`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingPlan {
    /// The best candidate is fresh: elect it now, without waiting for worse ones.
    Elect,
    /// Ping these candidates (each not fresh and without an outstanding ping), then look again at
    /// `recheck_at` unless an ack arrives first.
    Ping {
        /// The candidates to ping, sorted by name.
        candidates: Vec<String>,
        /// When the window of these pings closes.
        recheck_at: Timestamp,
    },
    /// The best candidate's ping is outstanding; look again at `recheck_at` (when its window
    /// closes) unless its ack arrives first.
    Wait {
        /// When the best candidate's ping window closes.
        recheck_at: Timestamp,
    },
}

/// Decides whether `best` (named by the strategy among `candidates`) can be elected now, or whom to
/// ping first. Every candidate that is not fresh and has no outstanding ping is pinged in the same
/// step, so that when the window closes all acks are in.
///
/// A `best` that is not among `candidates` is treated as not fresh. The instance that `release`
/// names must show it is alive since its release ([`liveness_since`]).
#[must_use]
pub fn plan_pings(
    candidates: &[CandidateView],
    best: &str,
    now: Timestamp,
    ack_window: Duration,
    release: Option<Release<'_>>,
) -> PingPlan {
    let alive = |c: &CandidateView| liveness_since(c, now, ack_window, release);
    let best_liveness = candidates
        .iter()
        .find(|c| c.name == best)
        .map_or(Liveness::Stale, alive);
    if best_liveness == Liveness::Fresh {
        return PingPlan::Elect;
    }
    let mut to_ping: Vec<String> = candidates
        .iter()
        .filter(|c| alive(c) == Liveness::Stale)
        .map(|c| c.name.clone())
        .collect();
    to_ping.sort();
    to_ping.dedup();
    match best_liveness {
        Liveness::Pending { until } if to_ping.is_empty() => PingPlan::Wait { recheck_at: until },
        _ if to_ping.is_empty() => PingPlan::Wait {
            recheck_at: now + ack_window,
        },
        _ => PingPlan::Ping {
            candidates: to_ping,
            recheck_at: now + ack_window,
        },
    }
}

/// Whether `winner` may take over a free Lease without another ping, on a sign of life this
/// controller already has: its candidate renewed or acked within `grace` of `now`, has no ping
/// outstanding, and
/// - the Lease was released for it by the holder it pre-empted ([`LeaseRecord::handed_over_to`]),
///   or
/// - it is the holder of the expired Lease and its candidate renewed after the holder's last
///   renewal of the Lease: it answered the probe of an overdue holder ([`probe_holder`]).
///
/// A pre-emption is written only while the preferred candidate is fresh, but a graceful step-down
/// (stop the work, then release) can outlast the ack window; and the answer to a probe is at
/// least half a lease duration old when the Lease expires. Pinging such a candidate again adds a
/// round trip to every hand-off, and under load an ack that comes late makes the controller elect
/// someone else and pre-empt it again when the ack arrives: a cycle of pre-emptions and
/// step-downs. `grace` (a lease duration) bounds how long the earlier sign of life counts; a
/// candidate that died since holds the Lease until it expires, as any holder that crashes. A
/// crashed holder does not answer its probe, so it is never re-elected this way.
#[must_use]
pub fn known_alive(
    lease: Option<&LeaseRecord>,
    candidates: &[CandidateView],
    winner: &str,
    now: Timestamp,
    grace: Duration,
) -> bool {
    let Some(lease) = lease else {
        return false;
    };
    let Some(candidate) = candidates.iter().find(|c| c.name == winner) else {
        return false;
    };
    let Some(renew) = candidate.renew_time else {
        return false;
    };
    let answered = candidate.ping_time.is_none_or(|ping| renew >= ping);
    let handed_over = lease.handed_over_to() == Some(winner);
    let answered_probe = lease.holder() == Some(winner)
        && lease.is_free(now)
        && lease.renew_time.is_some_and(|held| renew > held);
    (handed_over || answered_probe) && answered && renew + grace > now
}

/// Until when a pre-emption of `lease`'s holder waits for the holder's first renewal: while it
/// has not renewed since it acquired the Lease (`renewTime` not after `acquireTime`), until half
/// the Lease's duration after the acquisition; `None` once it has renewed, or once the wait is
/// over.
///
/// A holder just written (by this controller's take-over, or by its own acquisition) renews
/// within its first retry period (client-go: 2 s). A `preferredHolder` written before that
/// renewal reaches the controller races it and is refused with a conflict, then retried; in a
/// storm of hand-offs, every other pre-emption did. Written right after the renewal has been
/// watched, it has until the next renewal to land. The wait ends at half the duration at the
/// latest, when a holder that has not renewed is overdue and probed anyway
/// ([`holder_overdue_at`]): the pre-emption of a holder that never renews is then up for the
/// second half of its Lease (2.5 s of a 5 s Lease) instead of vanishing in the take-over at
/// expiry. A shorter bound (one ack window) cut the wait short for holders that renew less
/// often than every few seconds, and their pre-emptions raced the renewal again.
#[must_use]
pub fn first_renewal_awaited(lease: &LeaseRecord, now: Timestamp) -> Option<Timestamp> {
    let acquired = lease.acquire_time?;
    let renewed = lease.renew_time?;
    let half_duration = Duration::from_secs(u64::try_from(lease.lease_duration_seconds?).ok()?) / 2;
    let until = acquired + half_duration;
    (renewed <= acquired && until > now).then_some(until)
}

/// How long after a watched renewal whose holder's period is not known yet a pre-emption is
/// still written at once: half of client-go's retry period (2 s), the shortest renewal period in
/// common use.
pub const UNTIMED_RENEWAL_WINDOW: Duration = Duration::from_secs(1);

/// Until when a pre-emption of `lease`'s holder waits for the holder's next renewal: while half
/// its renewal period ([`LeaseRecord::renew_period`]) or more has passed since this controller
/// watched its current renewal arrive, until half a period past the renewal then due; with the
/// period not known yet, while [`UNTIMED_RENEWAL_WINDOW`] or more has passed, until half the
/// Lease's duration after the renewal. `None` early enough in the period, when the renewal was
/// not watched, or once the wait is over.
///
/// A `preferredHolder` written late in the holder's period races its next renewal, which may
/// have landed already without the controller having watched it: the write is refused with a
/// conflict and retried on a fresh read (real kube-apiserver, 5,000 Leases renewed every 10 s: a
/// pre-emption written 10.2 s after the renewal it read). Written in the first half of the
/// period, it has half a period to land. A holder half a period overdue is stalled or gone:
/// waiting longer would not avoid a race, and if it has stopped, its Lease's expiry decides.
///
/// The whole wait is bounded from the first time a step held the pre-emption back
/// ([`LeaseRecord::preemption_held_since`]) by the same span: re-armed at every watched renewal,
/// it was postponed for as long as each reconcile ran more than half a period after the renewal
/// it read (issue 34, finding 8).
#[must_use]
pub fn next_renewal_awaited(lease: &LeaseRecord, now: Timestamp) -> Option<Timestamp> {
    let renewed = lease.observed_renewal?;
    let (window, span) = match lease.renew_period {
        Some(period) => (period / 2, period.saturating_add(period / 2)),
        None => {
            let duration = Duration::from_secs(u64::try_from(lease.lease_duration_seconds?).ok()?);
            (UNTIMED_RENEWAL_WINDOW, duration / 2)
        }
    };
    let mut until = renewed + span;
    if let Some(since) = lease.preemption_held_since {
        until = until.min(since + span);
    }
    (renewed.elapsed_at(now) >= window && until > now).then_some(until)
}

/// The kind of a Lease write, for logs, events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// Create the missing Lease with the winner as holder.
    Create,
    /// Assign a free (released, holderless or expired) Lease to the winner.
    TakeOver,
    /// Ask a live, worse holder to step down by setting `preferredHolder` to the winner.
    Preempt,
    /// Remove a `preferredHolder` that no longer applies (the preferred candidate holds the Lease,
    /// or the holder is the best candidate again).
    ClearPreferred,
}

impl WriteKind {
    /// A short, stable label for metrics and logs.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::TakeOver => "take_over",
            Self::Preempt => "preempt",
            Self::ClearPreferred => "clear_preferred",
        }
    }
}

/// A planned Lease write: its kind and the complete desired record. The writer applies the
/// record's fields to the object it read, with that object's resourceVersion as precondition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWrite {
    /// What the write does.
    pub kind: WriteKind,
    /// The Lease as it should be after the write.
    pub desired: LeaseRecord,
}

/// Everything [`plan_writes`] needs about one election.
#[derive(Debug, Clone, Copy)]
pub struct WriteInput<'a> {
    /// The Lease's namespace (used when it must be created).
    pub namespace: &'a str,
    /// The Lease's name (used when it must be created).
    pub name: &'a str,
    /// The Lease as last read; `None` if it does not exist.
    pub lease: Option<&'a LeaseRecord>,
    /// The best candidate, as named by the strategy.
    pub winner: &'a str,
    /// The strategy the election ran under; written into a Lease that has none.
    pub strategy: &'a str,
    /// The names of all live candidates of the Lease (acked or not), to tell a candidate holder
    /// from a legacy one.
    pub candidates: &'a [&'a str],
    /// The time of the election.
    pub now: Timestamp,
    /// `leaseDurationSeconds` for a Lease Conclave assigns.
    pub lease_duration_seconds: i32,
}

/// What must be written so that `input.winner` leads, or `None` when nothing needs to change.
///
/// - a missing Lease is created for the winner, with the strategy, duration, renew and acquire
///   time and the `elected-by: conclave` annotation;
/// - a free Lease (holder absent or empty, or expired) is taken over; this includes an expired
///   Lease whose holder is the winner, so that the holder sees a fresh record and renews;
/// - a live holder that is the winner keeps the Lease; a stale `preferredHolder` is cleared;
/// - a live holder that is not a candidate (a legacy client) keeps the Lease until it expires;
/// - a live candidate holder that is not the winner is pre-empted through `preferredHolder`.
///
/// Absent and empty holders are the same; no field is assumed present.
#[must_use]
pub fn plan_writes(input: &WriteInput<'_>) -> Option<LeaseWrite> {
    let Some(lease) = input.lease else {
        return Some(LeaseWrite {
            kind: WriteKind::Create,
            desired: LeaseRecord {
                namespace: input.namespace.into(),
                name: input.name.into(),
                holder_identity: Some(input.winner.into()),
                strategy: Some(input.strategy.into()),
                lease_duration_seconds: Some(input.lease_duration_seconds),
                renew_time: Some(input.now),
                acquire_time: Some(input.now),
                lease_transitions: Some(0),
                elected_by_conclave: true,
                ..LeaseRecord::default()
            },
        });
    };
    let mut desired = lease.clone();
    if lease.strategy().is_none() {
        desired.strategy = Some(input.strategy.into());
    }
    let kind = match lease.holder() {
        holder if lease.is_free(input.now) => {
            if holder != Some(input.winner) {
                let transitions = lease.lease_transitions.unwrap_or(0);
                desired.lease_transitions = Some(if holder.is_some() {
                    transitions.saturating_add(1)
                } else {
                    transitions
                });
            }
            desired.holder_identity = Some(input.winner.into());
            desired.preferred_holder = None;
            desired.renew_time = Some(input.now);
            desired.acquire_time = Some(input.now);
            desired.lease_duration_seconds = Some(input.lease_duration_seconds);
            desired.elected_by_conclave = true;
            WriteKind::TakeOver
        }
        Some(holder) if holder == input.winner => {
            lease.preferred()?;
            desired.preferred_holder = None;
            WriteKind::ClearPreferred
        }
        Some(holder) if !input.candidates.contains(&holder) => return None,
        _ if lease.preferred() == Some(input.winner) => return None,
        _ => {
            desired.preferred_holder = Some(input.winner.into());
            WriteKind::Preempt
        }
    };
    Some(LeaseWrite { kind, desired })
}

/// When to look at a Lease again if nothing happens: when its holder becomes overdue
/// ([`holder_overdue_at`]), then the instant after it expires, so that both are acted on without
/// polling. `None` for a missing or free Lease (watch events cover those).
#[must_use]
pub fn recheck_at(lease: Option<&LeaseRecord>, now: Timestamp) -> Option<Timestamp> {
    let lease = lease?;
    if lease.is_free(now) {
        return None;
    }
    if let Some(overdue) = holder_overdue_at(lease).filter(|at| *at > now) {
        return Some(overdue);
    }
    lease.expires_at().map(|at| at + Duration::from_millis(1))
}

/// When the holder of a held Lease counts as overdue: it has not renewed
/// ([`LeaseRecord::renewed_at`]) for half the lease duration. A holder renews every few seconds
/// (client-go: every 2 s of a 15 s Lease), so a live one is never overdue; a crashed one is, early
/// enough that a ping of its LeaseCandidate goes unanswered for a whole ack window before the
/// Lease expires (a second or more before it for Leases of 12 s or longer with the 5 s window; at
/// its expiry for 10 s). The election at expiry then leaves the dead candidate out at once
/// instead of pinging it and waiting out the window (upstream's crash failover: lease duration
/// plus ack window). A live holder whose renewals do not get through (an API server with more
/// writes than it can take) has the rest of the Lease for its answer to arrive, which then counts
/// at the expiry ([`known_alive`]) instead of a ping of every candidate.
///
/// `None` for a Lease without a holder, renewal time or duration.
#[must_use]
pub fn holder_overdue_at(lease: &LeaseRecord) -> Option<Timestamp> {
    lease.holder()?;
    let renew = lease.renewed_at()?;
    let duration = Duration::from_secs(u64::try_from(lease.lease_duration_seconds?).ok()?);
    Some(renew + duration / 2)
}

/// The holder's LeaseCandidate to ping now, before the Lease expires: the Lease is held and not
/// expired, its holder is overdue ([`holder_overdue_at`]), and its candidate (among `candidates`)
/// is neither fresh nor already pinged, and has not renewed since the holder became overdue.
/// `None` otherwise, including for a holder without a candidate.
///
/// One answer is enough: a renewal since the holder became overdue is at most half a lease
/// duration old at the expiry, where it counts ([`known_alive`]). Probing again once the answer
/// is an ack window old doubles the writes of a storm of expiries exactly when the API server has
/// the fewest to spare: there the reconcile the answer triggers waits in the queue, and one that
/// waited longer than the ack window probed again (25 holders in one run on the real
/// kube-apiserver at 10,000 Leases).
#[must_use]
pub fn probe_holder<'a>(
    lease: Option<&LeaseRecord>,
    candidates: &'a [CandidateView],
    now: Timestamp,
    ack_window: Duration,
) -> Option<&'a str> {
    let lease = lease.filter(|lease| !lease.is_free(now))?;
    let overdue = holder_overdue_at(lease)?;
    if overdue > now {
        return None;
    }
    let holder = lease.holder()?;
    candidates
        .iter()
        .find(|c| {
            c.name == holder
                && liveness(c, now, ack_window) == Liveness::Stale
                && c.renew_time.is_none_or(|renew| renew < overdue)
        })
        .map(|c| c.name.as_str())
}

/// Which Leases a controller handles (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every Lease, unless kube-apiserver's built-in controller is active: then only Leases with a
    /// third-party (domain-prefixed) strategy.
    #[default]
    Auto,
    /// Every Lease.
    All,
    /// Only Leases with a third-party strategy.
    ThirdParty,
}

impl Mode {
    /// Whether a Lease running `strategy` is this controller's to elect for, given whether the
    /// built-in controller is active (its own Lease is held and fresh).
    #[must_use]
    pub fn handles(self, strategy: &str, builtin_active: bool) -> bool {
        match self {
            Self::All => true,
            Self::ThirdParty => is_third_party(strategy),
            Self::Auto => !builtin_active || is_third_party(strategy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const WINDOW: Duration = Duration::from_secs(5);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn candidate(name: &str, renew: Option<i64>, ping: Option<i64>) -> CandidateView {
        CandidateView {
            name: name.into(),
            renew_time: renew.map(at),
            ping_time: ping.map(at),
            ..CandidateView::default()
        }
    }

    #[test]
    fn leaderless_rules() {
        const GC: Duration = Duration::from_secs(1800);
        let now = at(10_000);
        let held = |renew: i64| LeaseRecord {
            holder_identity: Some("a".into()),
            renew_time: Some(at(renew)),
            lease_duration_seconds: Some(5),
            ..LeaseRecord::default()
        };
        let released = LeaseRecord {
            holder_identity: Some(String::new()),
            renew_time: Some(at(9_999)),
            lease_duration_seconds: Some(5),
            ..LeaseRecord::default()
        };
        let live = candidate("a", Some(9_000), None);
        let gone = candidate("b", Some(10_000 - 1_801), None);
        let never = candidate("c", None, None);
        let table = [
            (
                "held and renewed",
                Some(held(9_998)),
                vec![live.clone()],
                false,
            ),
            (
                "expired, live candidate",
                Some(held(9_990)),
                vec![live.clone()],
                true,
            ),
            (
                "released, live candidate",
                Some(released.clone()),
                vec![live.clone()],
                true,
            ),
            (
                "missing, live candidate",
                None,
                vec![gone.clone(), live.clone()],
                true,
            ),
            (
                "expired, candidates past GC",
                Some(held(9_990)),
                vec![gone.clone(), never],
                false,
            ),
            ("missing, no candidates", None, vec![], false),
            (
                "released, no candidates",
                Some(released.clone()),
                vec![],
                false,
            ),
        ];
        for (what, lease, candidates, expected) in table {
            assert_eq!(
                leaderless(lease.as_ref(), &candidates, now, GC),
                expected,
                "{what}"
            );
            if expected {
                assert!(without_leader(lease.as_ref(), now), "{what}");
            }
        }
        assert!(!without_leader(Some(&held(9_998)), now), "held and renewed");
        assert!(without_leader(Some(&held(9_990)), now), "expired");
        assert!(without_leader(Some(&released), now), "released");
        assert!(without_leader(None, now), "missing");
    }

    #[test]
    fn liveness_rules() {
        let now = at(100);
        let table = [
            (
                "renewed recently",
                candidate("a", Some(97), None),
                Liveness::Fresh,
            ),
            (
                "acked a ping",
                candidate("a", Some(98), Some(97)),
                Liveness::Fresh,
            ),
            (
                "window edge is stale",
                candidate("a", Some(95), None),
                Liveness::Stale,
            ),
            ("never renewed", candidate("a", None, None), Liveness::Stale),
            (
                "ping outstanding",
                candidate("a", Some(10), Some(98)),
                Liveness::Pending { until: at(103) },
            ),
            (
                "ping without any renewal",
                candidate("a", None, Some(99)),
                Liveness::Pending { until: at(104) },
            ),
            (
                "ping never acked",
                candidate("a", Some(10), Some(95)),
                Liveness::Unresponsive,
            ),
            (
                "old acked ping",
                candidate("a", Some(50), Some(40)),
                Liveness::Stale,
            ),
        ];
        for (case, c, want) in table {
            assert_eq!(liveness(&c, now, WINDOW), want, "{case}");
        }
    }

    /// The instance that released the Lease at 97 (watched at 98) counts as fresh only by a renewal
    /// after 97, and as pinged only by a ping from 98 on; everyone else by the plain rules.
    #[test]
    fn a_releaser_must_show_life_after_its_release() {
        let now = at(100);
        let release = Release {
            by: "leaver",
            at: at(97),
            seen_at: at(98),
        };
        let table = [
            (
                "renewed before its release: ping it",
                candidate("leaver", Some(96), None),
                Liveness::Stale,
            ),
            (
                "renewed at the instant of its release: ping it",
                candidate("leaver", Some(97), None),
                Liveness::Stale,
            ),
            (
                "renewed after its release",
                candidate("leaver", Some(99), None),
                Liveness::Fresh,
            ),
            (
                "pinged before the release was seen: ping it again",
                candidate("leaver", Some(90), Some(96)),
                Liveness::Stale,
            ),
            (
                "pinged since the release",
                candidate("leaver", Some(96), Some(99)),
                Liveness::Pending { until: at(104) },
            ),
            (
                "acked a ping sent since the release",
                candidate("leaver", Some(99), Some(98)),
                Liveness::Fresh,
            ),
            (
                "someone else is judged as always",
                candidate("other", Some(96), None),
                Liveness::Fresh,
            ),
        ];
        for (case, c, want) in table {
            assert_eq!(
                liveness_since(&c, now, WINDOW, Some(release)),
                want,
                "{case}"
            );
        }
        let cands = [
            candidate("leaver", Some(96), None),
            candidate("other", Some(96), None),
        ];
        assert_eq!(
            plan_pings(&cands, "leaver", now, WINDOW, Some(release)),
            PingPlan::Ping {
                candidates: vec!["leaver".into()],
                recheck_at: at(105),
            },
            "the releaser is pinged before it is elected again"
        );
        assert_eq!(
            plan_pings(&cands, "other", now, WINDOW, Some(release)),
            PingPlan::Elect,
            "a fresh successor is elected at once"
        );
    }

    #[test]
    fn a_sign_of_life_since_the_hand_over_or_the_probe_spares_a_ping() {
        const GRACE: Duration = Duration::from_secs(15);
        let now = at(100);
        let lease = |holder: Option<&str>, renew: i64, released_for: Option<&str>| LeaseRecord {
            holder_identity: holder.map(Into::into),
            released_for: released_for.map(Into::into),
            renew_time: Some(at(renew)),
            lease_duration_seconds: Some(10),
            ..LeaseRecord::default()
        };
        let handed_to_y = lease(Some(""), 97, Some("y"));
        let y_expired = lease(Some("y"), 88, None);
        let table = [
            (
                "handed over, acked 8 s ago",
                Some(&handed_to_y),
                "y",
                Some(92),
                None,
                true,
            ),
            (
                "handed over, acked 15 s ago",
                Some(&handed_to_y),
                "y",
                Some(85),
                None,
                false,
            ),
            (
                "handed over, never renewed",
                Some(&handed_to_y),
                "y",
                None,
                None,
                false,
            ),
            (
                "handed over, pinged since",
                Some(&handed_to_y),
                "y",
                Some(92),
                Some(95),
                false,
            ),
            (
                "handed over to y, z won",
                Some(&handed_to_y),
                "z",
                Some(99),
                None,
                false,
            ),
            (
                "released unasked",
                Some(&lease(Some(""), 97, None)),
                "y",
                Some(92),
                None,
                false,
            ),
            (
                "held again",
                Some(&lease(Some("x"), 97, Some("y"))),
                "y",
                Some(92),
                None,
                false,
            ),
            (
                "expired holder answered its probe",
                Some(&y_expired),
                "y",
                Some(94),
                Some(93),
                true,
            ),
            (
                "expired holder's probe outstanding",
                Some(&y_expired),
                "y",
                Some(80),
                Some(93),
                false,
            ),
            (
                "expired holder, candidate renewed before the Lease",
                Some(&y_expired),
                "y",
                Some(87),
                None,
                false,
            ),
            (
                "live holder",
                Some(&lease(Some("y"), 95, None)),
                "y",
                Some(96),
                None,
                false,
            ),
            ("no Lease", None, "y", Some(92), None, false),
        ];
        for (case, lease, winner, renew, ping, want) in table {
            let candidates = [candidate("y", renew, ping), candidate("z", renew, ping)];
            assert_eq!(
                known_alive(lease, &candidates, winner, now, GRACE),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn an_expired_holder_is_left_out_while_a_ping_sent_after_its_last_renewal_is_unanswered() {
        let now = at(100);
        let expired = held(Some("y"), 88, None);
        let table = [
            (
                "probed 3 s ago, no answer",
                &expired,
                Some(80),
                Some(97),
                false,
            ),
            (
                "probed 6 s ago, no answer",
                &expired,
                Some(80),
                Some(94),
                false,
            ),
            ("probe answered", &expired, Some(98), Some(97), true),
            ("never probed", &expired, Some(80), None, true),
            (
                "the Lease is live",
                &held(Some("y"), 97, None),
                Some(80),
                Some(97),
                true,
            ),
        ];
        for (case, lease, renew, ping, kept) in table {
            let candidates = [candidate("y", renew, ping), candidate("z", Some(99), None)];
            let names: Vec<String> = considered(&candidates, Some(lease), now, WINDOW)
                .into_iter()
                .map(|c| c.name)
                .collect();
            assert_eq!(names.iter().any(|n| n == "y"), kept, "{case}");
            assert!(names.iter().any(|n| n == "z"), "{case}: a rival stays");
        }
    }

    #[test]
    fn a_pre_emption_waits_for_the_new_holder_s_first_renewal_at_most_half_its_lease() {
        let lease = |acquired: i64, renewed: i64, seconds: i32| LeaseRecord {
            holder_identity: Some("y".into()),
            acquire_time: Some(at(acquired)),
            renew_time: Some(at(renewed)),
            lease_duration_seconds: Some(seconds),
            ..LeaseRecord::default()
        };
        let now = at(100);
        let table = [
            (
                "acquired 2 s ago, not renewed, 15 s Lease",
                lease(98, 98, 15),
                Some(at(98) + Duration::from_millis(7500)),
            ),
            (
                "acquired 8 s ago, not renewed, 60 s Lease: a holder renewing every 10 s or more",
                lease(92, 92, 60),
                Some(at(122)),
            ),
            (
                "acquired 1 s ago, not renewed, 5 s Lease",
                lease(99, 99, 5),
                Some(at(99) + Duration::from_millis(2500)),
            ),
            (
                "acquired 3 s ago, not renewed, 5 s Lease: the wait is over at half the Lease",
                lease(97, 97, 5),
                None,
            ),
            ("acquired 2 s ago, renewed since", lease(98, 99, 15), None),
            ("acquired long ago, renewed since", lease(10, 99, 15), None),
            ("no acquireTime", LeaseRecord::default(), None),
        ];
        for (case, lease, want) in table {
            assert_eq!(first_renewal_awaited(&lease, now), want, "{case}");
        }
    }

    #[test]
    fn a_pre_emption_is_written_early_in_the_holder_s_renewal_period() {
        let lease = |seen: i64, period_secs: Option<u64>| LeaseRecord {
            holder_identity: Some("y".into()),
            acquire_time: Some(at(10)),
            renew_time: Some(at(seen)),
            observed_renewal: Some(at(seen)),
            renew_period: period_secs.map(Duration::from_secs),
            lease_duration_seconds: Some(30),
            ..LeaseRecord::default()
        };
        let now = at(100);
        let table = [
            (
                "renewed 2 s ago, every 10 s: early",
                lease(98, Some(10)),
                None,
            ),
            (
                "renewed 5 s ago, every 10 s: half the period gone",
                lease(95, Some(10)),
                Some(at(110)),
            ),
            (
                "renewed 10 s ago, every 10 s: the next renewal may have landed unwatched",
                lease(90, Some(10)),
                Some(at(105)),
            ),
            (
                "renewed 15 s ago, every 10 s: half a period overdue, stalled or gone",
                lease(85, Some(10)),
                None,
            ),
            (
                "renewed 0.5 s ago, period unknown: just after the renewal",
                LeaseRecord {
                    observed_renewal: Some(at(100) - Duration::from_millis(500)),
                    ..lease(99, None)
                },
                None,
            ),
            (
                "renewed 9 s ago, period unknown: wait for the next renewal, up to half the Lease",
                lease(91, None),
                Some(at(106)),
            ),
            (
                "renewed 16 s ago, period unknown: more than half the Lease, overdue",
                lease(84, None),
                None,
            ),
            (
                "renewed 2 s ago, every 2 s (client-go's retry period): due now",
                lease(98, Some(2)),
                Some(at(101)),
            ),
        ];
        for (case, lease, want) in table {
            assert_eq!(next_renewal_awaited(&lease, now), want, "{case}");
        }
        let unwatched = LeaseRecord {
            observed_renewal: None,
            ..lease(95, Some(10))
        };
        assert_eq!(
            next_renewal_awaited(&unwatched, now),
            None,
            "a renewal not watched has no period"
        );
    }

    #[test]
    fn a_releaser_without_a_sign_of_life_is_set_aside_while_someone_else_can_lead() {
        let now = at(100);
        let release = Release {
            by: "leaver",
            at: at(97),
            seen_at: at(98),
        };
        let names =
            |pool: &[CandidateView]| pool.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let aside = |leaver: CandidateView, others: &[CandidateView]| {
            let mut pool = vec![leaver];
            pool.extend_from_slice(others);
            let ping = set_aside_releaser(&mut pool, Some(release), now, WINDOW);
            (names(&pool), ping)
        };
        let other = [candidate("other", Some(99), None)];
        assert_eq!(
            aside(candidate("leaver", Some(96), None), &other),
            (vec![String::from("other")], Some(String::from("leaver"))),
            "renewed only before its release: set aside and pinged"
        );
        assert_eq!(
            aside(candidate("leaver", Some(96), Some(99)), &other),
            (vec![String::from("other")], None),
            "pinged since its release, no answer yet: set aside, not pinged twice"
        );
        assert_eq!(
            aside(candidate("leaver", Some(99), None), &other),
            (vec![String::from("leaver"), String::from("other")], None),
            "renewed since its release: it counts"
        );
        assert_eq!(
            aside(candidate("leaver", Some(96), None), &[]),
            (vec![String::from("leaver")], None),
            "alone: kept, for plan_pings to ask"
        );
        let mut pool = vec![candidate("leaver", Some(96), None), other[0].clone()];
        assert_eq!(
            set_aside_releaser(&mut pool, None, now, WINDOW),
            None,
            "no release watched: nothing set aside"
        );
        assert_eq!(pool.len(), 2);
    }

    #[test]
    fn candidate_expiry() {
        let expiry = Duration::from_secs(1800);
        let now = at(10_000);
        assert!(candidate_expired(&candidate("a", None, None), now, expiry));
        assert!(candidate_expired(
            &candidate("a", Some(8_199), None),
            now,
            expiry
        ));
        assert!(!candidate_expired(
            &candidate("a", Some(8_200), None),
            now,
            expiry
        ));
    }

    #[test]
    fn unresponsive_candidates_are_left_out() {
        let cands = [
            candidate("dead", Some(10), Some(90)),
            candidate("live", Some(99), None),
            candidate("pinged", Some(10), Some(98)),
        ];
        let names: Vec<String> = considered(&cands, None, at(100), WINDOW)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, vec!["live", "pinged"]);
    }

    #[test]
    fn an_unresponsive_holder_is_considered_until_its_lease_expires() {
        let cands = [
            candidate("holder", Some(10), Some(90)),
            candidate("live", Some(99), None),
        ];
        let held_until = |expires: i64| LeaseRecord {
            holder_identity: Some("holder".into()),
            renew_time: Some(at(expires - 10)),
            lease_duration_seconds: Some(10),
            ..LeaseRecord::default()
        };
        let table = [
            ("unexpired Lease", held_until(101), vec!["holder", "live"]),
            ("expired Lease", held_until(99), vec!["live"]),
            (
                "released Lease",
                LeaseRecord {
                    holder_identity: Some(String::new()),
                    ..held_until(101)
                },
                vec!["live"],
            ),
        ];
        for (case, lease, want) in table {
            let names: Vec<String> = considered(&cands, Some(&lease), at(100), WINDOW)
                .into_iter()
                .map(|c| c.name)
                .collect();
            assert_eq!(names, want, "{case}");
        }
    }

    #[test]
    fn ping_plans() {
        let now = at(100);
        let table: [(&str, Vec<CandidateView>, &str, PingPlan); 6] = [
            (
                "fresh best is elected without waiting for worse candidates",
                vec![
                    candidate("best", Some(99), None),
                    candidate("worse", Some(1), Some(98)),
                ],
                "best",
                PingPlan::Elect,
            ),
            (
                "stale candidates are pinged together, fresh ones are not",
                vec![
                    candidate("best", Some(1), None),
                    candidate("b", None, None),
                    candidate("fresh", Some(99), None),
                ],
                "best",
                PingPlan::Ping {
                    candidates: vec!["b".into(), "best".into()],
                    recheck_at: at(105),
                },
            ),
            (
                "outstanding ping on the best: wait until its window closes",
                vec![
                    candidate("best", Some(1), Some(98)),
                    candidate("other", Some(99), None),
                ],
                "best",
                PingPlan::Wait {
                    recheck_at: at(103),
                },
            ),
            (
                "outstanding ping on the best and a stale one: ping it too",
                vec![
                    candidate("best", Some(1), Some(98)),
                    candidate("other", Some(1), None),
                ],
                "best",
                PingPlan::Ping {
                    candidates: vec!["other".into()],
                    recheck_at: at(105),
                },
            ),
            (
                "a pending candidate is never pinged twice in its window",
                vec![
                    candidate("best", Some(1), Some(97)),
                    candidate("b", None, Some(99)),
                ],
                "best",
                PingPlan::Wait {
                    recheck_at: at(102),
                },
            ),
            (
                "unknown best is not fresh",
                vec![candidate("a", Some(99), None)],
                "ghost",
                PingPlan::Wait {
                    recheck_at: at(105),
                },
            ),
        ];
        for (case, cands, best, want) in table {
            assert_eq!(plan_pings(&cands, best, now, WINDOW, None), want, "{case}");
        }
    }

    fn held(holder: Option<&str>, renew: i64, preferred: Option<&str>) -> LeaseRecord {
        LeaseRecord {
            namespace: "ns".into(),
            name: "l".into(),
            resource_version: "7".into(),
            holder_identity: holder.map(Into::into),
            preferred_holder: preferred.map(Into::into),
            strategy: Some("S".into()),
            lease_duration_seconds: Some(10),
            renew_time: Some(at(renew)),
            acquire_time: Some(at(renew)),
            lease_transitions: Some(3),
            elected_by_conclave: false,
            observed_renewal: None,
            renew_period: None,
            released_by: None,
            released_for: None,
            preemption_held_since: None,
            sitting_out: Vec::new(),
            holder_dead: false,
        }
    }

    fn plan(lease: Option<&LeaseRecord>, winner: &str) -> Option<LeaseWrite> {
        plan_writes(&WriteInput {
            namespace: "ns",
            name: "l",
            lease,
            winner,
            strategy: "S",
            candidates: &["a", "b"],
            now: at(100),
            lease_duration_seconds: 15,
        })
    }

    #[test]
    fn missing_lease_is_created_for_the_winner() {
        let write = plan(None, "a").expect("a write");
        assert_eq!(write.kind, WriteKind::Create);
        let d = write.desired;
        assert_eq!((d.namespace.as_str(), d.name.as_str()), ("ns", "l"));
        assert_eq!(d.holder(), Some("a"));
        assert_eq!(d.strategy(), Some("S"));
        assert_eq!(d.lease_duration_seconds, Some(15));
        assert_eq!(
            (d.renew_time, d.acquire_time),
            (Some(at(100)), Some(at(100)))
        );
        assert!(d.elected_by_conclave);
    }

    #[test]
    fn free_leases_are_taken_over() {
        let table = [
            ("released (empty)", held(Some(""), 99, None), 3),
            ("holder absent", held(None, 99, None), 3),
            ("expired other holder", held(Some("b"), 80, Some("a")), 4),
            ("expired legacy holder", held(Some("legacy"), 80, None), 4),
            (
                "expired winner refreshes its record",
                held(Some("a"), 80, None),
                3,
            ),
        ];
        for (case, lease, transitions) in table {
            let write = plan(Some(&lease), "a").expect(case);
            assert_eq!(write.kind, WriteKind::TakeOver, "{case}");
            let d = write.desired;
            assert_eq!(d.holder(), Some("a"), "{case}");
            assert_eq!(d.preferred(), None, "{case}");
            assert_eq!(d.renew_time, Some(at(100)), "{case}");
            assert_eq!(d.lease_duration_seconds, Some(15), "{case}");
            assert_eq!(d.lease_transitions, Some(transitions), "{case}");
            assert_eq!(d.resource_version, "7", "{case}: precondition kept");
            assert!(d.elected_by_conclave, "{case}");
        }
    }

    /// A case name, the Lease, and the expected write kind with the resulting preferredHolder.
    type LiveCase<'a> = (&'a str, LeaseRecord, Option<(WriteKind, Option<&'a str>)>);

    #[test]
    fn live_holders() {
        let table: [LiveCase<'_>; 6] = [
            ("winner holds: nothing", held(Some("a"), 99, None), None),
            (
                "preferred candidate now holds: clear",
                held(Some("a"), 99, Some("a")),
                Some((WriteKind::ClearPreferred, None)),
            ),
            (
                "stale preference for another: clear",
                held(Some("a"), 99, Some("b")),
                Some((WriteKind::ClearPreferred, None)),
            ),
            (
                "worse candidate holds: pre-empt",
                held(Some("b"), 99, None),
                Some((WriteKind::Preempt, Some("a"))),
            ),
            (
                "already pre-empted: nothing",
                held(Some("b"), 99, Some("a")),
                None,
            ),
            (
                "legacy holder keeps it until expiry",
                held(Some("legacy"), 99, None),
                None,
            ),
        ];
        for (case, lease, want) in table {
            let got = plan(Some(&lease), "a");
            let got = got.map(|w| {
                assert_eq!(
                    w.desired.holder(),
                    lease.holder(),
                    "{case}: holder unchanged"
                );
                (w.kind, w.desired.preferred().map(String::from))
            });
            let want = want.map(|(kind, p)| (kind, p.map(String::from)));
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn missing_strategy_is_written_with_a_preemption() {
        let mut lease = held(Some("b"), 99, None);
        lease.strategy = Some(String::new());
        let write = plan(Some(&lease), "a").expect("pre-empt");
        assert_eq!(write.desired.strategy(), Some("S"));
        let mut own = held(Some("b"), 99, None);
        own.strategy = Some("example.com/x".into());
        let write = plan(Some(&own), "a").expect("pre-empt");
        assert_eq!(
            write.desired.strategy(),
            Some("example.com/x"),
            "a Lease's own strategy is kept"
        );
    }

    #[test]
    fn recheck_when_the_holder_becomes_overdue_then_when_the_lease_expires() {
        // Held for 10 s from 95: overdue at half of it, 100; expired after 105.
        let lease = held(Some("a"), 95, None);
        assert_eq!(recheck_at(Some(&lease), at(99)), Some(at(100)));
        assert_eq!(
            recheck_at(Some(&lease), at(100)),
            Some(at(105) + Duration::from_millis(1))
        );
        // Held for 60 s: overdue after 30, with 25 s left for a late answer to arrive.
        let long = LeaseRecord {
            lease_duration_seconds: Some(60),
            ..held(Some("a"), 95, None)
        };
        assert_eq!(recheck_at(Some(&long), at(100)), Some(at(125)));
        assert_eq!(recheck_at(Some(&held(Some(""), 99, None)), at(100)), None);
        assert_eq!(recheck_at(None, at(100)), None);
    }

    #[test]
    fn an_overdue_holder_is_pinged_once_before_its_lease_expires() {
        let lease = held(Some("a"), 95, None);
        let window = Duration::from_secs(2);
        let stale = [
            candidate("a", Some(40), None),
            candidate("b", Some(40), None),
        ];
        assert_eq!(
            probe_holder(Some(&lease), &stale, at(99), window),
            None,
            "not overdue yet"
        );
        assert_eq!(
            probe_holder(Some(&lease), &stale, at(100), window),
            Some("a"),
            "overdue after half the lease duration: only the holder is pinged"
        );
        let pinged = [candidate("a", Some(40), Some(100))];
        assert_eq!(probe_holder(Some(&lease), &pinged, at(103), window), None);
        let fresh = [candidate("a", Some(102), None)];
        assert_eq!(probe_holder(Some(&lease), &fresh, at(103), window), None);
        let answered = [candidate("a", Some(101), Some(100))];
        assert_eq!(
            probe_holder(Some(&lease), &answered, at(104), window),
            None,
            "answered, no longer fresh: the answer counts at the expiry, no second probe"
        );
        let renewed_before_overdue = [candidate("a", Some(99), None)];
        assert_eq!(
            probe_holder(Some(&lease), &renewed_before_overdue, at(102), window),
            Some("a"),
            "a renewal from before the holder became overdue does not count"
        );
        assert_eq!(
            probe_holder(Some(&lease), &stale, at(106), window),
            None,
            "expired: the election itself pings"
        );
        let other = held(Some("c"), 95, None);
        assert_eq!(
            probe_holder(Some(&other), &stale, at(103), window),
            None,
            "a holder without a LeaseCandidate"
        );
    }

    #[test]
    fn modes() {
        let oev = crate::strategy::OLDEST_EMULATION_VERSION;
        let tp = "conclave.dev/priority";
        let table = [
            (Mode::All, true, oev, true),
            (Mode::All, true, tp, true),
            (Mode::ThirdParty, false, oev, false),
            (Mode::ThirdParty, false, tp, true),
            (Mode::Auto, true, oev, false),
            (Mode::Auto, true, tp, true),
            (Mode::Auto, false, oev, true),
        ];
        for (mode, builtin, strategy, want) in table {
            assert_eq!(
                mode.handles(strategy, builtin),
                want,
                "{mode:?} {builtin} {strategy}"
            );
        }
    }
}
