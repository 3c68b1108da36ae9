//! The split-brain soak on a real node: `conclave candidate` processes in Pods the kubelet runs,
//! elected by the chart's controller (pod liveness on), while the driver kills containers through
//! containerd, deletes Pods (SIGTERM: the leader hands over), starts better candidates (the
//! controller pre-empts the leader) and kills the active controller's container. The kubelet
//! restarts each killed container: its process rejoins under a new identity, with the same
//! versions, and often pre-empts its successor.
//!
//! It also partitions, as a cluster's network does: a leader is cut off from the API server while
//! its process runs on (packets to and from the `kubernetes` Service dropped inside its Pod's
//! network namespace), and half the time its Pod is then force-deleted (what people do for a Pod
//! stuck on an unreachable node: no word from the kubelet), half of those recreated at once under
//! the same name (a StatefulSet's way); the active controller replica is cut off too, now and
//! then for longer than kube-apiserver's watch cache keeps history (75 s), so that its watches
//! end in 410 Gone and it relists.
//!
//! Verdict: [`conclave_testkit::checker`] reads what every process wrote, taken from the container
//! logs the kubelet keeps under `/var/log/pods` (each file held open while its container lives,
//! so a Pod's logs deleted with it are still read to the end), plus a `killed` line the driver
//! stamps on the monotonic clock once a killed container's process is gone. Containers share the
//! host's `CLOCK_MONOTONIC`, so the processes' own readings compare with each other and with the
//! driver's.
//!
//! Each Pod is retired (deleted, a fresh one started) once its container has restarted twice, so
//! the kubelet's restart back-off (10 s, doubling) stays short; a Pod that restarted more often
//! than it was killed counts as a candidate that exited unasked.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use conclave_testkit::Node;
use conclave_testkit::checker::{
    Checker, Verdict, gap_summary, longest_gaps, monotonic_ns, seconds,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::workloads::{is_identity_of, look_at_election};
use crate::{Error, HA_LEASE, RELEASE_NAMESPACE};

/// The namespace the soak's Pods, Leases and LeaseCandidates live in.
pub const SOAK_NAMESPACE: &str = "conclave-soak";
/// The label on every soak Pod (value: its Lease).
const LEASE_LABEL: &str = "conclave.dev/soak-lease";
/// The container's name, as `CONTAINER_NAME` tells the candidate (pod liveness reads it).
const CONTAINER: &str = "component";
/// Where the kubelet writes container logs (`podLogsDir`'s default).
const POD_LOGS: &str = "/var/log/pods";
/// A Pod is retired once its container has restarted this often.
const RETIRE_AFTER_RESTARTS: i32 = 2;
/// Emulation minors of fresh candidates (a pre-emption goes below the leader's, down to
/// [`LOWEST_MINOR`]).
const FRESH_MINORS: std::ops::Range<u64> = 30..40;
const LOWEST_MINOR: u64 = 10;
/// How long the end of the run waits for the Pods to go, and a kill for its process to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a cut-off leader stays cut off, in seconds (its renew deadline is 10 s).
const CANDIDATE_CUT_SECS: std::ops::Range<u64> = 1..7;
/// How long a cut-off controller replica stays cut off, in seconds (the standby may take over
/// after the controller's 15 s Lease)...
const CONTROLLER_CUT_SECS: std::ops::Range<u64> = 3..26;
/// ...and, one cut in four, longer than kube-apiserver's watch cache keeps events (75 s), so
/// that the replica's watches resume from a resourceVersion the server no longer has.
const LONG_CONTROLLER_CUT_SECS: std::ops::Range<u64> = 80..91;
/// The controller's container in the chart's Deployment.
const CONTROLLER_CONTAINER: &str = "controller";

/// The shape of a run.
#[derive(Clone, Debug)]
pub struct NodeSoakConfig {
    /// Leases elected at once.
    pub leases: usize,
    /// Candidate Pods per Lease (one more while a pre-emption's old follower goes).
    pub candidates: usize,
    /// The run stops once this many changes of holder were seen on the Leases...
    pub hand_offs: usize,
    /// ...or after this long.
    pub max: Duration,
    /// The dice's seed.
    pub seed: u64,
    /// Where each process's output goes, as the checker read it (`<pod>#<restart>.out`, with the
    /// driver's `killed` line), and each controller replica's log
    /// (`controller-<pod>#<restart>.log`): what to read when the verdict is not clean.
    pub output_dir: PathBuf,
}

/// What the driver did, and what the checker found.
#[derive(Debug)]
pub struct NodeSoakReport {
    /// The run's shape.
    pub config: NodeSoakConfig,
    /// How long the events ran (the graceful end not included).
    pub elapsed: Duration,
    /// Containers of a leader SIGKILLed through containerd.
    pub leader_kills: usize,
    /// Containers of a follower SIGKILLed.
    pub follower_kills: usize,
    /// Leader Pods deleted (SIGTERM: the leader drains and releases).
    pub leader_deletions: usize,
    /// Pods retired after two restarts (deleted, a fresh one started).
    pub retired: usize,
    /// Better candidates started (the controller pre-empts the leader for them).
    pub preemptions: usize,
    /// The active controller replica's container SIGKILLed.
    pub controller_kills: usize,
    /// Controller Pods deleted after two restarts (the Deployment starts a fresh one).
    pub controller_deletions: usize,
    /// Leaders cut off from the API server while their processes ran on.
    pub cut_offs: usize,
    /// Cut-off leaders' Pods force-deleted (grace period 0)...
    pub force_deletions: usize,
    /// ...and of those, recreated at once under the same name.
    pub recreated_same_name: usize,
    /// The active controller replica cut off from the API server, and how many of those cuts
    /// outlasted the watch cache's history.
    pub controller_cut_offs: (usize, usize),
    /// The controllers' watches that ended in 410 Gone (their logs' `watching Leases` warnings
    /// naming an expired resourceVersion), each followed by a relist.
    pub watches_gone: usize,
    /// Container instances read (processes).
    pub processes: usize,
    /// Candidates that restarted more often than they were killed (died on their own).
    pub unexpected_exits: Vec<String>,
    /// `HolderDead` Events the controller published (pod liveness failing over at once).
    pub holder_dead_events: usize,
    /// `HolderDead` Events naming a process that was never killed (must stay empty).
    pub wrongly_dead: Vec<String>,
    /// Holder changes the driver saw in the Leases (it stops at `config.hand_offs`).
    pub holder_changes: usize,
    /// Holders the driver saw in a Lease whose process's output was read and shows no term:
    /// elected, then killed or gone before its first renewal started one (the controller sets it
    /// aside and elects another). Each explains a holder change the driver saw without a
    /// hand-off the checker reads.
    pub never_led: Vec<String>,
    /// The checker's verdict.
    pub verdict: Verdict,
}

impl NodeSoakReport {
    /// Whether the run is clean: the checker's verdict, no candidate exiting unasked and no
    /// `HolderDead` Event naming a live process.
    pub fn clean(&self) -> bool {
        self.verdict.clean() && self.unexpected_exits.is_empty() && self.wrongly_dead.is_empty()
    }
}

/// One candidate Pod the driver started.
#[derive(Clone, Debug)]
struct Slot {
    minor: u64,
    /// Its container's kills by the driver.
    kills: i32,
}

/// Seeded dice (SplitMix64): a run replays from its seed.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Container logs, by (Pod name, Pod uid, restart).
type ContainerLogs = BTreeMap<(String, String, u32), Vec<u8>>;

/// One container instance's log (`<pod uid>/<restart>.log`), as read so far.
#[derive(Default)]
struct LogFile {
    pod: String,
    /// Whether it is a controller replica's log (else a soak candidate's).
    controller: bool,
    file: Option<File>,
    text: Vec<u8>,
}

/// Follows the soak Pods' container logs: opens each file as it appears and keeps reading it
/// through the open descriptor, so what a process wrote before its Pod (and log) was removed
/// is kept.
struct Collector {
    logs: Arc<Mutex<BTreeMap<PathBuf, LogFile>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    fn start() -> Self {
        let logs: Arc<Mutex<BTreeMap<PathBuf, LogFile>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (logs, stop) = (logs.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    collect(&logs);
                    std::thread::sleep(Duration::from_millis(100));
                }
                collect(&logs);
            })
        };
        Self {
            logs,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops following and returns every log read, (Pod name, Pod uid, restart) -> bytes: the
    /// candidates' and the controller replicas'.
    fn finish(mut self) -> (ContainerLogs, ContainerLogs) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let logs = std::mem::take(&mut *self.logs.lock().unwrap_or_else(|e| e.into_inner()));
        let (mut candidates, mut controllers) = (ContainerLogs::new(), ContainerLogs::new());
        for (path, log) in logs {
            let instance = (|| {
                let restart = path.file_stem()?.to_str()?.parse().ok()?;
                let uid = path.parent()?.parent()?.file_name()?.to_str()?;
                Some((uid.rsplit('_').next()?.to_owned(), restart))
            })();
            let Some((uid, restart)) = instance else {
                continue;
            };
            let logs = if log.controller {
                &mut controllers
            } else {
                &mut candidates
            };
            logs.insert((log.pod, uid, restart), log.text);
        }
        (candidates, controllers)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One pass: opens new log files of the soak's Pods and the controller's, reads what each open
/// one gained.
fn collect(logs: &Mutex<BTreeMap<PathBuf, LogFile>>) {
    let mut logs = logs.lock().unwrap_or_else(|e| e.into_inner());
    for dir in std::fs::read_dir(POD_LOGS).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        // `<namespace>_<pod>_<uid>`
        let Some((namespace, pod)) = name
            .rsplit_once('_')
            .and_then(|(namespace_pod, _)| namespace_pod.split_once('_'))
        else {
            continue;
        };
        let (controller, container) = match namespace {
            SOAK_NAMESPACE => (false, CONTAINER),
            RELEASE_NAMESPACE => (true, CONTROLLER_CONTAINER),
            _ => continue,
        };
        let pod = pod.to_owned();
        let container = dir.path().join(container);
        for file in std::fs::read_dir(&container)
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "log") || logs.contains_key(&path) {
                continue;
            }
            logs.insert(
                path.clone(),
                LogFile {
                    pod: pod.clone(),
                    controller,
                    file: File::open(&path).ok(),
                    text: Vec::new(),
                },
            );
        }
    }
    for log in logs.values_mut() {
        if let Some(file) = &mut log.file {
            let _ = file.read_to_end(&mut log.text);
        }
    }
}

/// The lines a process wrote, from a CRI log (`<time> <stream> <P|F> <text>`; `P` is a part of a
/// longer line, joined per stream until its `F`).
fn cri_lines(log: &[u8]) -> String {
    let mut out = String::new();
    let mut partial: BTreeMap<String, String> = BTreeMap::new();
    for line in String::from_utf8_lossy(log).lines() {
        let mut fields = line.splitn(4, ' ');
        let (Some(_), Some(stream), Some(tag), text) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let text = text.unwrap_or_default();
        let pending = partial.entry(stream.to_owned()).or_default();
        pending.push_str(text);
        if tag == "F" {
            out.push_str(pending);
            out.push('\n');
            pending.clear();
        }
    }
    out
}

/// The soak Pod `name` of Lease `lease` running `image` with emulation version `1.<minor>.0`:
/// `deploy/examples/component.yaml`'s container, its defaults (15 s Lease, 10 s renew deadline,
/// 2 s retry period) included.
fn pod_manifest(name: &str, lease: &str, minor: u64, image: &str) -> Result<Pod, Error> {
    let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
    let mut env = vec![
        json!({"name": "CONTAINER_NAME", "value": CONTAINER}),
        json!({"name": "CONCLAVE_CANDIDATE_LEASE", "value": lease}),
        json!({"name": "CONCLAVE_CANDIDATE_BINARY_VERSION", "value": "1.40.0"}),
        json!({"name": "CONCLAVE_CANDIDATE_EMULATION_VERSION", "value": format!("1.{minor}.0")}),
    ];
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_UID", "metadata.uid"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("CONCLAVE_CANDIDATE_NAMESPACE", "metadata.namespace"),
    ] {
        let mut var = field(path);
        var["name"] = json!(name);
        env.push(var);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": SOAK_NAMESPACE, "labels": {LEASE_LABEL: lease}},
        "spec": {
            "serviceAccountName": "soak-candidate",
            "terminationGracePeriodSeconds": 30,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "Never",
                "args": ["candidate"],
                "env": env,
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                },
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
            }]
        }
    }))
    .map_err(|e| Error::Unexpected(format!("the soak Pod manifest: {e}")))
}

/// The namespace, ServiceAccount and RBAC of the soak's candidates (what
/// `deploy/examples/component.yaml` grants its component).
async fn prepare_namespace(client: &Client) -> Result<(), Error> {
    let namespace: Namespace = from_json(json!({"metadata": {"name": SOAK_NAMESPACE}}))?;
    create_once(Api::all(client.clone()), &namespace).await?;
    let account: ServiceAccount = from_json(json!({"metadata": {"name": "soak-candidate"}}))?;
    let role: Role = from_json(json!({
        "metadata": {"name": "soak-candidate"},
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leasecandidates"],
             "verbs": ["get", "list", "watch", "create", "update", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update"]}
        ]
    }))?;
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "soak-candidate"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "soak-candidate"},
        "subjects": [{"kind": "ServiceAccount", "name": "soak-candidate", "namespace": SOAK_NAMESPACE}]
    }))?;
    create_once(Api::namespaced(client.clone(), SOAK_NAMESPACE), &account).await?;
    create_once(Api::namespaced(client.clone(), SOAK_NAMESPACE), &role).await?;
    create_once(Api::namespaced(client.clone(), SOAK_NAMESPACE), &binding).await?;
    Ok(())
}

/// Creates `object` through `api`, unless it exists already (a `409 AlreadyExists`).
async fn create_once<K>(api: Api<K>, object: &K) -> Result<(), Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::Serialize,
    K: k8s_openapi::serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), object).await {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other.map(drop).map_err(Error::from),
    }
}

fn from_json<T: k8s_openapi::serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Unexpected(format!("a soak object: {e}")))
}

/// The running container of `pod`: its id and restart count, when it runs and is Ready.
fn running_container(pod: &Pod) -> Option<(String, i32)> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let id = status.container_id.clone()?;
    (status.ready && status.state.as_ref()?.running.is_some()).then_some((id, status.restart_count))
}

/// The running container `name` of `pod`: its id and restart count, when it runs.
fn running_container_named(pod: &Pod, name: &str) -> Option<(String, i32)> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?;
    let id = status.container_id.clone()?;
    status
        .state
        .as_ref()?
        .running
        .is_some()
        .then_some((id, status.restart_count))
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| {
            s.container_statuses
                .as_ref()?
                .first()
                .map(|c| c.restart_count)
        })
        .unwrap_or(0)
}

/// SIGKILLs `container` through containerd; `false` when its task had already ended (the Pod's
/// status read a moment earlier still showed it running): an ended task is not an error, and a
/// process that ended on its own shows as a restart nobody asked for.
fn kill_if_running(node: &Node, container: &str) -> Result<bool, Error> {
    match node.kill_container(container) {
        Ok(()) => Ok(true),
        Err(_) if node.container_pid(container).is_err() => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Whether process `pid` is gone (or a zombie: it has exited, its shim not yet reaped it).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// The soak's state while it runs.
struct Soak<'a> {
    client: &'a Client,
    node: &'a Node,
    image: &'a str,
    config: NodeSoakConfig,
    dice: Dice,
    pods: Api<Pod>,
    slots: BTreeMap<String, Slot>,
    /// Every Pod started, by uid (logs of other Pods, an earlier run's ones of the same name
    /// too, are not read), with its Lease.
    created: BTreeMap<String, usize>,
    serial: usize,
    /// When the driver saw each killed instance's process gone: (Pod uid, restart) -> reading.
    kills: BTreeMap<(String, u32), u64>,
    /// When the driver saw the process of a force-deleted Pod gone (the kubelet ended it).
    reaped: Arc<Mutex<BTreeMap<(String, u32), u64>>>,
    /// The last holder seen on each Lease, and the changes seen.
    last_holders: BTreeMap<usize, String>,
    holder_changes: usize,
    /// Every holder seen.
    holders_seen: BTreeSet<String>,
    /// Where Pods reach the API server: the `kubernetes` Service.
    api_server: ServiceAddress,
    /// Processes cut off from it, each until its heal.
    cuts: Vec<Cut>,
    /// Until when a controller replica is cut off (no other controller event meanwhile).
    controller_cut_until: Option<Instant>,
    report: NodeSoakReport,
}

/// A Service's cluster IP and port.
#[derive(Clone, Debug)]
struct ServiceAddress {
    ip: String,
    port: i32,
}

/// A process whose network namespace drops its API server traffic, until `heal_at`.
#[derive(Clone)]
struct Cut {
    pid: u32,
    /// Its Pod's network namespace, held open. The namespace is the Pod's, not the process's: a
    /// container the kubelet restarts after a kill joins the same one, so the heal finds it
    /// through this handle (the cut process's pid is gone by then, and the restarted process
    /// would otherwise stay cut off for good).
    namespace: Arc<File>,
    heal_at: Instant,
    /// Its container instance: (Pod uid, restart).
    instance: (String, u32),
}

/// The `kubernetes` Service's address, which in-cluster clients (`KUBERNETES_SERVICE_HOST`) reach
/// the API server at.
async fn api_server_service(client: &Client) -> Result<ServiceAddress, Error> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await?;
    let spec = service.spec.unwrap_or_default();
    let ip = spec.cluster_ip.unwrap_or_default();
    let port = spec
        .ports
        .unwrap_or_default()
        .first()
        .map_or(443, |p| p.port);
    Ok(ServiceAddress { ip, port })
}

/// Adds (`-I`) or removes (`-D`) the rules that drop, in network namespace `namespace` (an open
/// `/proc/PID/ns/net`), every TCP packet to and from the API server's Service: a partition, as
/// the Pod's processes see one (their requests and watches hang; nothing is refused).
fn firewall(namespace: &File, api_server: &ServiceAddress, operation: &str) -> Result<(), Error> {
    let port = api_server.port.to_string();
    // nsenter opens the namespace through this process's descriptor of it.
    let namespace = format!(
        "--net=/proc/{}/fd/{}",
        std::process::id(),
        namespace.as_raw_fd()
    );
    for (chain, address, port_match) in [("OUTPUT", "-d", "--dport"), ("INPUT", "-s", "--sport")] {
        let output = Command::new("nsenter")
            .args([namespace.as_str(), "iptables", "-w", operation, chain])
            .args([
                "-p",
                "tcp",
                address,
                &api_server.ip,
                port_match,
                &port,
                "-j",
                "DROP",
            ])
            .output()
            .map_err(|source| Error::Spawn {
                program: "nsenter".into(),
                source,
            })?;
        if !output.status.success() {
            return Err(Error::Unexpected(format!(
                "iptables {operation} {chain} in network namespace {namespace}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
    }
    Ok(())
}

/// Whether a controller's log line tells of a Lease watch that ended in 410 Gone (its
/// resourceVersion expired from the server's history; the watcher relists).
fn is_watch_gone(line: &str) -> bool {
    line.contains("watching Leases")
        && (line.contains("too old resource version") || line.contains("410"))
}

fn lease_name(lease: usize) -> String {
    format!("soak-{lease}")
}

impl Soak<'_> {
    async fn start_pod(&mut self, lease: usize, minor: u64) -> Result<(), Error> {
        self.serial += 1;
        let name = format!("soak-{lease}-{}", self.serial);
        self.start_pod_named(lease, name, minor).await
    }

    async fn start_pod_named(
        &mut self,
        lease: usize,
        name: String,
        minor: u64,
    ) -> Result<(), Error> {
        let pod = pod_manifest(&name, &lease_name(lease), minor, self.image)?;
        let created = self.pods.create(&PostParams::default(), &pod).await?;
        let uid = created.metadata.uid.unwrap_or_default();
        self.created.insert(uid, lease);
        self.slots.insert(name.clone(), Slot { minor, kills: 0 });
        Ok(())
    }

    async fn delete_pod(&mut self, name: &str) -> Result<(), Error> {
        self.slots.remove(name);
        match self.pods.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(drop).map_err(Error::from),
        }
    }

    /// Force-deletes Pod `name` (grace period 0: the object goes at once, without the kubelet's
    /// word that its containers stopped).
    async fn force_delete_pod(&mut self, name: &str) -> Result<(), Error> {
        self.slots.remove(name);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(drop).map_err(Error::from),
        }
    }

    /// Cuts the process of `pod`'s running container off from the API server for `secs`
    /// seconds; `false` when no container runs.
    fn cut_off(&mut self, pod: &Pod, container: &str, secs: u64) -> Result<Option<Cut>, Error> {
        let Some((container_id, restart)) = running_container_named(pod, container) else {
            return Ok(None);
        };
        let Ok(pid) = self.node.container_pid(&container_id) else {
            return Ok(None);
        };
        let namespace = File::open(format!("/proc/{pid}/ns/net")).map_err(|source| Error::Io {
            context: format!("opening the network namespace of pid {pid}"),
            source,
        })?;
        firewall(&namespace, &self.api_server, "-I")?;
        let cut = Cut {
            pid,
            namespace: Arc::new(namespace),
            heal_at: Instant::now() + Duration::from_secs(secs),
            instance: (
                pod.metadata.uid.clone().unwrap_or_default(),
                u32::try_from(restart).unwrap_or(0),
            ),
        };
        self.cuts.push(cut.clone());
        Ok(Some(cut))
    }

    /// Stamps, on the monotonic clock, when the process of a force-deleted Pod is gone (the
    /// kubelet ends it on its own, SIGKILL after a short grace): the end of its term, as the
    /// driver's `killed` line says for the containers it kills.
    fn stamp_when_gone(&self, cut: Cut) {
        let reaped = Arc::clone(&self.reaped);
        std::thread::spawn(move || {
            let deadline = Instant::now() + GONE_TIMEOUT;
            while !process_gone(cut.pid) {
                if Instant::now() > deadline {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            reaped
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(cut.instance, monotonic_ns());
        });
    }

    /// Heals the cuts that are due (all of them with `all`), in the network namespace each was
    /// made in: a process killed meanwhile leaves it to the container the kubelet restarts, which
    /// must not stay cut off (a deleted Pod's namespace lives on only through the handle: healing
    /// it is harmless).
    fn heal_cuts(&mut self, all: bool) {
        let now = Instant::now();
        self.cuts.retain(|cut| {
            if !all && cut.heal_at > now {
                return true;
            }
            if let Err(error) = firewall(&cut.namespace, &self.api_server, "-D") {
                eprintln!("node soak: healing the cut of pid {}: {error}", cut.pid);
            }
            false
        });
    }

    /// Cuts the leader of `lease` (Pod `leader`, emulation minor `minor`) off from the API server
    /// while its process runs on; half the time its Pod is then force-deleted a second later, and
    /// half of those recreated at once under the same name.
    async fn cut_off_leader(
        &mut self,
        lease: usize,
        leader: &Pod,
        minor: u64,
    ) -> Result<(), Error> {
        let secs = CANDIDATE_CUT_SECS.start
            + self
                .dice
                .below(CANDIDATE_CUT_SECS.end - CANDIDATE_CUT_SECS.start);
        let Some(cut) = self.cut_off(leader, CONTAINER, secs)? else {
            return Ok(());
        };
        self.report.cut_offs += 1;
        let then = self.dice.below(4);
        if then < 2 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let name = leader.metadata.name.clone().unwrap_or_default();
        self.force_delete_pod(&name).await?;
        self.stamp_when_gone(cut);
        self.report.force_deletions += 1;
        if then == 3 {
            self.start_pod_named(lease, name, minor).await?;
            self.report.recreated_same_name += 1;
        } else {
            let minor = FRESH_MINORS.start + self.dice.below(FRESH_MINORS.end - FRESH_MINORS.start);
            self.start_pod(lease, minor).await?;
        }
        Ok(())
    }

    /// SIGKILLs `pod`'s container through containerd and records when its process was gone.
    fn kill(&mut self, pod: &Pod) -> Result<bool, Error> {
        let Some((container, restart)) = running_container(pod) else {
            return Ok(false);
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // The status read may be a moment old: a container that is no longer running is not
        // killed.
        let Ok(pid) = self.node.container_pid(&container) else {
            return Ok(false);
        };
        if !kill_if_running(self.node, &container)? {
            return Ok(false);
        }
        let deadline = Instant::now() + GONE_TIMEOUT;
        while !process_gone(pid) {
            if Instant::now() > deadline {
                return Err(Error::Unexpected(format!(
                    "pid {pid} of {container} still runs after SIGKILL"
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kills
            .insert((uid, u32::try_from(restart).unwrap_or(0)), monotonic_ns());
        if let Some(slot) = pod
            .metadata
            .name
            .as_deref()
            .and_then(|n| self.slots.get_mut(n))
        {
            slot.kills += 1;
        }
        Ok(true)
    }

    /// One event on Lease `lease`, if its election has settled: every Pod Ready and a candidate,
    /// a holder and no hand-off asked for.
    async fn event(&mut self, lease: usize) -> Result<(), Error> {
        let name = lease_name(lease);
        let look = look_at_election(self.client, SOAK_NAMESPACE, &name).await?;
        if let Some(holder) = &look.holder {
            self.holders_seen.insert(holder.clone());
        }
        if let Some(holder) = &look.holder
            && self
                .last_holders
                .insert(lease, holder.clone())
                .is_some_and(|last| &last != holder)
        {
            self.holder_changes += 1;
        }
        let listed = self
            .pods
            .list(&ListParams::default().labels(&format!("{LEASE_LABEL}={name}")))
            .await?
            .items;
        let live: Vec<&Pod> = listed
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        self.notice_unexpected_exits(&live);
        // A Pod that restarted twice is retired once it runs again: its next restart would wait
        // 20 s or more.
        if let Some(worn) = live
            .iter()
            .find(|p| restarts(p) >= RETIRE_AFTER_RESTARTS && running_container(p).is_some())
        {
            let worn = worn.metadata.name.clone().unwrap_or_default();
            self.delete_pod(&worn).await?;
            let minor = FRESH_MINORS.start + self.dice.below(FRESH_MINORS.end - FRESH_MINORS.start);
            self.start_pod(lease, minor).await?;
            self.report.retired += 1;
            return Ok(());
        }
        let Some(holder) = look.holder.clone() else {
            return Ok(());
        };
        let pod_of = |identity: &str| {
            live.iter()
                .find(|p| is_identity_of(identity, p.metadata.name.as_deref().unwrap_or("-")))
                .copied()
        };
        let every_pod_a_candidate = live.iter().all(|p| {
            let pod = p.metadata.name.as_deref().unwrap_or("-");
            running_container(p).is_some()
                && look.candidates.iter().any(|(c, _)| is_identity_of(c, pod))
        });
        let Some(leader) = pod_of(&holder) else {
            return Ok(());
        };
        // The holder may be the Pod's previous process, killed, whose Lease has not yet passed
        // on: only a renewal after the running container started shows the holder alive.
        let started = leader.status.as_ref().and_then(|s| {
            s.container_statuses
                .as_ref()?
                .first()?
                .state
                .as_ref()?
                .running
                .as_ref()?
                .started_at
                .clone()
        });
        let renewed_since = match (started, look.renewed) {
            (Some(started), Some((renewed, _))) => {
                renewed > started.0 + jiff::SignedDuration::from_secs(1)
            }
            _ => false,
        };
        if !renewed_since {
            return Ok(());
        }
        if look.preferred.is_some() || !every_pod_a_candidate || live.len() < self.config.candidates
        {
            return Ok(());
        }
        let leader_name = leader.metadata.name.clone().unwrap_or_default();
        let followers: Vec<&Pod> = live
            .iter()
            .filter(|p| p.metadata.name.as_deref() != Some(&leader_name))
            .copied()
            .collect();
        let leader_minor = self.slots.get(&leader_name).map_or(0, |s| s.minor);
        match self.dice.below(100) {
            0..30 => {
                let leader = leader.clone();
                if self.kill(&leader)? {
                    self.report.leader_kills += 1;
                }
            }
            30..40 if !followers.is_empty() => {
                let follower = followers[self.dice.below(followers.len() as u64) as usize].clone();
                if self.kill(&follower)? {
                    self.report.follower_kills += 1;
                }
            }
            40..57 => {
                self.delete_pod(&leader_name).await?;
                let minor =
                    FRESH_MINORS.start + self.dice.below(FRESH_MINORS.end - FRESH_MINORS.start);
                self.start_pod(lease, minor).await?;
                self.report.leader_deletions += 1;
            }
            57..80 if leader_minor > LOWEST_MINOR && !followers.is_empty() => {
                let follower = followers[self.dice.below(followers.len() as u64) as usize]
                    .metadata
                    .name
                    .clone()
                    .unwrap_or_default();
                self.start_pod(lease, leader_minor - 1).await?;
                self.delete_pod(&follower).await?;
                self.report.preemptions += 1;
            }
            80..91 => {
                let leader = leader.clone();
                self.cut_off_leader(lease, &leader, leader_minor).await?;
            }
            _ => self.controller_event().await?,
        }
        Ok(())
    }

    /// Kills the active controller replica's container or cuts it off from the API server, when
    /// both replicas run and none is cut off; deletes a replica's Pod instead once it has
    /// restarted twice.
    async fn controller_event(&mut self) -> Result<(), Error> {
        if self
            .controller_cut_until
            .is_some_and(|until| until > Instant::now())
        {
            return Ok(());
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), RELEASE_NAMESPACE);
        let replicas: Vec<Pod> = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=conclave"))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if replicas.len() < 2 || replicas.iter().any(|p| running_container(p).is_none()) {
            return Ok(());
        }
        if let Some(worn) = replicas
            .iter()
            .find(|p| restarts(p) >= RETIRE_AFTER_RESTARTS)
        {
            let name = worn.metadata.name.clone().unwrap_or_default();
            pods.delete(&name, &DeleteParams::default()).await?;
            self.report.controller_deletions += 1;
            return Ok(());
        }
        let active = look_at_election(self.client, RELEASE_NAMESPACE, HA_LEASE)
            .await?
            .holder;
        let Some(active) = active.and_then(|holder| {
            replicas
                .iter()
                .find(|p| is_identity_of(&holder, p.metadata.name.as_deref().unwrap_or("-")))
        }) else {
            return Ok(());
        };
        if self.dice.below(100) < 40 {
            let long = self.dice.below(4) == 0;
            let range = if long {
                LONG_CONTROLLER_CUT_SECS
            } else {
                CONTROLLER_CUT_SECS
            };
            let secs = range.start + self.dice.below(range.end - range.start);
            if self.cut_off(active, CONTROLLER_CONTAINER, secs)?.is_some() {
                self.controller_cut_until = Some(Instant::now() + Duration::from_secs(secs));
                self.report.controller_cut_offs.0 += 1;
                self.report.controller_cut_offs.1 += usize::from(long);
            }
        } else if let Some((container, _)) = running_container(active)
            && kill_if_running(self.node, &container)?
        {
            self.report.controller_kills += 1;
        }
        Ok(())
    }

    /// Notes each of `pods` that restarted more often than the driver killed it: its process
    /// died on its own.
    fn notice_unexpected_exits(&mut self, pods: &[&Pod]) {
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Some(slot) = self.slots.get(&name)
                && restarts(pod) > slot.kills
            {
                let note = format!("{name}: {} restarts, {} kills", restarts(pod), slot.kills);
                if !self.report.unexpected_exits.contains(&note) {
                    self.report.unexpected_exits.push(note);
                }
            }
        }
    }

    /// Deletes every soak Pod (SIGTERM: each leader hands over or releases) and waits until
    /// they are gone.
    async fn finish(&mut self) -> Result<(), Error> {
        let listed = self.pods.list(&ListParams::default()).await?.items;
        self.notice_unexpected_exits(&listed.iter().collect::<Vec<_>>());
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            self.delete_pod(&name).await?;
        }
        let deadline = Instant::now() + GONE_TIMEOUT;
        while !self
            .pods
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
        {
            if Instant::now() > deadline {
                return Err(Error::Unexpected("the soak's Pods did not go".into()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }
}

/// Runs the soak in [`SOAK_NAMESPACE`] on `node`, with candidates from `image` (imported into the
/// node), against the controller already running in the cluster (the chart); returns what it did
/// and the checker's verdict. Needs root: it reads `/var/log/pods` and kills through containerd.
pub async fn run(
    client: &Client,
    node: &Node,
    image: &str,
    config: NodeSoakConfig,
) -> Result<NodeSoakReport, Error> {
    std::fs::create_dir_all(&config.output_dir).map_err(|source| Error::Io {
        context: format!("creating {}", config.output_dir.display()),
        source,
    })?;
    prepare_namespace(client).await?;
    let api_server = api_server_service(client).await?;
    let collector = Collector::start();
    let mut soak = Soak {
        client,
        node,
        image,
        dice: Dice(config.seed),
        pods: Api::namespaced(client.clone(), SOAK_NAMESPACE),
        slots: BTreeMap::new(),
        created: BTreeMap::new(),
        serial: 0,
        kills: BTreeMap::new(),
        reaped: Arc::default(),
        last_holders: BTreeMap::new(),
        holder_changes: 0,
        holders_seen: BTreeSet::new(),
        api_server,
        cuts: Vec::new(),
        controller_cut_until: None,
        report: NodeSoakReport {
            config: config.clone(),
            elapsed: Duration::ZERO,
            leader_kills: 0,
            follower_kills: 0,
            leader_deletions: 0,
            retired: 0,
            preemptions: 0,
            controller_kills: 0,
            controller_deletions: 0,
            cut_offs: 0,
            force_deletions: 0,
            recreated_same_name: 0,
            controller_cut_offs: (0, 0),
            watches_gone: 0,
            processes: 0,
            unexpected_exits: Vec::new(),
            holder_dead_events: 0,
            wrongly_dead: Vec::new(),
            holder_changes: 0,
            never_led: Vec::new(),
            verdict: Verdict::default(),
        },
        config,
    };
    for lease in 0..soak.config.leases {
        for _ in 0..soak.config.candidates {
            let minor = FRESH_MINORS.start + soak.dice.below(FRESH_MINORS.end - FRESH_MINORS.start);
            soak.start_pod(lease, minor).await?;
        }
    }
    let started = Instant::now();
    while soak.holder_changes < soak.config.hand_offs && started.elapsed() < soak.config.max {
        let lease = soak.dice.below(soak.config.leases as u64) as usize;
        let before = soak.holder_changes;
        soak.heal_cuts(false);
        soak.event(lease).await?;
        if soak.holder_changes.is_multiple_of(50) && soak.holder_changes != before {
            eprintln!(
                "node soak: {} hand-offs seen in {:.0} s",
                soak.holder_changes,
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(150 + soak.dice.below(350))).await;
    }
    soak.report.elapsed = started.elapsed();
    soak.heal_cuts(true);
    soak.finish().await?;
    // The last lines of the deleted Pods' processes reach their logs within the poll interval.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (logs, controller_logs) = collector.finish();
    for ((pod, _, restart), text) in &controller_logs {
        let lines = cri_lines(text);
        soak.report.watches_gone += lines.lines().filter(|l| is_watch_gone(l)).count();
        let file = soak
            .config
            .output_dir
            .join(format!("controller-{pod}#{restart}.log"));
        std::fs::write(&file, &lines).map_err(|source| Error::Io {
            context: format!("writing {}", file.display()),
            source,
        })?;
    }
    let reaped = std::mem::take(&mut *soak.reaped.lock().unwrap_or_else(PoisonError::into_inner));
    let mut checker = Checker::default();
    let mut killed = BTreeSet::new();
    let (mut read, mut led) = (BTreeSet::new(), BTreeSet::new());
    for ((pod, uid, restart), text) in &logs {
        let Some(lease) = soak.created.get(uid) else {
            continue;
        };
        let mut output = cri_lines(text);
        let instance = (uid.clone(), *restart);
        if let Some(at) = soak.kills.get(&instance) {
            output.push_str(&format!("{{\"event\":\"killed\",\"monotonic_ns\":{at}}}\n"));
            killed.extend(elected_as(&output));
        } else if let Some(at) = reaped.get(&instance) {
            // Ended by the kubelet after a force delete, not by the driver: a `HolderDead` Event
            // naming it still counts as naming a live process.
            output.push_str(&format!("{{\"event\":\"killed\",\"monotonic_ns\":{at}}}\n"));
        }
        let took_part_as = elected_as(&output);
        if output.contains("\"event\":\"leading\"") {
            led.extend(took_part_as.clone());
        }
        read.extend(took_part_as);
        let identity = format!("{pod}#{restart}");
        let file = soak.config.output_dir.join(format!("{identity}.out"));
        std::fs::write(&file, &output).map_err(|source| Error::Io {
            context: format!("writing {}", file.display()),
            source,
        })?;
        checker.add(&lease_name(*lease), &identity, &output);
        soak.report.processes += 1;
    }
    soak.report.verdict = checker.verdict();
    soak.report.holder_changes = soak.holder_changes;
    // Only processes whose whole output was read: a holder without one explains nothing.
    soak.report.never_led = soak
        .holders_seen
        .iter()
        .filter(|holder| read.contains(*holder) && !led.contains(*holder))
        .cloned()
        .collect();
    let events: Api<Event> = Api::namespaced(client.clone(), SOAK_NAMESPACE);
    for event in events.list(&ListParams::default()).await?.items {
        if event.reason.as_deref() != Some("HolderDead") {
            continue;
        }
        soak.report.holder_dead_events += 1;
        let note = event.note.unwrap_or_default();
        let holder = note.split(" is dead").next().unwrap_or_default();
        if !killed.contains(holder) {
            soak.report.wrongly_dead.push(note);
        }
    }
    Ok(soak.report)
}

/// The identity a process took part in the election as (its `taking part in the election
/// identity=…` log line).
fn elected_as(output: &str) -> Option<String> {
    output
        .lines()
        .find(|line| line.contains("taking part in the election"))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("identity="))
        .map(str::to_owned)
}

impl fmt::Display for NodeSoakReport {
    /// The table, in Markdown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.verdict;
        let (graceful, graceful_gaps) = gap_summary(v.hand_offs.iter().filter(|h| h.graceful()));
        let (crashed, crash_gaps) = gap_summary(v.hand_offs.iter().filter(|h| !h.graceful()));
        let rows = [
            ("server", "kube-apiserver + a real node (kubelet, containerd), the chart's controller, pod liveness on".to_owned()),
            ("seed", self.config.seed.to_string()),
            (
                "Leases x candidate Pods",
                format!("{} x {}", self.config.leases, self.config.candidates),
            ),
            (
                "duration",
                format!("{:.0} s, {} processes", self.elapsed.as_secs_f64(), self.processes),
            ),
            ("hand-offs", v.hand_off_summary(self.elapsed)),
            ("terms", format!("{} (ends {:?})", v.terms, v.ends)),
            (
                "container kills (SIGKILL through containerd)",
                format!(
                    "{} of the leader, {} of a follower",
                    self.leader_kills, self.follower_kills
                ),
            ),
            (
                "Pods deleted (SIGTERM)",
                format!(
                    "{} leaders, {} retired after two restarts",
                    self.leader_deletions, self.retired
                ),
            ),
            ("better candidates started (pre-emption)", self.preemptions.to_string()),
            (
                "controller",
                format!(
                    "{} kills of the active replica's container, {} Pods retired",
                    self.controller_kills, self.controller_deletions
                ),
            ),
            (
                "cut off from the API server while running",
                format!(
                    "{} leaders ({} Pods then force-deleted, {} of them recreated under the same \
                     name); the active controller {} times ({} past the watch cache's history), \
                     {} Lease watches ended in 410 Gone",
                    self.cut_offs,
                    self.force_deletions,
                    self.recreated_same_name,
                    self.controller_cut_offs.0,
                    self.controller_cut_offs.1,
                    self.watches_gone
                ),
            ),
            (
                "holder changes the driver saw",
                format!(
                    "{}, {} of them to a holder that never led ({})",
                    self.holder_changes,
                    self.never_led.len(),
                    self.never_led.join(", ")
                ),
            ),
            ("overlaps", v.overlaps.len().to_string()),
            ("leaked tasks", v.leaked.len().to_string()),
            ("unended terms, unreadable lines", v.errors.len().to_string()),
            ("exits unasked", self.unexpected_exits.len().to_string()),
            (
                "HolderDead Events (pod liveness)",
                format!(
                    "{}, {} naming a live process",
                    self.holder_dead_events,
                    self.wrongly_dead.len()
                ),
            ),
            ("longest leaderless gap", seconds(v.hand_offs.iter().map(|h| h.gap).max())),
            ("the three longest", longest_gaps(&v.hand_offs, 3)),
            (
                "hand-off time p50 / p99, graceful",
                format!("{graceful_gaps}, n = {graceful}"),
            ),
            (
                "hand-off time p50 / p99, after a crash or lost Lease",
                format!("{crash_gaps}, n = {crashed}"),
            ),
        ];
        writeln!(f, "| | |")?;
        writeln!(f, "|---|---|")?;
        for (name, value) in rows {
            writeln!(f, "| {name} | {value} |")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::cri_lines;

    #[test]
    fn cri_lines_join_partial_lines_per_stream_and_keep_the_order() {
        let log = b"2026-12-05T12:00:00.1Z stdout P {\"event\":\n\
2026-12-05T12:00:00.2Z stderr F work stopped term=1\n\
2026-12-05T12:00:00.3Z stdout F \"leading\"}\n\
2026-12-05T12:00:00.4Z stdout F \n";
        assert_eq!(
            cri_lines(log),
            "work stopped term=1\n{\"event\":\"leading\"}\n\n"
        );
    }
}
