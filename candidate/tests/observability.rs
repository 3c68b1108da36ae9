//! What a component can log and alert on: transitions in order with the term's own work, a
//! Lease no election controller acts on (reported once), and a failed release (a transition in
//! the term's order and a metric, not only a log line).

mod common;

use common::*;
use conclave_candidate::{Coordination, Elector, Notice, Operation, Term, Transition};
use conclave_emulator::{Failure, Verb};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Short for "what the hook and the term wrote, in order".
type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, line: String) {
    log.lock().unwrap().push(line);
}

#[tokio::test]
async fn transitions_come_in_order_with_the_term() {
    let emulator = emulator().await;
    let admin = client(&emulator);
    let log: Log = Arc::default();
    let hook_log = log.clone();
    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("ordered", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .on_transition(move |t| {
        let line = serde_json::to_value(t).unwrap();
        let event = line["event"].as_str().unwrap().to_owned();
        push(
            &hook_log,
            match line.get("term") {
                Some(term) => format!("{event} {term}"),
                None => event,
            },
        );
    });
    let term_log = log.clone();
    let a = Running::start(elector, move |term: Term| {
        // Synchronous part of the closure: it runs on the elector's task.
        push(&term_log, format!("closure {}", term.number()));
        let (worker, worker_log) = (term.clone(), term_log.clone());
        term.spawn(async move {
            worker.cancelled().await;
            push(&worker_log, format!("task done {}", worker.number()));
        });
        async {}
    });
    let mut transitions = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&admin, "ordered", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, conclave_candidate::LeaderState::Leading { .. })
    })
    .await;
    preempt(&admin, "ordered", "b").await;
    next_transition(&mut transitions, "a follows again", |t| {
        matches!(t, Transition::Following { .. })
    })
    .await;
    a.stop().await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [
            "following",
            "leading 1",
            "closure 1",
            "task done 1",
            "stopped-leading 1",
            "released 1",
            "following",
        ]
    );
}

#[tokio::test]
async fn a_lease_no_controller_acts_on_is_reported_once() {
    let emulator = emulator().await;
    let admin = client(&emulator);
    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("unattended", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_controller_timeout(Duration::from_secs(1));
    let handle = elector.handle();
    let mut notices = handle.notices();
    let mut coordination = handle.coordination();
    let a = Running::start(elector, idle_leader());

    // Nobody assigns a holder: reported after the timeout.
    let notice = tokio::time::timeout(WAIT, notices.recv())
        .await
        .expect("a notice")
        .unwrap();
    assert!(
        matches!(notice, Notice::NoElectionController { .. }),
        "{notice:?}"
    );
    tokio::time::timeout(
        WAIT,
        coordination.wait_for(|c| matches!(c, Coordination::Unattended { .. })),
    )
    .await
    .expect("unattended state")
    .unwrap();
    assert!(handle.metrics().is_unattended("default/unattended", "a"));
    let line = serde_json::to_value(&notice).unwrap();
    assert_eq!(line["event"], "no-election-controller");
    assert!(line["since"].as_str().unwrap().ends_with('Z'), "{line}");

    // Several polls later a controller elects: the next notice is the recovery, not a repeat.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assign(&admin, "unattended", "a").await;
    let notice = tokio::time::timeout(WAIT, notices.recv())
        .await
        .expect("a notice")
        .unwrap();
    assert!(
        matches!(notice, Notice::ElectionControllerActing { .. }),
        "reported once, then recovered: {notice:?}"
    );
    assert_eq!(*handle.coordination().borrow(), Coordination::Attended);
    assert!(!handle.metrics().is_unattended("default/unattended", "a"));
    a.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_release_is_a_transition_and_a_metric() {
    let emulator = emulator().await;
    let admin = client(&emulator);
    let hooked: Arc<Mutex<Vec<Transition>>> = Arc::default();
    let hook = hooked.clone();
    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("unreleased", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .on_transition(move |t| hook.lock().unwrap().push(t.clone()));
    let handle = elector.handle();
    let mut transitions = handle.transitions();
    let stop_work = Arc::new(Notify::new());
    let work = stop_work.clone();
    let a = Running::start(elector, move |term: Term| {
        let work = work.clone();
        // Holds the drain until the test has broken Lease writes.
        term.spawn(async move { work.notified().await });
        async {}
    });
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&admin, "unreleased", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, conclave_candidate::LeaderState::Leading { .. })
    })
    .await;
    preempt(&admin, "unreleased", "b").await;
    wait_state(&a.handle, "a drains", |s| {
        matches!(s, conclave_candidate::LeaderState::Draining { .. })
    })
    .await;
    emulator
        .faults()
        .fail_next(Verb::Update, "leases", usize::MAX, Failure::InternalError);
    stop_work.notify_one();
    let failed = next_transition(&mut transitions, "the release fails", |t| {
        matches!(t, Transition::ReleaseFailed { .. })
    })
    .await;
    match &failed {
        Transition::ReleaseFailed { term: 1, error, .. } => {
            assert!(
                error.contains("could not release Lease default/unreleased"),
                "{error}"
            );
        }
        other => panic!("expected ReleaseFailed for term 1, got {other:?}"),
    }
    let line = serde_json::to_value(&failed).unwrap();
    assert_eq!(line["event"], "release-failed");
    assert_eq!(line["term"], 1);
    let metrics = handle.metrics();
    assert_eq!(metrics.release_failures("default/unreleased", "a"), 1);
    assert!(metrics.api_errors("default/unreleased", "a", Operation::Release) >= 1);
    emulator.faults().clear();
    a.stop().await.unwrap();
    // In the term's order, where `Released` would have been, and nothing was released.
    let events: Vec<String> = hooked
        .lock()
        .unwrap()
        .iter()
        .map(|t| {
            serde_json::to_value(t).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        events,
        [
            "following",
            "leading",
            "stopped-leading",
            "release-failed",
            "following"
        ]
    );
}

/// Issue 36, point 5: every replica counts its own terms from 1, so `term` cannot correlate
/// the terms of two replicas. Each term's transitions and log lines carry the Lease's
/// `leaseTransitions` as the term's first write left it: one number per term, whoever leads,
/// larger for a later term; the election controller here (like kube-apiserver's) never counts.
#[tokio::test]
async fn terms_carry_the_leases_transition_count_across_replicas() {
    let logs = captured_logs();
    let emulator = emulator().await;
    let admin = client(&emulator);
    let start = |identity: &str| {
        let elector = Elector::coordinated(
            client(&emulator),
            lease_config("correlated", identity),
            candidate_config("1.31.0"),
        )
        .unwrap();
        Running::start(elector, idle_leader())
    };
    let (a, b) = (start("a"), start("b"));
    let (mut a_events, mut b_events) = (a.handle.transitions(), b.handle.transitions());
    for replica in [&a, &b] {
        wait_for("ready", || async {
            replica.handle.is_ready().then_some(())
        })
        .await;
    }
    // The transitions of one term, from its Leading to its Released: the same number in each,
    // and the number the Lease had after the term's first write.
    async fn one_term(
        admin: &kube::Client,
        events: &mut tokio::sync::broadcast::Receiver<Transition>,
        holder: &str,
        next: &str,
    ) -> (u64, i32) {
        assign(admin, "correlated", holder).await;
        let leading = next_transition(events, "leading", |t| {
            matches!(t, Transition::Leading { .. })
        })
        .await;
        let Transition::Leading {
            term,
            lease_transitions: Some(number),
            ..
        } = leading
        else {
            panic!("{leading:?}");
        };
        let spec = get_spec(admin, "correlated").await.unwrap();
        assert_eq!(spec.lease_transitions, Some(number), "{holder}");
        preempt(admin, "correlated", next).await;
        let stopped = next_transition(events, "stopped", |t| {
            matches!(t, Transition::StoppedLeading { .. })
        })
        .await;
        assert!(
            matches!(stopped, Transition::StoppedLeading { lease_transitions, .. } if lease_transitions == Some(number)),
            "{stopped:?}"
        );
        let released = next_transition(events, "released", |t| {
            matches!(t, Transition::Released { .. })
        })
        .await;
        assert!(
            matches!(released, Transition::Released { lease_transitions, .. } if lease_transitions == Some(number)),
            "{released:?}"
        );
        (term, number)
    }
    let a1 = one_term(&admin, &mut a_events, "a", "b").await;
    let b1 = one_term(&admin, &mut b_events, "b", "a").await;
    let a2 = one_term(&admin, &mut a_events, "a", "b").await;
    assert_eq!(
        (a1.0, b1.0, a2.0),
        (1, 1, 2),
        "each replica counts its own terms"
    );
    assert!(
        a1.1 < b1.1 && b1.1 < a2.1,
        "one number per term, in order across replicas: {a1:?} {b1:?} {a2:?}"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    let logged: Vec<i64> = logs
        .lines("INFO", "started leading")
        .iter()
        .filter(|line| line["fields"]["lease"] == "default/correlated")
        .filter_map(|line| line["fields"]["lease_transitions"].as_i64())
        .collect();
    assert_eq!(
        logged,
        [a1.1, b1.1, a2.1].map(i64::from),
        "the log lines name the term the same way"
    );
}
