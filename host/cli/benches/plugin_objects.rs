//! StrategyPlugin objects (issue 30), measured: (1) the time from applying a `StrategyPlugin`
//! that names a new plugin version in a local OCI registry to the first election it decides,
//! on a real kube-apiserver with Debian's docker-registry; (2) the latency of elections by
//! another plugin while a plugin compiles, against the same elections on an idle engine, in one
//! run; (3) the process's memory with 50 plugins in service. Prints tables; skipped when the
//! control-plane or registry binaries are missing.
//!
//! Run: `cargo bench -p conclave --bench plugin_objects` (`CONCLAVE_BENCH_ROUNDS`, default 10).

use conclave_api::{OciSource, PluginSource, StrategyPlugin, StrategyPluginSpec};
use conclave_controller::ControllerConfig;
use conclave_controller::plugin_objects::PluginObjectsConfig;
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_core::time::Timestamp;
use conclave_engine::{Engine, EngineConfig, PluginOptions, PluginSource as EngineSource};
use conclave_testkit::{CandidateResponder, ControlPlane, Registry, lease_candidate, wasm_build};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const PRIORITY: &str = "conclave.dev/priority";

fn rounds() -> usize {
    std::env::var("CONCLAVE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// `component` with a custom section named `name` appended: the same plugin under another
/// digest, as a rebuild publishes it.
fn with_custom_section(component: &[u8], name: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    leb128(&mut payload, name.len());
    payload.extend_from_slice(name.as_bytes());
    let mut out = component.to_vec();
    out.push(0);
    leb128(&mut out, payload.len());
    out.extend_from_slice(&payload);
    out
}

fn leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = u8::try_from(value & 0x7f).unwrap_or(0);
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `component` with every occurrence of `from` replaced by `to` (same length, in its data: the
/// name `info()` reports and the messages that quote it): the priority plugin claiming another
/// strategy name, so that many copies can serve side by side.
fn renamed(component: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let hits: Vec<usize> = component
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "{from:?} does not occur");
    let mut out = component.to_vec();
    for hit in hits {
        out[hit..hit + to.len()].copy_from_slice(to.as_bytes());
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn request(strategy: &str) -> ElectionRequest {
    let candidate = |name: &str, emulation: &str| CandidateView {
        name: name.into(),
        binary_version: "1.33.0".into(),
        emulation_version: emulation.into(),
        strategy: strategy.into(),
        creation_time: Some(Timestamp::from_secs(1_700_000_000)),
        ..CandidateView::default()
    };
    ElectionRequest {
        lease: LeaseView {
            namespace: "default".into(),
            name: "bench".into(),
            strategy: strategy.into(),
            expired: true,
            ..LeaseView::default()
        },
        now: Timestamp::from_secs(1_800_000_000),
        settings: String::new(),
        candidates: vec![candidate("a", "1.33.0"), candidate("b", "1.32.0")],
    }
}

/// How many plugin versions the busy phase compiles and installs.
const COMPILES: u32 = 5;

/// Election latency by the built-in plugin, idle and while another plugin compiles
/// ([`COMPILES`] versions, one after the other) and is installed on another thread.
fn elections_while_compiling(component: &[u8]) {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let elect = |engine: &Engine, times: &mut Vec<Duration>| {
        let started = Instant::now();
        engine.elect(OEV, &request(OEV)).expect("elects");
        times.push(started.elapsed());
    };
    let mut idle = Vec::new();
    for _ in 0..20_000 {
        elect(&engine, &mut idle);
    }
    let compiled = Arc::new(AtomicU32::new(0));
    let compiles = {
        let engine = engine.clone();
        let compiled = Arc::clone(&compiled);
        let component = component.to_vec();
        std::thread::spawn(move || {
            let started = Instant::now();
            for n in 0..COMPILES {
                let version = with_custom_section(&component, &format!("bench-{n}"));
                let prepared = engine
                    .prepare(
                        EngineSource::Object {
                            name: "bench".into(),
                            origin: "bench".into(),
                        },
                        &version,
                        PluginOptions::default(),
                    )
                    .expect("compiles");
                engine
                    .install("strategyplugin/bench", prepared)
                    .expect("installs");
                compiled.fetch_add(1, Ordering::Relaxed);
            }
            started.elapsed()
        })
    };
    let mut busy = Vec::new();
    while compiled.load(Ordering::Relaxed) < COMPILES {
        elect(&engine, &mut busy);
    }
    let compile_time = compiles.join().expect("compile thread");
    idle.sort();
    busy.sort();
    println!(
        "\n(2) OldestEmulationVersion elections on one thread, idle, then while a second thread compiles and installs {COMPILES} versions of the priority plugin ({} per version)",
        us(compile_time / COMPILES)
    );
    println!("| engine | calls | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (label, times) in [("idle", &idle), ("while compiling", &busy)] {
        println!(
            "| {label} | {} | {} | {} | {} |",
            times.len(),
            us(percentile(times, 0.5)),
            us(percentile(times, 0.99)),
            us(*times.last().unwrap())
        );
    }
}

fn us(d: Duration) -> String {
    if d >= Duration::from_millis(10) {
        ms(d)
    } else {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    }
}

/// Memory of this process with 50 copies of the priority plugin in service (each renamed to a
/// strategy of its own).
fn memory_with_fifty(component: &[u8]) {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let before = rss_kib();
    for i in 0..50 {
        let copy = renamed(component, PRIORITY, &format!("conclave.dev/prior-{i:02}"));
        let prepared = engine
            .prepare(
                EngineSource::Object {
                    name: format!("p{i}"),
                    origin: "bench".into(),
                },
                &copy,
                PluginOptions::default(),
            )
            .expect("compiles");
        engine
            .install(&format!("strategyplugin/p{i}"), prepared)
            .expect("installs");
    }
    // One election by each, so every plugin has instantiated once.
    for i in 0..50 {
        let strategy = format!("conclave.dev/prior-{i:02}");
        engine
            .elect(&strategy, &request(&strategy))
            .expect("elects");
    }
    let after = rss_kib();
    println!(
        "\n(3) memory of the process (VmRSS), the engine with the built-in plugin, then with 50 priority plugins installed and each called once"
    );
    println!("| plugins | RSS | per plugin |");
    println!("|---|---|---|");
    println!("| built-in only | {:.1} MiB | |", before as f64 / 1024.0);
    println!(
        "| + 50 | {:.1} MiB | {:.0} KiB |",
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / 50.0
    );
}

async fn apply_to_election(component: &[u8]) {
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(registry) = Registry::start().await.expect("registry") else {
        return;
    };
    let _hold = plane
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = plane.client().await.expect("client");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let _ = crds
        .create(&PostParams::default(), &StrategyPlugin::crd())
        .await;
    let plugins: Api<StrategyPlugin> = Api::all(client.clone());
    while plugins.list(&Default::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ns = plane.namespace("plugin-bench").await.expect("namespace");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let oci_options = conclave_oci::ClientOptions::default().with_plain_http(registry.host());
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let config = ControllerConfig {
        namespaces: vec![ns.clone()],
        controller_namespace: ns.clone(),
        identity: "plugin-bench".into(),
        mode: conclave_core::plan::Mode::All,
        ..ControllerConfig::default()
    };
    let objects = PluginObjectsConfig {
        engine: engine.clone(),
        plugins_dir: None,
        namespace: ns.clone(),
        oci: oci_options.clone(),
        resync: Duration::from_secs(10),
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(conclave_controller::run_with_plugin_objects(
        client.clone(),
        Arc::new(engine),
        config,
        Some(objects),
        shutdown.clone(),
    ));
    // The controller leads before the rounds start.
    let _warm = CandidateResponder::register(
        client.clone(),
        lease_candidate(&ns, "warm", "warm", "1.33.0", Some("1.33.0"), OEV),
    )
    .await
    .expect("candidate");
    while leases.get_opt("warm").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut times = Vec::new();
    let mut candidates = Vec::new();
    for round in 0..rounds() {
        let version = with_custom_section(component, &format!("round-{round}"));
        let reference = conclave_oci::Reference::parse(&format!(
            "{}/strategies/priority:{round}",
            registry.host()
        ))
        .unwrap();
        let pushed = conclave_oci::push(
            &version,
            &reference,
            &conclave_oci::Credentials::Anonymous,
            &oci_options,
            BTreeMap::new(),
        )
        .await
        .expect("push");
        // A candidate waiting for the strategy, which no plugin serves yet.
        let lease = format!("r{round}");
        candidates.push(
            CandidateResponder::register(
                client.clone(),
                lease_candidate(&ns, &lease, &lease, "1.33.0", Some("1.33.0"), PRIORITY),
            )
            .await
            .expect("candidate"),
        );
        let spec = StrategyPluginSpec {
            source: PluginSource {
                oci: Some(OciSource {
                    reference: pushed.reference_with_digest.to_string(),
                    pull_secret: None,
                }),
                ..PluginSource::default()
            },
            strategies: vec![PRIORITY.into()],
            settings: None,
            limits: None,
            failure_policy: conclave_api::FailurePolicy::KeepLastGood,
        };
        let name = format!("priority-{round}");
        let started = Instant::now();
        plugins
            .patch(
                &name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&StrategyPlugin::new(&name, spec)),
            )
            .await
            .expect("apply");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if leases
                .get_opt(&lease)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec.and_then(|s| s.holder_identity))
                .is_some()
            {
                break;
            }
            assert!(Instant::now() < deadline, "round {round}: never elected");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        times.push(started.elapsed());
        // Out of service again before the next round's candidate registers.
        plugins
            .delete(&name, &Default::default())
            .await
            .expect("delete");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    times.sort();
    println!(
        "\n(1) `StrategyPlugin` applied (a new digest of the priority plugin in a local registry) -> the Lease waiting for its strategy has a holder; {} rounds",
        times.len()
    );
    println!("| p50 | p90 | max |");
    println!("|---|---|---|");
    println!(
        "| {} | {} | {} |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
        ms(*times.last().unwrap())
    );
    shutdown.cancel();
    let _ = task.await;
}

fn main() {
    let built = wasm_build::build_plugins(&["priority"]).join("priority.wasm");
    let component = std::fs::read(&built).expect("the priority plugin");
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    println!(
        "plugin_objects bench ({profile} profile), priority plugin of {} bytes",
        component.len()
    );
    memory_with_fifty(&component);
    elections_while_compiling(&component);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(apply_to_election(&component));
}
