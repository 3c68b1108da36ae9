//! Split-brain checker with real processes: `conclave run` elects among `conclave candidate`
//! processes on the emulator, while the test kills candidates with SIGKILL, stops them with
//! SIGTERM, starts older ones (pre-emption) and injects API faults. Every leadership interval
//! (from a `leading` line's `observed` time to its `stopped-leading` line, or to the SIGKILL)
//! must be disjoint from every other.
//!
//! Needs the `conclave` binary (`cargo build -p conclave`): `$CONCLAVE_BIN`, else
//! `target/debug/conclave`; prints SKIP without it unless `CONCLAVE_REQUIRE_BIN` is set.

mod common;

use common::*;
use conclave_emulator::{Failure, Verb};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// (identity, event, term, start-or-end time)
type Lines = Arc<Mutex<Vec<(String, String, u64, jiff::Timestamp)>>>;

struct Candidate {
    who: String,
    child: Child,
    reader: tokio::task::JoinHandle<()>,
    /// Set once it printed its first line (its signal handler is installed by then).
    started: Arc<std::sync::atomic::AtomicBool>,
}

fn spawn_candidate(
    binary: &Path,
    kubeconfig: &Path,
    who: &str,
    emulation: &str,
    lines: Lines,
) -> Candidate {
    let mut child = Command::new(binary)
        .args(["candidate", "--kubeconfig"])
        .arg(kubeconfig)
        .args([
            "--namespace",
            NS,
            "--lease",
            "split-procs",
            "--identity",
            who,
        ])
        .args([
            "--binary-version",
            "1.33.0",
            "--emulation-version",
            emulation,
        ])
        .args(["--strategy", STRATEGY, "--work-ms", "20"])
        .args([
            "--lease-duration-seconds",
            "3",
            "--renew-deadline-ms",
            "2000",
            "--retry-period-ms",
            "300",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
            let key = if event == "leading" { "observed" } else { "at" };
            let at: jiff::Timestamp = value[key].as_str().unwrap().parse().unwrap();
            lines.lock().unwrap().push((name.clone(), event, term, at));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_among_candidate_processes_under_conclave() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let emulator = emulator().await;
    let dir = std::env::temp_dir().join(format!("conclave-split-procs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let mut controller = Command::new(&binary)
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--namespace",
            NS,
            "--controller-namespace",
            NS,
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("controller.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("conclave run starts");
    let seed = jiff::Timestamp::now().as_nanosecond() as u64 | 1;
    eprintln!("seed {seed}");
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
                &binary,
                &kubeconfig,
                &format!("p{generation}"),
                &format!("1.{}.0", 28 + next(6)),
                lines.clone(),
            )
        })
        .collect();
    let (mut sigkills, mut sigterms, mut faults) = (0, 0, 0);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(1000 + next(1000))).await;
        let holder = get_spec(&client(&emulator), "split-procs")
            .await
            .and_then(|s| s.holder_identity);
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
            2 => {
                faults += 1;
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
            6 => {
                faults += 1;
                emulator
                    .faults()
                    .set_latency(Duration::from_millis(50 + next(300)));
            }
            _ => emulator.faults().clear(),
        }
        while pool.len() < 3 {
            generation += 1;
            pool.push(spawn_candidate(
                &binary,
                &kubeconfig,
                &format!("p{generation}"),
                &format!("1.{}.0", 28 + next(6)),
                lines.clone(),
            ));
        }
    }
    emulator.faults().clear();
    for candidate in pool {
        candidate.terminate().await;
    }
    controller.kill().await.unwrap();
    let lines = lines.lock().unwrap().clone();
    let mut intervals = Vec::new();
    for (who, event, term, start) in &lines {
        if event != "leading" {
            continue;
        }
        let end = lines
            .iter()
            .find_map(|(w, e, t, at)| {
                (w == who && e == "stopped-leading" && t == term).then_some(*at)
            })
            .or_else(|| kills.iter().find_map(|(w, at)| (w == who).then_some(*at)))
            .unwrap_or_else(|| panic!("{who} term {term} never ended"));
        intervals.push((*start, end, who.clone(), *term));
    }
    intervals.sort();
    eprintln!(
        "{} leadership intervals, {sigkills} SIGKILLs, {sigterms} SIGTERMs, {faults} faults",
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
    let _ = std::fs::remove_dir_all(&dir);
}
