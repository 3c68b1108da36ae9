//! The model checks: a bounded one for CI, larger ones behind `--ignored`. Each prints the states
//! it explored, the depth and the time (`cargo test -p conclave-model -- --nocapture`).

use conclave_model::model::{
    Election, HOLDER_LIVE, NO_LOST_UPDATE, NO_STALE_PREFERRED, NOT_LEADERLESS, ONE_LEADER,
    ONE_WRITER, PINGS_BOUNDED, POD_DEAD_NOT_LEADING, POD_DEAD_ONLY_CRASHED, POD_FAILOVER,
    PREEMPT_BETTER, REPLICAS_FAIL_OVER,
};
use conclave_model::timing::{Bounds, Timing};
use stateright::{Checker, Expectation, Model};
use std::time::Instant;

/// Explores every state of `model` on two threads and prints the figures.
fn explore(label: &str, model: Election) -> impl Checker<Election> {
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
    checker
}

/// The CI check of crashes: two candidates, one crash, faults and delays for the first 3
/// seconds, every property over every interleaving up to the liveness horizon.
#[test]
fn bounded_check_with_a_crash_holds_every_property() {
    explore(
        "bounded, a crash",
        Election::new(Timing::BOUNDED, Bounds::BOUNDED, false),
    )
    .assert_properties();
}

/// The CI check of a live holder whose renewals do not get through: one cut-off of a
/// candidate's Lease writes, long enough for its Lease to expire.
#[test]
fn bounded_check_with_a_cut_off_holds_every_property() {
    let bounds = Bounds {
        max_crashes: 0,
        max_cut_offs: 1,
        ..Bounds::BOUNDED
    };
    explore(
        "bounded, a cut-off",
        Election::new(Timing::BOUNDED, bounds, false),
    )
    .assert_properties();
}

/// The CI check of LeaseCandidate deletions (kubernetes#138066, #138067/#138071): the crashed
/// candidate's LeaseCandidate may be deleted (garbage collection, an operator) while faults last,
/// and the candidate may restart and register again; 2 s of faults. Every property holds, the
/// two named for the upstream bugs among them: no stale `preferredHolder` naming a deleted
/// candidate outlives the faults (nor is the Lease left leaderless), and no candidate that does
/// not answer is pinged more than twice after faults stop.
#[test]
fn bounded_check_with_candidate_deletions_holds_every_property() {
    let bounds = Bounds {
        faults_until: 2,
        candidate_deletions: 1,
        ..Bounds::BOUNDED
    };
    let checker = explore(
        "bounded, candidate deletions",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    for property in [NOT_LEADERLESS, NO_STALE_PREFERRED, PINGS_BOUNDED] {
        checker.assert_no_discovery(property);
    }
    checker.assert_properties();
}

/// The CI check of Lease deletion: the Lease may be deleted once while faults last (an operator,
/// a cleanup); 2 s of faults. Every property holds: the controller does not create the Lease
/// again before the deleted Lease's holder could have stopped (no two candidates lead at once),
/// and it creates it after (the Lease is not left leaderless).
#[test]
fn bounded_check_with_a_lease_deletion_holds_every_property() {
    let bounds = Bounds {
        faults_until: 2,
        lease_deletions: 1,
        ..Bounds::BOUNDED
    };
    let checker = explore(
        "bounded, a Lease deletion",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    for property in [ONE_LEADER, NOT_LEADERLESS] {
        checker.assert_no_discovery(property);
    }
    checker.assert_properties();
}

/// The CI check of two controller replicas (issue 32): each keeps its own watches and caches,
/// contends for the controller's own Lease as the classic elector does, and steps and writes only
/// while its term lasts (`leadership.rs`); 1 s of faults and one crash of a replica, so that the
/// other takes the controller's Lease over once it has seen it unchanged for a lease duration
/// (and the crashed one may restart and relist). Every property holds with two writers'
/// caches: one candidate leads at a time, no lost update, no write by a replica the
/// controller's Lease does not name, and the failover between replicas is reached.
#[test]
fn bounded_check_with_two_controller_replicas_holds_every_property() {
    let bounds = Bounds {
        faults_until: 1,
        max_crashes: 0,
        max_controller_restarts: 1,
        replicas: 2,
        ..Bounds::BOUNDED
    };
    let checker = explore(
        "bounded, two controller replicas",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    for property in [
        ONE_WRITER,
        ONE_LEADER,
        HOLDER_LIVE,
        PREEMPT_BETTER,
        NO_LOST_UPDATE,
    ] {
        checker.assert_no_discovery(property);
    }
    checker.assert_any_discovery(REPLICAS_FAIL_OVER);
    checker.assert_properties();
}

/// Two controller replicas with a candidate crash too: the crashed holder's Lease taken over by
/// whichever replica leads, while the replicas may fail over themselves.
#[test]
#[ignore = "minutes: run with --ignored"]
fn full_check_two_controller_replicas_and_a_crash_holds_every_property() {
    let bounds = Bounds {
        faults_until: 1,
        max_controller_restarts: 1,
        replicas: 2,
        ..Bounds::BOUNDED
    };
    explore(
        "two controller replicas, a crash",
        Election::new(Timing::BOUNDED, bounds, false),
    )
    .assert_properties();
}

/// A Lease deletion with pod liveness and a restarted holder: the two-leader trace of the
/// README's "Lease deletion", closed. The controller's read after a conflict (the read before
/// declaring a holder dead found a newer Lease) now stands in for its cache until the watch
/// delivers the Lease again, so a deletion the watch has not delivered no longer lets it create
/// the Lease for another candidate. *Only a crashed holder* and the failover bound fail as in
/// the check without deletions (finding B's price). *Pre-empted only for a better one* holds
/// since the sit-outs recorded for the Lease's key reach the step that creates a deleted Lease
/// again (`StepInput::sitting_out`): before, a holder that sat out was elected by that create and
/// pre-empted by the next step.
#[test]
#[ignore = "minutes: run with --ignored"]
fn a_lease_deletion_with_pod_liveness_and_restarts_never_finds_two_leaders() {
    let bounds = Bounds {
        faults_until: 2,
        pod_liveness: true,
        restarts: true,
        lease_deletions: 1,
        ..Bounds::BOUNDED
    };
    let checker = explore(
        "a Lease deletion, pod liveness, restarts",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    assert_holds_except(&checker, &[POD_DEAD_ONLY_CRASHED, POD_FAILOVER]);
    checker.assert_no_discovery(ONE_LEADER);
    checker.assert_no_discovery(PREEMPT_BETTER);
}

/// Asserts every property of `checker`'s model except `found` (which the model found broken in
/// the real code, see the README's "What the model found"), and that each of `found` fails: when
/// the real code is fixed, the test says so, and `found` goes.
fn assert_holds_except(checker: &impl Checker<Election>, found: &[&str]) {
    for property in checker.model().properties() {
        let discovered = checker.discovery(property.name).is_some();
        let expected = match property.expectation {
            Expectation::Sometimes => true,
            _ => found.contains(&property.name),
        };
        assert_eq!(
            discovered,
            expected,
            "{}: {}",
            property.name,
            if discovered {
                "discovered"
            } else {
                "not discovered"
            }
        );
    }
}

/// Pod liveness (`--pod-liveness`, the controller's default) with a kubelet that reports a crashed
/// candidate's container terminated, late or never, and a controller that pings a holder
/// reported dead and, unanswered after the answer grace, elects the next candidate before the
/// Lease expires; two candidates, one crash without a restart (a restart is
/// [`pod_liveness_with_a_restarted_holder_of_the_same_identity_never_finds_two_leaders`]),
/// faults for `faults_until` seconds.
fn pod_liveness_model(faults_until: i16, restarts: bool) -> Election {
    let bounds = Bounds {
        faults_until,
        pod_liveness: true,
        restarts,
        ..Bounds::BOUNDED
    };
    Election::new(Timing::BOUNDED, bounds, false)
}

/// The CI check of pod liveness: faults for 2 seconds (3 is the full check). Every property
/// holds but the failover bound: a Lease whose `renewTime` is not earlier than the kubelet's
/// `finishedAt` (whole seconds: the dead holder's renewal in the second it died, or a take-over
/// written after it died) may be a restarted process's, so it keeps the holder (the fix of the
/// README's finding B of pod liveness, which rules out two leaders) and failover waits for the
/// expiry, as with pod liveness off.
#[test]
fn bounded_check_with_pod_liveness_holds_every_property_but_the_failover_bound() {
    let model = pod_liveness_model(2, false);
    assert!(
        model.pod_liveness_bound() < Timing::BOUNDED.lease_duration + 1,
        "a report must fail over before the Lease could expire"
    );
    let checker = explore("bounded, pod liveness", model);
    assert_holds_except(&checker, &[POD_FAILOVER]);
}

/// The CI check of a Pod deleted without the kubelet's word (issue 47, finding 1): pod liveness
/// with 2 s of faults, no crash, and a candidate's Pod deleted once (a force delete, Pod GC of a
/// deleted Node's Pods) while its process runs on (and may be slow to answer a ping), then
/// possibly a Pod created under its name with a new UID. A Pod's absence, or another Pod of its
/// name, is no evidence (`core::pod::PodReport::is_pod_of`): every property holds, *no two
/// candidates lead at once* and *pod liveness declares only a crashed holder dead* among them;
/// with no crash, pod liveness never fires (nor may it), so its sanity check is not asserted.
#[test]
fn bounded_check_with_a_pod_force_deleted_holds_every_property() {
    let bounds = Bounds {
        max_crashes: 0,
        pod_deletions: 1,
        ..pod_liveness_model(2, false).bounds
    };
    let checker = explore(
        "bounded, pod liveness, a Pod force-deleted",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    for property in [ONE_LEADER, POD_DEAD_ONLY_CRASHED, POD_DEAD_NOT_LEADING] {
        checker.assert_no_discovery(property);
    }
    for property in checker.model().properties() {
        if !matches!(property.expectation, Expectation::Sometimes) {
            checker.assert_no_discovery(property.name);
        }
    }
}

/// A Pod deleted with a crash too: deleted before the kubelet reported anything (a force delete)
/// or after it reported the container terminated (the graceful path, judged on the state the
/// deletion event carried, `pods.rs` `Tombstones`), and recreated under its name. Every
/// property holds but the failover bound (its known price, as without deletions).
#[test]
#[ignore = "half a minute: run with --ignored"]
fn full_check_a_pod_deleted_and_a_crash_holds_every_property_but_the_failover_bound() {
    let bounds = Bounds {
        pod_deletions: 1,
        ..pod_liveness_model(2, false).bounds
    };
    let checker = explore(
        "pod liveness, a crash, a Pod deleted",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    assert_holds_except(&checker, &[POD_FAILOVER]);
}

/// A Pod deleted and recreated under its name while the candidate may crash and start again
/// under the same identity in the new Pod (a StatefulSet with a fixed identity): the new
/// process's Pod is another Pod, so nothing about the old Pod's containers declares it dead
/// while it leads.
#[test]
#[ignore = "minutes: run with --ignored"]
fn a_pod_recreated_under_its_name_with_a_restarted_holder_never_finds_two_leaders() {
    let bounds = Bounds {
        pod_deletions: 1,
        ..pod_liveness_model(2, true).bounds
    };
    let checker = explore(
        "pod liveness, restarts, a Pod deleted",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    assert_holds_except(&checker, &[POD_DEAD_ONLY_CRASHED, POD_FAILOVER]);
    checker.assert_no_discovery(ONE_LEADER);
    checker.assert_no_discovery(POD_DEAD_NOT_LEADING);
}

/// The larger check of pod liveness: faults for 3 seconds.
#[test]
#[ignore = "the full check: a minute or more; run with --ignored"]
fn full_check_pod_liveness_holds_every_property_but_the_failover_bound() {
    let checker = explore("full, pod liveness", pod_liveness_model(3, false));
    assert_holds_except(&checker, &[POD_FAILOVER]);
}

/// Pod liveness's finding B, closed: a holder that crashed and was restarted by the kubelet
/// under the same identity (a component that sets a fixed identity; `conclave-candidate`'s
/// default is new for every process) while the controller's LeaseCandidate still records the
/// previous container, which the cached Pod shows terminated. The Lease's renewal is judged
/// against the kubelet's `finishedAt` or `startedAt` (the node's clock, which stamps the holder's
/// renewals), on the Lease as stored: no two candidates lead at once, and no leading holder is
/// declared dead. A restarted process that has not renewed the Lease yet (it does not lead) may
/// be declared dead when it is slow to answer the ping (*only a crashed holder* fails: a needless
/// failover, which it follows), and the failover bound fails as in the check without restarts.
#[test]
#[ignore = "pod liveness finding B, minutes: run with --ignored"]
fn pod_liveness_with_a_restarted_holder_of_the_same_identity_never_finds_two_leaders() {
    let checker = explore("pod liveness with restarts", pod_liveness_model(2, true));
    assert_holds_except(&checker, &[POD_DEAD_ONLY_CRASHED, POD_FAILOVER]);
    checker.assert_no_discovery(ONE_LEADER);
    checker.assert_no_discovery(POD_DEAD_NOT_LEADING);
}

/// The larger check: a crash and a cut-off in one run.
#[test]
#[ignore = "the full check: minutes; run with --ignored"]
fn full_check_crash_and_cut_off_holds_every_property() {
    let bounds = Bounds {
        max_cut_offs: 1,
        ..Bounds::BOUNDED
    };
    explore(
        "full, a crash and a cut-off",
        Election::new(Timing::BOUNDED, bounds, false),
    )
    .assert_properties();
}

/// The larger check: faults and delays for 4 seconds.
#[test]
#[ignore = "the full check: minutes; run with --ignored"]
fn full_check_longer_faults_holds_every_property() {
    let bounds = Bounds {
        faults_until: 4,
        ..Bounds::BOUNDED
    };
    explore(
        "full, 4 s of faults",
        Election::new(Timing::BOUNDED, bounds, false),
    )
    .assert_properties();
}

/// The larger check: three candidates.
#[test]
#[ignore = "the full check: minutes; run with --ignored"]
fn full_check_three_candidates_holds_every_property() {
    let bounds = Bounds {
        candidates: 3,
        faults_until: 2,
        ..Bounds::BOUNDED
    };
    explore(
        "full, 3 candidates",
        Election::new(Timing::BOUNDED, bounds, false),
    )
    .assert_properties();
}

/// The larger check: candidates' clocks up to a second from the controller's, and a controller
/// restart that forgets when it watched each renewal.
#[test]
#[ignore = "the full check: minutes; run with --ignored"]
fn full_check_clock_skew_and_controller_restart_holds_every_property() {
    let timing = Timing {
        max_clock_skew: 1,
        ..Timing::BOUNDED
    };
    let bounds = Bounds {
        faults_until: 2,
        max_controller_restarts: 1,
        ..Bounds::BOUNDED
    };
    explore(
        "full, clock skew and a controller restart",
        Election::new(timing, bounds, true),
    )
    .assert_properties();
}

/// A term's tasks that ignore cancellation (issue 34 finding 1): the elector aborts a lost term's
/// tasks `ABORT_GRACE` before the Lease could expire, and at once when another holder is named,
/// so they have stopped when the controller elects the next holder at that expiry. Before the
/// fix the drain ran to the expiry and aborted tasks had `ABORT_GRACE` more: a pre-empted leader
/// whose renewals stalled while it drained led until one second after the next leader started.
#[test]
#[ignore = "issue 34 finding 1, a minute: run with --ignored"]
fn a_lost_term_whose_tasks_ignore_cancellation_stops_before_the_next_leader_starts() {
    let timing = Timing {
        task_stop_within: 3,
        ..Timing::BOUNDED
    };
    let checker = explore(
        "tasks ignore cancellation",
        Election::new(timing, Bounds::BOUNDED, true),
    );
    checker.assert_no_discovery(ONE_LEADER);
}

/// A holder that answers pings but can never write its Lease (issue 34 finding 6; RBAC allows
/// LeaseCandidate updates but not Lease updates): it sits out once its Lease expired without a
/// renewal, and the other live candidate leads. Before the fix it answered the probe at each
/// expiry, was written back, and the Lease stayed without a leader past the liveness horizon.
#[test]
#[ignore = "issue 34 finding 6, a minute: run with --ignored"]
fn a_holder_that_never_renews_does_not_keep_the_lease_from_a_live_rival() {
    let bounds = Bounds {
        max_crashes: 0,
        max_cut_offs: 1,
        cut_off_heals: false,
        ..Bounds::BOUNDED
    };
    let checker = explore(
        "a cut-off that never heals",
        Election::new(Timing::BOUNDED, bounds, false),
    );
    checker.assert_no_discovery(NOT_LEADERLESS);
}
