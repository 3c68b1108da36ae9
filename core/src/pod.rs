//! Pod liveness: whether the kubelet's report on a Pod proves that the process behind a
//! LeaseCandidate no longer runs, as plain data.
//!
//! `conclave-candidate`, run in a pod, names its Pod in an ownerReference of its LeaseCandidate
//! (in a static pod, whose UID no API object has, in the annotations [`POD_ANNOTATION`] and
//! [`POD_UID_ANNOTATION`] instead) and records its container in annotations: the container's name ([`CONTAINER_ANNOTATION`]),
//! the container ID its runtime gave it ([`CONTAINER_ID_ANNOTATION`]), and when the process
//! started by the node's clock ([`PROCESS_STARTED_ANNOTATION`]). The controller compares that
//! record with the Pod's `status.containerStatuses[]` ([`process_dead`]).
//!
//! Only the kubelet's report that *this* process's container stopped counts ([`Death`]): the
//! recorded container is reported terminated (in `state` or in `lastState`), or another instance
//! of the same container, in the same Pod, started after this process did. The Pod is matched by
//! UID, or for a static pod through its mirror Pod's [`MIRROR_ANNOTATION`]. A Pod's absence is
//! not evidence: a force delete removes it without the kubelet's word while the process may still
//! run, and a Pod recreated under the same name is another Pod. A Pod deleted after its kubelet
//! reported the container terminated (the graceful path) is judged on that last report. A Pod that
//! merely looks unhealthy (node NotReady, phase `Unknown`, a `deletionTimestamp` with its grace
//! period running, a `lastState` of an earlier container) is not evidence either: its process may
//! still run and renew, so such a holder waits for its Lease to expire. The kubelet's opposite
//! mistake (a dead container still shown running) only delays failover to the Lease's expiry.

use crate::time::Timestamp;
use alloc::string::String;
use alloc::vec::Vec;

/// Annotation on a LeaseCandidate: the name of the container its process runs in
/// (`$CONTAINER_NAME`, set by the pod spec).
pub const CONTAINER_ANNOTATION: &str = "coordination.conclave.dev/container";

/// Annotation on a LeaseCandidate: the ID the container runtime gave the container its process
/// runs in (64 hexadecimal digits, without the `containerd://` prefix the kubelet reports), read
/// by the process from its own cgroup. A container restarted by the kubelet gets a new one.
pub const CONTAINER_ID_ANNOTATION: &str = "coordination.conclave.dev/container-id";

/// Annotation on a LeaseCandidate: when its process started, RFC 3339 by the node's clock (the
/// clock that also stamps the kubelet's `startedAt`).
pub const PROCESS_STARTED_ANNOTATION: &str = "coordination.conclave.dev/process-started";

/// Annotation on a LeaseCandidate: [`PER_PROCESS`] when its name (the holder identity) was drawn
/// by this process and is never used by another (`conclave-candidate`'s default identity: the
/// Pod's name and a random suffix per process). Then a renewal of the Lease under that identity
/// can only be this process's: a restarted container cannot have renewed it, and the kubelet's
/// report that this process's container terminated is enough, whatever second the last renewal
/// fell in.
pub const IDENTITY_ANNOTATION: &str = "coordination.conclave.dev/identity";

/// The value of [`IDENTITY_ANNOTATION`] for an identity used by one process only.
pub const PER_PROCESS: &str = "per-process";

/// Annotation on a LeaseCandidate: the name of the Pod its process runs in, written by a process
/// in a static pod instead of an ownerReference. A static pod's `metadata.uid` (the kubelet's
/// hash of its manifest) names no API object, and Kubernetes' garbage collector deletes an object
/// whose owner's UID matches nothing; the controller reads this pair when no ownerReference
/// names a Pod.
pub const POD_ANNOTATION: &str = "coordination.conclave.dev/pod";

/// Annotation on a LeaseCandidate: the UID of the Pod [`POD_ANNOTATION`] names, as its
/// containers see it (a static pod's: its mirror Pod carries it as [`MIRROR_ANNOTATION`]).
pub const POD_UID_ANNOTATION: &str = "coordination.conclave.dev/pod-uid";

/// What a LeaseCandidate records about the process behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessRecord {
    /// The Pod's name (from the candidate's ownerReference of kind Pod, else [`POD_ANNOTATION`]).
    pub pod_name: String,
    /// The Pod's UID (from the same ownerReference, else [`POD_UID_ANNOTATION`]).
    pub pod_uid: String,
    /// The container's name, if recorded.
    pub container: Option<String>,
    /// The container's ID, without a `runtime://` prefix, if recorded.
    pub container_id: Option<String>,
    /// When the process started, if recorded.
    pub started: Option<Timestamp>,
}

/// One entry of a Pod's `status.containerStatuses[]`, as far as liveness goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerReport {
    /// `name`.
    pub name: String,
    /// `containerID` of the current instance, without its `runtime://` prefix.
    pub container_id: Option<String>,
    /// Whether `state.terminated` is set (the current instance has exited).
    pub terminated: bool,
    /// `state.running.startedAt` or `state.terminated.startedAt`: when the current instance
    /// started (whole seconds, as the kubelet reports it).
    pub started_at: Option<Timestamp>,
    /// `lastState.terminated.containerID` (the previous instance, which has exited), without its
    /// prefix.
    pub last_terminated_id: Option<String>,
}

/// The annotation the kubelet puts on the mirror Pod of a static pod: the UID the kubelet gave the
/// static pod (a hash of its manifest), which is the `metadata.uid` the downward API shows its
/// containers, while the mirror Pod in the API server has a UID of its own.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the controller knows of a Pod a candidate names: the Pod as last watched, or, once its
/// deletion was watched, as the deletion event carried it (the kubelet's last report).
///
/// There is no report of a Pod that is simply absent: a Pod's absence is no evidence about its
/// processes. A force delete (`--grace-period=0 --force`, Pod GC after a Node object is deleted)
/// removes the object without any word from the kubelet, and the process may still run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodReport {
    /// `metadata.uid`.
    pub uid: String,
    /// The [`MIRROR_ANNOTATION`] of a static pod's mirror Pod: the UID its containers know.
    pub mirror_of: Option<String>,
    /// `status.containerStatuses[]` (empty when the Pod has no status yet).
    pub containers: Vec<ContainerReport>,
}

impl PodReport {
    /// Whether this is the Pod `record` names (its UID, or the static pod whose mirror it is).
    /// `false` when either UID is unknown: a Pod of the same name may be another one.
    #[must_use]
    pub fn is_pod_of(&self, record: &ProcessRecord) -> bool {
        !record.pod_uid.is_empty()
            && (self.uid == record.pod_uid || self.mirror_of.as_deref() == Some(&record.pod_uid))
    }
}

/// How much later than a process's recorded start another instance of its container must have
/// started, by the kubelet's `startedAt`, to prove that it replaced the process when no container
/// ID is recorded. The runtime stamps `startedAt` after it started the container, and the process
/// records its start when it first asks, so its own instance's `startedAt` may fall in a later
/// second than the recorded start; this bounds that lag. A process that dies within this time of
/// starting and is restarted is failed over at its Lease's expiry instead.
pub const UNRECORDED_ID_START_MARGIN: core::time::Duration = core::time::Duration::from_secs(10);

/// Why a process is known to have stopped: only the kubelet's report about its container counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// The recorded container is reported terminated (`state.terminated`, or `lastState` of the
    /// instance that replaced it).
    ContainerTerminated,
    /// Another instance of the recorded container, in the same Pod, started after the process
    /// did.
    ContainerReplaced,
}

impl Death {
    /// A short label for metrics and logs.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::ContainerTerminated => "container_terminated",
            Self::ContainerReplaced => "container_replaced",
        }
    }

    /// What the kubelet reported, as a phrase for Events and logs.
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::ContainerTerminated => "the kubelet reports its container terminated",
            Self::ContainerReplaced => {
                "the kubelet reports another instance of its container started after it"
            }
        }
    }
}

/// Strips the `runtime://` prefix the kubelet puts on container IDs (`containerd://abc` → `abc`).
#[must_use]
pub fn bare_container_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, bare)| bare)
}

/// Whether the Pod report proves that the process `record` describes no longer runs; `None` when
/// it does not (including every report that is only a sign of trouble, see the module docs).
///
/// A container matches the record by ID when one is recorded (container IDs are unique, so this
/// holds in whatever Pod the report is about). The "started after" rule needs the container's
/// name, the process's start, and the report to be about the process's own Pod
/// ([`PodReport::is_pod_of`]: a Pod recreated under the same name has containers of the same
/// names that say nothing about the old Pod's process). The kubelet's `startedAt` is cut to whole
/// seconds, so an instance whose `startedAt` is later than the process's start started after it
/// (instances of one container run one after the other), one started in the same second is never
/// taken for a later one, and without a recorded container ID (which would tell the process's own
/// instance apart) a later instance must have started [`UNRECORDED_ID_START_MARGIN`] after it.
#[must_use]
pub fn process_dead(record: &ProcessRecord, pod: &PodReport) -> Option<Death> {
    let containers = &pod.containers;
    let recorded_id = record
        .container_id
        .as_deref()
        .map(bare_container_id)
        .filter(|id| !id.is_empty());
    if let Some(id) = recorded_id {
        let is_ours = |other: Option<&String>| other.is_some_and(|o| bare_container_id(o) == id);
        if containers.iter().any(|c| {
            (c.terminated && is_ours(c.container_id.as_ref()))
                || is_ours(c.last_terminated_id.as_ref())
        }) {
            return Some(Death::ContainerTerminated);
        }
    }
    if !pod.is_pod_of(record) {
        return None;
    }
    let (Some(name), Some(started)) = (record.container.as_deref(), record.started) else {
        return None;
    };
    let later_than = match recorded_id {
        Some(_) => started,
        None => started + UNRECORDED_ID_START_MARGIN,
    };
    let replaced = containers.iter().any(|c| {
        c.name == name
            && c.container_id
                .as_deref()
                .map(bare_container_id)
                .is_some_and(|current| recorded_id != Some(current))
            && c.started_at.is_some_and(|at| at > later_than)
    });
    replaced.then_some(Death::ContainerReplaced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const OURS: &str = "aaaa";
    const NEWER: &str = "bbbb";
    const STARTED: i64 = 1_000_000_500_000; // 1,000,000.5 s

    fn record() -> ProcessRecord {
        ProcessRecord {
            pod_name: "web-0".into(),
            pod_uid: "uid-1".into(),
            container: Some("app".into()),
            container_id: Some(OURS.into()),
            started: Some(Timestamp::from_micros(STARTED)),
        }
    }

    fn pod(containers: Vec<ContainerReport>) -> PodReport {
        PodReport {
            uid: "uid-1".into(),
            mirror_of: None,
            containers,
        }
    }

    /// The same Pod's containers under another Pod of the same name (a StatefulSet recreating
    /// it after a force delete).
    fn recreated(containers: Vec<ContainerReport>) -> PodReport {
        PodReport {
            uid: "uid-2".into(),
            ..pod(containers)
        }
    }

    fn app(id: &str, terminated: bool, started_secs: i64, last: Option<&str>) -> ContainerReport {
        ContainerReport {
            name: "app".into(),
            container_id: Some(alloc::format!("containerd://{id}")),
            terminated,
            started_at: Some(Timestamp::from_micros(started_secs * 1_000_000)),
            last_terminated_id: last.map(|l| alloc::format!("containerd://{l}")),
        }
    }

    #[test]
    fn only_positive_evidence_about_this_process_counts() {
        let sidecar = ContainerReport {
            name: "sidecar".into(),
            container_id: Some("containerd://cccc".into()),
            terminated: true,
            started_at: Some(Timestamp::from_micros(2_000_000_000_000)),
            last_terminated_id: None,
        };
        let table: [(&str, ProcessRecord, PodReport, Option<Death>); 18] = [
            (
                "another pod of the same name, no status yet: a force delete is no evidence",
                record(),
                recreated(Vec::new()),
                None,
            ),
            (
                "another pod of the same name, its container started after us",
                record(),
                recreated(vec![app(NEWER, false, 1_000_030, None)]),
                None,
            ),
            (
                "another pod of the same name still reporting our container terminated",
                record(),
                recreated(vec![app(NEWER, false, 1_000_030, Some(OURS))]),
                Some(Death::ContainerTerminated),
            ),
            (
                "no pod UID recorded: a later instance may be another pod's",
                ProcessRecord {
                    pod_uid: String::new(),
                    ..record()
                },
                pod(vec![app(NEWER, false, 1_000_030, None)]),
                None,
            ),
            (
                "a static pod's mirror: the same pod under the UID its containers know",
                ProcessRecord {
                    pod_uid: "0123456789abcdef0123456789abcdef".into(),
                    ..record()
                },
                PodReport {
                    mirror_of: Some("0123456789abcdef0123456789abcdef".into()),
                    ..pod(vec![app(NEWER, false, 1_000_030, None)])
                },
                Some(Death::ContainerReplaced),
            ),
            (
                "our container running",
                record(),
                pod(vec![app(OURS, false, 1_000_000, None)]),
                None,
            ),
            (
                "our container terminated",
                record(),
                pod(vec![app(OURS, true, 1_000_000, None)]),
                Some(Death::ContainerTerminated),
            ),
            (
                "restarted: lastState names ours",
                record(),
                pod(vec![app(NEWER, false, 1_000_010, Some(OURS))]),
                Some(Death::ContainerTerminated),
            ),
            (
                "replaced twice: a later instance started after us",
                record(),
                pod(vec![app(NEWER, false, 1_000_030, Some("dddd"))]),
                Some(Death::ContainerReplaced),
            ),
            (
                "status lags: an earlier instance, terminated, still reported",
                record(),
                pod(vec![app(NEWER, true, 999_990, Some("eeee"))]),
                None,
            ),
            (
                "another instance started in our second: not provably later",
                record(),
                pod(vec![app(NEWER, false, 1_000_000, None)]),
                None,
            ),
            (
                "lastState of an earlier container is not evidence",
                record(),
                pod(vec![app(OURS, false, 1_000_000, Some(NEWER))]),
                None,
            ),
            (
                "another container of the pod terminated",
                record(),
                pod(vec![app(OURS, false, 1_000_000, None), sidecar.clone()]),
                None,
            ),
            ("no status yet", record(), pod(Vec::new()), None),
            (
                "nothing recorded but the pod: only its deletion counts",
                ProcessRecord {
                    container: None,
                    container_id: None,
                    started: None,
                    ..record()
                },
                pod(vec![app(NEWER, true, 1_000_030, Some(OURS))]),
                None,
            ),
            (
                "no container ID: a later instance still proves it",
                ProcessRecord {
                    container_id: None,
                    ..record()
                },
                pod(vec![app(NEWER, false, 1_000_030, None)]),
                Some(Death::ContainerReplaced),
            ),
            (
                "no container ID: our own instance, stamped by the runtime a second after we \
                 recorded our start, is not a later one",
                ProcessRecord {
                    container_id: None,
                    ..record()
                },
                pod(vec![app(OURS, false, 1_000_001, None)]),
                None,
            ),
            (
                "no container ID: nor stamped a few seconds late under load",
                ProcessRecord {
                    container_id: None,
                    ..record()
                },
                pod(vec![app(OURS, false, 1_000_009, None)]),
                None,
            ),
        ];
        for (case, record, report, want) in table {
            assert_eq!(process_dead(&record, &report), want, "{case}");
        }
    }

    #[test]
    fn container_ids_compare_without_their_runtime_prefix() {
        assert_eq!(bare_container_id("containerd://abc"), "abc");
        assert_eq!(bare_container_id("abc"), "abc");
        assert_eq!(bare_container_id(""), "");
    }
}
