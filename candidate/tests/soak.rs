//! The soak, short (CI): about 50 events on the emulator, fewer on a real kube-apiserver, each
//! checked by the split-brain checker (conclave_testkit::checker): no two leadership intervals of
//! one Lease overlap, and every term's tasks stopped before its release. The long run is
//! `cargo bench -p conclave-candidate --bench soak -- --handoffs 1000` (docs/benchmarks.md).
//! The emulator's run is repeated with a simulated kubelet (tests/common/kubelet.rs): the
//! candidates run in Pods, crashes are container kills the kubelet reports, and the
//! controller's pod liveness fails over on the reports.
//!
//! Needs the `conclave` binary (`cargo build -p conclave`), as tests/split_brain_processes.rs;
//! the real-server test also needs the control plane (tests/kube/build.sh). Set
//! `CONCLAVE_SOAK_SEED` to replay a seed.

mod common;

use common::checker::Checker;
use common::procs::Dice;
use common::soak::{Goal, SoakConfig};
use common::*;
use std::time::Duration;

fn config(events: usize, kubelet: bool) -> SoakConfig {
    let seed = std::env::var("CONCLAVE_SOAK_SEED")
        .ok()
        .map(|s| s.parse().expect("CONCLAVE_SOAK_SEED is a number"))
        .unwrap_or_else(Dice::fresh_seed);
    SoakConfig {
        seed,
        goal: Goal::Events(events),
        leases: 2,
        candidates: 3,
        time_limit: None,
        kubelet,
    }
}

async fn soak(server: &Server, binary: &std::path::Path, events: usize, kubelet: bool) {
    let config = config(events, kubelet);
    let seed = config.seed;
    let report = common::soak::run(server, binary, config).await;
    eprintln!("{report}");
    report.verdict.assert_clean(seed);
    assert!(
        report.unclean_exits.is_empty(),
        "seed {seed}: {:?}",
        report.unclean_exits
    );
    assert!(
        report.unexpected_exits.is_empty(),
        "seed {seed}: candidates exited unasked: {:?}",
        report.unexpected_exits
    );
    assert!(
        report.verdict.terms >= 4,
        "seed {seed}: too few terms to mean anything"
    );
    if let Some(kubelet) = &report.kubelet {
        assert!(
            kubelet.wrongly_dead.is_empty(),
            "seed {seed}: the controller declared live holders dead: {:?}",
            kubelet.wrongly_dead
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_events_on_the_emulator_without_split_brain() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let server = Server::emulator("soak").await;
    soak(&server, &binary, 50, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_events_with_container_kills_reported_by_a_kubelet_without_split_brain() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let server = Server::emulator("soak-kubelet").await;
    soak(&server, &binary, 50, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalls_on_kube_apiserver_without_split_brain() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let Some(server) = Server::real("soak").await else {
        return;
    };
    soak(&server, &binary, 30, false).await;
}

// The checker itself, on hand-written outputs. Monotonic readings (`*monotonic_ns`) are
// seconds · 10⁹ here, so they read like the wall-clock times beside them.

const A: &str = r#"{"event":"following","at":"2026-01-01T00:00:00Z","monotonic_ns":0}
{"event":"leading","term":1,"at":"2026-01-01T00:00:01.1Z","observed_at":"2026-01-01T00:00:01Z","observed_monotonic_ns":1000000000}
2026-01-01T00:00:02.000000Z  INFO conclave::candidate: work stopped term=1 units=40 monotonic_ns=2000000000
{"event":"stopped-leading","term":1,"at":"2026-01-01T00:00:02.5Z","monotonic_ns":2500000000,"reason":"preempted","preferred_holder":"b","leaked_tasks":0}
{"event":"released","term":1,"at":"2026-01-01T00:00:02.6Z","monotonic_ns":2600000000}
"#;

#[test]
fn the_checker_passes_disjoint_terms_and_measures_the_hand_off() {
    let mut checker = Checker::default();
    checker.add("l", "a", A);
    checker.add(
        "l",
        "b",
        r#"{"event":"leading","term":1,"at":"2026-01-01T00:00:03.1Z","observed_at":"2026-01-01T00:00:03Z","observed_monotonic_ns":3000000000}
{"event":"killed","at":"2026-01-01T00:00:09Z","monotonic_ns":9000000000}"#,
    );
    let verdict = checker.verdict();
    assert!(verdict.clean(), "{verdict:?}");
    assert_eq!(verdict.terms, 2);
    assert_eq!(verdict.hand_offs.len(), 1);
    assert_eq!(verdict.hand_offs[0].gap, Duration::from_millis(500));
    assert!(verdict.hand_offs[0].graceful());
}

#[test]
fn the_checker_finds_overlaps_leaks_and_unended_terms() {
    let mut checker = Checker::default();
    checker.add("l", "a", A);
    // Starts before a's term ended; released without its work stopping.
    checker.add(
        "l",
        "b",
        r#"{"event":"leading","term":1,"at":"2026-01-01T00:00:02.4Z","observed_at":"2026-01-01T00:00:02.4Z","observed_monotonic_ns":2400000000}
{"event":"stopped-leading","term":1,"at":"2026-01-01T00:00:04Z","monotonic_ns":4000000000,"reason":"shutdown","leaked_tasks":0}
{"event":"released","term":1,"at":"2026-01-01T00:00:04.1Z","monotonic_ns":4100000000}"#,
    );
    checker.add(
        "other",
        "c",
        r#"{"event":"leading","term":1,"at":"2026-01-01T00:00:02.4Z","observed_at":"2026-01-01T00:00:02.4Z","observed_monotonic_ns":2400000000}"#,
    );
    let verdict = checker.verdict();
    assert_eq!(verdict.overlaps.len(), 1, "{verdict:?}");
    assert_eq!(verdict.leaked.len(), 2, "{verdict:?}");
    assert_eq!(verdict.errors.len(), 1, "{verdict:?}");
}

#[test]
fn the_checker_judges_by_the_monotonic_clock_not_the_wall_clock() {
    // b's wall clock says its term began 0.5 s after a's ended, but by the monotonic clock it
    // began while a still led (a wall clock stepped forward): an overlap.
    let mut checker = Checker::default();
    checker.add("l", "a", A);
    checker.add(
        "l",
        "b",
        r#"{"event":"leading","term":1,"at":"2026-01-01T00:00:03.1Z","observed_at":"2026-01-01T00:00:03Z","observed_monotonic_ns":2499999999}
{"event":"killed","at":"2026-01-01T00:00:09Z","monotonic_ns":9000000000}"#,
    );
    let verdict = checker.verdict();
    assert_eq!(verdict.overlaps.len(), 1, "{verdict:?}");
    assert!(
        verdict.overlaps[0].contains("1000000000..2500000000 ns"),
        "{verdict:?}"
    );
    assert!(verdict.hand_offs.is_empty(), "{verdict:?}");

    // The other way round: b's wall clock stepped back, so its times fall inside a's term, but
    // the monotonic readings are disjoint. And a's work stopped, by its reading, after the
    // release, although its line comes first: a leak.
    let mut checker = Checker::default();
    checker.add(
        "l",
        "a",
        &A.replace("monotonic_ns=2000000000", "monotonic_ns=2700000000"),
    );
    checker.add(
        "l",
        "b",
        r#"{"event":"leading","term":1,"at":"2026-01-01T00:00:01.6Z","observed_at":"2026-01-01T00:00:01.5Z","observed_monotonic_ns":3000000000}
{"event":"killed","at":"2026-01-01T00:00:07.5Z","monotonic_ns":9000000000}"#,
    );
    let verdict = checker.verdict();
    assert!(verdict.overlaps.is_empty(), "{verdict:?}");
    assert_eq!(verdict.hand_offs.len(), 1, "{verdict:?}");
    assert_eq!(verdict.hand_offs[0].gap, Duration::from_millis(500));
    assert_eq!(verdict.leaked.len(), 2, "{verdict:?}");
}
