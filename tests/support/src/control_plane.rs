//! etcd + kube-apiserver on free loopback ports, and clients for it.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::Error;
use crate::binaries::{Binaries, workspace_root};
use crate::pki::{self, CertFiles, Pki};
use crate::process::ManagedProcess;

/// How long to wait for kube-apiserver's `/readyz` (cold starts on a busy 2-core machine are slow).
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a restarted kube-apiserver may take to exit after SIGTERM before it is killed: a
/// Pod's default grace period, what the kubelet gives a static kube-apiserver Pod. (With clients
/// watching, kube-apiserver v1.37 drained for about 60 s here before it exited on its own.)
const APISERVER_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for etcd to accept connections.
const ETCD_TIMEOUT: Duration = Duration::from_secs(60);
/// Run directories older than this are deleted when a new control plane starts.
const RUN_DIR_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Overrides where run directories (logs, certificates, etcd data) are created.
const RUN_DIR_ENV: &str = "CONCLAVE_KUBE_RUN_DIR";
/// Bytes of a log quoted in errors.
const TAIL_BYTES: usize = 4000;

/// The user name of the admin client certificate (group `system:masters`).
pub const ADMIN_USER: &str = "conclave-testkit-admin";

/// The shared control plane of this test binary (see [`ControlPlane::shared`]).
static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
/// Numbers run directories within one process.
static RUN_SEQ: AtomicU64 = AtomicU64::new(0);

/// A running etcd + kube-apiserver pair. Dropping it kills both (and, when the thread is
/// panicking, keeps the run directory and prints where the logs are).
///
/// Holds no tokio objects, so one instance can be used from many `#[tokio::test]` runtimes: every
/// [`client`](Self::client) call builds a fresh `kube::Client` on the caller's runtime.
pub struct ControlPlane {
    binaries: Binaries,
    dir: PathBuf,
    pki: Pki,
    server: String,
    kubeconfig: PathBuf,
    apiserver: Mutex<ManagedProcess>,
    /// kube-apiserver's flags, for [`restart_apiserver`](Self::restart_apiserver).
    apiserver_args: Vec<String>,
    etcd: Mutex<ManagedProcess>,
    names: AtomicU64,
    /// Logs of helper processes (schedulers), listed when a test fails.
    extra_logs: Mutex<Vec<PathBuf>>,
    /// Keep the run directory on drop even without a panic.
    keep_dir: AtomicBool,
}

impl ControlPlane {
    /// Starts a dedicated control plane and waits until kube-apiserver reports ready.
    ///
    /// Returns `Ok(None)` when the binaries are missing and `CONCLAVE_REQUIRE_KUBE` is unset (a
    /// SKIP line has been printed); the caller should return early.
    pub async fn start() -> Result<Option<Self>, Error> {
        let Some(binaries) = Binaries::locate()? else {
            return Ok(None);
        };
        let plane = Self::start_with(binaries).await?;
        eprintln!(
            "testkit: control plane at {}, logs in {}",
            plane.server,
            plane.dir.display()
        );
        Ok(Some(plane))
    }

    /// The control plane shared by all tests of this test binary, started on first use and
    /// killed when the binary exits (through the processes' parent-death signal).
    ///
    /// Returns `Ok(None)` like [`start`](Self::start). Tests must isolate themselves with
    /// [`namespace`](Self::namespace) and must not crash or reconfigure the apiserver.
    pub async fn shared() -> Result<Option<SharedControlPlane>, Error> {
        let Some(binaries) = Binaries::locate()? else {
            return Ok(None);
        };
        let plane = SHARED
            .get_or_try_init(|| Self::start_with(binaries))
            .await?;
        // Captured per test by libtest and shown only when this test fails.
        eprintln!(
            "testkit: shared control plane at {}, logs in {}",
            plane.server,
            plane.dir.display()
        );
        plane.check_running()?;
        Ok(Some(SharedControlPlane { plane }))
    }

    /// Starts etcd and kube-apiserver, retrying when a port picked as free was taken by someone
    /// else before the process bound it.
    async fn start_with(binaries: Binaries) -> Result<Self, Error> {
        let mut attempt = 1;
        loop {
            match Self::try_start(binaries.clone()).await {
                Err(Error::Process { tail, .. })
                    if attempt < 3 && tail.contains("address already in use") =>
                {
                    tracing::warn!(
                        attempt,
                        "port taken while starting the control plane; retrying"
                    );
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn try_start(binaries: Binaries) -> Result<Self, Error> {
        let dir = new_run_dir()?;
        let pki = Pki::new()?;
        let ca = dir.join("ca.crt");
        pki::write_file(&ca, pki.ca_pem())?;
        let serving = pki.write_serving_cert(&dir, "apiserver")?;
        let admin = pki.write_client_cert(&dir, "admin", ADMIN_USER, Some("system:masters"))?;
        let sa_key = dir.join("service-account.key");
        let sa_pub = dir.join("service-account.pub");
        pki::write_service_account_keys(&sa_key, &sa_pub)?;

        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let etcd = ManagedProcess::spawn(
            "etcd",
            &binaries.path("etcd"),
            &etcd_args(&dir, etcd_client, etcd_peer),
            &dir.join("etcd.log"),
        )?;
        let mut etcd = etcd;
        wait_for_port(&mut etcd, etcd_client, ETCD_TIMEOUT).await?;

        let port = free_port()?;
        let server = format!("https://127.0.0.1:{port}");
        let args = apiserver_args(
            &dir,
            etcd_client,
            port,
            (&ca, &serving, &admin),
            (&sa_key, &sa_pub),
        );
        let apiserver = ManagedProcess::spawn(
            "kube-apiserver",
            &binaries.path("kube-apiserver"),
            &args,
            &dir.join("kube-apiserver.log"),
        )?;
        let kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(&kubeconfig, &server, &ca, &admin, ADMIN_USER)?;

        let plane = Self {
            binaries,
            dir,
            pki,
            server,
            kubeconfig,
            apiserver: Mutex::new(apiserver),
            apiserver_args: args,
            etcd: Mutex::new(etcd),
            names: AtomicU64::new(0),
            extra_logs: Mutex::new(Vec::new()),
            keep_dir: AtomicBool::new(false),
        };
        if let Err(e) = plane.wait_ready().await {
            // The error names the log file: keep it.
            plane.keep_run_dir();
            return Err(e);
        }
        Ok(plane)
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last: String;
        loop {
            self.check_running()?;
            let request = http::Request::get("/readyz").body(Vec::new());
            match client
                .request_text(request.expect("static request is valid"))
                .await
            {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                let p = self.apiserver.lock().expect("apiserver lock");
                return Err(Error::Process {
                    name: p.name().to_owned(),
                    reason: format!(
                        "not ready after {}s (last /readyz answer: {last})",
                        READY_TIMEOUT.as_secs()
                    ),
                    log: p.log_path().to_owned(),
                    tail: p.log_tail(TAIL_BYTES),
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Restarts kube-apiserver as the upgrade of a control-plane node does: SIGTERM, a wait for
    /// it to exit (SIGKILL after [`APISERVER_STOP_TIMEOUT`]), then the same binary with the same
    /// flags, port and etcd, and a wait until it reports ready. The new process is a new
    /// instance in its built-in controllers' elections (a new identity). Returns how long it
    /// served nothing, from the SIGTERM to ready. For a plane of the test's own
    /// ([`start`](Self::start)): the shared plane's other tests would see it go away.
    pub async fn restart_apiserver(&self) -> Result<Duration, Error> {
        let stopped = Instant::now();
        self.apiserver.lock().expect("apiserver lock").terminate();
        let deadline = stopped + APISERVER_STOP_TIMEOUT;
        while self
            .apiserver
            .lock()
            .expect("apiserver lock")
            .exit_status()
            .is_none()
        {
            if Instant::now() > deadline {
                eprintln!(
                    "testkit: kube-apiserver still ran {}s after SIGTERM; killing it",
                    APISERVER_STOP_TIMEOUT.as_secs()
                );
                self.apiserver.lock().expect("apiserver lock").kill();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "testkit: kube-apiserver stopped {:.1}s after SIGTERM; starting it again",
            stopped.elapsed().as_secs_f64()
        );
        let restarted = ManagedProcess::spawn(
            "kube-apiserver",
            &self.binaries.path("kube-apiserver"),
            &self.apiserver_args,
            &self.dir.join("kube-apiserver.log"),
        )?;
        *self.apiserver.lock().expect("apiserver lock") = restarted;
        self.wait_ready().await?;
        Ok(stopped.elapsed())
    }

    /// Fails with the log tail if etcd or kube-apiserver has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        for process in [&self.etcd, &self.apiserver] {
            let mut p = process.lock().expect("process lock");
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

    /// Whether kube-apiserver is still running (false once it has crashed or been killed).
    pub fn apiserver_running(&self) -> bool {
        self.apiserver
            .lock()
            .expect("apiserver lock")
            .exit_status()
            .is_none()
    }

    /// The kube-apiserver process id (its CPU time is in `/proc/<pid>/stat`).
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.lock().expect("apiserver lock").pid()
    }

    /// The etcd process id.
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.lock().expect("etcd lock").pid()
    }

    /// The text of kube-apiserver's `/metrics` (Prometheus text format), read as admin.
    pub async fn apiserver_metrics(&self) -> Result<String, Error> {
        let client = self.client().await?;
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("static request is valid");
        Ok(client.request_text(request).await?)
    }

    /// The last `max_bytes` of kube-apiserver's log.
    pub fn apiserver_log_tail(&self, max_bytes: usize) -> String {
        self.apiserver
            .lock()
            .expect("apiserver lock")
            .log_tail(max_bytes)
    }

    /// Keeps the run directory (logs, certificates, etcd data) when this control plane is
    /// dropped; by default it is deleted unless the thread is panicking.
    pub fn keep_run_dir(&self) {
        self.keep_dir.store(true, Ordering::Relaxed);
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// An admin kubeconfig (client certificate in group `system:masters`), usable by kubectl
    /// and client-go as well as kube-rs.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The run directory: certificates, kubeconfigs, etcd data and every process's log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The binaries this control plane runs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The log files of etcd, kube-apiserver and every helper process started so far.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = [&self.etcd, &self.apiserver]
            .iter()
            .map(|p| p.lock().expect("process lock").log_path().to_owned())
            .collect();
        logs.extend(
            self.extra_logs
                .lock()
                .expect("log list lock")
                .iter()
                .cloned(),
        );
        logs
    }

    pub(crate) fn register_log(&self, log: &Path) {
        self.extra_logs
            .lock()
            .expect("log list lock")
            .push(log.to_owned());
    }

    /// A new admin client on the caller's tokio runtime.
    pub async fn client(&self) -> Result<Client, Error> {
        Ok(conclave_candidate::client(self.config().await?)?)
    }

    /// A new admin client that returns 429, 503 and 504 answers as they come. kube's default
    /// client retries them up to 15 times with a doubling back-off (minutes in all), which turns a
    /// refusal a test expects, such as an eviction the PodDisruptionBudget refuses, into a wait.
    pub async fn client_without_retries(&self) -> Result<Client, Error> {
        let mut config = self.config().await?;
        config.default_retry = false;
        Ok(conclave_candidate::client(config)?)
    }

    /// A client acting as user `name` in `groups` (plus `system:authenticated`), for RBAC tests.
    ///
    /// It authenticates with the admin certificate and impersonates the user, so authorization
    /// (RBAC) sees exactly `name` and `groups`, as for a directly authenticated user.
    pub async fn client_for_user(&self, name: &str, groups: &[&str]) -> Result<Client, Error> {
        let mut config = self.config().await?;
        config.auth_info.impersonate = Some(name.to_owned());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
        Ok(conclave_candidate::client(config)?)
    }

    /// Writes a kubeconfig that authenticates as `user` (optionally in `group`) with its own
    /// client certificate signed by the cluster CA, for processes such as kube-scheduler.
    pub fn kubeconfig_for_user(&self, user: &str, group: Option<&str>) -> Result<PathBuf, Error> {
        let n = self.names.fetch_add(1, Ordering::Relaxed);
        let stem = format!("user-{n}");
        let cert = self.pki.write_client_cert(&self.dir, &stem, user, group)?;
        let path = self.dir.join(format!("{stem}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.dir.join("ca.crt"), &cert, user)?;
        Ok(path)
    }

    /// Creates a fresh namespace `<prefix>-<n>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        let mut base: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        base.truncate(40);
        let base = base.trim_matches('-');
        let base = if base.is_empty() { "test" } else { base };
        let name = format!("{base}-{}", self.names.fetch_add(1, Ordering::Relaxed));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client().await?)
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(name)
    }

    /// The kube-apiserver process (for [`crate::stall`]).
    pub(crate) fn apiserver_process(&self) -> &Mutex<ManagedProcess> {
        &self.apiserver
    }

    /// The etcd process (for [`crate::stall`]).
    pub(crate) fn etcd_process(&self) -> &Mutex<ManagedProcess> {
        &self.etcd
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.names.fetch_add(1, Ordering::Relaxed)
    }

    async fn config(&self) -> Result<Config, Error> {
        config_from_kubeconfig(&self.kubeconfig).await
    }

    fn print_logs(&self) {
        eprintln!(
            "testkit: control plane logs (run dir {}):",
            self.dir.display()
        );
        for log in self.log_paths() {
            eprintln!("testkit:   {}", log.display());
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Apiserver first, so it does not log a storm of etcd errors.
        self.apiserver.lock().map(|mut p| p.kill()).ok();
        self.etcd.lock().map(|mut p| p.kill()).ok();
        if std::thread::panicking() {
            self.print_logs();
        } else if !self.keep_dir.load(Ordering::Relaxed) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A test's handle on the shared control plane: dereferences to [`ControlPlane`] and prints the
/// log paths if the test panics.
pub struct SharedControlPlane {
    plane: &'static ControlPlane,
}

impl Deref for SharedControlPlane {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        self.plane
    }
}

impl Drop for SharedControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.plane.print_logs();
        }
    }
}

fn etcd_args(dir: &Path, client: u16, peer: u16) -> Vec<String> {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    vec![
        "--name=testkit".into(),
        format!("--data-dir={}", dir.join("etcd-data").display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=testkit={peer_url}"),
        // Test data: durability does not matter, disk contention with other builds does.
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

fn apiserver_args(
    dir: &Path,
    etcd_client: u16,
    port: u16,
    (ca, serving, admin): (&Path, &CertFiles, &CertFiles),
    (sa_key, sa_pub): (&Path, &Path),
) -> Vec<String> {
    vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", serving.cert.display()),
        format!("--tls-private-key-file={}", serving.key.display()),
        format!("--client-ca-file={}", ca.display()),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", sa_pub.display()),
        format!("--service-account-signing-key-file={}", sa_key.display()),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--endpoint-reconciler-type=none".into(),
        // As a real cluster: a node (crate::Node) acts only on its own objects.
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        // `kubectl logs` and `exec` through a node's kubelet, which authenticates the apiserver
        // with the cluster CA and reaches it at the node's InternalIP.
        format!("--kubelet-client-certificate={}", admin.cert.display()),
        format!("--kubelet-client-key={}", admin.key.display()),
        "--kubelet-preferred-address-types=InternalIP".into(),
        "--feature-gates=CoordinatedLeaderElection=true".into(),
        "--runtime-config=coordination.k8s.io/v1beta1=true".into(),
        // The built-in election controller's own lease: quicker hand-over than the 15s/10s/2s
        // defaults, so BuiltinControllerHold does not wait long for the controller to stop.
        "--coordinated-leadership-lease-duration=10s".into(),
        "--coordinated-leadership-renew-deadline=6s".into(),
        "--coordinated-leadership-retry-period=2s".into(),
        "--profiling=false".into(),
        // Level 2 logs the election controller's decisions (e.g. third-party strategies).
        "--v=2".into(),
    ]
}

/// Writes a kubeconfig (JSON, which client-go and kube-rs both read) for `user`.
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    cert: &CertFiles,
    user: &str,
) -> Result<(), Error> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testkit", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": user, "user": {
            "client-certificate": cert.cert,
            "client-key": cert.key,
        }}],
        "contexts": [{"name": "testkit", "context": {"cluster": "testkit", "user": user}}],
        "current-context": "testkit",
    });
    pki::write_file(
        path,
        &serde_json::to_string_pretty(&config).expect("JSON value serialises"),
    )
}

/// Makes ring rustls's process-wide crypto provider unless one is installed already. kube-rs
/// needs one, and cannot pick it by itself when no provider or more than one is compiled in.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A loopback port that was free a moment ago (the kernel picks it; the listener is closed).
pub(crate) fn free_port() -> Result<u16, Error> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| Error::Io {
            context: "finding a free loopback port".into(),
            source,
        })
}

async fn wait_for_port(
    process: &mut ManagedProcess,
    port: u16,
    timeout: Duration,
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
        if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Process {
                name: process.name().to_owned(),
                reason: format!("port {port} not open after {}s", timeout.as_secs()),
                log: process.log_path().to_owned(),
                tail: process.log_tail(TAIL_BYTES),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `<runs>/<pid>-<seq>-<unix seconds>` and prunes what earlier runs left behind.
fn new_run_dir() -> Result<PathBuf, Error> {
    let root = match std::env::var_os(RUN_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("target/kube/runs"),
    };
    let io = |context: String| move |source| Error::Io { context, source };
    std::fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
    let root = root
        .canonicalize()
        .map_err(io(format!("resolving {}", root.display())))?;
    prune_runs(&root);
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let seq = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{}-{seq}-{secs}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

/// Deletes run directories older than a day, and the etcd data (the bulk) of runs whose process
/// is gone; logs of recent runs stay for inspection.
fn prune_runs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.split('-');
        let (Some(pid), Some(_), Some(secs)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(pid), Ok(secs)) = (pid.parse::<u32>(), secs.parse::<u64>()) else {
            continue;
        };
        let age = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap_or_default();
        if age > RUN_DIR_MAX_AGE {
            let _ = std::fs::remove_dir_all(&path);
        } else if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(path.join("etcd-data"));
        }
    }
}

/// The client configuration a kubeconfig file describes.
async fn config_from_kubeconfig(path: &Path) -> Result<Config, Error> {
    install_crypto_provider();
    let kubeconfig = Kubeconfig::read_from(path)?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// A new client on the caller's tokio runtime from a kubeconfig file (an observer's own).
pub(crate) async fn client_from_kubeconfig(path: &Path) -> Result<Client, Error> {
    Ok(conclave_candidate::client(
        config_from_kubeconfig(path).await?,
    )?)
}
