//! Emulator benchmark: writes per second, watch fan-out to 1,000 watchers, and memory with
//! 10,000 Leases. Prints a table; run with `cargo bench -p conclave-emulator --bench emulator`.
//!
//! Everything goes through HTTP with kube-rs, in one process (client and server share the two
//! cores), so the numbers are what a test or demo sees, not the server's ceiling.

use conclave_emulator::{Emulator, EmulatorConfig};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const LEASES: usize = 10_000;
const WRITERS: usize = 8;
const UPDATES: usize = 5_000;
const WATCHERS: usize = 1_000;
const FANOUT_ROUNDS: usize = 50;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn lease(i: usize) -> Lease {
    serde_json::from_value(json!({
        "metadata": { "name": format!("lease-{i:05}"), "labels": { "app": "bench", "shard": format!("{}", i % 16) } },
        "spec": {
            "holderIdentity": format!("candidate-{i}"),
            "leaseDurationSeconds": 15,
            "acquireTime": "2025-01-01T00:00:00.000000Z",
            "renewTime": "2025-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
            "strategy": "OldestEmulationVersion"
        }
    }))
    .expect("valid lease")
}

fn row(what: &str, value: String) {
    println!("| {what:<58} | {value:>22} |");
}

async fn wait_for(counter: &AtomicUsize, notify: &Notify, target: usize) {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let notified = notify.notified();
            if counter.load(Ordering::Acquire) >= target {
                return;
            }
            notified.await;
        }
    })
    .await
    .expect("all watchers receive the events within 2 minutes");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    println!("| {:<58} | {:>22} |", "measurement", "result");
    println!("|{}|{}|", "-".repeat(60), "-".repeat(24));
    let rss_before = rss_kib();

    // Creates: WRITERS concurrent clients, LEASES objects.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let api = api.clone();
        let pp = pp.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..LEASES).step_by(WRITERS) {
                api.create(&pp, &lease(i)).await.expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let secs = started.elapsed().as_secs_f64();
    row(
        &format!("creates/s ({LEASES} Leases, {WRITERS} concurrent writers)"),
        format!("{:.0}", LEASES as f64 / secs),
    );
    let rss_after = rss_kib();
    row(
        &format!("RSS with {LEASES} Leases (whole process)"),
        format!("{:.1} MiB", rss_after as f64 / 1024.0),
    );
    row(
        &format!("RSS growth for {LEASES} Leases"),
        format!(
            "{:.1} MiB ({:.2} KiB/Lease)",
            (rss_after - rss_before) as f64 / 1024.0,
            (rss_after - rss_before) as f64 / LEASES as f64
        ),
    );
    row(
        "objects stored (incl. 4 namespaces)",
        format!("{}", emulator.object_count()),
    );

    // Updates: one writer, sequential merge patches (latency-bound, like one controller).
    let started = Instant::now();
    for i in 0..UPDATES {
        let patch = json!({ "spec": { "holderIdentity": format!("h-{i}") } });
        api.patch(
            "lease-00000",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("patch");
    }
    let secs = started.elapsed().as_secs_f64();
    row(
        &format!("updates/s (1 writer, {UPDATES} merge patches)"),
        format!("{:.0}", UPDATES as f64 / secs),
    );

    // Updates: WRITERS writers, each on its own lease, read-modify-write with resourceVersion.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("lease-{:05}", w + 1);
            for i in 0..UPDATES / WRITERS {
                let mut current = api.get(&name).await.expect("get");
                current.spec.as_mut().expect("spec").lease_transitions = Some(i as i32 + 1);
                api.replace(&name, &PostParams::default(), &current)
                    .await
                    .expect("replace");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let secs = started.elapsed().as_secs_f64();
    let done = (UPDATES / WRITERS) * WRITERS;
    row(
        &format!("get+replace/s ({WRITERS} writers, {done} updates)"),
        format!("{:.0}", done as f64 / secs),
    );

    // Fan-out: WATCHERS watches on the Leases of `default`, one lease updated repeatedly.
    let received = Arc::new(AtomicUsize::new(0));
    let notify = Arc::new(Notify::new());
    let rv = emulator.resource_version().to_string();
    let started = Instant::now();
    for _ in 0..WATCHERS {
        let api = api.clone();
        let received = received.clone();
        let notify = notify.clone();
        let rv = rv.clone();
        tokio::spawn(async move {
            let params = WatchParams::default()
                .disable_bookmarks()
                .fields("metadata.name=lease-09999");
            let mut stream = api.watch(&params, &rv).await.expect("watch").boxed();
            while let Some(event) = stream.next().await {
                if let Ok(WatchEvent::Modified(_)) = event {
                    received.fetch_add(1, Ordering::AcqRel);
                    notify.notify_waiters();
                }
            }
        });
    }
    // The first update proves every watch is established.
    let bump = |i: usize| json!({ "spec": { "leaseTransitions": i } });
    api.patch(
        "lease-09999",
        &PatchParams::default(),
        &Patch::Merge(&bump(1)),
    )
    .await
    .expect("patch");
    wait_for(&received, &notify, WATCHERS).await;
    row(
        &format!("open {WATCHERS} watches + first event to all"),
        format!("{:.0} ms", started.elapsed().as_secs_f64() * 1000.0),
    );
    let mut latencies = Vec::new();
    let started_all = Instant::now();
    for round in 0..FANOUT_ROUNDS {
        let t = Instant::now();
        api.patch(
            "lease-09999",
            &PatchParams::default(),
            &Patch::Merge(&bump(round + 2)),
        )
        .await
        .expect("patch");
        wait_for(&received, &notify, WATCHERS * (round + 2)).await;
        latencies.push(t.elapsed());
    }
    let total = started_all.elapsed().as_secs_f64();
    latencies.sort();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    row(
        &format!("write -> all {WATCHERS} watchers, median ({FANOUT_ROUNDS} rounds)"),
        ms(latencies[latencies.len() / 2]),
    );
    row(
        &format!("write -> all {WATCHERS} watchers, max"),
        ms(latencies[latencies.len() - 1]),
    );
    row(
        "watch events delivered/s during fan-out",
        format!("{:.0}", (WATCHERS * FANOUT_ROUNDS) as f64 / total),
    );

    // Burst: many writes back to back, then wait for every watcher to see all of them.
    let burst = 200;
    let base = received.load(Ordering::Acquire);
    let t = Instant::now();
    for i in 0..burst {
        api.patch(
            "lease-09999",
            &PatchParams::default(),
            &Patch::Merge(&bump(1000 + i)),
        )
        .await
        .expect("patch");
    }
    wait_for(&received, &notify, base + WATCHERS * burst).await;
    let secs = t.elapsed().as_secs_f64();
    row(
        &format!("burst of {burst} writes fanned out to {WATCHERS} watchers"),
        format!("{:.0} events/s", (WATCHERS * burst) as f64 / secs),
    );
    row(
        &format!("RSS with {WATCHERS} open watches (whole process)"),
        format!("{:.1} MiB", rss_kib() as f64 / 1024.0),
    );

    emulator.faults().drop_watches();
    emulator.shutdown().await.expect("shutdown");
}
