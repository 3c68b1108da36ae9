//! Runs one model check and prints the states explored, the depth and the time:
//! `model-check [candidates] [faults_until] [max_crashes] [controller_restarts] [max_clock_skew]
//! [task_stop_within] [timeout_seconds] [renew_deadline] [max_cut_offs] [cut_off_heals]
//! [pod_liveness] [restarts] [candidate_deletions] [lease_deletions] [replicas]
//! [pod_deletions]`, each
//! defaulting to the bounded check's (one controller replica: with two or more,
//! `controller_restarts` counts replica crashes). Every property is reported, with the trace of each that
//! fails; the exit status is 1 when one fails. `MODEL_THREADS` sets the checker's threads (2).
#![forbid(unsafe_code)]

use conclave_model::model::Election;
use conclave_model::timing::{Bounds, Timing};
use stateright::{Checker, Model};
use std::time::{Duration, Instant};

fn arg<T: std::str::FromStr>(args: &[String], at: usize, default: T) -> T {
    args.get(at).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// The checker's threads: `MODEL_THREADS`, or 2.
fn threads() -> usize {
    std::env::var("MODEL_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bounds = Bounds {
        candidates: arg(&args, 0, Bounds::BOUNDED.candidates),
        faults_until: arg(&args, 1, Bounds::BOUNDED.faults_until),
        max_crashes: arg(&args, 2, Bounds::BOUNDED.max_crashes),
        max_controller_restarts: arg(&args, 3, Bounds::BOUNDED.max_controller_restarts),
        max_cut_offs: arg(&args, 8, Bounds::BOUNDED.max_cut_offs),
        cut_off_heals: arg(&args, 9, Bounds::BOUNDED.cut_off_heals),
        pod_liveness: arg(&args, 10, Bounds::BOUNDED.pod_liveness),
        restarts: arg(&args, 11, Bounds::BOUNDED.restarts),
        candidate_deletions: arg(&args, 12, Bounds::BOUNDED.candidate_deletions),
        lease_deletions: arg(&args, 13, Bounds::BOUNDED.lease_deletions),
        replicas: arg(&args, 14, Bounds::BOUNDED.replicas),
        pod_deletions: arg(&args, 15, Bounds::BOUNDED.pod_deletions),
    };
    let timing = Timing {
        max_clock_skew: arg(&args, 4, Timing::BOUNDED.max_clock_skew),
        task_stop_within: arg(&args, 5, Timing::BOUNDED.task_stop_within),
        renew_deadline: arg(&args, 7, Timing::BOUNDED.renew_deadline),
        ..Timing::BOUNDED
    };
    let timeout = Duration::from_secs(arg(&args, 6, 3_600));
    let model = Election::new(timing, bounds, true);
    if let Err(broken) = timing.check() {
        println!("timing assumption broken on purpose: {broken}");
    }
    println!("{bounds:?}\n{timing:?}\nhorizon {} s", model.horizon());
    let started = Instant::now();
    let checker = model
        .checker()
        .threads(threads())
        .timeout(timeout)
        .spawn_bfs()
        .join();
    println!(
        "{} states ({} unique), max depth {}, {:.1} s{}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64(),
        if checker.is_done() {
            ""
        } else {
            " (stopped at the timeout)"
        }
    );
    let mut failed = false;
    for property in checker.model().properties() {
        let discovery = checker.discovery(property.name);
        let verdict = match (&property.expectation, &discovery) {
            (stateright::Expectation::Sometimes, Some(_)) => "reached",
            (stateright::Expectation::Sometimes, None) => "NEVER REACHED",
            (_, None) => "holds",
            (_, Some(_)) => "FAILS",
        };
        println!("{verdict:>13}: {}", property.name);
        if verdict != "holds" && verdict != "reached" {
            failed = true;
            if let Some(path) = discovery {
                for (state, action) in path.into_vec() {
                    println!("  {state}");
                    if let Some(action) = action {
                        println!("    -> {action:?}");
                    }
                }
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
