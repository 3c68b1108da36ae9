//! Pod liveness: whether the kubelet's report on a Pod proves that the process behind a
//! LeaseCandidate no longer runs, as plain data.
//!
//! `conclave-candidate`, run in a pod, names its Pod in an ownerReference of its LeaseCandidate
//! and records its container in annotations: the container's name ([`CONTAINER_ANNOTATION`]),
//! the container ID its runtime gave it ([`CONTAINER_ID_ANNOTATION`]), and when the process
//! started by the node's clock ([`PROCESS_STARTED_ANNOTATION`]). The controller compares that
//! record with the Pod's `status.containerStatuses[]` ([`process_dead`]).
//!
//! Only positive evidence that *this* process stopped counts ([`Death`]): the Pod is gone or was
//! replaced by another of the same name, the recorded container is reported terminated (in
//! `state` or in `lastState`), or another instance of the same container started after this
//! process did. A Pod that merely looks unhealthy (node NotReady, phase `Unknown`, a
//! `deletionTimestamp` with its grace period running, a `lastState` of an earlier container) is
//! not evidence: its process may still run and renew, so such a holder waits for its Lease to
//! expire. The kubelet's opposite mistake (a dead container still shown running) only delays
//! failover to the Lease's expiry.

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

/// What a LeaseCandidate records about the process behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessRecord {
    /// The Pod's name (from the candidate's ownerReference of kind Pod).
    pub pod_name: String,
    /// The Pod's UID (from the same ownerReference).
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

/// What the controller knows of a Pod a candidate names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodReport {
    /// The API server answered that no Pod has this name (NotFound, or its deletion was watched).
    Gone,
    /// The Pod as last read.
    Present {
        /// `metadata.uid`.
        uid: String,
        /// `status.containerStatuses[]` (empty when the Pod has no status yet).
        containers: Vec<ContainerReport>,
    },
}

/// Why a process is known to have stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// The Pod no longer exists.
    PodGone,
    /// A Pod of the same name but another UID exists: the candidate's Pod was deleted.
    PodReplaced,
    /// The recorded container is reported terminated (`state.terminated`, or `lastState` of the
    /// instance that replaced it).
    ContainerTerminated,
    /// Another instance of the recorded container started after the process did.
    ContainerReplaced,
}

impl Death {
    /// A short label for metrics and logs.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::PodGone => "pod_gone",
            Self::PodReplaced => "pod_replaced",
            Self::ContainerTerminated => "container_terminated",
            Self::ContainerReplaced => "container_replaced",
        }
    }

    /// What the kubelet or the API server reported, as a phrase for Events and logs.
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::PodGone => "its Pod was deleted",
            Self::PodReplaced => "its Pod was deleted and another with the same name created",
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
/// A container matches the record by ID when one is recorded. The "started after" rule needs the
/// container's name and the process's start: the kubelet's `startedAt` is cut to whole seconds,
/// so an instance whose `startedAt` is later than the process's start started after it (instances
/// of one container run one after the other), and one started in the same second as the process
/// is never taken for a later one.
#[must_use]
pub fn process_dead(record: &ProcessRecord, pod: &PodReport) -> Option<Death> {
    let (uid, containers) = match pod {
        PodReport::Gone => return Some(Death::PodGone),
        PodReport::Present { uid, containers } => (uid, containers),
    };
    if !record.pod_uid.is_empty() && !uid.is_empty() && *uid != record.pod_uid {
        return Some(Death::PodReplaced);
    }
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
    let (Some(name), Some(started)) = (record.container.as_deref(), record.started) else {
        return None;
    };
    let replaced = containers.iter().any(|c| {
        c.name == name
            && c.container_id
                .as_deref()
                .map(bare_container_id)
                .is_some_and(|current| recorded_id != Some(current))
            && c.started_at.is_some_and(|at| at > started)
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
        PodReport::Present {
            uid: "uid-1".into(),
            containers,
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
        let table: [(&str, ProcessRecord, PodReport, Option<Death>); 13] = [
            ("pod gone", record(), PodReport::Gone, Some(Death::PodGone)),
            (
                "another pod of the same name",
                record(),
                PodReport::Present {
                    uid: "uid-2".into(),
                    containers: Vec::new(),
                },
                Some(Death::PodReplaced),
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
