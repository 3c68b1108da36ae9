//! The Pod and the container this process runs in, recorded on its LeaseCandidate so that the
//! candidate is deleted with its Pod (an ownerReference) and an election controller can tell from
//! the kubelet's report when this process has stopped (pod liveness, [`conclave_core::pod`]).
//!
//! Everything comes from the environment the pod spec sets through the downward API, plus the
//! process's own cgroup:
//!
//! | variable | pod spec | used for |
//! |---|---|---|
//! | `POD_NAME` | `fieldRef: metadata.name` | the ownerReference, the identity's prefix |
//! | `POD_UID` | `fieldRef: metadata.uid` | the ownerReference (without it, none is written); in a static pod, the annotation `coordination.conclave.dev/pod-uid` instead |
//! | `POD_NAMESPACE` | `fieldRef: metadata.namespace` | the ownerReference is written only in the Pod's own namespace (else the service account's namespace is taken as the Pod's) |
//! | `CONTAINER_NAME` | the container's name, as a literal `value` | annotation `coordination.conclave.dev/container` |
//!
//! The container ID (annotation `coordination.conclave.dev/container-id`) is read from
//! `/proc/self/cgroup`, then from the cgroup mounts of `/proc/self/mountinfo`: on cgroup v1
//! (and on cgroup v2 without a cgroup namespace) containerd, CRI-O and Docker name the
//! container's cgroup after its ID (`.../pod<uid>/<id>`, `cri-containerd-<id>.scope`,
//! `crio-<id>.scope`). Under a cgroup namespace (cgroup v2's default) the path reads `/` and no
//! ID is recorded; the process's start (annotation `coordination.conclave.dev/process-started`)
//! still lets the controller see that a later instance of the container replaced it, and the
//! Pod's deletion is seen either way. Reading the own Pod's status would give the container ID
//! too, but would need RBAC on pods for every component, so it is not done.
//!
//! In a static pod (kube-controller-manager and kube-scheduler in a kubeadm cluster) the downward
//! API's `metadata.uid` is the kubelet's hash of the manifest (32 hexadecimal digits), which names
//! no API object: the mirror Pod in the API server has a UID of its own and carries the hash in
//! its `kubernetes.io/config.mirror` annotation. An ownerReference to the hash would make
//! Kubernetes' garbage collector delete the LeaseCandidate over and over, so a process in a
//! static pod writes none and names its Pod in the annotations `coordination.conclave.dev/pod`
//! and `coordination.conclave.dev/pod-uid` ([`PodRef::is_static`]).

use conclave_core::pod::{
    CONTAINER_ANNOTATION, CONTAINER_ID_ANNOTATION, POD_ANNOTATION, POD_UID_ANNOTATION,
    PROCESS_STARTED_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::BTreeMap;

/// Environment variable holding the Pod's UID (downward API `fieldRef: metadata.uid`).
pub const POD_UID_ENV: &str = "POD_UID";

/// Environment variable holding the Pod's namespace (downward API `fieldRef: metadata.namespace`).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// Environment variable holding the name of the container this process runs in (the pod spec
/// sets it as a literal, e.g. `value: app`; the downward API does not offer it).
pub const CONTAINER_NAME_ENV: &str = "CONTAINER_NAME";

/// The Pod and container this process runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// The Pod's name.
    pub name: String,
    /// The Pod's UID.
    pub uid: String,
    /// The Pod's namespace, if known; the ownerReference is only written on a LeaseCandidate in
    /// this namespace (an owner in another namespace would make Kubernetes' garbage collector
    /// delete the candidate at once).
    pub namespace: Option<String>,
    /// The container's name, if known.
    pub container: Option<String>,
    /// The container's ID as its runtime named it (no `containerd://` prefix), if found.
    pub container_id: Option<String>,
    /// When this process started (first asked), RFC 3339 by this machine's clock, which in a pod
    /// is the node's, the clock of the kubelet's `startedAt`.
    pub process_started: String,
}

impl PodRef {
    /// The Pod this process runs in, from `POD_NAME` and `POD_UID` (both needed; `None` outside
    /// a pod or when the pod spec does not set them), `POD_NAMESPACE` (else the service account's
    /// namespace), `CONTAINER_NAME` and the process's own cgroup.
    #[must_use]
    pub fn from_env() -> Option<Self> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let name = var(crate::identity::POD_NAME_ENV)?;
        let uid = var(POD_UID_ENV)?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Some(Self {
            name,
            uid,
            namespace: var(POD_NAMESPACE_ENV).or_else(crate::identity::service_account_namespace),
            container: var(CONTAINER_NAME_ENV),
            container_id: container_id_from(&cgroup, &mountinfo),
            process_started: crate::time::rfc3339(process_started()),
        })
    }

    /// Whether this is a static pod: its UID is the kubelet's hash of the manifest (32
    /// hexadecimal digits, as the kubelet makes it for a manifest that sets none), not an API
    /// server's (a UUID, with dashes). No API object has that UID.
    #[must_use]
    pub fn is_static(&self) -> bool {
        self.uid.len() == 32 && self.uid.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// Whether a LeaseCandidate in `namespace` may name this Pod: not when the Pod's namespace is
    /// known to be another one (the controller looks the Pod up in the candidate's namespace).
    fn in_namespace(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// The ownerReference to put on a LeaseCandidate in `namespace`: the Pod, not a controller
    /// of it, and without `blockOwnerDeletion` (which would need RBAC on the Pod's finalizers).
    /// `None` when the Pod's namespace is known to be another one, or for a static pod
    /// ([`PodRef::is_static`]: the garbage collector would delete the candidate).
    #[must_use]
    pub fn owner_reference(&self, namespace: &str) -> Option<OwnerReference> {
        if !self.in_namespace(namespace) || self.is_static() {
            return None;
        }
        Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: None,
            block_owner_deletion: None,
        })
    }

    /// The annotations recording the container and the process ([`conclave_core::pod`]) on a
    /// LeaseCandidate in `namespace`; for a static pod in that namespace, the Pod's name and UID
    /// too, in place of the ownerReference.
    #[must_use]
    pub fn annotations(&self, namespace: &str) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::new();
        if self.is_static() && self.in_namespace(namespace) {
            annotations.insert(POD_ANNOTATION.to_owned(), self.name.clone());
            annotations.insert(POD_UID_ANNOTATION.to_owned(), self.uid.clone());
        }
        if let Some(container) = &self.container {
            annotations.insert(CONTAINER_ANNOTATION.to_owned(), container.clone());
        }
        if let Some(id) = &self.container_id {
            annotations.insert(CONTAINER_ID_ANNOTATION.to_owned(), id.clone());
        }
        annotations.insert(
            PROCESS_STARTED_ANNOTATION.to_owned(),
            self.process_started.clone(),
        );
        annotations
    }
}

/// When this process started, as far as this crate can tell: the first time it was asked. Later
/// than the true start, which only makes the controller's "a later instance replaced it" rule
/// fire less often, never wrongly.
fn process_started() -> conclave_core::time::Timestamp {
    static STARTED: std::sync::OnceLock<conclave_core::time::Timestamp> =
        std::sync::OnceLock::new();
    *STARTED.get_or_init(|| {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        conclave_core::time::Timestamp::from_micros(
            i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
        )
    })
}

/// The container ID in `/proc/self/cgroup` (`cgroup`), else in the roots of the cgroup mounts of
/// `/proc/self/mountinfo` (`mountinfo`); `None` when neither names one.
fn container_id_from(cgroup: &str, mountinfo: &str) -> Option<String> {
    let from_cgroup = cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .find_map(id_in_cgroup_path);
    from_cgroup.or_else(|| {
        mountinfo
            .lines()
            .filter(|line| {
                line.split_once(" - ")
                    .is_some_and(|(_, fs)| fs.starts_with("cgroup ") || fs.starts_with("cgroup2 "))
            })
            .filter_map(|line| line.split(' ').nth(3))
            .find_map(id_in_cgroup_path)
    })
}

/// The container ID a cgroup path ends with: its last component, without a runtime's
/// `cri-containerd-`, `crio-`, `docker-` or `libpod-` prefix and `.scope` suffix, if that is 64
/// hexadecimal digits (what containerd, CRI-O and Docker use).
fn id_in_cgroup_path(path: &str) -> Option<String> {
    let last = path.trim().trim_end_matches('/').rsplit('/').next()?;
    let last = last.strip_suffix(".scope").unwrap_or(last);
    let id = ["cri-containerd-", "crio-", "docker-", "libpod-"]
        .iter()
        .find_map(|prefix| last.strip_prefix(prefix))
        .unwrap_or(last);
    let id = id.rsplit(':').next().unwrap_or(id);
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c0b7a9e2d4c5b8a6f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b";

    #[test]
    fn the_container_id_is_read_from_every_runtime_s_cgroup_layout() {
        let cgroupfs_v1 = format!(
            "12:memory:/kubepods/burstable/pod0d2c/{ID}\n11:cpu:/kubepods/burstable/pod0d2c/{ID}\n0::/\n"
        );
        let systemd_v1 = format!(
            "4:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0d2c.slice/cri-containerd-{ID}.scope\n"
        );
        let systemd_colon = format!(
            "1:name=systemd:/system.slice/containerd.service/kubepods-pod0d2c.slice:cri-containerd:{ID}\n"
        );
        let crio = format!("0::/kubepods.slice/kubepods-pod0d2c.slice/crio-{ID}.scope\n");
        for cgroup in [cgroupfs_v1, systemd_v1, systemd_colon, crio] {
            assert_eq!(container_id_from(&cgroup, ""), Some(ID.into()), "{cgroup}");
        }
        let namespaced = "0::/\n";
        let mountinfo = format!(
            "1571 1570 0:26 /kubepods/besteffort/pod0d2c/{ID} /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n\
             1580 1560 254:1 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{ID}/hostname /etc/hostname rw - ext4 /dev/vda1 rw\n"
        );
        assert_eq!(container_id_from(namespaced, &mountinfo), Some(ID.into()));
        let sandbox_only = format!(
            "1580 1560 254:1 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{ID}/hostname /etc/hostname rw - ext4 /dev/vda1 rw\n"
        );
        assert_eq!(
            container_id_from(namespaced, &sandbox_only),
            None,
            "a sandbox's ID is not the container's"
        );
        assert_eq!(container_id_from("4:memory:/process_api/1d97\n", ""), None);
        assert_eq!(container_id_from("garbage", "garbage - cgroup"), None);
    }

    #[test]
    fn the_owner_is_the_pod_in_its_own_namespace_only() {
        let pod = PodRef {
            name: "web-0".into(),
            uid: "u1".into(),
            namespace: Some("ns".into()),
            container: Some("app".into()),
            container_id: Some(ID.into()),
            process_started: "2026-01-01T00:00:00.000001Z".into(),
        };
        let owner = pod.owner_reference("ns").unwrap();
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str()
            ),
            ("v1", "Pod", "web-0")
        );
        assert_eq!(owner.uid, "u1");
        assert_eq!(owner.block_owner_deletion, None);
        assert_eq!(owner.controller, None);
        assert_eq!(pod.owner_reference("other"), None);
        let annotations = pod.annotations("ns");
        assert_eq!(annotations[CONTAINER_ANNOTATION], "app");
        assert_eq!(annotations[CONTAINER_ID_ANNOTATION], ID);
        assert!(annotations.contains_key(PROCESS_STARTED_ANNOTATION));
        assert!(!annotations.contains_key(POD_ANNOTATION));
    }

    /// A static pod's UID (the kubelet's manifest hash) names no API object: no ownerReference
    /// (the garbage collector would delete the candidate), the Pod named in annotations instead,
    /// and only in the Pod's own namespace.
    #[test]
    fn a_static_pod_is_named_in_annotations_not_an_owner() {
        let pod = PodRef {
            name: "kube-scheduler-node-1".into(),
            uid: "5b3f2c0e9d8a7b6c5d4e3f2a1b0c9d8e".into(),
            namespace: Some("kube-system".into()),
            container: Some("kube-scheduler".into()),
            container_id: None,
            process_started: "2026-01-01T00:00:00.000001Z".into(),
        };
        assert!(pod.is_static());
        assert_eq!(pod.owner_reference("kube-system"), None);
        let annotations = pod.annotations("kube-system");
        assert_eq!(annotations[POD_ANNOTATION], "kube-scheduler-node-1");
        assert_eq!(
            annotations[POD_UID_ANNOTATION],
            "5b3f2c0e9d8a7b6c5d4e3f2a1b0c9d8e"
        );
        assert!(!pod.annotations("other").contains_key(POD_ANNOTATION));
        let api_pod = PodRef {
            uid: "0d2c5a6e-1b7f-4c3d-9e8a-2f1b0c9d8e7f".into(),
            ..pod
        };
        assert!(!api_pod.is_static());
        assert!(api_pod.owner_reference("kube-system").is_some());
    }
}
