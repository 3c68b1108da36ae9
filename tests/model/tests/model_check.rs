//! The model checks: a bounded one for CI, larger ones behind `--ignored`.

use conclave_model::model::Election;
use conclave_model::timing::{Bounds, Timing};
use stateright::{Checker, Model};
use std::time::Instant;

/// Runs the full check of `model` on two threads, prints its figures, and asserts every property.
fn check(label: &str, model: Election) {
    let horizon = model.horizon();
    let started = Instant::now();
    let checker = model.checker().threads(2).spawn_bfs().join();
    eprintln!(
        "{label}: {} states ({} unique), max depth {}, horizon {horizon} s, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker.assert_properties();
}

#[test]
fn bounded_check_two_candidates_one_crash() {
    check(
        "bounded",
        Election::new(Timing::BOUNDED, Bounds::BOUNDED, false),
    );
}
