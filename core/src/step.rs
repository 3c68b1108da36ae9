//! One election step for one Lease, as a pure function: a Lease snapshot, candidate snapshots
//! and `now` in, the writes to make out.
//!
//! A step has two phases because the strategy plugin runs in between (in a sandbox, on a
//! blocking thread, possibly failing), and that call is the caller's business:
//!
//! 1. [`plan_step`] decides everything that does not need the strategy: which candidates count,
//!    which strategy runs, whether this controller handles it, whether an election can run at all.
//!    It answers [`Plan::Skip`] (nothing to write, and why) or [`Plan::Decide`] with an
//!    [`Election`] whose [`request`](Election::request) the caller hands to the strategy.
//! 2. [`Election::apply_answer`] turns the strategy's answer into an [`Outcome`]: the Lease write
//!    to make, the candidates to ping first, or nothing.
//!
//! The order of the checks is part of the behaviour: a strategy conflict blocks a Lease before the
//! mode is looked at, the mode before the plugin, and pings are sent only when a write would be
//! needed, so an up-to-date Lease never costs a ping.

use crate::lease::{LeaseRecord, SitOut};
use crate::plan::{
    LeaseWrite, Mode, PingPlan, WriteInput, WriteKind, candidate_expired, considered,
    first_renewal_awaited, known_alive, next_renewal_awaited, plan_pings, plan_writes,
    probe_holder, recheck_at, set_aside_never_renewed, set_aside_releaser,
};
use crate::request::{CandidateView, ElectionRequest, LeaseView};
use crate::strategy::{StrategyChoice, StrategyConflict, StrategyVote, resolve_strategy};
use crate::time::Timestamp;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

/// The controller's settings that a step depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepConfig {
    /// A candidate is fresh if it renewed within this window; pings wait this long for an ack.
    pub ack_window: Duration,
    /// Candidates not renewed for this long take no part (they are garbage-collected).
    pub candidate_gc_after: Duration,
    /// `leaseDurationSeconds` written when a holder is assigned.
    pub lease_duration_seconds: i32,
    /// Which Leases this controller handles.
    pub mode: Mode,
    /// How the first election of a missing Lease waits for its batch of candidates.
    pub settle: Settle,
}

/// How the first election of a Lease that does not exist yet waits for candidates registered in
/// one batch (replicas of a Deployment starting together, or objects created in one go), which
/// arrive a few milliseconds apart: electing the first to arrive would start a term only to
/// pre-empt it a moment later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// How long to wait after each arrival for the next one; a lone candidate is elected this
    /// much later than at once. Zero elects at once.
    pub gap: Duration,
    /// The longest wait, counted from the first arrival, however many keep arriving.
    pub max: Duration,
}

impl Settle {
    /// 30 ms after each arrival, at most 200 ms.
    pub const DEFAULT: Self = Self {
        gap: Duration::from_millis(30),
        max: Duration::from_millis(200),
    };

    /// `gap` after each arrival, at most the longer of 200 ms and four gaps.
    #[must_use]
    pub fn after_gap(gap: Duration) -> Self {
        Self {
            gap,
            max: Self::DEFAULT.max.max(gap * 4),
        }
    }
}

impl Default for Settle {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// When the first and the last of a Lease's candidates were seen arriving, by the controller's
/// clock (candidates it found already there when it started are not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrivals {
    /// The first arrival.
    pub first: Timestamp,
    /// The last arrival.
    pub last: Timestamp,
}

/// Everything one step reads: snapshots and the time, no I/O.
#[derive(Clone, Copy)]
pub struct StepInput<'a> {
    /// The Lease's namespace.
    pub namespace: &'a str,
    /// The Lease's name.
    pub name: &'a str,
    /// The Lease as last read; `None` if it does not exist.
    pub lease: Option<&'a LeaseRecord>,
    /// The Lease's valid candidates, in any order (those not renewed for
    /// [`StepConfig::candidate_gc_after`] are left out here).
    pub candidates: &'a [CandidateView],
    /// The time of the step.
    pub now: Timestamp,
    /// The controller's settings.
    pub config: StepConfig,
    /// Whether kube-apiserver's built-in controller is active (for [`Mode::Auto`]).
    pub builtin_active: bool,
    /// The strategies a loaded plugin implements.
    pub has_strategy: &'a dyn Fn(&str) -> bool,
    /// When the candidates were seen arriving (`None`: not known, as for a prediction).
    pub arrivals: Option<Arrivals>,
    /// For a missing Lease that was deleted while held: until when its last holder may still
    /// lead by its own reckoning (its last renewal as the controller saw it, plus its duration).
    /// `None`: not deleted while held, or not known.
    pub deleted_while_held_until: Option<Timestamp>,
    /// For a missing Lease: the candidates that sit out its elections, as the caller recorded
    /// them for the Lease's key ([`crate::plan::never_renewed_holder`]). A sit-out outlives the
    /// Lease it was recorded in, so the step that creates the Lease again does not elect a
    /// candidate that the next step would pre-empt because it sits out. Ignored when the Lease
    /// exists: its record carries them ([`LeaseRecord::sitting_out`]).
    pub sitting_out: &'a [SitOut],
}

impl StepInput<'_> {
    /// The candidates that sit out the Lease's elections: its record's
    /// ([`LeaseRecord::sitting_out`]), or for a missing Lease [`StepInput::sitting_out`].
    #[must_use]
    pub fn sit_outs(&self) -> &[SitOut] {
        self.lease
            .map_or(self.sitting_out, |lease| lease.sitting_out.as_slice())
    }
}

impl core::fmt::Debug for StepInput<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StepInput")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("candidates", &self.candidates)
            .field("now", &self.now)
            .field("config", &self.config)
            .field("builtin_active", &self.builtin_active)
            .field("arrivals", &self.arrivals)
            .field("deleted_while_held_until", &self.deleted_while_held_until)
            .field("sitting_out", &self.sitting_out)
            .finish_non_exhaustive()
    }
}

/// The first phase of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No election runs now and nothing is written.
    Skip(Skip),
    /// Ask the strategy, then call [`Election::apply_answer`] (boxed: it carries the request).
    Decide(Box<Election>),
}

/// Why a step writes nothing without asking the strategy, and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// Why.
    pub reason: SkipReason,
    /// When to look again if nothing happens before (the Lease's expiry); `None`: wait for an
    /// event.
    pub recheck_at: Option<Timestamp>,
}

/// Why a step writes nothing without asking the strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The Lease has no live candidates: it is not under coordinated election (upstream leaves
    /// such a Lease alone).
    NoCandidates,
    /// The Lease names no strategy and the candidates at the highest binary version disagree; the
    /// election is blocked until they agree (a `StrategyConflict` Event).
    Conflict(StrategyConflict),
    /// The strategy is left to kube-apiserver's built-in controller (`--mode`).
    NotHandled {
        /// The strategy.
        strategy: String,
    },
    /// No loaded plugin implements the strategy (an `UnknownStrategy` Event).
    UnknownStrategy {
        /// The strategy.
        strategy: String,
    },
    /// The Lease does not exist yet and its candidates are still arriving: the first election
    /// waits for the batch ([`Settle`]) so that its first holder is
    /// the best of the batch, not the first to arrive.
    Settling {
        /// The strategy.
        strategy: String,
    },
    /// Every candidate was pinged and never acked; wait for one to renew.
    AllUnresponsive {
        /// The strategy.
        strategy: String,
    },
    /// The Lease was deleted while held, and its holder may still lead until the recheck time (it
    /// has not seen the deletion yet, or is stopping its work): creating it for someone else now
    /// would make a second leader.
    DeletedWhileHeld {
        /// The strategy.
        strategy: String,
    },
}

impl SkipReason {
    /// Whether the Lease counts as managed by this controller after the step; `None` leaves the
    /// previous answer (a conflict is decided before the mode, so it says nothing about it).
    #[must_use]
    pub const fn managed(&self) -> Option<bool> {
        match self {
            Self::NoCandidates | Self::NotHandled { .. } => Some(false),
            Self::Conflict(_) => None,
            Self::UnknownStrategy { .. }
            | Self::AllUnresponsive { .. }
            | Self::Settling { .. }
            | Self::DeletedWhileHeld { .. } => Some(true),
        }
    }
}

/// An election waiting for the strategy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    strategy: String,
    request: ElectionRequest,
    lease: Option<LeaseRecord>,
    candidate_names: Vec<String>,
    ack_window: Duration,
    lease_duration_seconds: i32,
    releaser_to_ping: Option<String>,
    sit_out: Option<String>,
}

/// The second phase of a step: what the strategy's answer means for the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The strategy elected nobody; nothing is written.
    NoWinner {
        /// When to look again if nothing happens before; `None`: wait for an event.
        recheck_at: Option<Timestamp>,
    },
    /// The Lease already is as the winner needs it; nothing is written, and no election pings
    /// are sent.
    Unchanged {
        /// The best candidate.
        winner: String,
        /// When to look again if nothing happens before; `None`: wait for an event.
        recheck_at: Option<Timestamp>,
        /// The holder has missed its renewals: ping its LeaseCandidate now
        /// ([`crate::plan::probe_holder`]), so that by the time the Lease expires it is known
        /// whether it lives, and the next leader is written at expiry, not an ack window later.
        probe: Option<String>,
    },
    /// A write is needed but the winner is not fresh: ping these candidates (concurrently, each
    /// with its resourceVersion) and look again at `recheck_at`, or sooner on an ack.
    Ping {
        /// The best candidate.
        winner: String,
        /// The candidates to ping, sorted: every one that is not fresh and has no ping
        /// outstanding.
        candidates: Vec<String>,
        /// When the pings' window closes.
        recheck_at: Timestamp,
    },
    /// A write is needed but the winner's ping is outstanding: look again at `recheck_at`, or
    /// sooner on the ack.
    Wait {
        /// The best candidate.
        winner: String,
        /// When the winner's ping window closes.
        recheck_at: Timestamp,
    },
    /// A pre-emption is held back because the holder has not renewed since it acquired the Lease
    /// ([`crate::plan::first_renewal_awaited`]) or is due to renew
    /// ([`crate::plan::next_renewal_awaited`]): look again at `recheck_at`, or sooner on the
    /// renewal. The caller records when it first held the pre-emption back
    /// ([`LeaseRecord::preemption_held_since`]), which bounds the whole wait.
    AwaitRenewal {
        /// The best candidate.
        winner: String,
        /// When the wait ends at the latest.
        recheck_at: Timestamp,
    },
    /// Write the Lease (with the resourceVersion it was read at).
    Write {
        /// The best candidate.
        winner: String,
        /// The write.
        write: Box<LeaseWrite>,
        /// The instance that released the Lease, set aside because it showed no life since
        /// ([`set_aside_releaser`]): ping it along with the write, so that a live one comes back.
        also_ping: Option<String>,
        /// The holder that let the Lease expire without ever renewing it, left out of this
        /// election ([`set_aside_never_renewed`]): the caller records that it sits out the
        /// Lease's elections from now on.
        sit_out: Option<String>,
    },
}

impl Outcome {
    /// Whether the Lease is settled: it already is as the winner needs it and its holder needs no
    /// probe, so the step wrote, pinged and recorded nothing, and only its timer matters. Until
    /// [`settled_until`], a renewal of the same holder that changes nothing else of the Lease
    /// would be decided the same way by a strategy whose answer does not depend on the request's
    /// `now`.
    #[must_use]
    pub const fn settles(&self) -> bool {
        matches!(self, Self::Unchanged { probe: None, .. })
    }

    /// Whether the election goes on in a later step of the same Lease (pings outstanding), as
    /// opposed to being over (written, or nothing to write).
    #[must_use]
    pub const fn in_progress(&self) -> bool {
        matches!(
            self,
            Self::Ping { .. } | Self::Wait { .. } | Self::AwaitRenewal { .. }
        )
    }
}

/// The first phase of a step: everything decided before the strategy is asked.
///
/// In order:
/// - candidates not renewed for the GC period are left out; none left: [`SkipReason::NoCandidates`];
/// - the strategy is the Lease's own if set, else the candidates' ([`resolve_strategy`]); a tie
///   with different strategies: [`SkipReason::Conflict`];
/// - a strategy the mode leaves to the built-in controller: [`SkipReason::NotHandled`];
/// - a strategy no plugin implements: [`SkipReason::UnknownStrategy`];
/// - a missing Lease deleted while held, whose holder may still lead:
///   [`SkipReason::DeletedWhileHeld`] until it may not;
/// - candidates pinged and never acked are left out, but for the holder of an unexpired Lease
///   ([`considered`]), and so is the instance that
///   released the Lease while it shows no life since and someone else can lead
///   ([`set_aside_releaser`]), and, while someone else can lead, the candidates that sit out the
///   Lease's elections and its holder if it never renewed it ([`set_aside_never_renewed`]); none
///   left: [`SkipReason::AllUnresponsive`];
/// - otherwise the strategy is asked to choose among the rest.
///
/// The result does not depend on the order of `input.candidates`.
#[must_use]
pub fn plan_step(input: &StepInput<'_>) -> Plan {
    let config = input.config;
    let now = input.now;
    let mut candidates: Vec<CandidateView> = input
        .candidates
        .iter()
        .filter(|c| !candidate_expired(c, now, config.candidate_gc_after))
        .cloned()
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let skip =
        |reason: SkipReason, recheck_at: Option<Timestamp>| Plan::Skip(Skip { reason, recheck_at });
    if candidates.is_empty() {
        return skip(SkipReason::NoCandidates, None);
    }
    let votes: Vec<StrategyVote<'_>> = candidates
        .iter()
        .map(|c| StrategyVote {
            candidate: &c.name,
            strategy: &c.strategy,
            binary_version: &c.binary_version,
        })
        .collect();
    let strategy = match resolve_strategy(input.lease.and_then(LeaseRecord::strategy), &votes) {
        StrategyChoice::FromLease(s) | StrategyChoice::FromCandidates(s) => s,
        StrategyChoice::Conflict(conflict) => return skip(SkipReason::Conflict(conflict), None),
        StrategyChoice::NoCandidates => return skip(SkipReason::NoCandidates, None),
    };
    if !config.mode.handles(&strategy, input.builtin_active) {
        return skip(SkipReason::NotHandled { strategy }, None);
    }
    if !(input.has_strategy)(&strategy) {
        return skip(SkipReason::UnknownStrategy { strategy }, None);
    }
    if let Some(until) = input
        .deleted_while_held_until
        .filter(|until| input.lease.is_none() && *until > now)
    {
        return skip(SkipReason::DeletedWhileHeld { strategy }, Some(until));
    }
    if let Some(settled) =
        settles_at(input.lease, input.arrivals, config.settle).filter(|at| *at > now)
    {
        return skip(SkipReason::Settling { strategy }, Some(settled));
    }
    let mut pool = considered(&candidates, input.lease, now, config.ack_window);
    let releaser_to_ping = set_aside_releaser(
        &mut pool,
        input.lease.and_then(LeaseRecord::released),
        now,
        config.ack_window,
    );
    let sit_out = set_aside_never_renewed(&mut pool, input.lease, input.sit_outs(), now);
    if pool.is_empty() {
        return skip(
            SkipReason::AllUnresponsive { strategy },
            recheck_at(input.lease, now),
        );
    }
    let lease = input.lease;
    let request = ElectionRequest {
        lease: LeaseView {
            namespace: input.namespace.into(),
            name: input.name.into(),
            holder: lease.and_then(LeaseRecord::holder).map(Into::into),
            preferred_holder: lease.and_then(LeaseRecord::preferred).map(Into::into),
            strategy: strategy.clone(),
            expired: lease.is_none_or(|l| l.is_expired(now)),
        },
        now,
        settings: String::new(),
        candidates: pool,
    };
    Plan::Decide(Box::new(Election {
        strategy,
        request,
        lease: lease.cloned(),
        candidate_names: candidates.into_iter().map(|c| c.name).collect(),
        ack_window: config.ack_window,
        lease_duration_seconds: config.lease_duration_seconds,
        releaser_to_ping,
        sit_out,
    }))
}

/// When the first election of a missing Lease may run: `settle.gap` after the last arrival of a
/// candidate, and no later than `settle.max` after the first. `None` once the Lease exists
/// (a holder is then replaced through pre-emption, and failovers must not wait) or when no
/// arrival was seen.
#[must_use]
pub fn settles_at(
    lease: Option<&LeaseRecord>,
    arrivals: Option<Arrivals>,
    settle: Settle,
) -> Option<Timestamp> {
    if lease.is_some() {
        return None;
    }
    let arrivals = arrivals?;
    Some((arrivals.last + settle.gap).min(arrivals.first + settle.max))
}

/// Until when a step that found the Lease settled ([`Outcome::settles`]) would find it so again
/// if nothing but its holder's renewals and the clock moved: the earliest moment after `now` at
/// which the clock alone changes who [`plan_step`] puts before the strategy. That is when a
/// candidate stops taking part for not renewing ([`crate::plan::candidate_expires_at`]), when the
/// window of a ping closes (a candidate fresh from an earlier renewal, or pending, then counts as
/// unresponsive, [`crate::plan::liveness`]) and when a candidate's sit-out ends
/// ([`StepInput::sit_outs`]). `None`: no such moment, the clock alone changes nothing.
///
/// A renewal of the same holder before then, that changes nothing else of the Lease, changes
/// nothing a decision reads but the renewal time, which only pushes the Lease's expiry and its
/// holder's overdue time later ([`recheck_at`]): the controller skips the step it would run for
/// it, and only re-arms the Lease's timer (issue 31).
#[must_use]
pub fn settled_until(input: &StepInput<'_>) -> Option<Timestamp> {
    let now = input.now;
    let window = input.config.ack_window;
    // A ping's window closes at the same time whether the candidate is still fresh from an
    // earlier renewal or already waiting for its answer: fresh, then pending, then unresponsive.
    let candidates = input.candidates.iter().flat_map(|c| {
        [
            crate::plan::candidate_expires_at(c, input.config.candidate_gc_after),
            c.ping_time.map(|ping| ping + window),
        ]
    });
    let sit_outs = input.sit_outs().iter().map(|s| Some(s.until));
    candidates
        .chain(sit_outs)
        .flatten()
        .filter(|at| *at >= now)
        .min()
}

/// How long a pre-empted holder may take to stop its work before it releases the Lease: the
/// drain timeout of `conclave-candidate` (`DEFAULT_DRAIN_TIMEOUT`, 10 s), which renews the Lease
/// while it drains.
pub const DRAIN_BOUND: Duration = Duration::from_secs(10);

/// How old a sign of life may be for [`known_alive`] to count it when `lease` is taken over:
/// the Lease's own `leaseDurationSeconds` (the answer to a probe sent at half of it is at most
/// that old at expiry), or `written_seconds` (what this controller writes) when the Lease has
/// none; for a hand-off to the candidate a pre-emption named, at least [`DRAIN_BOUND`] plus one
/// ack window (it was fresh within one window when the pre-emption was written, and the holder
/// drains up to the bound before it releases).
///
/// The controller's own duration (5 s by default) made the answer of a holder of a 15 s Lease
/// (kube-scheduler's, the candidate library's default) too old at its expiry: it was probed a
/// second time, with every stale rival (issue 34, finding 4).
#[must_use]
pub fn alive_grace(lease: &LeaseRecord, written_seconds: i32, ack_window: Duration) -> Duration {
    let seconds = lease
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .unwrap_or(written_seconds);
    let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or_default());
    if lease.handed_over_to().is_some() {
        duration.max(DRAIN_BOUND.saturating_add(ack_window))
    } else {
        duration
    }
}

impl Election {
    /// The strategy to ask.
    #[must_use]
    pub fn strategy(&self) -> &str {
        &self.strategy
    }

    /// What to ask it: the Lease and the candidates it may choose from (all but the unresponsive
    /// ones).
    #[must_use]
    pub const fn request(&self) -> &ElectionRequest {
        &self.request
    }

    /// The Lease as it was read for this step.
    #[must_use]
    pub const fn lease(&self) -> Option<&LeaseRecord> {
        self.lease.as_ref()
    }

    /// The second phase of a step: what the strategy's answer (`None`: nobody should lead) means
    /// for the Lease.
    ///
    /// No write needed: [`Outcome::Unchanged`], and no pings. A write needed and the winner fresh,
    /// or alive by a sign this controller already has (the candidate a pre-empted holder released
    /// the Lease for, an expired holder that answered its probe; [`known_alive`]):
    /// [`Outcome::Write`] at once, without waiting for worse candidates ([`alive_grace`] bounds
    /// how old that sign may be). A pre-emption of a holder that has not renewed since it acquired the
    /// Lease, or that is due to renew: [`Outcome::AwaitRenewal`] for that renewal
    /// ([`first_renewal_awaited`], [`next_renewal_awaited`]). Otherwise ping every
    /// candidate that is not fresh ([`Outcome::Ping`]) or wait for the winner's outstanding ping
    /// ([`Outcome::Wait`]).
    #[must_use]
    pub fn apply_answer(&self, answer: Option<&str>) -> Outcome {
        let now = self.request.now;
        let lease = self.lease.as_ref();
        let Some(winner) = answer else {
            return Outcome::NoWinner {
                recheck_at: recheck_at(lease, now),
            };
        };
        let names: Vec<&str> = self.candidate_names.iter().map(String::as_str).collect();
        let Some(write) = plan_writes(&WriteInput {
            namespace: &self.request.lease.namespace,
            name: &self.request.lease.name,
            lease,
            winner,
            strategy: &self.strategy,
            candidates: &names,
            now,
            lease_duration_seconds: self.lease_duration_seconds,
        }) else {
            return Outcome::Unchanged {
                winner: winner.into(),
                recheck_at: recheck_at(lease, now),
                probe: probe_holder(lease, &self.request.candidates, now, self.ack_window)
                    .map(Into::into),
            };
        };
        if write.kind == WriteKind::Preempt
            && let Some(recheck_at) = lease.and_then(|lease| {
                first_renewal_awaited(lease, now).or_else(|| next_renewal_awaited(lease, now))
            })
        {
            return Outcome::AwaitRenewal {
                winner: winner.into(),
                recheck_at,
            };
        }
        let pings = if write.kind == WriteKind::TakeOver
            && lease.is_some_and(|lease| {
                let grace = alive_grace(lease, self.lease_duration_seconds, self.ack_window);
                known_alive(Some(lease), &self.request.candidates, winner, now, grace)
            }) {
            PingPlan::Elect
        } else {
            plan_pings(
                &self.request.candidates,
                winner,
                now,
                self.ack_window,
                lease.and_then(LeaseRecord::released),
            )
        };
        match pings {
            PingPlan::Elect => Outcome::Write {
                winner: winner.into(),
                write: Box::new(write),
                also_ping: self.releaser_to_ping.clone(),
                sit_out: self.sit_out.clone().filter(|holder| holder != winner),
            },
            PingPlan::Ping {
                mut candidates,
                recheck_at,
            } => {
                candidates.extend(self.releaser_to_ping.iter().cloned());
                candidates.sort();
                Outcome::Ping {
                    winner: winner.into(),
                    candidates,
                    recheck_at,
                }
            }
            PingPlan::Wait { recheck_at } => Outcome::Wait {
                winner: winner.into(),
                recheck_at,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::OLDEST_EMULATION_VERSION as OEV;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;

    const NOW: i64 = 1_000;
    const TP: &str = "example.com/x";

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn config(mode: Mode) -> StepConfig {
        StepConfig {
            ack_window: Duration::from_secs(5),
            candidate_gc_after: Duration::from_secs(1800),
            lease_duration_seconds: 15,
            mode,
            settle: Settle::DEFAULT,
        }
    }

    /// A candidate announcing `strategy` at binary version 1.31.0, renewed at `renew` and pinged at
    /// `ping` (seconds).
    fn cand(name: &str, strategy: &str, renew: Option<i64>, ping: Option<i64>) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: "1.31.0".into(),
            strategy: strategy.into(),
            renew_time: renew.map(at),
            ping_time: ping.map(at),
            ..CandidateView::default()
        }
    }

    /// Renewed a second ago: fresh.
    fn fresh(name: &str) -> CandidateView {
        cand(name, OEV, Some(NOW - 1), None)
    }

    /// Renewed a minute ago, never pinged: must be pinged before it counts.
    fn stale(name: &str) -> CandidateView {
        cand(name, OEV, Some(NOW - 60), None)
    }

    /// A Lease held by `holder` (`Some("")`: released), renewed at `renew`, lasting 10 s.
    fn lease(holder: Option<&str>, renew: i64, preferred: Option<&str>) -> LeaseRecord {
        LeaseRecord {
            namespace: "ns".into(),
            name: "l".into(),
            resource_version: "7".into(),
            holder_identity: holder.map(Into::into),
            preferred_holder: preferred.map(Into::into),
            strategy: None,
            lease_duration_seconds: Some(10),
            renew_time: Some(at(renew)),
            acquire_time: Some(at(renew - 60)),
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

    /// `released`, as this controller watched `by` release it (at its `renewTime`).
    fn released_by(released: &LeaseRecord, by: &str) -> LeaseRecord {
        LeaseRecord {
            released_by: Some(by.into()),
            observed_renewal: released.renew_time,
            ..released.clone()
        }
    }

    fn input<'a>(
        lease: Option<&'a LeaseRecord>,
        candidates: &'a [CandidateView],
        mode: Mode,
        builtin_active: bool,
    ) -> StepInput<'a> {
        StepInput {
            namespace: "ns",
            name: "l",
            lease,
            candidates,
            now: at(NOW),
            config: config(mode),
            builtin_active,
            has_strategy: &|s: &str| s == OEV || s == TP,
            arrivals: None,
            deleted_while_held_until: None,
            sitting_out: &[],
        }
    }

    /// Issue 31: a settled step holds until the clock alone changes who is put before the
    /// strategy: a candidate's garbage-collection age, a ping's window, a sit-out's end.
    #[test]
    fn settled_until_is_when_the_clock_alone_changes_the_pool() {
        let held = lease(Some("a"), NOW - 1, None);
        let until = |lease: &LeaseRecord, candidates: &[CandidateView]| {
            settled_until(&input(Some(lease), candidates, Mode::All, false))
        };
        let quiet = [fresh("a"), cand("b", OEV, Some(NOW - 100), None)];
        assert_eq!(
            until(&held, &quiet),
            Some(at(NOW - 100 + 1800)),
            "b stops taking part"
        );
        let pinged = [fresh("a"), cand("b", OEV, Some(NOW - 100), Some(NOW - 2))];
        assert_eq!(
            until(&held, &pinged),
            Some(at(NOW + 3)),
            "b's window closes"
        );
        let mut sitting = held.clone();
        sitting.sitting_out = vec![crate::lease::SitOut {
            candidate: "b".into(),
            until: at(NOW + 30),
        }];
        assert_eq!(until(&sitting, &quiet), Some(at(NOW + 30)), "b is back");
        assert_eq!(
            until(&held, &[cand("a", OEV, None, None)]),
            None,
            "nothing the clock changes"
        );
    }

    #[test]
    fn the_first_election_of_a_missing_lease_waits_for_its_batch_of_candidates() {
        let candidates = [fresh("a"), fresh("b")];
        let ms = |n: u64| at(NOW) + Duration::from_millis(n);
        let arriving = |first: u64, last: u64, now: u64| {
            let mut input = input(None, &candidates, Mode::All, false);
            input.now = ms(now);
            input.arrivals = Some(Arrivals {
                first: ms(first),
                last: ms(last),
            });
            plan_step(&input)
        };
        let settling = |recheck: u64| {
            Plan::Skip(Skip {
                reason: SkipReason::Settling {
                    strategy: OEV.into(),
                },
                recheck_at: Some(ms(recheck)),
            })
        };
        assert_eq!(
            arriving(0, 10, 20),
            settling(40),
            "30 ms after the last arrival"
        );
        assert!(matches!(arriving(0, 10, 40), Plan::Decide(_)), "settled");
        assert_eq!(
            arriving(0, 190, 195),
            settling(200),
            "at most 200 ms after the first"
        );
        assert!(matches!(arriving(0, 199, 200), Plan::Decide(_)));
        // A Lease that exists elects at once: a failover or a pre-emption never waits.
        let held = lease(Some(""), NOW - 1, None);
        let mut input = input(Some(&held), &candidates, Mode::All, false);
        input.arrivals = Some(Arrivals {
            first: at(NOW),
            last: at(NOW),
        });
        assert!(matches!(plan_step(&input), Plan::Decide(_)));
    }

    /// Runs both phases, the strategy answering `answer`, and sums the result up in one line.
    fn summary(input: &StepInput<'_>, answer: Option<&str>) -> String {
        let election = match plan_step(input) {
            Plan::Skip(skip) => {
                return match skip.reason {
                    SkipReason::NoCandidates => "skip: no candidates".into(),
                    SkipReason::Conflict(_) => "skip: conflict".into(),
                    SkipReason::NotHandled { strategy } => format!("skip: not handled {strategy}"),
                    SkipReason::UnknownStrategy { strategy } => format!("skip: unknown {strategy}"),
                    SkipReason::AllUnresponsive { .. } => "skip: all unresponsive".into(),
                    SkipReason::Settling { .. } => "skip: settling".into(),
                    SkipReason::DeletedWhileHeld { .. } => "skip: deleted while held".into(),
                };
            }
            Plan::Decide(election) => election,
        };
        match election.apply_answer(answer) {
            Outcome::NoWinner { .. } => "no winner".into(),
            Outcome::Unchanged { .. } => "unchanged".into(),
            Outcome::Ping { candidates, .. } => format!("ping {}", candidates.join(",")),
            Outcome::Wait { .. } => "wait".into(),
            Outcome::AwaitRenewal { .. } => "await renewal".into(),
            Outcome::Write {
                write,
                also_ping,
                sit_out,
                ..
            } => {
                let d = write.desired;
                let ping = also_ping.map(|p| format!(" ping={p}")).unwrap_or_default();
                let sit_out = sit_out.map(|s| format!(" sit_out={s}")).unwrap_or_default();
                format!(
                    "{} holder={} preferred={} strategy={}{ping}{sit_out}",
                    write.kind.label(),
                    d.holder().unwrap_or("-"),
                    d.preferred().unwrap_or("-"),
                    d.strategy().unwrap_or("-"),
                )
            }
        }
    }

    /// `released`, as this controller watched its pre-empted holder release it for `successor`.
    fn released_for(released: &LeaseRecord, successor: &str) -> LeaseRecord {
        LeaseRecord {
            released_for: Some(successor.into()),
            observed_renewal: released.renew_time,
            ..released.clone()
        }
    }

    /// A case name, the Lease, its candidates, the strategy's answer and the expected summary.
    type Case<'a> = (
        &'a str,
        Option<LeaseRecord>,
        Vec<CandidateView>,
        Option<&'a str>,
        &'a str,
    );

    #[test]
    fn one_step_from_snapshots_to_writes() {
        let with_strategy = |mut l: LeaseRecord, s: &str| {
            l.strategy = Some(s.into());
            l
        };
        let table: Vec<Case<'_>> = vec![
            (
                "no Lease: create it for the winner",
                None,
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "create holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "released (empty holder): take over",
                Some(lease(Some(""), NOW - 1, None)),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "released by a, which showed no life since: b takes over, a is pinged",
                Some(released_by(&lease(Some(""), NOW - 1, None), "a")),
                vec![fresh("a"), fresh("b")],
                Some("b"),
                "take_over holder=b preferred=- strategy=OldestEmulationVersion ping=a",
            ),
            (
                "released by a, alone: its renewal before the release does not count; ping it",
                Some(released_by(&lease(Some(""), NOW - 1, None), "a")),
                vec![fresh("a")],
                Some("a"),
                "ping a",
            ),
            (
                "released by b, which renewed since: it counts, nothing to ping",
                Some(released_by(&lease(Some(""), NOW - 1, None), "b")),
                vec![fresh("a"), cand("b", OEV, Some(NOW), None)],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "released for a, which acked 8 s ago: a takes over without another ping",
                Some(released_for(&lease(Some(""), NOW - 1, None), "a")),
                vec![cand("a", OEV, Some(NOW - 8), None), stale("b")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "released for a, which acked 20 s ago (past a lease duration): ping again",
                Some(released_for(&lease(Some(""), NOW - 1, None), "a")),
                vec![cand("a", OEV, Some(NOW - 20), None), stale("b")],
                Some("a"),
                "ping a,b",
            ),
            (
                "released for a, but the strategy names b: b must be fresh as usual",
                Some(released_for(&lease(Some(""), NOW - 1, None), "a")),
                vec![cand("a", OEV, Some(NOW - 8), None), stale("b")],
                Some("b"),
                "ping a,b",
            ),
            (
                "expired holder a answered its probe 8 s ago: refreshed without a ping",
                Some(lease(Some("a"), NOW - 12, None)),
                vec![cand("a", OEV, Some(NOW - 8), Some(NOW - 9)), stale("b")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "expired holder a's probe is unanswered at expiry: left out, b pinged at once",
                Some(lease(Some("a"), NOW - 12, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 2)), stale("b")],
                Some("b"),
                "ping b",
            ),
            (
                "a live holder's ping outstanding: nothing to write, nothing to await",
                Some(lease(Some("a"), NOW - 1, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 2)), stale("b")],
                Some("a"),
                "unchanged",
            ),
            (
                "released by a whose ping is outstanding: b is pinged as before",
                Some(lease(Some(""), NOW - 1, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 2)), stale("b")],
                Some("a"),
                "ping b",
            ),
            (
                "expired holder a never answered its probe: left out, b is pinged",
                Some(lease(Some("a"), NOW - 12, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 9)), stale("b")],
                Some("b"),
                "ping b",
            ),
            (
                "absent holder is the same as empty: take over",
                Some(lease(None, NOW - 1, None)),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "expired holder: take over, dropping its preferredHolder",
                Some(lease(Some("b"), NOW - 60, Some("c"))),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "live worse holder: set preferredHolder",
                Some(lease(Some("b"), NOW - 1, None)),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "preempt holder=b preferred=a strategy=OldestEmulationVersion",
            ),
            (
                "live worse holder acquired 1 s ago, not renewed since: wait for its renewal",
                Some(LeaseRecord {
                    acquire_time: Some(at(NOW - 1)),
                    ..lease(Some("b"), NOW - 1, None)
                }),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "await renewal",
            ),
            (
                "live worse holder renewing every 2 s, last watched 1.5 s ago: wait for its next \
                 renewal",
                Some(LeaseRecord {
                    observed_renewal: Some(at(NOW) - Duration::from_millis(1500)),
                    renew_period: Some(Duration::from_secs(2)),
                    ..lease(Some("b"), NOW - 2, None)
                }),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "await renewal",
            ),
            (
                "the same, but the pre-emption was first held back 3 s ago (each reconcile ran \
                 late in the period): written now, not re-armed at every renewal",
                Some(LeaseRecord {
                    observed_renewal: Some(at(NOW) - Duration::from_millis(1500)),
                    renew_period: Some(Duration::from_secs(2)),
                    preemption_held_since: Some(at(NOW - 3)),
                    ..lease(Some("b"), NOW - 2, None)
                }),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "preempt holder=b preferred=a strategy=OldestEmulationVersion",
            ),
            (
                "live worse holder renewing every 2 s, last watched 0.5 s ago: set preferredHolder",
                Some(LeaseRecord {
                    observed_renewal: Some(at(NOW) - Duration::from_millis(500)),
                    renew_period: Some(Duration::from_secs(2)),
                    ..lease(Some("b"), NOW - 1, None)
                }),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "preempt holder=b preferred=a strategy=OldestEmulationVersion",
            ),
            (
                "holder already asked to step down: nothing",
                Some(lease(Some("b"), NOW - 1, Some("a"))),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "unchanged",
            ),
            (
                "the preferred candidate now holds: clear preferredHolder",
                Some(lease(Some("a"), NOW - 1, Some("a"))),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "clear_preferred holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "the winner holds: nothing",
                Some(lease(Some("a"), NOW - 1, None)),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "unchanged",
            ),
            (
                "a live legacy (non-candidate) holder keeps the Lease",
                Some(lease(Some("legacy"), NOW - 1, None)),
                vec![fresh("a")],
                Some("a"),
                "unchanged",
            ),
            (
                "an expired legacy holder is replaced",
                Some(lease(Some("legacy"), NOW - 11, None)),
                vec![fresh("a")],
                Some("a"),
                "take_over holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "the Lease's own strategy is asked and kept",
                Some(with_strategy(lease(Some("b"), NOW - 1, None), TP)),
                vec![fresh("a"), fresh("b")],
                Some("a"),
                "preempt holder=b preferred=a strategy=example.com/x",
            ),
            (
                "the Lease's own strategy wins over a conflict among candidates",
                Some(with_strategy(lease(Some(""), NOW - 1, None), TP)),
                vec![fresh("a"), cand("b", "example.com/y", Some(NOW - 1), None)],
                Some("a"),
                "take_over holder=a preferred=- strategy=example.com/x",
            ),
            (
                "candidates at the highest version disagree: blocked",
                Some(lease(Some(""), NOW - 1, None)),
                vec![fresh("a"), cand("b", TP, Some(NOW - 1), None)],
                Some("a"),
                "skip: conflict",
            ),
            (
                "a conflict blocks even a missing Lease",
                None,
                vec![fresh("a"), cand("b", TP, Some(NOW - 1), None)],
                Some("a"),
                "skip: conflict",
            ),
            (
                "no plugin for the strategy: no writes",
                None,
                vec![cand("a", "example.com/missing", Some(NOW - 1), None)],
                Some("a"),
                "skip: unknown example.com/missing",
            ),
            (
                "no candidates: the Lease is left alone",
                Some(lease(Some(""), NOW - 1, None)),
                vec![],
                Some("a"),
                "skip: no candidates",
            ),
            (
                "candidates past the GC period do not count",
                None,
                vec![cand("a", OEV, Some(NOW - 1801), None)],
                Some("a"),
                "skip: no candidates",
            ),
            (
                "every candidate pinged and silent: wait for a renewal",
                None,
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 10))],
                Some("a"),
                "skip: all unresponsive",
            ),
            (
                "the holder pinged and silent, its Lease unexpired: it keeps the Lease",
                Some(lease(Some("a"), NOW - 5, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 10))],
                Some("a"),
                "unchanged",
            ),
            (
                "the holder pinged and silent, its Lease expired: wait for a renewal",
                Some(lease(Some("a"), NOW - 11, None)),
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 10))],
                Some("a"),
                "skip: all unresponsive",
            ),
            (
                "winner not fresh: ping only the candidates that are not fresh",
                None,
                vec![stale("a"), fresh("b"), stale("c")],
                Some("a"),
                "ping a,c",
            ),
            (
                "winner acked its ping: elect without waiting for worse candidates",
                None,
                vec![cand("a", OEV, Some(NOW - 1), Some(NOW - 2)), stale("b")],
                Some("a"),
                "create holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "winner's ping outstanding, nobody else to ping: wait",
                None,
                vec![cand("a", OEV, Some(NOW - 60), Some(NOW - 2)), fresh("b")],
                Some("a"),
                "wait",
            ),
            (
                "an up-to-date Lease costs no ping",
                Some(lease(Some("a"), NOW - 1, None)),
                vec![stale("a"), stale("b")],
                Some("a"),
                "unchanged",
            ),
            (
                "the strategy elects nobody: nothing",
                None,
                vec![fresh("a")],
                None,
                "no winner",
            ),
        ];
        for (case, lease, candidates, answer, want) in table {
            let got = summary(
                &input(lease.as_ref(), &candidates, Mode::All, false),
                answer,
            );
            assert_eq!(got, want, "{case}");
            let mut reversed = candidates.clone();
            reversed.reverse();
            let got = summary(&input(lease.as_ref(), &reversed, Mode::All, false), answer);
            assert_eq!(got, want, "{case} (candidates in reverse order)");
        }
    }

    #[test]
    fn the_mode_is_applied_after_conflicts_and_before_plugins() {
        let oev = [fresh("a")];
        let missing = [cand("a", "example.com/missing", Some(NOW - 1), None)];
        let conflict = [fresh("a"), cand("b", TP, Some(NOW - 1), None)];
        let table: [(&str, &[CandidateView], Mode, bool, &str); 5] = [
            (
                "auto, built-in active: OldestEmulationVersion is left to it",
                &oev,
                Mode::Auto,
                true,
                "skip: not handled OldestEmulationVersion",
            ),
            (
                "auto, built-in inactive: handled",
                &oev,
                Mode::Auto,
                false,
                "create holder=a preferred=- strategy=OldestEmulationVersion",
            ),
            (
                "third-party: OldestEmulationVersion is never handled",
                &oev,
                Mode::ThirdParty,
                false,
                "skip: not handled OldestEmulationVersion",
            ),
            (
                "a strategy not handled is not checked for a plugin",
                &missing,
                Mode::Auto,
                true,
                "skip: unknown example.com/missing",
            ),
            (
                "a conflict is reported whatever the mode",
                &conflict,
                Mode::ThirdParty,
                false,
                "skip: conflict",
            ),
        ];
        for (case, candidates, mode, builtin, want) in table {
            assert_eq!(
                summary(&input(None, candidates, mode, builtin), Some("a")),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn the_strategy_chooses_among_live_acked_candidates() {
        let candidates = [
            stale("c"),
            cand("silent", OEV, Some(NOW - 60), Some(NOW - 10)),
            fresh("a"),
            cand("gone", OEV, Some(NOW - 1801), None),
        ];
        let held = lease(Some("b"), NOW - 60, Some("x"));
        let Plan::Decide(election) = plan_step(&input(Some(&held), &candidates, Mode::All, false))
        else {
            panic!("an election");
        };
        let request = election.request();
        let names: Vec<&str> = request.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "c"], "unresponsive and GC-expired left out");
        assert_eq!(election.strategy(), OEV);
        let view = &request.lease;
        assert_eq!((view.namespace.as_str(), view.name.as_str()), ("ns", "l"));
        assert_eq!(view.holder.as_deref(), Some("b"));
        assert_eq!(view.preferred_holder.as_deref(), Some("x"));
        assert!(view.expired);
        assert_eq!(request.now, at(NOW));
    }

    #[test]
    fn when_to_look_again() {
        let candidates = [fresh("a"), stale("b")];
        let legacy = lease(Some("legacy"), NOW - 1, None);
        let Plan::Decide(election) =
            plan_step(&input(Some(&legacy), &candidates, Mode::All, false))
        else {
            panic!("an election");
        };
        // Renewed at NOW - 1 for 10 s: overdue at NOW + 4 (half the duration, and one ack
        // window plus a second before expiry), expired after NOW + 9.
        let overdue = at(NOW + 4);
        let unchanged = election.apply_answer(Some("a"));
        assert_eq!(
            unchanged,
            Outcome::Unchanged {
                winner: "a".into(),
                recheck_at: Some(overdue),
                probe: None,
            },
            "the legacy holder is looked at again when it would be overdue"
        );
        assert!(!unchanged.in_progress());
        let Plan::Decide(election) = plan_step(&input(None, &candidates, Mode::All, false)) else {
            panic!("an election");
        };
        let pinged = election.apply_answer(Some("b"));
        assert!(pinged.in_progress(), "{pinged:?}");
        let Outcome::Ping { recheck_at, .. } = pinged else {
            panic!("{pinged:?}");
        };
        assert_eq!(recheck_at, at(NOW + 5), "when the ping window closes");
        let silent = [cand("a", OEV, Some(NOW - 60), Some(NOW - 10))];
        let Plan::Skip(skip) = plan_step(&input(Some(&legacy), &silent, Mode::All, false)) else {
            panic!("a skip");
        };
        assert_eq!(skip.recheck_at, Some(overdue));
        assert_eq!(skip.reason.managed(), Some(true));
    }

    /// The best candidate leads and crashes: its Lease (15 s) stops being renewed. Before it
    /// expires its LeaseCandidate is pinged, goes unanswered for a window, and at expiry the next
    /// best is elected without waiting out another window for the dead one.
    #[test]
    fn a_crashed_best_leader_is_probed_before_expiry_and_left_out_at_it() {
        let mut held = lease(Some("a"), NOW, None);
        held.lease_duration_seconds = Some(15);
        let oldest = |name: &str, renew: i64, ping: Option<i64>| CandidateView {
            emulation_version: "1.30.0".into(),
            ..cand(name, OEV, Some(renew), ping)
        };
        let step = |candidates: &[CandidateView], now: i64| {
            let mut input = input(Some(&held), candidates, Mode::All, false);
            input.now = at(now);
            let Plan::Decide(election) = plan_step(&input) else {
                panic!("an election");
            };
            let winner = election
                .request()
                .candidates
                .iter()
                .min_by_key(|c| (c.emulation_version.is_empty(), c.name.clone()))
                .map(|c| c.name.clone());
            election.apply_answer(winner.as_deref())
        };
        // Overdue at half the lease duration, NOW + 7.5: before that, nothing to do.
        let alive = [
            oldest("a", NOW - 100, None),
            cand("b", OEV, Some(NOW - 100), None),
        ];
        assert!(matches!(
            step(&alive, NOW + 7),
            Outcome::Unchanged { probe: None, recheck_at: Some(r), .. }
                if r == at(NOW + 7) + Duration::from_millis(500)
        ));
        let Outcome::Unchanged {
            probe, recheck_at, ..
        } = step(&alive, NOW + 8)
        else {
            panic!("unchanged");
        };
        assert_eq!(
            probe.as_deref(),
            Some("a"),
            "the holder's candidate is pinged"
        );
        assert_eq!(recheck_at, Some(at(NOW + 15) + Duration::from_millis(1)));
        // Pinged at NOW + 8, never answered: at expiry it is left out, and b, pinged now, wins
        // as soon as it acks.
        let dead = [
            oldest("a", NOW - 100, Some(NOW + 8)),
            cand("b", OEV, Some(NOW - 100), None),
        ];
        let Outcome::Ping {
            winner, candidates, ..
        } = step(&dead, NOW + 15 + 1)
        else {
            panic!("a ping of the next best");
        };
        assert_eq!((winner.as_str(), candidates), ("b", vec!["b".to_string()]));
        let acked = [
            oldest("a", NOW - 100, Some(NOW + 8)),
            cand("b", OEV, Some(NOW + 16), Some(NOW + 16)),
        ];
        let Outcome::Write { winner, write, .. } = step(&acked, NOW + 16) else {
            panic!("a write");
        };
        assert_eq!((winner.as_str(), write.kind), ("b", WriteKind::TakeOver));
    }

    /// Review finding 3 (issue 34): a crashed holder is probed at half its lease duration, and a
    /// probe still unanswered when the Lease expires leaves it out at once, whatever the Lease's
    /// duration and the ack window; the next best is pinged at expiry, not when the probe's window
    /// closes (measured before: 7.2 to 7.6 s after a SIGKILL on a 5 s Lease).
    #[test]
    fn a_crashed_holder_is_left_out_at_expiry_whatever_the_lease_duration_and_ack_window() {
        for duration in [1, 2, 5, 10, 15, 60] {
            for window in [1, 5, 10] {
                let case = format!("{duration} s Lease, {window} s ack window");
                let mut held = lease(Some("a"), NOW, None);
                held.lease_duration_seconds = Some(duration);
                held.observed_renewal = Some(at(NOW));
                let dead = [
                    CandidateView {
                        emulation_version: "1.30.0".into(),
                        ping_time: crate::plan::holder_overdue_at(&held),
                        ..cand("a", OEV, Some(NOW - 100), None)
                    },
                    cand("b", OEV, Some(NOW - 100), None),
                ];
                let mut input = input(Some(&held), &dead, Mode::All, false);
                input.config.ack_window = Duration::from_secs(window);
                input.config.lease_duration_seconds = 5;
                input.now = at(NOW + i64::from(duration)) + Duration::from_millis(1);
                let Plan::Decide(election) = plan_step(&input) else {
                    panic!("{case}: an election");
                };
                let pool: Vec<&str> = election
                    .request()
                    .candidates
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                assert_eq!(pool, ["b"], "{case}: the unanswered holder is left out");
                assert_eq!(
                    summary(&input, Some("b")),
                    "ping b",
                    "{case}: the next best is pinged at expiry"
                );
            }
        }
    }

    /// Pod liveness (issue 29): a holder the kubelet reported dead, which did not answer the ping
    /// sent then, is left out at once, long before its Lease expires, and the next best takes
    /// the Lease over (pinged first when stale, then written); the same holder alive is kept.
    #[test]
    fn a_holder_known_dead_by_pod_liveness_is_replaced_before_its_lease_expires() {
        let mut held = lease(Some("a"), NOW, None);
        held.lease_duration_seconds = Some(15);
        held.observed_renewal = Some(at(NOW));
        let held = held;
        let candidates = [
            CandidateView {
                emulation_version: "1.30.0".into(),
                ..cand("a", OEV, Some(NOW - 100), None)
            },
            cand("b", OEV, Some(NOW + 1), None),
        ];
        let mut input = input(Some(&held), &candidates, Mode::All, false);
        input.now = at(NOW + 2);
        assert_eq!(
            summary(&input, Some("a")),
            "unchanged",
            "alive as far as anyone knows: kept"
        );
        let dead = LeaseRecord {
            holder_dead: true,
            ..held.clone()
        };
        input.lease = Some(&dead);
        let Plan::Decide(election) = plan_step(&input) else {
            panic!("an election");
        };
        let pool: Vec<&str> = election
            .request()
            .candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(pool, ["b"], "the dead holder is left out");
        assert!(election.request().lease.expired, "counts as expired");
        let Outcome::Write { winner, write, .. } = election.apply_answer(Some("b")) else {
            panic!("b is fresh: written at once");
        };
        assert_eq!((winner.as_str(), write.kind), ("b", WriteKind::TakeOver));
    }

    /// Review finding 1 (issue 34): `kubectl delete lease` while a holder leads. The holder sees
    /// the deletion only at its next check, and may lead until its last renewal plus the
    /// duration: the Lease is created for someone else only after that.
    #[test]
    fn a_lease_deleted_while_held_is_not_created_again_before_its_holder_s_term_could_end() {
        let candidates = [
            cand("a", OEV, Some(NOW + 3), None),
            cand("b", OEV, Some(NOW + 3), None),
        ];
        let mut step = input(None, &candidates, Mode::All, false);
        step.deleted_while_held_until = Some(at(NOW + 4));
        assert_eq!(
            plan_step(&step),
            Plan::Skip(Skip {
                reason: SkipReason::DeletedWhileHeld {
                    strategy: OEV.into()
                },
                recheck_at: Some(at(NOW + 4)),
            })
        );
        step.now = at(NOW + 4) + Duration::from_millis(1);
        assert_eq!(
            summary(&step, Some("a")),
            "create holder=a preferred=- strategy=OldestEmulationVersion"
        );
    }

    /// Review finding 6 (issue 34): a holder the controller wrote answers pings but cannot write
    /// its Lease. At expiry it is not written back while a rival can lead; it sits out, and while
    /// it does, it is not elected back through a pre-emption either. Alone, it stays.
    #[test]
    fn a_holder_that_never_renewed_sits_out_while_a_rival_can_lead() {
        let mut stuck = lease(Some("a"), NOW - 11, None);
        stuck.acquire_time = stuck.renew_time;
        stuck.elected_by_conclave = true;
        let best_first = |name: &str| CandidateView {
            emulation_version: if name == "a" { "1.30.0" } else { "1.31.0" }.into(),
            ..fresh(name)
        };
        let both = [best_first("a"), best_first("b")];
        assert_eq!(
            summary(&input(Some(&stuck), &both, Mode::All, false), Some("b")),
            "take_over holder=b preferred=- strategy=OldestEmulationVersion sit_out=a"
        );
        let Plan::Decide(election) = plan_step(&input(Some(&stuck), &both, Mode::All, false))
        else {
            panic!("an election");
        };
        let pool: Vec<&str> = election
            .request()
            .candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(pool, ["b"], "the strategy never sees it");
        let alone = [best_first("a")];
        assert_eq!(
            summary(&input(Some(&stuck), &alone, Mode::All, false), Some("a")),
            "take_over holder=a preferred=- strategy=OldestEmulationVersion"
        );
        // b now leads; a sits out for a minute: no pre-emption for it.
        let mut b_leads = lease(Some("b"), NOW - 1, None);
        b_leads.sitting_out = vec![crate::lease::SitOut {
            candidate: "a".into(),
            until: at(NOW + 60),
        }];
        assert_eq!(
            summary(&input(Some(&b_leads), &both, Mode::All, false), Some("b")),
            "unchanged"
        );
        b_leads.sitting_out[0].until = at(NOW);
        assert_eq!(
            summary(&input(Some(&b_leads), &both, Mode::All, false), Some("a")),
            "preempt holder=b preferred=a strategy=OldestEmulationVersion"
        );
        // A holder that renewed once is no such holder.
        let mut renewed_once = stuck.clone();
        renewed_once.renew_time = Some(at(NOW - 11));
        renewed_once.acquire_time = Some(at(NOW - 13));
        assert_eq!(
            summary(
                &input(Some(&renewed_once), &both, Mode::All, false),
                Some("a")
            ),
            "take_over holder=a preferred=- strategy=OldestEmulationVersion"
        );
        assert_eq!(
            crate::plan::never_renewed_backoff(1),
            Duration::from_secs(60)
        );
        assert_eq!(
            crate::plan::never_renewed_backoff(3),
            Duration::from_secs(240)
        );
        assert_eq!(
            crate::plan::never_renewed_backoff(9),
            Duration::from_secs(960)
        );
    }

    /// The model check's trace with Lease deletion (tests/model README): a, written as holder and
    /// never renewing, sits out; its Lease is deleted, and the controller creates it again. The
    /// sit-out outlives the Lease: the create elects b, not a, whom the next step would pre-empt
    /// at once because it sits out (a needless hand-off). Alone, a is elected; once its sit-out
    /// ends, it takes part again.
    #[test]
    fn a_candidate_that_sits_out_is_not_elected_into_a_missing_lease() {
        let best_first = |name: &str| CandidateView {
            emulation_version: if name == "a" { "1.30.0" } else { "1.31.0" }.into(),
            ..fresh(name)
        };
        let both = [best_first("a"), best_first("b")];
        let sitting = [SitOut {
            candidate: "a".into(),
            until: at(NOW + 60),
        }];
        let create = |candidates: &[CandidateView], sitting: &[SitOut]| {
            let mut step = input(None, candidates, Mode::All, false);
            step.sitting_out = sitting;
            let Plan::Decide(election) = plan_step(&step) else {
                panic!("an election");
            };
            election
                .request()
                .candidates
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(create(&both, &sitting), ["b"], "a sits out the create");
        let mut step = input(None, &both, Mode::All, false);
        step.sitting_out = &sitting;
        assert_eq!(
            summary(&step, Some("b")),
            "create holder=b preferred=- strategy=OldestEmulationVersion"
        );
        assert_eq!(create(&both[..1], &sitting), ["a"], "alone, it stays");
        let ended = [SitOut {
            candidate: "a".into(),
            until: at(NOW),
        }];
        assert_eq!(create(&both, &ended), ["a", "b"], "its sit-out ended");
        // The Lease exists: its record's sit-outs count, as before.
        let free = lease(Some(""), NOW - 1, None);
        let mut step = input(Some(&free), &both, Mode::All, false);
        step.sitting_out = &sitting;
        let Plan::Decide(election) = plan_step(&step) else {
            panic!("an election");
        };
        assert_eq!(
            election.request().candidates.len(),
            2,
            "the record has none"
        );
    }

    /// Review finding 4 (issue 34): the answer to a probe counts at expiry for the Lease's own
    /// duration, not the duration this controller writes (`--lease-duration-seconds`, 5 s): on a
    /// 15 s Lease the answer is 7 s old at expiry and the holder is written back without a second
    /// probe of it and its rivals.
    #[test]
    fn a_probe_answer_counts_for_the_lease_s_own_duration() {
        let mut held = lease(Some("a"), NOW, None);
        held.lease_duration_seconds = Some(15);
        let answered = [
            cand("a", OEV, Some(NOW + 9), Some(NOW + 8)),
            cand("b", OEV, Some(NOW - 100), None),
        ];
        let mut input = input(Some(&held), &answered, Mode::All, false);
        input.config.lease_duration_seconds = 5;
        input.now = at(NOW + 16);
        assert_eq!(
            summary(&input, Some("a")),
            "take_over holder=a preferred=- strategy=OldestEmulationVersion"
        );
    }

    /// The best candidate leads, but its renewals stop getting through (an overloaded API
    /// server): it answers the probe, the reconcile its answer triggers runs only after the answer
    /// is an ack window old, and nobody probes it again; at expiry it is written back without a
    /// ping.
    #[test]
    fn a_live_holder_answers_one_probe_and_is_written_back_at_expiry() {
        let mut held = lease(Some("a"), NOW, None);
        held.lease_duration_seconds = Some(15);
        let step = |candidates: &[CandidateView], now: i64| {
            let mut input = input(Some(&held), candidates, Mode::All, false);
            input.now = at(now);
            let Plan::Decide(election) = plan_step(&input) else {
                panic!("an election");
            };
            election.apply_answer(Some("a"))
        };
        let answered = [
            cand("a", OEV, Some(NOW + 9), Some(NOW + 8)),
            cand("b", OEV, Some(NOW - 100), None),
        ];
        assert!(
            matches!(
                step(&answered, NOW + 14),
                Outcome::Unchanged { probe: None, .. }
            ),
            "answered 5 s ago: no second probe"
        );
        let Outcome::Write { winner, write, .. } = step(&answered, NOW + 15 + 1) else {
            panic!("a write without a ping");
        };
        assert_eq!((winner.as_str(), write.kind), ("a", WriteKind::TakeOver));
    }

    #[test]
    fn a_write_keeps_the_precondition_of_the_snapshot() {
        let held = lease(Some("b"), NOW - 1, None);
        let candidates = [fresh("a"), fresh("b")];
        let Plan::Decide(election) = plan_step(&input(Some(&held), &candidates, Mode::All, false))
        else {
            panic!("an election");
        };
        let Outcome::Write { winner, write, .. } = election.apply_answer(Some("a")) else {
            panic!("a write");
        };
        assert_eq!(winner, "a");
        assert_eq!(write.kind, WriteKind::Preempt);
        assert_eq!(write.desired.resource_version, "7");
        assert_eq!(election.lease(), Some(&held));
        assert_eq!(
            SkipReason::Conflict(StrategyConflict {
                binary_version: "1".to_string(),
                strategies: vec![]
            })
            .managed(),
            None
        );
    }
}
