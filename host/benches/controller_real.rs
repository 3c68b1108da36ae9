//! Conclave and kube-apiserver's built-in election controller on one real control plane, with the
//! same kind of candidates (three `CandidateResponder`s per Lease, answering pings): time from the
//! last candidate registering to the best one (oldest emulation version) being written as holder, and from a release to the new holder
//! being written. Prints a table; skipped when the control-plane binaries are not built.
//!
//! Run: `cargo bench --profile dev -p conclave --bench controller_real`
//! (`CONCLAVE_BENCH_ROUNDS`, default 5).

use conclave::controller::{self, ControllerConfig};
use conclave::engine::{Engine, EngineConfig};
use conclave_core::k8s::lease_record;
use conclave_core::plan::Mode;
use conclave_testkit::{CandidateResponder, ControlPlane, lease_candidate};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const OEV: &str = "OldestEmulationVersion";

async fn wait_holder(leases: &Api<Lease>, name: &str, holder: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(lease)) = leases.get_opt(name).await
            && lease_record(&lease).holder() == Some(holder)
        {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no holder for {name}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `rounds` elections in `ns`; returns (register->holder, release->holder) durations.
async fn measure(client: &Client, ns: &str, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let (mut elect, mut reelect) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let lease = format!("bench-{round}");
        let mut keep = Vec::new();
        for (i, emulation) in ["1.37.0", "1.36.0", "1.35.0"].iter().enumerate() {
            keep.push(
                CandidateResponder::register(
                    client.clone(),
                    lease_candidate(
                        ns,
                        &format!("{lease}-{i}"),
                        &lease,
                        "1.37.0",
                        Some(emulation),
                        OEV,
                    ),
                )
                .await
                .expect("candidate"),
            );
        }
        let registered = Instant::now();
        let best = format!("{lease}-2");
        elect.push(wait_holder(&leases, &lease, &best).await - registered);
        // Release as client-go does (retrying on a conflict with a controller's write).
        loop {
            let mut object = leases.get(&lease).await.expect("lease");
            if let Some(spec) = object.spec.as_mut() {
                spec.holder_identity = Some(String::new());
                spec.lease_duration_seconds = Some(1);
                spec.preferred_holder = None;
                spec.strategy = None;
                spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    jiff::Timestamp::now(),
                ));
            }
            match leases
                .replace(&lease, &PostParams::default(), &object)
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.is_conflict() => continue,
                Err(error) => panic!("release: {error}"),
            }
        }
        let released = Instant::now();
        reelect.push(wait_holder(&leases, &lease, &best).await - released);
    }
    (elect, reelect)
}

fn summary(samples: &[Duration]) -> String {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    format!(
        "{median:.0} ms (min {:.0}, max {:.0})",
        ms[0],
        ms[ms.len() - 1]
    )
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("CONCLAVE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.expect("client");

    let builtin_ns = cp.namespace("builtin").await.expect("namespace");
    let (b_elect, b_reelect) = measure(&client, &builtin_ns, rounds).await;

    let hold = cp
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let conclave_ns = cp.namespace("conclave").await.expect("namespace");
    let shutdown = CancellationToken::new();
    let config = ControllerConfig {
        namespaces: vec![conclave_ns.clone()],
        mode: Mode::All,
        identity: "bench".into(),
        controller_namespace: conclave_ns.clone(),
        own_retry_period: Duration::from_millis(500),
        ..ControllerConfig::default()
    };
    let task = tokio::spawn(controller::run(
        client.clone(),
        Arc::new(Engine::new(EngineConfig::default()).expect("engine")),
        config,
        shutdown.clone(),
    ));
    let (c_elect, c_reelect) = measure(&client, &conclave_ns, rounds).await;
    shutdown.cancel();
    let _ = task.await;
    drop(hold);

    println!(
        "Real kube-apiserver ({}), {rounds} rounds, 3 candidates per Lease:",
        conclave_testkit::KUBERNETES_VERSION
    );
    println!(
        "| controller | last candidate registered -> holder written | release -> new holder written |"
    );
    println!("|---|---|---|");
    println!(
        "| kube-apiserver built-in | {} | {} |",
        summary(&b_elect),
        summary(&b_reelect)
    );
    println!(
        "| Conclave (`--mode all`) | {} | {} |",
        summary(&c_elect),
        summary(&c_reelect)
    );
}
