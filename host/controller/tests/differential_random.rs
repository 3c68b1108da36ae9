//! A randomized differential against kube-apiserver's built-in election controller, on the real
//! control plane (conclave-testkit's `differential` module): seeded random candidate sets, each
//! run once under the built-in controller and once under Conclave in `all` mode (in-process, the
//! built-in controller held passive), the settled holders compared. Differences that upstream's
//! list order or a creation-second boundary explain, and Conclave's documented deviations, are
//! classified; every other difference fails the test and is printed with its seed and set.
//!
//! `CONCLAVE_DIFF_CASES` (default 30) and `CONCLAVE_DIFF_SEED` (default 4355) choose the cases;
//! case `i` is replayed alone with `CONCLAVE_DIFF_SEED=<seed + i> CONCLAVE_DIFF_CASES=1`.
//! Skipped (with a SKIP line) when the control-plane binaries are not built.

mod controller_support;

use conclave_testkit::{Case, ControlPlane, run_differential};
use controller_support::{config, start};
use std::time::Duration;

/// The seed used when `CONCLAVE_DIFF_SEED` is not set.
const DEFAULT_SEED: u64 = 4355;
/// The number of cases when `CONCLAVE_DIFF_CASES` is not set: one batch, about a minute per
/// controller.
const DEFAULT_CASES: usize = 30;
/// The most cases run at once (more are run in batches of this many).
const MAX_BATCH: usize = 100;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
async fn conclave_agrees_with_the_builtin_controller_on_random_sets() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let seed = env_or("CONCLAVE_DIFF_SEED", DEFAULT_SEED);
    let count = env_or("CONCLAVE_DIFF_CASES", DEFAULT_CASES);
    eprintln!("randomized differential: seed {seed}, {count} cases");
    let cases = Case::generate_many(seed, count);
    let report = run_differential(
        &cp,
        seed,
        &cases,
        count.min(MAX_BATCH),
        |client, ns| {
            let mut cfg = config(&ns, "conclave-differential");
            // Upstream's ack window; the lease duration written is upstream's 5 s by default.
            cfg.ack_window = Duration::from_secs(5);
            cfg.controller_namespace = ns;
            start(client, cfg)
        },
        |_| {},
    )
    .await
    .expect("the differential runs");
    eprintln!("{report}");
    assert_eq!(
        report.unexplained.len(),
        0,
        "unexplained differences (replay each with its seed):\n{}",
        report.unexplained.join("\n")
    );
    assert_eq!(report.cases, count);
    cp.check_running().unwrap();
}
