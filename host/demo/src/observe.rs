//! Watches the demo namespace's Leases and LeaseCandidates: reports registrations, pings, acks
//! and Lease changes to the journal, and publishes a [`LeaseStatus`] per demo Lease (holder,
//! preferred holder, candidates, the strategy's pick through the engine) for the scenario to
//! wait on.

use super::journal::{Events, What};
use super::{DemoLease, LeaseId};
use conclave_controller::status::{self, LeaseStatus, Pick, PredictOptions};
use conclave_core::k8s::timestamp;
use conclave_engine::Engine;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The latest status of each demo Lease.
pub type Snapshot = BTreeMap<LeaseId, LeaseStatus>;

enum Change {
    Lease(watcher::Event<Lease>),
    Candidate(watcher::Event<LeaseCandidate>),
}

/// Starts watching; the task ends when `stop` is cancelled.
pub fn start(
    client: &Client,
    namespace: &str,
    leases: Vec<DemoLease>,
    engine: Arc<Engine>,
    options: PredictOptions,
    events: Events,
    stop: CancellationToken,
) -> (watch::Receiver<Snapshot>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Snapshot::new());
    let lease_events = watcher(
        Api::<Lease>::namespaced(client.clone(), namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(|e| e.map(Change::Lease));
    let candidate_events = watcher(
        Api::<LeaseCandidate>::namespaced(client.clone(), namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(|e| e.map(Change::Candidate));
    let mut changes = futures::stream::select(lease_events.boxed(), candidate_events.boxed());
    let mut observer = Observer {
        leases,
        engine,
        options,
        events,
        lease_objects: BTreeMap::new(),
        candidates: BTreeMap::new(),
        initial_candidates: None,
        initial_leases: None,
        snapshot: tx,
        last_pick: BTreeMap::new(),
    };
    let task = tokio::spawn(async move {
        // The strategy's pick depends on time too (freshness): re-evaluate now and then.
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => observer.publish(),
                change = changes.next() => match change {
                    Some(Ok(change)) => {
                        observer.apply(change);
                        observer.publish();
                    }
                    Some(Err(error)) => tracing::debug!(%error, "demo watch error"),
                    None => return,
                },
            }
        }
    });
    (rx, task)
}

struct Observer {
    leases: Vec<DemoLease>,
    engine: Arc<Engine>,
    options: PredictOptions,
    events: Events,
    lease_objects: BTreeMap<String, Lease>,
    candidates: BTreeMap<String, LeaseCandidate>,
    /// Objects listed during a (re)list, swapped in at its end.
    initial_candidates: Option<BTreeMap<String, LeaseCandidate>>,
    initial_leases: Option<BTreeMap<String, Lease>>,
    snapshot: watch::Sender<Snapshot>,
    last_pick: BTreeMap<LeaseId, String>,
}

impl Observer {
    fn lease_of(&self, lease_name: &str) -> Option<LeaseId> {
        self.leases
            .iter()
            .find(|l| l.name == lease_name)
            .map(|l| l.id)
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Lease(event) => match event {
                watcher::Event::Apply(lease) => {
                    let name = lease.metadata.name.clone().unwrap_or_default();
                    self.lease_objects.insert(name, lease);
                }
                watcher::Event::Delete(lease) => {
                    self.lease_objects
                        .remove(lease.metadata.name.as_deref().unwrap_or_default());
                }
                watcher::Event::Init => self.initial_leases = Some(BTreeMap::new()),
                watcher::Event::InitApply(lease) => {
                    let name = lease.metadata.name.clone().unwrap_or_default();
                    self.initial_leases
                        .get_or_insert_default()
                        .insert(name, lease);
                }
                watcher::Event::InitDone => {
                    self.lease_objects = self.initial_leases.take().unwrap_or_default();
                }
            },
            Change::Candidate(event) => match event {
                watcher::Event::Apply(candidate) => self.candidate_changed(candidate),
                watcher::Event::Delete(candidate) => {
                    let name = candidate.metadata.name.clone().unwrap_or_default();
                    if self.candidates.remove(&name).is_some()
                        && let Some(lease) = lease_name(&candidate).and_then(|l| self.lease_of(l))
                    {
                        self.events.send(What::Removed {
                            lease,
                            identity: name,
                        });
                    }
                }
                watcher::Event::Init => self.initial_candidates = Some(BTreeMap::new()),
                watcher::Event::InitApply(candidate) => {
                    let name = candidate.metadata.name.clone().unwrap_or_default();
                    self.initial_candidates
                        .get_or_insert_default()
                        .insert(name, candidate);
                }
                watcher::Event::InitDone => {
                    let listed = self.initial_candidates.take().unwrap_or_default();
                    for candidate in listed.into_values() {
                        self.candidate_changed(candidate);
                    }
                }
            },
        }
    }

    /// Reports what changed between the candidate as last seen and now.
    fn candidate_changed(&mut self, candidate: LeaseCandidate) {
        let name = candidate.metadata.name.clone().unwrap_or_default();
        let lease = lease_name(&candidate).and_then(|l| self.lease_of(l));
        let old = self.candidates.insert(name.clone(), candidate.clone());
        let Some(lease) = lease else { return };
        let Some(spec) = candidate.spec.as_ref() else {
            return;
        };
        let old_spec = old.as_ref().and_then(|o| o.spec.clone());
        let replaced = old
            .as_ref()
            .is_some_and(|o| o.metadata.uid != candidate.metadata.uid);
        if old.is_none() || replaced {
            self.events.send(What::Registered {
                lease,
                identity: name.clone(),
                versions: format!(
                    "{}/{}",
                    spec.binary_version,
                    spec.emulation_version.as_deref().unwrap_or("-")
                ),
            });
            return;
        }
        let old_ping = old_spec.as_ref().and_then(|s| s.ping_time.clone());
        let old_renew = old_spec.as_ref().and_then(|s| s.renew_time.clone());
        if spec.ping_time.is_some() && spec.ping_time != old_ping {
            self.events.send(What::Ping {
                lease,
                identity: name.clone(),
            });
        }
        if let (Some(ping), Some(renew)) = (&spec.ping_time, &spec.renew_time)
            && spec.renew_time != old_renew
            && renew.0 >= ping.0
            && old_renew.as_ref().is_none_or(|r| r.0 < ping.0)
        {
            let after = timestamp(ping.0).elapsed_at(timestamp(renew.0));
            self.events.send(What::Ack {
                lease,
                identity: name,
                after,
            });
        }
    }

    /// Recomputes each demo Lease's status; reports holder/preferred/pick changes.
    fn publish(&mut self) {
        let now = super::now();
        let leases: Vec<Lease> = self.lease_objects.values().cloned().collect();
        let candidates: Vec<LeaseCandidate> = self.candidates.values().cloned().collect();
        let statuses = status::collect(&leases, &candidates, &*self.engine, now, self.options);
        let mut snapshot = Snapshot::new();
        for status in statuses {
            let Some(id) = self.lease_of(&status.name) else {
                continue;
            };
            let last = self.last_pick.get(&id).cloned();
            let pick = match &status.pick {
                Pick::Candidate { name, .. } => name.clone(),
                Pick::Nobody => "nobody".into(),
                Pick::NoCandidates => "- (no candidates)".into(),
                Pick::AllUnresponsive => "- (all unresponsive)".into(),
                Pick::NotHandled => "- (built-in controller)".into(),
                // A plugin that failed once (e.g. its CPU deadline on a busy machine) is asked
                // again at the next tick; until then the last answer stands.
                Pick::Unavailable(why) => last.unwrap_or_else(|| format!("? ({why})")),
            };
            self.last_pick.insert(id, pick.clone());
            self.events.send(What::LeaseState {
                lease: id,
                holder: status.holder().map(Into::into),
                preferred: status
                    .record
                    .as_ref()
                    .and_then(|r| r.preferred())
                    .map(Into::into),
                pick,
            });
            snapshot.insert(id, status);
        }
        self.snapshot.send_replace(snapshot);
    }
}

fn lease_name(candidate: &LeaseCandidate) -> Option<&str> {
    candidate.spec.as_ref().map(|s| s.lease_name.as_str())
}
