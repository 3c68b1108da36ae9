//! Shared helpers: an emulator, fast lease timers, and writes that simulate an election
//! controller (holder and preferredHolder, each with a resourceVersion precondition); for the
//! scenarios that run on either server, [`Server`] (the emulator or a real kube-apiserver from
//! conclave-testkit, with a namespace, a kubeconfig and a scratch directory) and [`ConclaveRun`]
//! (the `conclave run` controller process electing in that namespace). Submodules for the
//! randomized runs with real processes: [`procs`] (candidate and controller processes, API
//! faults, seeded dice), [`checker`] (the split-brain checker, which reads only their output; in conclave-testkit,
//! shared with the soak on a real node),
//! [`kubelet`] (a simulated kubelet: Pods for the processes, their deaths reported) and [`soak`]
//! (the soak of tests/soak.rs and benches/soak.rs). Each test binary uses a part, hence
//! `dead_code` allowed.
#![allow(dead_code)]

pub use conclave_testkit::checker;
pub mod kubelet;
pub mod procs;
pub mod soak;

use conclave_candidate::{
    CandidateConfig, Elector, ElectorHandle, LeaderState, LeaseConfig, Term, Transition,
};
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use conclave_testkit::{BuiltinControllerHold, ControlPlane};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Generous bound for waiting on conditions (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(60);

/// The same on a real kube-apiserver: Go processes, pings and controller periods on a shared
/// 2-core machine.
pub const REAL_WAIT: Duration = Duration::from_secs(180);

pub const NS: &str = "default";
pub const STRATEGY: &str = "OldestEmulationVersion";

/// Starts an emulator on a free port.
pub async fn emulator() -> RunningEmulator {
    emulator_with(EmulatorConfig::default()).await
}

pub async fn emulator_with(config: EmulatorConfig) -> RunningEmulator {
    Emulator::start(config).await.expect("emulator starts")
}

/// A fresh client (own connection pool) for a plain-HTTP server URL, built as components are
/// advised to build theirs ([`conclave_candidate::client`]).
pub fn client(emulator: &RunningEmulator) -> Client {
    let config = kube::Config::new(emulator.url().parse().expect("valid URL"));
    conclave_candidate::client(config).expect("client builds")
}

/// Timers short enough for tests and long enough for a busy 2-core machine.
pub fn lease_config(name: &str, identity: &str) -> LeaseConfig {
    let mut config = LeaseConfig::new(NS, name, identity);
    config.lease_duration = Duration::from_secs(6);
    config.renew_deadline = Duration::from_secs(4);
    config.retry_period = Duration::from_millis(500);
    config
}

/// [`lease_config`] for a Lease in `namespace`.
pub fn lease_config_in(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
    let mut config = lease_config(name, identity);
    config.namespace = namespace.into();
    config
}

pub fn candidate_config(emulation: &str) -> CandidateConfig {
    CandidateConfig::new("1.33.0", emulation, STRATEGY)
}

/// Polls `check` every 50 ms until it returns `Some`, panicking after [`WAIT`].
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_within(what, WAIT, check).await
}

/// Polls `check` every 50 ms until it returns `Some`, panicking after `timeout`.
pub async fn wait_for_within<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the elector reports `wanted`.
pub async fn wait_state(handle: &ElectorHandle, what: &str, wanted: impl Fn(LeaderState) -> bool) {
    let mut state = handle.leader_state();
    tokio::time::timeout(WAIT, state.wait_for(|s| wanted(*s)))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("elector alive");
}

/// Waits for the next transition matching `wanted`, panicking after [`WAIT`].
pub async fn next_transition(
    transitions: &mut broadcast::Receiver<Transition>,
    what: &str,
    wanted: impl Fn(&Transition) -> bool,
) -> Transition {
    next_transition_within(transitions, what, WAIT, wanted).await
}

/// Waits for the next transition matching `wanted`, panicking after `timeout`.
pub async fn next_transition_within(
    transitions: &mut broadcast::Receiver<Transition>,
    what: &str,
    timeout: Duration,
    wanted: impl Fn(&Transition) -> bool,
) -> Transition {
    tokio::time::timeout(timeout, async {
        loop {
            let t = transitions.recv().await.expect("transition channel open");
            if wanted(&t) {
                return t;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

pub fn leases(client: &Client) -> Api<Lease> {
    Api::namespaced(client.clone(), NS)
}

pub fn candidates(client: &Client) -> Api<LeaseCandidate> {
    Api::namespaced(client.clone(), NS)
}

pub async fn get_spec(client: &Client, name: &str) -> Option<LeaseSpec> {
    leases(client)
        .get_opt(name)
        .await
        .expect("get lease")
        .map(|l| l.spec.unwrap_or_default())
}

/// The Lease's holderIdentity; `None` when it names nobody, does not exist, or cannot be read
/// (tests read it while they inject API faults).
pub async fn holder(client: &Client, namespace: &str, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

pub fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Simulated controller: read, change, replace with the read resourceVersion; retry on 409.
pub async fn modify(client: &Client, name: &str, change: impl Fn(&mut LeaseSpec)) -> Lease {
    let api = leases(client);
    loop {
        let existing = api.get_opt(name).await.expect("get lease");
        let result = match existing {
            Some(mut lease) => {
                change(lease.spec.get_or_insert_with(Default::default));
                api.replace(name, &PostParams::default(), &lease).await
            }
            None => {
                let mut spec = LeaseSpec::default();
                change(&mut spec);
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                api.create(&PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(lease) => return lease,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => panic!("writing lease {name}: {e}"),
        }
    }
}

/// Simulated controller: elect `holder` (as kube-apiserver's controller does: 5 s, now, strategy,
/// preferredHolder cleared).
pub async fn assign(client: &Client, name: &str, holder: &str) -> Lease {
    modify(client, name, |spec| {
        spec.holder_identity = Some(holder.into());
        spec.lease_duration_seconds = Some(5);
        spec.renew_time = Some(now_micro());
        spec.acquire_time = None;
        spec.strategy = Some(STRATEGY.into());
        spec.preferred_holder = None;
    })
    .await
}

/// Simulated controller: pre-empt the holder in favour of `preferred`.
pub async fn preempt(client: &Client, name: &str, preferred: &str) -> Lease {
    modify(client, name, |spec| {
        spec.strategy = Some(STRATEGY.into());
        spec.preferred_holder = Some(preferred.into());
    })
    .await
}

/// An elector running on its own task, with its handle and shutdown token.
pub struct Running {
    pub handle: ElectorHandle,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<conclave_candidate::Result<()>>,
}

impl Running {
    pub fn start<F, Fut>(elector: Elector, lead: F) -> Self
    where
        F: FnMut(Term) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = elector.handle();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(elector.run(lead, shutdown.clone()));
        Self {
            handle,
            shutdown,
            task,
        }
    }

    /// Graceful shutdown; waits for `run` to return.
    pub async fn stop(self) -> conclave_candidate::Result<()> {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("elector stops")
            .expect("no panic")
    }
}

/// A lead closure whose term runs one task until cancelled.
pub fn idle_leader()
-> impl FnMut(Term) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + 'static {
    |term: Term| {
        Box::pin(async move {
            let worker = term.clone();
            term.spawn(async move { worker.cancelled().await });
            term.cancelled().await;
        })
    }
}

/// The `conclave` binary for tests that run the real controller or example component as
/// processes: `$CONCLAVE_BIN` or `target/debug/conclave`. `None` (with a SKIP line) when it is
/// missing, unless `CONCLAVE_REQUIRE_BIN` is set, which makes that a failure.
pub fn conclave_binary() -> Option<PathBuf> {
    let path = std::env::var_os("CONCLAVE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/conclave")
        });
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CONCLAVE_REQUIRE_BIN").is_none(),
        "{} missing (cargo build -p conclave)",
        path.display()
    );
    eprintln!(
        "SKIP: {} missing; run cargo build -p conclave",
        path.display()
    );
    None
}

/// Numbers scratch directories within one test binary.
static SCRATCH_SEQ: AtomicU64 = AtomicU64::new(0);

/// A directory under the system temp dir for kubeconfigs and process logs. Removed on drop,
/// unless the test is panicking or `CONCLAVE_KEEP_SCRATCH` is set: then it is kept and its path
/// printed, for the logs.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `<temp>/conclave-candidate-<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        let seq = SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "conclave-candidate-{name}-{}-{seq}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("CONCLAVE_KEEP_SCRATCH").is_some() {
            eprintln!("test logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The API server behind a [`Server`].
pub enum Backend {
    /// conclave-emulator, in process: faults are injected through [`RunningEmulator::faults`].
    Emulator(RunningEmulator),
    /// A dedicated kube-apiserver + etcd from conclave-testkit: faults are stalls
    /// ([`ControlPlane::stall`]), which also affect the whole control plane, hence not shared.
    Real(Box<ControlPlane>),
}

/// Where a scenario runs: the emulator or a real kube-apiserver, a namespace of its own there,
/// a kubeconfig for processes, and a scratch directory for their logs. Scenarios written against
/// it run unchanged on both.
pub struct Server {
    backend: Backend,
    namespace: String,
    kubeconfig: PathBuf,
    scratch: ScratchDir,
}

impl Server {
    /// A fresh emulator on a free port; the scenario uses namespace [`NS`].
    pub async fn emulator(name: &str) -> Self {
        let emulator = emulator().await;
        let scratch = ScratchDir::new(name);
        let kubeconfig = scratch.path().join("kubeconfig");
        emulator
            .write_kubeconfig(&kubeconfig)
            .expect("write kubeconfig");
        Self {
            backend: Backend::Emulator(emulator),
            namespace: NS.into(),
            kubeconfig,
            scratch,
        }
    }

    /// A dedicated control plane (`ControlPlane::start`) and a fresh namespace `<name>-<n>` in
    /// it. `None`, after a SKIP line, when the binaries are missing and `CONCLAVE_REQUIRE_KUBE`
    /// is unset; the test should return.
    ///
    /// Dedicated rather than `ControlPlane::shared`, because scenarios on it hold the built-in
    /// election controller passive and stall the apiserver, both control-plane wide.
    pub async fn real(name: &str) -> Option<Self> {
        let plane = ControlPlane::start().await.expect("control plane starts")?;
        let namespace = plane.namespace(name).await.expect("create namespace");
        let kubeconfig = plane.kubeconfig_path().to_owned();
        Some(Self {
            backend: Backend::Real(Box::new(plane)),
            namespace,
            kubeconfig,
            scratch: ScratchDir::new(name),
        })
    }

    /// The server itself, for what differs between the two (fault injection).
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// "emulator" or "kube-apiserver", for messages.
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Emulator(_) => "emulator",
            Backend::Real(_) => "kube-apiserver",
        }
    }

    /// A fresh admin client with its own connection pool.
    pub async fn client(&self) -> Client {
        match &self.backend {
            Backend::Emulator(emulator) => client(emulator),
            Backend::Real(plane) => plane.client().await.expect("client builds"),
        }
    }

    /// The namespace of the scenario's Leases and LeaseCandidates.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// An admin kubeconfig for child processes (`conclave run`, `conclave candidate`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where child processes write their logs (kept if the test fails).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// How long to wait for a condition here: [`WAIT`] or [`REAL_WAIT`].
    pub fn patience(&self) -> Duration {
        match self.backend {
            Backend::Emulator(_) => WAIT,
            Backend::Real(_) => REAL_WAIT,
        }
    }

    /// [`lease_config`] in this server's namespace.
    pub fn lease_config(&self, lease: &str, identity: &str) -> LeaseConfig {
        lease_config_in(&self.namespace, lease, identity)
    }
}

/// `conclave run` (Conclave's controller, the binary) electing every Lease (`--mode all`) in the
/// server's namespace, with its own HA Lease there too; killed on drop. On the real server it
/// holds kube-apiserver's built-in election controller passive while it lives, so that only
/// Conclave elects.
pub struct ConclaveRun {
    child: Child,
    /// Released only after `Drop` below has killed `conclave run`.
    _hold: Option<BuiltinControllerHold>,
}

impl ConclaveRun {
    /// Takes the built-in controller hold (real server), then starts `conclave run`, logging
    /// (stdout and stderr) to `controller.log` in the server's scratch directory.
    pub async fn start(binary: &Path, server: &Server) -> Self {
        let hold = match server.backend() {
            Backend::Emulator(_) => None,
            Backend::Real(plane) => Some(
                plane
                    .hold_builtin_controller_lease()
                    .await
                    .expect("built-in election controller passive"),
            ),
        };
        let log = std::fs::File::create(server.scratch().join("controller.log"))
            .expect("create controller log");
        let child = Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(server.kubeconfig())
            .args(["--namespace", server.namespace()])
            .args(["--controller-namespace", server.namespace()])
            // `auto` would leave OldestEmulationVersion to the (held) built-in controller.
            .args(["--mode", "all", "--metrics-addr", "127.0.0.1:0"])
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("clone log file"))
            .stderr(log)
            .spawn()
            .expect("conclave run starts");
        Self { child, _hold: hold }
    }
}

impl Drop for ConclaveRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Log lines as tracing-subscriber's JSON formatter writes them, captured for the whole test
/// binary ([`captured_logs`]).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    /// Every line captured so far whose `level` is `level` (`"WARN"`, `"DEBUG"`, ...) and
    /// whose message starts with `prefix`, as JSON (fields under `"fields"`).
    pub fn lines(&self, level: &str, prefix: &str) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| {
                line["level"] == level
                    && line["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(prefix))
            })
            .collect()
    }
}

/// The log of this test binary, from the first call on, up to `debug`: a global subscriber,
/// so that the tasks of every runtime thread log to it (tests filter by their own Lease or
/// resource, since the other tests of the binary log there too).
pub fn captured_logs() -> &'static Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(captured.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        captured
    })
}
