//! The controller on a real kube-apiserver (conclave-testkit): upstream's scenarios with the
//! built-in controller held passive and Conclave in `all` mode, real kube-scheduler candidates,
//! and living beside the active built-in controller in `auto` mode. Skipped (with a SKIP line)
//! when the control-plane binaries are not built.

mod controller_support;
use conclave_testkit::wasm_build;

use conclave_controller::ControllerConfig;
use conclave_core::k8s::lease_record;
use conclave_core::plan::Mode;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::{
    CandidateResponder, ControlPlane, lease_candidate, settled, wait_builtin_leading,
};
use controller_support::{
    CoordinatedHolder, LeaseWrite, LeaseWrites, candidate_in, config, crash_the_best_leader,
    create_lease, failover_config, start, wait_event, wait_lease,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::{Api, Client};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn ago(seconds: i64) -> MicroTime {
    MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds))
}

/// A directory holding only the `conclave.dev/priority` plugin, built from source.
fn priority_plugin_dir() -> tempfile::TempDir {
    let built = wasm_build::build_plugins(&["priority"]).join("priority.wasm");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(&built, dir.path().join("priority.wasm")).expect("copy plugin");
    dir
}

fn start_with_engine(
    client: Client,
    engine: Engine,
    config: ControllerConfig,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        conclave_controller::run(client, Arc::new(engine), config, token)
            .await
            .expect("controller runs");
    });
    (shutdown, task)
}

fn builtin_engine() -> Engine {
    Engine::new(EngineConfig::default()).expect("engine")
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_scenarios_with_the_builtin_controller_passive() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let _hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("cle").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), &ns);

    // A stale candidate for GC (renewed 2 h ago, pinged 1 h ago), as upstream's integration test.
    let mut stale = lease_candidate(&ns, "stale", "gc", "1.37.0", Some("1.37.0"), OEV);
    stale.spec.as_mut().unwrap().renew_time = Some(ago(7200));
    stale.spec.as_mut().unwrap().ping_time = Some(ago(3600));
    candidates
        .create(&PostParams::default(), &stale)
        .await
        .unwrap();

    let plugins = priority_plugin_dir();
    let engine = Engine::new(EngineConfig {
        plugins_dir: Some(plugins.path().to_path_buf()),
        ..EngineConfig::default()
    })
    .expect("engine");
    let mut cfg = config(&ns, "conclave-real");
    cfg.controller_namespace = ns.clone();
    let (shutdown, task) = start_with_engine(client.clone(), engine, cfg.clone());

    // A single candidate.
    let _single = candidate_in(&client, &ns, "only", "single", "1.37.0", "1.37.0", OEV).await;
    let record = wait_lease(&leases, "single", "the single candidate", |r| {
        r.holder() == Some("only")
    })
    .await;
    assert_eq!(record.strategy(), Some(OEV));

    // Several candidates: the oldest emulation version wins (upstream's baz example).
    let mut several = Vec::new();
    for (name, binary, emulation) in [
        ("baz1", "1.20.0", "1.20.0"),
        ("baz2", "1.20.0", "1.19.0"),
        ("baz3", "1.19.0", "1.19.0"),
        ("baz4", "1.20.0", "1.19.0"),
    ] {
        several.push(candidate_in(&client, &ns, name, "several", binary, emulation, OEV).await);
    }
    wait_lease(&leases, "several", "baz3", |r| r.holder() == Some("baz3")).await;

    // A better candidate arrives and pre-empts the holder through preferredHolder.
    let _newer = candidate_in(&client, &ns, "newer", "preempt", "1.37.0", "1.37.0", OEV).await;
    let _newer_holder = CoordinatedHolder::start(leases.clone(), "preempt", "newer");
    wait_lease(&leases, "preempt", "newer to hold", |r| {
        r.holder() == Some("newer")
    })
    .await;
    let _older = candidate_in(&client, &ns, "older", "preempt", "1.37.0", "1.36.0", OEV).await;
    let _older_holder = CoordinatedHolder::start(leases.clone(), "preempt", "older");
    wait_event(&client, &ns, "preempt", "Preempted").await;
    wait_lease(&leases, "preempt", "older to take over", |r| {
        r.holder() == Some("older") && r.preferred().is_none()
    })
    .await;

    // A legacy holder keeps the Lease until it stops renewing.
    create_lease(
        &leases,
        "legacy",
        LeaseSpec {
            holder_identity: Some("legacy-client".into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(ago(0)),
            ..LeaseSpec::default()
        },
    )
    .await;
    let legacy = CoordinatedHolder::start(leases.clone(), "legacy", "legacy-client");
    let _cle = candidate_in(
        &client,
        &ns,
        "cle-client",
        "legacy",
        "1.37.0",
        "1.37.0",
        OEV,
    )
    .await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let record = lease_record(&leases.get("legacy").await.unwrap());
        assert_eq!(record.holder(), Some("legacy-client"));
        assert_eq!(record.preferred(), None);
    }
    drop(legacy);
    wait_lease(&leases, "legacy", "the CLE candidate after expiry", |r| {
        r.holder() == Some("cle-client")
    })
    .await;

    // A third-party strategy, decided by the conclave.dev/priority plugin.
    let mut low = lease_candidate(
        &ns,
        "old-version",
        "tp",
        "1.36.0",
        Some("1.36.0"),
        "conclave.dev/priority",
    );
    low.metadata.annotations = None;
    let mut high = lease_candidate(
        &ns,
        "prioritised",
        "tp",
        "1.37.0",
        Some("1.37.0"),
        "conclave.dev/priority",
    );
    high.metadata.annotations = Some(
        [(
            "coordination.conclave.dev/priority".to_owned(),
            "10".to_owned(),
        )]
        .into(),
    );
    let _low = CandidateResponder::register(client.clone(), low)
        .await
        .unwrap();
    let _high = CandidateResponder::register(client.clone(), high)
        .await
        .unwrap();
    let record = wait_lease(&leases, "tp", "the prioritised candidate", |r| {
        r.holder() == Some("prioritised")
    })
    .await;
    assert_eq!(record.strategy(), Some("conclave.dev/priority"));

    // Candidate GC, by a controller restarted with a short GC period (with the default 30 min
    // the stale candidate, renewed 2 h ago, is collected at the first sweep too, 15 min in).
    assert!(candidates.get_opt("stale").await.unwrap().is_some());
    shutdown.cancel();
    task.await.unwrap();
    let _fresh = candidate_in(&client, &ns, "fresh", "gc", "1.37.0", "1.37.0", OEV).await;
    cfg.candidate_gc_after = Duration::from_secs(20);
    let (shutdown, task) = start_with_engine(client.clone(), builtin_engine(), cfg);
    let deadline = tokio::time::Instant::now() + controller_support::WAIT;
    while candidates.get_opt("stale").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stale candidate not collected"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        candidates.get_opt("fresh").await.unwrap().is_some(),
        "a candidate renewed within the period is kept"
    );

    shutdown.cancel();
    task.await.unwrap();
    cp.check_running().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn real_schedulers_oldest_leads_and_a_preempted_scheduler_steps_down() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let _hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = cp.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let mut cfg = config("kube-system", "conclave-real");
    cfg.ack_window = Duration::from_secs(5);
    cfg.lease_duration_seconds = 15;
    let _controller = start(client.clone(), cfg);

    // The newest first: Conclave elects it, then pre-empts it for the older ones, the same
    // instance the built-in controller elects (conclave-testkit's components test).
    let mut newest = cp.start_scheduler(Some("1.37")).expect("scheduler 1.37");
    let first = wait_lease(&leases, "kube-scheduler", "a first holder", |r| {
        r.holder().is_some()
    })
    .await;
    let first_holder = first.holder().unwrap().to_owned();
    // A coordinated client that sees preferredHolder before its first renewal never leads, and
    // so never steps down: wait until the scheduler has renewed the Lease itself.
    wait_lease(
        &leases,
        "kube-scheduler",
        "the first holder to renew the Lease itself",
        |r| r.holder() == Some(first_holder.as_str()) && r.renew_time > first.renew_time,
    )
    .await;
    let _older = cp.start_scheduler(Some("1.35")).expect("scheduler 1.35");
    let _middle = cp.start_scheduler(Some("1.36")).expect("scheduler 1.36");
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    let oldest = controller_support::wait_candidate(&candidates, "kube-scheduler", "1.35.0").await;
    let record = wait_lease(
        &leases,
        "kube-scheduler",
        "the 1.35 scheduler to lead",
        |r| r.holder() == Some(oldest.as_str()),
    )
    .await;
    assert_ne!(record.holder(), Some(first_holder.as_str()));
    // The pre-empted 1.37 scheduler stepped down (kube-scheduler exits when it loses the lead).
    let deadline = tokio::time::Instant::now() + controller_support::WAIT;
    while newest.exit_status().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pre-empted scheduler kept running as leader"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cp.check_running().unwrap();
}

/// Events in `ns` about Lease `lease` that Conclave reported.
async fn conclave_events(client: &Client, ns: &str, lease: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&Default::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| {
            e.reporting_controller.as_deref() == Some("conclave")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(lease)
        })
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect()
}

/// A controller `identity` in `--mode auto` confined to namespace `ns` (which is also its own
/// namespace), taking over from the built-in controller when `take_over`, serving `/metrics` on
/// `metrics_addr`.
fn auto_mode_config(
    ns: &str,
    identity: &str,
    take_over: bool,
    metrics_addr: std::net::SocketAddr,
) -> ControllerConfig {
    let mut cfg = config(ns, identity);
    cfg.mode = Mode::Auto;
    cfg.take_over = take_over;
    cfg.controller_namespace = ns.to_owned();
    cfg.namespaces = vec![ns.to_owned()];
    cfg.metrics_addr = Some(metrics_addr);
    cfg
}

/// Waits up to `timeout` (the wait named `what`) until the controller serving `/metrics` on
/// `metrics_addr` elects the built-in controller's Leases (`conclave_builtin_taken_over` 1).
async fn wait_taken_over(
    metrics_addr: std::net::SocketAddr,
    what: &str,
    timeout: Duration,
) -> Result<(), conclave_testkit::Error> {
    conclave_testkit::wait_for(what, timeout, || async {
        let body = controller_support::scrape(metrics_addr).await;
        Ok(
            (controller_support::metric_sum(&body, "conclave_builtin_taken_over ") == 1.0)
                .then_some(()),
        )
    })
    .await
}

/// Conclave's Lease writes (create and update, any result) in a `/metrics` body.
fn conclave_lease_writes(metrics: &str) -> f64 {
    controller_support::metric_sum(
        metrics,
        "conclave_api_writes_total{operation=\"lease_create\"",
    ) + controller_support::metric_sum(
        metrics,
        "conclave_api_writes_total{operation=\"lease_update\"",
    )
}

/// Issue 48 on the real kube-apiserver (CoordinatedLeaderElection gate, its built-in election
/// controller leading): Conclave's take-over (`--mode auto`, `--take-over`, the defaults) holds
/// the built-in controller's Lease; the apiserver's controller stops leading (its own metric
/// says so) and stays a follower; Conclave elects the OldestEmulationVersion Lease once the
/// apiserver must have stopped, and pre-empts for a better candidate. When every Conclave
/// replica is killed, the apiserver's controller leads again once the Lease expires. Prints the
/// times it measured.
#[tokio::test(flavor = "multi_thread")]
async fn the_take_over_makes_the_builtin_controller_a_follower_and_hands_back_when_conclave_dies() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    wait_builtin_leading(&cp)
        .await
        .expect("the built-in election controller leads");
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("take-over").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let builtin: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let metrics_addr = controller_support::free_addr();
    let cfg = auto_mode_config(&ns, "replica-1", true, metrics_addr);
    let _a = candidate_in(&client, &ns, "a", "cp", "1.37.0", "1.36.0", OEV).await;
    let _holder_a = CoordinatedHolder::start(leases.clone(), "cp", "a");
    // The built-in controller elects it first.
    wait_lease(&leases, "cp", "a elected by the built-in controller", |r| {
        r.holder() == Some("a")
    })
    .await;

    let started = tokio::time::Instant::now();
    let conclave = start(client.clone(), cfg);
    let ours = format!("conclave/{ns}/replica-1");
    wait_lease(
        &builtin,
        "leader-election-controller",
        "Conclave holds it",
        |r| r.holder() == Some(ours.as_str()),
    )
    .await;
    let taken = started.elapsed();
    conclave_testkit::wait_for(
        "the built-in controller to stop leading",
        Duration::from_secs(90),
        || async { Ok((!cp.builtin_controller_leading().await?).then_some(())) },
    )
    .await
    .expect("the apiserver's controller stops");
    let builtin_stopped = started.elapsed();
    wait_taken_over(
        metrics_addr,
        "Conclave to elect the built-in's Leases",
        Duration::from_secs(120),
    )
    .await
    .expect("the take-over completes");
    let electing = started.elapsed();
    assert!(
        electing >= builtin_stopped,
        "Conclave elected ({electing:?}) before the built-in controller stopped leading \
         ({builtin_stopped:?})"
    );
    // Conclave elects: a better candidate pre-empts a, and the Lease says who elected it.
    let _b = candidate_in(&client, &ns, "b", "cp", "1.37.0", "1.35.0", OEV).await;
    let _holder_b = CoordinatedHolder::start(leases.clone(), "cp", "b");
    wait_lease(&leases, "cp", "b elected by Conclave", |r| {
        r.holder() == Some("b")
    })
    .await;
    let elected = leases.get("cp").await.unwrap();
    assert!(
        elected
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(conclave_core::lease::ELECTED_BY_ANNOTATION),
        "Conclave wrote the election"
    );
    assert!(
        !cp.builtin_controller_leading().await.unwrap(),
        "the built-in controller stays a follower"
    );

    // Every Conclave replica killed: the apiserver's controller leads again at expiry.
    let killed = tokio::time::Instant::now();
    conclave.crash();
    conclave_testkit::wait_for(
        "the built-in controller to lead again",
        Duration::from_secs(90),
        || async { Ok(cp.builtin_controller_leading().await?.then_some(())) },
    )
    .await
    .expect("the built-in controller resumes");
    let resumed = killed.elapsed();
    eprintln!(
        "take-over: Lease held {taken:?} after start, the built-in controller stopped leading at \
         {builtin_stopped:?}, Conclave elected its Leases at {electing:?}; after every replica \
         was killed the built-in controller led again {resumed:?} later"
    );
}

/// Issue 48: kube-apiserver restarted (as the upgrade of a control-plane node restarts it) while
/// Conclave, with the product's timers, holds the built-in controller's Lease. The restarted
/// kube-apiserver is a new instance in that Lease's election and must stay a follower: every
/// write of the Lease names a Conclave replica (a client-go elector cannot lead without writing
/// its own identity there) and its controller never reports leading, for longer than the Lease's
/// duration after it serves again; Conclave elects on it again: a better candidate pre-empts.
#[tokio::test(flavor = "multi_thread")]
async fn a_kube_apiserver_restart_during_the_take_over_leaves_conclave_the_one_electing() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    wait_builtin_leading(&cp)
        .await
        .expect("the built-in election controller leads");
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("take-over-restart").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let builtin: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let metrics_addr = controller_support::free_addr();
    let mut cfg = auto_mode_config(&ns, "replica-1", true, metrics_addr);
    let product = ControllerConfig::default();
    cfg.own_lease_duration = product.own_lease_duration;
    cfg.own_renew_deadline = product.own_renew_deadline;
    cfg.own_retry_period = product.own_retry_period;
    let hold = product.own_lease_duration * conclave_controller::takeover::HOLD_DURATIONS;
    let _a = candidate_in(&client, &ns, "a", "cp", "1.37.0", "1.36.0", OEV).await;
    let _holder_a = CoordinatedHolder::start(leases.clone(), "cp", "a");
    wait_lease(&leases, "cp", "a elected by the built-in controller", |r| {
        r.holder() == Some("a")
    })
    .await;
    let conclave = start(client.clone(), cfg);
    wait_taken_over(
        metrics_addr,
        "Conclave to elect the built-in's Leases",
        Duration::from_secs(180),
    )
    .await
    .expect("the take-over completes");

    // Every write of the built-in controller's Lease from here on.
    let builtin_writes = LeaseWrites::start(builtin.clone()).await;
    let down = cp
        .restart_apiserver()
        .await
        .expect("restarting kube-apiserver");
    let serving = tokio::time::Instant::now();
    // Conclave elects on the restarted kube-apiserver: b, better, pre-empts a.
    let _b = candidate_in(&client, &ns, "b", "cp", "1.37.0", "1.35.0", OEV).await;
    let _holder_b = CoordinatedHolder::start(leases.clone(), "cp", "b");
    wait_lease(&leases, "cp", "b elected after the restart", |r| {
        r.holder() == Some("b")
    })
    .await;
    let elected_after = serving.elapsed();
    wait_taken_over(
        metrics_addr,
        "Conclave to elect the built-in's Leases again",
        Duration::from_secs(180),
    )
    .await
    .expect("the take-over holds after the restart");
    assert!(
        leases
            .get("cp")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(conclave_core::lease::ELECTED_BY_ANNOTATION),
        "Conclave wrote the election (the built-in controller writes no such annotation)"
    );
    // The restarted apiserver's elector may take the Lease once it has seen it unrenewed for the
    // Lease's whole duration: look for longer than that, and two of its retry periods, after it
    // served again.
    let look_until = serving + hold + Duration::from_secs(10);
    while tokio::time::Instant::now() < look_until {
        assert!(
            !cp.builtin_controller_leading().await.unwrap(),
            "the restarted kube-apiserver's built-in controller leads beside Conclave"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let writes = builtin_writes.of(conclave_controller::BUILTIN_LEASE.1);
    let foreign: Vec<&LeaseWrite> = writes
        .iter()
        .filter(|w| {
            !w.record
                .holder()
                .is_some_and(conclave_controller::takeover::is_conclave)
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "the built-in controller's Lease was written for another holder: {foreign:#?}"
    );
    assert!(
        !writes.is_empty(),
        "Conclave renewed the built-in controller's Lease after the restart"
    );
    eprintln!(
        "take-over across a kube-apiserver restart: the apiserver served nothing for {down:?}; \
         b elected {elected_after:?} after it served again; {} writes of the built-in's Lease, \
         all Conclave's",
        writes.len()
    );
    conclave.stop().await;
    cp.check_running().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_mode_lives_beside_the_active_builtin_controller() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    wait_builtin_leading(&cp)
        .await
        .expect("the built-in election controller leads");
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("beside").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    // Every write to the namespace's Leases from before the first one.
    let writes = LeaseWrites::start(leases.clone()).await;
    let metrics_addr = controller_support::free_addr();
    // Beside the built-in controller, not taking it over (the take-over has its own test).
    let cfg = auto_mode_config(&ns, "conclave-auto", false, metrics_addr);
    let plugins = priority_plugin_dir();
    let engine = Engine::new(EngineConfig {
        plugins_dir: Some(plugins.path().to_path_buf()),
        ..EngineConfig::default()
    })
    .expect("engine");
    let (shutdown, task) = start_with_engine(client.clone(), engine, cfg);

    let mut keep = Vec::new();
    for (name, emulation) in [("a", "1.36.0"), ("b", "1.35.0")] {
        keep.push(candidate_in(&client, &ns, name, "builtin", "1.37.0", emulation, OEV).await);
    }
    let third_party = "conclave.dev/priority";
    keep.push(candidate_in(&client, &ns, "t", "tp", "1.37.0", "1.37.0", third_party).await);
    // The candidates renew their Leases as real clients do, and step down when pre-empted.
    let _holder_a = CoordinatedHolder::start(leases.clone(), "builtin", "a");
    let holder_b = CoordinatedHolder::start(leases.clone(), "builtin", "b");
    let holder_t = CoordinatedHolder::start(leases.clone(), "tp", "t");
    // The built-in controller elects its Lease; Conclave elects the third-party one.
    wait_lease(&leases, "builtin", "b to hold and renew", |r| {
        r.holder() == Some("b") && r.preferred().is_none() && r.lease_duration_seconds == Some(3)
    })
    .await;
    wait_lease(&leases, "tp", "t to hold and renew", |r| {
        r.holder() == Some("t") && r.lease_duration_seconds == Some(3)
    })
    .await;

    // 60 s of steady state: only the holders' renewals may write.
    let before = controller_support::scrape(metrics_addr).await;
    let window = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = controller_support::scrape(metrics_addr).await;
    let end = tokio::time::Instant::now();
    let by_b: HashSet<String> = holder_b.writes().into_iter().collect();
    let by_t: HashSet<String> = holder_t.writes().into_iter().collect();
    drop(holder_t);
    drop(holder_b);
    let in_window = |lease: &str| -> Vec<LeaseWrite> {
        writes
            .of(lease)
            .into_iter()
            .filter(|w| w.seen_at > window && w.seen_at <= end)
            .collect()
    };
    let builtin = in_window("builtin");
    let tp = in_window("tp");
    let conclave_in_window = conclave_lease_writes(&after) - conclave_lease_writes(&before);
    eprintln!(
        "writes in 60 s: builtin {} (renewals by b {}), tp {} (renewals by t {}); \
         Conclave's Lease writes in the window {conclave_in_window}",
        builtin.len(),
        builtin
            .iter()
            .filter(|w| by_b.contains(&w.record.resource_version))
            .count(),
        tp.len(),
        tp.iter()
            .filter(|w| by_t.contains(&w.record.resource_version))
            .count(),
    );

    // The built-in controller's Lease: in steady state only its holder's renewals write it...
    let foreign: Vec<&LeaseWrite> = builtin
        .iter()
        .filter(|w| !by_b.contains(&w.record.resource_version))
        .collect();
    assert!(
        foreign.is_empty(),
        "writes to `builtin` in steady state that are not b's renewals: {foreign:#?}"
    );
    assert!(
        builtin.len() >= 10,
        "b renews `builtin` every 300 ms, the watch saw {} writes in 60 s",
        builtin.len()
    );
    // ...and over the whole run Conclave never touched it: no write of its own (Conclave's
    // creates and take-overs carry the elected-by annotation) and no Event (pre-emptions and
    // conflicts come with one).
    let annotated: Vec<LeaseWrite> = writes
        .of("builtin")
        .into_iter()
        .filter(|w| w.elected_by_annotation)
        .collect();
    assert!(
        annotated.is_empty(),
        "Conclave wrote the built-in controller's Lease: {annotated:#?}"
    );
    let events = conclave_events(&client, &ns, "builtin").await;
    assert!(
        events.is_empty(),
        "Conclave acted on the built-in controller's Lease: {events:#?}"
    );
    assert_eq!(
        conclave_in_window, 0.0,
        "Conclave wrote Leases in steady state"
    );
    // It leaves the built-in controller's Lease out of the Leases it manages: only `tp` counts.
    assert_eq!(
        controller_support::metric_sum(&after, "conclave_managed_leases "),
        1.0,
        "Conclave manages only its own Lease"
    );

    // Conclave's third-party Lease: elected once by Conclave, then only t's renewals.
    assert!(
        writes
            .of("tp")
            .iter()
            .any(|w| w.elected_by_annotation && w.record.holder() == Some("t")),
        "Conclave elected t for `tp`"
    );
    let foreign: Vec<&LeaseWrite> = tp
        .iter()
        .filter(|w| !by_t.contains(&w.record.resource_version))
        .collect();
    assert!(
        foreign.is_empty(),
        "writes to `tp` in steady state that are not t's renewals: {foreign:#?}"
    );
    assert!(
        tp.len() >= 10,
        "t renews `tp` every 300 ms, the watch saw {} writes in 60 s",
        tp.len()
    );
    let flips: Vec<&LeaseWrite> = tp
        .iter()
        .filter(|w| w.record.holder() != Some("t") || w.record.preferred().is_some())
        .collect();
    assert!(
        flips.is_empty(),
        "holder or preferredHolder moved on `tp`: {flips:#?}"
    );
    shutdown.cancel();
    task.await.unwrap();
    cp.check_running().unwrap();
}

/// One differential case: LeaseCandidates `(name, binary, emulation)` for Lease `lease`,
/// registered in this order 1.1 s apart (so their creationTimestamps, which have 1 s resolution,
/// differ in the same order), each renewing the Lease while it holds it and stepping down when
/// pre-empted. Returns the settled holder and whether Conclave's annotation is on the Lease.
async fn elect_candidates(
    client: &Client,
    ns: &str,
    lease: &str,
    set: &[(&str, &str, &str)],
) -> (String, bool) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut keep = Vec::new();
    for (i, (name, binary, emulation)) in set.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let candidate = candidate_in(client, ns, name, lease, binary, emulation, OEV).await;
        let holder = CoordinatedHolder::start(leases.clone(), lease, name);
        keep.push((candidate, holder));
    }
    let record = settled(&leases, lease, tokio::time::Instant::now())
        .await
        .expect("the Lease settles");
    (
        record.holder().unwrap_or_default().to_owned(),
        record.elected_by_conclave,
    )
}

/// Emulation version 1.37 ties with nothing; 1.36 twice: binary version decides.
const BINARY_DECIDES: &[(&str, &str, &str)] = &[
    ("c1", "1.37.0", "1.36.0"),
    ("c2", "1.36.0", "1.36.0"),
    ("c3", "1.37.0", "1.37.0"),
];

/// Both versions tie: the older creationTimestamp decides (the first registered), even though
/// the other name sorts first.
const CREATION_DECIDES: &[(&str, &str, &str)] = &[
    ("z-first", "1.37.0", "1.36.0"),
    ("a-second", "1.37.0", "1.36.0"),
];

/// kube-schedulers started in this order, each `--emulated-version`.
const SCHEDULERS: [&str; 3] = ["1.37", "1.35", "1.36"];

/// Starts [`SCHEDULERS`] in order, the first alone until it renews the Lease itself (a
/// coordinated client pre-empted before its first renewal never leads, and never steps down),
/// then waits for the settled holder. Returns the holder's emulation version, whether Conclave's
/// annotation is on the Lease, and the processes (killed on drop).
async fn elect_schedulers(
    cp: &ControlPlane,
    client: &Client,
) -> (String, bool, Vec<conclave_testkit::KubeComponent>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    let mut schedulers = vec![cp.start_scheduler(Some(SCHEDULERS[0])).expect("scheduler")];
    let first = wait_lease(&leases, "kube-scheduler", "a first holder", |r| {
        r.holder().is_some()
    })
    .await;
    let first_holder = first.holder().unwrap().to_owned();
    wait_lease(
        &leases,
        "kube-scheduler",
        "the first holder to renew the Lease itself",
        |r| r.holder() == Some(first_holder.as_str()) && r.renew_time > first.renew_time,
    )
    .await;
    for version in &SCHEDULERS[1..] {
        schedulers.push(cp.start_scheduler(Some(version)).expect("scheduler"));
        controller_support::wait_candidate(&candidates, "kube-scheduler", &format!("{version}.0"))
            .await;
    }
    let record = settled(&leases, "kube-scheduler", tokio::time::Instant::now())
        .await
        .expect("the Lease settles");
    let holder = record.holder().unwrap_or_default();
    let candidate = candidates
        .get(holder)
        .await
        .expect("the holder is a candidate");
    let emulation = candidate
        .spec
        .and_then(|s| s.emulation_version)
        .unwrap_or_default();
    (emulation, record.elected_by_conclave, schedulers)
}

/// Removes what a scheduler run left in `kube-system`: its LeaseCandidates and the Lease.
async fn clear_schedulers(client: &Client) {
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    for candidate in candidates.list(&Default::default()).await.unwrap().items {
        if candidate.spec.as_ref().map(|s| s.lease_name.as_str()) == Some("kube-scheduler") {
            let name = candidate.metadata.name.unwrap_or_default();
            let _ = candidates.delete(&name, &Default::default()).await;
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let _ = leases.delete("kube-scheduler", &Default::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conclave_elects_whom_the_builtin_controller_elects() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    wait_builtin_leading(&cp)
        .await
        .expect("the built-in election controller leads");
    let client = cp.client().await.unwrap();

    // The built-in controller elects.
    let ns = cp.namespace("builtin-elects").await.unwrap();
    let (builtin_binary, binary_annotated) =
        elect_candidates(&client, &ns, "binary", BINARY_DECIDES).await;
    let (builtin_creation, creation_annotated) =
        elect_candidates(&client, &ns, "creation", CREATION_DECIDES).await;
    let (builtin_scheduler, scheduler_annotated, schedulers) = elect_schedulers(&cp, &client).await;
    assert!(
        !(binary_annotated || creation_annotated || scheduler_annotated),
        "the built-in controller's elections carry no Conclave annotation"
    );
    drop(schedulers);
    clear_schedulers(&client).await;

    // The same situations under Conclave, the built-in controller held passive.
    let _hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let ns = cp.namespace("conclave-elects").await.unwrap();
    let mut cfg = config(&ns, "conclave-differential");
    cfg.namespaces = vec![ns.clone(), "kube-system".into()];
    cfg.controller_namespace = ns.clone();
    // Upstream's ack window; the lease duration written is upstream's 5 s by default.
    cfg.ack_window = Duration::from_secs(5);
    let _controller = start(client.clone(), cfg);
    let (conclave_binary, binary_annotated) =
        elect_candidates(&client, &ns, "binary", BINARY_DECIDES).await;
    let (conclave_creation, creation_annotated) =
        elect_candidates(&client, &ns, "creation", CREATION_DECIDES).await;
    let (conclave_scheduler, scheduler_annotated, _schedulers) =
        elect_schedulers(&cp, &client).await;
    assert!(
        binary_annotated && creation_annotated && scheduler_annotated,
        "Conclave made these elections"
    );

    eprintln!(
        "built-in / Conclave: binary tie {builtin_binary} / {conclave_binary}, full tie \
         {builtin_creation} / {conclave_creation}, schedulers {builtin_scheduler} / {conclave_scheduler}"
    );
    assert_eq!(conclave_binary, builtin_binary, "emulation versions tie");
    assert_eq!(conclave_creation, builtin_creation, "both versions tie");
    assert_eq!(
        conclave_scheduler, builtin_scheduler,
        "kube-schedulers: the same instance (by emulated version and start order)"
    );
    cp.check_running().unwrap();
}

/// Crash failover on the real server when the dead leader was the best candidate (as on the
/// emulator, `a_crashed_best_leader_is_replaced_at_lease_expiry_not_an_ack_window_later`): its
/// LeaseCandidate lingers and never answers, and the next leader is written about when the 10 s
/// Lease expires, not an ack window (4 s) later.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_best_leader_is_replaced_at_lease_expiry() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let _hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("crash").await.unwrap();
    let mut cfg = failover_config(&ns, "conclave-real");
    cfg.controller_namespace = ns.clone();
    let _controller = start(client.clone(), cfg);
    let failover = crash_the_best_leader(&client, &ns, "1.37.0", "1.36.0").await;
    eprintln!("next leader written {failover:#} after the last renewal (10 s Lease, real server)");
    assert!(
        failover < jiff::SignedDuration::from_secs(14),
        "next leader written {failover:#} after the last renewal; lease + ack window is 14 s"
    );
}
