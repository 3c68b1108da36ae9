//! Warm caches of Leases and LeaseCandidates, fed by kube-rs reflectors, one pair per watched
//! scope (the whole cluster, or each `--namespace`), and the reads a step makes from them. What a
//! watch event does besides updating its store (enqueue, ack counting, the candidate index) is in
//! [`super::index`].

use super::index::{self, CandidateIndex, Pings};
use super::key::{CandidateKey, LeaseKey};
use super::lock;
use super::own_writes::{OwnWrites, WriteTicket};
use super::queue::WorkQueue;
use conclave_core::lease::{LeaseRecord, SitOut};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use tokio::task::JoinSet;

/// Drops what no election step reads from an object before it enters a store: its managedFields
/// (typically a third of a small object's size, and held for every cached Lease and candidate).
/// Writes built from a cached object then carry no managedFields, which the API server reads as
/// "keep the stored ones" (an empty or absent list never clears them).
pub fn slim<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

struct Scope {
    namespace: Option<String>,
    leases: Store<Lease>,
    candidates: Store<LeaseCandidate>,
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
    /// Starts reflectors for each scope (`namespaces` empty = cluster-wide) on `tasks`, each
    /// feeding [`index::leases`] or [`index::candidates`], which enqueue on `queue` and count the
    /// acks of pings recorded in `pings`.
    pub fn start(
        client: &Client,
        namespaces: &[String],
        queue: &WorkQueue,
        pings: &Arc<Pings>,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let scopes: Vec<Option<String>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        };
        let own_writes = Arc::new(OwnWrites::default());
        let renewals = Arc::new(index::Renewals::default());
        let mut built = Vec::new();
        for namespace in scopes {
            let (lease_api, candidate_api): (Api<Lease>, Api<LeaseCandidate>) = match &namespace {
                Some(ns) => (
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                ),
                None => (Api::all(client.clone()), Api::all(client.clone())),
            };
            let (leases, lease_writer) = reflector::store();
            let lease_events = reflector::reflector(
                lease_writer,
                watcher(lease_api, watcher::Config::default()).modify(slim),
            )
            .default_backoff();
            let (store, own, renewed, q) = (
                leases.clone(),
                own_writes.clone(),
                renewals.clone(),
                queue.clone(),
            );
            tasks.spawn(async move {
                index::leases(lease_events, &store, &own, &renewed, &q).await;
            });

            let (candidates, candidate_writer) = reflector::store();
            let candidate_events = reflector::reflector(
                candidate_writer,
                watcher(candidate_api, watcher::Config::default()).modify(slim),
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
                leases,
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
            let _ = scope.leases.wait_until_ready().await;
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
        self.scope(&key.namespace)?
            .leases
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
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
            .collect()
    }

    /// How many candidates are cached.
    #[must_use]
    pub fn candidate_count(&self) -> usize {
        self.scopes.iter().map(|s| s.candidates.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn slim_drops_managed_fields_and_keeps_what_a_step_reads() {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                namespace: Some("ns".into()),
                resource_version: Some("42".into()),
                uid: Some("u".into()),
                annotations: Some([("a".to_owned(), "b".to_owned())].into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kube-controller-manager".into()),
                    operation: Some("Update".into()),
                    ..ManagedFieldsEntry::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some("h".into()),
                ..Default::default()
            }),
        };
        let mut expected = lease.clone();
        expected.metadata.managed_fields = None;
        slim(&mut lease);
        assert_eq!(lease, expected);
        // Serialised (as a write built from it is), no managedFields key at all: an empty list
        // would be sent otherwise.
        let json = serde_json::to_value(&lease).unwrap();
        assert!(json["metadata"].get("managedFields").is_none());
        assert_eq!(json["metadata"]["resourceVersion"], "42");
    }
}
