//! The elector: follow the Lease, lead while it names this identity, end each term gracefully.
//!
//! A leader never acts after it could be considered expired. Validity is judged with the local
//! monotonic clock: a renewal sent at `t` keeps this instance leading until `t + renew_deadline`,
//! while nobody else may consider the Lease expired before `t + lease_duration` (they measure
//! from a write they observed after `t`). A follower judges expiry from the moment it observed
//! the record change, never from remote timestamps (client-go's `observedTime`).

use crate::candidate::{Candidate, CandidateHandle};
use crate::config::{
    CandidateConfig, DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_CONTROLLER_TIMEOUT, DEFAULT_DRAIN_TIMEOUT,
    LeaseConfig,
};
use crate::error::{Error, Result};
use crate::lock::{LeaseLock, Write};
use crate::metrics::{ElectorMetrics, Operation};
use crate::term::{Term, TermLease};
use crate::time::MonotonicTime;
use crate::warm::{CacheSync, WarmCache};
use conclave_core::k8s::{self, lease_record};
use conclave_core::lease::LeaseRecord;
use conclave_core::time::Timestamp;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::runtime::reflector::Lookup;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long aborted (leaked) tasks get to unwind before the release is skipped; and how long
/// before the Lease could expire the tasks of a lost term are aborted, at most (half of what is
/// left of the Lease when it is lost, if that is less: [`abort_before_expiry`]).
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// When the tasks of a term whose Lease was lost at `lost_at` are aborted: before `expiry`, by
/// [`ABORT_GRACE`] or by half of what was left of the Lease when it was lost, whichever is less,
/// so that they have stopped by the time anyone may lead and still had time to stop on their
/// own (a 3 s Lease lost at its 2 s renew deadline drains 0.5 s, then is aborted).
fn abort_before_expiry(expiry: Instant, lost_at: Instant) -> Instant {
    let left = expiry.saturating_duration_since(lost_at);
    expiry
        .checked_sub(ABORT_GRACE.min(left / 2))
        .unwrap_or(expiry)
}

/// Capacity of the transition channel; slow subscribers miss the oldest transitions.
const TRANSITION_BUFFER: usize = 256;

/// What this instance is doing with the Lease.
///
/// Serializes as `{"state": "leading", "term": 3}` (`following`, `leading`, `draining`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum LeaderState {
    /// Not leading (healthy; a follower allocates nothing for a term).
    Following,
    /// Leading term `term`.
    Leading {
        /// The term number.
        term: u64,
    },
    /// Term `term` was cancelled; its tasks are stopping and the Lease is still held.
    Draining {
        /// The term number.
        term: u64,
    },
}

/// Why a term ended.
///
/// Serializes as `{"reason": "preempted", "preferred_holder": "b"}` (`preempted`, `shutdown`,
/// `lease-lost`: the [`StopReason::label`]s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum StopReason {
    /// The Lease's `preferredHolder` named another candidate.
    Preempted {
        /// The candidate named.
        preferred_holder: String,
    },
    /// The process is shutting down.
    Shutdown,
    /// Renewal failed until the renew deadline, or someone else holds the Lease: the term was
    /// cancelled at once and the Lease was not released.
    LeaseLost,
}

impl StopReason {
    /// A short label (`preempted`, `shutdown`, `lease-lost`) for logs and JSON.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Self::Preempted { .. } => "preempted",
            Self::Shutdown => "shutdown",
            Self::LeaseLost => "lease-lost",
        }
    }
}

/// A change of leadership, in the order it happened. Times (`at`, `observed_at`) are wall-clock;
/// each transition also carries a reading of the monotonic clock ([`MonotonicTime`], taken with
/// its wall-clock time), by which the leadership intervals of several processes on one machine
/// can be compared even if the wall clock steps.
///
/// Order, per term: `Leading` (published before the term's closure is called, so the term's own
/// work always comes after it), `StoppedLeading` (after the term's tasks finished, so their last
/// words come before it), then `Released`, or `ReleaseFailed` when the Lease was still held but
/// could not be released (neither when the Lease was lost), then `Following`. [`Elector::on_transition`] sees them in that order,
/// inline with the term; subscribers of [`ElectorHandle::transitions`] receive them in that order
/// too, but on their own task, so their output may interleave with the term's.
///
/// Serializes as one flat object tagged by `event`, with RFC 3339 times and the monotonic
/// readings in nanoseconds: `{"event":"stopped-leading","term":3,"lease_transitions":7,
/// "at":"2025-11-30T10:53:20Z","monotonic_ns":81234567890,"reason":"preempted",
/// "preferred_holder":"b","leaked_tasks":0}`; `serde_json::to_string` gives a log line.
///
/// `term` counts this process's terms (1, 2, ...: every replica has a term 1);
/// `lease_transitions` names the term across replicas: the Lease's `spec.leaseTransitions` as
/// the term's first write left it. That write counts a transition, so two terms of the same
/// Lease never carry the same number, whichever replicas led them, and a later term carries a
/// larger one (while the Lease is not deleted; a Lease created again starts at 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Transition {
    /// A term began: user code is starting.
    Leading {
        /// The term number.
        term: u64,
        /// The Lease's `spec.leaseTransitions` as the term's first write left it (that write
        /// counts one): the same in every transition of the term, different for each term of
        /// the Lease whoever leads it, so it names the term across replicas where `term`
        /// counts this process's terms only.
        lease_transitions: Option<i32>,
        /// When the term began.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
        /// When this instance observed itself as holder (the start of its leadership interval).
        #[serde(serialize_with = "crate::time::serialize")]
        observed_at: Timestamp,
        /// `observed_at` on the monotonic clock: read before the term began, so the leadership
        /// interval it starts is, if anything, too long.
        #[serde(rename = "observed_monotonic_ns")]
        observed_monotonic: MonotonicTime,
    },
    /// A term ended and its tasks were drained (or aborted past the drain timeout): the end of
    /// the leadership interval.
    StoppedLeading {
        /// The term number.
        term: u64,
        /// The Lease's `spec.leaseTransitions` when the term began (see
        /// [`Transition::Leading`]).
        lease_transitions: Option<i32>,
        /// When the drain ended.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
        /// `at` on the monotonic clock: read after the term's tasks stopped (or were aborted),
        /// so the leadership interval it ends is, if anything, too long.
        #[serde(rename = "monotonic_ns")]
        monotonic: MonotonicTime,
        /// Why the term ended.
        #[serde(flatten)]
        reason: StopReason,
        /// Tasks still running at the drain timeout (reported as leaked, then aborted).
        leaked_tasks: usize,
    },
    /// The Lease was released after term `term`.
    Released {
        /// The term number.
        term: u64,
        /// The Lease's `spec.leaseTransitions` when the term began (see
        /// [`Transition::Leading`]).
        lease_transitions: Option<i32>,
        /// When the release was written.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
        /// `at` on the monotonic clock (read after the release was written).
        #[serde(rename = "monotonic_ns")]
        monotonic: MonotonicTime,
    },
    /// The Lease could not be released after term `term`, so the next leader waits for it to
    /// expire (`conclave_candidate_release_failures_total`; also a `warn` or `error` log line).
    ReleaseFailed {
        /// The term number.
        term: u64,
        /// The Lease's `spec.leaseTransitions` when the term began (see
        /// [`Transition::Leading`]).
        lease_transitions: Option<i32>,
        /// When the release was given up.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
        /// `at` on the monotonic clock.
        #[serde(rename = "monotonic_ns")]
        monotonic: MonotonicTime,
        /// Why, as a sentence.
        error: String,
    },
    /// This instance follows (at start and after each term).
    Following {
        /// When.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
        /// `at` on the monotonic clock.
        #[serde(rename = "monotonic_ns")]
        monotonic: MonotonicTime,
    },
}

/// Something an operator should know that is not a change of leadership (those, failed
/// releases and leaked tasks included, are [`Transition`]s): each is also a metric and one log
/// line (a `warn` for problems), and arrives on [`ElectorHandle::notices`].
///
/// Serializes like [`Transition`]: `{"event":"no-election-controller","since":"…","at":"…"}`.
/// More kinds may be added; match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Notice {
    /// Coordinated mode: the Lease has had no holder (missing, released or expired) since
    /// `since`, for the controller timeout: no election controller is acting on it
    /// (`conclave_candidate_election_unattended` is 1). Is the `CoordinatedLeaderElection`
    /// feature gate on, or is `conclave run` deployed and able to read LeaseCandidates?
    NoElectionController {
        /// When the Lease was first seen without a holder.
        #[serde(serialize_with = "crate::time::serialize")]
        since: Timestamp,
        /// When this was reported.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
    },
    /// After [`Notice::NoElectionController`]: the Lease has a holder again.
    ElectionControllerActing {
        /// When the holder was seen.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
    },
    /// A warm cache given to the elector ([`Elector::with_warm_cache`],
    /// [`Elector::require_synced_cache`]) has not completed its first LIST within the cache
    /// sync timeout (`conclave_candidate_cache_unsynced{cache}` is 1). Does the server serve
    /// the resource (a CRD not installed, the emulator), and may this identity list and watch
    /// it (RBAC)? `error` usually says which.
    CacheNotSynced {
        /// The resource cached, as kube-apiserver names it: `configmaps`,
        /// `widgets.example.com`.
        cache: String,
        /// The last watch error (the API server's answer), if a request failed.
        error: Option<String>,
        /// Whether this keeps the candidate out of the election until the cache syncs
        /// ([`Elector::require_synced_cache`]); if not, terms run on the unsynced cache.
        stands_aside: bool,
        /// When the elector started and began waiting for the cache.
        #[serde(serialize_with = "crate::time::serialize")]
        since: Timestamp,
        /// When this was reported.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
    },
    /// After [`Notice::CacheNotSynced`]: the cache completed its first LIST.
    CacheSynced {
        /// The resource cached.
        cache: String,
        /// When the elector saw it synced.
        #[serde(serialize_with = "crate::time::serialize")]
        at: Timestamp,
    },
}

/// Whether an election controller acts on the Lease, as far as this elector can tell.
///
/// Serializes as `{"coordination": "unattended", "since": "…"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "coordination", rename_all = "kebab-case")]
pub enum Coordination {
    /// Classic mode: this elector acquires the Lease itself; no controller is involved.
    NotCoordinated,
    /// The Lease has a holder, or has had none for less than the controller timeout.
    Attended,
    /// The Lease has had no holder since `since`, for at least the controller timeout.
    Unattended {
        /// When the Lease was first seen without a holder.
        #[serde(serialize_with = "crate::time::serialize")]
        since: Timestamp,
    },
}

/// An answer about the Lease that retrying cannot change until an operator acts: its namespace
/// does not exist (404 to a create), or this identity may not read or write it (403). The
/// elector keeps trying, since the fix can come while it runs, but reports it once as an `error`
/// log line that says what to do, and [`ElectorHandle::is_ready`] stays false until a request
/// of the same kind succeeds ([`ElectorHandle::blocked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// The request that was refused.
    pub operation: Operation,
    /// The HTTP status code (403 or 404).
    pub code: u16,
    /// The API server's message.
    pub message: String,
}

impl Blocked {
    /// The refusal in `error`, if it is one only an operator can fix.
    fn from_error(lease: &LeaseConfig, operation: Operation, error: &Error) -> Option<Self> {
        let Error::Kube {
            source: kube::Error::Api(status),
            ..
        } = error
        else {
            return None;
        };
        let blocking = status.code == 403 || (status.code == 404 && operation == Operation::Create);
        blocking.then(|| Self {
            namespace: lease.namespace.clone(),
            name: lease.name.clone(),
            operation,
            code: status.code,
            message: status.message.clone(),
        })
    }

    /// Whether the namespace of the Lease is missing (rather than access to it refused).
    #[must_use]
    pub fn namespace_missing(&self) -> bool {
        self.code == 404
    }

    /// What an operator does about it, as a sentence.
    #[must_use]
    pub fn remedy(&self) -> String {
        if self.namespace_missing() {
            format!(
                "create namespace {:?} or use a namespace that exists",
                self.namespace
            )
        } else {
            format!(
                "grant this identity get, list, watch, create and update on leases in namespace                  {:?} (a Role and RoleBinding)",
                self.namespace
            )
        }
    }
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot {} Lease {}/{}: {} (HTTP {}); {}",
            self.operation.label(),
            self.namespace,
            self.name,
            self.message,
            self.code,
            self.remedy()
        )
    }
}

#[derive(Debug)]
struct Shared {
    state: watch::Sender<LeaderState>,
    leader: watch::Sender<Option<String>>,
    running: watch::Sender<bool>,
    coordination: watch::Sender<Coordination>,
    blocked: watch::Sender<Option<Blocked>>,
    /// Every cache given to [`Elector::require_synced_cache`] has synced (true without any).
    caches_synced: watch::Sender<bool>,
    transitions: broadcast::Sender<Transition>,
    notices: broadcast::Sender<Notice>,
}

/// Observes a running [`Elector`]: leader state, current leader, transitions, readiness.
#[derive(Debug, Clone)]
pub struct ElectorHandle {
    shared: Arc<Shared>,
    candidate: Option<CandidateHandle>,
    metrics: ElectorMetrics,
}

impl ElectorHandle {
    /// The leader state, as a watch channel.
    #[must_use]
    pub fn leader_state(&self) -> watch::Receiver<LeaderState> {
        self.shared.state.subscribe()
    }

    /// The holder last observed on the Lease (`None`: nobody), as a watch channel.
    #[must_use]
    pub fn leader(&self) -> watch::Receiver<Option<String>> {
        self.shared.leader.subscribe()
    }

    /// Every transition from now on (a subscriber that falls more than 256 behind misses the
    /// oldest ones and is told so by `RecvError::Lagged`).
    #[must_use]
    pub fn transitions(&self) -> broadcast::Receiver<Transition> {
        self.shared.transitions.subscribe()
    }

    /// Every [`Notice`] from now on: an election controller that does not act on the Lease, and
    /// one that acts again; a warm cache that has not synced, and one that synced.
    #[must_use]
    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.shared.notices.subscribe()
    }

    /// Whether an election controller acts on the Lease, as a watch channel.
    #[must_use]
    pub fn coordination(&self) -> watch::Receiver<Coordination> {
        self.shared.coordination.subscribe()
    }

    /// The Lease's [`Blocked`] answer while one stands (`None`: none), as a watch channel.
    #[must_use]
    pub fn blocked(&self) -> watch::Receiver<Option<Blocked>> {
        self.shared.blocked.subscribe()
    }

    /// Whether this instance currently leads a term (draining counts as not leading).
    #[must_use]
    pub fn is_leading(&self) -> bool {
        matches!(*self.shared.state.borrow(), LeaderState::Leading { .. })
    }

    /// Readiness: the elector runs and has read the Lease, no [`Blocked`] answer stands, every
    /// cache given to [`Elector::require_synced_cache`] has synced, and (coordinated mode) the
    /// LeaseCandidate is registered. A follower is ready: following is a healthy state, and so
    /// is an unattended Lease ([`ElectorHandle::coordination`]) for this process, whose
    /// caches and read paths keep working; report that one through the metric instead.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        *self.shared.running.borrow()
            && self.shared.blocked.borrow().is_none()
            && *self.shared.caches_synced.borrow()
            && self
                .candidate
                .as_ref()
                .is_none_or(CandidateHandle::is_registered)
    }

    /// The LeaseCandidate's handle (coordinated mode).
    #[must_use]
    pub fn candidate(&self) -> Option<&CandidateHandle> {
        self.candidate.as_ref()
    }

    /// The elector's metrics.
    #[must_use]
    pub fn metrics(&self) -> &ElectorMetrics {
        &self.metrics
    }
}

#[derive(Debug)]
enum Mode {
    Classic,
    Coordinated {
        candidate: Box<Candidate>,
        strategy: String,
        fallback_after: Option<Duration>,
    },
}

/// A warm cache the elector reports on ([`Elector::with_warm_cache`]).
#[derive(Debug)]
struct WatchedCache {
    sync: CacheSync,
    /// [`Elector::require_synced_cache`]: no part in the election until it synced.
    required: bool,
}

/// Leads a Lease while it names this identity; see the crate docs.
pub struct Elector {
    lock: LeaseLock,
    mode: Mode,
    drain_timeout: Duration,
    controller_timeout: Duration,
    caches: Vec<WatchedCache>,
    cache_sync_timeout: Duration,
    on_transition: Option<TransitionHook>,
    metrics: ElectorMetrics,
    shared: Arc<Shared>,
    candidate: Option<CandidateHandle>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("lease", self.lock.config())
            .field("mode", &self.mode)
            .field("drain_timeout", &self.drain_timeout)
            .field("controller_timeout", &self.controller_timeout)
            .field("caches", &self.caches)
            .field("cache_sync_timeout", &self.cache_sync_timeout)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// Classic (non-coordinated) leader election, as client-go without `Coordinated`: acquires
    /// the Lease when it is missing, released, or expired by local observation, with
    /// resourceVersion preconditions. Used for the controller's own HA.
    pub fn classic(client: Client, lease: LeaseConfig) -> Result<Self> {
        lease.validate()?;
        Ok(Self::build(client, lease, Mode::Classic, None))
    }

    /// Coordinated leader election (KEP-4355): registers a LeaseCandidate and leads only when an
    /// election controller (Conclave or kube-apiserver's) names this identity as holder. Never
    /// acquires the Lease itself unless [`Elector::with_fallback_after`] is set.
    pub fn coordinated(
        client: Client,
        lease: LeaseConfig,
        candidate: CandidateConfig,
    ) -> Result<Self> {
        let strategy = candidate.strategy.clone();
        let candidate = Candidate::new(client.clone(), lease.clone(), candidate)?;
        let handle = candidate.handle();
        let mode = Mode::Coordinated {
            candidate: Box::new(candidate),
            strategy,
            fallback_after: None,
        };
        Ok(Self::build(client, lease, mode, Some(handle)))
    }

    fn build(
        client: Client,
        lease: LeaseConfig,
        mode: Mode,
        candidate: Option<CandidateHandle>,
    ) -> Self {
        let coordination = match mode {
            Mode::Classic => Coordination::NotCoordinated,
            Mode::Coordinated { .. } => Coordination::Attended,
        };
        Self {
            lock: LeaseLock::new(client, lease),
            mode,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            controller_timeout: DEFAULT_CONTROLLER_TIMEOUT,
            caches: Vec::new(),
            cache_sync_timeout: DEFAULT_CACHE_SYNC_TIMEOUT,
            on_transition: None,
            metrics: ElectorMetrics::default(),
            shared: Arc::new(Shared {
                state: watch::channel(LeaderState::Following).0,
                leader: watch::channel(None).0,
                running: watch::channel(false).0,
                coordination: watch::channel(coordination).0,
                blocked: watch::channel(None).0,
                caches_synced: watch::channel(true).0,
                transitions: broadcast::channel(TRANSITION_BUFFER).0,
                notices: broadcast::channel(TRANSITION_BUFFER).0,
            }),
            candidate,
        }
    }

    /// How long a term's tasks may take to finish after its token is cancelled before they are
    /// reported as leaked and aborted (default 10 s). The Lease keeps being renewed meanwhile.
    #[must_use]
    pub fn with_drain_timeout(mut self, drain_timeout: Duration) -> Self {
        self.drain_timeout = drain_timeout;
        self
    }

    /// KEP-4355's opt-in fallback (coordinated mode only; ignored in classic mode): if the Lease
    /// stays missing, released or expired for `after` (no controller assigned a holder), take it
    /// like a classic elector.
    #[must_use]
    pub fn with_fallback_after(mut self, after: Duration) -> Self {
        if let Mode::Coordinated { fallback_after, .. } = &mut self.mode {
            *fallback_after = Some(after);
        }
        self
    }

    /// Coordinated mode: how long the Lease may stay without a holder (missing, released or
    /// expired) before the elector reports that no election controller acts on it (default
    /// [`DEFAULT_CONTROLLER_TIMEOUT`]): [`Coordination::Unattended`], the
    /// `conclave_candidate_election_unattended` gauge, one `warn` log and a
    /// [`Notice::NoElectionController`]; once, not at every poll. An election normally takes
    /// one ping round (kube-apiserver's controller waits 5 s for answers); keep this above the
    /// election controller's own failover time. Ignored in classic mode.
    #[must_use]
    pub fn with_controller_timeout(mut self, timeout: Duration) -> Self {
        self.controller_timeout = timeout;
        self
    }

    /// Reports `cache` if it has not completed its first LIST within the cache sync timeout
    /// ([`Elector::with_cache_sync_timeout`], default [`DEFAULT_CACHE_SYNC_TIMEOUT`]): one
    /// `warn` log line with the last watch error (not one per retry), the
    /// `conclave_candidate_cache_unsynced{cache}` gauge, and a [`Notice::CacheNotSynced`]; then,
    /// if it syncs, an `info` line, the gauge back to 0 and a [`Notice::CacheSynced`].
    ///
    /// Reporting only: the candidate still takes part in the election, and a term may start on
    /// the unsynced cache (its controller waits, see [`WarmCache::run_when_ready`]). To keep
    /// the candidate out of the election until the cache syncs, use
    /// [`Elector::require_synced_cache`].
    #[must_use]
    pub fn with_warm_cache<K>(mut self, cache: &WarmCache<K>) -> Self
    where
        K: Lookup + Clone + Send + Sync + 'static,
        <K as Lookup>::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        self.caches.push(WatchedCache {
            sync: cache.sync(),
            required: false,
        });
        self
    }

    /// A cache this candidate cannot work without: reported as with
    /// [`Elector::with_warm_cache`], and, until it has completed its first LIST, a reason not
    /// to lead. Coordinated mode: the LeaseCandidate is registered only once every required
    /// cache synced, so no election controller elects this instance before; classic mode and
    /// the fallback: the Lease is not taken meanwhile. A Lease that names this instance anyway
    /// is released at once, before any term starts. [`ElectorHandle::is_ready`] is false
    /// meanwhile, so a readiness probe shows it too.
    ///
    /// Use it when a term on an empty cache would do harm or nothing, and other replicas can
    /// lead instead: a replica whose cache cannot sync (its node cannot reach the API server,
    /// a CRD it needs is not installed yet) then leaves leadership to those that can. If no
    /// replica's cache syncs, nobody leads: the report says why.
    #[must_use]
    pub fn require_synced_cache<K>(mut self, cache: &WarmCache<K>) -> Self
    where
        K: Lookup + Clone + Send + Sync + 'static,
        <K as Lookup>::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        self.caches.push(WatchedCache {
            sync: cache.sync(),
            required: true,
        });
        self
    }

    /// How long a cache given to [`Elector::with_warm_cache`] or
    /// [`Elector::require_synced_cache`] may go without its first LIST before it is reported
    /// (default [`DEFAULT_CACHE_SYNC_TIMEOUT`]). The requirement itself holds from the start:
    /// a required cache keeps the candidate out of the election until it syncs, however long.
    #[must_use]
    pub fn with_cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// Calls `hook` with every [`Transition`], inline on the elector's task and in order with
    /// the terms: `Leading` before the term's closure is called, `StoppedLeading` after its
    /// tasks finished. Use it for logs that must read in order with the term's own (e.g.
    /// `tracing::info!(transition = %serde_json::to_string(t)?)`). Keep it quick: the elector
    /// waits for it, renewals included.
    #[must_use]
    pub fn on_transition(mut self, hook: impl FnMut(&Transition) + Send + 'static) -> Self {
        self.on_transition = Some(std::sync::Mutex::new(Box::new(hook)));
        self
    }

    /// Uses these metrics (e.g. already registered in the process's registry).
    #[must_use]
    pub fn with_metrics(mut self, metrics: ElectorMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// A handle to observe the elector; take it before [`Elector::run`].
    #[must_use]
    pub fn handle(&self) -> ElectorHandle {
        ElectorHandle {
            shared: self.shared.clone(),
            candidate: self.candidate.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Runs until `shutdown` is cancelled, calling `lead` once per term with that term.
    ///
    /// `lead`'s future runs as a task of the term; returning early does not end the term. On
    /// shutdown the LeaseCandidate is deleted first (so no controller elects this instance
    /// again), then a running term ends gracefully: token cancelled, tasks drained, Lease
    /// released. Returns an error only when the LeaseCandidate cannot be kept (see
    /// [`Candidate::run`]); after stepping down in that case.
    pub async fn run<F, Fut>(self, mut lead: F, shutdown: CancellationToken) -> Result<()>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Self {
            lock,
            mode,
            drain_timeout,
            controller_timeout,
            caches,
            cache_sync_timeout,
            on_transition,
            metrics,
            shared,
            ..
        } = self;
        let end = shutdown.child_token();
        let (changes_tx, changes) = watch::channel(None);
        let watch_stop = CancellationToken::new();
        // Also when this future is dropped before it returns (an application giving up on it).
        let _stop_watcher_on_drop = watch_stop.clone().drop_guard();
        let watcher = tokio::spawn(watch_lease(
            lock.api().clone(),
            lock.config().name.clone(),
            changes_tx,
            watch_stop.clone(),
        ));
        watch_caches(
            caches,
            cache_sync_timeout,
            CacheReport {
                lease: lock.config().key(),
                identity: lock.config().identity.clone(),
                metrics: metrics.clone(),
                shared: shared.clone(),
            },
            &watch_stop,
        );
        let coordinated = matches!(mode, Mode::Coordinated { .. });
        let (take, strategy, candidate) = match mode {
            Mode::Classic => (Take::Always, None, None),
            Mode::Coordinated {
                candidate,
                strategy,
                fallback_after,
            } => {
                let stop = CancellationToken::new();
                let failed = end.clone();
                let run = candidate.run(stop.clone());
                let (left, mut synced) = (stop.clone(), shared.caches_synced.subscribe());
                let task = tokio::spawn(async move {
                    // A candidate whose required caches have not synced is no candidate yet:
                    // no election controller may elect it (Elector::require_synced_cache).
                    let synced = async { synced.wait_for(|s| *s).await.is_ok() };
                    tokio::select! {
                        () = left.cancelled() => return Ok(()),
                        true = synced => {}
                    }
                    let result = run.await;
                    if let Err(error) = &result {
                        tracing::error!(%error, "LeaseCandidate cannot be kept; stepping down");
                        failed.cancel();
                    }
                    result
                });
                let take = fallback_after.map_or(Take::Never, Take::After);
                (
                    take,
                    Some(strategy),
                    Some(CandidateTask {
                        stop,
                        task: Some(task),
                    }),
                )
            }
        };
        let caches_synced = shared.caches_synced.subscribe();
        let mut runner = Runner {
            lock,
            take,
            strategy,
            drain_timeout,
            metrics,
            shared,
            end,
            changes,
            candidate,
            caches_synced,
            observed: Observed::default(),
            terms: 0,
            fatal: None,
            on_transition,
            attendance: coordinated.then_some(Attendance {
                timeout: controller_timeout,
                free_since: None,
                reported: false,
            }),
        };
        runner.emit(Transition::Following {
            at: k8s::now(),
            monotonic: MonotonicTime::now(),
        });
        while let Some(won) = runner.follow().await {
            runner.lead(won, &mut lead).await;
            runner.emit(Transition::Following {
                at: k8s::now(),
                monotonic: MonotonicTime::now(),
            });
        }
        runner.stop_candidate().await;
        runner.shared.running.send_replace(false);
        watch_stop.cancel();
        let _ = watcher.await;
        runner.fatal.map_or(Ok(()), Err)
    }
}

/// A user's [`Elector::on_transition`] hook (in a mutex so the elector stays `Sync` with a hook
/// that is only `Send`; only the elector's task calls it).
type TransitionHook = std::sync::Mutex<Box<dyn FnMut(&Transition) + Send>>;

/// Coordinated mode: since when the Lease has had no holder, and whether that was reported.
struct Attendance {
    timeout: Duration,
    /// Local and wall-clock time of the first observation without a holder.
    free_since: Option<(Instant, Timestamp)>,
    reported: bool,
}

/// When a follower may take the Lease itself.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// Classic: as soon as it is free.
    Always,
    /// Coordinated: never.
    Never,
    /// Coordinated with fallback: once it has been free for this long.
    After(Duration),
}

struct CandidateTask {
    stop: CancellationToken,
    task: Option<JoinHandle<Result<()>>>,
}

impl Drop for CandidateTask {
    /// An elector dropped before [`Elector::run`] returned leaves the election too: its
    /// LeaseCandidate task stops renewing and deletes the candidate.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Ends a term's work if the elector's future is dropped while the term runs: nobody renews the
/// Lease any more, so the term's tasks must not go on leading. On a normal end the term is
/// already stopped and drained, and this does nothing.
struct EndTermOnDrop(Term);

impl Drop for EndTermOnDrop {
    fn drop(&mut self) {
        self.0.stop();
        self.0.let_go();
        self.0.abort_running();
    }
}

/// The last Lease spec seen and when (local clock) it was first seen.
#[derive(Debug, Default)]
struct Observed {
    spec: Option<LeaseSpec>,
    at: Option<Instant>,
}

impl Observed {
    fn observe(&mut self, lease: Option<&Lease>, now: Instant) {
        let spec = lease.map(|l| l.spec.clone().unwrap_or_default());
        if spec != self.spec || self.at.is_none() {
            self.spec = spec;
            self.at = Some(now);
        }
    }

    /// Whether the record is unexpired by local observation: seen unchanged for less than its
    /// `leaseDurationSeconds` (missing or non-positive durations count as expired).
    fn fresh(&self, record: &LeaseRecord, now: Instant) -> bool {
        let (Some(at), Some(seconds)) = (self.at, record.lease_duration_seconds) else {
            return false;
        };
        let Ok(seconds) = u64::try_from(seconds) else {
            return false;
        };
        seconds > 0 && at + Duration::from_secs(seconds) > now
    }
}

/// When this instance saw a Lease it then won: on the wall clock and on the monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Observation {
    at: Timestamp,
    monotonic: MonotonicTime,
}

impl Observation {
    fn now() -> Self {
        Self {
            at: k8s::now(),
            monotonic: MonotonicTime::now(),
        }
    }
}

/// This instance just became holder: the Lease as written by its own renewal or acquisition.
struct Won {
    lease: Box<Lease>,
    observed: Observation,
    renewed_at: Instant,
}

struct Runner {
    lock: LeaseLock,
    take: Take,
    strategy: Option<String>,
    drain_timeout: Duration,
    metrics: ElectorMetrics,
    shared: Arc<Shared>,
    end: CancellationToken,
    changes: watch::Receiver<Option<String>>,
    candidate: Option<CandidateTask>,
    /// Every required warm cache has synced ([`Elector::require_synced_cache`]).
    caches_synced: watch::Receiver<bool>,
    observed: Observed,
    terms: u64,
    fatal: Option<Error>,
    on_transition: Option<TransitionHook>,
    attendance: Option<Attendance>,
}

/// What a leader's check of the Lease found.
enum Check {
    /// Still the holder; renewed if a renewal was due and succeeded.
    Holding,
    /// The Lease asks to hand over.
    Preempted(String),
    /// Someone else holds it: someone else may lead already.
    Taken,
    /// It is gone (deleted): nobody leads through it until it is created again, which Conclave's
    /// controller does only once this holder's last renewal could have expired; a Lease created
    /// again for someone else sooner is seen at the next check, as [`Check::Taken`].
    Gone,
}

impl Runner {
    fn config(&self) -> &LeaseConfig {
        self.lock.config()
    }

    fn identity(&self) -> &str {
        &self.lock.config().identity
    }

    /// Publishes a transition: the user's hook first (inline), then the broadcast channel.
    fn emit(&mut self, transition: Transition) {
        if let Some(hook) = self.on_transition.as_mut() {
            let hook = hook
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            hook(&transition);
        }
        // No subscriber is fine.
        let _ = self.shared.transitions.send(transition);
    }

    fn notify(&self, notice: Notice) {
        // No subscriber is fine.
        let _ = self.shared.notices.send(notice);
    }

    fn api_error(&self, operation: Operation) {
        self.metrics
            .api_error(&self.config().key(), self.identity(), operation);
    }

    /// A follower's request failed: counted, and logged as a `warn`, or, when only an operator
    /// can fix it, published as [`Blocked`] and logged once as an `error` with the remedy.
    fn follower_error(&self, operation: Operation, error: &Error, what: &'static str) {
        self.api_error(operation);
        let Some(blocked) = Blocked::from_error(self.config(), operation, error) else {
            tracing::warn!(lease = %self.config().key(), %error, "{what} failed");
            return;
        };
        self.shared.blocked.send_if_modified(|current| {
            if current.as_ref() == Some(&blocked) {
                return false;
            }
            tracing::error!(
                lease = %self.config().key(),
                operation = operation.label(),
                code = blocked.code,
                retry_period = ?self.config().retry_period,
                "{blocked}"
            );
            *current = Some(blocked);
            true
        });
    }

    /// A follower's request succeeded: a [`Blocked`] answer to one of `resolved` no longer stands.
    fn unblock(&self, resolved: &[Operation]) {
        self.shared.blocked.send_if_modified(|current| {
            let Some(blocked) = current.as_ref().filter(|b| resolved.contains(&b.operation)) else {
                return false;
            };
            tracing::info!(lease = %self.config().key(), operation = blocked.operation.label(), "the Lease is accessible again");
            *current = None;
            true
        });
    }

    /// Coordinated mode: records whether the Lease has a holder now, and reports a change of
    /// [`Coordination`] once (state, metric, log, notice).
    fn attend(&mut self, has_holder: bool, now: Instant) {
        let key = self.config().key();
        let identity = self.identity().to_owned();
        let Some(attendance) = self.attendance.as_mut() else {
            return;
        };
        if has_holder {
            attendance.free_since = None;
            if std::mem::take(&mut attendance.reported) {
                tracing::info!(lease = %key, "the Lease has a holder again: an election controller is acting");
                self.metrics.set_unattended(&key, &identity, false);
                self.shared
                    .coordination
                    .send_replace(Coordination::Attended);
                self.notify(Notice::ElectionControllerActing { at: k8s::now() });
            }
            return;
        }
        let (since, since_wall) = *attendance.free_since.get_or_insert((now, k8s::now()));
        if attendance.reported || now.duration_since(since) < attendance.timeout {
            return;
        }
        attendance.reported = true;
        tracing::warn!(
            lease = %key,
            without_holder_for = ?now.duration_since(since),
            "no election controller acts on the Lease: it has had no holder for the controller \
             timeout; is the CoordinatedLeaderElection feature gate on, or an election \
             controller (conclave run) deployed?"
        );
        self.metrics.set_unattended(&key, &identity, true);
        self.shared
            .coordination
            .send_replace(Coordination::Unattended { since: since_wall });
        self.notify(Notice::NoElectionController {
            since: since_wall,
            at: k8s::now(),
        });
    }

    fn publish_holder(&self, record: Option<&LeaseRecord>) {
        let holder = record.and_then(LeaseRecord::holder).map(str::to_owned);
        self.shared.leader.send_if_modified(|current| {
            let changed = *current != holder;
            *current = holder;
            changed
        });
    }

    /// Waits for the next poll: a Lease change, the retry period, or the end.
    async fn pause(&mut self) {
        let retry = self.config().retry_period;
        tokio::select! {
            () = self.end.cancelled() => {}
            () = changed(&mut self.changes) => {}
            () = tokio::time::sleep(retry) => {}
        }
    }

    /// Follows until this instance holds the Lease (returns how) or the end (returns `None`).
    async fn follow(&mut self) -> Option<Won> {
        self.shared.state.send_replace(LeaderState::Following);
        self.metrics
            .set_leader(&self.config().key(), self.identity(), false);
        let mut free_since: Option<Instant> = None;
        loop {
            if self.end.is_cancelled() {
                return None;
            }
            let deadline = self.config().renew_deadline;
            let lease = match tokio::time::timeout(deadline, self.lock.get()).await {
                Ok(Ok(lease)) => lease,
                Ok(Err(error)) => {
                    self.follower_error(Operation::Read, &error, "reading the Lease");
                    self.pause().await;
                    continue;
                }
                Err(_) => {
                    tracing::warn!(lease = %self.config().key(), "reading the Lease timed out");
                    self.api_error(Operation::Read);
                    continue;
                }
            };
            self.shared.running.send_replace(true);
            // A Lease that exists shows its namespace does too.
            if lease.is_some() {
                self.unblock(&[Operation::Read, Operation::Create]);
            } else {
                self.unblock(&[Operation::Read]);
            }
            let now = Instant::now();
            self.observed.observe(lease.as_ref(), now);
            let has_holder = lease.as_ref().is_some_and(|lease| {
                let record = lease_record(lease);
                record.holder().is_some() && self.observed.fresh(&record, now)
            });
            self.attend(has_holder, now);
            let attempt = match &lease {
                None => {
                    self.publish_holder(None);
                    if self.may_take(&mut free_since, now) {
                        self.try_create().await
                    } else {
                        None
                    }
                }
                Some(lease) => {
                    let record = lease_record(lease);
                    self.publish_holder(Some(&record));
                    self.consider(lease, &record, &mut free_since, now).await
                }
            };
            match attempt {
                Some(Attempt::Won(won)) => return Some(won),
                Some(Attempt::Retry) => continue,
                None => self.pause().await,
            }
        }
    }

    fn may_take(&self, free_since: &mut Option<Instant>, now: Instant) -> bool {
        if !*self.caches_synced.borrow() {
            return false;
        }
        match self.take {
            Take::Always => true,
            Take::Never => false,
            Take::After(after) => now.duration_since(*free_since.get_or_insert(now)) >= after,
        }
    }

    /// Looks at an existing Lease as a follower: lead if it names us, take it if allowed.
    async fn consider(
        &mut self,
        lease: &Lease,
        record: &LeaseRecord,
        free_since: &mut Option<Instant>,
        now: Instant,
    ) -> Option<Attempt> {
        let fresh = self.observed.fresh(record, now);
        if record.holder() == Some(self.identity()) && fresh {
            let preferred = record.preferred().filter(|p| *p != self.identity());
            let unsynced = !*self.caches_synced.borrow();
            if preferred.is_some() || unsynced {
                // Named holder while another is preferred (e.g. after a restart), or while a
                // required cache has not synced: nothing runs, so hand over at once.
                if unsynced {
                    tracing::warn!(lease = %self.config().key(), "holder but a required warm cache has not synced; releasing before leading");
                } else {
                    tracing::info!(lease = %self.config().key(), preferred, "holder but pre-empted before leading; releasing");
                }
                return match self.lock.release(lease, k8s::now()).await {
                    Ok(Write::Conflict) => Some(Attempt::Retry),
                    Ok(Write::Done(_)) => None,
                    Err(error) => {
                        tracing::warn!(lease = %self.config().key(), %error, "releasing failed");
                        self.api_error(Operation::Release);
                        None
                    }
                };
            }
            return self.write_holder(lease, Observation::now()).await;
        }
        if record.holder().is_some() && fresh {
            *free_since = None;
            return None;
        }
        if self.may_take(free_since, now) {
            return self.write_holder(lease, Observation::now()).await;
        }
        None
    }

    async fn write_holder(&self, lease: &Lease, observed: Observation) -> Option<Attempt> {
        let sent = Instant::now();
        match tokio::time::timeout(
            self.config().renew_deadline,
            self.lock.write_holder(lease, k8s::now(), true),
        )
        .await
        {
            Ok(Ok(write)) => Some(self.attempted(write, observed, sent)),
            Ok(Err(error)) => {
                self.follower_error(Operation::Write, &error, "writing the Lease");
                None
            }
            Err(_) => {
                tracing::warn!(lease = %self.config().key(), "writing the Lease timed out");
                self.api_error(Operation::Write);
                None
            }
        }
    }

    /// A follower's write of the Lease (an acquisition or a create) was answered: any
    /// [`Blocked`] answer no longer stands, and `write` says whether this instance won.
    fn attempted(&self, write: Write, observed: Observation, sent: Instant) -> Attempt {
        self.unblock(&[Operation::Read, Operation::Create, Operation::Write]);
        match write {
            Write::Done(lease) => Attempt::Won(Won {
                lease,
                observed,
                renewed_at: sent,
            }),
            Write::Conflict => Attempt::Retry,
        }
    }

    async fn try_create(&self) -> Option<Attempt> {
        let observed = Observation::now();
        let sent = Instant::now();
        let create = self.lock.create(self.strategy.clone(), observed.at);
        match tokio::time::timeout(self.config().renew_deadline, create).await {
            Ok(Ok(write)) => Some(self.attempted(write, observed, sent)),
            Ok(Err(error)) => {
                self.follower_error(Operation::Create, &error, "creating the Lease");
                None
            }
            Err(_) => {
                tracing::warn!(lease = %self.config().key(), "creating the Lease timed out");
                self.api_error(Operation::Create);
                None
            }
        }
    }

    /// Leads one term, then ends it (gracefully unless the Lease was lost).
    async fn lead<F, Fut>(&mut self, won: Won, lead: &mut F)
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.terms += 1;
        let number = self.terms;
        let key = self.config().key();
        let record = lease_record(&won.lease);
        let lease_transitions = record.lease_transitions;
        let term = Term::new(
            number,
            TermLease {
                namespace: self.config().namespace.clone(),
                name: self.config().name.clone(),
                identity: self.identity().to_owned(),
                strategy: record.strategy.clone(),
                lease_transitions: record.lease_transitions,
                acquire_time: record.acquire_time,
                observed_at: won.observed.at,
            },
        );
        self.observed.observe(Some(&won.lease), Instant::now());
        self.attend(true, Instant::now());
        self.publish_holder(Some(&record));
        self.metrics.term_started(&key, self.identity());
        self.metrics.set_leader(&key, self.identity(), true);
        self.shared
            .state
            .send_replace(LeaderState::Leading { term: number });
        tracing::info!(lease = %key, identity = self.identity(), term = number, lease_transitions, "started leading");
        // Published (hook, broadcast) before the closure is even called: the term's work comes
        // after `Leading` wherever it is observed.
        self.emit(Transition::Leading {
            term: number,
            lease_transitions,
            at: k8s::now(),
            observed_at: won.observed.at,
            observed_monotonic: won.observed.monotonic,
        });
        term.spawn(lead(term.clone()));
        let _end_term_on_drop = EndTermOnDrop(term.clone());

        let mut lease = *won.lease;
        let mut renewed_at = won.renewed_at;
        let mut next_renewal = renewed_at + self.config().retry_period;
        let mut taken = false;
        let reason = loop {
            let deadline = renewed_at + self.config().renew_deadline;
            let renew_due = tokio::select! {
                biased;
                () = self.end.cancelled() => break StopReason::Shutdown,
                () = tokio::time::sleep_until(deadline) => break StopReason::LeaseLost,
                () = tokio::time::sleep_until(next_renewal) => true,
                () = changed_from(&mut self.changes, lease.metadata.resource_version.clone()) => false,
            };
            if renew_due {
                next_renewal = Instant::now() + self.config().retry_period;
            }
            match self
                .check(&mut lease, &mut renewed_at, renew_due, true)
                .await
            {
                Check::Holding => {}
                Check::Preempted(preferred_holder) => {
                    break StopReason::Preempted { preferred_holder };
                }
                Check::Taken => {
                    taken = true;
                    break StopReason::LeaseLost;
                }
                Check::Gone => break StopReason::LeaseLost,
            }
        };
        let lost = reason == StopReason::LeaseLost;
        if lost {
            term.let_go();
            tracing::warn!(lease = %key, term = number, lease_transitions, "lease lost; cancelling the term at once");
        } else {
            tracing::info!(lease = %key, term = number, lease_transitions, reason = reason.label(), "ending the term gracefully");
        }
        if reason == StopReason::Shutdown
            && let Some(candidate) = &self.candidate
        {
            // Leave the election while draining, so no controller elects this instance again.
            candidate.stop.cancel();
        }
        self.shared
            .state
            .send_replace(LeaderState::Draining { term: number });
        term.stop();
        let (still_held, leaked, stopped) = self
            .drain(
                &term,
                &mut lease,
                &mut renewed_at,
                lost,
                taken,
                next_renewal,
            )
            .await;
        let stopped_at = k8s::now();
        let stopped_monotonic = MonotonicTime::now();
        if leaked > 0 {
            tracing::error!(lease = %key, term = number, leaked, drain_timeout = ?self.drain_timeout, lost, "term tasks still running when they had to stop (the drain timeout, the Lease about to expire, or named for someone else); aborted");
            self.metrics
                .tasks_leaked(&key, self.identity(), leaked as u64);
        }
        self.metrics.set_leader(&key, self.identity(), false);
        let shutdown = reason == StopReason::Shutdown;
        self.emit(Transition::StoppedLeading {
            term: number,
            lease_transitions,
            at: stopped_at,
            monotonic: stopped_monotonic,
            reason,
            leaked_tasks: leaked,
        });
        term.let_go();
        drop(term);
        if shutdown {
            self.stop_candidate().await;
        }
        let failure = if still_held && stopped {
            match self.release(&lease).await {
                Release::Released => {
                    self.emit(Transition::Released {
                        term: number,
                        lease_transitions,
                        at: k8s::now(),
                        monotonic: MonotonicTime::now(),
                    });
                    None
                }
                Release::NotHeld => None,
                Release::Failed(error) => Some(error),
            }
        } else if !stopped {
            tracing::error!(lease = %key, term = number, "aborted tasks did not stop; not releasing (the Lease will expire)");
            Some("the term's tasks did not stop after they were aborted, so the Lease was not released; it will expire".to_owned())
        } else {
            None
        };
        if let Some(error) = failure {
            self.metrics.release_failed(&key, self.identity());
            self.emit(Transition::ReleaseFailed {
                term: number,
                lease_transitions,
                at: k8s::now(),
                monotonic: MonotonicTime::now(),
                error,
            });
        }
        self.shared.state.send_replace(LeaderState::Following);
    }

    /// Waits for the term's tasks, renewing the Lease meanwhile (unless it was lost), bounded by
    /// the drain timeout; once the Lease is lost (not renewed by the renew deadline, or deleted),
    /// the tasks still running are aborted before anyone could consider it expired
    /// ([`abort_before_expiry`]), so that they have stopped by then; once it is taken (another
    /// holder named), at once, since someone else may lead already. A deleted Lease is checked
    /// again every retry period: created again for someone else, it is taken. Returns (still
    /// held, leaked tasks, all stopped).
    ///
    /// Aborting only at the expiry let a task that does not yield overlap the next leader, which
    /// the controller writes within milliseconds of the expiry, by up to the grace; and a term
    /// whose Lease was deleted (`kubectl delete lease`, a common way to force a re-election)
    /// drained until its own expiry without looking again, while the Lease was created for
    /// someone else (issue 34, finding 1).
    async fn drain(
        &mut self,
        term: &Term,
        lease: &mut Lease,
        renewed_at: &mut Instant,
        lost: bool,
        mut taken: bool,
        mut next_renewal: Instant,
    ) -> (bool, usize, bool) {
        let started = Instant::now();
        let mut lost_at = lost.then_some(started);
        let drained = term.drained();
        tokio::pin!(drained);
        let finished = loop {
            let expiry = *renewed_at + self.config().lease_duration;
            let mut until = started + self.drain_timeout;
            if let Some(lost_at) = lost_at {
                until = until.min(abort_before_expiry(expiry, lost_at));
            }
            if taken {
                until = started;
            }
            let deadline = *renewed_at + self.config().renew_deadline;
            tokio::select! {
                biased;
                () = &mut drained => break true,
                () = tokio::time::sleep_until(until) => break false,
                () = tokio::time::sleep_until(deadline), if lost_at.is_none() => {
                    tracing::warn!(lease = %self.config().key(), "renew deadline passed while draining; the Lease counts as lost");
                    lost_at = Some(Instant::now());
                    term.let_go();
                }
                // Lost, it still looks every retry period (without renewing): a Lease named for
                // someone else ends the drain at once.
                () = tokio::time::sleep_until(next_renewal), if !taken => {
                    next_renewal = Instant::now() + self.config().retry_period;
                    match self.check(lease, renewed_at, lost_at.is_none(), false).await {
                        Check::Holding | Check::Preempted(_) => {}
                        Check::Gone => {
                            lost_at.get_or_insert_with(Instant::now);
                            term.let_go();
                        }
                        Check::Taken => {
                            lost_at.get_or_insert_with(Instant::now);
                            taken = true;
                            term.let_go();
                        }
                    }
                }
            }
        };
        let still_held = lost_at.is_none();
        if !still_held {
            term.let_go();
        }
        if finished {
            return (still_held, 0, true);
        }
        let leaked = term.abort_running();
        let stopped = tokio::time::timeout(ABORT_GRACE, term.drained())
            .await
            .is_ok();
        (still_held, leaked, stopped)
    }

    /// Reads the Lease and renews it if due. With `watch_preemption`, a `preferredHolder` naming
    /// someone else ends the term.
    async fn check(
        &mut self,
        lease: &mut Lease,
        renewed_at: &mut Instant,
        renew_due: bool,
        watch_preemption: bool,
    ) -> Check {
        for _ in 0..3 {
            let deadline = *renewed_at + self.config().renew_deadline;
            let current = match tokio::time::timeout_at(deadline, self.lock.get()).await {
                Ok(Ok(Some(current))) => current,
                Ok(Ok(None)) => return Check::Gone,
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config().key(), %error, "reading the Lease failed while leading");
                    self.api_error(Operation::Read);
                    return Check::Holding;
                }
                Err(_) => return Check::Holding,
            };
            let record = lease_record(&current);
            self.observed.observe(Some(&current), Instant::now());
            self.publish_holder(Some(&record));
            if record.holder() != Some(self.identity()) {
                return Check::Taken;
            }
            if watch_preemption
                && let Some(preferred) = record.preferred().filter(|p| *p != self.identity())
            {
                *lease = current;
                return Check::Preempted(preferred.to_owned());
            }
            if !renew_due {
                *lease = current;
                return Check::Holding;
            }
            let sent = Instant::now();
            match tokio::time::timeout_at(
                deadline,
                self.lock.write_holder(&current, k8s::now(), false),
            )
            .await
            {
                Ok(Ok(Write::Done(stored))) => {
                    *renewed_at = sent;
                    self.observed.observe(Some(&stored), Instant::now());
                    *lease = *stored;
                    return Check::Holding;
                }
                // Someone wrote meanwhile (the controller, setting preferredHolder?): look again.
                Ok(Ok(Write::Conflict)) => continue,
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config().key(), %error, "renewing the Lease failed");
                    self.api_error(Operation::Write);
                    return Check::Holding;
                }
                Err(_) => return Check::Holding,
            }
        }
        Check::Holding
    }

    /// Releases the Lease if this instance still holds it. Bounded by the renew deadline.
    ///
    /// The first attempt writes over `last_read`, the version the term read last (the one that
    /// named another preferred holder, or its last renewal), with its resourceVersion as the
    /// precondition: a hand-off then costs one round trip less. If the Lease changed since, the
    /// write conflicts and the Lease is read again, as every later attempt does.
    async fn release(&mut self, last_read: &Lease) -> Release {
        let key = self.config().key();
        let deadline = Instant::now() + self.config().renew_deadline;
        let attempt = async {
            let mut known = Some(last_read.clone())
                .filter(|lease| lease_record(lease).holder() == Some(self.identity()));
            loop {
                let current = match known.take() {
                    Some(current) => current,
                    None => match self.lock.get().await? {
                        Some(current) => current,
                        None => return Ok(false),
                    },
                };
                if lease_record(&current).holder() != Some(self.identity()) {
                    return Ok(false);
                }
                match self.lock.release(&current, k8s::now()).await? {
                    Write::Done(stored) => {
                        self.observed.observe(Some(&stored), Instant::now());
                        return Ok::<bool, Error>(true);
                    }
                    Write::Conflict => continue,
                }
            }
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(true)) => {
                self.publish_holder(None);
                tracing::info!(lease = %key, "released the Lease");
                Release::Released
            }
            Ok(Ok(false)) => Release::NotHeld,
            Ok(Err(error)) => {
                tracing::warn!(lease = %key, %error, "releasing the Lease failed; it will expire");
                self.api_error(Operation::Release);
                Release::Failed(format!("{error}; the Lease will expire instead"))
            }
            Err(_) => {
                tracing::warn!(lease = %key, "releasing the Lease timed out; it will expire");
                self.api_error(Operation::Release);
                Release::Failed(format!(
                    "releasing Lease {key} took longer than the renew deadline; it will expire instead"
                ))
            }
        }
    }

    /// Stops the LeaseCandidate and waits until it is deleted (once); keeps a fatal candidate
    /// error for [`Elector::run`] to return.
    async fn stop_candidate(&mut self) {
        let Some(candidate) = self.candidate.as_mut() else {
            return;
        };
        candidate.stop.cancel();
        let Some(task) = candidate.task.take() else {
            return;
        };
        match tokio::time::timeout(self.lock.config().renew_deadline, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => self.fatal = Some(error),
            Ok(Err(join)) => tracing::error!(error = %join, "LeaseCandidate task failed"),
            Err(_) => tracing::warn!(
                "deleting the LeaseCandidate timed out; the controller will collect it"
            ),
        }
    }
}

/// What the release after a term did.
enum Release {
    /// Written: the Lease names nobody.
    Released,
    /// Nothing to do: this instance no longer holds the Lease.
    NotHeld,
    /// The release could not be written; why, as a sentence.
    Failed(String),
}

/// What a follower's attempt to lead produced.
enum Attempt {
    /// This instance holds the Lease now.
    Won(Won),
    /// A write lost a race; read again at once.
    Retry,
}

/// Where a warm cache's report goes: the elector's Lease, identity, metrics and notices.
struct CacheReport {
    lease: String,
    identity: String,
    metrics: ElectorMetrics,
    shared: Arc<Shared>,
}

/// Starts reporting each cache ([`report_cache`]) and, if some are required, marks them all
/// synced once they are; everything stops with `stop`.
fn watch_caches(
    caches: Vec<WatchedCache>,
    timeout: Duration,
    report: CacheReport,
    stop: &CancellationToken,
) {
    let report = Arc::new(report);
    let required: Vec<CacheSync> = caches
        .iter()
        .filter(|c| c.required)
        .map(|c| c.sync.clone())
        .collect();
    if !required.is_empty() {
        report.shared.caches_synced.send_replace(false);
        let (shared, stop) = (report.shared.clone(), stop.clone());
        tokio::spawn(async move {
            let all = async {
                for mut cache in required {
                    cache.synced().await;
                }
            };
            tokio::select! {
                () = stop.cancelled() => {}
                () = all => {
                    shared.caches_synced.send_replace(true);
                }
            }
        });
    }
    for cache in caches {
        tokio::spawn(report_cache(cache, timeout, report.clone(), stop.clone()));
    }
}

/// Reports a cache that has not synced within `timeout`, once (log, metric, notice), and then
/// its sync, if it comes.
async fn report_cache(
    cache: WatchedCache,
    timeout: Duration,
    report: Arc<CacheReport>,
    stop: CancellationToken,
) {
    let WatchedCache { mut sync, required } = cache;
    let (since, started) = (k8s::now(), Instant::now());
    tokio::select! {
        () = stop.cancelled() => return,
        () = sync.synced() => return,
        () = tokio::time::sleep(timeout) => {}
    }
    let resource = sync.resource.to_string();
    let error = sync.error();
    let meanwhile = if required {
        "this candidate stays out of the election until it syncs"
    } else {
        "terms run on an empty cache meanwhile"
    };
    tracing::warn!(
        lease = %report.lease,
        cache = %resource,
        error = error.as_deref().unwrap_or("none"),
        "the warm cache of {resource} has not completed its first LIST in {timeout:?}; \
         {meanwhile}: does the server serve this resource, and may this identity list and \
         watch it?"
    );
    report
        .metrics
        .set_cache_unsynced(&report.lease, &report.identity, &resource, true);
    // No subscriber is fine.
    let _ = report.shared.notices.send(Notice::CacheNotSynced {
        cache: resource.clone(),
        error,
        stands_aside: required,
        since,
        at: k8s::now(),
    });
    tokio::select! {
        () = stop.cancelled() => return,
        () = sync.synced() => {}
    }
    tracing::info!(lease = %report.lease, cache = %resource, after = ?started.elapsed(), "the warm cache of {resource} synced");
    report
        .metrics
        .set_cache_unsynced(&report.lease, &report.identity, &resource, false);
    let _ = report.shared.notices.send(Notice::CacheSynced {
        cache: resource,
        at: k8s::now(),
    });
}

/// Resolves on the next change (pending forever once the watcher is gone).
async fn changed(changes: &mut watch::Receiver<Option<String>>) {
    if changes.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves when the watched resourceVersion differs from `known` (this instance's own write).
async fn changed_from(changes: &mut watch::Receiver<Option<String>>, known: Option<String>) {
    loop {
        changed(changes).await;
        if *changes.borrow_and_update() != known {
            return;
        }
    }
}

/// Watches the Lease and publishes its resourceVersion, so followers and leaders react to
/// changes at once instead of at the next poll. Decisions always re-read the Lease.
async fn watch_lease(
    api: Api<Lease>,
    name: String,
    changes: watch::Sender<Option<String>>,
    stop: CancellationToken,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        let version = match event {
            Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                lease.metadata.resource_version
            }
            Some(Ok(watcher::Event::Delete(_))) => None,
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                tracing::debug!(lease = %name, %error, "Lease watch error");
                continue;
            }
            None => return,
        };
        changes.send_if_modified(|current| {
            let changed = *current != version;
            *current = version;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn transitions_serialize_as_flat_objects_with_rfc3339_times() {
        let at = Timestamp::from_secs(1_764_500_000);
        let table = [
            (
                serde_json::to_value(Transition::StoppedLeading {
                    term: 3,
                    lease_transitions: Some(7),
                    at,
                    monotonic: MonotonicTime::from_nanos(81_234_567_890),
                    reason: StopReason::Preempted {
                        preferred_holder: "b".into(),
                    },
                    leaked_tasks: 1,
                }),
                json!({
                    "event": "stopped-leading", "term": 3, "lease_transitions": 7, "at": "2025-11-30T10:53:20Z",
                    "monotonic_ns": 81_234_567_890_u64, "reason": "preempted", "preferred_holder": "b", "leaked_tasks": 1,
                }),
            ),
            (
                serde_json::to_value(Transition::StoppedLeading {
                    term: 4,
                    lease_transitions: None,
                    at,
                    monotonic: MonotonicTime::from_nanos(2),
                    reason: StopReason::LeaseLost,
                    leaked_tasks: 0,
                }),
                json!({
                    "event": "stopped-leading", "term": 4, "lease_transitions": null, "at": "2025-11-30T10:53:20Z",
                    "monotonic_ns": 2, "reason": "lease-lost", "leaked_tasks": 0,
                }),
            ),
            (
                serde_json::to_value(Transition::Leading {
                    term: 1,
                    lease_transitions: Some(0),
                    at,
                    observed_at: Timestamp::from_micros(1_764_500_000_000_001),
                    observed_monotonic: MonotonicTime::from_nanos(1),
                }),
                json!({
                    "event": "leading", "term": 1, "lease_transitions": 0, "at": "2025-11-30T10:53:20Z",
                    "observed_at": "2025-11-30T10:53:20.000001Z", "observed_monotonic_ns": 1,
                }),
            ),
            (
                serde_json::to_value(Transition::Following {
                    at,
                    monotonic: MonotonicTime::from_nanos(3),
                }),
                json!({ "event": "following", "at": "2025-11-30T10:53:20Z", "monotonic_ns": 3 }),
            ),
            (
                serde_json::to_value(LeaderState::Draining { term: 2 }),
                json!({ "state": "draining", "term": 2 }),
            ),
            (
                serde_json::to_value(LeaderState::Following),
                json!({ "state": "following" }),
            ),
            (
                serde_json::to_value(Transition::ReleaseFailed {
                    term: 2,
                    lease_transitions: Some(5),
                    at,
                    monotonic: MonotonicTime::from_nanos(4),
                    error: "the API server said no".into(),
                }),
                json!({
                    "event": "release-failed", "term": 2, "lease_transitions": 5, "at": "2025-11-30T10:53:20Z",
                    "monotonic_ns": 4, "error": "the API server said no",
                }),
            ),
            (
                serde_json::to_value(Coordination::Unattended { since: at }),
                json!({ "coordination": "unattended", "since": "2025-11-30T10:53:20Z" }),
            ),
        ];
        for (got, want) in table {
            assert_eq!(got.unwrap(), want);
        }
    }

    #[test]
    fn stop_reason_labels_match_their_serialized_form() {
        for reason in [
            StopReason::Preempted {
                preferred_holder: "b".into(),
            },
            StopReason::Shutdown,
            StopReason::LeaseLost,
        ] {
            assert_eq!(
                serde_json::to_value(&reason).unwrap()["reason"],
                reason.label()
            );
        }
    }
}
