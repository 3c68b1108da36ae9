//! Split-brain checker with real processes: `conclave run` elects among `conclave candidate`
//! processes, while the test kills candidates with SIGKILL (the holder when it can), stops them
//! with SIGTERM, starts new ones with random versions (so older ones pre-empt the leader) and
//! injects API faults. Every leadership interval (from a `leading` line's `observed` time to its
//! `stopped-leading` line, or to the SIGKILL) must be disjoint from every other.
//!
//! One scenario, run on two servers:
//! - the emulator, whose faults are injected errors on Lease reads and updates, and latency;
//! - a real kube-apiserver + etcd from conclave-testkit (a dedicated control plane, since the
//!   built-in election controller is held passive and the faults stall the whole of it), whose
//!   faults are stalls: kube-apiserver or etcd frozen (SIGSTOP, then SIGCONT) for 0.5–2.5 s, so
//!   renewals sometimes miss the candidates' 2 s renew deadline.
//!
//! Needs the `conclave` binary (`cargo build -p conclave`): `$CONCLAVE_BIN`, else
//! `target/debug/conclave`; prints SKIP without it unless `CONCLAVE_REQUIRE_BIN` is set. The
//! real-server test also prints SKIP when the control-plane binaries are not built
//! (tests/kube/build.sh), unless `CONCLAVE_REQUIRE_KUBE` is set. The seed is printed, and a
//! summary: terms, how they ended, SIGKILLs, SIGTERMs and faults. The loop runs 40 rounds (more,
//! up to 80, until 5 terms have started); each test takes about 70–90 s on a loaded 2-core
//! machine, running side by side.

mod common;

use common::*;
use conclave_emulator::{Failure, Verb};
use conclave_testkit::StallTarget;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const LEASE: &str = "split-procs";
/// Rounds of the randomized loop (about 1.5 s each, plus the action)...
const ROUNDS: usize = 40;
/// ...continued, up to [`MAX_ROUNDS`], until this many terms have started: a run in which the
/// dice rarely hit the leader would check little.
const MIN_TERMS: usize = 5;
const MAX_ROUNDS: usize = 80;

/// (identity, event, term, start-or-end time, stop reason)
type Lines = Arc<Mutex<Vec<(String, String, u64, jiff::Timestamp, String)>>>;

struct Candidate {
    who: String,
    child: Child,
    reader: tokio::task::JoinHandle<()>,
    /// Set once it printed its first line (its signal handler is installed by then).
    started: Arc<std::sync::atomic::AtomicBool>,
}

fn spawn_candidate(
    binary: &Path,
    server: &Server,
    who: &str,
    emulation: &str,
    lines: Lines,
) -> Candidate {
    let mut child = Command::new(binary)
        .args(["candidate", "--kubeconfig"])
        .arg(server.kubeconfig())
        .args(["--namespace", server.namespace()])
        .args(["--lease", LEASE, "--identity", who])
        .args([
            "--binary-version",
            "1.33.0",
            "--emulation-version",
            emulation,
        ])
        .args(["--strategy", STRATEGY, "--work", "20ms"])
        .args([
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "300ms",
        ])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        // Logs (info) next to conclave run's, kept if the test fails.
        .stderr(std::fs::File::create(server.scratch().join(format!("{who}.log"))).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("conclave candidate starts");
    let stdout = child.stdout.take().unwrap();
    let name = who.to_owned();
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = started.clone();
    let reader = tokio::spawn(async move {
        let mut input = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = input.next_line().await {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            let value: serde_json::Value =
                serde_json::from_str(&line).expect("one JSON object per line");
            let event = value["event"].as_str().unwrap_or_default().to_owned();
            let term = value["term"].as_u64().unwrap_or_default();
            let key = if event == "leading" {
                "observed_at"
            } else {
                "at"
            };
            let at: jiff::Timestamp = value[key].as_str().unwrap().parse().unwrap();
            let reason = value["reason"].as_str().unwrap_or_default().to_owned();
            lines
                .lock()
                .unwrap()
                .push((name.clone(), event, term, at, reason));
        }
    });
    Candidate {
        who: who.to_owned(),
        child,
        reader,
        started,
    }
}

impl Candidate {
    /// kill -9; returns the time after which it cannot act.
    async fn kill(mut self) -> jiff::Timestamp {
        self.child.kill().await.unwrap();
        let at = jiff::Timestamp::now();
        let _ = self.reader.await;
        at
    }

    /// SIGTERM and wait for a clean exit.
    async fn terminate(mut self) {
        let started = self.started.clone();
        wait_for("the candidate to start", || async {
            started
                .load(std::sync::atomic::Ordering::SeqCst)
                .then_some(())
        })
        .await;
        let pid = self.child.id().unwrap().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exits after SIGTERM")
            .unwrap();
        assert!(status.success(), "{} exited with {status}", self.who);
        let _ = self.reader.await;
    }
}

/// Injects one API fault of the server's kind, chosen with `next`. On the emulator it lasts until
/// [`calm`]; a stall of the real server is over when this returns.
async fn inject_fault(server: &Server, next: &mut impl FnMut(u64) -> u64) {
    match server.backend() {
        Backend::Emulator(emulator) if next(2) == 0 => {
            let verb = if next(2) == 0 {
                Verb::Update
            } else {
                Verb::Get
            };
            emulator.faults().fail_next(
                verb,
                "leases",
                1 + next(3) as usize,
                Failure::InternalError,
            );
        }
        Backend::Emulator(emulator) => emulator
            .faults()
            .set_latency(Duration::from_millis(50 + next(300))),
        Backend::Real(plane) => {
            let target = if next(2) == 0 {
                StallTarget::ApiServer
            } else {
                StallTarget::Etcd
            };
            plane
                .stall(target, Duration::from_millis(500 + next(2000)))
                .await
                .expect("stall the control plane");
        }
    }
}

/// Ends the emulator's lasting faults (pending errors, latency).
fn calm(server: &Server) {
    if let Backend::Emulator(emulator) = server.backend() {
        emulator.faults().clear();
    }
}

/// The randomized loop and the no-overlap check, on either server.
async fn no_two_leaders(server: &Server, binary: &Path) {
    let controller = ConclaveRun::start(binary, server).await;
    let client = server.client().await;
    let seed = jiff::Timestamp::now().as_nanosecond() as u64 | 1;
    eprintln!("seed {seed} ({})", server.kind());
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let lines: Lines = Arc::default();
    let mut kills: Vec<(String, jiff::Timestamp)> = Vec::new();
    let mut generation = 0;
    let mut pool: Vec<Candidate> = (0..3)
        .map(|_| {
            generation += 1;
            spawn_candidate(
                binary,
                server,
                &format!("p{generation}"),
                &format!("1.{}.0", 28 + next(6)),
                lines.clone(),
            )
        })
        .collect();
    let (mut sigkills, mut sigterms, mut faults, mut rounds) = (0, 0, 0, 0);
    for round in 1..=MAX_ROUNDS {
        rounds = round;
        tokio::time::sleep(Duration::from_millis(1000 + next(1000))).await;
        let holder = holder(&client, server.namespace(), LEASE).await;
        match next(10) {
            0 => {
                // Kill the holder if it is ours, else anyone.
                let i = pool
                    .iter()
                    .position(|c| Some(&c.who) == holder.as_ref())
                    .unwrap_or(next(pool.len() as u64) as usize);
                let victim = pool.swap_remove(i);
                let who = victim.who.clone();
                kills.push((who, victim.kill().await));
                sigkills += 1;
            }
            1 => {
                let victim = pool.swap_remove(next(pool.len() as u64) as usize);
                victim.terminate().await;
                sigterms += 1;
            }
            2 | 6 => {
                faults += 1;
                inject_fault(server, &mut next).await;
            }
            _ => calm(server),
        }
        while pool.len() < 3 {
            generation += 1;
            pool.push(spawn_candidate(
                binary,
                server,
                &format!("p{generation}"),
                &format!("1.{}.0", 28 + next(6)),
                lines.clone(),
            ));
        }
        let terms = lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, event, ..)| event == "leading")
            .count();
        if round >= ROUNDS && terms >= MIN_TERMS {
            break;
        }
    }
    calm(server);
    for candidate in pool {
        candidate.terminate().await;
    }
    drop(controller);
    let lines = lines.lock().unwrap().clone();
    let mut intervals = Vec::new();
    for (who, event, term, start, _) in &lines {
        if event != "leading" {
            continue;
        }
        let end = lines
            .iter()
            .find_map(|(w, e, t, at, _)| {
                (w == who && e == "stopped-leading" && t == term).then_some(*at)
            })
            .or_else(|| kills.iter().find_map(|(w, at)| (w == who).then_some(*at)))
            .unwrap_or_else(|| panic!("{who} term {term} never ended"));
        intervals.push((*start, end, who.clone(), *term));
    }
    intervals.sort();
    let mut stops = std::collections::BTreeMap::<&str, usize>::new();
    for (_, event, _, _, reason) in &lines {
        if event == "stopped-leading" {
            *stops.entry(reason).or_default() += 1;
        }
    }
    eprintln!(
        "{}: {} leadership intervals (ends: {stops:?}) in {rounds} rounds, {sigkills} SIGKILLs, \
         {sigterms} SIGTERMs, {faults} faults",
        server.kind(),
        intervals.len()
    );
    assert!(
        intervals.len() >= 3,
        "too few terms to mean anything: {intervals:?}"
    );
    for pair in intervals.windows(2) {
        let ((_, end, a, ta), (start, _, b, tb)) = (&pair[0], &pair[1]);
        assert!(
            end <= start,
            "split brain (seed {seed}): {a} term {ta} until {end}, {b} term {tb} from {start}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_among_candidate_processes_on_the_emulator() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let server = Server::emulator("split-procs").await;
    no_two_leaders(&server, &binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_among_candidate_processes_on_kube_apiserver() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let Some(server) = Server::real("split-procs").await else {
        return;
    };
    no_two_leaders(&server, &binary).await;
}
