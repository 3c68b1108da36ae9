//! Real kube-scheduler and kube-controller-manager replicas (client-go's coordinated elector,
//! v1.37.2) on a real kube-apiserver, elected by Conclave in `all` mode with the built-in
//! controller held passive: a rolling upgrade by emulated version, in which the oldest leads at
//! every step, then SIGKILL and SIGTERM of the leader, after which another live replica leads.
//! Both components run at once on one control plane (they lead different Leases). The
//! components' timers are shortened (5 s Lease) so that a failover takes seconds; the same steps
//! with the default timers are measured, beside the built-in controller, by the `conclave`
//! crate's `components_real` bench. Skipped (with a SKIP line) when the control-plane binaries
//! are not built.

mod controller_support;

use conclave_testkit::{ComponentKind, ControlPlane, KubeComponent};
use controller_support::{config, start};
use std::time::{Duration, Instant};

/// Generous bound for every wait (process start-up on a loaded 2-core machine, an ack window,
/// a Lease expiry); never a timing assertion.
const WAIT: Duration = Duration::from_secs(120);
/// The components' `--leader-elect-lease-duration` in this test (default 15 s).
const LEASE_DURATION: Duration = Duration::from_secs(5);
/// Their `--leader-elect-renew-deadline` (default 10 s).
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
/// Their `--leader-elect-retry-period` (default 2 s).
const RETRY_PERIOD: Duration = Duration::from_secs(1);
/// LeaseCandidates' creationTimestamps have 1 s resolution, and the creation order breaks ties
/// between equal versions: replicas register at least this far apart.
const REGISTRATION_GAP: Duration = Duration::from_millis(1100);

/// How a leader is stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Kill,
    Terminate,
}

/// The minor of an emulated version `1.<minor>`; replicas without one emulate their binary's
/// version, the newest.
fn minor(emulated: Option<&str>) -> u32 {
    emulated
        .and_then(|v| v.strip_prefix("1."))
        .and_then(|m| m.parse().ok())
        .unwrap_or(u32::MAX)
}

/// The replicas of one component, started one at a time; the stopped ones are kept (and killed
/// on drop) so their logs stay listed.
struct Replicas<'a> {
    cp: &'a ControlPlane,
    kind: ComponentKind,
    live: Vec<KubeComponent>,
    stopped: Vec<KubeComponent>,
    last_registered: Option<Instant>,
}

impl<'a> Replicas<'a> {
    fn new(cp: &'a ControlPlane, kind: ComponentKind) -> Self {
        Self {
            cp,
            kind,
            live: Vec::new(),
            stopped: Vec::new(),
            last_registered: None,
        }
    }

    fn name(&self) -> &'static str {
        self.kind.binary()
    }

    /// Starts a replica at `emulated` and waits for its LeaseCandidate. The first one is left
    /// alone until it leads: a coordinated client pre-empted before its first renewal never
    /// leads, and so never steps down.
    async fn add(&mut self, emulated: &str) {
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
            .start_component_with_timers(
                self.kind,
                Some(emulated),
                LEASE_DURATION,
                RENEW_DEADLINE,
                RETRY_PERIOD,
            )
            .expect("start the component");
        let identity = replica
            .wait_registered(self.cp, &before, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{} {emulated} registers: {e}", self.name()));
        self.last_registered = Some(Instant::now());
        if self.live.is_empty() {
            replica
                .wait_acquired_lease(started, WAIT)
                .await
                .unwrap_or_else(|e| panic!("the first {} leads: {e}", self.name()));
        }
        eprintln!("{}: {identity} at {emulated} registered", self.name());
        self.live.push(replica);
    }

    /// The lowest emulated minor among the running replicas.
    fn oldest(&self) -> u32 {
        self.live
            .iter()
            .map(|r| minor(r.emulated_version()))
            .min()
            .expect("a live replica")
    }

    /// The index in `live` of the Lease's holder, if it is a running replica.
    async fn holder_index(&self) -> Option<usize> {
        let holder = self
            .cp
            .component_lease_holder(self.kind)
            .await
            .expect("read the Lease")?;
        self.live
            .iter()
            .position(|r| r.identity() == Some(holder.as_str()))
    }

    /// Checks that a running replica with the oldest emulated version holds the Lease, stops it
    /// as `stop` says, waits until another running replica holds the Lease and has logged that
    /// it acquired it, and checks that this one is the oldest of those left.
    async fn stop_leader(&mut self, stop: Stop) {
        let name = self.name();
        let leader = self
            .holder_index()
            .await
            .unwrap_or_else(|| panic!("{name}: the Lease's holder is not a running replica"));
        assert_eq!(
            minor(self.live[leader].emulated_version()),
            self.oldest(),
            "{name}: the holder {:?} ({:?}) is not the oldest running replica",
            self.live[leader].identity(),
            self.live[leader].emulated_version(),
        );
        let mut old = self.live.remove(leader);
        let old_identity = old.identity().unwrap_or_default().to_owned();
        let since = jiff::Timestamp::now();
        let signalled = Instant::now();
        match stop {
            Stop::Kill => old.kill(),
            Stop::Terminate => old.terminate(),
        }
        let mut released = false;
        let next = loop {
            if let Some(next) = self.holder_index().await {
                break next;
            }
            released |= self
                .cp
                .component_lease_holder(self.kind)
                .await
                .expect("read the Lease")
                .is_none();
            assert!(
                signalled.elapsed() < WAIT,
                "{name}: no running replica holds the Lease {WAIT:?} after {stop:?} of the leader"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let written = signalled.elapsed();
        let acquired = self.live[next]
            .wait_acquired_lease(since, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{name}: the new holder leads: {e}"));
        let next = self
            .holder_index()
            .await
            .unwrap_or_else(|| panic!("{name}: the Lease's holder is not a running replica"));
        assert_eq!(
            minor(self.live[next].emulated_version()),
            self.oldest(),
            "{name}: after {stop:?} of the leader {:?} ({:?}) leads, not the oldest running replica",
            self.live[next].identity(),
            self.live[next].emulated_version(),
        );
        let status = old
            .wait_exit(WAIT)
            .await
            .unwrap_or_else(|e| panic!("{name}: the stopped leader exits: {e}"));
        eprintln!(
            "{name}: {stop:?} of {old_identity} ({status}{}): new holder {} ({:?}) written after \
             {written:?}, logged acquiring {:#} after the signal",
            if released { ", released the Lease" } else { "" },
            self.live[next].identity().unwrap_or_default(),
            self.live[next].emulated_version(),
            acquired.duration_since(since),
        );
        self.stopped.push(old);
    }
}

/// Three replicas at 1.36 replaced one by one by replicas at 1.37 (each step starts a new one,
/// then stops the leader with SIGTERM), then SIGKILL of the leader, then SIGTERM of the leader.
async fn upgrade_then_fail(cp: &ControlPlane, kind: ComponentKind) {
    let mut replicas = Replicas::new(cp, kind);
    for _ in 0..3 {
        replicas.add("1.36").await;
    }
    for _ in 0..3 {
        replicas.add("1.37").await;
        replicas.stop_leader(Stop::Terminate).await;
    }
    replicas.stop_leader(Stop::Kill).await;
    replicas.stop_leader(Stop::Terminate).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_components_upgrade_and_fail_over_under_conclave() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let began = Instant::now();
    let _hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = cp.client().await.expect("client");
    let mut cfg = config("kube-system", "conclave-components");
    // Upstream's ack window: a component answers a ping from its informer, on a loaded machine.
    cfg.ack_window = Duration::from_secs(5);
    let _controller = start(client, cfg);
    tokio::join!(
        upgrade_then_fail(&cp, ComponentKind::Scheduler),
        upgrade_then_fail(&cp, ComponentKind::ControllerManager),
    );
    cp.check_running()
        .expect("etcd and kube-apiserver still run");
    eprintln!("both components' scenarios took {:?}", began.elapsed());
}
