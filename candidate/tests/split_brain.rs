//! Split-brain checker: several candidate "processes" (each its own Tokio runtime, so a crash
//! stops everything it runs at once, like kill -9) under a simulated election controller that
//! hands over at random, while processes crash and the API server fails requests or slows down.
//! Each leader records its leadership interval, from observing itself as holder to the end of
//! its drain; no two intervals may overlap, and the leaders' actions must never interleave.

mod common;

use common::*;
use conclave_candidate::{Elector, Term};
use conclave_core::k8s::timestamp;
use conclave_core::time::Timestamp;
use conclave_emulator::{Failure, RunningEmulator, Verb};
use kube::api::PostParams;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
enum Record {
    /// Leadership began at `observed` (when the process saw itself as holder).
    Start {
        who: String,
        term: u64,
        observed: Timestamp,
    },
    /// The leader did one unit of work (global order `seq`).
    Action { who: String, term: u64, seq: u64 },
    /// The term's work stopped (end of drain).
    End {
        who: String,
        term: u64,
        at: Timestamp,
    },
    /// The process was killed; nothing of it runs after `at`.
    Crash { who: String, at: Timestamp },
}

type Log = Arc<Mutex<Vec<Record>>>;

static SEQ: AtomicU64 = AtomicU64::new(0);

fn now() -> Timestamp {
    timestamp(jiff::Timestamp::now())
}

/// xorshift64*, seeded per run (printed, and settable with SPLIT_BRAIN_SEED).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const LEASE: &str = "split";

fn timers(identity: &str) -> conclave_candidate::LeaseConfig {
    let mut config = lease_config(LEASE, identity);
    config.lease_duration = Duration::from_secs(3);
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(300);
    config
}

/// One candidate process.
struct Process {
    who: String,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: CancellationToken,
    done: Option<std::sync::mpsc::Receiver<()>>,
}

impl Process {
    fn start(emulator: &RunningEmulator, who: String, log: Log) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let (done_tx, done) = std::sync::mpsc::channel();
        let (url, token, identity) = (emulator.url(), shutdown.clone(), who.clone());
        runtime.spawn(async move {
            let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
            let elector = Elector::coordinated(client, timers(&identity), candidate_config("1.31.0")).unwrap();
            let lead = move |term: Term| {
                let (log, who) = (log.clone(), identity.clone());
                async move {
                    log.lock().unwrap().push(Record::Start { who: who.clone(), term: term.number(), observed: term.lease().observed_at });
                    let worker = term.clone();
                    term.spawn(async move {
                        let n = worker.number();
                        loop {
                            tokio::select! {
                                () = worker.cancelled() => break,
                                () = tokio::time::sleep(Duration::from_millis(20)) => {
                                    let seq = SEQ.fetch_add(1, Ordering::SeqCst);
                                    log.lock().unwrap().push(Record::Action { who: who.clone(), term: n, seq });
                                }
                            }
                        }
                        // Finishing up takes a moment; still inside the interval.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        log.lock().unwrap().push(Record::End { who, term: n, at: now() });
                    });
                }
            };
            elector.run(lead, token).await.unwrap();
            let _ = done_tx.send(());
        });
        Self {
            who,
            runtime: Some(runtime),
            shutdown,
            done: Some(done),
        }
    }

    /// kill -9: the runtime stops; nothing it ran continues, nothing is released.
    async fn crash(mut self, log: &Log) {
        let runtime = self.runtime.take().unwrap();
        tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
        log.lock().unwrap().push(Record::Crash {
            who: self.who.clone(),
            at: now(),
        });
    }

    /// Graceful shutdown.
    async fn stop(mut self) {
        self.shutdown.cancel();
        let done = self.done.take().unwrap();
        tokio::task::spawn_blocking(move || done.recv_timeout(WAIT))
            .await
            .unwrap()
            .expect("process stops gracefully");
        let runtime = self.runtime.take().unwrap();
        tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
    }
}

/// One step of the simulated controller: elect into a free or expired Lease, or pre-empt.
/// Returns what it did.
async fn control(client: &kube::Client, alive: &[String], rng: &mut Rng) -> &'static str {
    let api = leases(client);
    let Ok(Some(mut lease)) = api.get_opt(LEASE).await else {
        // Missing (first round) or the GET failed by injection.
        let _ = assign_if_missing(client, &alive[rng.below(alive.len() as u64) as usize]).await;
        return "create";
    };
    let record = conclave_core::k8s::lease_record(&lease);
    let spec = lease.spec.get_or_insert_with(Default::default);
    if record.is_free(now()) {
        let next = record
            .preferred()
            .filter(|p| alive.iter().any(|a| a == p))
            .map(str::to_owned)
            .unwrap_or_else(|| alive[rng.below(alive.len() as u64) as usize].clone());
        spec.holder_identity = Some(next);
        spec.lease_duration_seconds = Some(3);
        spec.renew_time = Some(now_micro());
        spec.acquire_time = None;
        spec.preferred_holder = None;
        spec.strategy = Some(STRATEGY.into());
        let _ = api.replace(LEASE, &PostParams::default(), &lease).await;
        return "elect";
    }
    if record.preferred().is_none() && rng.chance(60) {
        let others: Vec<&String> = alive
            .iter()
            .filter(|a| Some(a.as_str()) != record.holder())
            .collect();
        if !others.is_empty() {
            spec.preferred_holder = Some(others[rng.below(others.len() as u64) as usize].clone());
            spec.strategy = Some(STRATEGY.into());
            let _ = api.replace(LEASE, &PostParams::default(), &lease).await;
            return "preempt";
        }
    }
    "wait"
}

async fn assign_if_missing(client: &kube::Client, who: &str) -> Result<(), kube::Error> {
    let lease = k8s_openapi::api::coordination::v1::Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(LEASE.into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(who.into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(now_micro()),
            strategy: Some(STRATEGY.into()),
            ..Default::default()
        }),
    };
    leases(client)
        .create(&PostParams::default(), &lease)
        .await
        .map(|_| ())
}

/// Leadership intervals from the records; an interval without an end runs to `end_of_run`.
fn intervals(
    records: &[Record],
    end_of_run: Timestamp,
) -> Vec<(Timestamp, Timestamp, String, u64)> {
    let mut out = Vec::new();
    for r in records {
        if let Record::Start {
            who,
            term,
            observed,
        } = r
        {
            let end = records.iter().find_map(|e| match e {
                Record::End {
                    who: w,
                    term: t,
                    at,
                } if w == who && t == term => Some(*at),
                _ => None,
            });
            let crash = records.iter().find_map(|e| match e {
                Record::Crash { who: w, at } if w == who => Some(*at),
                _ => None,
            });
            let end = end.or(crash).unwrap_or(end_of_run);
            out.push((*observed, end, who.clone(), *term));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_under_random_handoffs_crashes_and_api_faults() {
    let seed = std::env::var("SPLIT_BRAIN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| jiff::Timestamp::now().as_nanosecond() as u64 | 1);
    eprintln!("split-brain seed {seed} (set SPLIT_BRAIN_SEED to replay)");
    let mut rng = Rng(seed);
    let emulator = emulator().await;
    let client = client(&emulator);
    let log: Log = Arc::default();
    let mut generation = 0;
    let mut procs: Vec<Process> = (0..4)
        .map(|i| {
            generation += 1;
            Process::start(&emulator, format!("p{i}-g{generation}"), log.clone())
        })
        .collect();
    let (mut crashes, mut faults, mut preempts, mut elections) = (0, 0, 0, 0);
    for round in 0..150 {
        let alive: Vec<String> = procs.iter().map(|p| p.who.clone()).collect();
        match control(&client, &alive, &mut rng).await {
            "preempt" => preempts += 1,
            "elect" | "create" => elections += 1,
            _ => {}
        }
        if round > 5 && rng.chance(6) {
            // Crash the holder if it is one of ours, else anyone (also when an injected fault
            // fails the read); start a new incarnation.
            let holder = holder(&client, NS, LEASE).await;
            let index = procs
                .iter()
                .position(|p| Some(&p.who) == holder.as_ref())
                .unwrap_or(rng.below(procs.len() as u64) as usize);
            let victim = procs.swap_remove(index);
            victim.crash(&log).await;
            crashes += 1;
            generation += 1;
            procs.push(Process::start(
                &emulator,
                format!("p{index}-g{generation}"),
                log.clone(),
            ));
        }
        if rng.chance(10) {
            faults += 1;
            if rng.chance(50) {
                let verb = if rng.chance(50) {
                    Verb::Update
                } else {
                    Verb::Get
                };
                emulator.faults().fail_next(
                    verb,
                    "leases",
                    1 + rng.below(4) as usize,
                    Failure::InternalError,
                );
            } else {
                emulator
                    .faults()
                    .set_latency(Duration::from_millis(50 + rng.below(400)));
            }
        } else if rng.chance(20) {
            emulator.faults().clear();
        }
        tokio::time::sleep(Duration::from_millis(50 + rng.below(300))).await;
    }
    emulator.faults().clear();
    for p in procs {
        p.stop().await;
    }
    let records = log.lock().unwrap().clone();
    let spans = intervals(&records, now());
    eprintln!(
        "{} leadership intervals, {elections} elections, {preempts} pre-emptions, {crashes} crashes, {faults} fault injections",
        spans.len()
    );
    assert!(
        spans.len() >= 10,
        "too few terms to mean anything: {}",
        spans.len()
    );
    assert!(crashes >= 1, "no crash was exercised (seed {seed})");
    for pair in spans.windows(2) {
        let ((_, end, a, ta), (start, _, b, tb)) = (&pair[0], &pair[1]);
        assert!(
            end <= start,
            "split brain (seed {seed}): {a} term {ta} ran until {end}, {b} term {tb} started at {start}"
        );
    }
    // Clock-free check: actions of one leader term never interleave with another's.
    let mut actions: Vec<(u64, String, u64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Action { who, term, seq } => Some((*seq, who.clone(), *term)),
            _ => None,
        })
        .collect();
    actions.sort();
    let mut finished: Vec<(String, u64)> = Vec::new();
    let mut current: Option<(String, u64)> = None;
    for (seq, who, term) in actions {
        let key = (who, term);
        if current.as_ref() != Some(&key) {
            assert!(
                !finished.contains(&key),
                "split brain (seed {seed}): {key:?} acted again at {seq} after another leader acted"
            );
            if let Some(previous) = current.replace(key) {
                finished.push(previous);
            }
        }
    }
}
