//! Classic (non-coordinated) mode on the emulator: acquire, renew, release, take turns.

mod common;

use common::*;
use conclave_candidate::{Elector, LeaderState, StopReason, Term, Transition};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test]
async fn classic_acquires_a_missing_lease_and_releases_after_draining() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::classic(client.clone(), lease_config("classic-a", "a")).unwrap();
    let mut transitions = elector.handle().transitions();
    // What the term's task saw on the Lease after its term was cancelled.
    let seen_while_draining: Arc<Mutex<Option<Option<String>>>> = Arc::default();
    let seen = seen_while_draining.clone();
    let checker = client.clone();
    let running = Running::start(elector, move |term: Term| {
        let seen = seen.clone();
        let checker = checker.clone();
        async move {
            let worker = term.clone();
            term.spawn(async move {
                worker.cancelled().await;
                // Still draining: the Lease must still be ours.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let holder = get_spec(&checker, "classic-a")
                    .await
                    .and_then(|s| s.holder_identity);
                *seen.lock().unwrap() = Some(holder);
            });
        }
    });
    wait_state(&running.handle, "a leads", |s| {
        s == LeaderState::Leading { term: 1 }
    })
    .await;
    let spec = get_spec(&client, "classic-a").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(6));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(running.handle.is_ready());
    assert_eq!(*running.handle.leader().borrow(), Some("a".to_string()));

    running.stop().await.unwrap();
    assert_eq!(
        *seen_while_draining.lock().unwrap(),
        Some(Some("a".to_string()))
    );
    let spec = get_spec(&client, "classic-a").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.preferred_holder, None);
    assert_eq!(spec.renew_time, spec.acquire_time);
    let mut order = Vec::new();
    while let Ok(t) = transitions.try_recv() {
        order.push(t);
    }
    let kinds: Vec<&str> = order
        .iter()
        .map(|t| match t {
            Transition::Following { .. } => "following",
            Transition::Leading { .. } => "leading",
            Transition::StoppedLeading { .. } => "stopped",
            Transition::Released { .. } => "released",
            Transition::ReleaseFailed { .. } => "release-failed",
        })
        .collect();
    assert_eq!(
        kinds,
        ["following", "leading", "stopped", "released", "following"]
    );
    assert!(matches!(
        &order[2],
        Transition::StoppedLeading {
            reason: StopReason::Shutdown,
            leaked_tasks: 0,
            ..
        }
    ));
}

#[tokio::test]
async fn classic_keeps_strategy_on_release_and_a_second_elector_takes_over() {
    let emulator = emulator().await;
    let client = client(&emulator);
    // A Lease with a strategy but nobody holding it.
    modify(&client, "classic-b", |spec| {
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        spec.strategy = Some(STRATEGY.into());
        spec.lease_transitions = Some(3);
    })
    .await;
    let a = Running::start(
        Elector::classic(common::client(&emulator), lease_config("classic-b", "a")).unwrap(),
        idle_leader(),
    );
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    let spec = get_spec(&client, "classic-b").await.unwrap();
    assert_eq!(
        spec.lease_transitions,
        Some(4),
        "taking over counts a transition"
    );
    assert_eq!(spec.strategy.as_deref(), Some(STRATEGY));

    let b = Running::start(
        Elector::classic(common::client(&emulator), lease_config("classic-b", "b")).unwrap(),
        idle_leader(),
    );
    wait_for("b to see a as leader", || async {
        (b.handle.leader().borrow().as_deref() == Some("a") && b.handle.is_ready()).then_some(())
    })
    .await;
    assert_eq!(*b.handle.leader_state().borrow(), LeaderState::Following);

    a.stop().await.unwrap();
    wait_state(&b.handle, "b leads after a released", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    let spec = get_spec(&client, "classic-b").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(
        spec.strategy.as_deref(),
        Some(STRATEGY),
        "strategy survives release and takeover"
    );
    b.stop().await.unwrap();
}

#[tokio::test]
async fn classic_takes_an_expired_lease_but_not_a_live_one() {
    let emulator = emulator().await;
    let client = client(&emulator);
    // Held by a live holder that keeps renewing.
    modify(&client, "classic-c", |spec| {
        spec.holder_identity = Some("other".into());
        spec.lease_duration_seconds = Some(3);
        spec.renew_time = Some(now_micro());
    })
    .await;
    let renewing = tokio::spawn({
        let client = client.clone();
        async move {
            for _ in 0..12 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                modify(&client, "classic-c", |spec| {
                    spec.renew_time = Some(now_micro())
                })
                .await;
            }
        }
    });
    let a = Running::start(
        Elector::classic(common::client(&emulator), lease_config("classic-c", "a")).unwrap(),
        idle_leader(),
    );
    renewing.await.unwrap();
    // Twelve renewals later `a` has never led.
    assert_eq!(*a.handle.leader_state().borrow(), LeaderState::Following);
    assert_eq!(a.handle.metrics().terms("default/classic-c", "a"), 0);
    // The holder stops renewing: the Lease expires and `a` takes it.
    wait_state(&a.handle, "a takes the expired lease", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    let spec = get_spec(&client, "classic-c").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(1));
    a.stop().await.unwrap();
}

#[tokio::test]
async fn a_write_by_someone_else_ends_the_term_at_once_without_release() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let a = Running::start(
        Elector::classic(common::client(&emulator), lease_config("classic-d", "a")).unwrap(),
        idle_leader(),
    );
    let mut transitions = a.handle.transitions();
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    // Someone overwrites the holder (a misbehaving writer): the term must end as lost.
    modify(&client, "classic-d", |spec| {
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(now_micro());
    })
    .await;
    let stopped = next_transition(&mut transitions, "a stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(matches!(
        stopped,
        Transition::StoppedLeading {
            reason: StopReason::LeaseLost,
            ..
        }
    ));
    next_transition(&mut transitions, "a follows", |t| {
        matches!(t, Transition::Following { .. })
    })
    .await;
    let spec = get_spec(&client, "classic-d").await.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("intruder"),
        "no release written over the new holder"
    );
    a.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_namespace_blocks_readiness_with_the_remedy_until_it_exists() {
    use k8s_openapi::api::core::v1::Namespace;
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::classic(client.clone(), lease_config_in("absent", "own", "a")).unwrap();
    let handle = elector.handle();
    let mut blocked = handle.blocked();
    let running = Running::start(elector, |_term: Term| async {});

    let seen = tokio::time::timeout(WAIT, blocked.wait_for(Option::is_some))
        .await
        .expect("the refused create is reported")
        .expect("elector alive")
        .clone()
        .expect("blocked");
    assert!(seen.namespace_missing(), "{seen}");
    assert_eq!(seen.namespace, "absent");
    assert_eq!(seen.operation, conclave_candidate::Operation::Create);
    let text = seen.to_string();
    assert!(
        text.starts_with("cannot create Lease absent/own: ")
            && text.contains("HTTP 404")
            && text.ends_with("create namespace \"absent\" or use a namespace that exists"),
        "{text}"
    );
    assert!(!running.handle.is_ready(), "not ready while blocked");
    assert_eq!(
        *running.handle.leader_state().borrow(),
        LeaderState::Following
    );

    // The operator creates the namespace: the elector takes the Lease, and is ready.
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("absent".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    kube::Api::<Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &namespace)
        .await
        .expect("namespace created");
    wait_state(&running.handle, "a leads", |s| {
        s == LeaderState::Leading { term: 1 }
    })
    .await;
    assert!(handle.blocked().borrow().is_none());
    assert!(running.handle.is_ready());
    running.stop().await.unwrap();
}

/// A shutdown while the Lease's renewals fail (the API server refuses every Lease update): the
/// term drains, and the Lease counts as its own only until the renew deadline of its last
/// successful renewal. [`Term::held`] is cancelled then, while a task that does not stop is
/// still running (it is aborted later, before the expiry), and before the Lease as stored
/// expires: work gated on it (the controller's writes) stops before anyone else may lead.
#[tokio::test]
async fn a_drain_whose_renewals_fail_lets_go_of_the_lease_at_the_renew_deadline() {
    use conclave_emulator::{Failure, Verb};
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::classic(client.clone(), lease_config("held-a", "a")).unwrap();
    let (let_go_tx, let_go) = tokio::sync::oneshot::channel::<jiff::Timestamp>();
    let let_go_tx = Arc::new(Mutex::new(Some(let_go_tx)));
    let running = Running::start(elector, move |term: Term| {
        let let_go_tx = let_go_tx.clone();
        async move {
            let worker = term.clone();
            term.spawn(async move {
                worker.cancelled().await;
                worker.held().cancelled().await;
                if let Some(tx) = let_go_tx.lock().unwrap().take() {
                    let _ = tx.send(jiff::Timestamp::now());
                }
                // A task that does not stop: the drain aborts it.
                std::future::pending::<()>().await;
            });
        }
    });
    wait_state(&running.handle, "a leads", |s| {
        s == LeaderState::Leading { term: 1 }
    })
    .await;
    emulator
        .faults()
        .fail_next(Verb::Update, "leases", usize::MAX, Failure::InternalError);
    // Renewals fail for a while before the shutdown.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    running.shutdown.cancel();
    let at = tokio::time::timeout(WAIT, let_go)
        .await
        .expect("the Lease let go of while the term drains")
        .expect("the task saw it");
    let spec = get_spec(&client, "held-a").await.unwrap();
    let renewed = spec.renew_time.expect("renewTime").0;
    let expiry = renewed + jiff::SignedDuration::from_secs(6);
    assert!(
        at < expiry,
        "the term still counted the Lease as held at {at}, when it expired ({expiry})"
    );
    emulator.faults().clear();
    running.stop().await.unwrap();
}
