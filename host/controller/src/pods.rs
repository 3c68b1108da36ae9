//! Pod liveness (`--pod-liveness`, on by default): fail over as soon as the kubelet reports that
//! the holder's process stopped, instead of when its Lease expires.
//!
//! A `conclave-candidate` running in a pod names its Pod in an ownerReference of its
//! LeaseCandidate and records its container (name, ID, process start) in annotations
//! ([`conclave_core::pod`]). This module keeps a cache of the Pods in the watched namespaces,
//! slimmed to what liveness reads (name, UID, `status.containerStatuses[]`), and for a holder
//! whose Lease has not expired asks [`conclave_core::pod::process_dead`] whether the Pod proves
//! that the holder's process stopped: the recorded container is reported terminated, or another
//! instance of it, in the same Pod, started after the process did. A Pod whose deletion was
//! watched is judged on the state its deletion event carried (its kubelet's last report,
//! [`TOMBSTONE_TTL`]); a Pod that is merely absent, or another Pod under the same name, proves
//! nothing.
//!
//! What happens then ([`PodLiveness::check`]):
//! 1. the first time the evidence is seen, the holder's LeaseCandidate is pinged (an answer to a
//!    ping sent earlier may have been written before the process died and seen only after the
//!    report, so it does not count);
//! 2. if the holder answers that ping, or the Lease read shows a renewal that a live process may
//!    have made, it lives whatever the report says: it keeps its Lease, and the rule does not
//!    fire for it again on this evidence. A renewal may be a live process's when its `renewTime`
//!    is not earlier than when the container the report is about last changed by the kubelet
//!    (`finishedAt` of a terminated instance, `startedAt` of the instance that replaced it,
//!    [`dead_since`]): the identity may have passed to a restarted process (a component that sets
//!    a fixed identity) that renewed the Lease, and leads, before registering its own
//!    LeaseCandidate, so the record this controller judges is the previous process's. When the
//!    Pod carries no such time, a renewal since the report was seen counts instead;
//! 3. otherwise, [`ANSWER_GRACE`] after the evidence was seen, the holder is declared dead
//!    ([`conclave_core::lease::LeaseRecord::holder_dead`]): the Lease counts as expired and the
//!    holder takes no part, so the step elects the next candidate as at expiry (ping it if it is
//!    stale, write it once it answers), with a `HolderDead` Event and
//!    `conclave_holders_dead{reason}`.
//!
//! Why this is safe: the kubelet reports a container terminated only after its runtime saw the
//! container's init process exit, and the whole container (its PID namespace) is killed with
//! it. Nothing else is trusted: a Pod's deletion is not, because a force delete
//! (`--grace-period=0 --force`, Pod GC of a deleted Node's Pods) removes the object without the
//! kubelet's word while the process may still run and lead up to its renew deadline; nor is a
//! Pod recreated under the same name (a StatefulSet's way after such a delete), whose
//! containers are not the old Pod's. The kubelet's opposite mistake (a dead container still shown running, a
//! status not updated because the node is down) only delays failover to the Lease's expiry, as
//! before. Nothing that merely looks unhealthy counts: a node NotReady, phase `Unknown`, a
//! `deletionTimestamp` with its grace period running, `lastState` of an earlier container. A
//! holder that answers the ping is never replaced by this rule. A process leads only after
//! renewing its Lease, and the write that elects the next candidate carries the resourceVersion
//! it read, so a report about an earlier process of the same identity (a fixed identity, its
//! LeaseCandidate not yet registered, or not yet in this controller's cache) cannot take the
//! Lease from the process now leading: its renewal is in what was read, or the write fails. The
//! renewal is stamped by the holder's clock, which is the node's clock that stamps the kubelet's
//! `finishedAt` and `startedAt`; every process of the container alive now started after the
//! instance the report shows ended, or when the one that replaced it started, so its renewals are
//! not earlier than that time, and a Lease whose last renewal is earlier was renewed by a dead
//! process (tests/model, pod liveness finding B). The kubelet's times are whole seconds, cut
//! down: the dead holder's own last renewal in the second it died counts as a sign of life, and
//! failover then waits for the expiry. A wrong record of the running process itself (a container
//! ID read wrongly) could still be declared dead, if it also fails to answer within
//! [`ANSWER_GRACE`]. A process of a fixed identity in a Pod that replaced a deleted one is
//! judged, like a restarted container's, against the kubelet's times in the deleted Pod's last
//! state; the new Pod's containers are never evidence about the old Pod's process.
//!
//! The watch: the API has no projection of a Pod to its metadata and status (metadata-only
//! watches carry no status), and a label selector would need a label on the component's Pods,
//! which the controller does not own. One field-selected watch per holder's Pod would cost one
//! watch per Lease. So the Pods of the watched namespaces are listed and watched as they are,
//! and slimmed before they enter the cache ([`slim_pod`]); in a namespace with many Pods that
//! are not candidates, `--namespace` bounds what is watched. When the API server does not serve
//! Pods to the controller (RBAC without `list`/`watch` on pods, a server without core/v1 Pods),
//! one warning is logged and failover waits for expiry, as with `--pod-liveness=off`.

use super::cache::Caches;
use super::key::{CandidateKey, LeaseKey};
use super::queue::WorkQueue;
use super::sync::lock;
use conclave_core::k8s::{candidate_view, pod_report, process_record, timestamp};
use conclave_core::lease::LeaseRecord;
use conclave_core::pod::{
    Death, MIRROR_ANNOTATION, PodReport, ProcessRecord, bare_container_id, process_dead,
};
use conclave_core::time::Timestamp;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use kube::api::ListParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;

/// How long a holder reported dead has to answer the ping sent when the report was seen before
/// it is declared dead. A live `conclave-candidate` answers within one watch event and one
/// write (milliseconds); a dead one never does, so this only bounds how long a wrong report
/// could be believed, and adds to the failover time.
pub const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// How long a deleted Pod's last state is kept ([`Tombstones`]): the kubelet's report it carries
/// is evidence for the holders of Leases that have not expired yet; past this, failover waits
/// for the Lease's expiry, as without pod liveness.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(600);

/// The Pods whose deletion this controller watched, as the deletion event carried them, by UID.
/// The graceful path deletes a Pod only after its kubelet wrote the terminated statuses, so the
/// last state shows what the kubelet reported; a Pod deleted while this controller's watch was
/// down (relisted away) leaves no tombstone, and its holder waits for expiry.
#[derive(Default)]
struct Tombstones(Mutex<HashMap<String, (Arc<Pod>, std::time::Instant)>>);

impl Tombstones {
    /// Keeps `pod`, deleted, and forgets those deleted more than [`TOMBSTONE_TTL`] ago.
    fn bury(&self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone().filter(|uid| !uid.is_empty()) else {
            return;
        };
        let now = std::time::Instant::now();
        let mut tombstones = lock(&self.0);
        tombstones.retain(|_, (_, at)| now.duration_since(*at) < TOMBSTONE_TTL);
        tombstones.insert(uid, (Arc::new(pod), now));
    }

    /// The deleted Pod of `uid`, if its deletion was watched within [`TOMBSTONE_TTL`].
    fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        lock(&self.0)
            .get(uid)
            .filter(|(_, at)| at.elapsed() < TOMBSTONE_TTL)
            .map(|(pod, _)| pod.clone())
    }
}

/// The Pod cache of one watched scope.
struct Scope {
    namespace: Option<String>,
    pods: Store<Pod>,
    /// Pods of this scope whose deletion was watched.
    tombstones: Arc<Tombstones>,
    /// Set once the first list completed.
    ready: Arc<AtomicBool>,
    /// Cleared when the API server does not serve Pods to this controller.
    available: Arc<AtomicBool>,
}

/// A holder reported dead, per Lease.
#[derive(Debug, Clone)]
struct Reported {
    holder: String,
    death: Death,
    /// When this controller first saw the report.
    seen_at: Timestamp,
    /// Pings sent at or after this time count as asked since the report: the ping sent when
    /// it was seen. An answer to an earlier ping may have been written before the process died
    /// and only seen after the report.
    asked_since: Timestamp,
    /// The holder's `renewTime` on the Lease as this controller had it when it saw the report:
    /// when the Pod carries no time of the kubelet's ([`dead_since`]), a renewal since (another
    /// `renewTime`) counts as a sign of life, as an answer does.
    renewal_at_report: Option<Timestamp>,
    /// Whether the holder answered since (it lives: the report is not acted on).
    answered: bool,
    /// Whether the `HolderDead` Event was published.
    declared: bool,
}

/// What [`PodLiveness::check`] found about a Lease's holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No evidence (or pod liveness is off or unavailable): wait for expiry as usual.
    Alive,
    /// Reported dead, just now: ping the holder, look again at the time given.
    Reported {
        /// The holder.
        holder: String,
        /// What proved it.
        death: Death,
        /// When to look again (the end of [`ANSWER_GRACE`]).
        recheck_at: Timestamp,
    },
    /// Reported dead, the grace not over yet: look again then.
    Waiting {
        /// When to look again.
        recheck_at: Timestamp,
    },
    /// Dead: elect the next candidate once the Lease as stored confirms what was judged.
    /// `first` until [`PodLiveness::declared`] (Event, metric, log).
    Dead {
        /// The holder.
        holder: String,
        /// What proved it.
        death: Death,
        /// Whether it was declared dead in this step (for the first time).
        first: bool,
    },
}

/// The Pod caches and what pod liveness has seen per Lease.
pub struct PodLiveness {
    scopes: Vec<Scope>,
    reports: Reports,
}

/// The holders reported dead, per Lease, and the verdicts on them (no I/O: unit-tested by
/// feeding it reports and candidates).
#[derive(Default)]
struct Reports(Mutex<HashMap<LeaseKey, Reported>>);

/// What [`Reports::judge`] weighs a holder's Lease renewal against.
#[derive(Debug, Clone, Copy)]
struct Renewal {
    /// The Lease's `renewTime` as read.
    renewed: Option<Timestamp>,
    /// [`dead_since`] of the report, when the Pod carries it: a renewal at or after it may be a
    /// live process's.
    dead_since: Option<Timestamp>,
}

/// When the container a dead process ran in was last seen to change by the kubelet, by the
/// node's clock (whole seconds, cut down): `finishedAt` of the instance the Pod shows
/// terminated (its current one, or in `lastState` while the next one waits to start), or
/// `startedAt` of the instance running now. Every process of that container alive now started
/// at or after it, so a Lease renewal stamped earlier (the holder stamps `renewTime` by the same
/// clock) is a dead process's. The container is the one `record` names, or the one whose
/// current or last instance has the recorded ID. `None` when the Pod shows no such time.
#[must_use]
fn dead_since(pod: &Pod, record: &ProcessRecord) -> Option<Timestamp> {
    let recorded_id = record
        .container_id
        .as_deref()
        .map(bare_container_id)
        .filter(|id| !id.is_empty());
    let has_id = |id: Option<&String>| {
        id.map(|id| bare_container_id(id))
            .is_some_and(|id| Some(id) == recorded_id)
    };
    let status = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .find(|c| match record.container.as_deref() {
            Some(name) => c.name == name,
            None => {
                has_id(c.container_id.as_ref())
                    || has_id(
                        c.last_state
                            .as_ref()
                            .and_then(|s| s.terminated.as_ref())
                            .and_then(|t| t.container_id.as_ref()),
                    )
            }
        })?;
    let state = status.state.as_ref()?;
    let last_finished = || {
        status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
    };
    let at = if let Some(terminated) = &state.terminated {
        terminated.finished_at.as_ref()
    } else if let Some(running) = &state.running {
        running.started_at.as_ref()
    } else {
        last_finished()
    }?;
    Some(timestamp(at.0))
}

/// Drops everything of a Pod but what liveness reads: its name, namespace, UID, resourceVersion
/// and the mirror annotation of a static pod's mirror, and per container the name, containerID,
/// state and lastState.
pub fn slim_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = meta.annotations.take().and_then(|mut annotations| {
        let mirror = annotations.remove(MIRROR_ANNOTATION)?;
        Some([(MIRROR_ANNOTATION.to_owned(), mirror)].into())
    });
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    pod.spec = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        container_statuses: status.container_statuses.map(|statuses| {
            statuses
                .into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    container_id: c.container_id,
                    state: c.state,
                    last_state: c.last_state,
                    restart_count: c.restart_count,
                    ready: c.ready,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
}

impl PodLiveness {
    /// Starts a Pod cache per scope (`namespaces` empty = cluster-wide) on `tasks`. Each scope
    /// first checks that Pods can be listed; if the API server refuses (403, 404), it logs one
    /// warning and stays unavailable. Pod changes enqueue the Leases whose candidates name the
    /// Pod.
    pub fn start(
        client: &Client,
        namespaces: &[String],
        caches: &Caches,
        queue: &WorkQueue,
        tasks: &mut JoinSet<()>,
    ) -> Arc<Self> {
        let scopes: Vec<Option<String>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        };
        let warned = Arc::new(AtomicBool::new(false));
        let mut built = Vec::new();
        for namespace in scopes {
            let api: Api<Pod> = match &namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            let (pods, writer) = reflector::store();
            let tombstones = Arc::new(Tombstones::default());
            let buried = tombstones.clone();
            let ready = Arc::new(AtomicBool::new(false));
            let available = Arc::new(AtomicBool::new(true));
            let (r, a, w, c, q, scope) = (
                ready.clone(),
                available.clone(),
                warned.clone(),
                caches.clone(),
                queue.clone(),
                namespace.clone(),
            );
            tasks.spawn(async move {
                if let Err(error) = api.list(&ListParams::default().limit(1)).await
                    && refused(&error)
                {
                    a.store(false, Ordering::Relaxed);
                    warn_unavailable(&w, scope.as_deref(), &error);
                    return;
                }
                let events = reflector::reflector(
                    writer,
                    watcher(api, watcher::Config::default()).modify(slim_pod),
                )
                .default_backoff();
                follow(events, &buried, &r, &c, &q).await;
            });
            built.push(Scope {
                namespace,
                pods,
                tombstones,
                ready,
                available,
            });
        }
        Arc::new(Self {
            scopes: built,
            reports: Reports::default(),
        })
    }

    /// Whether every scope serves Pods (false once the API server refused them).
    #[must_use]
    pub fn available(&self) -> bool {
        self.scopes
            .iter()
            .all(|s| s.available.load(Ordering::Relaxed))
    }

    fn scope(&self, namespace: &str) -> Option<&Scope> {
        self.scopes
            .iter()
            .find(|s| s.namespace.as_deref().is_none_or(|ns| ns == namespace))
    }

    /// Whether the cached Pod of `candidate` (a LeaseCandidate naming its Pod and container)
    /// proves that its process stopped: the recorded container terminated or was replaced. Only
    /// the cache is read, so this is cheap enough for every candidate of every election.
    #[must_use]
    pub fn known_dead(&self, candidate: &LeaseCandidate) -> bool {
        let (Some(record), Some(namespace)) = (
            process_record(candidate),
            candidate.metadata.namespace.as_deref(),
        ) else {
            return false;
        };
        self.report(namespace, &record)
            .and_then(|(report, _)| process_dead(&record, &report))
            .is_some()
    }

    /// What is known of the Pod `record` names in `namespace`, and the Pod it was read from: the
    /// cached Pod of that name when it is the recorded one; else, when its deletion was watched,
    /// its last state; else the cached Pod of that name (another Pod: only a recorded container
    /// ID can match in it). `None`: nothing known (cache not synced, Pods unavailable, no Pod of
    /// that name): no evidence.
    fn report(&self, namespace: &str, record: &ProcessRecord) -> Option<(PodReport, Arc<Pod>)> {
        let scope = self.scope(namespace)?;
        if !scope.available.load(Ordering::Relaxed) || !scope.ready.load(Ordering::Relaxed) {
            return None;
        }
        let cached = scope
            .pods
            .get(&ObjectRef::new(&record.pod_name).within(namespace))
            .map(|pod| (pod_report(&pod), pod));
        if let Some((report, pod)) = &cached
            && report.is_pod_of(record)
        {
            return Some((report.clone(), pod.clone()));
        }
        let buried = (!record.pod_uid.is_empty())
            .then(|| scope.tombstones.get(&record.pod_uid))
            .flatten()
            .map(|pod| (pod_report(&pod), pod));
        buried.or(cached)
    }

    /// Whether the holder of `lease` (the Lease `key`, read at `now`) is known dead, and what to
    /// do about it (see the module docs). Only an unexpired Lease with a holder whose
    /// LeaseCandidate names its Pod is looked at.
    pub fn check(
        &self,
        caches: &Caches,
        key: &LeaseKey,
        lease: &LeaseRecord,
        now: Timestamp,
    ) -> Verdict {
        let Some(holder) = lease.holder().filter(|_| !lease.is_expired(now)) else {
            self.forget(key);
            return Verdict::Alive;
        };
        let candidate = caches.candidate(&CandidateKey::new(&key.namespace, holder));
        let Some((candidate, record)) =
            candidate.and_then(|c| process_record(&c).map(|record| (c, record)))
        else {
            self.forget(key);
            return Verdict::Alive;
        };
        let evidence = self
            .report(&key.namespace, &record)
            .and_then(|(report, pod)| {
                let death = process_dead(&record, &report)?;
                Some((death, dead_since(&pod, &record)))
            });
        let Some((death, since)) = evidence else {
            self.forget(key);
            return Verdict::Alive;
        };
        let renewal = Renewal {
            renewed: lease.renew_time,
            dead_since: since,
        };
        self.reports
            .judge(key, holder, death, &candidate, renewal, now)
    }

    /// Records that the holder of `key`, found [`Verdict::Dead`], was declared dead: the next
    /// verdict on the same report is not the first.
    pub fn declared(&self, key: &LeaseKey) {
        self.reports.declared(key);
    }

    /// Forgets what was reported about the holder of `key` (it changed, or the report went
    /// away).
    pub fn forget(&self, key: &LeaseKey) {
        self.reports.forget(key);
    }
}

impl Reports {
    /// The verdict on `holder`, reported dead by `death`, given its LeaseCandidate as cached and
    /// its Lease's renewal as read.
    fn judge(
        &self,
        key: &LeaseKey,
        holder: &str,
        death: Death,
        candidate: &LeaseCandidate,
        renewal: Renewal,
        now: Timestamp,
    ) -> Verdict {
        let Renewal {
            renewed,
            dead_since,
        } = renewal;
        let view = candidate_view(candidate);
        let mut reports = lock(&self.0);
        // The first report about this holder stands (a later one, say its Pod deleted after its
        // container terminated, does not restart the grace).
        let reported = reports.get(key).filter(|r| r.holder == holder);
        let Some(reported) = reported.cloned() else {
            let recheck_at = now + ANSWER_GRACE;
            reports.insert(
                key.clone(),
                Reported {
                    holder: holder.to_owned(),
                    death,
                    seen_at: now,
                    asked_since: now,
                    renewal_at_report: renewed,
                    answered: false,
                    declared: false,
                },
            );
            return Verdict::Reported {
                holder: holder.to_owned(),
                death,
                recheck_at,
            };
        };
        // An identity used by this process only: no restarted process can have renewed under
        // it, so only a renewal a whole second after the kubelet's time (which the dead process
        // cannot have made) says the evidence is wrong. Otherwise a renewal in the second of the
        // death may be a restarted process's (finding B), and keeps the holder.
        let per_process = candidate
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(conclave_core::pod::IDENTITY_ANNOTATION))
            .is_some_and(|v| v == conclave_core::pod::PER_PROCESS);
        let renewed_alive = match dead_since {
            Some(since) if per_process => {
                renewed.is_some_and(|renewed| renewed >= since + Duration::from_secs(1))
            }
            Some(since) => renewed.is_some_and(|renewed| renewed >= since),
            None => renewed != reported.renewal_at_report,
        };
        let answered = reported.answered
            || renewed_alive
            || view
                .ping_time
                .zip(view.renew_time)
                .is_some_and(|(ping, renew)| ping >= reported.asked_since && renew >= ping);
        if answered {
            if !reported.answered {
                let death = reported.death;
                tracing::warn!(%holder, death = death.label(), "the holder answered its ping or renewed its Lease although {}; it keeps its Lease", death.describe());
                if let Some(r) = reports.get_mut(key) {
                    r.answered = true;
                }
            }
            return Verdict::Alive;
        }
        let recheck_at = reported.seen_at + ANSWER_GRACE;
        if now < recheck_at {
            return Verdict::Waiting { recheck_at };
        }
        Verdict::Dead {
            holder: holder.to_owned(),
            death: reported.death,
            first: !reported.declared,
        }
    }

    fn forget(&self, key: &LeaseKey) {
        lock(&self.0).remove(key);
    }

    /// Records that the holder of `key` was declared dead (its Event published).
    fn declared(&self, key: &LeaseKey) {
        if let Some(r) = lock(&self.0).get_mut(key) {
            r.declared = true;
        }
    }
}

/// Whether an API error means Pods are not served to this controller (RBAC, no such resource),
/// which retrying does not fix.
fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 401 | 403 | 404 | 405))
}

fn warn_unavailable(warned: &AtomicBool, namespace: Option<&str>, error: &kube::Error) {
    if warned.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!(
        namespace = namespace.unwrap_or("(all)"),
        %error,
        "pod liveness is unavailable: the API server does not let this controller list Pods \
         (RBAC needs get, list and watch on pods); failover waits for Lease expiry"
    );
}

/// Follows one scope's Pod watch: marks it ready after the first list, keeps each deleted Pod's
/// last state, and enqueues the Leases whose candidates name a Pod that changed or went away.
async fn follow(
    events: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    tombstones: &Tombstones,
    ready: &AtomicBool,
    caches: &Caches,
    queue: &WorkQueue,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(pod)) => pod,
            Ok(watcher::Event::Delete(pod)) => {
                tombstones.bury(pod.clone());
                pod
            }
            Ok(watcher::Event::InitDone) => {
                ready.store(true, Ordering::Relaxed);
                for key in leases_naming_pods(&caches.all_candidates(), None) {
                    queue.add(key);
                }
                continue;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Err(error) => {
                tracing::debug!(%error, "Pod watch error");
                continue;
            }
        };
        let (Some(namespace), Some(name)) = (pod.metadata.namespace, pod.metadata.name) else {
            continue;
        };
        for key in leases_naming_pods(&caches.all_candidates(), Some((&namespace, &name))) {
            queue.add(key);
        }
    }
}

/// The Leases whose candidates name the Pod `pod` (`namespace`, `name`), or any Pod when `None`.
fn leases_naming_pods(
    candidates: &[Arc<LeaseCandidate>],
    pod: Option<(&str, &str)>,
) -> Vec<LeaseKey> {
    candidates
        .iter()
        .filter(|c| {
            let Some(record) = process_record(c) else {
                return false;
            };
            pod.is_none_or(|(namespace, name)| {
                c.metadata.namespace.as_deref() == Some(namespace) && record.pod_name == name
            })
        })
        .filter_map(|c| LeaseKey::of_candidate(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, PodSpec};

    fn candidate(name: &str, lease: &str, pod: Option<&str>) -> Arc<LeaseCandidate> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name, "namespace": "ns",
                    "ownerReferences": pod.map(|p| vec![serde_json::json!(
                        {"apiVersion": "v1", "kind": "Pod", "name": p, "uid": "u"}
                    )]),
                },
                "spec": {"leaseName": lease, "binaryVersion": "1.33.0", "strategy": "S"}
            }))
            .unwrap(),
        )
    }

    /// A Lease renewal judged without a time of the kubelet's (a status that shows none).
    fn untimed(renewed: Option<Timestamp>) -> Renewal {
        Renewal {
            renewed,
            dead_since: None,
        }
    }

    fn pinged(ping: Option<i64>, renew: i64) -> LeaseCandidate {
        let mut c = LeaseCandidate::clone(&candidate("h", "a", Some("web-0")));
        let spec = c.spec.as_mut().unwrap();
        let micro = |s: i64| conclave_core::k8s::micro_time(Timestamp::from_secs(s));
        spec.ping_time = ping.map(micro);
        spec.renew_time = Some(micro(renew));
        c
    }

    #[test]
    fn a_reported_holder_is_pinged_then_declared_dead_unless_it_answers() {
        let key = LeaseKey::new("ns", "a");
        let at = Timestamp::from_secs;
        let renewed = untimed(Some(at(99)));
        let reports = Reports::default();
        let death = Death::ContainerTerminated;
        let silent = pinged(None, 10);
        let verdict = reports.judge(&key, "h", death, &silent, renewed, at(100));
        assert_eq!(
            verdict,
            Verdict::Reported {
                holder: "h".into(),
                death,
                recheck_at: at(100) + ANSWER_GRACE,
            }
        );
        // The ping went out at 100; no answer yet, within the grace.
        let asked = pinged(Some(100), 10);
        assert_eq!(
            reports.judge(
                &key,
                "h",
                death,
                &asked,
                renewed,
                at(100) + ANSWER_GRACE / 2
            ),
            Verdict::Waiting {
                recheck_at: at(100) + ANSWER_GRACE
            }
        );
        // A later report (its Pod deleted) keeps the first one and its grace.
        let after = at(100) + ANSWER_GRACE;
        let dead = |first| Verdict::Dead {
            holder: "h".into(),
            death,
            first,
        };
        assert_eq!(
            reports.judge(&key, "h", Death::ContainerReplaced, &asked, renewed, after),
            dead(true)
        );
        assert_eq!(
            reports.judge(&key, "h", death, &asked, renewed, after),
            dead(true),
            "first until declared"
        );
        reports.declared(&key);
        assert_eq!(
            reports.judge(&key, "h", death, &asked, renewed, after),
            dead(false)
        );

        // Another holder, which answers the ping sent on its report: alive, for good.
        let other = LeaseKey::new("ns", "b");
        assert!(matches!(
            reports.judge(&other, "h", death, &pinged(None, 50), renewed, at(200)),
            Verdict::Reported { .. }
        ));
        let answered = pinged(Some(200), 200);
        assert_eq!(
            reports.judge(&other, "h", death, &answered, renewed, at(201)),
            Verdict::Alive
        );
        assert_eq!(
            reports.judge(&other, "h", death, &pinged(Some(90), 50), renewed, at(300)),
            Verdict::Alive,
            "an answer is not forgotten while the report stands"
        );
    }

    /// The model's finding A: an answer to a ping sent before the report (written before the
    /// process died, seen after the report) does not count; only the ping sent on the report.
    #[test]
    fn an_answer_to_a_ping_from_before_the_report_does_not_keep_a_dead_holder() {
        let key = LeaseKey::new("ns", "a");
        let at = Timestamp::from_secs;
        let renewed = untimed(Some(at(95)));
        let reports = Reports::default();
        let death = Death::ContainerTerminated;
        // Probed at 90, still unanswered in the cache when the report is seen at 100.
        assert!(matches!(
            reports.judge(&key, "h", death, &pinged(Some(90), 50), renewed, at(100)),
            Verdict::Reported { .. }
        ));
        // The answer to the probe (renewTime 91) arrives; the ping sent on the report (100)
        // stays unanswered.
        let stale_answer = pinged(Some(90), 91);
        assert!(matches!(
            reports.judge(
                &key,
                "h",
                death,
                &stale_answer,
                renewed,
                at(100) + ANSWER_GRACE
            ),
            Verdict::Dead { first: true, .. }
        ));
    }

    /// Without a time of the kubelet's (a Pod gone or replaced): the identity may have passed to
    /// a process in another Pod (a fixed identity) whose LeaseCandidate this controller has not
    /// seen; a renewal of the Lease since the report keeps the holder.
    #[test]
    fn a_renewal_of_the_lease_since_the_report_keeps_the_holder() {
        let key = LeaseKey::new("ns", "a");
        let at = Timestamp::from_secs;
        let reports = Reports::default();
        let death = Death::ContainerTerminated;
        let cached = pinged(None, 50);
        assert!(matches!(
            reports.judge(&key, "h", death, &cached, untimed(Some(at(95))), at(100)),
            Verdict::Reported { .. }
        ));
        // Unanswered in the cache, but the Lease was renewed since: alive.
        assert_eq!(
            reports.judge(
                &key,
                "h",
                death,
                &cached,
                untimed(Some(at(101))),
                at(100) + ANSWER_GRACE
            ),
            Verdict::Alive
        );
    }

    /// The model's finding B, closed: the kubelet's `finishedAt` (or the next instance's
    /// `startedAt`) bounds when any live process of the container started. A renewal stamped at
    /// or after it may be a restarted process's (it keeps the holder, however long before the
    /// report it was seen); one stamped before it is a dead process's (it does not).
    #[test]
    fn a_renewal_is_judged_against_the_kubelets_time() {
        let at = Timestamp::from_secs;
        let death = Death::ContainerTerminated;
        let cached = pinged(None, 50);
        let timed = |renewed: i64| Renewal {
            renewed: Some(at(renewed)),
            dead_since: Some(at(95)),
        };
        for (renewed, alive) in [(94, false), (95, true), (96, true)] {
            let key = LeaseKey::new("ns", "a");
            let reports = Reports::default();
            assert!(matches!(
                reports.judge(&key, "h", death, &cached, timed(renewed), at(100)),
                Verdict::Reported { .. }
            ));
            let verdict = reports.judge(
                &key,
                "h",
                death,
                &cached,
                timed(renewed),
                at(100) + ANSWER_GRACE,
            );
            assert_eq!(
                verdict == Verdict::Alive,
                alive,
                "renewed at {renewed}, finished at 95: {verdict:?}"
            );
        }
        // A dead holder's last renewal seen only after the report does not keep it either.
        let key = LeaseKey::new("ns", "b");
        let reports = Reports::default();
        reports.judge(&key, "h", death, &cached, timed(90), at(100));
        assert!(matches!(
            reports.judge(&key, "h", death, &cached, timed(94), at(101)),
            Verdict::Dead { first: true, .. }
        ));
    }

    #[test]
    fn dead_since_is_the_kubelets_last_time_for_the_recorded_container() {
        let record = ProcessRecord {
            pod_name: "web-0".into(),
            container: Some("app".into()),
            container_id: Some("containerd://aaaa".into()),
            ..ProcessRecord::default()
        };
        let pod = |state: serde_json::Value, last: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-0"},
                "status": {"containerStatuses": [
                    {"name": "sidecar", "image": "s", "imageID": "", "ready": true,
                     "restartCount": 0,
                     "state": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:09:00Z"}}},
                    {"name": "app", "image": "a", "imageID": "", "ready": false,
                     "restartCount": 1, "containerID": "containerd://bbbb",
                     "state": state, "lastState": last},
                ]},
            }))
            .unwrap()
        };
        let secs = |s: &str| Some(timestamp(s.parse().unwrap()));
        let finished = serde_json::json!({"terminated": {"exitCode": 137,
            "containerID": "containerd://aaaa", "finishedAt": "2026-01-01T00:00:05Z"}});
        let table = [
            (
                "terminated",
                pod(finished.clone(), serde_json::json!({})),
                secs("2026-01-01T00:00:05Z"),
            ),
            (
                "restarted",
                pod(
                    serde_json::json!({"running": {"startedAt": "2026-01-01T00:00:07Z"}}),
                    finished.clone(),
                ),
                secs("2026-01-01T00:00:07Z"),
            ),
            (
                "waiting to restart",
                pod(
                    serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}),
                    finished,
                ),
                secs("2026-01-01T00:00:05Z"),
            ),
            (
                "no time",
                pod(
                    serde_json::json!({"terminated": {"exitCode": 137}}),
                    serde_json::json!({}),
                ),
                None,
            ),
        ];
        for (what, pod, expected) in table {
            assert_eq!(dead_since(&pod, &record), expected, "{what}");
        }
        let unnamed = ProcessRecord {
            container: None,
            ..record
        };
        let restarted = pod(
            serde_json::json!({"running": {"startedAt": "2026-01-01T00:00:07Z"}}),
            serde_json::json!({"terminated": {"exitCode": 137, "containerID": "containerd://aaaa"}}),
        );
        assert_eq!(
            dead_since(&restarted, &unnamed),
            secs("2026-01-01T00:00:07Z"),
            "found by the recorded ID in lastState"
        );
    }

    #[test]
    fn pod_changes_enqueue_the_leases_of_the_candidates_naming_the_pod() {
        let candidates = [
            candidate("web-0-1", "a", Some("web-0")),
            candidate("web-1-1", "b", Some("web-1")),
            candidate("legacy", "c", None),
        ];
        let keys = leases_naming_pods(&candidates, Some(("ns", "web-0")));
        assert_eq!(keys, [LeaseKey::new("ns", "a")]);
        assert!(leases_naming_pods(&candidates, Some(("other", "web-0"))).is_empty());
        let all = leases_naming_pods(&candidates, None);
        assert_eq!(all, [LeaseKey::new("ns", "a"), LeaseKey::new("ns", "b")]);
    }

    #[test]
    fn slim_pods_keep_what_liveness_reads() {
        let mut pod = Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                labels: Some([("a".to_owned(), "b".to_owned())].into()),
                annotations: Some(
                    [
                        ("a".to_owned(), "b".to_owned()),
                        (MIRROR_ANNOTATION.to_owned(), "0f0f".to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    image: "a-long-image-name".into(),
                    container_id: Some("containerd://x".into()),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 137,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let before = pod_report(&pod);
        assert_eq!(before.mirror_of.as_deref(), Some("0f0f"));
        slim_pod(&mut pod);
        assert_eq!(pod_report(&pod), before);
        assert!(pod.spec.is_none() && pod.metadata.labels.is_none());
        assert_eq!(pod.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
    }

    /// A deleted Pod's last state is kept by UID, and read back while it is young.
    #[test]
    fn tombstones_keep_a_deleted_pods_last_state_by_uid() {
        let tombstones = Tombstones::default();
        let pod = |uid: Option<&str>| Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web-0".into()),
                uid: uid.map(Into::into),
                ..Default::default()
            },
            ..Default::default()
        };
        tombstones.bury(pod(Some("u1")));
        tombstones.bury(pod(None));
        assert_eq!(
            tombstones.get("u1").and_then(|p| p.metadata.uid.clone()),
            Some("u1".into())
        );
        assert!(tombstones.get("u2").is_none());
        assert_eq!(
            lock(&tombstones.0).len(),
            1,
            "a Pod without UID is not kept"
        );
    }
}
