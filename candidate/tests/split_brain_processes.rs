//! Split-brain checker with real processes: `conclave run` elects among `conclave candidate`
//! processes, while the test kills candidates with SIGKILL (the holder when it can), stops them
//! with SIGTERM, starts new ones with random versions (so older ones pre-empt the leader) and
//! injects API faults. The split-brain checker (conclave_testkit::checker, shared with the soaks)
//! then reads every candidate's output: every leadership interval (from a `leading` line's
//! `observed_monotonic_ns` to its `stopped-leading` line's `monotonic_ns`, or to the SIGKILL; all
//! `CLOCK_MONOTONIC` readings) must be disjoint from every other, and every term's tasks must
//! have stopped before its release. The processes and
//! faults are tests/common/procs.rs's.
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

use common::checker::Checker;
use common::procs::{CandidateProcess, Dice, Fault, calm};
use common::*;
use std::path::{Path, PathBuf};

const LEASE: &str = "split-procs";
/// Rounds of the randomized loop (about 1.5 s each, plus the action)...
const ROUNDS: usize = 40;
/// ...continued, up to [`MAX_ROUNDS`], until this many terms have started: a run in which the
/// dice rarely hit the leader would check little.
const MIN_TERMS: usize = 5;
const MAX_ROUNDS: usize = 80;

fn spawn(
    binary: &Path,
    server: &Server,
    generation: &mut usize,
    dice: &mut Dice,
) -> CandidateProcess {
    *generation += 1;
    let who = format!("p{generation}");
    CandidateProcess::spawn(binary, server, LEASE, &who, 28 + dice.below(6))
}

/// Terms started so far: `leading` lines in these outputs.
fn terms_started<'a>(outputs: impl Iterator<Item = &'a Path>) -> usize {
    outputs
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.matches("{\"event\":\"leading\"").count())
        .sum()
}

/// The randomized loop and the checker, on either server.
async fn no_two_leaders(server: &Server, binary: &Path) {
    let controller = ConclaveRun::start(binary, server).await;
    let client = server.client().await;
    let seed = Dice::fresh_seed();
    eprintln!("seed {seed} ({})", server.kind());
    let mut dice = Dice::new(seed);
    let mut ended: Vec<PathBuf> = Vec::new();
    let mut generation = 0;
    let mut pool: Vec<CandidateProcess> = (0..3)
        .map(|_| spawn(binary, server, &mut generation, &mut dice))
        .collect();
    let (mut sigkills, mut sigterms, mut faults, mut rounds) = (0, 0, 0, 0);
    for round in 1..=MAX_ROUNDS {
        rounds = round;
        tokio::time::sleep(dice.millis(1000, 1000)).await;
        let holder = holder(&client, server.namespace(), LEASE).await;
        match dice.below(10) {
            0 => {
                // Kill the holder if it is ours, else anyone.
                let i = pool
                    .iter()
                    .position(|c| Some(c.identity()) == holder.as_deref())
                    .unwrap_or(dice.below(pool.len() as u64) as usize);
                ended.push(pool.swap_remove(i).kill());
                sigkills += 1;
            }
            1 => {
                let victim = pool.swap_remove(dice.below(pool.len() as u64) as usize);
                ended.push(victim.stop(WAIT).await);
                sigterms += 1;
            }
            2 | 6 => {
                faults += 1;
                let fault = match server.backend() {
                    Backend::Emulator(_) if dice.below(2) == 0 => Fault::ServerError,
                    Backend::Emulator(_) => Fault::Latency,
                    Backend::Real(_) => Fault::Stall,
                };
                fault.inject(server, &mut dice).await;
            }
            _ => calm(server),
        }
        while pool.len() < 3 {
            pool.push(spawn(binary, server, &mut generation, &mut dice));
        }
        let live = pool.iter().map(CandidateProcess::output);
        let terms = terms_started(ended.iter().map(PathBuf::as_path).chain(live));
        if round >= ROUNDS && terms >= MIN_TERMS {
            break;
        }
    }
    calm(server);
    for candidate in pool {
        ended.push(candidate.stop(WAIT).await);
    }
    drop(controller);
    let mut checker = Checker::default();
    for output in &ended {
        let who = output.file_stem().unwrap().to_string_lossy();
        checker.add(LEASE, &who, &std::fs::read_to_string(output).unwrap());
    }
    let verdict = checker.verdict();
    eprintln!(
        "{}: {} terms (ends: {:?}) in {rounds} rounds, {sigkills} SIGKILLs, {sigterms} SIGTERMs, \
         {faults} faults",
        server.kind(),
        verdict.terms,
        verdict.ends
    );
    verdict.assert_clean(seed);
    assert!(
        verdict.terms >= 3,
        "too few terms to mean anything: {verdict:?}"
    );
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
