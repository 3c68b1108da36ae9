//! The state of the modelled system: the API server's objects, the controller's caches and its
//! memory of the Lease, and each candidate's process. Compact (small integers, candidates by
//! index) so that the checker can hash millions of states; converted to the core's records for
//! each step. The controller's memory of the Lease (watched renewals, sit-outs, the hold after a
//! deletion) is no copy: it is `conclave_core::memory::LeaseMemory`, the type the controller's
//! index keeps.

use conclave_core::lease::LeaseRecord;
use conclave_core::memory::LeaseMemory;
use conclave_core::request::CandidateView;
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;

/// A candidate, by index: `c0`, `c1`, …
pub type Id = u8;

/// A controller replica, by index: `r0`, `r1`, …
pub type ReplicaId = u8;

/// A point in model time, in seconds.
pub type Time = i16;

/// The Lease's namespace in the model.
pub const NAMESPACE: &str = "ns";

/// The Lease's name in the model.
pub const LEASE: &str = "lease";

/// Model time 0 as a timestamp: far enough from the epoch that a clock behind stays positive.
const EPOCH_SECS: i64 = 1_000;

/// A model time as the core's timestamp.
#[must_use]
pub fn timestamp(time: Time) -> Timestamp {
    Timestamp::from_secs(EPOCH_SECS + i64::from(time))
}

/// A core timestamp as model time, whole seconds cut down.
#[must_use]
pub fn model_time(at: Timestamp) -> Time {
    let secs = at.as_micros().div_euclid(1_000_000) - EPOCH_SECS;
    Time::try_from(secs).unwrap_or(Time::MAX)
}

/// The identity of candidate `id`, as written into `holderIdentity`.
#[must_use]
pub fn identity(id: Id) -> String {
    format!("c{id}")
}

/// The candidate an identity names, if it is one of the model's.
#[must_use]
pub fn id_of(identity: &str) -> Option<Id> {
    identity.strip_prefix('c')?.parse().ok()
}

/// The emulation version candidate `id` announces: `c0` is the oldest, so it ranks best.
#[must_use]
pub fn emulation_version(id: Id) -> String {
    format!("1.{}.0", 30 + u32::from(id))
}

/// What candidate `id` announces in its LeaseCandidate (name, versions, strategy), without times.
#[must_use]
pub fn announced(id: Id) -> CandidateView {
    CandidateView {
        name: identity(id),
        binary_version: emulation_version(2),
        emulation_version: emulation_version(id),
        strategy: OLDEST_EMULATION_VERSION.into(),
        ..CandidateView::default()
    }
}

/// The Lease as the API server stores it (the fields the election reads and writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoredLease {
    /// `metadata.resourceVersion`.
    pub resource_version: u8,
    /// `spec.holderIdentity`; `None`: absent or empty (released).
    pub holder: Option<Id>,
    /// `spec.preferredHolder`.
    pub preferred: Option<Id>,
    /// `spec.renewTime`, by the writer's clock.
    pub renew_time: Time,
    /// `spec.acquireTime`, by the writer's clock.
    pub acquire_time: Time,
    /// `spec.leaseDurationSeconds`.
    pub duration: i16,
    /// Whether the holder stamped `renewTime` (and not the controller): half a second later
    /// than the second it is in, as a candidate's renewal always comes after the write that made
    /// it holder, however fast.
    pub renewed_by_holder: bool,
    /// Whether the holder stamped `acquireTime` (its release).
    pub acquired_by_holder: bool,
}

/// Half a second: how much later than the whole second a holder's stamp is.
const HOLDER_STAMP: core::time::Duration = core::time::Duration::from_millis(500);

/// A time stamped at `time`, by the holder (half a second in) or by the controller.
#[must_use]
pub fn stamp(time: Time, by_holder: bool) -> Timestamp {
    if by_holder {
        timestamp(time) + HOLDER_STAMP
    } else {
        timestamp(time)
    }
}

/// Whether a core timestamp carries a holder's stamp ([`stamp`]).
#[must_use]
pub fn stamped_by_holder(at: Option<Timestamp>) -> bool {
    at.is_some_and(|at| at.as_micros().rem_euclid(1_000_000) != 0)
}

impl StoredLease {
    /// The core's record of this Lease (without what only the controller's watch knows).
    #[must_use]
    pub fn record(&self) -> LeaseRecord {
        LeaseRecord {
            namespace: NAMESPACE.into(),
            name: LEASE.into(),
            resource_version: self.resource_version.to_string(),
            holder_identity: Some(self.holder.map(identity).unwrap_or_default()),
            preferred_holder: self.preferred.map(identity),
            strategy: Some(OLDEST_EMULATION_VERSION.into()),
            lease_duration_seconds: Some(i32::from(self.duration)),
            renew_time: Some(stamp(self.renew_time, self.renewed_by_holder)),
            acquire_time: Some(stamp(self.acquire_time, self.acquired_by_holder)),
            lease_transitions: Some(0),
            elected_by_conclave: true,
            ..LeaseRecord::default()
        }
    }
}

/// A LeaseCandidate as the API server stores it (the fields that change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoredCandidate {
    /// `metadata.resourceVersion`.
    pub resource_version: u8,
    /// `spec.renewTime`, by the candidate's clock.
    pub renew_time: Time,
    /// `spec.pingTime`, by the controller's clock.
    pub ping_time: Option<Time>,
    /// Whether a ping of pod liveness (sent whatever the candidate's freshness, so possibly later
    /// in the same second as a renewal, which whole-second times cannot tell apart) is the last
    /// write and unanswered. Other pings are only sent to a stale candidate, and whether they are
    /// answered is read from the times, as the candidate and the controller read it.
    pub ping_pending: bool,
    /// The process the candidate's annotations record (its container ID and start): which
    /// start of the candidate ([`Candidate::incarnation`]) last wrote the object.
    pub process: u8,
    /// The UID of the Pod its ownerReference names ([`Candidate::pod`] of the start that last
    /// wrote the object).
    pub pod: u8,
}

impl StoredCandidate {
    /// The core's view of candidate `id`'s LeaseCandidate.
    #[must_use]
    pub fn view(&self, id: Id) -> CandidateView {
        CandidateView {
            renew_time: Some(timestamp(self.renew_time)),
            ping_time: self.ping_time.map(timestamp),
            ..announced(id)
        }
    }

    /// Whether a ping is unanswered (`pingTime` after `renewTime`), as the candidate reads it.
    #[must_use]
    pub fn pinged(&self) -> bool {
        self.ping_pending || self.ping_time.is_some_and(|ping| ping > self.renew_time)
    }
}

/// A candidate's Pod (`core::pod::PodReport`): its UID and what the kubelet reports of the
/// candidate's container in `status.containerStatuses[]`: which start of the candidate
/// ([`Candidate::incarnation`]) runs in the current container, whether that container is reported
/// terminated, and when it started or finished. A later start implies that every earlier one was
/// reported terminated (`lastState`), or replaced by an instance started after it. A Pod
/// recreated under the same name (a new UID) shows no status until a start of the candidate runs
/// in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PodStatus {
    /// `metadata.uid`, by count: 0 is the Pod every candidate starts in, each Pod recreated under
    /// the same name one more.
    pub uid: u8,
    /// The start of the candidate in the current container.
    pub container: u8,
    /// Whether the current container is reported terminated.
    pub terminated: bool,
    /// `finishedAt` of the current container when it is terminated, its `startedAt` otherwise,
    /// by the node's clock (the candidate's: it stamps the candidate's `renewTime`), whole
    /// seconds cut down (`pods.rs` `dead_since`).
    pub at: Time,
}

/// `conclave_core::pod::process_dead` on the model's records: whether `pod` (what the controller
/// knows of the Pod the record names, [`Controller::pod_report`]) proves that the process of
/// start `process` in the Pod of UID `pod_uid` (as its LeaseCandidate records them, container ID
/// included) stopped: its container is reported terminated, or another instance of it, in the
/// same Pod, started after it. Nothing known of the Pod (it is gone, or another Pod has its
/// name) proves nothing: another Pod's containers never carry the recorded container ID.
#[must_use]
pub fn process_dead(process: u8, pod_uid: u8, pod: Option<PodStatus>) -> bool {
    pod.is_some_and(|pod| {
        pod.uid == pod_uid
            && (pod.container > process || (pod.container == process && pod.terminated))
    })
}

/// A candidate's Pod as the API server stores it: its last status, and whether the object still
/// exists (deleted, it keeps the UID the next Pod of its name counts from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StoredPod {
    /// The Pod's UID and the kubelet's last report on it.
    pub status: PodStatus,
    /// Whether it was deleted (and not recreated since).
    pub deleted: bool,
}

impl StoredPod {
    /// The Pod as a list or a watch shows it: `None` while none of that name exists.
    #[must_use]
    pub const fn live(&self) -> Option<PodStatus> {
        if self.deleted {
            None
        } else {
            Some(self.status)
        }
    }
}

/// The API server: one Lease and one LeaseCandidate slot per candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Server {
    /// The Lease; `None` until it is created.
    pub lease: Option<StoredLease>,
    /// Each candidate's LeaseCandidate; `None` until it registers.
    pub candidates: Vec<Option<StoredCandidate>>,
    /// Each candidate's Pod, as the kubelet last reported it.
    pub pods: Vec<StoredPod>,
    /// The controller's own Lease (with two or more replicas); `None` until a replica creates it.
    pub own_lease: Option<OwnLease>,
}

/// The controller's own Lease as the API server stores it (`conclave-controller` in the
/// controller's namespace): who holds it. Its `leaseDurationSeconds` is always the model's
/// lease duration, and no replica releases it (a graceful shutdown is not modelled: a replica
/// stops by crashing), so the holder and the resourceVersion are all that change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnLease {
    /// `metadata.resourceVersion`.
    pub resource_version: u8,
    /// `spec.holderIdentity`.
    pub holder: ReplicaId,
}

/// Where a controller replica's process stands in the election of the controller's own Lease
/// (`conclave-candidate`'s classic elector, run by `run.rs` `run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicaPhase {
    /// Crashed: no watch, no write.
    Down,
    /// Following: its caches stay warm, its writer refuses every write.
    Following,
    /// Leading a term: its workers step and its writer sends (`leadership.rs` `is_leading`).
    Leading {
        /// When it last renewed the controller's Lease (its monotonic clock: when the write was
        /// sent); the term ends at this plus the renew deadline unless renewed again.
        renewed_at: Time,
    },
}

/// One controller replica's elector: its phase and what it observed of the controller's Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replica {
    /// What it is doing.
    pub phase: ReplicaPhase,
    /// The controller Lease's resourceVersion as it last read it, and when it first read that
    /// version (the elector's `Observed`: expiry is judged from its own observation).
    pub observed: Option<(u8, Time)>,
}

/// The controller: its cached copies of the objects (each as last delivered by its watch, or its
/// own write until the next watch event) and its index entry for the Lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Controller {
    /// The Lease as its watch last delivered it; `None`: not delivered yet.
    pub delivered: Option<StoredLease>,
    /// The cached Lease: the delivered one, or this controller's own write of it until the watch
    /// delivers the next event (read-your-writes, `own_writes.rs`).
    pub lease: Option<StoredLease>,
    /// The cached LeaseCandidates.
    pub candidates: Vec<Option<StoredCandidate>>,
    /// What the controller's index remembers of the Lease, the real `conclave-core` type that
    /// `index.rs` `Renewals` keeps by key: its watched renewal, the sit-outs of holders that never
    /// renewed, and until when its holder may lead after a deletion.
    pub memory: LeaseMemory,
    /// The cached Pods (`pods.rs`: its own watch, delivered late and apart from the
    /// LeaseCandidates'); `None`: none of that name.
    pub pods: Vec<Option<PodStatus>>,
    /// Per candidate, the last state of its Pod whose deletion this controller's watch delivered
    /// (`pods.rs` `Tombstones`, by UID; kept longer than any run).
    pub tombstones: Vec<Option<PodStatus>>,
    /// Per candidate, the deletion of its Pod not yet delivered by this controller's Pod watch:
    /// the Pod as stored when deleted (what the DELETED event carries).
    pub pod_deletions: Vec<Option<PodStatus>>,
    /// The holder the kubelet reported dead (`pods.rs` `Reported`), if any.
    pub reported: Option<Reported>,
    /// The Lease as stored when it was last deleted, until this controller's watch delivers the
    /// deletion (what its DELETED event carries) or a relist passes it over.
    pub deletion: Option<StoredLease>,
    /// Until when a Lease missing from this process's first list, and not seen since, counts as
    /// possibly held (`index.rs` `Renewals::first_listed`, `held_after_deletion`): set by a
    /// restart, which forgets everything; `None` at the model's start (no Lease existed before).
    pub unseen_held_until: Option<Time>,
    /// Whether this controller's latest Lease watch event is the Lease's deletion
    /// (`own_writes.rs` `deleted_by_watch`).
    pub deleted_by_watch: bool,
    /// Whether a read after a write conflict found the Lease deleted ahead of the watch
    /// (`own_writes.rs` `Known::Deleted`): no step runs until the watch delivers a Lease event.
    pub deleted_ahead: bool,
    /// A step's write refused as a conflict whose re-read is still to come, with the attempts
    /// left (split from the write with [`crate::timing::Bounds::lease_deletions`] only, so that
    /// the Lease may be deleted, and the deletion watched, in between).
    pub rereading: Option<u8>,
}

impl Controller {
    /// `pods.rs` `PodLiveness::report`: what this controller knows of the Pod of UID `uid` that a
    /// LeaseCandidate names: the cached Pod of that name when it is that Pod, else the Pod's last
    /// state when its deletion was watched, else the cached Pod of that name (another Pod).
    #[must_use]
    pub fn pod_report(&self, slot: usize, uid: u8) -> Option<PodStatus> {
        let cached = self.pods[slot];
        cached
            .filter(|pod| pod.uid == uid)
            .or_else(|| self.tombstones[slot].filter(|pod| pod.uid == uid))
            .or(cached)
    }
}

/// A holder reported dead (`pods.rs` `Reported`): pinged when first seen, declared dead
/// [`crate::model::ANSWER_GRACE`] later unless it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reported {
    /// The holder.
    pub holder: Id,
    /// When the controller first saw the report.
    pub seen_at: Time,
    /// Pings sent at or after this time count as asked since the report (the ping sent when it
    /// was seen).
    pub asked_since: Time,
    /// Whether the holder answered or renewed since (it lives: the report is not acted on).
    pub answered: bool,
}

/// Where a candidate's process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Crashed, since `since`.
    Down {
        /// When it crashed.
        since: Time,
    },
    /// Following: not leading.
    Following,
    /// Leading a term.
    Leading {
        /// When it last renewed the Lease (its monotonic clock: when the write was sent).
        renewed_at: Time,
    },
    /// The term was cancelled; its tasks are stopping.
    Draining {
        /// When it last renewed the Lease.
        renewed_at: Time,
        /// When the term's token was cancelled.
        since: Time,
        /// Whether the Lease counts as lost (no renewal, no release).
        lost: bool,
        /// Whether another holder was named or the Lease was gone (the tasks are aborted at once).
        taken: bool,
    },
    /// The term's tasks stopped after a pre-emption; the Lease is to be released.
    Releasing,
}

/// One candidate process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// What it is doing.
    pub phase: Phase,
    /// Whether it wrote its LeaseCandidate since it (re)started.
    pub registered: bool,
    /// The Lease's resourceVersion as it last read it, and when it first read that version
    /// (the elector's `Observed`: a follower trusts only its own observation time).
    pub observed: Option<(u8, Time)>,
    /// Its wall clock's offset from the controller's (stamps `renewTime`).
    pub clock_offset: i16,
    /// Until when its Lease writes fail (a cut-off fault).
    pub cut_off_until: Time,
    /// Which start of the process this is (counted only with pod liveness, whose records
    /// tell one start from the next).
    pub incarnation: u8,
    /// When this start of the process began, by its own clock (the node's; only with pod
    /// liveness, for the kubelet's `startedAt`).
    pub started_at: Time,
    /// The UID of the Pod this start of the process runs in ([`PodStatus::uid`]).
    pub pod: u8,
}

impl Candidate {
    /// Whether its work runs: it leads from when it sees itself as holder until its drain ends.
    #[must_use]
    pub const fn leads(&self) -> bool {
        matches!(self.phase, Phase::Leading { .. } | Phase::Draining { .. })
    }

    /// Whether its process runs.
    #[must_use]
    pub const fn is_up(&self) -> bool {
        !matches!(self.phase, Phase::Down { .. })
    }
}

/// Broken properties, recorded when the write that breaks them is applied (ghost state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Violations {
    /// A holder was written that is not a live candidate.
    pub holder_not_live: bool,
    /// A holder was pre-empted for a candidate that does not rank better.
    pub preempted_for_worse: bool,
    /// A write based on a stale read was applied.
    pub lost_update: bool,
    /// Pod liveness declared a holder dead (`holder_dead`) whose process runs.
    pub declared_dead_while_running: bool,
    /// Pod liveness declared a holder dead (`holder_dead`) whose process leads.
    pub declared_dead_while_leading: bool,
    /// A controller replica wrote (a Lease or a ping) while the controller's own Lease as stored
    /// did not name it.
    pub written_without_leadership: bool,
}

/// The whole system at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The true time, which is also the controller's clock.
    pub now: Time,
    /// The API server.
    pub server: Server,
    /// The controller replicas' watches and caches, by replica.
    pub controllers: Vec<Controller>,
    /// The controller replicas' electors, by replica; empty with one replica (it always leads).
    pub replicas: Vec<Replica>,
    /// The candidates, by index.
    pub candidates: Vec<Candidate>,
    /// Candidate crashes so far.
    pub crashes: u8,
    /// Cut-offs of a candidate's Lease writes so far.
    pub cut_offs: u8,
    /// Controller restarts so far.
    pub controller_restarts: u8,
    /// A pre-empted leader released the Lease (for the sanity check that hand-offs are explored).
    pub handed_off: bool,
    /// A controller replica took over the controller's own Lease from another (for the sanity
    /// check that failovers between replicas are explored).
    pub controller_failed_over: bool,
    /// When the controller's Pod watch, after faults stopped, delivered the kubelet's report
    /// that the holder's process stopped (for the liveness bound of pod liveness).
    pub holder_reported_at: Option<Time>,
    /// Pod liveness declared a crashed holder dead (for the sanity check that it fires).
    pub declared_dead: bool,
    /// LeaseCandidates deleted so far.
    pub candidate_deletions: u8,
    /// Lease deletions so far.
    pub lease_deletions: u8,
    /// Pod deletions so far.
    pub pod_deletions: u8,
    /// Per candidate, the pings written to its LeaseCandidate after faults stopped and since it
    /// last wrote it (counted with [`crate::timing::Bounds::candidate_deletions`] only, up to
    /// one more than [`crate::model::MAX_UNANSWERED_PINGS`]).
    pub unanswered_pings: Vec<u8>,
    /// Broken properties.
    pub violations: Violations,
}

/// The resourceVersion [`State::canonicalize`] gives every object as stored.
const CURRENT: u8 = 1;

/// The resourceVersion [`State::canonicalize`] gives every copy older than the stored object.
const STALE: u8 = 0;

/// `version` relabelled against the stored `current`: [`CURRENT`] or [`STALE`].
fn relabel(version: u8, current: Option<u8>) -> u8 {
    if Some(version) == current {
        CURRENT
    } else {
        STALE
    }
}

impl State {
    /// Relabels resourceVersions so that states differing only in how many writes led to them
    /// are one state (and forgets a restart's hold once it has ended): every stored object is at [`CURRENT`], every copy of an older version at
    /// [`STALE`]. Only equality with the stored version is ever compared (a precondition, a
    /// watch that has something to deliver), and an older version never becomes current again,
    /// so no behaviour is lost.
    pub fn canonicalize(&mut self) {
        let lease = self.server.lease.map(|l| l.resource_version);
        let now = self.now;
        for controller in &mut self.controllers {
            // A hold that has ended never counts again (time only moves on).
            controller.unseen_held_until =
                controller.unseen_held_until.filter(|until| *until > now);
            for cached in [&mut controller.lease, &mut controller.delivered]
                .into_iter()
                .flatten()
            {
                cached.resource_version = relabel(cached.resource_version, lease);
            }
        }
        let own = self.server.own_lease.map(|l| l.resource_version);
        for replica in &mut self.replicas {
            if let Some((version, _)) = replica.observed.as_mut() {
                *version = relabel(*version, own);
            }
        }
        if let Some(stored) = self.server.own_lease.as_mut() {
            stored.resource_version = CURRENT;
        }
        for candidate in &mut self.candidates {
            if let Some((version, _)) = candidate.observed.as_mut() {
                *version = relabel(*version, lease);
            }
        }
        if let Some(stored) = self.server.lease.as_mut() {
            stored.resource_version = CURRENT;
        }
        for (slot, stored) in self.server.candidates.iter_mut().enumerate() {
            let current = stored.map(|s| s.resource_version);
            for controller in &mut self.controllers {
                if let Some(cached) = controller.candidates[slot].as_mut() {
                    cached.resource_version = relabel(cached.resource_version, current);
                }
            }
            if let Some(stored) = stored.as_mut() {
                stored.resource_version = CURRENT;
            }
        }
    }
}

impl core::fmt::Display for State {
    /// One line: the time, the stored Lease, each candidate's process and LeaseCandidate.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = |id: Option<Id>| id.map_or_else(|| "-".to_owned(), identity);
        write!(f, "t={}", self.now)?;
        match self.server.lease {
            Some(l) => write!(
                f,
                " lease[holder={} preferred={} renew={} acquire={} duration={}]",
                name(l.holder),
                name(l.preferred),
                l.renew_time,
                l.acquire_time,
                l.duration
            )?,
            None => write!(f, " lease[missing]")?,
        }
        for (r, controller) in self.controllers.iter().enumerate() {
            if controller.lease != self.server.lease {
                write!(f, " (r{r}'s copy stale)")?;
            }
        }
        for (r, replica) in self.replicas.iter().enumerate() {
            write!(f, " r{r}:{:?}", replica.phase)?;
            if self
                .server
                .own_lease
                .is_some_and(|l| usize::from(l.holder) == r)
            {
                write!(f, "[holds]")?;
            }
        }
        for (id, candidate) in self.candidates.iter().enumerate() {
            write!(f, " c{id}:{:?}", candidate.phase)?;
            if candidate.incarnation > 0 {
                write!(f, "#{}", candidate.incarnation)?;
            }
            if let Some(Some(c)) = self.server.candidates.get(id) {
                write!(f, "[renew={} ping={:?}", c.renew_time, c.ping_time)?;
                if c.ping_pending {
                    write!(f, " pending")?;
                }
                if c.process > 0 {
                    write!(f, " process=#{}", c.process)?;
                }
                if c.pod > 0 {
                    write!(f, " pod={}", c.pod)?;
                }
                write!(f, "]")?;
            }
            if let Some(stored) = self
                .server
                .pods
                .get(id)
                .filter(|p| **p != StoredPod::default())
            {
                let pod = stored.status;
                write!(
                    f,
                    "[pod uid={}{} #{}{} at {}]",
                    pod.uid,
                    if stored.deleted { " deleted" } else { "" },
                    pod.container,
                    if pod.terminated {
                        " terminated"
                    } else {
                        " started"
                    },
                    pod.at
                )?;
            }
        }
        for (r, controller) in self.controllers.iter().enumerate() {
            for (candidate, strikes) in controller.memory.strikes() {
                write!(
                    f,
                    " r{r}:{candidate}-sits-out[strikes={} until={}]",
                    strikes.count,
                    model_time(strikes.until)
                )?;
            }
            if let Some(reported) = controller.reported {
                write!(
                    f,
                    " r{r}:reported[c{} seen={} asked_since={} answered={}]",
                    reported.holder, reported.seen_at, reported.asked_since, reported.answered
                )?;
            }
        }
        if self.violations != Violations::default() {
            write!(f, " {:?}", self.violations)?;
        }
        Ok(())
    }
}
