//! What every task of a controller process shares: [`Context`], and what the active replica
//! tracks per Lease between steps.

use crate::cache::Caches;
use crate::config::ControllerConfig;
use crate::decide::{Decide, DecideError, DecideErrorKind};
use crate::events::Events;
use crate::key::LeaseKey;
use crate::latency::ElectionStarts;
use crate::metrics::{Metrics, StrategyLabels};
use crate::pods::PodLiveness;
use crate::queue::WorkQueue;
use crate::sync::lock;
use crate::takeover::TakeOver;
use crate::writer::Writer;
use conclave_core::k8s::{candidate_view, lease_record, now, validate_lease_candidate};
use conclave_core::plan::{leaderless, without_leader};
use conclave_core::request::ElectionRequest;
use kube::Client;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Shared state of one controller process: the caches and queue every replica keeps warm, and
/// what the active replica's workers need to step, write and report.
pub struct Context {
    /// Reads only (the built-in controller's Lease); writes go through `writer`.
    pub(crate) client: Client,
    pub(crate) caches: Caches,
    pub(crate) queue: WorkQueue,
    pub(crate) decider: Arc<dyn Decide>,
    pub(crate) writer: Writer,
    pub(crate) events: Events,
    pub(crate) metrics: Metrics,
    pub(crate) config: ControllerConfig,
    pub(crate) builtin_active: AtomicBool,
    /// The take-over of the built-in controller's Lease; `None` with `--take-over=false` or a
    /// mode other than `auto` (which do not look at the built-in controller).
    pub(crate) takeover: Option<Arc<TakeOver>>,
    pub(crate) leases: LeaseStates,
    /// Pod liveness; `None` when `--pod-liveness=off`.
    pub(crate) pods: Option<Arc<PodLiveness>>,
}

/// What the active replica tracks per Lease between steps.
#[derive(Default)]
pub(crate) struct LeaseStates {
    /// Leases with candidates and a strategy this controller handles.
    managed: Mutex<HashSet<LeaseKey>>,
    /// Leases whose election a strategy conflict blocks now.
    conflicted: Mutex<HashSet<LeaseKey>>,
    /// Start of each election in progress.
    pub(crate) starts: ElectionStarts,
    /// Consecutive failed steps, for the retry backoff.
    failures: Mutex<HashMap<LeaseKey, u32>>,
}

/// Inserts or removes `key` and returns the set's new size, for a gauge.
fn mark(set: &Mutex<HashSet<LeaseKey>>, key: &LeaseKey, member: bool) -> i64 {
    let mut set = lock(set);
    if member {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
    i64::try_from(set.len()).unwrap_or(i64::MAX)
}

impl Context {
    /// Whether kube-apiserver's built-in controller may be electing its Leases: as the take-over
    /// knows it (this replica holds its Lease, and waited for the apiserver it replaced), else as
    /// that controller's Lease shows it (held by a kube-apiserver and fresh).
    pub(crate) fn builtin_active(&self) -> bool {
        self.takeover
            .as_ref()
            .and_then(|t| t.builtin_may_elect())
            .unwrap_or_else(|| self.builtin_active.load(Ordering::Relaxed))
    }

    pub(crate) fn set_managed(&self, key: &LeaseKey, managed: bool) {
        let count = mark(&self.leases.managed, key, managed);
        self.metrics.managed_leases.set(count);
    }

    /// Marks the election of `key` as blocked by a strategy conflict, or not (any other outcome
    /// of a step: elected, nothing to do, no candidates left, ...).
    pub(crate) fn set_conflicted(&self, key: &LeaseKey, conflicted: bool) {
        let count = mark(&self.leases.conflicted, key, conflicted);
        self.metrics.conflicted_leases.set(count);
    }

    /// Forgets every managed and every blocked Lease: the term ended, and a follower manages and
    /// blocks nothing.
    pub(crate) fn end_term(&self) {
        lock(&self.leases.managed).clear();
        self.metrics.managed_leases.set(0);
        lock(&self.leases.conflicted).clear();
        self.metrics.conflicted_leases.set(0);
        self.metrics.leases_without_holder.set(0);
    }

    /// How many managed Leases have no live holder while candidates exist
    /// ([`conclave_core::plan::leaderless`]), from the caches: the Lease as a step reads it, and
    /// its valid candidates.
    pub(crate) fn count_leaderless(&self) -> usize {
        let managed: Vec<LeaseKey> = lock(&self.leases.managed).iter().cloned().collect();
        let now = now();
        managed
            .iter()
            .filter(|key| {
                // Most Leases have a leader, which one lookup finds: no record is built.
                if self.caches.has_live_holder(key, now) {
                    return false;
                }
                let lease = self.caches.lease(key).map(|lease| {
                    let mut record = lease_record(&lease);
                    self.caches.annotate(key, &mut record, now);
                    record
                });
                // Nor are the candidates of a Lease with a leader gathered.
                if !without_leader(lease.as_ref(), now) {
                    return false;
                }
                let candidates: Vec<_> = self
                    .caches
                    .candidates_for(key)
                    .iter()
                    .filter(|c| validate_lease_candidate(c).is_empty())
                    .map(|c| candidate_view(c))
                    .collect();
                leaderless(
                    lease.as_ref(),
                    &candidates,
                    now,
                    self.config.candidate_gc_after,
                )
            })
            .count()
    }

    pub(crate) async fn decide(
        &self,
        strategy: &str,
        request: ElectionRequest,
    ) -> Result<Option<String>, DecideError> {
        let decider = Arc::clone(&self.decider);
        let owned = strategy.to_owned();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || decider.elect(&owned, &request))
            .await
            .unwrap_or_else(|join| {
                Err(DecideError {
                    kind: DecideErrorKind::Panic,
                    message: format!("the strategy call did not complete: {join}"),
                })
            });
        self.metrics
            .plugin_latency
            .get_or_create(&StrategyLabels {
                strategy: strategy.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
        result
    }

    pub(crate) fn backoff(&self, key: &LeaseKey) -> Duration {
        let mut failures = lock(&self.leases.failures);
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let exp = (*n - 1).min(7);
        Duration::from_millis(500u64 << exp).min(Duration::from_secs(60))
    }

    pub(crate) fn succeeded(&self, key: &LeaseKey) {
        lock(&self.leases.failures).remove(key);
    }

    /// Enqueues every Lease that has candidates (on becoming active, or when the built-in
    /// controller's state changes).
    pub(crate) fn enqueue_all(&self) {
        let keys: HashSet<LeaseKey> = self
            .caches
            .all_candidates()
            .iter()
            .filter_map(|c| LeaseKey::of_candidate(c))
            .collect();
        for key in keys {
            self.queue.add(key);
        }
    }
}
