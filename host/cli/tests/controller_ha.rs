//! The controller's own high availability on the embedded API server: a warm follower takes over
//! within one lease duration after the active replica crashes (a `conclave run` process killed
//! with SIGKILL) and completes the election it left pending; a graceful stop releases the
//! controller's Lease only after the election in flight has written, and a follower takes the
//! released Lease at once.

#[path = "../../controller/tests/controller_support/mod.rs"]
mod controller_support;

use conclave_controller::{CONTROLLER_LEASE, Decide, DecideError};
use conclave_core::request::ElectionRequest;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_emulator::RunningEmulator;
use conclave_engine::Engine;
use conclave_testkit::CandidateResponder;
use controller_support::{
    HolderAudit, LeaseWrite, LeaseWrites, NS, PingAnswerer, WAIT, candidate, config, emulator,
    engine, free_addr, http_get, scrape, stale_candidate_pinged, start, start_deciding, wait_lease,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::{Api, Client};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Where the replicas keep their own Lease (as `config` sets it).
const OWN_NS: &str = "kube-system";

/// A candidate for `lease` in the default namespace at version 1.31.0.
async fn candidate_131(client: &Client, name: &str, lease: &str) -> CandidateResponder {
    candidate(client, name, lease, "1.31.0", "1.31.0", OEV).await
}

/// `conclave run` as a process against the emulator, with the own-Lease timers of
/// [`config`]; killed (SIGKILL) on drop. Its log is kept in a temporary directory.
struct ControllerProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl ControllerProcess {
    fn start(emulator: &RunningEmulator, identity: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        emulator
            .write_kubeconfig(&kubeconfig)
            .expect("write kubeconfig");
        let log = std::fs::File::create(dir.path().join("controller.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_conclave"))
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--namespace", NS, "--controller-namespace", OWN_NS])
            .args(["--mode", "all", "--metrics-addr", "127.0.0.1:0"])
            .args(["--identity", identity, "--ack-window", "2s"])
            .args([
                "--leader-lease-duration",
                "4s",
                "--leader-renew-deadline",
                "3s",
            ])
            .args(["--leader-retry-period", "500ms"])
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("conclave run starts");
        Self { child, dir }
    }

    /// Kills the process at once (SIGKILL), as a crash would: no release, no drain.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL conclave run");
        self.child.wait().expect("reap conclave run");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the replica serving `/metrics` at `addr` has synced its caches and follows.
async fn wait_warm_follower(addr: std::net::SocketAddr) {
    let deadline = Instant::now() + WAIT;
    loop {
        let metrics = scrape(addr).await;
        let (status, readiness) = http_get(addr, "/readyz").await;
        // A standby is ready: its caches are synced and it watches the controller's Lease.
        if status.contains("200")
            && readiness.trim() == "ok: standby"
            && metrics.contains("conclave_active 0")
        {
            return;
        }
        assert!(Instant::now() < deadline, "the follower never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_takes_over_after_the_active_replica_crashes() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let own: Api<Lease> = Api::namespaced(client.clone(), OWN_NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let mut active = ControllerProcess::start(&emu, "replica-1");
    wait_lease(&own, CONTROLLER_LEASE, "replica-1 active", |r| {
        r.holder() == Some("replica-1")
    })
    .await;
    let metrics = free_addr();
    let mut cfg = config(NS, "replica-2");
    cfg.metrics_addr = Some(metrics);
    let own_lease_duration = cfg.own_lease_duration;
    let follower = start(client.clone(), cfg);
    wait_warm_follower(metrics).await;
    let _a = candidate_131(&client, "a", "l").await;
    wait_lease(&leases, "l", "a elected by replica-1", |r| {
        r.holder() == Some("a")
    })
    .await;

    // An election in progress: b has not renewed for a minute, so the active replica pings it
    // and waits for its ack.
    stale_candidate_pinged(&candidates, "b", "m", || active.log()).await;
    let audit = HolderAudit::start(leases.clone(), "m");

    // The active replica crashes before the ack window ends; b answers only now.
    active.kill();
    let crashed = Instant::now();
    let _answers = PingAnswerer::start(candidates.clone(), "b");
    wait_lease(&own, CONTROLLER_LEASE, "replica-2 active", |r| {
        r.holder() == Some("replica-2")
    })
    .await;
    let took_over = crashed.elapsed();
    eprintln!(
        "replica-2 took over {took_over:?} after the crash (own Lease duration {own_lease_duration:?})"
    );
    // The bound is one lease duration; the margin covers a busy shared machine.
    assert!(
        took_over <= own_lease_duration + Duration::from_secs(10),
        "the follower took {took_over:?} to take over"
    );
    wait_lease(&leases, "m", "b elected by replica-2", |r| {
        r.holder() == Some("b")
    })
    .await;
    audit.assert_never_two_holders();
    follower.stop().await;
}

/// The built-in plugins, but every decision first reports that it started and then takes
/// `hold`, so a test can act while an election is in flight.
struct Gate {
    inner: Engine,
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    hold: Duration,
}

impl Decide for Gate {
    fn has_strategy(&self, strategy: &str) -> bool {
        self.inner.has_strategy(strategy)
    }

    fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
    ) -> Result<Option<String>, DecideError> {
        let _ = self.entered.send(());
        std::thread::sleep(self.hold);
        Decide::elect(&self.inner, strategy, request)
    }
}

/// Waits until `writes` has recorded a write to `lease` that satisfies `check`.
async fn wait_write(
    writes: &LeaseWrites,
    lease: &str,
    what: &str,
    check: impl Fn(&LeaseWrite) -> bool,
) -> LeaseWrite {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(write) = writes.of(lease).into_iter().find(|w| check(w)) {
            return write;
        }
        assert!(Instant::now() < deadline, "no write: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rv(write: &LeaseWrite) -> u64 {
    write
        .record
        .resource_version
        .parse()
        .expect("the emulator's resourceVersions are numbers")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_releases_the_lease_after_the_write_in_flight() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let own: Api<Lease> = Api::namespaced(client.clone(), OWN_NS);
    let lease_writes = LeaseWrites::start(leases.clone()).await;
    let own_writes = LeaseWrites::start(own.clone()).await;
    let mut cfg = config(NS, "replica-1");
    // A long own Lease: a follower that takes over well before it would expire took over
    // because of the release.
    cfg.own_lease_duration = Duration::from_secs(30);
    cfg.own_renew_deadline = Duration::from_secs(20);
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let gate = Gate {
        inner: engine(),
        entered: entered_tx,
        hold: Duration::from_secs(3),
    };
    let first = start_deciding(client.clone(), Arc::new(gate), cfg.clone());
    wait_lease(&own, CONTROLLER_LEASE, "replica-1 active", |r| {
        r.holder() == Some("replica-1")
    })
    .await;
    let follower_metrics = free_addr();
    let mut follower_cfg = cfg.clone();
    follower_cfg.identity = "replica-2".into();
    follower_cfg.metrics_addr = Some(follower_metrics);
    let follower = start(client.clone(), follower_cfg);
    wait_warm_follower(follower_metrics).await;

    // Every request now takes 300 ms. The election decides for 3 s, then writes: a shutdown
    // that did not wait for it would have released the Lease (a read and a write, 600 ms) long
    // before the election's write lands.
    emu.faults().set_latency(Duration::from_millis(300));
    let _a = candidate_131(&client, "a", "l").await;
    tokio::time::timeout(WAIT, entered.recv())
        .await
        .expect("an election started")
        .expect("the gate is alive");
    // Stop while the election is in flight.
    first.stop().await;
    let stopped = Instant::now();
    emu.faults().set_latency(Duration::ZERO);

    let elected = wait_write(&lease_writes, "l", "the in-flight election landed", |w| {
        w.record.holder() == Some("a")
    })
    .await;
    let released = wait_write(&own_writes, CONTROLLER_LEASE, "replica-1 released", |w| {
        w.record.holder().is_none()
    })
    .await;
    assert!(
        rv(&elected) < rv(&released),
        "the release (rv {}) came after the in-flight write (rv {})",
        rv(&released),
        rv(&elected)
    );
    wait_lease(&own, CONTROLLER_LEASE, "replica-2 active", |r| {
        r.holder() == Some("replica-2")
    })
    .await;
    let took_over = stopped.elapsed();
    eprintln!("replica-2 took over {took_over:?} after the graceful stop returned");
    assert!(
        took_over < cfg.own_lease_duration,
        "after a release the follower takes over at once, not when the Lease would expire \
         ({took_over:?})"
    );
    follower.stop().await;
}
