//! Conclave and kube-apiserver's built-in election controller on one real control plane, with the
//! same candidates, each behaving like a client-go coordinated client: it answers every ping as
//! soon as its watch shows it, renews the Lease while it holds it, and releases the Lease at once
//! when `spec.preferredHolder` names someone else. Each round registers the newest version
//! first and waits until it holds the Lease, then registers two older ones; it measures the time
//! from the last one registering to the best one (oldest emulation version) being written as
//! holder, which takes a pre-emption (preferredHolder, step-down, new holder), and from a release
//! to the new holder being written. Prints a table; skipped when the control-plane binaries are
//! not built.
//!
//! Run: `cargo bench --profile dev -p conclave --bench controller_real`
//! (`CONCLAVE_BENCH_ROUNDS`, default 5).

use conclave_controller::{self as controller, ControllerConfig};
use conclave_core::k8s::lease_record;
use conclave_core::plan::Mode;
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::{ControlPlane, lease_candidate};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const OEV: &str = "OldestEmulationVersion";
/// How often a holder renews, and the leaseDurationSeconds it writes (client-go's ratio: the
/// renewal comes well within the duration).
const RENEW_EVERY: Duration = Duration::from_secs(1);
const HOLDER_LEASE_SECONDS: i32 = 5;

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// One replica of a coordinated component: its LeaseCandidate plus a coordinated elector, as
/// client-go (and conclave-candidate) behave. Every write carries the resourceVersion last seen.
struct CoordinatedClient {
    name: String,
    candidates: Api<LeaseCandidate>,
    step_downs: Arc<AtomicU32>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl CoordinatedClient {
    async fn register(client: &Client, ns: &str, name: &str, lease: &str, emulation: &str) -> Self {
        let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), ns);
        let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
        // The watcher lists before it watches, so it sees a ping written before it is open.
        let pings = tokio::spawn(answer_pings(candidates.clone(), name.to_owned()));
        candidates
            .create(
                &PostParams::default(),
                &lease_candidate(ns, name, lease, "1.37.0", Some(emulation), OEV),
            )
            .await
            .expect("candidate");
        let step_downs = Arc::default();
        let elector = tokio::spawn(lead(
            leases,
            lease.to_owned(),
            name.to_owned(),
            Arc::clone(&step_downs),
        ));
        Self {
            name: name.to_owned(),
            candidates,
            step_downs,
            tasks: vec![pings, elector],
        }
    }

    /// How many times it released the Lease because another candidate was preferred.
    fn step_downs(&self) -> u32 {
        self.step_downs.load(Ordering::Relaxed)
    }

    /// Stops the client and deletes its LeaseCandidate, so no controller elects it any more.
    async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = self
            .candidates
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

/// Answers a ping (renewTime = now) as soon as the candidate's watch shows it.
async fn answer_pings(api: Api<LeaseCandidate>, name: String) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let Ok(mut candidate) = event else {
            continue;
        };
        let Some(spec) = candidate.spec.as_mut() else {
            continue;
        };
        let outstanding = match (&spec.ping_time, &spec.renew_time) {
            (Some(ping), Some(renew)) => ping.0 > renew.0,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if outstanding {
            spec.renew_time = Some(now());
            // A conflict means a newer version is on its way through the watch.
            let _ = api.replace(&name, &PostParams::default(), &candidate).await;
        }
    }
}

/// The coordinated elector: never acquires (the election controller assigns the Lease); while the
/// Lease names `me` it renews every [`RENEW_EVERY`], and releases the Lease as soon as the watch
/// shows a `preferredHolder` naming someone else (holder "", 1 s, preferredHolder and strategy
/// cleared, as client-go's release writes).
async fn lead(api: Api<Lease>, lease: String, me: String, step_downs: Arc<AtomicU32>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={lease}"));
    let stream = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    let mut tick = tokio::time::interval(RENEW_EVERY);
    let mut last: Option<Lease> = None;
    loop {
        let renew_due = tokio::select! {
            event = stream.next() => match event {
                Some(Ok(seen)) => {
                    last = Some(seen);
                    false
                }
                Some(Err(_)) => continue,
                None => return,
            },
            _ = tick.tick() => true,
        };
        let Some(mut object) = last.clone() else {
            continue;
        };
        let record = lease_record(&object);
        if record.holder() != Some(me.as_str()) {
            continue;
        }
        let step_down = record.preferred().is_some_and(|p| p != me);
        if !step_down && !renew_due {
            continue;
        }
        let spec = object.spec.get_or_insert_with(Default::default);
        if step_down {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.preferred_holder = None;
            spec.strategy = None;
        } else {
            spec.lease_duration_seconds = Some(HOLDER_LEASE_SECONDS);
        }
        spec.renew_time = Some(now());
        // On a conflict the watch brings the newer version, and the next event decides again.
        if let Ok(written) = api.replace(&lease, &PostParams::default(), &object).await {
            if step_down {
                step_downs.fetch_add(1, Ordering::Relaxed);
            }
            last = Some(written);
        }
    }
}

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

/// What one controller's rounds measured.
struct Measured {
    elect: Vec<Duration>,
    reelect: Vec<Duration>,
    /// Per round: whether a worse candidate was elected first and stepped down when pre-empted.
    preempted: Vec<bool>,
}

/// Runs `rounds` elections in `ns`.
async fn measure(client: &Client, ns: &str, rounds: usize) -> Measured {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut measured = Measured {
        elect: Vec::new(),
        reelect: Vec::new(),
        preempted: Vec::new(),
    };
    for round in 0..rounds {
        let lease = format!("bench-{round}");
        // The newest version registers first and is elected alone; the older ones join while it
        // holds the Lease, so the best one only gets it through a pre-emption.
        let mut clients = Vec::new();
        for (i, emulation) in ["1.37.0", "1.36.0", "1.35.0"].iter().enumerate() {
            clients.push(
                CoordinatedClient::register(client, ns, &format!("{lease}-{i}"), &lease, emulation)
                    .await,
            );
            if i == 0 {
                wait_holder(&leases, &lease, &format!("{lease}-0")).await;
            }
        }
        let registered = Instant::now();
        let best = format!("{lease}-2");
        measured
            .elect
            .push(wait_holder(&leases, &lease, &best).await - registered);
        measured
            .preempted
            .push(clients.iter().any(|c| c.step_downs() > 0));
        // The holder releases as client-go does (retrying on a conflict with its own renewal).
        loop {
            let mut object = leases.get(&lease).await.expect("lease");
            if let Some(spec) = object.spec.as_mut() {
                spec.holder_identity = Some(String::new());
                spec.lease_duration_seconds = Some(1);
                spec.preferred_holder = None;
                spec.strategy = None;
                spec.renew_time = Some(now());
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
        measured
            .reelect
            .push(wait_holder(&leases, &lease, &best).await - released);
        for c in clients {
            c.stop().await;
        }
    }
    measured
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
    let builtin = measure(&client, &builtin_ns, rounds).await;

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
    let conclave = measure(&client, &conclave_ns, rounds).await;
    shutdown.cancel();
    let _ = task.await;
    drop(hold);

    println!(
        "Real kube-apiserver ({}), {rounds} rounds, 3 candidates per Lease:",
        conclave_testkit::KUBERNETES_VERSION
    );
    println!(
        "| controller | last candidate registered -> best holder written | rounds with a pre-emption | release -> new holder written |"
    );
    println!("|---|---|---|---|");
    let runs = [
        ("kube-apiserver built-in", builtin),
        ("Conclave (`--mode all`)", conclave),
    ];
    for (controller, m) in &runs {
        println!(
            "| {controller} | {} | {} of {rounds} | {} |",
            summary(&m.elect),
            m.preempted.iter().filter(|p| **p).count(),
            summary(&m.reelect)
        );
    }
    println!();
    println!("Rounds (last candidate registered -> best holder written; release -> new holder):");
    for (controller, m) in &runs {
        let rounds: Vec<String> = (0..m.elect.len())
            .map(|i| {
                format!(
                    "{:.0} ms{}; {:.0} ms",
                    m.elect[i].as_secs_f64() * 1000.0,
                    if m.preempted[i] { " (pre-empted)" } else { "" },
                    m.reelect[i].as_secs_f64() * 1000.0
                )
            })
            .collect();
        println!("- {controller}: {}", rounds.join(" | "));
    }
}
