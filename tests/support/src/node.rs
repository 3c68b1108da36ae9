//! A real node joined to a [`ControlPlane`]: containerd, the kubelet, kube-controller-manager and
//! kube-scheduler, so that Pods are scheduled, started, probed and restarted by Kubernetes itself.
//!
//! The host side (the bridge, the FORWARD guard that keeps pods on it, the configuration files,
//! image import, and the clean-up of mounts, bridge, iptables chains and cgroups) is
//! `tests/kube/node/node.sh`, shared with `tests/kube/cluster.sh` so that both do exactly the
//! same. The processes are [`ManagedProcess`]es, killed with the test binary; the containers'
//! processes and runc shims are not children of the test binary, so [`Node`]'s `Drop` kills them
//! and cleans up the host through `node.sh cleanup`.
//!
//! One node runs on a machine at a time (the bridge, its subnet and the `kubepods` cgroups are
//! machine-wide): [`Node::start`] waits for the lock `/run/conclave-node.lock`, which the node
//! holds until it is dropped.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::binaries::{Binaries, KUBERNETES_VERSION, workspace_root};
use crate::control_plane::free_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error};

/// Set this environment variable (CI does, once `.ci/prepare-node.sh` ran) to turn a node that
/// cannot be prepared (not root, a missing binary or Debian package) into an error instead of a
/// skip.
pub const NODE_REQUIRE_ENV: &str = "CONCLAVE_REQUIRE_NODE";

/// The node's name, as the kubelet registers it (`--hostname-override`).
pub const NODE_NAME: &str = "conclave-node";

/// The test workload image `node.sh prepare` builds and [`Node::start`] imports: it serves
/// `GET /healthz` (200 `ok`) on port 8080 until SIGTERM.
pub const PROBE_IMAGE: &str = "localhost/conclave-probe:local";

/// Serialises nodes across processes (one per machine).
const LOCK_PATH: &str = "/run/conclave-node.lock";
/// How long to wait for another node on this machine to stop.
const LOCK_TIMEOUT: Duration = Duration::from_secs(600);
/// How long to wait for the node to report Ready (a first start on a busy machine is slow).
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait for containerd's socket.
const CONTAINERD_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of a log quoted in errors.
const TAIL_BYTES: usize = 4000;
/// The node binaries `tests/kube/build.sh` builds, besides the control plane's.
const NODE_BINARIES: [&str; 5] = [
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
];
/// The pods' range (`node.sh`'s SUBNET), for kube-proxy's `--cluster-cidr`.
const POD_CIDR: &str = "10.244.0.0/24";
/// The image archives `node.sh prepare` builds into the binaries' directory, imported at start.
const IMAGES: [&str; 2] = ["pause.tar", "probe.tar"];
/// The archive of kube-scheduler's image `node.sh prepare` builds (FROM scratch, the control
/// plane's own binary), imported by [`Node::import_kube_scheduler`] for the tests that run it.
const KUBE_SCHEDULER_ARCHIVE: &str = "kube-scheduler.tar";

/// A running node (containerd + kubelet + kube-proxy) and the controllers a node needs to run Pods
/// (kube-controller-manager for ServiceAccounts and ReplicaSets, kube-scheduler), joined to a
/// control plane with its own credentials (`system:node:conclave-node` in `system:nodes`, checked
/// by the Node authorizer and NodeRestriction). Dropping it kills every process, the containers
/// included, and restores the host.
///
/// Fields drop in declaration order: the kubelet first, so that it restarts nothing, containerd
/// last of the processes, then the host clean-up, then the lock.
pub struct Node {
    dir: PathBuf,
    ctr: PathBuf,
    node_sh: PathBuf,
    kube_scheduler_archive: PathBuf,
    kubelet: ManagedProcess,
    proxy: ManagedProcess,
    scheduler: ManagedProcess,
    controller_manager: ManagedProcess,
    containerd: ManagedProcess,
    relay: ApiRelay,
    _host: HostCleanup,
    /// Held (flock) for the node's lifetime; released last, after the clean-up.
    _lock: File,
}

/// Runs `node.sh cleanup` on drop: kills the containers and shims the node's containerd left
/// behind, unmounts their file systems, deletes the bridge, the iptables chains and the cgroups.
/// Made as soon as `node.sh setup` has touched the host, so a failed start cleans up too.
struct HostCleanup {
    node_sh: PathBuf,
    dir: PathBuf,
}

impl Drop for HostCleanup {
    fn drop(&mut self) {
        if let Err(e) = run_script(
            Command::new("bash")
                .arg(&self.node_sh)
                .arg("cleanup")
                .arg(&self.dir),
            "node.sh cleanup",
        ) {
            eprintln!("testkit: cleaning up the node failed: {e}");
        }
        if !std::thread::panicking() {
            // The logs stay with the control plane's run directory; the state is large.
            for state in ["containerd", "kubelet"] {
                let _ = std::fs::remove_dir_all(self.dir.join(state));
            }
        }
    }
}

impl Node {
    /// Whether a node can run on this machine (root, the control plane's and the node's binaries,
    /// images and Debian packages), for tests that start one through `tests/kube/cluster.sh` as a
    /// person would. `Ok(false)` after printing a SKIP line; with `CONCLAVE_REQUIRE_NODE` set, an
    /// error instead.
    pub fn available() -> Result<bool, Error> {
        let Some(binaries) = Binaries::locate()? else {
            return Ok(false);
        };
        can_run(&binaries, &workspace_root().join("tests/kube/node/node.sh"))
    }

    /// Starts containerd, kube-controller-manager, kube-scheduler, the kubelet and kube-proxy
    /// against `plane`, points the `kubernetes` Service at it (through a relay on the node's
    /// address), and waits until the node is Ready.
    ///
    /// Returns `Ok(None)` after printing a SKIP line when the node cannot be prepared here (not
    /// root, a node binary, image or Debian package missing) and `CONCLAVE_REQUIRE_NODE` is
    /// unset; with it set, that is an error.
    pub async fn start(plane: &ControlPlane) -> Result<Option<Self>, Error> {
        let binaries = plane.binaries().clone();
        let node_sh = workspace_root().join("tests/kube/node/node.sh");
        if !can_run(&binaries, &node_sh)? {
            return Ok(None);
        }
        let lock = tokio::task::spawn_blocking(lock_machine)
            .await
            .map_err(|e| Error::Io {
                context: "waiting for the node lock".into(),
                source: std::io::Error::other(e),
            })??;
        let started = Instant::now();
        let dir = plane.dir().join("node");
        let ca = plane.dir().join("ca.crt");
        let kubelet_port = free_port()?;
        let host = HostCleanup {
            node_sh: node_sh.clone(),
            dir: dir.clone(),
        };
        let node_ip = run_script(
            Command::new("bash")
                .arg(&node_sh)
                .arg("setup")
                .arg(&dir)
                .env("KUBELET_PORT", kubelet_port.to_string())
                .env("HEALTHZ_PORT", free_port()?.to_string())
                .env("CA", &ca),
            "node.sh setup",
        )?;
        let node_ip = node_ip.trim().to_owned();
        let path = format!(
            "{}:{}",
            binaries.path("").display(),
            std::env::var("PATH").unwrap_or_default()
        );

        // containerd finds its shim on PATH: the one built with it, not a distribution's.
        let mut containerd = ManagedProcess::spawn(
            "containerd",
            Path::new("/usr/bin/env"),
            &[
                format!("PATH={path}"),
                binaries.path("containerd").display().to_string(),
                "--config".into(),
                dir.join("containerd.toml").display().to_string(),
            ],
            &dir.join("containerd.log"),
        )?;
        let ctr = binaries.path("ctr");
        let socket = dir.join("containerd.sock");
        wait_process(&mut containerd, CONTAINERD_TIMEOUT, "its socket", || {
            Command::new(&ctr)
                .arg("--address")
                .arg(&socket)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .await?;
        Self::import_images(&binaries, &dir, &ctr, &node_sh)?;

        let controller_manager = plane.spawn_node_controller(&dir, "kube-controller-manager")?;
        let scheduler = plane.spawn_node_controller(&dir, "kube-scheduler")?;
        let kubeconfig =
            plane.kubeconfig_for_user(&format!("system:node:{NODE_NAME}"), Some("system:nodes"))?;
        let kubelet = ManagedProcess::spawn(
            "kubelet",
            Path::new("/usr/bin/env"),
            &[
                format!("PATH={path}"),
                binaries.path("kubelet").display().to_string(),
                format!("--config={}", dir.join("kubelet.yaml").display()),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--hostname-override={NODE_NAME}"),
                format!("--node-ip={node_ip}"),
                format!("--root-dir={}", dir.join("kubelet").display()),
                format!("--cert-dir={}", dir.join("kubelet-pki").display()),
                "--v=2".into(),
            ],
            &dir.join("kubelet.log"),
        )?;
        let proxy_kubeconfig = plane.kubeconfig_for_user("system:kube-proxy", None)?;
        let proxy = ManagedProcess::spawn(
            "kube-proxy",
            &binaries.path("kube-proxy"),
            &[
                format!("--kubeconfig={}", proxy_kubeconfig.display()),
                format!("--hostname-override={NODE_NAME}"),
                "--proxy-mode=iptables".into(),
                format!("--cluster-cidr={POD_CIDR}"),
                // Leaves the machine's nf_conntrack_max alone.
                "--conntrack-max-per-core=0".into(),
                format!("--healthz-bind-address=127.0.0.1:{}", free_port()?),
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                "--v=1".into(),
            ],
            &dir.join("kube-proxy.log"),
        )?;
        let relay = ApiRelay::start(&node_ip, plane.server_url())?;
        publish_api_endpoint(plane, relay.addr).await?;
        let mut node = Self {
            dir,
            ctr,
            node_sh,
            kube_scheduler_archive: plane.binaries().path(KUBE_SCHEDULER_ARCHIVE),
            kubelet,
            proxy,
            scheduler,
            controller_manager,
            containerd,
            relay,
            _host: host,
            _lock: lock,
        };
        for p in [
            &node.kubelet,
            &node.proxy,
            &node.scheduler,
            &node.controller_manager,
            &node.containerd,
        ] {
            plane.register_log(p.log_path());
        }
        let nodes: Api<NodeObject> = Api::all(plane.client().await?);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            node.check_running()?;
            if nodes
                .get_opt(NODE_NAME)
                .await?
                .as_ref()
                .is_some_and(is_ready)
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(node.process_error(
                    &node.kubelet,
                    format!("node not Ready after {}s", READY_TIMEOUT.as_secs()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tracing::info!(
            node = NODE_NAME,
            ready_after_ms = started.elapsed().as_millis() as u64,
            dir = %node.dir.display(),
            "node ready"
        );
        eprintln!(
            "testkit: node {NODE_NAME} Ready after {:.1}s, run dir {}",
            started.elapsed().as_secs_f64(),
            node.dir.display()
        );
        Ok(Some(node))
    }

    /// Imports the sandbox and probe images into containerd's `k8s.io` namespace.
    fn import_images(
        binaries: &Binaries,
        dir: &Path,
        ctr: &Path,
        node_sh: &Path,
    ) -> Result<(), Error> {
        for image in IMAGES {
            import_archive(node_sh, dir, ctr, &binaries.path(image))?;
        }
        Ok(())
    }

    /// Imports the image archive `archive` (docker-archive or OCI, e.g. from `podman save`) into
    /// the node's containerd, where Pods with `imagePullPolicy: IfNotPresent` or `Never` find it.
    pub fn import_image(&self, archive: &Path) -> Result<(), Error> {
        import_archive(&self.node_sh, &self.dir, &self.ctr, archive)
    }

    /// Imports kube-scheduler's image into containerd and returns its reference
    /// (`localhost/kube-scheduler:<KUBERNETES_VERSION>`): the control plane's own kube-scheduler
    /// binary, to run as a Pod the way clusters run their control plane on their nodes.
    pub fn import_kube_scheduler(&self) -> Result<String, Error> {
        self.import_image(&self.kube_scheduler_archive)?;
        Ok(format!("localhost/kube-scheduler:{KUBERNETES_VERSION}"))
    }

    /// Freezes the kubelet (SIGSTOP), as when a node's kubelet hangs or the node is lost: its
    /// containers run on, and one that dies stays dead (nothing restarts, probes or reports on
    /// it) until [`resume_kubelet`](Self::resume_kubelet). Returns false if the kubelet has
    /// exited.
    pub fn suspend_kubelet(&mut self) -> bool {
        self.kubelet.suspend()
    }

    /// Lets the kubelet frozen by [`suspend_kubelet`](Self::suspend_kubelet) run again: it
    /// restarts the containers that died meanwhile. Returns false if it has exited.
    pub fn resume_kubelet(&mut self) -> bool {
        self.kubelet.resume()
    }

    /// Sends SIGKILL to the container `container_id` (the id in a Pod's
    /// `status.containerStatuses[].containerID`, with or without the `containerd://` prefix)
    /// through containerd, as an out-of-memory kill or a crash would end it.
    pub fn kill_container(&self, container_id: &str) -> Result<(), Error> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        run_script(
            Command::new(&self.ctr)
                .arg("--address")
                .arg(self.dir.join("containerd.sock"))
                .args(["-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id]),
            "ctr tasks kill",
        )
        .map(drop)
    }

    /// Makes the container `container_id` (with or without the `containerd://` prefix) run out
    /// of memory, so that the kernel's OOM killer ends its main process as it would end a
    /// component that outgrew its memory limit; the kubelet then reports it `OOMKilled`.
    ///
    /// How: its main process is made the OOM killer's first choice (`oom_score_adj` 1000; raising
    /// it needs no privilege, the kubelet sets about 999 for a Burstable container anyway), and
    /// `dd` runs in the container's memory cgroup, holding a buffer of the limit minus half the
    /// usage: more than the cgroup has left, less than the limit, so the kernel kills the main
    /// process and `dd` then completes (or is killed with the rest of the container). The test
    /// does not need the component's cooperation (a `FROM scratch` image has nothing to run an
    /// allocation with), and the kill is the kernel's own. Fails if the container has no memory
    /// limit, or if its main process still runs 10 s after `dd` ended. Returns once it is gone.
    pub fn oom_kill_container(&self, container_id: &str) -> Result<(), Error> {
        let pid = self.container_pid(container_id)?;
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| Error::Io {
                context: format!("reading {}", path.display()),
                source,
            })
        };
        let proc_cgroup = read(&PathBuf::from(format!("/proc/{pid}/cgroup")))?;
        let memory = proc_cgroup
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ':');
                fields.next()?;
                Some((fields.next()?, fields.next()?))
            })
            .find(|(controllers, _)| controllers.split(',').any(|c| c == "memory"))
            .map(|(_, path)| Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("pid {pid} has no memory cgroup:\n{proc_cgroup}"))
            })?;
        let number = |file: &str| -> Result<u64, Error> {
            let text = read(&memory.join(file))?;
            text.trim().parse().map_err(|_| {
                Error::InvalidArgument(format!("{}/{file}: {text:?}", memory.display()))
            })
        };
        let limit = number("memory.limit_in_bytes")?;
        let usage = number("memory.usage_in_bytes")?;
        if limit >= 1 << 40 {
            return Err(Error::InvalidArgument(format!(
                "container {container_id} has no memory limit ({})",
                memory.display()
            )));
        }
        let oom_score_adj = PathBuf::from(format!("/proc/{pid}/oom_score_adj"));
        std::fs::write(&oom_score_adj, "1000").map_err(|source| Error::Io {
            context: format!("writing {}", oom_score_adj.display()),
            source,
        })?;
        let buffer = limit - usage / 2;
        let dd = Command::new("sh")
            .args([
                "-c",
                "echo $$ > \"$1/cgroup.procs\" && exec dd if=/dev/zero of=/dev/null bs=\"$2\" \
                 count=1 iflag=fullblock",
                "sh",
            ])
            .arg(&memory)
            .arg(buffer.to_string())
            .output()
            .map_err(|source| Error::Io {
                context: "running dd in the container's memory cgroup".into(),
                source,
            })?;
        // dd completes, or goes with the container: once its init process is gone, the runtime
        // kills whatever is left in the container's cgroup.
        let killed = std::os::unix::process::ExitStatusExt::signal(&dd.status) == Some(9);
        if !dd.status.success() && !killed {
            return Err(Error::NodeCommand {
                what: "dd in the container's memory cgroup".into(),
                status: dd.status.to_string(),
                stderr: String::from_utf8_lossy(&dd.stderr).into_owned(),
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_runs(pid) {
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument(format!(
                    "the OOM killer left pid {pid}, the main process of {container_id}, running"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The host pid of the container `container_id`'s main process (with or without the
    /// `containerd://` prefix), from containerd's task list: read its `/proc/<pid>` to see the
    /// user, privileges and mounts the container really runs with.
    pub fn container_pid(&self, container_id: &str) -> Result<u32, Error> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        let tasks = run_script(
            Command::new(&self.ctr)
                .arg("--address")
                .arg(self.dir.join("containerd.sock"))
                .args(["-n", "k8s.io", "tasks", "ls"]),
            "ctr tasks ls",
        )?;
        tasks
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                Some((fields.next()?, fields.next()?.parse::<u32>().ok()?))
            })
            .find(|(task, _)| *task == id)
            .map(|(_, pid)| pid)
            .ok_or_else(|| Error::InvalidArgument(format!("no running task {id}:\n{tasks}")))
    }

    /// The node's run directory (configuration, containerd's and the kubelet's state, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's address (its `InternalIP`): pods reach the host there, as the relay that
    /// stands for the API server shows; a test server bound to it is reachable from pods.
    #[must_use]
    pub fn ip(&self) -> std::net::IpAddr {
        self.relay.addr.ip()
    }

    /// Fails with the log tail if containerd, the kubelet or a controller has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        for p in [
            &mut self.containerd,
            &mut self.controller_manager,
            &mut self.scheduler,
            &mut self.kubelet,
            &mut self.proxy,
        ] {
            if let Some(status) = p.exit_status() {
                return Err(Error::Process {
                    name: p.name().to_owned(),
                    reason: format!("exited with {status}"),
                    log: p.log_path().to_owned(),
                    tail: p.log_tail(TAIL_BYTES),
                });
            }
        }
        Ok(())
    }

    fn process_error(&self, p: &ManagedProcess, reason: String) -> Error {
        Error::Process {
            name: p.name().to_owned(),
            reason,
            log: p.log_path().to_owned(),
            tail: p.log_tail(TAIL_BYTES),
        }
    }
}

impl ControlPlane {
    /// Starts kube-controller-manager or kube-scheduler for a node: not leader-elected, with
    /// the cluster CA and service-account key the controller manager needs to publish
    /// `kube-root-ca.crt` and to create ServiceAccounts' tokens.
    fn spawn_node_controller(&self, dir: &Path, binary: &str) -> Result<ManagedProcess, Error> {
        let user = format!("system:{binary}");
        let kubeconfig = self.kubeconfig_for_user(&user, None)?;
        let kubeconfig = kubeconfig.display();
        let mut args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            format!(
                "--cert-dir={}",
                dir.join(format!("{binary}-certs")).display()
            ),
            "--v=1".into(),
        ];
        if binary == "kube-controller-manager" {
            args.extend([
                format!("--root-ca-file={}", self.dir().join("ca.crt").display()),
                format!(
                    "--service-account-private-key-file={}",
                    self.dir().join("service-account.key").display()
                ),
                "--use-service-account-credentials=true".into(),
            ]);
        }
        ManagedProcess::spawn(
            binary,
            &self.binaries().path(binary),
            &args,
            &dir.join(format!("{binary}.log")),
        )
    }
}

/// Forwards TCP connections from the node's address to the API server, which listens on loopback
/// only: pods reach it through the `kubernetes` Service (10.0.0.1:443, translated by kube-proxy to
/// this relay), as in-cluster clients do. Stops accepting on drop.
struct ApiRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl ApiRelay {
    /// Listens on `node_ip` (a free port) and relays to the API server at `server`
    /// (`https://127.0.0.1:<port>`).
    fn start(node_ip: &str, server: &str) -> Result<Self, Error> {
        let io_err = |context: &str| {
            let context = context.to_owned();
            move |source| Error::Io { context, source }
        };
        let ip: Ipv4Addr = node_ip.parse().map_err(|e| {
            Error::InvalidArgument(format!("node.sh printed {node_ip:?}, not an address: {e}"))
        })?;
        let upstream: SocketAddr = server
            .trim_start_matches("https://")
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("API server URL {server}: {e}")))?;
        let listener = TcpListener::bind((ip, 0)).map_err(io_err("binding the API relay"))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("reading the API relay's address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("testkit-api-relay".into())
            .spawn(move || {
                for incoming in listener.incoming() {
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(client) = incoming {
                        std::thread::spawn(move || relay(client, upstream));
                    }
                }
            })
            .map_err(io_err("starting the API relay thread"))?;
        Ok(Self { addr, stop })
    }
}

impl Drop for ApiRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Copies bytes both ways between `client` and a new connection to `upstream` until either side
/// closes.
fn relay(client: TcpStream, upstream: SocketAddr) {
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    };
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let upload = std::thread::spawn(move || pipe(client, server));
    pipe(server2, client2);
    let _ = upload.join();
}

/// Points the `kubernetes` Service at the relay: the control plane runs with
/// `--endpoint-reconciler-type=none` (it listens on loopback, which an endpoint cannot name), so
/// the node writes the EndpointSlice kube-proxy translates 10.0.0.1:443 with.
async fn publish_api_endpoint(plane: &ControlPlane, relay: SocketAddr) -> Result<(), Error> {
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "conclave-testkit",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [relay.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": relay.port(), "protocol": "TCP"}],
    }))
    .expect("the EndpointSlice manifest is an EndpointSlice");
    let slices: Api<EndpointSlice> = Api::namespaced(plane.client().await?, "default");
    slices
        .patch(
            "kubernetes",
            &PatchParams::apply("conclave-testkit").force(),
            &Patch::Apply(&slice),
        )
        .await?;
    Ok(())
}

/// Why no node can run here, or `None` when it can: not root, a binary or image missing, or
/// `node.sh prepare` (Debian packages, images) failing.
fn unavailable(binaries: &Binaries, node_sh: &Path) -> Option<String> {
    #[allow(unsafe_code)]
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        return Some("the node needs root (containerd, the kubelet, the bridge)".into());
    }
    for name in NODE_BINARIES {
        if !binaries.path(name).is_file() {
            return Some(format!(
                "{} is missing; run tests/kube/build.sh",
                binaries.path(name).display()
            ));
        }
    }
    if let Err(e) = run_script(
        Command::new("bash")
            .arg(node_sh)
            .arg("prepare")
            .arg(binaries.path("")),
        "node.sh prepare",
    ) {
        return Some(e.to_string());
    }
    IMAGES
        .iter()
        .chain([&KUBE_SCHEDULER_ARCHIVE])
        .map(|i| binaries.path(i))
        .find(|p| !p.is_file())
        .map(|p| format!("{} is missing after node.sh prepare", p.display()))
}

/// Whether `CONCLAVE_REQUIRE_NODE` asks for the node.
fn required() -> bool {
    std::env::var_os(NODE_REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Takes the machine-wide node lock, waiting up to [`LOCK_TIMEOUT`] for another node (another
/// test's, or `cluster.sh up`'s) to go away.
fn lock_machine() -> Result<File, Error> {
    let io = |source| Error::Io {
        context: format!("locking {LOCK_PATH}"),
        source,
    };
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .map_err(io)?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    let mut said = false;
    loop {
        #[allow(unsafe_code)]
        // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked == 0 {
            return Ok(file);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io(error));
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!(
                    "{LOCK_PATH}: another node runs on this machine (a test, or tests/kube/cluster.sh up)"
                ),
                seconds: LOCK_TIMEOUT.as_secs(),
            });
        }
        if !said {
            eprintln!("testkit: waiting for another node to stop ({LOCK_PATH})");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `Ok(true)` when a node can run with `binaries`; else a SKIP line and `Ok(false)`, or an error
/// when [`NODE_REQUIRE_ENV`] is set.
fn can_run(binaries: &Binaries, node_sh: &Path) -> Result<bool, Error> {
    match unavailable(binaries, node_sh) {
        None => Ok(true),
        Some(reason) if required() => Err(Error::NodeUnavailable { reason }),
        Some(reason) => {
            eprintln!("SKIP: no node: {reason} (set {NODE_REQUIRE_ENV}=1 to make this a failure)");
            Ok(false)
        }
    }
}

fn import_archive(node_sh: &Path, dir: &Path, ctr: &Path, archive: &Path) -> Result<(), Error> {
    run_script(
        Command::new("bash")
            .arg(node_sh)
            .arg("import")
            .arg(dir)
            .arg(ctr)
            .arg(archive),
        "node.sh import",
    )
    .map(drop)
}

/// Runs `command` to completion; its stdout on success, an error quoting its stderr otherwise.
/// Whether process `pid` exists and is not a zombie.
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

fn run_script(command: &mut Command, what: &str) -> Result<String, Error> {
    let output = command.output().map_err(|source| Error::Io {
        context: format!("running {what}"),
        source,
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::NodeCommand {
            what: what.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Polls `ready` every 100 ms until it holds, failing if `process` exits or `timeout` passes.
async fn wait_process(
    process: &mut ManagedProcess,
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = process.exit_status() {
            return Err(Error::Process {
                name: process.name().to_owned(),
                reason: format!("exited with {status}"),
                log: process.log_path().to_owned(),
                tail: process.log_tail(TAIL_BYTES),
            });
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Process {
                name: process.name().to_owned(),
                reason: format!("{what} not ready after {}s", timeout.as_secs()),
                log: process.log_path().to_owned(),
                tail: process.log_tail(TAIL_BYTES),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a Node object's `Ready` condition is `True`.
fn is_ready(node: &NodeObject) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}
