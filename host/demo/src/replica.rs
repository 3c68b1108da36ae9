//! One simulated replica of the demo component: a coordinated elector per demo Lease (each with
//! its own LeaseCandidate), doing "work" in each term it leads, reporting every transition to
//! the journal.

use super::journal::{Events, What};
use super::{DemoLease, Error, LeaseId};
use conclave_candidate::{CandidateConfig, Elector, ElectorHandle, LeaseConfig, Term, Transition};
use conclave_core::k8s::micro_time;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::PostParams;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The annotation `conclave.dev/priority` reads.
pub const PRIORITY_ANNOTATION: &str = "coordination.conclave.dev/priority";

/// The label `conclave.dev/zone-affinity` reads.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// How long one work item takes, and the pause between items.
const WORK_ITEM: Duration = Duration::from_millis(100);

/// A replica's versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `binaryVersion`.
    pub binary: String,
    /// `emulationVersion`.
    pub emulation: String,
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.binary, self.emulation)
    }
}

/// The demo's replicas: index 0, 1, 2.
#[must_use]
pub fn replica_name(index: usize) -> String {
    format!("replica-{index}")
}

/// The candidate identity of a replica in a Lease (LeaseCandidate names are per namespace, so
/// each Lease needs its own).
#[must_use]
pub fn identity(lease: LeaseId, index: usize) -> String {
    match lease {
        LeaseId::Main => replica_name(index),
        LeaseId::Plugin => format!("{}.p", replica_name(index)),
    }
}

/// Labels and annotations of a replica's candidate in the plugin Lease: replica-2 has the highest
/// priority and the most preferred zone, so plugin strategies favour it.
fn plugin_metadata(index: usize) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let zone = ["zone-b", "zone-c", "zone-a"][index % 3];
    let priority = 10 * (index + 1);
    (
        [(ZONE_LABEL.to_owned(), zone.to_owned())].into(),
        [(PRIORITY_ANNOTATION.to_owned(), priority.to_string())].into(),
    )
}

/// Work done in the current term, per candidate.
#[derive(Debug, Default)]
struct WorkCounter(AtomicU64);

struct Member {
    lease: LeaseId,
    identity: String,
    handle: ElectorHandle,
    task: JoinHandle<Result<(), conclave_candidate::Error>>,
}

/// A running replica.
pub struct Replica {
    /// `replica-N`.
    pub name: String,
    shutdown: CancellationToken,
    members: Vec<Member>,
}

impl Replica {
    /// Starts replica `index` with `versions` in every Lease of `leases`: registers its
    /// LeaseCandidates and follows until elected.
    pub async fn start(
        client: &Client,
        namespace: &str,
        index: usize,
        versions: Versions,
        leases: &[DemoLease],
        events: &Events,
    ) -> Result<Self, Error> {
        let shutdown = CancellationToken::new();
        let mut members = Vec::new();
        for lease in leases {
            let identity = identity(lease.id, index);
            let lease_config = LeaseConfig::new(namespace, &lease.name, &identity);
            let mut candidate = CandidateConfig::new(
                versions.binary.clone(),
                versions.emulation.clone(),
                lease.strategy.clone(),
            );
            candidate
                .labels
                .insert("app.kubernetes.io/name".into(), "conclave-demo".into());
            candidate
                .labels
                .insert("conclave.dev/demo-replica".into(), replica_name(index));
            if lease.id == LeaseId::Plugin {
                let (labels, annotations) = plugin_metadata(index);
                candidate.labels.extend(labels);
                // conclave-candidate writes labels only and keeps the annotations it finds, so
                // the candidate is created here with its annotations, then adopted by the elector.
                precreate(client, &lease_config, &candidate, annotations).await?;
            }
            let elector = Elector::coordinated(client.clone(), lease_config, candidate)
                .map_err(|source| Error::Candidate {
                    action: format!("setting up the elector of {identity}"),
                    source: Box::new(source),
                })?
                .with_drain_timeout(Duration::from_secs(5));
            let handle = elector.handle();
            let task = spawn_member(
                elector,
                lease.id,
                identity.clone(),
                events.clone(),
                shutdown.child_token(),
            );
            members.push(Member {
                lease: lease.id,
                identity,
                handle,
                task,
            });
        }
        Ok(Self {
            name: replica_name(index),
            shutdown,
            members,
        })
    }

    /// Its identity in each Lease.
    #[must_use]
    pub fn identities(&self) -> Vec<(LeaseId, String)> {
        self.members
            .iter()
            .map(|m| (m.lease, m.identity.clone()))
            .collect()
    }

    /// Whether the elector for `lease` currently leads.
    #[must_use]
    pub fn is_leading(&self, lease: LeaseId) -> bool {
        self.members
            .iter()
            .any(|m| m.lease == lease && m.handle.is_leading())
    }

    /// Whether every LeaseCandidate is registered.
    #[must_use]
    pub fn is_registered(&self) -> bool {
        self.members.iter().all(|m| m.handle.is_ready())
    }

    /// Stops gracefully: candidates deleted, running terms drained, Leases released. Waits at
    /// most `limit`; electors still running then are aborted. `Err` says what did not stop.
    pub async fn stop(self, limit: Duration) -> Result<(), String> {
        self.shutdown.cancel();
        let mut problems = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        for member in self.members {
            let abort = member.task.abort_handle();
            match tokio::time::timeout_at(deadline, member.task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => problems.push(format!("{}: {error}", member.identity)),
                Ok(Err(join)) => problems.push(format!("{}: {join}", member.identity)),
                Err(_) => {
                    abort.abort();
                    problems.push(format!(
                        "{}: did not stop within {limit:?}",
                        member.identity
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("stopping {}: {}", self.name, problems.join("; ")))
        }
    }
}

/// Creates the LeaseCandidate with `annotations` (and `renewTime` now) unless it exists.
async fn precreate(
    client: &Client,
    lease: &LeaseConfig,
    candidate: &CandidateConfig,
    annotations: BTreeMap<String, String>,
) -> Result<(), Error> {
    candidate
        .validate(lease)
        .map_err(|source| Error::Candidate {
            action: format!("checking LeaseCandidate {}", lease.identity),
            source: Box::new(source),
        })?;
    let api: Api<LeaseCandidate> = Api::namespaced(client.clone(), &lease.namespace);
    let mut object = candidate.object(lease);
    object.metadata.annotations = Some(annotations);
    if let Some(spec) = object.spec.as_mut() {
        spec.renew_time = Some(micro_time(super::now()));
    }
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube {
            action: format!(
                "creating LeaseCandidate {}/{}",
                lease.namespace, lease.identity
            ),
            source,
        }),
    }
}

/// Runs one elector: each term does work items until it is cancelled; transitions go to the
/// journal in the order the elector emitted them.
fn spawn_member(
    elector: Elector,
    lease: LeaseId,
    identity: String,
    events: Events,
    shutdown: CancellationToken,
) -> JoinHandle<Result<(), conclave_candidate::Error>> {
    let mut transitions = elector.handle().transitions();
    let work = Arc::new(WorkCounter::default());
    let lead_work = work.clone();
    tokio::spawn(async move {
        let run = elector.run(
            move |term: Term| {
                let work = lead_work.clone();
                work.0.store(0, Ordering::Relaxed);
                async move { do_work(term, work).await }
            },
            shutdown,
        );
        tokio::pin!(run);
        let forward = |transition: Transition| {
            let what = match transition {
                Transition::Leading { term, at, .. } => Some((
                    at,
                    What::Leading {
                        lease,
                        identity: identity.clone(),
                        term,
                    },
                )),
                Transition::StoppedLeading {
                    term, at, reason, ..
                } => Some((
                    at,
                    What::StoppedLeading {
                        lease,
                        identity: identity.clone(),
                        term,
                        reason: reason.label(),
                        work: work.0.load(Ordering::Relaxed),
                    },
                )),
                Transition::Released { at, .. } => Some((
                    at,
                    What::Released {
                        lease,
                        identity: identity.clone(),
                    },
                )),
                Transition::ReleaseFailed { at, error, .. } => Some((
                    at,
                    What::ReleaseFailed {
                        lease,
                        identity: identity.clone(),
                        error,
                    },
                )),
                Transition::Following { .. } => None,
            };
            if let Some((at, what)) = what {
                events.send_at(at, what);
            }
        };
        loop {
            tokio::select! {
                result = &mut run => {
                    while let Ok(transition) = transitions.try_recv() {
                        forward(transition);
                    }
                    return result;
                }
                transition = transitions.recv() => match transition {
                    Ok(transition) => forward(transition),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "the demo journal missed elector transitions");
                    }
                    Err(broadcast::error::RecvError::Closed) => return (&mut run).await,
                },
            }
        }
    })
}

/// The replica's job while it leads: one work item after another until the term ends.
async fn do_work(term: Term, work: Arc<WorkCounter>) {
    loop {
        tokio::select! {
            () = term.cancelled() => return,
            () = tokio::time::sleep(WORK_ITEM) => {
                work.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
