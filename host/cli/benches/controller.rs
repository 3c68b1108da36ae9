//! Controller benchmark on the emulator: `conclave run` as a separate process managing
//! N Leases x 3 candidates (default 1,000). Prints a table of the controller process's CPU time,
//! resident memory (from /proc) and API writes (from its /metrics) for: the initial elections; a
//! steady state in which every holder renews its Lease and the controller has nothing to write;
//! a storm in which every holder stops renewing at once, so every Lease expires and the
//! controller's expiry timers drive the re-elections; and a storm in which every holder releases
//! its Lease at once, so watch events drive them.
//!
//! Run: `cargo bench -p conclave --bench controller` (release; `--profile dev` builds faster).
//! `CONCLAVE_BENCH_SERVER=kube` runs it against the real kube-apiserver of `tests/kube` instead
//! of the emulator (skipped with a message when its binaries are not built). Environment:
//! `CONCLAVE_BENCH_LEASES` (N), `CONCLAVE_BENCH_STEADY_SECS` (steady-state window, default 30),
//! `CONCLAVE_BENCH_RENEW_SECS` (holders' renewal period, default 2; each Lease renews at its own
//! point of the period, read from the bench's watch cache, so the holders keep 10,000 Leases
//! renewed without listing them) and
//! `CONCLAVE_BENCH_LEASE_SECS` (leaseDurationSeconds written by the controller and by the
//! holders, default 10), `CONCLAVE_BENCH_WORKERS` (`conclave run --workers`, default 16, the
//! controller's default) and `CONCLAVE_BENCH_WAIT_SECS` (longest wait for a phase to settle,
//! default 600; the bench fails past it, and a failing bench kills the controller it started),
//! `CONCLAVE_BENCH_CONCLAVE` (the `conclave` binary to run, default the one cargo built with the
//! bench; worktrees sharing one target directory overwrite each other's) and
//! `CONCLAVE_BENCH_LOG` (the controller's `RUST_LOG`, default `warn`; its log goes to stderr).
//! `CONCLAVE_BENCH_STRATEGY` names the strategy every candidate asks for (default
//! `OldestEmulationVersion`, the built-in plugin), and `CONCLAVE_BENCH_PLUGINS` a directory
//! passed to `conclave run --plugins`, so the same phases run under a loaded plugin.
//!
//! `CONCLAVE_BENCH_BUILTIN=1` (with `CONCLAVE_BENCH_SERVER=kube`) replaces the steady state and
//! the storms by the steady state side by side with kube-apiserver's built-in controller, on the
//! same control plane, Leases and holders: after the initial elections, `CONCLAVE_BENCH_ROUNDS`
//! rounds (default 2) of three phases, Conclave electing (the built-in controller held passive),
//! no controller (Conclave stopped, the built-in still held: the renewals' own cost) and the
//! built-in controller electing (the hold released, Conclave stopped). Each phase waits
//! `CONCLAVE_BENCH_SETTLE_SECS` (default 10) after its switch, then measures for
//! `CONCLAVE_BENCH_STEADY_SECS`: kube-apiserver's and etcd's CPU (from /proc), the writes
//! kube-apiserver served (its `apiserver_request_total`), Conclave's CPU, memory and counters,
//! the pings answered, and whether the Leases stayed held (most leaderless at once, longest
//! leaderless, holder changes). Each controller's cost is kube-apiserver's CPU in its phase minus
//! that of the round's no-controller phase, plus its own process's CPU.
//!
//! `CONCLAVE_BENCH_BEFORE=/path/to/old/conclave` compares that binary ("before") with the one the
//! bench runs otherwise ("after") in one run, on the same server, Leases, candidates and holders:
//! after the initial elections (by "after"), `CONCLAVE_BENCH_ROUNDS` rounds (default 2) in which
//! each binary in turn (before, then after) is started once the other is stopped, waited for
//! until active, every Lease held and `CONCLAVE_BENCH_SETTLE_SECS` (default 10) more, then runs
//! the same phases: the steady state, the expiry storm, the release storm, the pre-emption
//! latency and the crash failover latency. The latencies are taken on `CONCLAVE_BENCH_SAMPLE`
//! Leases (default 100, spread over the N). Pre-emption: a better candidate (emulation version
//! 1.34.0, older than the three others') is created for each sampled Lease; from its creation to
//! the take-over that makes it the holder (its acquireTime), the holders stepping down when
//! preferredHolder names it; the new candidates are then deleted and their Leases released, so
//! the first three candidates hold them again and every turn starts from the same shape. Crash
//! failover: the sampled Leases' holders stop renewing, once each has renewed since its term
//! began (a leader that renewed, not one that never did); from each Lease's expiry (its last
//! renewTime plus leaseDurationSeconds) to the next holder's acquireTime. One table, a row per
//! phase, round and binary: wall time or p50 / p99 / max latency, the controller's CPU, RSS,
//! Lease writes and conflicts, elections, pings and strategy calls.

use conclave_core::k8s::lease_record;
use conclave_core::lease::LeaseRecord;
use conclave_emulator::{Emulator, EmulatorConfig};
use conclave_testkit::{BuiltinControllerHold, ControlPlane};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The controller's counter of API writes (labels `operation`, `result`).
const WRITES: &str = "conclave_api_writes_total";
/// Leases whose candidates are created at the same time, as the replicas of many components
/// start independently: one at a time, the real kube-apiserver (each create waits for etcd) took
/// longer than 16 minutes for 15,000 candidates.
const CANDIDATE_CREATORS: usize = 32;
/// The controller's counter of elections by outcome.
const ELECTIONS: &str = "conclave_elections_total";
/// Concurrent writes of the holders (renewals, releases): many, as N independent electors would
/// write; with 8, the real kube-apiserver (each write waits for etcd) let the first 1,600 Leases
/// expire and be taken over again while the candidates were still being created.
const HOLDER_WRITERS: usize = 64;
/// Pings answered concurrently.
const PING_ANSWERS: usize = 32;
/// The controller's ack window (its default), passed explicitly because the release storm waits
/// it out so that every candidate needs a ping again.
const ACK_WINDOW: Duration = Duration::from_secs(5);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system), resident memory and peak resident memory (MiB) of a process,
/// from /proc.
fn usage(pid: u32) -> (f64, f64, f64) {
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
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (cpu, kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// The controller's counters that tell whether it worked: Lease writes (creates and updates, and
/// how many of them were refused with a conflict, and by which kind of election write),
/// elections by what they wrote, pings and strategy calls.
#[derive(Clone, Copy, Default)]
struct Counters {
    lease_writes: f64,
    lease_conflicts: f64,
    take_over_conflicts: f64,
    preempt_conflicts: f64,
    clear_conflicts: f64,
    take_overs: f64,
    preemptions: f64,
    preferred_cleared: f64,
    pings: f64,
    strategy_calls: f64,
}

impl std::ops::Sub for Counters {
    type Output = Self;
    fn sub(self, earlier: Self) -> Self {
        Self {
            lease_writes: self.lease_writes - earlier.lease_writes,
            lease_conflicts: self.lease_conflicts - earlier.lease_conflicts,
            take_over_conflicts: self.take_over_conflicts - earlier.take_over_conflicts,
            preempt_conflicts: self.preempt_conflicts - earlier.preempt_conflicts,
            clear_conflicts: self.clear_conflicts - earlier.clear_conflicts,
            take_overs: self.take_overs - earlier.take_overs,
            preemptions: self.preemptions - earlier.preemptions,
            preferred_cleared: self.preferred_cleared - earlier.preferred_cleared,
            pings: self.pings - earlier.pings,
            strategy_calls: self.strategy_calls - earlier.strategy_calls,
        }
    }
}

/// One snapshot of the controller process: CPU, memory and counters.
#[derive(Clone, Copy)]
struct Snapshot {
    cpu: f64,
    rss: f64,
    peak_rss: f64,
    counters: Counters,
}

/// The text of `GET /metrics` (HTTP/1.0, so the server closes the connection after the answer).
async fn metrics_text(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

/// The sum of the samples of `metric` (OpenMetrics text) whose labels contain all of `labels`.
fn sum(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|label| l.contains(label))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        // An empty sum is -0.0.
        .fold(0.0, |total, v| total + v)
}

async fn snapshot(pid: u32, metrics: SocketAddr) -> Snapshot {
    let text = metrics_text(metrics).await.expect("controller /metrics");
    let (cpu, rss, peak_rss) = usage(pid);
    Snapshot {
        cpu,
        rss,
        peak_rss,
        counters: Counters {
            lease_writes: sum(&text, WRITES, &["operation=\"lease_"]),
            lease_conflicts: sum(
                &text,
                WRITES,
                &["operation=\"lease_", "result=\"conflict\""],
            ),
            take_over_conflicts: sum(&text, ELECTIONS, &["outcome=\"conflict_take_over\""]),
            preempt_conflicts: sum(&text, ELECTIONS, &["outcome=\"conflict_preempt\""]),
            clear_conflicts: sum(&text, ELECTIONS, &["outcome=\"conflict_clear_preferred\""]),
            take_overs: sum(&text, ELECTIONS, &["outcome=\"take_over\""]),
            preemptions: sum(&text, ELECTIONS, &["outcome=\"preempt\""]),
            preferred_cleared: sum(&text, ELECTIONS, &["outcome=\"clear_preferred\""]),
            pings: sum(&text, WRITES, &["operation=\"ping\""]),
            strategy_calls: sum(&text, "conclave_plugin_call_seconds_count", &[]),
        },
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn micros_now() -> i64 {
    conclave_core::k8s::timestamp(jiff::Timestamp::now()).as_micros()
}

/// The strategy every candidate asks for (`CONCLAVE_BENCH_STRATEGY`).
fn strategy() -> String {
    std::env::var("CONCLAVE_BENCH_STRATEGY").unwrap_or_else(|_| "OldestEmulationVersion".into())
}

fn candidate(ns: &str, lease: usize, i: usize) -> LeaseCandidate {
    LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(format!("l{lease}-c{i}")),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseCandidateSpec {
            lease_name: format!("l{lease}"),
            binary_version: "1.37.0".into(),
            emulation_version: Some(format!("1.3{}.0", 5 + i)),
            strategy: strategy(),
            renew_time: Some(now()),
            ping_time: None,
        }),
    }
}

/// Answers every ping (renewTime = now when pingTime is newer), like live clients: watch-driven,
/// up to [`PING_ANSWERS`] at a time (each client answers its own pings, so none waits for
/// another's), with the resourceVersion just seen as precondition. Counts the answers written in
/// `answered`.
async fn answer_pings(api: Api<LeaseCandidate>, answered: Arc<AtomicU64>) {
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    stream
        .for_each_concurrent(PING_ANSWERS, |event| {
            let (api, answered) = (api.clone(), Arc::clone(&answered));
            async move {
                let Ok(mut c) = event else {
                    return;
                };
                let Some(spec) = c.spec.as_mut() else {
                    return;
                };
                let outstanding = match (&spec.ping_time, &spec.renew_time) {
                    (Some(p), Some(r)) => p.0 > r.0,
                    (Some(_), None) => true,
                    _ => false,
                };
                if outstanding {
                    spec.renew_time = Some(now());
                    let name = c.metadata.name.clone().unwrap_or_default();
                    if api.replace(&name, &PostParams::default(), &c).await.is_ok() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
        .await;
}

/// What the holders did so far (`slowest_slice` since the last [`Holders::new_window`]).
#[derive(Clone, Copy, Default)]
struct HolderStats {
    rounds: u64,
    slowest_slice: Duration,
    renewals: u64,
    step_downs: u64,
    failures: u64,
}

impl std::ops::Sub for HolderStats {
    type Output = Self;
    fn sub(self, earlier: Self) -> Self {
        Self {
            rounds: self.rounds - earlier.rounds,
            slowest_slice: self.slowest_slice,
            renewals: self.renewals - earlier.renewals,
            step_downs: self.step_downs - earlier.step_downs,
            failures: self.failures - earlier.failures,
        }
    }
}

/// Renewal slices per period: each Lease renews in one slice of the period (by a hash of its
/// name), so the renewals of N Leases spread evenly over the period, as N independent electors'
/// timers would, instead of arriving as one burst.
const SLICES: u32 = 20;

/// The holder of every Lease, as client-go coordinated electors behave: every `every` it renews
/// each Lease that names a holder and has not expired (renewTime = now, its own
/// leaseDurationSeconds), or releases it if `preferredHolder` names someone else. Each Lease
/// renews at its own point of the period; the Leases are read from the bench's watch cache
/// ([`LeaseCache`]), not listed, and every write carries the resourceVersion last watched; a
/// conflict waits for the Lease's next turn.
struct Holders {
    stop: CancellationToken,
    stats: Arc<Mutex<HolderStats>>,
    task: tokio::task::JoinHandle<()>,
}

/// Which Leases the holders renew: those whose current record this says a live holder has.
type Renews = Arc<dyn Fn(&LeaseRecord) -> bool + Send + Sync>;

impl Holders {
    /// Holders of every Lease.
    fn start(leases: Api<Lease>, cache: LeaseCache, every: Duration, duration_secs: i32) -> Self {
        Self::start_renewing(leases, cache, every, duration_secs, Arc::new(|_| true))
    }

    /// Holders of the Leases `renews` picks: the others have no live holder and are left to
    /// expire (the holders elected before an expiry storm, say, while those elected during it
    /// renew, as new leaders do).
    fn start_renewing(
        leases: Api<Lease>,
        cache: LeaseCache,
        every: Duration,
        duration_secs: i32,
        renews: Renews,
    ) -> Self {
        let stop = CancellationToken::new();
        let stats = Arc::default();
        let task = tokio::spawn(hold(
            leases,
            cache,
            every,
            duration_secs,
            renews,
            stop.clone(),
            Arc::clone(&stats),
        ));
        Self { stop, stats, task }
    }

    fn stats(&self) -> HolderStats {
        *self.stats.lock().unwrap()
    }

    /// The stats so far; starts a new window for `slowest_slice`.
    fn new_window(&self) -> HolderStats {
        let mut stats = self.stats.lock().unwrap();
        let so_far = *stats;
        stats.slowest_slice = Duration::ZERO;
        so_far
    }

    /// Stops renewing after the slice in progress; returns once no holder writes any more.
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("holders");
    }
}

/// The slice of the renewal period in which the Lease `name` renews.
fn slice_of(name: &str) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    u32::try_from(hasher.finish() % u64::from(SLICES)).unwrap_or(0)
}

async fn hold(
    leases: Api<Lease>,
    cache: LeaseCache,
    every: Duration,
    duration_secs: i32,
    renews: Renews,
    stop: CancellationToken,
    stats: Arc<Mutex<HolderStats>>,
) {
    let mut tick = tokio::time::interval(every / SLICES);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for slice in (0..SLICES).cycle() {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let slice_start = Instant::now();
        let now_micros = micros_now();
        let writes: Vec<(bool, Lease)> = cache
            .state()
            .into_iter()
            .filter(|lease| slice_of(lease.metadata.name.as_deref().unwrap_or_default()) == slice)
            .filter_map(|lease| {
                let mut lease = Lease::clone(&lease);
                let record = lease_record(&lease);
                let holder = record.holder()?.to_owned();
                if record
                    .expires_at()
                    .is_none_or(|at| at.as_micros() <= now_micros)
                    || !renews(&record)
                {
                    return None;
                }
                let step_down = record.preferred().is_some_and(|p| p != holder);
                let spec = lease.spec.get_or_insert_with(Default::default);
                if step_down {
                    spec.holder_identity = Some(String::new());
                    spec.lease_duration_seconds = Some(1);
                    spec.preferred_holder = None;
                    spec.strategy = None;
                } else {
                    spec.lease_duration_seconds = Some(duration_secs);
                }
                spec.renew_time = Some(now());
                Some((step_down, lease))
            })
            .collect();
        futures::stream::iter(writes)
            .for_each_concurrent(HOLDER_WRITERS, |(step_down, lease)| {
                let (api, stats) = (leases.clone(), Arc::clone(&stats));
                async move {
                    let name = lease.metadata.name.clone().unwrap_or_default();
                    let result = api.replace(&name, &PostParams::default(), &lease).await;
                    let mut stats = stats.lock().unwrap();
                    match result {
                        Ok(_) if step_down => stats.step_downs += 1,
                        Ok(_) => stats.renewals += 1,
                        Err(_) => stats.failures += 1,
                    }
                }
            })
            .await;
        let mut stats = stats.lock().unwrap();
        if slice == SLICES - 1 {
            stats.rounds += 1;
        }
        stats.slowest_slice = stats.slowest_slice.max(slice_start.elapsed());
    }
}

/// The bench's own watch cache of the Leases (a kube-rs reflector), read by the holders and by
/// [`wait_leases`] instead of listing every Lease again and again.
type LeaseCache = reflector::Store<Lease>;

/// Starts the bench's Lease cache; returns once it has listed the Leases.
async fn lease_cache(leases: Api<Lease>) -> LeaseCache {
    let (cache, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(leases, watcher::Config::default()))
        .default_backoff()
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(stream);
    cache.wait_until_ready().await.expect("Lease cache");
    cache
}

/// The holders of `leases` release them at once, as client-go releases (holder "", 1 s, renewTime
/// now), with a resourceVersion precondition; a conflict is retried on a fresh read.
async fn release(api: &Api<Lease>, leases: Vec<Lease>) {
    futures::stream::iter(leases)
        .for_each_concurrent(HOLDER_WRITERS, |mut lease| {
            let api = api.clone();
            async move {
                let name = lease.metadata.name.clone().unwrap_or_default();
                loop {
                    if let Some(spec) = lease.spec.as_mut() {
                        spec.holder_identity = Some(String::new());
                        spec.lease_duration_seconds = Some(1);
                        spec.preferred_holder = None;
                        spec.strategy = None;
                        spec.renew_time = Some(now());
                    }
                    match api.replace(&name, &PostParams::default(), &lease).await {
                        Err(kube::Error::Api(status)) if status.is_conflict() => {
                            lease = api.get(&name).await.expect("get Lease");
                        }
                        result => {
                            result.expect("release");
                            return;
                        }
                    }
                }
            }
        })
        .await;
}

/// Waits until `n` Leases in the bench's watch cache satisfy `done`, for at most `CONCLAVE_BENCH_WAIT_SECS` (default 600);
/// returns the time it took, or panics (which kills the controller, see [`Controller`]).
async fn wait_leases(
    cache: &LeaseCache,
    n: usize,
    what: &str,
    done: impl Fn(&LeaseRecord) -> bool,
) -> Duration {
    let limit = Duration::from_secs(env_u64("CONCLAVE_BENCH_WAIT_SECS", 600));
    let start = Instant::now();
    loop {
        let count = cache
            .state()
            .iter()
            .map(|lease| lease_record(lease))
            .filter(&done)
            .count();
        if count >= n {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "only {count}/{n} Leases {what} after {} s",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `conclave run` child process, killed (and reaped) when dropped: a bench that fails panics,
/// and the unwinding drops the guard, so no controller is left running after it.
struct Controller {
    child: std::process::Child,
    /// Where its /metrics answers.
    metrics: SocketAddr,
}

impl Controller {
    /// The controller's CPU, memory and counters now.
    async fn snapshot(&self) -> Snapshot {
        snapshot(self.child.id(), self.metrics).await
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the bench runs `conclave run`: the same flags every time it starts one.
struct ControllerRun {
    kubeconfig: PathBuf,
    namespace: String,
    lease_secs: i32,
    workers: u64,
}

impl ControllerRun {
    /// The `conclave` binary the bench runs: `CONCLAVE_BENCH_CONCLAVE`, or the one cargo built
    /// with the bench.
    fn binary() -> PathBuf {
        std::env::var_os("CONCLAVE_BENCH_CONCLAVE")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_conclave").into())
            .into()
    }

    /// Starts [`ControllerRun::binary`] (see [`ControllerRun::start_binary`]).
    async fn start(&self) -> Controller {
        self.start_binary(&Self::binary()).await
    }

    /// Starts `binary run --mode all` (its /metrics on a fresh port) and waits until it is
    /// active, for at most 120 s.
    async fn start_binary(&self, binary: &Path) -> Controller {
        let metrics = free_port();
        let mut command = std::process::Command::new(binary);
        command.arg("run");
        if let Some(plugins) = std::env::var_os("CONCLAVE_BENCH_PLUGINS") {
            command.arg("--plugins").arg(plugins);
        }
        let child = command
            .args([
                "--kubeconfig",
                self.kubeconfig.to_str().unwrap(),
                "--mode",
                "all",
                "--namespace",
                &self.namespace,
                "--controller-namespace",
                "kube-system",
                "--identity",
                "bench",
                "--metrics-addr",
                &metrics.to_string(),
                "--ack-window",
                &format!("{}s", ACK_WINDOW.as_secs()),
                "--lease-duration-seconds",
                &self.lease_secs.to_string(),
                "--workers",
                &self.workers.to_string(),
            ])
            .env(
                "RUST_LOG",
                std::env::var("CONCLAVE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("conclave run starts");
        let controller = Controller { child, metrics };
        let started = Instant::now();
        while !metrics_text(metrics)
            .await
            .is_ok_and(|t| t.lines().any(|l| l == "conclave_active 1"))
        {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the controller did not become active"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        controller
    }
}

/// The API server the bench runs against, kept alive until the bench ends: the in-process
/// emulator (default), or with `CONCLAVE_BENCH_SERVER=kube` the real etcd + kube-apiserver of
/// `tests/kube` (killed when dropped), so the controller's limits are measured apart from the
/// emulator's.
enum Server {
    Emulator(conclave_emulator::RunningEmulator),
    Kube {
        plane: Box<ControlPlane>,
        /// The hold that keeps the built-in election controller passive; `None` while it elects.
        builtin: Option<BuiltinControllerHold>,
    },
}

impl Server {
    /// Starts the server; returns it, a client, the kubeconfig for `conclave run` and the
    /// namespace of the bench's objects. `None` when the real server's binaries are missing.
    async fn start(dir: &Path) -> Option<(Self, Client, PathBuf, String)> {
        let kubeconfig = dir.join("kubeconfig");
        if std::env::var("CONCLAVE_BENCH_SERVER").is_ok_and(|s| s == "kube") {
            let plane = ControlPlane::start().await.expect("control plane")?;
            // Only Conclave elects: the built-in election controller is made passive.
            let builtin = plane
                .hold_builtin_controller_lease()
                .await
                .expect("built-in controller passive");
            let client = plane.client().await.expect("client");
            let ns = plane.namespace("scale").await.expect("namespace");
            std::fs::copy(plane.kubeconfig_path(), &kubeconfig).expect("kubeconfig");
            let server = Self::Kube {
                plane: Box::new(plane),
                builtin: Some(builtin),
            };
            return Some((server, client, kubeconfig, ns));
        }
        // The emulator's default watch history (10,000 changes), as a user runs it: a watch that
        // falls further behind gets 410 Gone and relists. A history of 200,000 changes, as this
        // bench used to keep, held 1.6 GB at 5,000 Leases.
        let emulator = Emulator::start(EmulatorConfig::default())
            .await
            .expect("emulator");
        emulator.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let client = Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
        Some((
            Self::Emulator(emulator),
            client,
            kubeconfig,
            "default".into(),
        ))
    }

    fn name(&self) -> String {
        match self {
            Self::Emulator(emulator) => format!("the emulator at {}", emulator.url()),
            Self::Kube { plane, .. } => format!(
                "kube-apiserver {} at {}",
                conclave_testkit::KUBERNETES_VERSION,
                plane.server_url()
            ),
        }
    }
}

/// Who elects in one phase of the side-by-side steady state (`CONCLAVE_BENCH_BUILTIN=1`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elector {
    /// `conclave run`, the built-in controller held passive.
    Conclave,
    /// Nobody: Conclave stopped, the built-in controller still held passive. What the renewals
    /// alone cost, the baseline of the other two.
    Nobody,
    /// kube-apiserver's built-in controller (its hold released), Conclave stopped.
    Builtin,
}

impl Elector {
    /// The phases of one round, in order.
    const ROUND: [Self; 3] = [Self::Conclave, Self::Nobody, Self::Builtin];

    fn name(self) -> &'static str {
        match self {
            Self::Conclave => "Conclave",
            Self::Nobody => "no controller",
            Self::Builtin => "built-in controller",
        }
    }
}

/// CPU seconds of kube-apiserver, etcd and the bench process, and kube-apiserver's own count of
/// writes (`apiserver_request_total`, verbs POST, PUT, PATCH and DELETE) to Leases and to
/// LeaseCandidates, whoever made them, at one moment.
#[derive(Clone, Copy)]
struct ServerSample {
    at: Instant,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    bench_cpu: f64,
    lease_writes: f64,
    candidate_writes: f64,
}

impl ServerSample {
    async fn take(plane: &ControlPlane) -> Self {
        let text = plane
            .apiserver_metrics()
            .await
            .expect("kube-apiserver /metrics");
        let writes = |resource: &str| -> f64 {
            let resource = format!("resource=\"{resource}\"");
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .map(|verb| {
                    let verb = format!("verb=\"{verb}\"");
                    sum(&text, "apiserver_request_total", &[&resource, &verb])
                })
                .sum()
        };
        Self {
            at: Instant::now(),
            apiserver_cpu: usage(plane.apiserver_pid()).0,
            etcd_cpu: usage(plane.etcd_pid()).0,
            bench_cpu: usage(std::process::id()).0,
            lease_writes: writes("leases"),
            candidate_writes: writes("leasecandidates"),
        }
    }
}

/// What [`LeaseMonitor`] saw of the bench's Leases in one window.
#[derive(Clone, Copy, Default)]
struct LeaseWatch {
    /// The most Leases without a live holder (none, or expired) at one look.
    most_leaderless: usize,
    /// The longest one Lease went without a live holder, up to the window's end.
    longest_leaderless: Duration,
    /// How often a Lease's holder differed from the previous look.
    holder_changes: u64,
}

/// Looks at every Lease in the bench's cache every [`LeaseMonitor::EVERY`] and keeps what it saw
/// as a [`LeaseWatch`] per window. Stops when dropped.
struct LeaseMonitor {
    stats: Arc<Mutex<LeaseWatch>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseMonitor {
    /// How often it looks.
    const EVERY: Duration = Duration::from_millis(250);

    fn start(cache: LeaseCache) -> Self {
        let stats: Arc<Mutex<LeaseWatch>> = Arc::default();
        let task = tokio::spawn({
            let stats = Arc::clone(&stats);
            async move {
                // Per Lease: the holder last seen, and since when it has had no live holder.
                let mut seen: HashMap<String, (String, Option<Instant>)> = HashMap::new();
                loop {
                    tokio::time::sleep(Self::EVERY).await;
                    let (now, now_micros) = (Instant::now(), micros_now());
                    let mut stats = stats.lock().unwrap();
                    let mut leaderless = 0;
                    for lease in cache.state() {
                        let record = lease_record(&lease);
                        let holder = record.holder().unwrap_or_default().to_owned();
                        let live = !holder.is_empty()
                            && record
                                .expires_at()
                                .is_some_and(|at| at.as_micros() > now_micros);
                        let (last, since) = seen
                            .entry(record.name)
                            .or_insert_with(|| (holder.clone(), None));
                        if *last != holder {
                            stats.holder_changes += 1;
                            *last = holder;
                        }
                        if live {
                            *since = None;
                        } else {
                            leaderless += 1;
                            let since = *since.get_or_insert(now);
                            stats.longest_leaderless = stats.longest_leaderless.max(now - since);
                        }
                    }
                    stats.most_leaderless = stats.most_leaderless.max(leaderless);
                }
            }
        });
        Self { stats, task }
    }

    /// What it saw since the last call; starts a new window.
    fn new_window(&self) -> LeaseWatch {
        std::mem::take(&mut *self.stats.lock().unwrap())
    }
}

impl Drop for LeaseMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Leases held, alive, by their best candidate (`l<i>-c0`, the oldest emulation version).
fn held_by_best(cache: &LeaseCache) -> usize {
    let now_micros = micros_now();
    cache
        .state()
        .iter()
        .map(|lease| lease_record(lease))
        .filter(|r| {
            r.holder().is_some_and(|h| h.ends_with("-c0"))
                && r.expires_at().is_some_and(|at| at.as_micros() > now_micros)
        })
        .count()
}

/// The load average (1, 5 and 15 minutes).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One measured phase of the side-by-side steady state.
struct Phase {
    round: usize,
    elector: Elector,
    /// From the start of the switch until the new elector elects (Conclave active, the built-in
    /// controller leading).
    switch: Duration,
    /// The Leases from the start of the switch to the start of the window.
    switching: LeaseWatch,
    from: ServerSample,
    to: ServerSample,
    /// Conclave at the start and end of the window, when it runs.
    conclave: Option<(Snapshot, Snapshot)>,
    /// What the holders did in the window.
    holders: HolderStats,
    pings_answered: u64,
    /// The Leases in the window.
    leases: LeaseWatch,
    held_by_best: usize,
    load: String,
}

impl Phase {
    /// Percent of one core over the window.
    fn pct(&self, cpu_seconds: f64) -> f64 {
        100.0 * cpu_seconds / (self.to.at - self.from.at).as_secs_f64()
    }

    fn apiserver(&self) -> f64 {
        self.pct(self.to.apiserver_cpu - self.from.apiserver_cpu)
    }

    fn etcd(&self) -> f64 {
        self.pct(self.to.etcd_cpu - self.from.etcd_cpu)
    }

    /// The elector's own process (0 for the built-in controller, which runs in kube-apiserver).
    fn own(&self) -> f64 {
        self.conclave
            .map_or(0.0, |(from, to)| self.pct(to.cpu - from.cpu))
    }
}

/// The side-by-side steady state on the real server (`CONCLAVE_BENCH_BUILTIN=1`): the same
/// Leases, renewed by the same holders, elected in turn by Conclave, by nobody and by
/// kube-apiserver's built-in controller, each phase measured over the same window after the same
/// settling time.
struct SideBySide<'a> {
    plane: &'a ControlPlane,
    builtin: &'a mut Option<BuiltinControllerHold>,
    run: &'a ControllerRun,
    cache: &'a LeaseCache,
    holders: &'a Holders,
    pings_answered: &'a AtomicU64,
    window: Duration,
    settle: Duration,
    rounds: usize,
}

impl SideBySide<'_> {
    /// Runs the rounds of [`Elector::ROUND`], the first starting with `controller` already
    /// electing; returns every phase measured.
    async fn run(self, mut controller: Option<Controller>) -> Vec<Phase> {
        let monitor = LeaseMonitor::start(self.cache.clone());
        let mut phases = Vec::new();
        for round in 1..=self.rounds {
            for elector in Elector::ROUND {
                progress(&format!("round {round}: {}", elector.name()));
                monitor.new_window();
                let switch_start = Instant::now();
                match elector {
                    Elector::Conclave if controller.is_none() => {
                        *self.builtin = Some(
                            self.plane
                                .hold_builtin_controller_lease()
                                .await
                                .expect("built-in controller passive"),
                        );
                        controller = Some(self.run.start().await);
                    }
                    Elector::Conclave => {}
                    Elector::Nobody => controller = None,
                    Elector::Builtin => {
                        self.builtin
                            .take()
                            .expect("the built-in controller is held")
                            .release()
                            .await
                            .expect("built-in controller hold released");
                        conclave_testkit::wait_builtin_leading(self.plane)
                            .await
                            .expect("built-in controller leads");
                    }
                }
                let switch = switch_start.elapsed();
                tokio::time::sleep(self.settle).await;
                let switching = monitor.new_window();
                let from = ServerSample::take(self.plane).await;
                let conclave_from = match &controller {
                    Some(c) => Some(c.snapshot().await),
                    None => None,
                };
                let pings_from = self.pings_answered.load(Ordering::Relaxed);
                let holders_from = self.holders.new_window();
                tokio::time::sleep(self.window).await;
                let holders = self.holders.stats() - holders_from;
                let to = ServerSample::take(self.plane).await;
                let conclave = match (&controller, conclave_from) {
                    (Some(c), Some(from)) => Some((from, c.snapshot().await)),
                    _ => None,
                };
                phases.push(Phase {
                    round,
                    elector,
                    switch,
                    switching,
                    from,
                    to,
                    conclave,
                    holders,
                    pings_answered: self.pings_answered.load(Ordering::Relaxed) - pings_from,
                    leases: monitor.new_window(),
                    held_by_best: held_by_best(self.cache),
                    load: load(),
                });
            }
        }
        phases
    }
}

/// Prints the side-by-side phases and, per controller and round, its cost: kube-apiserver's CPU
/// in its phase minus the same round's no-controller phase, plus its own process's CPU.
fn print_side_by_side(phases: &[Phase]) {
    println!(
        "| round | phase | switch: until electing; Leases from the switch to the window: most leaderless at once / longest leaderless / holder changes | kube-apiserver CPU | etcd CPU | bench CPU (holders, ping answers) | writes kube-apiserver served: Leases / LeaseCandidates | holders: renewals, failed (slowest slice) | pings answered | Conclave CPU (RSS MiB) | Conclave: Lease writes / strategy calls | Leases in the window: most leaderless / longest / holder changes; held by the best | load at the end |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in phases {
        let (conclave_cpu, conclave_counts) = match p.conclave {
            Some((from, to)) => {
                let c = to.counters - from.counters;
                (
                    format!("{:.1}% ({:.1})", p.own(), to.rss),
                    format!("{:.0} / {:.0}", c.lease_writes, c.strategy_calls),
                )
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {} | {} | {:.1} s; {} / {:.1} s / {} | {:.1}% | {:.1}% | {:.1}% | {:.0} / {:.0} | {}, {} ({:.2} s) | {} | {conclave_cpu} | {conclave_counts} | {} / {:.1} s / {}; {} | {} |",
            p.round,
            p.elector.name(),
            p.switch.as_secs_f64(),
            p.switching.most_leaderless,
            p.switching.longest_leaderless.as_secs_f64(),
            p.switching.holder_changes,
            p.apiserver(),
            p.etcd(),
            p.pct(p.to.bench_cpu - p.from.bench_cpu),
            p.to.lease_writes - p.from.lease_writes,
            p.to.candidate_writes - p.from.candidate_writes,
            p.holders.renewals,
            p.holders.failures,
            p.holders.slowest_slice.as_secs_f64(),
            p.pings_answered,
            p.leases.most_leaderless,
            p.leases.longest_leaderless.as_secs_f64(),
            p.leases.holder_changes,
            p.held_by_best,
            p.load,
        );
    }
    println!();
    println!(
        "| controller | round | kube-apiserver CPU in its phase | in the round's no-controller phase | difference | its own process | cost | etcd difference |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for elector in [Elector::Conclave, Elector::Builtin] {
        for p in phases.iter().filter(|p| p.elector == elector) {
            let Some(baseline) = phases
                .iter()
                .find(|b| b.round == p.round && b.elector == Elector::Nobody)
            else {
                continue;
            };
            let difference = p.apiserver() - baseline.apiserver();
            println!(
                "| {} | {} | {:.1}% | {:.1}% | {:+.1}% | {:.1}% | **{:.1}%** | {:+.1}% |",
                elector.name(),
                p.round,
                p.apiserver(),
                baseline.apiserver(),
                difference,
                p.own(),
                difference + p.own(),
                p.etcd() - baseline.etcd(),
            );
        }
    }
}

/// Tells on stderr which phase starts (a run at 10,000 Leases takes minutes), so whoever watches
/// the run, or profiles it, knows where it is.
fn progress(phase: &str) {
    eprintln!("bench: {phase}");
}

/// A local port that was free a moment ago, for the controller's /metrics.
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// One row of the table.
fn row(phase: &str, wall: &str, from: &Snapshot, to: &Snapshot, window: Option<Duration>) {
    let cpu = to.cpu - from.cpu;
    let cpu = match window {
        Some(w) => format!(
            "{cpu:.2} ({:.1}% of one core)",
            100.0 * cpu / w.as_secs_f64()
        ),
        None => format!("{cpu:.2}"),
    };
    let c = to.counters - from.counters;
    println!(
        "| {phase} | {wall} | {cpu} | {:.1} ({:.1}) | {:.0} ({:.0}: {:.0} / {:.0} / {:.0}) | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} |",
        to.rss,
        to.peak_rss,
        c.lease_writes,
        c.lease_conflicts,
        c.take_over_conflicts,
        c.preempt_conflicts,
        c.clear_conflicts,
        c.take_overs,
        c.preemptions,
        c.preferred_cleared,
        c.pings,
        c.strategy_calls
    );
}

/// The Leases, candidates and timers every phase works on, and the bench's watch cache of the
/// Leases.
struct Bench {
    leases: Api<Lease>,
    candidates: Api<LeaseCandidate>,
    cache: LeaseCache,
    namespace: String,
    n: usize,
    renew_every: Duration,
    lease_secs: i32,
}

impl Bench {
    /// Holders of every Lease (see [`Holders::start`]).
    fn holders(&self) -> Holders {
        Holders::start(
            self.leases.clone(),
            self.cache.clone(),
            self.renew_every,
            self.lease_secs,
        )
    }

    /// Holders of the Leases `renews` picks (see [`Holders::start_renewing`]).
    fn holders_renewing(&self, renews: Renews) -> Holders {
        Holders::start_renewing(
            self.leases.clone(),
            self.cache.clone(),
            self.renew_every,
            self.lease_secs,
            renews,
        )
    }

    /// The Lease `name` as the bench's cache has it now.
    fn cached(&self, name: &str) -> Option<LeaseRecord> {
        self.cache
            .get(&reflector::ObjectRef::new(name).within(&self.namespace))
            .map(|lease| lease_record(&lease))
    }
}

/// What an expiry storm measured.
struct ExpiryStorm {
    /// The controller when the holders had stopped, and once every Lease was re-elected.
    from: Snapshot,
    to: Snapshot,
    /// From the first Lease's expiry to the last's.
    spread: Duration,
    /// From the first and from the last expiry until every Lease was re-elected.
    after_first: Duration,
    after_last: Duration,
}

impl ExpiryStorm {
    fn wall(&self) -> String {
        format!(
            "{:.1} s after the first expiry, {:.1} s after the last",
            self.after_first.as_secs_f64(),
            self.after_last.as_secs_f64()
        )
    }
}

/// Microseconds as a duration (0 when negative).
fn micros(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// Expiry storm, the holders already stopped: the holders of the steady state renew no more;
/// every Lease expires leaseDurationSeconds after its last renewal, and only the controller's
/// expiry timers can start the re-elections. Each holder the controller elects then renews, as a
/// new leader does, so a Lease elected early in the storm does not expire again before the storm
/// ends. Returns once every Lease is re-elected, no holder renewing.
async fn expiry_storm(bench: &Bench, controller: &Controller) -> ExpiryStorm {
    let stopped = micros_now();
    let from = controller.snapshot().await;
    let expiries: Arc<HashMap<String, i64>> = Arc::new(
        bench
            .leases
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .map(lease_record)
            .map(|r| {
                let at = r.expires_at().expect("every Lease is held").as_micros();
                (r.name, at)
            })
            .collect(),
    );
    let new_leaders = bench.holders_renewing({
        let expiries = Arc::clone(&expiries);
        Arc::new(move |r: &LeaseRecord| {
            expiries
                .get(&r.name)
                .is_some_and(|expiry| r.renew_time.is_some_and(|t| t.as_micros() >= *expiry))
        })
    });
    let first_expiry = *expiries.values().min().expect("Leases");
    let last_expiry = *expiries.values().max().expect("Leases");
    wait_leases(&bench.cache, bench.n, "re-elected after expiry", |r| {
        let renewed = r.renew_time.map_or(0, |t| t.as_micros());
        let expiry = expiries[&r.name];
        assert!(
            renewed <= stopped || renewed >= expiry,
            "Lease {} was written after the holders stopped but before it expired",
            r.name
        );
        r.holder().is_some() && renewed >= expiry
    })
    .await;
    let reelected = micros_now();
    let to = controller.snapshot().await;
    new_leaders.stop().await;
    ExpiryStorm {
        from,
        to,
        spread: micros(last_expiry - first_expiry),
        after_first: micros(reelected - first_expiry),
        after_last: micros(reelected - last_expiry),
    }
}

/// What a release storm measured.
struct ReleaseStorm {
    /// The controller just before the releases, and once every Lease was re-elected.
    from: Snapshot,
    to: Snapshot,
    /// How long the bench took to write every release.
    released_in: Duration,
    /// From the end of the releases until every Lease was re-elected.
    settled: Duration,
}

impl ReleaseStorm {
    fn wall(&self) -> String {
        format!("{:.1} s after the last release", self.settled.as_secs_f64())
    }
}

/// Release storm, no holder renewing: the holders renew again until every candidate is stale (no
/// ping answered for longer than the ack window), then all release at once. The holders the
/// controller elects then renew, as in the expiry storm. Returns once every Lease is re-elected,
/// no holder renewing.
async fn release_storm(bench: &Bench, controller: &Controller) -> ReleaseStorm {
    let holders = bench.holders();
    tokio::time::sleep(ACK_WINDOW + Duration::from_secs(1)).await;
    holders.stop().await;
    let from = controller.snapshot().await;
    let t1 = micros_now();
    let release_start = Instant::now();
    let new_leaders = bench.holders_renewing(Arc::new(move |r: &LeaseRecord| {
        r.renew_time.is_some_and(|t| t.as_micros() >= t1)
    }));
    let list = bench
        .leases
        .list(&ListParams::default())
        .await
        .expect("list");
    release(&bench.leases, list.items).await;
    let released_in = release_start.elapsed();
    let settled = wait_leases(&bench.cache, bench.n, "re-elected after release", |r| {
        r.holder().is_some() && r.renew_time.is_some_and(|t| t.as_micros() >= t1)
    })
    .await;
    let to = controller.snapshot().await;
    new_leaders.stop().await;
    ReleaseStorm {
        from,
        to,
        released_in,
        settled,
    }
}

/// Which `conclave` binary a turn of the before/after comparison runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Binary {
    /// `CONCLAVE_BENCH_BEFORE`.
    Before,
    /// The one the bench runs otherwise (`CONCLAVE_BENCH_CONCLAVE`, or cargo's).
    After,
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Self::Before => "before",
            Self::After => "after",
        }
    }
}

/// One phase of one binary's turn, as the before/after table shows it.
struct Measured {
    phase: &'static str,
    round: usize,
    binary: Binary,
    /// The phase's own figure: wall time or latencies.
    figure: String,
    from: Snapshot,
    to: Snapshot,
    /// The window the CPU is a share of, for a phase of fixed length.
    window: Option<Duration>,
    load: String,
}

/// The order of the before/after table's phases.
const PHASES: [&str; 6] = [
    "switch: until active, all Leases held, settled",
    "steady state",
    "expiry storm",
    "release storm",
    "pre-emption latency",
    "crash failover latency",
];

/// The p-th quantile (0 < p <= 1) of `sorted`, nearest rank.
fn quantile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 / p99 / max of `latencies`, in milliseconds, and how many.
fn latency_figure(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "p50 {:.0} ms / p99 {:.0} ms / max {:.0} ms ({} Leases)",
        ms(quantile(&latencies, 0.5)),
        ms(quantile(&latencies, 0.99)),
        ms(*latencies.last().expect("a sample")),
        latencies.len()
    )
}

/// Polls the bench's cache every 20 ms until `done` has an answer for every name in `names`;
/// returns the answers in the order of `names`, or panics after `CONCLAVE_BENCH_WAIT_SECS`.
async fn wait_each<T>(
    bench: &Bench,
    names: &[String],
    what: &str,
    done: impl Fn(&LeaseRecord) -> Option<T>,
) -> Vec<T> {
    let limit = Duration::from_secs(env_u64("CONCLAVE_BENCH_WAIT_SECS", 600));
    let start = Instant::now();
    let mut answers: Vec<Option<T>> = names.iter().map(|_| None).collect();
    loop {
        for (name, answer) in names.iter().zip(&mut answers) {
            if answer.is_none() {
                *answer = bench.cached(name).and_then(|r| done(&r));
            }
        }
        let left = answers.iter().filter(|a| a.is_none()).count();
        if left == 0 {
            return answers.into_iter().flatten().collect();
        }
        assert!(
            start.elapsed() < limit,
            "{left}/{} sampled Leases not {what} after {} s",
            names.len(),
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pre-emption latency, the holders renewing: on each sampled Lease a better candidate (an older
/// emulation version than the three others) is created; the time from its creation to the
/// Lease's holder being it, by the take-over's acquireTime (the holders step down when
/// preferredHolder names it). Then the new candidates are deleted and their Leases released, so
/// the best of the three first candidates holds them again and the next phase starts from the
/// same shape. Returns the latencies.
async fn preemption(bench: &Bench, sample: &[String], tag: &str) -> Vec<Duration> {
    let created: Vec<(String, i64)> = futures::stream::iter(sample)
        .map(|lease| async move {
            let name = format!("{lease}-{tag}");
            let mut better = candidate(&bench.namespace, 0, 0);
            better.metadata.name = Some(name.clone());
            if let Some(spec) = better.spec.as_mut() {
                spec.lease_name.clone_from(lease);
                spec.emulation_version = Some("1.34.0".into());
            }
            let at = micros_now();
            bench
                .candidates
                .create(&PostParams::default(), &better)
                .await
                .expect("create the better candidate");
            (name, at)
        })
        .buffered(CANDIDATE_CREATORS)
        .collect()
        .await;
    let by_lease: HashMap<&str, &(String, i64)> =
        sample.iter().map(String::as_str).zip(&created).collect();
    let latencies = wait_each(bench, sample, "held by the better candidate", |r| {
        let (name, at) = by_lease.get(r.name.as_str())?;
        (r.holder() == Some(name.as_str()))
            .then(|| micros(r.acquire_time.map_or(0, |t| t.as_micros()) - at))
    })
    .await;
    futures::stream::iter(&created)
        .for_each_concurrent(CANDIDATE_CREATORS, |(name, _)| async move {
            bench
                .candidates
                .delete(name, &DeleteParams::default())
                .await
                .expect("delete the better candidate");
        })
        .await;
    let held: Vec<Lease> = futures::stream::iter(sample)
        .map(|name| bench.leases.get(name))
        .buffered(CANDIDATE_CREATORS)
        .map(|lease| lease.expect("get Lease"))
        .collect()
        .await;
    release(&bench.leases, held).await;
    wait_each(bench, sample, "held again by a first candidate", |r| {
        let live = r
            .expires_at()
            .is_some_and(|at| at.as_micros() > micros_now());
        (live && r.holder().is_some_and(|h| !h.ends_with(tag))).then_some(())
    })
    .await;
    latencies
}

/// Crash failover latency, the holders running: once every sampled Lease's holder has renewed it
/// since its term began (so that the crash is that of a leader that renewed, and the controller
/// takes the ordinary expiry path, not that of a holder who never renewed what it was given),
/// they stop, and start again except on the sampled Leases, whose holders crashed; the time from
/// each sampled Lease's expiry (its last renewTime + leaseDurationSeconds) to the next holder
/// written (the take-over's acquireTime). Each holder the controller elects then renews. Returns
/// the latencies and the holders, renewing every Lease.
async fn crash_failover(
    bench: &Bench,
    holders: Holders,
    sample: &[String],
) -> (Vec<Duration>, Holders) {
    wait_each(bench, sample, "renewed by its holder", |r| {
        r.holder()?;
        (r.renew_time? > r.acquire_time?).then_some(())
    })
    .await;
    holders.stop().await;
    let crashed = micros_now();
    let holders = bench.holders_renewing({
        let sample: Vec<String> = sample.to_vec();
        Arc::new(move |r: &LeaseRecord| {
            !sample.contains(&r.name) || r.renew_time.is_some_and(|t| t.as_micros() > crashed)
        })
    });
    let expiries: Vec<i64> = futures::stream::iter(sample)
        .map(|name| bench.leases.get(name))
        .buffered(CANDIDATE_CREATORS)
        .map(|lease| {
            lease_record(&lease.expect("get Lease"))
                .expires_at()
                .expect("every sampled Lease is held")
                .as_micros()
        })
        .collect()
        .await;
    let written = wait_each(bench, sample, "re-elected after the crash", |r| {
        r.holder()?;
        r.acquire_time
            .map(|t| t.as_micros())
            .filter(|&t| t > crashed)
    })
    .await;
    let latencies = written
        .iter()
        .zip(&expiries)
        .map(|(written, expiry)| micros(written - expiry))
        .collect();
    holders.stop().await;
    (latencies, bench.holders())
}

/// The before/after comparison (`CONCLAVE_BENCH_BEFORE`): on the same server, Leases, candidates
/// and holders, the two binaries take turns (before, after, before, after ...), one running at a
/// time, each turn running the same phases.
struct BeforeAfter<'a> {
    bench: &'a Bench,
    run: &'a ControllerRun,
    before: PathBuf,
    after: PathBuf,
    /// The sampled Leases of the latency phases.
    sample: Vec<String>,
    steady: Duration,
    settle: Duration,
    rounds: usize,
}

impl BeforeAfter<'_> {
    /// Runs the rounds, the holders renewing every Lease and `controller` (the after binary, which
    /// ran the initial elections) electing; returns every phase measured.
    async fn run(self, controller: Controller, mut holders: Holders) -> Vec<Measured> {
        let mut controller = Some(controller);
        let mut measured = Vec::new();
        for round in 1..=self.rounds {
            for binary in [Binary::Before, Binary::After] {
                let mut phase = |phase, figure, from, to, window| {
                    measured.push(Measured {
                        phase,
                        round,
                        binary,
                        figure,
                        from,
                        to,
                        window,
                        load: load(),
                    });
                };
                progress(&format!("round {round}: {}, switching", binary.name()));
                // The running controller stops before the other starts: one elects at a time.
                drop(controller.take());
                let switch_start = Instant::now();
                let c = self.run.start_binary(match binary {
                    Binary::Before => &self.before,
                    Binary::After => &self.after,
                });
                let c = c.await;
                let started = c.snapshot().await;
                let now = micros_now();
                wait_leases(
                    &self.bench.cache,
                    self.bench.n,
                    "held after the switch",
                    |r| {
                        r.holder().is_some()
                            && r.expires_at().is_some_and(|at| at.as_micros() > now)
                    },
                )
                .await;
                tokio::time::sleep(self.settle).await;
                phase(
                    PHASES[0],
                    format!("{:.1} s", switch_start.elapsed().as_secs_f64()),
                    started,
                    c.snapshot().await,
                    None,
                );

                progress(&format!("round {round}: {}, steady state", binary.name()));
                let from = c.snapshot().await;
                let stats_from = holders.new_window();
                tokio::time::sleep(self.steady).await;
                let stats = holders.stats() - stats_from;
                phase(
                    PHASES[1],
                    format!(
                        "{} s: {} renewals, {} failed",
                        self.steady.as_secs(),
                        stats.renewals,
                        stats.failures
                    ),
                    from,
                    c.snapshot().await,
                    Some(self.steady),
                );

                progress(&format!("round {round}: {}, expiry storm", binary.name()));
                holders.stop().await;
                let storm = expiry_storm(self.bench, &c).await;
                phase(PHASES[2], storm.wall(), storm.from, storm.to, None);

                progress(&format!("round {round}: {}, release storm", binary.name()));
                let storm = release_storm(self.bench, &c).await;
                phase(PHASES[3], storm.wall(), storm.from, storm.to, None);

                progress(&format!("round {round}: {}, pre-emption", binary.name()));
                holders = self.bench.holders();
                let from = c.snapshot().await;
                let tag = format!("r{round}-{}", binary.name());
                let latencies = preemption(self.bench, &self.sample, &tag).await;
                phase(
                    PHASES[4],
                    latency_figure(latencies),
                    from,
                    c.snapshot().await,
                    None,
                );

                progress(&format!("round {round}: {}, crash failover", binary.name()));
                let from = c.snapshot().await;
                let (latencies, renewing) = crash_failover(self.bench, holders, &self.sample).await;
                holders = renewing;
                phase(
                    PHASES[5],
                    latency_figure(latencies),
                    from,
                    c.snapshot().await,
                    None,
                );
                controller = Some(c);
            }
        }
        drop(controller);
        holders.stop().await;
        measured
    }
}

/// Prints the before/after table: per phase, round and binary, next to each other.
fn print_before_after(measured: &[Measured]) {
    println!(
        "| phase | round | binary | wall time / latency | controller CPU (s) | controller RSS at end (peak) (MiB) | Lease writes (conflicts) | take-overs / pre-emptions / preferredHolder cleared | pings | strategy calls | load at the end |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for phase in PHASES {
        for m in measured.iter().filter(|m| m.phase == phase) {
            let cpu = m.to.cpu - m.from.cpu;
            let cpu = match m.window {
                Some(w) => format!("{cpu:.2} ({:.1}%)", 100.0 * cpu / w.as_secs_f64()),
                None => format!("{cpu:.2}"),
            };
            let c = m.to.counters - m.from.counters;
            println!(
                "| {} | {} | {} | {} | {cpu} | {:.1} ({:.1}) | {:.0} ({:.0}) | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} | {} |",
                m.phase,
                m.round,
                m.binary.name(),
                m.figure,
                m.to.rss,
                m.to.peak_rss,
                c.lease_writes,
                c.lease_conflicts,
                c.take_overs,
                c.preemptions,
                c.preferred_cleared,
                c.pings,
                c.strategy_calls,
                m.load,
            );
        }
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_u64("CONCLAVE_BENCH_LEASES", 1000) as usize;
    let steady = Duration::from_secs(env_u64("CONCLAVE_BENCH_STEADY_SECS", 30));
    let renew_every = Duration::from_secs(env_u64("CONCLAVE_BENCH_RENEW_SECS", 2));
    let lease_secs = i32::try_from(env_u64("CONCLAVE_BENCH_LEASE_SECS", 10)).expect("lease secs");
    let workers = env_u64("CONCLAVE_BENCH_WORKERS", 16);
    let side_by_side = std::env::var("CONCLAVE_BENCH_BUILTIN").is_ok_and(|v| v == "1");
    assert!(
        !side_by_side || std::env::var("CONCLAVE_BENCH_SERVER").is_ok_and(|s| s == "kube"),
        "CONCLAVE_BENCH_BUILTIN=1 compares with kube-apiserver's built-in controller: it needs \
         CONCLAVE_BENCH_SERVER=kube"
    );
    let before = std::env::var_os("CONCLAVE_BENCH_BEFORE").map(PathBuf::from);
    assert!(
        !(side_by_side && before.is_some()),
        "CONCLAVE_BENCH_BUILTIN=1 and CONCLAVE_BENCH_BEFORE are separate runs"
    );
    let sample = (env_u64("CONCLAVE_BENCH_SAMPLE", 100) as usize).clamp(1, n);
    let settle = Duration::from_secs(env_u64("CONCLAVE_BENCH_SETTLE_SECS", 10));
    let rounds = env_u64("CONCLAVE_BENCH_ROUNDS", 2) as usize;
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((mut server, client, kubeconfig, ns)) = Server::start(dir.path()).await else {
        return;
    };
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let pings_answered = Arc::new(AtomicU64::new(0));
    tokio::spawn(answer_pings(
        candidates.clone(),
        Arc::clone(&pings_answered),
    ));

    let run = ControllerRun {
        kubeconfig,
        namespace: ns.clone(),
        lease_secs,
        workers,
    };
    let controller = run.start().await;
    let idle = controller.snapshot().await;
    progress("controller active; creating the candidates");

    // Initial elections; each holder renews from the moment it is elected.
    let bench = Bench {
        leases: leases.clone(),
        candidates: candidates.clone(),
        cache: lease_cache(leases.clone()).await,
        namespace: ns.clone(),
        n,
        renew_every,
        lease_secs,
    };
    let cache = bench.cache.clone();
    let holders = bench.holders();
    let t0 = micros_now();
    let create_start = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(CANDIDATE_CREATORS, |lease| {
            let (candidates, ns) = (candidates.clone(), ns.clone());
            async move {
                for i in 0..3 {
                    candidates
                        .create(&PostParams::default(), &candidate(&ns, lease, i))
                        .await
                        .expect("create candidate");
                }
            }
        })
        .await;
    let created_in = create_start.elapsed();
    let elect = wait_leases(&cache, n, "held", |r| {
        r.holder().is_some() && r.renew_time.is_some_and(|t| t.as_micros() >= t0)
    })
    .await;
    let elected = controller.snapshot().await;
    if side_by_side {
        progress("initial elections done; side by side");
        let Server::Kube { plane, builtin } = &mut server else {
            unreachable!("checked at the start")
        };
        println!(
            "Steady state side by side on kube-apiserver {} at {}: {n} Leases x 3 candidates \
             ({}), holders renew every {} s with a {lease_secs} s Lease; \
             `conclave run --mode all --lease-duration-seconds {lease_secs} --workers {workers}`; \
             {} candidates created in {:.1} s, all Leases held {:.1} s after the first create; \
             each phase settles {} s after its switch, then is measured for {} s; load at the start {}",
            conclave_testkit::KUBERNETES_VERSION,
            plane.server_url(),
            strategy(),
            renew_every.as_secs(),
            n * 3,
            created_in.as_secs_f64(),
            created_in.as_secs_f64() + elect.as_secs_f64(),
            settle.as_secs(),
            steady.as_secs(),
            load(),
        );
        let phases = SideBySide {
            plane,
            builtin,
            run: &run,
            cache: &cache,
            holders: &holders,
            pings_answered: &pings_answered,
            window: steady,
            settle,
            rounds,
        }
        .run(Some(controller))
        .await;
        holders.stop().await;
        print_side_by_side(&phases);
        return;
    }
    if let Some(before) = before {
        progress("initial elections done; before and after");
        println!(
            "Before and after on {}: {n} Leases x 3 candidates ({}), holders \
             renew every {} s with a {lease_secs} s Lease; `conclave run --mode all \
             --lease-duration-seconds {lease_secs} --workers {workers}`; before = {}, after = {}; \
             {rounds} rounds; each turn settles {} s after its switch; latencies over {sample} \
             Leases; {} candidates created in {:.1} s, all Leases held {:.1} s after the first \
             create; load at the start {}",
            server.name(),
            strategy(),
            renew_every.as_secs(),
            before.display(),
            ControllerRun::binary().display(),
            settle.as_secs(),
            n * 3,
            created_in.as_secs_f64(),
            created_in.as_secs_f64() + elect.as_secs_f64(),
            load(),
        );
        let measured = BeforeAfter {
            bench: &bench,
            run: &run,
            before,
            after: ControllerRun::binary(),
            sample: (0..sample)
                .map(|k| format!("l{}", k * n / sample))
                .collect(),
            steady,
            settle,
            rounds,
        }
        .run(controller, holders)
        .await;
        print_before_after(&measured);
        return;
    }
    progress("initial elections done; steady state");
    let steady_start = holders.new_window();

    // Steady state: holders renew, the controller has nothing to write.
    tokio::time::sleep(steady).await;
    let steady_end = controller.snapshot().await;
    let steady_stats = holders.stats() - steady_start;
    holders.stop().await;
    progress("holders stopped; expiry storm");
    let expiry = expiry_storm(&bench, &controller).await;
    progress("expiry storm settled; release storm");
    let release = release_storm(&bench, &controller).await;
    drop(controller);
    let server_name = server.name();
    let embedded_emulator = matches!(server, Server::Emulator(_));
    drop(server);

    println!(
        "Controller on {server_name}: {n} Leases x 3 candidates ({}), `conclave run --mode all \
         --lease-duration-seconds {lease_secs} --workers {workers}`{}; holders renew every {} s",
        strategy(),
        std::env::var("CONCLAVE_BENCH_PLUGINS")
            .map(|dir| format!(" (with `--plugins {dir}`)"))
            .unwrap_or_default(),
        renew_every.as_secs()
    );
    println!(
        "| phase | wall time | controller CPU (s) | controller RSS at end (peak) (MiB) | Lease writes (conflicts: at take-over / pre-emption / clearing) | take-overs / pre-emptions / preferredHolder cleared | pings | strategy calls |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let zero = Snapshot {
        cpu: 0.0,
        rss: 0.0,
        peak_rss: 0.0,
        counters: Counters::default(),
    };
    row("idle (caches synced, no objects)", "-", &zero, &idle, None);
    row(
        &format!(
            "initial elections ({} candidates created in {:.1} s)",
            n * 3,
            created_in.as_secs_f64()
        ),
        &format!(
            "{:.1} s after first create",
            elect.as_secs_f64() + created_in.as_secs_f64()
        ),
        &idle,
        &elected,
        None,
    );
    row(
        &format!(
            "steady state: {} renewals in {} rounds (slowest slice {:.2} s), {} failed, {} step-downs",
            steady_stats.renewals,
            steady_stats.rounds,
            steady_stats.slowest_slice.as_secs_f64(),
            steady_stats.failures,
            steady_stats.step_downs
        ),
        &format!("{} s", steady.as_secs()),
        &elected,
        &steady_end,
        Some(steady),
    );
    row(
        &format!(
            "expiry storm: holders stop, all {n} expire within {:.1} s, all re-elected",
            expiry.spread.as_secs_f64()
        ),
        &expiry.wall(),
        &expiry.from,
        &expiry.to,
        None,
    );
    row(
        &format!(
            "release storm: all {n} released (in {:.1} s), all re-elected",
            release.released_in.as_secs_f64()
        ),
        &release.wall(),
        &release.from,
        &release.to,
        None,
    );
    let (bench_cpu, bench_rss, bench_peak) = usage(std::process::id());
    println!(
        "The bench process ({}holders, ping answers): {bench_cpu:.1} s CPU, RSS {bench_rss:.1} \
         MiB at the end, peak {bench_peak:.1} MiB",
        if embedded_emulator {
            "the embedded emulator, "
        } else {
            ""
        }
    );
}
