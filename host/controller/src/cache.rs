//! Warm caches of Leases and LeaseCandidates, fed by one pair of watches per watched scope (the
//! whole cluster, or each `--namespace`), and the reads a step makes from them. Candidates are
//! kept in kube-rs reflector stores; Leases in [`index::Renewals`], one entry per Lease with what
//! this controller saw of its renewal, so that a renewal, thousands a second at scale, costs one
//! lookup (issue 31). What a watch event does besides updating the cache (enqueue, ack counting,
//! the candidate index) is in [`super::index`].

use super::index::{self, CandidateIndex, Pings};
use super::key::{CandidateKey, LeaseKey};
use super::own_writes::{OwnWrites, WriteTicket};
use super::queue::WorkQueue;
use super::sync::lock;
use super::wire::Cached;
use conclave_core::lease::{LeaseRecord, SitOut};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;

struct Scope {
    namespace: Option<String>,
    /// True once the Lease watch's first list is in the cache.
    leases_listed: tokio::sync::watch::Receiver<bool>,
    candidates: Store<Cached<LeaseCandidate>>,
    index: Arc<Mutex<CandidateIndex>>,
}

/// The caches of all watched scopes.
#[derive(Clone)]
pub struct Caches {
    scopes: Arc<Vec<Scope>>,
    own_writes: Arc<OwnWrites>,
    renewals: Arc<index::Renewals>,
}

impl Caches {
    /// Starts the watches of each scope (`namespaces` empty = cluster-wide) on `tasks`, each
    /// feeding [`index::leases`] or [`index::candidates`], which enqueue on `queue` and count the
    /// acks of pings recorded in `pings`. A Lease missing from the first list counts as held
    /// for `start_hold` after it ([`index::Renewals::with_start_hold`]).
    pub fn start(
        client: &Client,
        namespaces: &[String],
        queue: &WorkQueue,
        pings: &Arc<Pings>,
        start_hold: Duration,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let scopes: Vec<Option<String>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        };
        let own_writes = Arc::new(OwnWrites::default());
        let renewals = Arc::new(index::Renewals::with_start_hold(start_hold));
        let mut built = Vec::new();
        for namespace in scopes {
            let (lease_api, candidate_api): (Api<Cached<Lease>>, Api<Cached<LeaseCandidate>>) =
                match &namespace {
                    Some(ns) => (
                        Api::namespaced(client.clone(), ns),
                        Api::namespaced(client.clone(), ns),
                    ),
                    None => (Api::all(client.clone()), Api::all(client.clone())),
                };
            let (listed, leases_listed) = tokio::sync::watch::channel(false);
            let lease_events = watcher(lease_api, watcher::Config::default()).default_backoff();
            let (scope, own, renewed, q) = (
                namespace.clone(),
                own_writes.clone(),
                renewals.clone(),
                queue.clone(),
            );
            tasks.spawn(async move {
                index::leases(lease_events, scope.as_deref(), &own, &renewed, &q, &listed).await;
            });

            let (candidates, candidate_writer) = reflector::store();
            let candidate_events = reflector::reflector(
                candidate_writer,
                watcher(candidate_api, watcher::Config::default()),
            )
            .default_backoff();
            let index = Arc::new(Mutex::new(CandidateIndex::default()));
            let (store, idx, pings, q) = (
                candidates.clone(),
                index.clone(),
                pings.clone(),
                queue.clone(),
            );
            tasks.spawn(async move {
                index::candidates(candidate_events, &store, &idx, &pings, &q).await;
            });
            built.push(Scope {
                namespace,
                leases_listed,
                candidates,
                index,
            });
        }
        Self {
            scopes: Arc::new(built),
            own_writes,
            renewals,
        }
    }

    /// Fills in what this controller saw of the renewal `record` carries, a record it had not
    /// seen counting as renewed at `now` (see [`index::Renewals::annotate`]).
    pub fn annotate(&self, key: &LeaseKey, record: &mut LeaseRecord, now: Timestamp) {
        self.renewals.annotate(key, record, now);
    }

    /// A step of `key` found its Lease settled until `until` (see [`index::Renewals::settle`]).
    pub fn settle(&self, key: &LeaseKey, until: Option<Timestamp>) {
        self.renewals.settle(key, until);
    }

    /// A step of `key` begins, or found its Lease unsettled (see [`index::Renewals::unsettle`]).
    pub fn unsettle(&self, key: &LeaseKey) {
        self.renewals.unsettle(key);
    }

    /// Records that a step held back a pre-emption of `key`'s holder at `now` (see
    /// [`index::Renewals::preemption_held_back`]).
    pub fn preemption_held_back(&self, key: &LeaseKey, now: Timestamp) {
        self.renewals.preemption_held_back(key, now);
    }

    /// Records that `candidate` sits out `key`'s elections from `now`; returns how many times in a
    /// row and until when (see [`index::Renewals::sit_out`]).
    pub fn sit_out(&self, key: &LeaseKey, candidate: &str, now: Timestamp) -> (u32, Timestamp) {
        self.renewals.sit_out(key, candidate, now)
    }

    /// The candidates that sit out `key`'s elections at `now`, whether or not its Lease exists
    /// (see [`index::Renewals::sitting_out`]).
    #[must_use]
    pub fn sitting_out(&self, key: &LeaseKey, now: Timestamp) -> Vec<SitOut> {
        self.renewals.sitting_out(key, now)
    }

    /// Until when the holder of a Lease deleted while held may still lead (see
    /// [`index::Renewals::held_after_deletion`]).
    pub fn held_after_deletion(&self, key: &LeaseKey, now: Timestamp) -> Option<Timestamp> {
        self.renewals.held_after_deletion(key, now)
    }

    /// Waits until every store has completed its first list.
    pub async fn wait_until_ready(&self) {
        for scope in self.scopes.iter() {
            // An error means the writer was dropped, i.e. the task ended; nothing to wait for.
            let _ = scope.leases_listed.clone().wait_for(|listed| *listed).await;
            let _ = scope.candidates.wait_until_ready().await;
        }
    }

    fn scope(&self, namespace: &str) -> Option<&Scope> {
        self.scopes
            .iter()
            .find(|s| s.namespace.as_deref().is_none_or(|ns| ns == namespace))
    }

    /// The Lease as last seen: this controller's own write, or its read after a conflict, if no
    /// watch event of it has arrived since (see [`super::own_writes`]), else the cached one.
    #[must_use]
    pub fn lease(&self, key: &LeaseKey) -> Option<Arc<Lease>> {
        if let Some(written) = self.own_writes.get(key) {
            return Some(written);
        }
        self.renewals.lease(key)
    }

    /// Whether `key`'s cached Lease has a holder whose term has not ended at `now`, as
    /// `conclave_core::plan::without_leader` would find of the record a step reads
    /// ([`Caches::lease`], annotated), in one lookup. `false` says only that one lookup cannot
    /// tell: the Lease is not cached, has no live holder, or this controller's own write or read
    /// stands in for it.
    #[must_use]
    pub fn has_live_holder(&self, key: &LeaseKey, now: Timestamp) -> bool {
        self.own_writes.get(key).is_none() && self.renewals.has_live_holder(key, now)
    }

    /// A write of the Lease is about to be sent; on success, pass the Lease the server returned
    /// to [`WriteTicket::succeeded`], so [`Caches::lease`] reads it back.
    pub fn begin_write(&self, key: &LeaseKey) -> WriteTicket {
        self.own_writes.begin(key.clone())
    }

    /// A read of the Lease is about to be sent after a write conflict; pass what it found to
    /// [`WriteTicket::succeeded`] or [`WriteTicket::found_deleted`], so that it stands in for the
    /// cache until the watch catches up (see [`super::own_writes`]).
    pub fn begin_read(&self, key: &LeaseKey) -> WriteTicket {
        self.own_writes.begin(key.clone())
    }

    /// Whether a read found the Lease deleted before the watch delivered its deletion: no step
    /// may run on the cache until it does (see [`super::own_writes`]).
    #[must_use]
    pub fn deleted_ahead_of_watch(&self, key: &LeaseKey) -> bool {
        self.own_writes.deleted(key)
    }

    /// The cached candidate.
    #[must_use]
    pub fn candidate(&self, key: &CandidateKey) -> Option<Arc<LeaseCandidate>> {
        self.scope(&key.namespace)?
            .candidates
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
            .map(|cached| Arc::clone(&cached.0))
    }

    /// When the first and the last of a Lease's candidates were watched arriving (see
    /// [`CandidateIndex`]).
    #[must_use]
    pub fn arrivals(&self, lease: &LeaseKey) -> Option<conclave_core::step::Arrivals> {
        lock(&self.scope(&lease.namespace)?.index).arrivals(lease)
    }

    /// The cached candidates of `lease`.
    #[must_use]
    pub fn candidates_for(&self, lease: &LeaseKey) -> Vec<Arc<LeaseCandidate>> {
        let Some(scope) = self.scope(&lease.namespace) else {
            return Vec::new();
        };
        let names = lock(&scope.index).names(lease);
        names
            .iter()
            .filter_map(|name| {
                scope
                    .candidates
                    .get(&ObjectRef::new(name).within(&lease.namespace))
                    .map(|cached| Arc::clone(&cached.0))
            })
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.lease_name == lease.name))
            .collect()
    }

    /// Every cached candidate.
    #[must_use]
    pub fn all_candidates(&self) -> Vec<Arc<LeaseCandidate>> {
        self.scopes
            .iter()
            .flat_map(|s| s.candidates.state())
            .map(|cached| Arc::clone(&cached.0))
            .collect()
    }

    /// How many candidates are cached.
    #[must_use]
    pub fn candidate_count(&self) -> usize {
        self.scopes.iter().map(|s| s.candidates.len()).sum()
    }
}
