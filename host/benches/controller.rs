//! Controller benchmark on the emulator: `conclave run` as a separate process managing
//! N Leases x 3 candidates (default 1,000). Prints a table of the controller process's CPU time
//! and resident memory (from /proc) for: the initial elections, a steady state, and a storm in
//! which every Lease is released at once.
//!
//! Run: `cargo bench -p conclave --bench controller` (env `CONCLAVE_BENCH_LEASES` for N,
//! `CONCLAVE_BENCH_STEADY_SECS` for the steady-state window, default 30).

use conclave_core::k8s::lease_record;
use conclave_emulator::{Emulator, EmulatorConfig};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::time::{Duration, Instant};

const NS: &str = "default";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) and resident memory (MiB) of a process, from /proc.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the command: state is field 3, utime 14, stime 15 (1-based over the whole line).
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu = (ticks(14) + ticks(15)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    (cpu, rss_kib / 1024.0)
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn candidate(lease: usize, i: usize) -> LeaseCandidate {
    LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(format!("l{lease}-c{i}")),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseCandidateSpec {
            lease_name: format!("l{lease}"),
            binary_version: "1.37.0".into(),
            emulation_version: Some(format!("1.3{}.0", 5 + i)),
            strategy: "OldestEmulationVersion".into(),
            renew_time: Some(now()),
            ping_time: None,
        }),
    }
}

/// Answers every ping (renewTime = now when pingTime is newer), like live clients.
async fn answer_pings(api: Api<LeaseCandidate>) {
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(Ok(mut c)) = stream.next().await {
        let Some(spec) = c.spec.as_mut() else {
            continue;
        };
        let outstanding = match (&spec.ping_time, &spec.renew_time) {
            (Some(p), Some(r)) => p.0 > r.0,
            (Some(_), None) => true,
            _ => false,
        };
        if outstanding {
            spec.renew_time = Some(now());
            let name = c.metadata.name.clone().unwrap_or_default();
            let _ = api.replace(&name, &PostParams::default(), &c).await;
        }
    }
}

async fn wait_all_held(leases: &Api<Lease>, n: usize, after_micros: i64) -> Duration {
    let start = Instant::now();
    loop {
        let list = leases.list(&ListParams::default()).await.expect("list");
        let count = list
            .items
            .iter()
            .map(lease_record)
            .filter(|r| {
                r.holder().is_some() && r.renew_time.is_some_and(|t| t.as_micros() >= after_micros)
            })
            .count();
        if count >= n {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "only {count}/{n} Leases held after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("CONCLAVE_BENCH_LEASES", 1000);
    let steady = Duration::from_secs(env_usize("CONCLAVE_BENCH_STEADY_SECS", 30) as u64);
    let emulator = Emulator::start(EmulatorConfig {
        history_capacity: 200_000,
        ..EmulatorConfig::default()
    })
    .await
    .expect("emulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    tokio::spawn(answer_pings(candidates.clone()));

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--mode",
            "all",
            "--namespace",
            NS,
            "--controller-namespace",
            "kube-system",
            "--identity",
            "bench",
            "--metrics-addr",
            "127.0.0.1:0",
            // Long enough that nothing expires during the steady state.
            "--lease-duration-seconds",
            "3600",
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("conclave run starts");
    let pid = child.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu_idle, rss_idle) = usage(pid);

    let t0 = conclave_core::k8s::timestamp(jiff::Timestamp::now()).as_micros();
    let create_start = Instant::now();
    for lease in 0..n {
        for i in 0..3 {
            candidates
                .create(&PostParams::default(), &candidate(lease, i))
                .await
                .expect("create candidate");
        }
    }
    let created_in = create_start.elapsed();
    let elect = wait_all_held(&leases, n, t0).await;
    let (cpu_elected, rss_elected) = usage(pid);

    tokio::time::sleep(steady).await;
    let (cpu_steady, rss_steady) = usage(pid);

    // Storm: every Lease released at once (holder "", as client-go releases).
    let t1 = conclave_core::k8s::timestamp(jiff::Timestamp::now()).as_micros();
    let storm_start = Instant::now();
    for lease in leases.list(&ListParams::default()).await.unwrap().items {
        let mut lease = lease;
        let name = lease.metadata.name.clone().unwrap_or_default();
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now());
        }
        let _ = leases.replace(&name, &PostParams::default(), &lease).await;
    }
    let released_in = storm_start.elapsed();
    let storm = wait_all_held(&leases, n, t1).await;
    let (cpu_storm, rss_storm) = usage(pid);
    let _ = child.kill();
    let _ = child.wait();

    println!("Controller on the emulator: {n} Leases x 3 candidates, `conclave run --mode all`");
    println!("| phase | wall time | controller CPU (s) | controller RSS (MiB) |");
    println!("|---|---|---|---|");
    println!("| idle (caches synced, no objects) | - | {cpu_idle:.2} | {rss_idle:.1} |");
    println!(
        "| initial elections ({} candidates created in {:.1} s) | {:.1} s after first create | {:.2} | {rss_elected:.1} |",
        n * 3,
        created_in.as_secs_f64(),
        elect.as_secs_f64() + created_in.as_secs_f64(),
        cpu_elected - cpu_idle
    );
    println!(
        "| steady state, {} s | {} s | {:.2} ({:.1}% of one core) | {rss_steady:.1} |",
        steady.as_secs(),
        steady.as_secs(),
        cpu_steady - cpu_elected,
        100.0 * (cpu_steady - cpu_elected) / steady.as_secs_f64()
    );
    println!(
        "| storm: all {n} released (in {:.1} s), all re-elected | {:.1} s after the last release | {:.2} | {rss_storm:.1} |",
        released_in.as_secs_f64(),
        storm.as_secs_f64(),
        cpu_storm - cpu_steady
    );
}
