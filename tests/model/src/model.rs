//! The Stateright model: the actions of each actor, the step of the controller through the real
//! core, and the properties.

use crate::strategy::{oldest_emulation_version, rank};
use crate::timing::{Bounds, Timing};
use crate::world::{
    Candidate, Controller, Id, LEASE, NAMESPACE, OwnLease, Phase, PodStatus, Replica, ReplicaId,
    ReplicaPhase, Reported, Server, State, StoredCandidate, StoredLease, StoredPod, Time,
    Violations, announced, id_of, identity, process_dead, stamped_by_holder, timestamp,
};
use conclave_core::lease::{LeaseRecord, Release, SitOut};
use conclave_core::memory::LeaseMemory;
use conclave_core::plan::{Liveness, Mode, WriteKind, liveness_since};
use conclave_core::step::{Outcome, Plan, Settle, StepConfig, StepInput, plan_step};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use core::time::Duration;
use stateright::{Model, Property};

/// How many times a step reads the Lease again after a write conflict (`reconcile.rs`).
const CONFLICT_ATTEMPTS: u8 = 3;

/// How long candidates not renewed take part in elections (seconds): longer than any run.
const CANDIDATE_GC_AFTER: u64 = 3_600;

/// `pods.rs` `ANSWER_GRACE` (500 ms) in whole seconds, rounded up: a holder reported dead is
/// declared dead at a step in a later second than the one the report was first seen in. Any
/// actor may act any number of times within a second, so a holder that answers at once (within
/// the second of the ping, as a live `conclave-candidate` does in milliseconds) always beats
/// it, and one that is slow (during faults, by any number of seconds) may miss it, as it may
/// miss 500 ms: rounding down to no grace at all would leave a prompt holder no time to answer.
pub const ANSWER_GRACE: Time = 1;

/// What pod liveness makes of the holder at a step.
enum PodVerdict {
    /// No evidence, or not yet acted on: the step runs as usual.
    Alive,
    /// Declared dead: the step elects the next candidate.
    Dead,
    /// It would be declared dead, but the Lease as stored is newer than the one judged: the
    /// step reads it and runs again.
    Stale,
    /// It would be declared dead, but the Lease is gone: the step ends (retried later, once the
    /// watch delivered the deletion).
    Gone,
}

/// The model: its timing, its bounds, and the time by which liveness must hold.
#[derive(Debug, Clone)]
pub struct Election {
    /// The settings and the timing assumptions.
    pub timing: Timing,
    /// How many candidates, faults and for how long.
    pub bounds: Bounds,
}

/// Something one actor does, atomically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// One second passes.
    Tick,
    /// Controller replica `ReplicaId`'s Lease watch delivers the Lease as stored now.
    WatchLease(ReplicaId),
    /// Controller replica `ReplicaId`'s LeaseCandidate watch delivers candidate `Id`'s object as
    /// stored now.
    WatchCandidate(ReplicaId, Id),
    /// Controller replica `ReplicaId` restarts (with two or more replicas: starts again after a
    /// crash): it relists every object and forgets every watched renewal.
    RestartController(ReplicaId),
    /// Controller replica `ReplicaId` runs one election step on its cached snapshot (a worker of
    /// its term: only while it leads).
    Step(ReplicaId),
    /// Controller replica `ReplicaId`, following, reads the controller's own Lease and creates
    /// it, renews it (it names the replica) or takes it (expired by its own observation), and
    /// leads; or, held by another replica and fresh, waits.
    FollowOwnLease(ReplicaId),
    /// Controller replica `ReplicaId`, leading, reads the controller's own Lease: taken or gone,
    /// its term ends at once; otherwise it renews it when a renewal is due.
    CheckOwnLease(ReplicaId),
    /// Controller replica `ReplicaId`'s process crashes: its watches and its writes stop.
    CrashController(ReplicaId),
    /// The candidate writes its LeaseCandidate (registration, or the answer to a ping).
    RenewCandidate(Id),
    /// A follower reads the Lease and, named holder, renews it and leads (or releases it when
    /// pre-empted before it led).
    Follow(Id),
    /// A leader (or a draining term that still holds the Lease) reads the Lease: lost, pre-empted,
    /// or renewed when a renewal is due.
    Check(Id),
    /// The renew deadline passes without a renewal: the Lease counts as lost.
    Deadline(Id),
    /// The draining term's tasks have stopped: the leadership interval ends.
    TasksStopped(Id),
    /// A pre-empted leader releases the Lease.
    Release(Id),
    /// The candidate's process crashes.
    Crash(Id),
    /// The candidate's process starts again.
    Restart(Id),
    /// The candidate's Lease writes start failing for [`Election::cut_off_for`] (an overloaded
    /// API server, an admission policy, a stuck renewal); its reads and its LeaseCandidate
    /// writes go through, so it still answers pings.
    CutOff(Id),
    /// The kubelet updates candidate `Id`'s Pod status to what its container really does: the
    /// container of a crashed process terminated, or a new one started for the restarted
    /// process (pod liveness only). Positive evidence only, possibly late, possibly never.
    KubeletReports(Id),
    /// Controller replica `ReplicaId`'s Pod watch delivers candidate `Id`'s Pod as stored now.
    WatchPod(ReplicaId, Id),
    /// The LeaseCandidate of crashed candidate `Id` is deleted (garbage collection, an operator).
    DeleteCandidate(Id),
    /// The Lease is deleted (an operator, a cleanup).
    DeleteLease,
    /// Candidate `Id`'s Pod is deleted without any report from the kubelet (a force delete,
    /// Pod GC of a deleted Node's Pods): its process, if it runs, runs on.
    DeletePod(Id),
    /// A Pod is created under the name of candidate `Id`'s deleted Pod, with a new UID (a
    /// StatefulSet's way): a restart of the candidate runs in it.
    RecreatePod(Id),
    /// Controller replica `ReplicaId` reads the Lease after its step's write was refused as a
    /// conflict (`reconcile.rs`), and steps again on what it found.
    ReadAfterConflict(ReplicaId),
}

/// The controller's step settings in the model.
#[must_use]
pub fn step_config(timing: &Timing) -> StepConfig {
    StepConfig {
        ack_window: secs(timing.ack_window),
        candidate_gc_after: Duration::from_secs(CANDIDATE_GC_AFTER),
        lease_duration_seconds: i32::from(timing.lease_duration),
        mode: Mode::All,
        settle: Settle::DEFAULT,
    }
}

fn secs(seconds: i16) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or_default())
}

/// A timestamp written by the core, as model time (whole seconds).
fn time_of(at: Option<Timestamp>) -> Time {
    let secs = at.map_or(0, |at| at.as_micros().div_euclid(1_000_000));
    Time::try_from(secs - timestamp(0).as_micros() / 1_000_000).unwrap_or(Time::MAX)
}

impl Election {
    /// A model with these settings and bounds.
    ///
    /// # Panics
    /// When the timing breaks an assumption of the safety argument ([`Timing::check`]) and
    /// `allow_broken_timing` is false.
    #[must_use]
    pub fn new(timing: Timing, bounds: Bounds, allow_broken_timing: bool) -> Self {
        if !allow_broken_timing && let Err(broken) = timing.check() {
            panic!("timing assumption broken: {broken}");
        }
        Self { timing, bounds }
    }

    /// How long after faults stop the best live candidate leads at the latest, from the
    /// settings: the Lease of a holder that crashed just before expires (`lease_duration` + 1),
    /// the next candidate is pinged and written (`ack_window` + 1), a worse holder is pre-empted
    /// after its first renewal (half a lease + 1), drains (`task_stop_within` + 1) and releases,
    /// and the best is pinged and written (`ack_window` + 1), each step one more second to be
    /// watched and acted on.
    #[must_use]
    pub fn liveness_bound(&self) -> Time {
        let t = &self.timing;
        (t.lease_duration + 1)
            + (t.ack_window + 2)
            + (t.lease_duration / 2 + 2)
            + (t.task_stop_within + 2)
            + (t.ack_window + 2)
    }

    /// How long after the controller's Pod watch delivers the kubelet's report that the holder's
    /// process stopped (after faults stopped) a live candidate leads at the latest: the holder is
    /// pinged when the report is seen and declared dead [`ANSWER_GRACE`] later, the next candidate
    /// is pinged and answers (`ack_window`), and is written and leads, one more second to be
    /// watched and acted on. Shorter than the Lease's expiry for any Lease longer than it.
    #[must_use]
    pub fn pod_liveness_bound(&self) -> Time {
        ANSWER_GRACE + self.timing.ack_window + 1
    }

    /// How long a cut-off lasts: [`Bounds::cut_off_heals`] a lease duration plus 2 s after it
    /// began (the holder's Lease has expired at the controller by then), or never.
    #[must_use]
    pub fn cut_off_for(&self) -> Time {
        if self.bounds.cut_off_heals {
            self.healed_after()
        } else {
            Time::MAX / 2
        }
    }

    /// `ControllerConfig::unseen_lease_hold` as the model's controller uses it: the longest
    /// duration a Lease of the model can have (every holder and the controller write
    /// `lease_duration`, a release 1 s), as the product's default is the longest of its own and
    /// the built-in controller's, which the model does not run.
    #[must_use]
    pub const fn unseen_lease_hold(&self) -> Time {
        self.timing.lease_duration
    }

    fn healed_after(&self) -> Time {
        self.timing.lease_duration + 2
    }

    /// The end of every run: when faults stop (a cut-off that heals has healed) plus
    /// [`Election::liveness_bound`].
    #[must_use]
    pub fn horizon(&self) -> Time {
        let healed = if self.bounds.max_cut_offs > 0 {
            self.healed_after()
        } else {
            0
        };
        self.bounds.faults_until + healed + self.controller_failover() + self.liveness_bound()
    }

    /// How long after faults stop a controller replica leads at the latest: with two or more
    /// replicas, the controller's own Lease of a replica that stopped renewing just before faults
    /// stopped is taken by a follower once it has seen it unchanged for `lease_duration`, one more
    /// second to act; none with one replica (it always leads).
    #[must_use]
    pub fn controller_failover(&self) -> Time {
        if self.bounds.replicas > 1 {
            self.timing.lease_duration + 1
        } else {
            0
        }
    }

    fn faulty(&self, state: &State) -> bool {
        state.now < self.bounds.faults_until
    }

    fn ids(&self) -> impl Iterator<Item = Id> {
        (0..self.bounds.candidates).map(|i| Id::try_from(i).unwrap_or(Id::MAX))
    }

    fn replica_ids(&self) -> impl Iterator<Item = ReplicaId> {
        (0..self.bounds.replicas).map(|i| ReplicaId::try_from(i).unwrap_or(ReplicaId::MAX))
    }

    /// When a draining term's tasks have stopped at the latest (`elector.rs` `drain`): aborted
    /// at the drain timeout; when the Lease counts as lost, before it could expire by
    /// `ABORT_GRACE` or half of what was left of it when it was lost, whichever is less
    /// (`abort_before_expiry`; whole seconds here, so half a second left rounds to none); when
    /// another holder is named, at once.
    fn tasks_stop_by(&self, renewed_at: Time, since: Time, lost: bool, taken: bool) -> Time {
        let t = &self.timing;
        let mut abort_at = since + t.drain_timeout;
        let mut grace = t.abort_grace;
        if lost {
            let expiry = renewed_at + t.lease_duration;
            grace = grace.min((expiry - since).max(0) / 2);
            abort_at = abort_at.min(expiry - grace);
        }
        if taken {
            abort_at = since;
        }
        t.tasks_stopped_by(since, abort_at, grace)
    }

    /// Whether a timer of candidate `id` is due and must fire before time moves on.
    fn timer_due(&self, state: &State, id: Id) -> bool {
        let now = state.now;
        match state.candidates[usize::from(id)].phase {
            Phase::Leading { renewed_at } => now >= renewed_at + self.timing.renew_deadline,
            Phase::Draining {
                renewed_at,
                since,
                lost,
                taken,
            } => {
                (!lost && now >= renewed_at + self.timing.renew_deadline)
                    || now >= self.tasks_stop_by(renewed_at, since, lost, taken)
            }
            _ => false,
        }
    }

    // The controller.

    /// `reconcile.rs`: one step on the cached snapshot; after a write conflict the Lease is read
    /// again, the read stands in for the cache until the watch delivers the next event
    /// (`own_writes.rs`), and the step runs again on it, up to [`CONFLICT_ATTEMPTS`] times.
    fn step(&self, state: &mut State, r: usize) {
        let lease = state.controllers[r].lease;
        self.step_from(state, r, lease, CONFLICT_ATTEMPTS);
    }

    /// The step's attempts on `lease`, `attempts` at most. With Lease deletions the read after a
    /// conflict is an action of its own ([`Action::ReadAfterConflict`]), so that the Lease may be
    /// deleted, and its deletion watched, between the refused write and the read; without, a
    /// conflict and its read are one action (a create conflicts only with a stored Lease, so the
    /// read cannot find it missing).
    fn step_from(&self, state: &mut State, r: usize, mut lease: Option<StoredLease>, attempts: u8) {
        for left in (0..attempts).rev() {
            if !self.step_once(state, r, lease) {
                return;
            }
            if lease.is_some() && state.server.lease.is_none() {
                // A replace of a deleted Lease: 404, an API error (`writer.rs` `classify`),
                // retried later from the cache, not re-read.
                return;
            }
            if self.bounds.lease_deletions > 0 {
                state.controllers[r].rereading = Some(left);
                return;
            }
            state.controllers[r].lease = state.server.lease;
            lease = state.server.lease;
        }
    }

    /// `reconcile.rs` `reconcile_key` after a conflict, and `own_writes.rs`
    /// `WriteTicket::succeeded`, `found_deleted`: the Lease read stands in for the cache and the
    /// step runs again on it (while attempts are left and the replica still leads); a Lease read
    /// missing is kept as a deletion ahead of the watch, unless the watch's latest event of it is
    /// its deletion (issue 47, finding 3: then no later event would ever clear it).
    fn read_after_conflict(&self, state: &mut State, r: usize) {
        let Some(left) = state.controllers[r].rereading.take() else {
            return;
        };
        match state.server.lease {
            Some(fresh) => {
                state.controllers[r].lease = Some(fresh);
                if left > 0 && self.is_leading(state, r) {
                    self.step_from(state, r, Some(fresh), left);
                }
            }
            None => {
                let controller = &mut state.controllers[r];
                if !controller.deleted_by_watch {
                    controller.deleted_ahead = true;
                }
            }
        }
    }

    /// One step on the snapshot `lease` and the cached candidates; whether the Lease write it
    /// made was refused.
    fn step_once(&self, state: &mut State, r: usize, lease: Option<StoredLease>) -> bool {
        let now = state.now;
        // `index.rs` `Renewals::sitting_out`: kept by key, they outlive a deleted Lease.
        let sitting_out: Vec<SitOut> = state.controllers[r].memory.sitting_out(timestamp(now));
        let mut record = lease.map(|stored| {
            let mut record = stored.record();
            state.controllers[r]
                .memory
                .annotate(&mut record, timestamp(now));
            record
        });
        if let Some(record) = record.as_mut() {
            match self.pod_liveness(state, r, record) {
                PodVerdict::Alive => {}
                PodVerdict::Dead => record.holder_dead = true,
                PodVerdict::Stale => return true,
                PodVerdict::Gone => return false,
            }
        }
        // `reconcile.rs` `valid_candidates`: a candidate other than the holder whose cached Pod
        // proves its recorded process stopped is left out.
        let holder = record
            .as_ref()
            .and_then(LeaseRecord::holder)
            .and_then(id_of);
        let known_dead = |id: Id, stored: &StoredCandidate| {
            self.bounds.pod_liveness
                && Some(id) != holder
                && process_dead(
                    stored.process,
                    stored.pod,
                    state.controllers[r].pod_report(usize::from(id), stored.pod),
                )
        };
        let candidates: Vec<_> = self
            .ids()
            .filter_map(|id| {
                state.controllers[r].candidates[usize::from(id)]
                    .filter(|stored| !known_dead(id, stored))
                    .map(|stored| stored.view(id))
            })
            .collect();
        let has_strategy = |strategy: &str| strategy == OLDEST_EMULATION_VERSION;
        let deleted_while_held_until = Self::held_after_deletion(&mut state.controllers[r], now);
        let plan = plan_step(&StepInput {
            namespace: NAMESPACE,
            name: LEASE,
            lease: record.as_ref(),
            candidates: &candidates,
            now: timestamp(now),
            config: step_config(&self.timing),
            builtin_active: false,
            has_strategy: &has_strategy,
            arrivals: None,
            deleted_while_held_until,
            sitting_out: &sitting_out,
        });
        let Plan::Decide(election) = plan else {
            return false;
        };
        let answer = oldest_emulation_version(election.request());
        let release = election.lease().and_then(LeaseRecord::released);
        match election.apply_answer(answer.as_deref()) {
            Outcome::NoWinner { .. } | Outcome::Wait { .. } => false,
            Outcome::AwaitRenewal { .. } => {
                state.controllers[r]
                    .memory
                    .preemption_held_back(timestamp(now));
                false
            }
            Outcome::Unchanged { probe, .. } => {
                if let Some(holder) = probe.as_deref().and_then(id_of) {
                    self.ping(state, r, holder, secs(self.timing.ack_window), None);
                }
                false
            }
            Outcome::Ping { candidates, .. } => {
                for id in candidates.iter().filter_map(|name| id_of(name)) {
                    self.ping(state, r, id, secs(self.timing.ack_window), release);
                }
                false
            }
            Outcome::Write {
                write,
                also_ping,
                sit_out,
                ..
            } => {
                if let Some(leaver) = also_ping.as_deref().and_then(id_of) {
                    self.ping(state, r, leaver, secs(self.timing.ack_window), release);
                }
                let basis = election.lease().map(|l| l.resource_version.clone());
                let precondition = basis.clone();
                let written = self.write_lease(
                    state,
                    r,
                    write.kind,
                    &write.desired,
                    basis.as_deref(),
                    precondition.as_deref(),
                );
                if written && let Some(holder) = sit_out.as_deref().and_then(id_of) {
                    Self::sit_out(state, r, holder);
                }
                !written
            }
        }
    }

    /// `index.rs` `Renewals::held_after_deletion`: until when the holder of the Lease, deleted
    /// while held, may still lead by controller `controller`'s reckoning at `now`; else, while
    /// the Lease is not among the watched ones, until the end of the hold after a restart's
    /// first list (`Renewals::first_listed`).
    fn held_after_deletion(controller: &mut Controller, now: Time) -> Option<Timestamp> {
        let unseen_held_until = controller.unseen_held_until;
        controller
            .memory
            .held_after_deletion(timestamp(now), || unseen_held_until.map(timestamp))
    }

    /// `index.rs` `Renewals::sit_out`: `id`, written as holder and never renewing, sits out the
    /// Lease's elections, longer each time in a row.
    fn sit_out(state: &mut State, r: usize, id: Id) {
        let now = timestamp(state.now);
        state.controllers[r].memory.sit_out(&identity(id), now);
    }

    /// `reconcile.rs` `pod_liveness` with `pods.rs` `PodLiveness::check` and `Reports::judge`:
    /// whether the holder of the unexpired Lease `record` is dead. The first time the cached Pod
    /// proves that the process its cached LeaseCandidate records stopped, the holder is pinged;
    /// once it answered that ping, or the Lease read shows a renewal stamped no earlier than the
    /// cached Pod's time (`dead_since`: any live process of the container started at or after
    /// it), it lives; otherwise [`ANSWER_GRACE`] later it is dead, once the Lease as stored is
    /// the one judged (a GET at the moment of the step; a newer one is read, and the step runs
    /// again on it, as after a write conflict). Anything else forgets the report.
    fn pod_liveness(&self, state: &mut State, r: usize, record: &LeaseRecord) -> PodVerdict {
        if !self.bounds.pod_liveness {
            return PodVerdict::Alive;
        }
        let now = state.now;
        let evidence = record
            .holder()
            .and_then(id_of)
            .filter(|_| !record.is_expired(timestamp(now)))
            .and_then(|holder| {
                let cached = state.controllers[r].candidates[usize::from(holder)]?;
                let pod = state.controllers[r].pod_report(usize::from(holder), cached.pod);
                process_dead(cached.process, cached.pod, pod).then_some((holder, cached, pod?))
            });
        let Some((holder, cached, pod)) = evidence else {
            state.controllers[r].reported = None;
            return PodVerdict::Alive;
        };
        let dead_since = timestamp(pod.at);
        let Some(reported) = state.controllers[r]
            .reported
            .filter(|seen| seen.holder == holder)
        else {
            state.controllers[r].reported = Some(Reported {
                holder,
                seen_at: now,
                asked_since: now,
                answered: false,
            });
            self.ping(state, r, holder, Duration::ZERO, None);
            return PodVerdict::Alive;
        };
        let answered = reported.answered
            || record
                .renew_time
                .is_some_and(|renewed| renewed >= dead_since)
            || (cached
                .ping_time
                .is_some_and(|ping| ping >= reported.asked_since && cached.renew_time >= ping)
                && !cached.ping_pending);
        if answered {
            state.controllers[r].reported = Some(Reported {
                answered: true,
                ..reported
            });
            return PodVerdict::Alive;
        }
        if now < reported.seen_at + ANSWER_GRACE {
            return PodVerdict::Alive;
        }
        let Some(stored) = state.server.lease else {
            return PodVerdict::Gone;
        };
        if stored.resource_version.to_string() != record.resource_version {
            return PodVerdict::Stale;
        }
        let process = state.candidates[usize::from(holder)];
        if process.leads() {
            state.violations.declared_dead_while_leading = true;
        }
        if process.is_up() {
            state.violations.declared_dead_while_running = true;
        } else {
            state.declared_dead = true;
        }
        PodVerdict::Dead
    }

    /// `writer.rs` `ping`: pings the cached candidate if it is stale (within `ack_window`), with
    /// its resourceVersion as precondition; on a conflict, reads it again and pings it if it is
    /// still stale.
    fn ping(
        &self,
        state: &mut State,
        r: usize,
        id: Id,
        ack_window: Duration,
        release: Option<Release<'_>>,
    ) {
        let now = state.now;
        let slot = usize::from(id);
        let stale = |stored: &StoredCandidate| {
            liveness_since(&stored.view(id), timestamp(now), ack_window, release) == Liveness::Stale
        };
        let Some(cached) = state.controllers[r].candidates[slot].filter(stale) else {
            return;
        };
        let Some(current) = state.server.candidates[slot] else {
            return;
        };
        if current.resource_version != cached.resource_version && !stale(&current) {
            return;
        }
        // An update that changes nothing keeps the resourceVersion, as on kube-apiserver (the
        // model's clock has whole seconds: a second ping within one would change nothing). Pod
        // liveness's ping (no ack window) after an answer in the same second is a new ping.
        if current.ping_time == Some(now) && (current.ping_pending || !ack_window.is_zero()) {
            return;
        }
        Self::judge_writer(state, r);
        state.server.candidates[slot] = Some(StoredCandidate {
            resource_version: current.resource_version + 1,
            ping_time: Some(now),
            ping_pending: ack_window.is_zero(),
            ..current
        });
        if self.bounds.candidate_deletions > 0 && !self.faulty(state) {
            let count = &mut state.unanswered_pings[slot];
            *count = (*count + 1).min(MAX_UNANSWERED_PINGS + 1);
        }
    }

    /// `writer.rs` `write_lease`: creates the Lease (`basis` `None`: it was read missing), or
    /// replaces it with `precondition` (the resourceVersion it was read at, `basis`). The server
    /// refuses a create of an existing Lease and a replace whose precondition is stale; a replace
    /// without one is applied unconditionally. A refusal makes the controller read the Lease again
    /// (`reconcile.rs`). Returns whether the write was applied; the controller's cache holds
    /// its own write until its watch delivers the next Lease event.
    fn write_lease(
        &self,
        state: &mut State,
        r: usize,
        kind: WriteKind,
        desired: &LeaseRecord,
        basis: Option<&str>,
        precondition: Option<&str>,
    ) -> bool {
        let current = state.server.lease;
        let version = |lease: Option<StoredLease>| lease.map(|l| l.resource_version.to_string());
        let accepted = match (basis, current) {
            (None, current) => current.is_none(),
            (Some(_), None) => false,
            (Some(_), current) => {
                precondition.is_none_or(|p| Some(p.to_owned()) == version(current))
            }
        };
        if !accepted {
            return false;
        }
        if basis.map(str::to_owned) != version(current) {
            state.violations.lost_update = true;
        }
        Self::judge_writer(state, r);
        let written = StoredLease {
            resource_version: current.map_or(1, |c| c.resource_version + 1),
            holder: desired.holder().and_then(id_of),
            preferred: desired.preferred().and_then(id_of),
            renew_time: time_of(desired.renew_time),
            acquire_time: time_of(desired.acquire_time),
            renewed_by_holder: stamped_by_holder(desired.renew_time),
            acquired_by_holder: stamped_by_holder(desired.acquire_time),
            duration: desired
                .lease_duration_seconds
                .and_then(|d| i16::try_from(d).ok())
                .unwrap_or_default(),
        };
        self.judge_write(state, r, kind, &written);
        state.server.lease = Some(written);
        state.controllers[r].lease = Some(written);
        true
    }

    /// Records the properties a controller write breaks.
    fn judge_write(&self, state: &mut State, r: usize, kind: WriteKind, written: &StoredLease) {
        let grace = self.timing.lease_duration + self.timing.ack_window;
        // With LeaseCandidate deletions, the controller may write a candidate whose deletion its
        // watch has not delivered yet: its cached LeaseCandidate stands for the stored one.
        let live = |id: Id| {
            (state.server.candidates[usize::from(id)].is_some()
                || state.controllers[r].candidates[usize::from(id)].is_some())
                && match state.candidates[usize::from(id)].phase {
                    Phase::Down { since } => state.now - since <= grace,
                    _ => true,
                }
        };
        match kind {
            WriteKind::Create | WriteKind::TakeOver => {
                if !written.holder.is_some_and(live) {
                    state.violations.holder_not_live = true;
                }
            }
            WriteKind::Preempt => {
                let better = match (written.preferred, written.holder) {
                    (Some(preferred), Some(holder)) => {
                        let (preferred, holder) = (announced(preferred), announced(holder));
                        rank(&preferred) < rank(&holder)
                    }
                    _ => false,
                };
                if !better {
                    state.violations.preempted_for_worse = true;
                }
            }
            WriteKind::ClearPreferred => {}
        }
    }

    // The controller replicas' own election.

    /// `leadership.rs` `Leadership::is_leading`, the gate of every write (`writer.rs` `send`) and
    /// what runs the workers that step (`run.rs` `lead`): replica `r`'s term runs, that is, it
    /// holds the controller's own Lease and its renew deadline has not passed. The lone replica
    /// of a run with one always leads.
    #[must_use]
    pub fn is_leading(&self, state: &State, r: usize) -> bool {
        state
            .replicas
            .get(r)
            .is_none_or(|replica| match replica.phase {
                ReplicaPhase::Leading { renewed_at } => {
                    state.now < renewed_at + self.timing.renew_deadline
                }
                ReplicaPhase::Following | ReplicaPhase::Down => false,
            })
    }

    /// The replica whose caches the liveness properties read: the holder of the controller's own
    /// Lease as stored (`r0` with one replica, or before any holds it).
    fn active(state: &State) -> usize {
        state
            .server
            .own_lease
            .map_or(0, |lease| usize::from(lease.holder))
    }

    /// Records a write by replica `r` that the controller's own Lease as stored does not allow:
    /// another replica holds it (or nobody does), so another may be writing too.
    fn judge_writer(state: &mut State, r: usize) {
        if !state.replicas.is_empty()
            && state
                .server
                .own_lease
                .is_none_or(|lease| usize::from(lease.holder) != r)
        {
            state.violations.written_without_leadership = true;
        }
    }

    /// The elector's `Observed` of the controller's own Lease: the version read, and when it was
    /// first read.
    fn observe_own(state: &mut State, r: usize) {
        let now = state.now;
        let version = state.server.own_lease.map(|l| l.resource_version);
        let replica = &mut state.replicas[r];
        replica.observed = match (version, replica.observed) {
            (Some(v), Some((seen, at))) if v == seen => Some((seen, at)),
            (Some(v), _) => Some((v, now)),
            (None, _) => None,
        };
    }

    /// The elector's write of the controller's own Lease naming replica `r` (`try_create`, or
    /// `write_holder`: a renewal or a take-over), with the resourceVersion it read as
    /// precondition (read and write are one action here: a conflict is a read of the newer
    /// Lease). The term runs from when the write was sent: now.
    fn write_own_lease(state: &mut State, r: usize) {
        let now = state.now;
        let version = state.server.own_lease.map_or(1, |l| l.resource_version + 1);
        if state
            .server
            .own_lease
            .is_some_and(|lease| usize::from(lease.holder) != r)
        {
            state.controller_failed_over = true;
        }
        state.server.own_lease = Some(OwnLease {
            resource_version: version,
            holder: ReplicaId::try_from(r).unwrap_or(ReplicaId::MAX),
        });
        state.replicas[r] = Replica {
            phase: ReplicaPhase::Leading { renewed_at: now },
            observed: Some((version, now)),
        };
    }

    /// `elector.rs` `follow` in classic mode (`Elector::classic`, as `run.rs` `run` contends for
    /// the controller's Lease once its caches have synced): missing, the Lease is created; naming
    /// this replica and fresh, renewed; held by another and fresh by this replica's own
    /// observation (seen unchanged for less than `lease_duration`), left alone; otherwise taken.
    fn follow_own_lease(&self, state: &mut State, r: usize) {
        Self::observe_own(state, r);
        let now = state.now;
        let fresh = state.replicas[r]
            .observed
            .is_some_and(|(_, at)| at + self.timing.lease_duration > now);
        let held_by_another = state
            .server
            .own_lease
            .is_some_and(|lease| usize::from(lease.holder) != r);
        if !(held_by_another && fresh) {
            Self::write_own_lease(state, r);
        }
    }

    /// `elector.rs` `lead` and `check`: a leading replica reads the controller's Lease; taken by
    /// another replica or gone, the Lease is lost and the term ends at once (no drain grace: that
    /// is for a shutdown, not modelled); otherwise it renews it when a renewal is due.
    fn check_own_lease(&self, state: &mut State, r: usize) {
        let ReplicaPhase::Leading { renewed_at } = state.replicas[r].phase else {
            return;
        };
        Self::observe_own(state, r);
        let held = state
            .server
            .own_lease
            .is_some_and(|lease| usize::from(lease.holder) == r);
        if !held {
            state.replicas[r].phase = ReplicaPhase::Following;
        } else if state.now >= renewed_at + self.timing.retry_period {
            Self::write_own_lease(state, r);
        }
    }

    /// Whether leading replica `r` reads its Lease: a renewal is due (every retry period), or
    /// the Lease changed since it last read it (the elector's watch wakes it).
    fn check_own_enabled(&self, state: &State, r: usize) -> bool {
        let replica = state.replicas[r];
        let ReplicaPhase::Leading { renewed_at } = replica.phase else {
            return false;
        };
        state.now >= renewed_at + self.timing.retry_period
            || state.server.own_lease.map(|l| l.resource_version)
                != replica.observed.map(|(v, _)| v)
    }

    /// `elector.rs` `lead`: the renew deadline is a timer, so a term not renewed for
    /// `renew_deadline` ends the moment it passes (the Lease counts as lost, the term's token is
    /// cancelled, and the writer's gate closes with it); the replica follows again.
    fn end_lapsed_terms(&self, state: &mut State) {
        let now = state.now;
        for replica in &mut state.replicas {
            if let ReplicaPhase::Leading { renewed_at } = replica.phase
                && now >= renewed_at + self.timing.renew_deadline
            {
                replica.phase = ReplicaPhase::Following;
            }
        }
    }

    /// After faults stop, what the replicas' electors must do within the second is done at
    /// once, after any action: a leader whose renewal is due renews the Lease it still holds, and
    /// every follower reads it. A reduction, not a change of behaviour: these reads and writes
    /// touch only the controller's own Lease and the electors, which nothing else reads (a
    /// leader renews before its deadline whatever the order, so its gate does not move), and a
    /// follower that must read within the second sees the same version, at the same second,
    /// whenever in it it reads; doing them in one order spares the checker every other. A leader
    /// finding the Lease taken stays an action of its own ([`Action::CheckOwnLease`]): when it
    /// sees that is what a gate that missed the deadline would get wrong.
    fn settle_own_lease(&self, state: &mut State) {
        if self.faulty(state) {
            return;
        }
        for r in 0..state.replicas.len() {
            if let ReplicaPhase::Leading { renewed_at } = state.replicas[r].phase
                && state.now >= renewed_at + self.timing.retry_period
                && state
                    .server
                    .own_lease
                    .is_some_and(|lease| usize::from(lease.holder) == r)
            {
                Self::write_own_lease(state, r);
            }
        }
        for r in 0..state.replicas.len() {
            if state.replicas[r].phase == ReplicaPhase::Following {
                Self::observe_own(state, r);
            }
        }
    }

    // The candidates.

    fn local_time(state: &State, id: Id) -> Time {
        state.now + state.candidates[usize::from(id)].clock_offset
    }

    /// The elector's renewal (`lock.rs` `write_holder`) of a Lease that names `id`, or its
    /// acquisition of one that names someone else.
    /// Refused (returns false) while the candidate's Lease writes are cut off.
    fn write_holder(&self, state: &mut State, id: Id, current: StoredLease) -> bool {
        if Self::cut_off(state, id) {
            return false;
        }
        let at = Self::local_time(state, id);
        let same = current.holder == Some(id);
        let written = StoredLease {
            resource_version: current.resource_version + 1,
            holder: Some(id),
            preferred: if same { current.preferred } else { None },
            renew_time: at,
            acquire_time: if same { current.acquire_time } else { at },
            renewed_by_holder: true,
            acquired_by_holder: !same || current.acquired_by_holder,
            duration: self.timing.lease_duration,
        };
        state.server.lease = Some(written);
        let candidate = &mut state.candidates[usize::from(id)];
        candidate.observed = Some((written.resource_version, state.now));
        true
    }

    /// Whether candidate `id`'s Lease writes fail now ([`Action::CutOff`]).
    fn cut_off(state: &State, id: Id) -> bool {
        state.now < state.candidates[usize::from(id)].cut_off_until
    }

    /// The elector's release (`lock.rs` `release`) of a Lease it holds; refused while its Lease
    /// writes are cut off (the Lease then expires).
    fn release(state: &mut State, id: Id, current: StoredLease) -> bool {
        if Self::cut_off(state, id) {
            return false;
        }
        let at = Self::local_time(state, id);
        let written = StoredLease {
            resource_version: current.resource_version + 1,
            holder: None,
            preferred: None,
            renew_time: at,
            acquire_time: at,
            renewed_by_holder: true,
            acquired_by_holder: true,
            duration: 1,
        };
        state.server.lease = Some(written);
        state.candidates[usize::from(id)].observed = Some((written.resource_version, state.now));
        true
    }

    /// The elector's `Observed`: the version read, and when it was first read.
    fn observe(state: &mut State, id: Id) {
        let now = state.now;
        let version = state.server.lease.map(|l| l.resource_version);
        let candidate = &mut state.candidates[usize::from(id)];
        candidate.observed = match (version, candidate.observed) {
            (Some(v), Some((seen, at))) if v == seen => Some((seen, at)),
            (Some(v), _) => Some((v, now)),
            (None, _) => None,
        };
    }

    fn follow(&self, state: &mut State, id: Id) {
        let Some(current) = state.server.lease.filter(|l| l.holder == Some(id)) else {
            return;
        };
        Self::observe(state, id);
        let fresh = state.candidates[usize::from(id)]
            .observed
            .is_some_and(|(_, at)| current.duration > 0 && at + current.duration > state.now);
        if !fresh {
            return;
        }
        if current.preferred.is_some_and(|p| p != id) {
            Self::release(state, id, current);
            return;
        }
        if self.write_holder(state, id, current) {
            state.candidates[usize::from(id)].phase = Phase::Leading {
                renewed_at: state.now,
            };
        }
    }

    fn check(&self, state: &mut State, id: Id) {
        let now = state.now;
        let phase = state.candidates[usize::from(id)].phase;
        let current = state.server.lease.filter(|l| l.holder == Some(id));
        Self::observe(state, id);
        let lost = |renewed_at| Phase::Draining {
            renewed_at,
            since: now,
            lost: true,
            taken: true,
        };
        let next = match (phase, current) {
            (Phase::Leading { renewed_at }, None) => lost(renewed_at),
            (
                Phase::Draining {
                    renewed_at, since, ..
                },
                None,
            ) => Phase::Draining {
                renewed_at,
                since,
                lost: true,
                taken: true,
            },
            (Phase::Leading { renewed_at }, Some(lease))
                if lease.preferred.is_some_and(|p| p != id) =>
            {
                Phase::Draining {
                    renewed_at,
                    since: now,
                    lost: false,
                    taken: false,
                }
            }
            (Phase::Leading { renewed_at }, Some(lease)) => {
                if now >= renewed_at + self.timing.retry_period
                    && self.write_holder(state, id, lease)
                {
                    Phase::Leading { renewed_at: now }
                } else {
                    phase
                }
            }
            (
                Phase::Draining {
                    renewed_at, since, ..
                },
                Some(lease),
            ) => {
                if now >= renewed_at + self.timing.retry_period
                    && self.write_holder(state, id, lease)
                {
                    Phase::Draining {
                        renewed_at: now,
                        since,
                        lost: false,
                        taken: false,
                    }
                } else {
                    phase
                }
            }
            _ => phase,
        };
        state.candidates[usize::from(id)].phase = next;
    }

    fn check_enabled(&self, state: &State, id: Id) -> bool {
        let candidate = &state.candidates[usize::from(id)];
        let renewal_due = |renewed_at: Time| {
            state.now >= renewed_at + self.timing.retry_period
                && state.now < renewed_at + self.timing.renew_deadline
        };
        let changed =
            state.server.lease.map(|l| l.resource_version) != candidate.observed.map(|(v, _)| v);
        match candidate.phase {
            Phase::Leading { renewed_at } => {
                renewal_due(renewed_at)
                    || (changed && state.now < renewed_at + self.timing.renew_deadline)
            }
            Phase::Draining {
                renewed_at,
                lost: false,
                taken: false,
                ..
            } => renewal_due(renewed_at),
            _ => false,
        }
    }

    /// The non-tick actions enabled in `state`.
    fn actor_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faulty = self.faulty(state);
        for r in self.replica_ids() {
            self.replica_actions(state, r, actions);
        }
        if faulty
            && state.lease_deletions < self.bounds.lease_deletions
            && state.server.lease.is_some()
        {
            actions.push(Action::DeleteLease);
        }
        for id in self.ids() {
            let candidate = &state.candidates[usize::from(id)];
            let slot = usize::from(id);
            if candidate.is_up()
                && (!candidate.registered
                    || state.server.candidates[slot].is_some_and(|c| c.pinged()))
            {
                actions.push(Action::RenewCandidate(id));
            }
            match candidate.phase {
                Phase::Following => actions.push(Action::Follow(id)),
                Phase::Leading { .. } | Phase::Draining { .. } => {
                    if self.check_enabled(state, id) {
                        actions.push(Action::Check(id));
                    }
                    if let Phase::Leading { renewed_at }
                    | Phase::Draining {
                        renewed_at,
                        lost: false,
                        taken: false,
                        ..
                    } = candidate.phase
                        && state.now >= renewed_at + self.timing.renew_deadline
                    {
                        actions.push(Action::Deadline(id));
                    }
                    if matches!(candidate.phase, Phase::Draining { .. }) {
                        actions.push(Action::TasksStopped(id));
                    }
                }
                Phase::Releasing => actions.push(Action::Release(id)),
                Phase::Down { .. } => {
                    // The kubelet starts it again in its Pod, or in the Pod recreated under its
                    // name; none while no Pod of its name exists.
                    if faulty && self.bounds.restarts && !state.server.pods[slot].deleted {
                        actions.push(Action::Restart(id));
                    }
                }
            }
            if faulty && candidate.is_up() && state.crashes < self.bounds.max_crashes {
                actions.push(Action::Crash(id));
            }
            if faulty && state.cut_offs < self.bounds.max_cut_offs {
                actions.push(Action::CutOff(id));
            }
            if faulty
                && state.candidate_deletions < self.bounds.candidate_deletions
                && !candidate.is_up()
                && state.server.candidates[slot].is_some()
            {
                actions.push(Action::DeleteCandidate(id));
            }
            // Only the kubelet of the Pod the process runs in reports on it, while that Pod exists.
            let pod = state.server.pods[slot];
            if self.bounds.pod_liveness
                && !pod.deleted
                && pod.status.uid == candidate.pod
                && pod.status != Self::pod_truth(candidate)
            {
                actions.push(Action::KubeletReports(id));
            }
            if faulty && self.bounds.pod_liveness {
                if pod.deleted {
                    actions.push(Action::RecreatePod(id));
                } else if state.pod_deletions < self.bounds.pod_deletions {
                    actions.push(Action::DeletePod(id));
                }
            }
        }
    }

    /// The actions of controller replica `r`: its watches while its process runs, its steps
    /// while it leads, its elector with two or more replicas, its restarts and crashes.
    fn replica_actions(&self, state: &State, r: ReplicaId, actions: &mut Vec<Action>) {
        let faulty = self.faulty(state);
        let slot = usize::from(r);
        let phase = state.replicas.get(slot).map(|replica| replica.phase);
        if phase != Some(ReplicaPhase::Down) {
            let controller = &state.controllers[slot];
            // A deletion is always delivered, once (a watch skips versions, not a deletion), even
            // of a Lease whose creation it has not delivered (its ADDED and DELETED events both
            // come).
            if controller.delivered != state.server.lease || controller.deletion.is_some() {
                actions.push(Action::WatchLease(r));
            }
            for id in self.ids() {
                let at = usize::from(id);
                if controller.candidates[at] != state.server.candidates[at] {
                    actions.push(Action::WatchCandidate(r, id));
                }
                if self.bounds.pod_liveness
                    && (controller.pods[at] != state.server.pods[at].live()
                        || controller.pod_deletions[at].is_some())
                {
                    actions.push(Action::WatchPod(r, id));
                }
            }
            if controller.rereading.is_some() {
                // The step under way reads the Lease before anything else of it runs.
                actions.push(Action::ReadAfterConflict(r));
            } else if self.is_leading(state, slot) && !controller.deleted_ahead {
                // `reconcile_key`: no step runs on a Lease read deleted ahead of the watch.
                actions.push(Action::Step(r));
            }
        }
        let restarts_left = state.controller_restarts < self.bounds.max_controller_restarts;
        match phase {
            None => {
                if faulty && restarts_left {
                    actions.push(Action::RestartController(r));
                }
            }
            Some(ReplicaPhase::Down) => {
                if faulty {
                    actions.push(Action::RestartController(r));
                }
            }
            Some(ReplicaPhase::Following) => actions.push(Action::FollowOwnLease(r)),
            Some(ReplicaPhase::Leading { .. }) => {
                if self.check_own_enabled(state, slot) {
                    actions.push(Action::CheckOwnLease(r));
                }
            }
        }
        if faulty && restarts_left && phase.is_some_and(|p| p != ReplicaPhase::Down) {
            actions.push(Action::CrashController(r));
        }
    }

    /// What the kubelet reports of `candidate`'s container once it has caught up, with its
    /// times by the node's clock (the candidate's).
    fn pod_truth(candidate: &Candidate) -> PodStatus {
        let (terminated, at) = match candidate.phase {
            Phase::Down { since } => (true, since + candidate.clock_offset),
            _ => (false, candidate.started_at),
        };
        PodStatus {
            uid: candidate.pod,
            container: candidate.incarnation,
            terminated,
            at,
        }
    }

    fn apply(&self, state: &mut State, action: Action) {
        let now = state.now;
        match action {
            Action::Tick => state.now += 1,
            Action::WatchLease(r) => {
                let r = usize::from(r);
                // `own_writes.rs` `observed`, `observed_deletion`: the cache is the truth again.
                let controller = &mut state.controllers[r];
                controller.deleted_ahead = false;
                controller.deleted_by_watch = state.server.lease.is_none()
                    && (controller.deletion.is_some() || controller.deleted_by_watch);
                if let Some(deleted) = state.controllers[r].deletion.take() {
                    // `Renewals::deleted`: the event carries the Lease as stored when deleted.
                    state.controllers[r]
                        .memory
                        .deleted(&deleted.record(), timestamp(now));
                }
                state.controllers[r].delivered = state.server.lease;
                state.controllers[r].lease = state.server.lease;
                if let Some(lease) = state.server.lease {
                    state.controllers[r]
                        .memory
                        .watched(&lease.record(), timestamp(now));
                }
            }
            Action::WatchCandidate(r, id) => {
                let r = usize::from(r);
                let slot = usize::from(id);
                state.controllers[r].candidates[slot] = state.server.candidates[slot];
            }
            Action::RestartController(r) => {
                let r = usize::from(r);
                if let Some(replica) = state.replicas.get_mut(r) {
                    // It starts again and contends once its caches have synced (the relist).
                    *replica = Replica {
                        phase: ReplicaPhase::Following,
                        observed: None,
                    };
                } else {
                    state.controller_restarts += 1;
                }
                // A new process: it forgets everything (watched renewals, deletions, sit-outs,
                // reports, tombstones, reads ahead of the watch) and lists every object. A Lease
                // missing from its first list counts as possibly held for a hold after it
                // (`Renewals::first_listed`): it may have been deleted, unseen, while its holder
                // led (issue 47, finding 2).
                let listed = state.server.lease;
                let n = self.bounds.candidates;
                let mut memory = LeaseMemory::default();
                if let Some(lease) = listed {
                    memory.listed(&lease.record(), timestamp(now));
                }
                state.controllers[r] = Controller {
                    delivered: listed,
                    lease: listed,
                    candidates: state.server.candidates.clone(),
                    memory,
                    pods: state.server.pods.iter().map(StoredPod::live).collect(),
                    tombstones: vec![None; n],
                    pod_deletions: vec![None; n],
                    reported: None,
                    deletion: None,
                    unseen_held_until: Some(now + self.unseen_lease_hold()),
                    deleted_by_watch: false,
                    deleted_ahead: false,
                    rereading: None,
                };
            }
            Action::Step(r) => self.step(state, usize::from(r)),
            Action::FollowOwnLease(r) => self.follow_own_lease(state, usize::from(r)),
            Action::CheckOwnLease(r) => self.check_own_lease(state, usize::from(r)),
            Action::CrashController(r) => {
                state.controller_restarts += 1;
                state.replicas[usize::from(r)] = Replica {
                    phase: ReplicaPhase::Down,
                    observed: None,
                };
            }
            Action::RenewCandidate(id) => {
                let slot = usize::from(id);
                let at = Self::local_time(state, id);
                let process = state.candidates[slot].incarnation;
                let pod = state.candidates[slot].pod;
                state.server.candidates[slot] = Some(match state.server.candidates[slot] {
                    Some(current) => StoredCandidate {
                        resource_version: current.resource_version + 1,
                        renew_time: at,
                        ping_pending: false,
                        process,
                        pod,
                        ..current
                    },
                    None => StoredCandidate {
                        resource_version: 1,
                        renew_time: at,
                        ping_time: None,
                        ping_pending: false,
                        process,
                        pod,
                    },
                });
                state.candidates[slot].registered = true;
                state.unanswered_pings[slot] = 0;
            }
            Action::Follow(id) => self.follow(state, id),
            Action::Check(id) => self.check(state, id),
            Action::Deadline(id) => {
                let candidate = &mut state.candidates[usize::from(id)];
                candidate.phase = match candidate.phase {
                    Phase::Leading { renewed_at } => Phase::Draining {
                        renewed_at,
                        since: now,
                        lost: true,
                        taken: false,
                    },
                    Phase::Draining {
                        renewed_at,
                        since,
                        taken,
                        ..
                    } => Phase::Draining {
                        renewed_at,
                        since,
                        lost: true,
                        taken,
                    },
                    phase => phase,
                };
            }
            Action::TasksStopped(id) => {
                let candidate = &mut state.candidates[usize::from(id)];
                if let Phase::Draining { lost, .. } = candidate.phase {
                    candidate.phase = if lost {
                        Phase::Following
                    } else {
                        Phase::Releasing
                    };
                }
            }
            Action::Release(id) => {
                if let Some(current) = state.server.lease.filter(|l| l.holder == Some(id))
                    && Self::release(state, id, current)
                {
                    state.handed_off = true;
                }
                state.candidates[usize::from(id)].phase = Phase::Following;
            }
            Action::Crash(id) => {
                state.crashes += 1;
                let candidate = &mut state.candidates[usize::from(id)];
                candidate.phase = Phase::Down { since: now };
                candidate.registered = false;
                candidate.observed = None;
            }
            Action::Restart(id) => {
                let candidate = &mut state.candidates[usize::from(id)];
                candidate.phase = Phase::Following;
                if self.bounds.pod_liveness {
                    candidate.incarnation += 1;
                    candidate.started_at = now + candidate.clock_offset;
                    candidate.pod = state.server.pods[usize::from(id)].status.uid;
                }
            }
            Action::CutOff(id) => {
                state.cut_offs += 1;
                state.candidates[usize::from(id)].cut_off_until = now + self.cut_off_for();
            }
            Action::DeleteLease => {
                state.lease_deletions += 1;
                let deleted = state.server.lease.take().map(|l| StoredLease {
                    resource_version: 0,
                    ..l
                });
                for controller in &mut state.controllers {
                    controller.deletion = deleted;
                }
            }
            Action::DeleteCandidate(id) => {
                state.candidate_deletions += 1;
                state.server.candidates[usize::from(id)] = None;
            }
            Action::KubeletReports(id) => {
                let slot = usize::from(id);
                state.server.pods[slot].status = Self::pod_truth(&state.candidates[slot]);
            }
            Action::WatchPod(r, id) => {
                let r = usize::from(r);
                let slot = usize::from(id);
                let controller = &mut state.controllers[r];
                // `pods.rs` `follow`: a deletion event's Pod is kept as a tombstone.
                if let Some(deleted) = controller.pod_deletions[slot].take() {
                    controller.tombstones[slot] = Some(deleted);
                }
                controller.pods[slot] = state.server.pods[slot].live();
                let holder = state.server.lease.and_then(|l| l.holder);
                if now >= self.bounds.faults_until
                    && self.is_leading(state, r)
                    && state.holder_reported_at.is_none()
                    && holder == Some(id)
                    && !state.candidates[slot].is_up()
                    && state.server.candidates[slot].is_some_and(|c| {
                        process_dead(
                            c.process,
                            c.pod,
                            state.controllers[r].pod_report(slot, c.pod),
                        )
                    })
                {
                    state.holder_reported_at = Some(now);
                }
            }
            Action::DeletePod(id) => {
                let slot = usize::from(id);
                state.pod_deletions += 1;
                let stored = &mut state.server.pods[slot];
                stored.deleted = true;
                let deleted = stored.status;
                for controller in &mut state.controllers {
                    controller.pod_deletions[slot] = Some(deleted);
                }
            }
            Action::RecreatePod(id) => {
                let stored = &mut state.server.pods[usize::from(id)];
                *stored = StoredPod {
                    status: PodStatus {
                        uid: stored.status.uid + 1,
                        ..PodStatus::default()
                    },
                    deleted: false,
                };
            }
            Action::ReadAfterConflict(r) => self.read_after_conflict(state, usize::from(r)),
        }
    }

    fn successor(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        self.apply(&mut next, action);
        self.end_lapsed_terms(&mut next);
        self.settle_own_lease(&mut next);
        next.canonicalize();
        (next != *state).then_some(next)
    }

    /// The best candidate whose process runs and that does not sit out the Lease's elections
    /// (it was written as holder and never renewed, `plan::never_renewed_holder`), if any.
    #[must_use]
    pub fn best_live(&self, state: &State) -> Option<Id> {
        self.ids().find(|id| {
            state.candidates[usize::from(*id)].is_up()
                && !state.controllers[Self::active(state)]
                    .memory
                    .sits_out(&identity(*id), timestamp(state.now))
        })
    }
}

impl Model for Election {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.bounds.candidates;
        let skew = self.timing.max_clock_skew;
        let mut offsets: Vec<Vec<i16>> = vec![Vec::new()];
        for _ in 0..n {
            offsets = offsets
                .into_iter()
                .flat_map(|prefix| {
                    (-skew..=skew).map(move |offset| {
                        let mut next = prefix.clone();
                        next.push(offset);
                        next
                    })
                })
                .collect();
        }
        let controller = Controller {
            delivered: None,
            lease: None,
            candidates: vec![None; n],
            memory: LeaseMemory::default(),
            pods: vec![Some(PodStatus::default()); n],
            tombstones: vec![None; n],
            pod_deletions: vec![None; n],
            reported: None,
            deletion: None,
            unseen_held_until: None,
            deleted_by_watch: false,
            deleted_ahead: false,
            rereading: None,
        };
        offsets
            .into_iter()
            .map(|offsets| State {
                now: 0,
                server: Server {
                    lease: None,
                    candidates: vec![None; n],
                    pods: vec![StoredPod::default(); n],
                    own_lease: None,
                },
                controllers: vec![controller.clone(); self.bounds.replicas],
                replicas: if self.bounds.replicas > 1 {
                    vec![
                        Replica {
                            phase: ReplicaPhase::Following,
                            observed: None,
                        };
                        self.bounds.replicas
                    ]
                } else {
                    Vec::new()
                },
                candidates: offsets
                    .into_iter()
                    .map(|clock_offset| Candidate {
                        phase: Phase::Following,
                        registered: false,
                        observed: None,
                        clock_offset,
                        cut_off_until: 0,
                        incarnation: 0,
                        started_at: 0,
                        pod: 0,
                    })
                    .collect(),
                crashes: 0,
                cut_offs: 0,
                controller_restarts: 0,
                handed_off: false,
                controller_failed_over: false,
                holder_reported_at: None,
                declared_dead: false,
                candidate_deletions: 0,
                lease_deletions: 0,
                pod_deletions: 0,
                unanswered_pings: vec![0; n],
                violations: Violations::default(),
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.actor_actions(state, actions);
        if state.now >= self.horizon() || self.ids().any(|id| self.timer_due(state, id)) {
            return;
        }
        // After faults stop, every actor acts on what is due before time moves on; tasks stop
        // when they do, within their bound (`timer_due`).
        if self.faulty(state)
            || actions
                .iter()
                .filter(|action| {
                    !matches!(action, Action::TasksStopped(_) | Action::KubeletReports(_))
                })
                .all(|action| self.successor(state, *action).is_none())
        {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.successor(state, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties()
    }
}

/// The name of the check that no two candidates lead at once.
pub const ONE_LEADER: &str = "no two candidates lead at once";
/// The name of the check that every holder written is a live candidate.
pub const HOLDER_LIVE: &str = "the holder written is always a live candidate";
/// The name of the check that pre-emptions are for better candidates only.
pub const PREEMPT_BETTER: &str = "a leader is pre-empted only for a better one";
/// The name of the check that no write based on a stale read is applied.
pub const NO_LOST_UPDATE: &str = "no lost update";
/// The name of the liveness check that the best live candidate leads after faults stop.
pub const BEST_LEADS: &str = "when faults stop, the best live candidate leads within the bound";
/// The name of the liveness check that the Lease is not left leaderless.
pub const NOT_LEADERLESS: &str =
    "when faults stop, the Lease is not leaderless while a live candidate exists";
/// The name of the check that pod liveness declares only a crashed holder dead.
pub const POD_DEAD_ONLY_CRASHED: &str = "pod liveness declares only a crashed holder dead";
/// The name of the check that pod liveness never declares a leading holder dead.
pub const POD_DEAD_NOT_LEADING: &str = "pod liveness never declares a leading holder dead";
/// The name of the liveness check of pod liveness.
pub const POD_FAILOVER: &str =
    "after the kubelet's report of the holder's crash, a live candidate leads within the bound";
/// The name of the sanity check that pod liveness fires.
pub const POD_FIRES: &str = "pod liveness sometimes declares a crashed holder dead";
/// The name of the check that a stale `preferredHolder` does not outlive faults
/// (kubernetes#138066's shape: one naming a deleted candidate left the Lease leaderless).
pub const NO_STALE_PREFERRED: &str =
    "when faults stop, no preferredHolder names a candidate without a LeaseCandidate";
/// The name of the check that no ping loop runs (kubernetes#138067, #138071: dead or deleted
/// candidates pinged forever).
pub const PINGS_BOUNDED: &str =
    "after faults stop, a candidate that does not answer is pinged at most twice";
/// How many pings, after faults stop, a candidate that does not answer may get: one ping per
/// stretch of silence (a candidate unanswered for an ack window is left out until it renews,
/// `plan::liveness`), one more when it released the Lease (a ping sent after the release was
/// watched counts, `plan::liveness_since`).
pub const MAX_UNANSWERED_PINGS: u8 = 2;
/// The name of the check that the controller's writer is gated by its own Lease: every write
/// (a Lease or a ping) is sent by the replica the controller's Lease as stored names, so no two
/// replicas write in overlapping terms.
pub const ONE_WRITER: &str = "at most one controller replica writes at a time";
/// The name of the sanity check that, with two or more replicas, the controller's own Lease
/// changes hands (a failover between replicas is explored).
pub const REPLICAS_FAIL_OVER: &str = "the controller's own Lease sometimes changes hands";
/// The name of the sanity check that the model reaches a graceful hand-off.
pub const HANDS_OFF: &str = "a pre-empted leader sometimes hands the Lease over";

/// The properties checked, each named.
///
/// Liveness is checked as a deadline: every state at or past [`Election::horizon`] must show it
/// (Stateright's `eventually` can miss a path at a join of the state graph; a deadline cannot).
#[must_use]
pub fn properties() -> Vec<Property<Election>> {
    vec![
        Property::always(ONE_LEADER, |_: &Election, state: &State| {
            state.candidates.iter().filter(|c| c.leads()).count() <= 1
        }),
        Property::always(HOLDER_LIVE, |_: &Election, state: &State| {
            !state.violations.holder_not_live
        }),
        Property::always(PREEMPT_BETTER, |_: &Election, state: &State| {
            !state.violations.preempted_for_worse
        }),
        Property::always(NO_LOST_UPDATE, |_: &Election, state: &State| {
            !state.violations.lost_update
        }),
        Property::always(BEST_LEADS, |model: &Election, state: &State| {
            state.now < model.horizon()
                || model.best_live(state).is_none_or(|best| {
                    state.candidates[usize::from(best)].leads()
                        && state.server.lease.and_then(|l| l.holder) == Some(best)
                })
        }),
        Property::always(NOT_LEADERLESS, |model: &Election, state: &State| {
            state.now < model.horizon()
                || model.best_live(state).is_none()
                || state
                    .server
                    .lease
                    .and_then(|l| l.holder)
                    .is_some_and(|holder| state.candidates[usize::from(holder)].leads())
        }),
        Property::sometimes(HANDS_OFF, |_: &Election, state: &State| state.handed_off),
        Property::always(ONE_WRITER, |_: &Election, state: &State| {
            !state.violations.written_without_leadership
        }),
        Property::sometimes(REPLICAS_FAIL_OVER, |model: &Election, state: &State| {
            model.bounds.replicas < 2 || state.controller_failed_over
        }),
        Property::always(NO_STALE_PREFERRED, |model: &Election, state: &State| {
            state.now < model.horizon()
                || state
                    .server
                    .lease
                    .and_then(|l| l.preferred)
                    .is_none_or(|p| state.server.candidates[usize::from(p)].is_some())
        }),
        Property::always(PINGS_BOUNDED, |_: &Election, state: &State| {
            state
                .unanswered_pings
                .iter()
                .all(|count| *count <= MAX_UNANSWERED_PINGS)
        }),
        Property::always(POD_DEAD_ONLY_CRASHED, |_: &Election, state: &State| {
            !state.violations.declared_dead_while_running
        }),
        Property::always(POD_DEAD_NOT_LEADING, |_: &Election, state: &State| {
            !state.violations.declared_dead_while_leading
        }),
        Property::always(POD_FAILOVER, |model: &Election, state: &State| {
            state
                .holder_reported_at
                .is_none_or(|at| state.now < at + model.pod_liveness_bound())
                || model.best_live(state).is_none()
                || state
                    .server
                    .lease
                    .and_then(|l| l.holder)
                    .is_some_and(|holder| state.candidates[usize::from(holder)].leads())
        }),
        Property::sometimes(POD_FIRES, |model: &Election, state: &State| {
            !model.bounds.pod_liveness || state.declared_dead
        }),
    ]
}
