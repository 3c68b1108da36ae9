//! Warm caches of Leases and LeaseCandidates, fed by kube-rs reflectors, one pair per watched
//! scope (the whole cluster, or each `--namespace`). Every watch event enqueues the Lease key it
//! concerns; a relist (at start, or after a 410) enqueues its keys once the store holds the
//! relisted objects.

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

struct Scope {
    namespace: Option<String>,
    leases: Store<Lease>,
    candidates: Store<LeaseCandidate>,
}

/// Pings sent and not yet acked, to count acks: candidate `namespace/name` -> ping time (µs).
pub type PendingPings = Arc<Mutex<HashMap<String, i64>>>;

/// The caches of all watched scopes.
#[derive(Clone)]
pub struct Caches {
    scopes: Arc<Vec<Scope>>,
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
                                q.add(key);
                            }
                        }
                        Ok(watcher::Event::Init) => {
                            relist.start(lease_reader.state().iter().map(|l| lease_key(l)));
                        }
                        Ok(watcher::Event::InitApply(lease)) => relist.add(lease_key(&lease)),
                        Ok(watcher::Event::InitDone) => relist.finish(&q),
                        Err(error) => tracing::warn!(%error, "watching Leases"),
                    }
                }
            });
            let q = queue.clone();
            let pings = pings.clone();
            let on_ack = on_ack.clone();
            let candidate_reader = candidates.clone();
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
                        Ok(watcher::Event::Apply(c) | watcher::Event::Delete(c)) => (c, false),
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
            });
        }
        Self {
            scopes: Arc::new(built),
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

    /// The cached Lease `namespace/name`.
    #[must_use]
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Arc<Lease>> {
        self.scope(namespace)?
            .leases
            .get(&ObjectRef::new(name).within(namespace))
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
        self.scope(namespace)
            .map(|scope| {
                scope.candidates.state_filter(|c| {
                    c.metadata.namespace.as_deref() == Some(namespace)
                        && c.spec.as_ref().is_some_and(|s| s.lease_name == lease)
                })
            })
            .unwrap_or_default()
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
    let mut pending = pings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if pending.get(&key).is_some_and(|&ping| renew >= ping) {
        pending.remove(&key);
        on_ack();
    }
}
