//! The soak with a checker, long: `cargo bench -p conclave-candidate --bench soak -- --handoffs
//! 1000`. Several Leases with several `conclave candidate` processes each, Conclave's controller
//! as two `conclave run` replicas, and a seeded stream of pre-emptions, SIGTERMs, SIGKILLs,
//! controller crashes and API faults (tests/common/soak.rs); then the split-brain checker
//! (conclave_testkit::checker) reads every candidate's output and the table is printed. Fails
//! (after the table) on any overlap, leaked task or unended term. Every process it starts is
//! killed when it ends, also on a panic.
//!
//! Flags: `--handoffs N` (default 1000), `--seed S` (replay; default from the clock),
//! `--leases N` (4), `--candidates N` (3 per Lease), `--minutes M` (stop after M minutes
//! anyway), `--server emulator|kube-apiserver` (the latter needs tests/kube/build.sh),
//! `--kubelet` (every candidate in a Pod of a simulated kubelet, which reports its container
//! kills: the controller's pod liveness fails over on the report; fails on a `HolderDead` Event
//! naming a live process).
//! Needs the `conclave` binary: `$CONCLAVE_BIN`, else `target/debug/conclave`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::procs::Dice;
use common::soak::{Goal, SoakConfig};
use common::{Server, conclave_binary};
use std::time::Duration;

/// The flags, as `--name value` pairs; `cargo bench` adds `--bench`, which is ignored.
fn flag(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    let value = args.iter().position(|a| a == name).map(|i| {
        args.get(i + 1)
            .unwrap_or_else(|| panic!("{name} needs a value"))
    })?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} {value}: not a number")),
    )
}

fn server_flag() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--server")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "emulator".into())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let config = SoakConfig {
        seed: flag("--seed").unwrap_or_else(Dice::fresh_seed),
        goal: Goal::HandOffs(flag("--handoffs").unwrap_or(1000) as usize),
        leases: flag("--leases").unwrap_or(4) as usize,
        candidates: flag("--candidates").unwrap_or(3) as usize,
        time_limit: flag("--minutes").map(|m| Duration::from_secs(m * 60)),
        kubelet: std::env::args().any(|a| a == "--kubelet"),
    };
    let seed = config.seed;
    let server = match server_flag().as_str() {
        "emulator" => Server::emulator("soak").await,
        "kube-apiserver" => match Server::real("soak").await {
            Some(server) => server,
            None => return,
        },
        other => panic!("--server {other}: emulator or kube-apiserver"),
    };
    let report = common::soak::run(&server, &binary, config).await;
    println!("{report}");
    for exit in &report.unclean_exits {
        println!("unclean exit after SIGTERM: {exit}");
    }
    for exit in &report.unexpected_exits {
        println!("exited unasked: {exit}");
    }
    report.verdict.assert_clean(seed);
    assert!(
        report.unexpected_exits.is_empty(),
        "seed {seed}: candidates exited unasked"
    );
    if let Some(kubelet) = &report.kubelet {
        assert!(
            kubelet.wrongly_dead.is_empty(),
            "seed {seed}: HolderDead for live processes: {:?}",
            kubelet.wrongly_dead
        );
    }
}
