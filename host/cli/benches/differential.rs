//! A randomized differential against kube-apiserver's built-in election controller, at scale:
//! seeded random candidate sets (conclave-testkit's `differential` module: 1 to 9 candidates,
//! equal versions, pre-releases, build metadata, one or two minors of emulation skew, random
//! registration order, bursts within one second), each run once under the built-in controller
//! and once under Conclave in `all` mode (in-process, the built-in controller held passive), in
//! batches that settle together. Prints the report table after every batch and at the end:
//! agreements, documented deviations by kind, and every unexplained difference with its seed and
//! set (replay one with `CONCLAVE_DIFF_SEED=<its seed> CONCLAVE_DIFF_CASES=1`). Exits non-zero
//! when any difference is unexplained. Skipped when the control-plane binaries are not built.
//! The control plane's processes are killed when the bench ends, fails or panics (and by the
//! kernel if it is killed outright).
//!
//! Run: `cargo bench --profile dev -p conclave --bench differential`
//! (`CONCLAVE_DIFF_CASES`, default 500; `CONCLAVE_DIFF_SEED`, default 4355;
//! `CONCLAVE_DIFF_BATCH`, cases run at once, default 100).

#[path = "../../controller/tests/controller_support/mod.rs"]
mod controller_support;

use conclave_testkit::{Case, ControlPlane, run_differential};
use controller_support::{config, start};
use std::time::Duration;

/// The seed used when `CONCLAVE_DIFF_SEED` is not set.
const DEFAULT_SEED: u64 = 4355;
/// The number of cases when `CONCLAVE_DIFF_CASES` is not set.
const DEFAULT_CASES: usize = 500;
/// Cases run at once when `CONCLAVE_DIFF_BATCH` is not set.
const DEFAULT_BATCH: usize = 100;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={value:?} is not a number")),
        Err(_) => Ok(default),
    }
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let seed = env_or("CONCLAVE_DIFF_SEED", DEFAULT_SEED)?;
    let count = env_or("CONCLAVE_DIFF_CASES", DEFAULT_CASES)?;
    let batch = env_or("CONCLAVE_DIFF_BATCH", DEFAULT_BATCH)?;
    let Some(cp) = ControlPlane::start().await? else {
        return Ok(());
    };
    println!("randomized differential: seed {seed}, {count} cases, {batch} at once");
    let cases = Case::generate_many(seed, count);
    let report = run_differential(
        &cp,
        seed,
        &cases,
        batch,
        |client, ns| {
            let mut cfg = config(&ns, "conclave-differential");
            // Upstream's ack window; the lease duration written is upstream's 5 s by default.
            cfg.ack_window = Duration::from_secs(5);
            cfg.controller_namespace = ns;
            start(client, cfg)
        },
        |so_far| {
            println!(
                "after {} cases ({:.0} s): {} agreements, {} deviations, {} unexplained",
                so_far.cases,
                so_far.elapsed.as_secs_f64(),
                so_far.agreements,
                so_far.deviations.values().sum::<usize>(),
                so_far.unexplained.len()
            );
        },
    )
    .await?;
    println!("{report}");
    cp.check_running()?;
    anyhow::ensure!(
        report.unexplained.is_empty(),
        "{} unexplained differences",
        report.unexplained.len()
    );
    Ok(())
}
