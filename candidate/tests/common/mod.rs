//! Shared helpers: an emulator, fast lease timers, and writes that simulate an election
//! controller (holder and preferredHolder, each with a resourceVersion precondition).
#![allow(dead_code)]

use conclave_candidate::{
    CandidateConfig, Elector, ElectorHandle, LeaderState, LeaseConfig, Term, Transition,
};
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Generous bound for waiting on conditions (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(60);

pub const NS: &str = "default";
pub const STRATEGY: &str = "OldestEmulationVersion";

/// Starts an emulator on a free port.
pub async fn emulator() -> RunningEmulator {
    emulator_with(EmulatorConfig::default()).await
}

pub async fn emulator_with(config: EmulatorConfig) -> RunningEmulator {
    Emulator::start(config).await.expect("emulator starts")
}

/// A fresh client (own connection pool) for a plain-HTTP server URL.
pub fn client(emulator: &RunningEmulator) -> Client {
    let config = kube::Config::new(emulator.url().parse().expect("valid URL"));
    Client::try_from(config).expect("client builds")
}

/// Timers short enough for tests and long enough for a busy 2-core machine.
pub fn lease_config(name: &str, identity: &str) -> LeaseConfig {
    let mut config = LeaseConfig::new(NS, name, identity);
    config.lease_duration = Duration::from_secs(6);
    config.renew_deadline = Duration::from_secs(4);
    config.retry_period = Duration::from_millis(500);
    config
}

pub fn candidate_config(emulation: &str) -> CandidateConfig {
    CandidateConfig::new("1.33.0", emulation, STRATEGY)
}

/// Polls `check` every 50 ms until it returns `Some`, panicking after [`WAIT`].
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
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

/// Waits for the next transition matching `wanted`.
pub async fn next_transition(
    transitions: &mut broadcast::Receiver<Transition>,
    what: &str,
    wanted: impl Fn(&Transition) -> bool,
) -> Transition {
    tokio::time::timeout(WAIT, async {
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
