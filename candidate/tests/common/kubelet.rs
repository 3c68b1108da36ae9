//! A simulated kubelet for the soak: each `conclave candidate` process runs "in" a Pod of the
//! API server, in a container of its own, and the container's death is reported the way the
//! kubelet reports it, so that the controller's pod liveness (`--pod-liveness`, on by default)
//! fails over on the report instead of at the Lease's expiry.
//!
//! What is simulated, and how faithfully:
//! - **The Pod**: created through the API (one container, `app`) before its process starts; the
//!   process gets `POD_NAME`, `POD_UID`, `POD_NAMESPACE` and `CONTAINER_NAME` as the downward API
//!   would give them, so `conclave-candidate` writes its ownerReference and annotations itself.
//! - **The container ID**: where this machine lets the test create cgroups (cgroup v1's freezer
//!   hierarchy, as root), each process starts in a cgroup named after a fresh 64-hex-digit ID,
//!   `/sys/fs/cgroup/freezer/conclave-kubelet-<pid>/<id>`, which the candidate reads from
//!   `/proc/self/cgroup` as it reads containerd's. Elsewhere no ID is recorded and only a
//!   restart proves a death, not a Pod's deletion (`conclave_core::pod::process_dead`).
//! - **The reports**, written to `status` only after the process was SIGKILLed and reaped (the
//!   kubelet reports a termination only after the runtime saw the init process exit): the
//!   container terminated (exit 137); then restarted in the same Pod (a new ID, `restartCount`
//!   + 1, `lastState.terminated` naming the old one); or the Pod deleted.
//! - **Signs of trouble that are not evidence**, for a live process: phase `Unknown` with
//!   `Ready` false (a node gone quiet), or a `lastState.terminated` of an earlier instance.
//!   The controller must not fail over on these.

use super::Server;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The name of every simulated Pod's one container.
pub const CONTAINER: &str = "app";

/// Where this run's container cgroups live, if the machine lets the test create them.
const CGROUP_PARENT: &str = "/sys/fs/cgroup/freezer";

/// What a process needs to run "in" a Pod: the downward API's variables, and the cgroup to
/// start in.
#[derive(Debug, Clone)]
pub struct PodEnv {
    /// `POD_NAME`, `POD_UID`, `POD_NAMESPACE` and `CONTAINER_NAME`, as the pod spec sets them.
    pub vars: Vec<(&'static str, String)>,
    /// The container's cgroup's `cgroup.procs`, which the process writes its pid into before it
    /// starts (`None` where cgroups cannot be created).
    pub cgroup_procs: Option<PathBuf>,
}

/// One Pod and its current container instance.
#[derive(Debug, Clone)]
pub struct PodSlot {
    /// The Pod's name.
    pub name: String,
    uid: String,
    container_id: String,
    restart_count: i32,
    started_at: Time,
    /// Cgroups of this Pod's container instances, removed once their processes are gone.
    cgroups: Vec<PathBuf>,
}

/// The simulated kubelet of one soak run.
pub struct Kubelet {
    pods: Api<Pod>,
    namespace: String,
    /// This run's cgroup directory, if it could be created.
    cgroup_root: Option<PathBuf>,
    ids: AtomicU64,
}

impl PodSlot {
    /// How many times its container was restarted.
    pub fn restarts(&self) -> i32 {
        self.restart_count
    }
}

impl Kubelet {
    /// A kubelet writing Pods in `server`'s namespace; creates its cgroup directory if it can
    /// (and says so either way).
    pub async fn new(server: &Server) -> Self {
        let root =
            Path::new(CGROUP_PARENT).join(format!("conclave-kubelet-{}", std::process::id()));
        let cgroup_root = match std::fs::create_dir_all(&root) {
            Ok(()) => Some(root),
            Err(e) => {
                eprintln!(
                    "kubelet: no container cgroups ({}: {e}); deaths are proven by restarts and \
                     deletions only",
                    root.display()
                );
                None
            }
        };
        Self {
            pods: Api::namespaced(server.client().await, server.namespace()),
            namespace: server.namespace().to_owned(),
            cgroup_root,
            ids: AtomicU64::new(0),
        }
    }

    /// Whether container IDs are recorded (the processes run in cgroups named after them).
    pub fn records_container_ids(&self) -> bool {
        self.cgroup_root.is_some()
    }

    /// A fresh container ID: 64 hexadecimal digits, distinct within the run.
    fn next_container_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{:048x}", std::process::id(), n)
    }

    /// Creates Pod `name` and its first container instance, reported running.
    pub async fn create_pod(&self, name: &str) -> PodSlot {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: CONTAINER.to_owned(),
                    image: Some("localhost/conclave:soak".to_owned()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        };
        let created = self
            .pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("kubelet: create Pod {name}: {e}"));
        let mut slot = PodSlot {
            name: name.to_owned(),
            uid: created.metadata.uid.expect("a created Pod has a UID"),
            container_id: String::new(),
            restart_count: 0,
            started_at: now(),
            cgroups: Vec::new(),
        };
        self.new_instance(&mut slot);
        self.write_status(&slot, running_status(&slot, None, false))
            .await;
        slot
    }

    /// Makes the next container instance of `slot`: a new ID, and its cgroup.
    fn new_instance(&self, slot: &mut PodSlot) {
        slot.container_id = self.next_container_id();
        slot.started_at = now();
        if let Some(root) = &self.cgroup_root {
            let cgroup = root.join(&slot.container_id);
            std::fs::create_dir(&cgroup)
                .unwrap_or_else(|e| panic!("kubelet: create {}: {e}", cgroup.display()));
            slot.cgroups.push(cgroup);
        }
    }

    /// What the current container instance of `slot` runs with.
    pub fn env(&self, slot: &PodSlot) -> PodEnv {
        PodEnv {
            vars: vec![
                ("POD_NAME", slot.name.clone()),
                ("POD_UID", slot.uid.clone()),
                ("POD_NAMESPACE", self.namespace.clone()),
                ("CONTAINER_NAME", CONTAINER.to_owned()),
            ],
            cgroup_procs: self
                .cgroup_root
                .as_ref()
                .map(|root| root.join(&slot.container_id).join("cgroup.procs")),
        }
    }

    /// Reports the current instance terminated (exit 137: SIGKILL, or an OOM kill). Call only
    /// once its process was reaped.
    pub async fn report_terminated(&self, slot: &PodSlot, oom: bool) {
        let status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    terminated: Some(terminated(slot, oom)),
                    ..ContainerState::default()
                }),
                ready: false,
                ..container_status(slot)
            }]),
            ..PodStatus::default()
        };
        self.write_status(slot, status).await;
    }

    /// Reports the container restarted in the same Pod: the next instance (new ID, one more
    /// restart) is running, the last one terminated. Returns the environment to start its
    /// process with. Call only once the last instance's process was reaped.
    pub async fn report_restarted(&self, slot: &mut PodSlot, oom: bool) -> PodEnv {
        let last = terminated(slot, oom);
        self.new_instance(slot);
        slot.restart_count += 1;
        self.write_status(slot, running_status(slot, Some(last), false))
            .await;
        self.env(slot)
    }

    /// Deletes the Pod (its process was reaped: a Pod deleted for good has no containers left).
    pub async fn delete_pod(&self, slot: &PodSlot) {
        match self.pods.delete(&slot.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("kubelet: delete Pod {}: {e}", slot.name),
        }
    }

    /// Force-deletes Pod `slot` (`kubectl delete pod --force --grace-period=0`): the object goes
    /// at once, with no report of its container, whose process may run on.
    pub async fn force_delete_pod(&self, slot: &PodSlot) {
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match self.pods.delete(&slot.name, &force).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("kubelet: force-delete Pod {}: {e}", slot.name),
        }
    }

    /// Reports signs of trouble that do not prove the current instance stopped: phase `Unknown`
    /// and `Ready` false, with a `lastState.terminated` of an earlier instance (an ID that is not
    /// the current one's).
    pub async fn report_trouble(&self, slot: &PodSlot) {
        let earlier = ContainerStateTerminated {
            container_id: Some(format!("containerd://{}", self.next_container_id())),
            exit_code: 1,
            reason: Some("Error".into()),
            ..ContainerStateTerminated::default()
        };
        self.write_status(slot, running_status(slot, Some(earlier), true))
            .await;
    }

    /// Removes the cgroups of `slot`'s earlier instances, whose processes are gone (best effort:
    /// one still in use stays, and is tried again at the next call). The current instance's
    /// stays: its process may not have started yet.
    pub fn remove_old_cgroups(&self, slot: &mut PodSlot) {
        let current = slot.container_id.clone();
        slot.cgroups.retain(|cgroup| {
            cgroup.ends_with(&current) || (std::fs::remove_dir(cgroup).is_err() && cgroup.exists())
        });
    }

    /// Writes `status` onto `slot`'s Pod (the kubelet's status update; a Pod already deleted is
    /// left alone).
    async fn write_status(&self, slot: &PodSlot, status: PodStatus) {
        let mut pod = match self.pods.get(&slot.name).await {
            Ok(pod) => pod,
            Err(kube::Error::Api(status)) if status.code == 404 => return,
            Err(e) => panic!("kubelet: read Pod {}: {e}", slot.name),
        };
        pod.status = Some(status);
        self.pods
            .replace_status(&slot.name, &PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("kubelet: write the status of Pod {}: {e}", slot.name));
    }
}

impl Drop for Kubelet {
    /// Removes this run's cgroup directory and what is left in it (empty cgroups only: a process
    /// still running keeps its own).
    fn drop(&mut self) {
        let Some(root) = &self.cgroup_root else {
            return;
        };
        if let Ok(entries) = std::fs::read_dir(root) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
        let _ = std::fs::remove_dir(root);
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// The container's status fields that every report shares.
fn container_status(slot: &PodSlot) -> ContainerStatus {
    ContainerStatus {
        name: CONTAINER.to_owned(),
        container_id: Some(format!("containerd://{}", slot.container_id)),
        image: "localhost/conclave:soak".to_owned(),
        image_id: "localhost/conclave@sha256:0".to_owned(),
        restart_count: slot.restart_count,
        ready: true,
        started: Some(true),
        ..ContainerStatus::default()
    }
}

/// The current instance reported running, with the instance before it in `lastState`; with
/// `trouble`, the Pod's phase `Unknown` and `Ready` false around it.
fn running_status(
    slot: &PodSlot,
    last: Option<ContainerStateTerminated>,
    trouble: bool,
) -> PodStatus {
    PodStatus {
        phase: Some(if trouble { "Unknown" } else { "Running" }.into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if trouble { "False" } else { "True" }.into(),
            ..PodCondition::default()
        }]),
        container_statuses: Some(vec![ContainerStatus {
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(slot.started_at.clone()),
                }),
                ..ContainerState::default()
            }),
            last_state: last.map(|terminated| ContainerState {
                terminated: Some(terminated),
                ..ContainerState::default()
            }),
            ..container_status(slot)
        }]),
        ..PodStatus::default()
    }
}

/// The current instance of `slot` as terminated by a SIGKILL (or an OOM kill).
fn terminated(slot: &PodSlot, oom: bool) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: Some(format!("containerd://{}", slot.container_id)),
        exit_code: 137,
        reason: Some(if oom { "OOMKilled" } else { "Error" }.into()),
        started_at: Some(slot.started_at.clone()),
        finished_at: Some(now()),
        ..ContainerStateTerminated::default()
    }
}
