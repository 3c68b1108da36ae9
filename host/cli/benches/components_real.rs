//! Real kube-scheduler and kube-controller-manager replicas (client-go's coordinated elector,
//! v1.37.2, default timers: 15 s Lease, 10 s renew deadline, 2 s retry period) on one real
//! kube-apiserver, elected first by kube-apiserver's built-in controller, then by Conclave
//! in-process in `--mode all` (default configuration otherwise) with the built-in controller held
//! passive. Both components run at once (they lead different Leases). Each round, per component:
//! three replicas at emulated 1.36 (the first alone until it leads), then a rolling upgrade (three
//! times: start a replica at 1.37, SIGTERM the leader), then SIGKILL of the leader, then SIGTERM of
//! the leader. For each stop it measures the time from the signal to a running replica being
//! written as the Lease's holder, and to that process logging client-go's `"Successfully
//! acquired lease"` (the klog time of the line), whether the Lease was released in between
//! (holder `""`), and whether the holder before and after was the oldest running replica. At the
//! end of a round every process is killed and the Lease and LeaseCandidates are deleted. Prints
//! markdown tables; skipped when the control-plane binaries are not built.
//!
//! Run: `cargo bench --profile dev -p conclave --bench components_real`
//! (`CONCLAVE_BENCH_ROUNDS`, default 2; a round takes about two minutes per controller).

use conclave_controller::{self as controller, ControllerConfig};
use conclave_core::plan::Mode;
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::{ComponentKind, ControlPlane, KubeComponent};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Bound on every wait (process start-up on a loaded machine, Lease expiry, ack windows).
const WAIT: Duration = Duration::from_secs(180);
/// LeaseCandidates' creationTimestamps have 1 s resolution and the creation order breaks ties
/// between equal versions: replicas register at least this far apart.
const REGISTRATION_GAP: Duration = Duration::from_millis(1100);
/// How often the Lease is read while waiting for the new holder.
const POLL: Duration = Duration::from_millis(20);

/// How a leader is stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Kill,
    Terminate,
}

/// One leader stopped and the next one leading.
struct Handover {
    /// Signal -> a running replica written as holder (first seen by a 20 ms poll).
    written: Duration,
    /// Signal -> the new holder's "Successfully acquired lease" log line.
    acquired: Duration,
    /// Whether the Lease named nobody in between (the stopped leader released it).
    released: bool,
    /// Whether, after the release, a controller wrote the stopped leader itself back as holder
    /// (its LeaseCandidate had answered a ping within the ack window, so it looked alive).
    self_reelected: bool,
    /// Whether the Lease named a stopped process other than this leader in between (a
    /// controller elected a dead replica's lingering LeaseCandidate).
    dead_elected: bool,
    /// Whether the stopped leader and the new holder were each the oldest running replica.
    oldest: bool,
}

/// What one controller's rounds measured for one component.
#[derive(Default)]
struct Measured {
    upgrade: Vec<Handover>,
    kill: Vec<Handover>,
    terminate: Vec<Handover>,
}

/// The minor of an emulated version `1.<minor>`.
fn minor(emulated: Option<&str>) -> u32 {
    emulated
        .and_then(|v| v.strip_prefix("1."))
        .and_then(|m| m.parse().ok())
        .unwrap_or(u32::MAX)
}

/// The replicas of one component, started one at a time, killed on drop.
struct Replicas<'a> {
    cp: &'a ControlPlane,
    leases: Api<Lease>,
    kind: ComponentKind,
    live: Vec<KubeComponent>,
    stopped: Vec<KubeComponent>,
    last_registered: Option<Instant>,
}

impl<'a> Replicas<'a> {
    fn new(cp: &'a ControlPlane, client: &kube::Client, kind: ComponentKind) -> Self {
        Self {
            cp,
            leases: Api::namespaced(client.clone(), "kube-system"),
            kind,
            live: Vec::new(),
            stopped: Vec::new(),
            last_registered: None,
        }
    }

    /// Starts a replica at `emulated` with the default timers and waits for its LeaseCandidate;
    /// the first one alone until it leads (a coordinated client pre-empted before its first
    /// renewal never leads).
    async fn add(&mut self, emulated: &str) {
        let name = self.kind.binary();
        if let Some(last) = self.last_registered {
            tokio::time::sleep(REGISTRATION_GAP.saturating_sub(last.elapsed())).await;
        }
        let started = jiff::Timestamp::now();
        let before = self
            .cp
            .component_candidates(self.kind)
            .await
            .expect("list LeaseCandidates");
        let mut replica = self
            .cp
            .start_component(self.kind, Some(emulated))
            .expect("start the component");
        replica
            .wait_registered(self.cp, &before, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{name} {emulated} registers: {e}"));
        self.last_registered = Some(Instant::now());
        if self.live.is_empty() {
            replica
                .wait_acquired_lease(started, WAIT)
                .await
                .unwrap_or_else(|e| panic!("the first {name} leads: {e}"));
        }
        self.live.push(replica);
    }

    fn oldest(&self) -> u32 {
        self.live
            .iter()
            .map(|r| minor(r.emulated_version()))
            .min()
            .unwrap_or(u32::MAX)
    }

    async fn holder(&self) -> Option<String> {
        self.lease().await.0
    }

    /// The Lease's holder (`None` for none or `""`) and `leaseDurationSeconds` (the component's
    /// own 15 s while it renews, a controller's 5 s right after an election, 1 s after a
    /// release).
    async fn lease(&self) -> (Option<String>, Option<i32>) {
        let spec = self
            .leases
            .get_opt(self.kind.binary())
            .await
            .expect("read the Lease")
            .and_then(|l| l.spec);
        let duration = spec.as_ref().and_then(|s| s.lease_duration_seconds);
        let holder = spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty());
        (holder, duration)
    }

    fn index_of(&self, holder: Option<&str>) -> Option<usize> {
        let holder = holder?;
        self.live.iter().position(|r| r.identity() == Some(holder))
    }

    /// Stops the leader as `stop` says and measures the handover to the next running replica.
    async fn stop_leader(&mut self, stop: Stop) -> Handover {
        let name = self.kind.binary();
        let leader = self
            .index_of(self.holder().await.as_deref())
            .unwrap_or_else(|| panic!("{name}: the Lease's holder is not a running replica"));
        let leader_was_oldest = minor(self.live[leader].emulated_version()) == self.oldest();
        let mut old = self.live.remove(leader);
        let since = jiff::Timestamp::now();
        let signalled = Instant::now();
        match stop {
            Stop::Kill => old.kill(),
            Stop::Terminate => old.terminate(),
        }
        let old_identity = old.identity().map(str::to_owned);
        let mut released = false;
        let mut dead_elected = false;
        let mut self_reelected = false;
        let next = loop {
            // Holder and duration from one read, so a handover between two reads cannot pass
            // for a write-back.
            let (holder, duration) = self.lease().await;
            if let Some(next) = self.index_of(holder.as_deref()) {
                break next;
            }
            // Written back by a controller: right after the release (seen), or so soon after it
            // that only the duration a controller writes (not the component's 15 s) tells.
            self_reelected |=
                holder.is_some() && holder == old_identity && (released || duration != Some(15));
            released |= holder.is_none();
            dead_elected |= holder.is_some() && holder != old_identity;
            assert!(
                signalled.elapsed() < WAIT,
                "{name}: no running replica holds the Lease {WAIT:?} after {stop:?}"
            );
            tokio::time::sleep(POLL).await;
        };
        let written = signalled.elapsed();
        let acquired = self.live[next]
            .wait_acquired_lease(since, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{name}: the new holder leads: {e}"));
        let next_is_oldest = self
            .index_of(self.holder().await.as_deref())
            .is_some_and(|i| minor(self.live[i].emulated_version()) == self.oldest());
        old.wait_exit(WAIT)
            .await
            .unwrap_or_else(|e| panic!("{name}: the stopped leader exits: {e}"));
        self.stopped.push(old);
        Handover {
            written,
            acquired: acquired
                .duration_since(since)
                .try_into()
                .unwrap_or(Duration::ZERO),
            released,
            self_reelected,
            dead_elected,
            oldest: leader_was_oldest && next_is_oldest,
        }
    }
}

/// `rounds` rounds of the rolling upgrade, SIGKILL and SIGTERM for `kind`.
async fn measure(cp: &ControlPlane, kind: ComponentKind, rounds: usize) -> Measured {
    let client = cp.client().await.expect("client");
    let mut measured = Measured::default();
    for _ in 0..rounds {
        let mut replicas = Replicas::new(cp, &client, kind);
        for _ in 0..3 {
            replicas.add("1.36").await;
        }
        for _ in 0..3 {
            replicas.add("1.37").await;
            measured
                .upgrade
                .push(replicas.stop_leader(Stop::Terminate).await);
        }
        measured.kill.push(replicas.stop_leader(Stop::Kill).await);
        measured
            .terminate
            .push(replicas.stop_leader(Stop::Terminate).await);
        drop(replicas);
        cp.clear_component_election(kind)
            .await
            .expect("clear the component's election");
    }
    measured
}

/// Both components at once.
async fn measure_both(cp: &ControlPlane, rounds: usize) -> [(ComponentKind, Measured); 2] {
    let (scheduler, controller_manager) = tokio::join!(
        measure(cp, ComponentKind::Scheduler, rounds),
        measure(cp, ComponentKind::ControllerManager, rounds),
    );
    [
        (ComponentKind::Scheduler, scheduler),
        (ComponentKind::ControllerManager, controller_manager),
    ]
}

/// Median (the mean of the middle two for an even count) and max, in seconds.
fn summary(samples: impl Iterator<Item = Duration>) -> String {
    let mut s: Vec<f64> = samples.map(|d| d.as_secs_f64()).collect();
    if s.is_empty() {
        return "-".into();
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n.is_multiple_of(2) {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    } else {
        s[n / 2]
    };
    format!("{median:.2} s (max {:.2})", s[n - 1])
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("CONCLAVE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    // The components' logs stay for reading (run directories are pruned after a day).
    cp.keep_run_dir();
    eprintln!("components_real: logs in {}", cp.dir().display());
    let began = Instant::now();
    let mut loads = vec![load()];

    // The built-in controller elects.
    let deadline = Instant::now() + WAIT;
    while !cp
        .builtin_controller_leading()
        .await
        .expect("apiserver metrics")
    {
        assert!(
            Instant::now() < deadline,
            "the built-in controller never led"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let builtin = measure_both(&cp, rounds).await;
    loads.push(load());

    // Conclave elects, the built-in controller held passive.
    let hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = cp.client().await.expect("client");
    let shutdown = CancellationToken::new();
    let config = ControllerConfig {
        namespaces: vec!["kube-system".into()],
        mode: Mode::All,
        identity: "bench".into(),
        ..ControllerConfig::default()
    };
    let task = tokio::spawn(controller::run(
        client,
        Arc::new(Engine::new(EngineConfig::default()).expect("engine")),
        config,
        shutdown.clone(),
    ));
    let conclave = measure_both(&cp, rounds).await;
    loads.push(load());
    shutdown.cancel();
    let _ = task.await;
    drop(hold);

    println!(
        "Real kube-apiserver, kube-scheduler and kube-controller-manager {} (default timers: 15 s \
         Lease, 10 s renew deadline, 2 s retry), {rounds} rounds, median (max); {:.0} s in all, \
         load average (1, 5, 15 min) at start / after the built-in's rounds / at the end: {}",
        conclave_testkit::KUBERNETES_VERSION,
        began.elapsed().as_secs_f64(),
        loads.join(" / ")
    );
    println!();
    println!(
        "| controller | component | rolling upgrade: SIGTERM of the leader -> new holder written | SIGKILL -> new holder written | SIGKILL -> its \"successfully acquired lease\" | SIGTERM -> new holder written | SIGTERM -> its \"successfully acquired lease\" | oldest led at every step | Lease released on SIGTERM | the stopped leader re-elected after its release | a dead replica elected on the way |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (controller, runs) in [
        ("kube-apiserver built-in", &builtin),
        ("Conclave (`--mode all`)", &conclave),
    ] {
        for (kind, m) in runs {
            let all: Vec<&Handover> = m
                .upgrade
                .iter()
                .chain(&m.kill)
                .chain(&m.terminate)
                .collect();
            let terminated: Vec<&Handover> = m.upgrade.iter().chain(&m.terminate).collect();
            println!(
                "| {controller} | {} | {} | {} | {} | {} | {} | {} of {} | {} of {} | {} of {} | {} of {} |",
                kind.binary(),
                summary(m.upgrade.iter().map(|h| h.written)),
                summary(m.kill.iter().map(|h| h.written)),
                summary(m.kill.iter().map(|h| h.acquired)),
                summary(m.terminate.iter().map(|h| h.written)),
                summary(m.terminate.iter().map(|h| h.acquired)),
                all.iter().filter(|h| h.oldest).count(),
                all.len(),
                terminated.iter().filter(|h| h.released).count(),
                terminated.len(),
                terminated.iter().filter(|h| h.self_reelected).count(),
                terminated.len(),
                all.iter().filter(|h| h.dead_elected).count(),
                all.len(),
            );
        }
    }
    println!();
    println!("Every handover (signal -> holder written / -> acquired log line):");
    for (controller, runs) in [
        ("kube-apiserver built-in", &builtin),
        ("Conclave (`--mode all`)", &conclave),
    ] {
        for (kind, m) in runs {
            let show = |hs: &[Handover]| -> String {
                hs.iter()
                    .map(|h| {
                        format!(
                            "{:.2}/{:.2}{}{}{}",
                            h.written.as_secs_f64(),
                            h.acquired.as_secs_f64(),
                            if h.released { " released" } else { "" },
                            if h.self_reelected {
                                " self-reelected"
                            } else {
                                ""
                            },
                            if h.dead_elected { " via-dead" } else { "" },
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "- {controller}, {}: upgrade {}; SIGKILL {}; SIGTERM {}",
                kind.binary(),
                show(&m.upgrade),
                show(&m.kill),
                show(&m.terminate)
            );
        }
    }
}
