//! Warm caches of Leases and LeaseCandidates, fed by kube-rs reflectors, one pair per watched
//! scope (the whole cluster, or each `--namespace`). Every watch event enqueues the Lease key it
//! concerns; a relist (at start, or after a 410) enqueues its keys once the store holds the
//! relisted objects. Candidates are indexed by their Lease, so a step reads its Lease's candidates
//! without scanning every cached candidate.

use super::lock;
use super::own_writes::{OwnWrites, WriteTicket};
use super::queue::WorkQueue;
use conclave_core::k8s::timestamp;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::task::JoinSet;

/// The Lease key (`namespace/name`) a candidate belongs to.
#[must_use]
pub fn candidate_lease_key(candidate: &LeaseCandidate) -> Option<String> {
    let namespace = candidate.metadata.namespace.as_deref()?;
    let lease = candidate.spec.as_ref()?.lease_name.as_str();
    (!lease.is_empty()).then(|| format!("{namespace}/{lease}"))
}

/// The key of a Lease.
#[must_use]
pub fn lease_key(lease: &Lease) -> Option<String> {
    Some(format!(
        "{}/{}",
        lease.metadata.namespace.as_deref()?,
        lease.metadata.name.as_deref()?
    ))
}

/// Whether a ping written to the candidate is still unanswered (the write was our own; its ack
/// will trigger the election again, as upstream).
fn ping_outstanding(candidate: &LeaseCandidate) -> bool {
    let Some(spec) = candidate.spec.as_ref() else {
        return false;
    };
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => renew.0 < ping.0,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The Lease keys of a relist in progress. kube-rs's reflector swaps the relisted objects into the
/// store only at `InitDone`, so a key enqueued at `InitApply` could be reconciled against the old
/// store and the change missed; and an object deleted while the watch was down gets no event at
/// all. So the keys of the old store and of every relisted object are enqueued at `InitDone`.
#[derive(Default)]
struct Relist(HashSet<String>);

impl Relist {
    /// A relist begins; `previous` are the keys the store holds until it completes.
    fn start(&mut self, previous: impl Iterator<Item = Option<String>>) {
        self.0.clear();
        self.0.extend(previous.flatten());
    }

    fn add(&mut self, key: Option<String>) {
        self.0.extend(key);
    }

    /// The store now holds the relisted objects: enqueue every key seen.
    fn finish(&mut self, queue: &WorkQueue) {
        for key in self.0.drain() {
            queue.add(key);
        }
    }
}

/// Which cached candidates belong to which Lease. The candidate watch task updates it after the
/// store and before it enqueues the event's Lease key, so the step that key triggers finds the
/// candidate; a step that runs in between reads one event late and is followed by that step.
#[derive(Default)]
struct CandidateIndex {
    /// Lease key (`namespace/lease`) -> names of its candidates (in the same namespace).
    by_lease: HashMap<String, HashSet<String>>,
    /// Candidate `namespace/name` -> its Lease key.
    lease_of: HashMap<String, String>,
}

impl CandidateIndex {
    fn candidate_id(candidate: &LeaseCandidate) -> Option<(String, &str)> {
        let namespace = candidate.metadata.namespace.as_deref()?;
        let name = candidate.metadata.name.as_deref()?;
        Some((format!("{namespace}/{name}"), name))
    }

    /// Records the candidate as it is now (its Lease may have changed).
    fn apply(&mut self, candidate: &LeaseCandidate) {
        self.remove(candidate);
        let (Some((id, name)), Some(lease)) = (
            Self::candidate_id(candidate),
            candidate_lease_key(candidate),
        ) else {
            return;
        };
        self.by_lease
            .entry(lease.clone())
            .or_default()
            .insert(name.to_owned());
        self.lease_of.insert(id, lease);
    }

    /// Forgets the candidate.
    fn remove(&mut self, candidate: &LeaseCandidate) {
        let Some((id, name)) = Self::candidate_id(candidate) else {
            return;
        };
        let Some(lease) = self.lease_of.remove(&id) else {
            return;
        };
        if let Some(names) = self.by_lease.get_mut(&lease) {
            names.remove(name);
            if names.is_empty() {
                self.by_lease.remove(&lease);
            }
        }
    }

    /// Rebuilds the index from a whole store (after a relist).
    fn rebuild(&mut self, candidates: &[Arc<LeaseCandidate>]) {
        self.by_lease.clear();
        self.lease_of.clear();
        for candidate in candidates {
            self.apply(candidate);
        }
    }

    fn names(&self, lease_key: &str) -> Vec<String> {
        self.by_lease
            .get(lease_key)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

struct Scope {
    namespace: Option<String>,
    leases: Store<Lease>,
    candidates: Store<LeaseCandidate>,
    index: Arc<Mutex<CandidateIndex>>,
}

/// Pings sent and not yet acked, to count acks: candidate `namespace/name` -> ping time (µs).
pub type PendingPings = Arc<Mutex<HashMap<String, i64>>>;

/// The caches of all watched scopes.
#[derive(Clone)]
pub struct Caches {
    scopes: Arc<Vec<Scope>>,
    own_writes: Arc<OwnWrites>,
}

impl Caches {
    /// Starts reflectors for each scope (`namespaces` empty = cluster-wide) on `tasks`; every event
    /// enqueues its Lease key on `queue`. `on_ack` is called when a candidate answers a ping
    /// recorded in `pings`.
    pub fn start(
        client: &Client,
        namespaces: &[String],
        queue: &WorkQueue,
        pings: &PendingPings,
        on_ack: impl Fn() + Send + Sync + Clone + 'static,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let scopes: Vec<Option<String>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        };
        let mut built = Vec::new();
        let own_writes = Arc::new(OwnWrites::default());
        for namespace in scopes {
            let (lease_api, candidate_api): (Api<Lease>, Api<LeaseCandidate>) = match &namespace {
                Some(ns) => (
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                ),
                None => (Api::all(client.clone()), Api::all(client.clone())),
            };
            let (leases, lease_writer) = reflector::store();
            let (candidates, candidate_writer) = reflector::store();
            let q = queue.clone();
            let lease_reader = leases.clone();
            let task_own_writes = own_writes.clone();
            let lease_stream =
                reflector::reflector(lease_writer, watcher(lease_api, watcher::Config::default()))
                    .default_backoff();
            tasks.spawn(async move {
                futures::pin_mut!(lease_stream);
                let mut relist = Relist::default();
                while let Some(event) = lease_stream.next().await {
                    match event {
                        Ok(watcher::Event::Apply(lease) | watcher::Event::Delete(lease)) => {
                            if let Some(key) = lease_key(&lease) {
                                task_own_writes.observed(&key);
                                q.add(key);
                            }
                        }
                        Ok(watcher::Event::Init) => {
                            relist.start(lease_reader.state().iter().map(|l| lease_key(l)));
                        }
                        Ok(watcher::Event::InitApply(lease)) => relist.add(lease_key(&lease)),
                        Ok(watcher::Event::InitDone) => {
                            task_own_writes.relisted();
                            relist.finish(&q);
                        }
                        Err(error) => tracing::warn!(%error, "watching Leases"),
                    }
                }
            });
            let q = queue.clone();
            let pings = pings.clone();
            let on_ack = on_ack.clone();
            let candidate_reader = candidates.clone();
            let index = Arc::new(Mutex::new(CandidateIndex::default()));
            let task_index = index.clone();
            let candidate_stream = reflector::reflector(
                candidate_writer,
                watcher(candidate_api, watcher::Config::default()),
            )
            .default_backoff();
            tasks.spawn(async move {
                futures::pin_mut!(candidate_stream);
                let mut relist = Relist::default();
                while let Some(event) = candidate_stream.next().await {
                    let (candidate, relisted) = match event {
                        Ok(watcher::Event::Apply(c)) => {
                            lock(&task_index).apply(&c);
                            (c, false)
                        }
                        Ok(watcher::Event::Delete(c)) => {
                            lock(&task_index).remove(&c);
                            (c, false)
                        }
                        Ok(watcher::Event::InitApply(c)) => (c, true),
                        Ok(watcher::Event::Init) => {
                            relist.start(
                                candidate_reader
                                    .state()
                                    .iter()
                                    .map(|c| candidate_lease_key(c)),
                            );
                            continue;
                        }
                        Ok(watcher::Event::InitDone) => {
                            lock(&task_index).rebuild(&candidate_reader.state());
                            relist.finish(&q);
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "watching LeaseCandidates");
                            continue;
                        }
                    };
                    count_ack(&candidate, &pings, &on_ack);
                    if ping_outstanding(&candidate) {
                        continue;
                    }
                    let key = candidate_lease_key(&candidate);
                    if relisted {
                        relist.add(key);
                    } else if let Some(key) = key {
                        q.add(key);
                    }
                }
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
        }
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

    /// The Lease `namespace/name` as last seen: this controller's own write if its watch event
    /// has not arrived yet (see [`super::own_writes`]), else the cached one.
    #[must_use]
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Arc<Lease>> {
        if let Some(written) = self.own_writes.get(&format!("{namespace}/{name}")) {
            return Some(written);
        }
        self.scope(namespace)?
            .leases
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// A write of Lease `namespace/name` is about to be sent; on success, pass the Lease the
    /// server returned to [`WriteTicket::succeeded`], so [`Caches::lease`] reads it back.
    pub fn begin_write(&self, namespace: &str, name: &str) -> WriteTicket {
        self.own_writes.begin(format!("{namespace}/{name}"))
    }

    /// Forgets the controller's own write of a Lease (a write based on it was refused).
    pub fn forget_write(&self, namespace: &str, name: &str) {
        self.own_writes.forget(&format!("{namespace}/{name}"));
    }

    /// The cached candidate `namespace/name`.
    #[must_use]
    pub fn candidate(&self, namespace: &str, name: &str) -> Option<Arc<LeaseCandidate>> {
        self.scope(namespace)?
            .candidates
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached candidates of Lease `namespace/lease`.
    #[must_use]
    pub fn candidates_for(&self, namespace: &str, lease: &str) -> Vec<Arc<LeaseCandidate>> {
        let Some(scope) = self.scope(namespace) else {
            return Vec::new();
        };
        let names = lock(&scope.index).names(&format!("{namespace}/{lease}"));
        names
            .iter()
            .filter_map(|name| {
                scope
                    .candidates
                    .get(&ObjectRef::new(name).within(namespace))
            })
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.lease_name == lease))
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

fn count_ack(candidate: &LeaseCandidate, pings: &PendingPings, on_ack: &impl Fn()) {
    let (Some(ns), Some(name)) = (
        candidate.metadata.namespace.as_deref(),
        candidate.metadata.name.as_deref(),
    ) else {
        return;
    };
    let Some(renew) = candidate.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else {
        return;
    };
    let renew = timestamp(renew.0).as_micros();
    let key = format!("{ns}/{name}");
    let mut pending = lock(pings);
    if pending.get(&key).is_some_and(|&ping| renew >= ping) {
        pending.remove(&key);
        on_ack();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec;
    use kube::api::ObjectMeta;

    fn candidate(namespace: &str, name: &str, lease: &str) -> Arc<LeaseCandidate> {
        Arc::new(LeaseCandidate {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseCandidateSpec {
                lease_name: lease.into(),
                ..LeaseCandidateSpec::default()
            }),
        })
    }

    fn names(index: &CandidateIndex, key: &str) -> Vec<String> {
        let mut names = index.names(key);
        names.sort();
        names
    }

    #[test]
    fn index_follows_applies_moves_and_deletes() {
        let mut index = CandidateIndex::default();
        index.apply(&candidate("a", "c1", "l"));
        index.apply(&candidate("a", "c2", "l"));
        index.apply(&candidate("b", "c1", "l"));
        assert_eq!(names(&index, "a/l"), ["c1", "c2"]);
        assert_eq!(names(&index, "b/l"), ["c1"], "namespaces are kept apart");

        index.apply(&candidate("a", "c2", "other"));
        assert_eq!(
            names(&index, "a/l"),
            ["c1"],
            "a candidate that moved leaves"
        );
        assert_eq!(names(&index, "a/other"), ["c2"]);

        index.remove(&candidate("a", "c1", "l"));
        assert!(names(&index, "a/l").is_empty());
        assert!(
            !index.by_lease.contains_key("a/l"),
            "empty entries are dropped"
        );
        index.remove(&candidate("a", "unknown", "l"));
        assert_eq!(names(&index, "b/l"), ["c1"]);
    }

    #[test]
    fn index_ignores_candidates_without_a_lease_and_rebuilds_from_a_store() {
        let mut index = CandidateIndex::default();
        index.apply(&candidate("a", "c1", ""));
        assert!(index.by_lease.is_empty() && index.lease_of.is_empty());

        index.apply(&candidate("a", "gone", "l"));
        index.rebuild(&[candidate("a", "c1", "l"), candidate("a", "c3", "m")]);
        assert_eq!(
            names(&index, "a/l"),
            ["c1"],
            "the relisted store replaces the index"
        );
        assert_eq!(names(&index, "a/m"), ["c3"]);
        assert_eq!(index.lease_of.len(), 2);
    }
}
