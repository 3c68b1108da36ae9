//! Coordinated mode on the emulator, with the election controller's writes simulated: the
//! LeaseCandidate lifecycle, leading only when named, graceful hand-off, lease loss, leaks,
//! fallback.

mod common;

use common::*;
use conclave_candidate::{
    Candidate, Elector, Error, LeaderState, PodRef, StopReason, Term, Transition,
};
use conclave_core::k8s::timestamp;
use conclave_core::pod::{
    CONTAINER_ANNOTATION, CONTAINER_ID_ANNOTATION, PROCESS_STARTED_ANNOTATION,
};
use conclave_emulator::{Failure, Verb};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::ObjectMeta;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// In a pod, the LeaseCandidate names its Pod in an ownerReference (so the garbage collector
/// deletes it with the Pod) and records its container and process in annotations, at creation
/// and after every renewal; a Pod in another namespace is not named (the garbage collector would
/// delete the candidate at once).
#[tokio::test]
async fn candidate_in_a_pod_names_its_pod_and_records_its_container() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let pod = PodRef {
        name: "web-0".into(),
        uid: "0d2c5e1a-uid".into(),
        namespace: Some(NS.into()),
        container: Some("app".into()),
        container_id: Some("a".repeat(64)),
        process_started: "2026-12-04T10:00:00.5Z".into(),
    };
    let config = candidate_config("1.32.0").with_pod(Some(pod.clone()));
    let candidate = Candidate::new(
        client.clone(),
        lease_config("pod", "web-0-1a2b3c4d"),
        config,
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(candidate.run(shutdown.clone()));
    let api = candidates(&client);
    let check = |object: LeaseCandidate, what: &str| {
        let owners = object.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1, "{what}: {owners:?}");
        assert_eq!(
            (
                owners[0].api_version.as_str(),
                owners[0].kind.as_str(),
                owners[0].name.as_str(),
                owners[0].uid.as_str()
            ),
            ("v1", "Pod", "web-0", "0d2c5e1a-uid"),
            "{what}"
        );
        assert_ne!(owners[0].block_owner_deletion, Some(true), "{what}");
        let annotations = object.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations[CONTAINER_ANNOTATION], "app", "{what}");
        assert_eq!(
            annotations[CONTAINER_ID_ANNOTATION],
            "a".repeat(64),
            "{what}"
        );
        assert_eq!(
            annotations[PROCESS_STARTED_ANNOTATION], "2026-12-04T10:00:00.5Z",
            "{what}"
        );
        let record = conclave_core::k8s::process_record(&LeaseCandidate {
            metadata: ObjectMeta {
                owner_references: Some(owners),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: None,
        })
        .expect("the controller reads the record back");
        assert_eq!(record.container_id, Some("a".repeat(64)), "{what}");
    };
    let created = wait_for("the candidate to be created", || async {
        api.get_opt("web-0-1a2b3c4d").await.unwrap()
    })
    .await;
    check(created, "created");

    // Pinged: the renewal keeps the record.
    let mut pinged = api.get("web-0-1a2b3c4d").await.unwrap();
    let ping = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    pinged.spec.as_mut().unwrap().ping_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(ping),
    );
    api.replace("web-0-1a2b3c4d", &Default::default(), &pinged)
        .await
        .unwrap();
    let renewed = wait_for("the ping to be answered", || async {
        let object = api.get("web-0-1a2b3c4d").await.unwrap();
        let renew = object
            .spec
            .as_ref()?
            .renew_time
            .as_ref()
            .map(|t| timestamp(t.0));
        (renew >= Some(timestamp(ping))).then_some(object)
    })
    .await;
    check(renewed, "renewed");
    shutdown.cancel();
    task.await.unwrap().unwrap();

    // The Pod in another namespace: annotations, but no owner.
    let elsewhere = PodRef {
        namespace: Some("other".into()),
        ..pod
    };
    let object = candidate_config("1.32.0")
        .with_pod(Some(elsewhere))
        .object(&lease_config("pod", "x"));
    assert_eq!(object.metadata.owner_references, None);
    assert!(object.metadata.annotations.is_some());
}

#[tokio::test]
async fn candidate_registers_answers_pings_and_is_deleted_on_shutdown() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let mut config = candidate_config("1.32.0");
    config
        .labels
        .insert("topology.kubernetes.io/zone".into(), "a".into());
    let candidate = Candidate::new(client.clone(), lease_config("cand", "node_1"), config).unwrap();
    let handle = candidate.handle();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(candidate.run(shutdown.clone()));
    let api = candidates(&client);
    let object = wait_for("the candidate to be created", || async {
        api.get_opt("node_1").await.unwrap()
    })
    .await;
    let spec = object.spec.clone().unwrap();
    assert_eq!(spec.lease_name, "cand");
    assert_eq!(spec.binary_version, "1.33.0");
    assert_eq!(spec.emulation_version.as_deref(), Some("1.32.0"));
    assert_eq!(spec.strategy, STRATEGY);
    assert!(spec.renew_time.is_some());
    assert_eq!(
        object.metadata.labels.unwrap()["topology.kubernetes.io/zone"],
        "a"
    );
    wait_for("registered", || async {
        handle.is_registered().then_some(())
    })
    .await;

    // The controller pings: pingTime later than renewTime. The candidate must answer at once.
    let mut pinged = api.get("node_1").await.unwrap();
    let ping = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    pinged.spec.as_mut().unwrap().ping_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(ping),
    );
    api.replace("node_1", &Default::default(), &pinged)
        .await
        .unwrap();
    wait_for("the ping to be answered", || async {
        let spec = api.get("node_1").await.unwrap().spec.unwrap();
        let renew = spec.renew_time.map(|t| timestamp(t.0));
        (renew >= Some(timestamp(ping))).then_some(())
    })
    .await;
    let spec = api.get("node_1").await.unwrap().spec.unwrap();
    assert_eq!(
        spec.ping_time.map(|t| timestamp(t.0)),
        Some(timestamp(ping)),
        "pingTime is the controller's: kept"
    );

    // Deleted by someone (e.g. garbage collection while partitioned): recreated.
    api.delete("node_1", &Default::default()).await.unwrap();
    wait_for("the candidate to be recreated", || async {
        api.get_opt("node_1").await.unwrap()
    })
    .await;

    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert!(
        api.get_opt("node_1").await.unwrap().is_none(),
        "deleted on graceful shutdown"
    );
    assert!(!handle.is_registered());
}

#[tokio::test]
async fn candidate_renews_on_its_interval() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let mut config = candidate_config("1.32.0");
    config.renew_interval = Duration::from_millis(200);
    let candidate = Candidate::new(client.clone(), lease_config("cand", "n"), config).unwrap();
    let mut renewals = candidate.handle().renewals();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(candidate.run(shutdown.clone()));
    tokio::time::timeout(WAIT, renewals.wait_for(|n| *n >= 4))
        .await
        .unwrap()
        .unwrap();
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    // No server at all: validation must not need one.
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let bad = Elector::coordinated(
        client.clone(),
        lease_config("l", "a"),
        candidate_config("1.34.0"),
    );
    match bad {
        Err(Error::InvalidCandidate { message, errors }) => {
            assert!(
                errors.iter().any(|e| e.path == "spec.binaryVersion"),
                "{message}"
            );
            assert!(message.contains("\"a\""), "{message}");
        }
        other => panic!("expected InvalidCandidate, got {other:?}"),
    }
    let mut timers = lease_config("l", "a");
    timers.renew_deadline = timers.lease_duration;
    assert!(matches!(
        Elector::classic(client, timers),
        Err(Error::InvalidConfig { .. })
    ));
}

#[tokio::test]
async fn an_existing_candidate_for_another_lease_is_a_clear_error() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let first = Candidate::new(
        client.clone(),
        lease_config("one", "same"),
        candidate_config("1.32.0"),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(first.run(stop.clone()));
    wait_for("first candidate", || async {
        candidates(&client).get_opt("same").await.unwrap()
    })
    .await;
    let elector = Elector::coordinated(
        client.clone(),
        lease_config("two", "same"),
        candidate_config("1.32.0"),
    )
    .unwrap();
    let result = tokio::time::timeout(
        WAIT,
        elector.run(|_term: Term| async {}, CancellationToken::new()),
    )
    .await
    .expect("run ends on a fatal candidate error");
    assert!(
        matches!(result, Err(Error::CandidateForOtherLease { .. })),
        "{result:?}"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn coordinated_never_acquires_and_leads_once_named() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let a = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("coord", "a"),
            candidate_config("1.32.0"),
        )
        .unwrap(),
        idle_leader(),
    );
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    // Several follower polls later nothing was created.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        leases(&client).get_opt("coord").await.unwrap().is_none(),
        "a coordinated candidate never creates the Lease"
    );
    // An expired Lease naming someone else is not taken either.
    modify(&client, "coord", |spec| {
        spec.holder_identity = Some("dead".into());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        spec.strategy = Some(STRATEGY.into());
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        get_spec(&client, "coord")
            .await
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("dead")
    );
    assert_eq!(*a.handle.leader_state().borrow(), LeaderState::Following);

    assign(&client, "coord", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        s == LeaderState::Leading { term: 1 }
    })
    .await;
    // Renewed with its own duration, strategy kept.
    wait_for("a renews", || async {
        let spec = get_spec(&client, "coord").await.unwrap();
        (spec.lease_duration_seconds == Some(6)).then_some(())
    })
    .await;
    let spec = get_spec(&client, "coord").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.strategy.as_deref(), Some(STRATEGY));
    a.stop().await.unwrap();
}

#[tokio::test]
async fn preemption_drains_then_releases_then_the_new_leader_starts() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let released_before_drained = Arc::new(AtomicBool::new(false));
    let flag = released_before_drained.clone();
    let checker = client.clone();
    let state_dropped: Arc<Mutex<Vec<std::sync::Weak<Vec<u8>>>>> = Arc::default();
    let dropped = state_dropped.clone();
    let a = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("handoff", "a"),
            candidate_config("1.31.0"),
        )
        .unwrap(),
        move |term: Term| {
            let flag = flag.clone();
            let checker = checker.clone();
            // Per-term state: must be gone once the term ended.
            let state = Arc::new(vec![0u8; 1024]);
            dropped.lock().unwrap().push(Arc::downgrade(&state));
            async move {
                for _ in 0..3 {
                    let worker = term.clone();
                    let (flag, checker, state) = (flag.clone(), checker.clone(), state.clone());
                    term.spawn(async move {
                        worker.cancelled().await;
                        // Slow to stop; the Lease must still be held meanwhile.
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        let spec = get_spec(&checker, "handoff").await.unwrap();
                        if spec.holder_identity.as_deref() != Some("a") {
                            flag.store(true, Ordering::SeqCst);
                        }
                        drop(state);
                    });
                }
            }
        },
    );
    let b = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("handoff", "b"),
            candidate_config("1.30.0"),
        )
        .unwrap(),
        idle_leader(),
    );
    let mut a_events = a.handle.transitions();
    let mut b_events = b.handle.transitions();
    wait_for("both registered", || async {
        (a.handle.is_ready() && b.handle.is_ready()).then_some(())
    })
    .await;
    assign(&client, "handoff", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;

    // The controller prefers b.
    preempt(&client, "handoff", "b").await;
    let stopped = next_transition(&mut a_events, "a stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(
            &stopped,
            Transition::StoppedLeading { reason: StopReason::Preempted { preferred_holder }, leaked_tasks: 0, .. } if preferred_holder == "b"
        ),
        "{stopped:?}"
    );
    let released = next_transition(&mut a_events, "a releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    assert!(
        !released_before_drained.load(Ordering::SeqCst),
        "released while tasks were still running"
    );
    assert!(
        state_dropped
            .lock()
            .unwrap()
            .iter()
            .all(|w| w.upgrade().is_none()),
        "per-term state dropped"
    );
    let spec = get_spec(&client, "handoff").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.strategy.as_deref(), Some(STRATEGY));
    assert_eq!(spec.preferred_holder, None);
    next_transition(&mut a_events, "a follows", |t| {
        matches!(t, Transition::Following { .. })
    })
    .await;
    assert!(!a.task.is_finished(), "a stays alive as a follower");
    assert!(a.handle.is_ready(), "a follower is ready");

    // The controller elects b after the release.
    assign(&client, "handoff", "b").await;
    let leading = next_transition(&mut b_events, "b leads", |t| {
        matches!(t, Transition::Leading { .. })
    })
    .await;
    let (
        Transition::Released {
            at: released_at, ..
        },
        Transition::Leading { observed_at, .. },
    ) = (&released, &leading)
    else {
        unreachable!()
    };
    assert!(
        observed_at > released_at,
        "b observed itself as holder only after a released"
    );
    wait_for("a sees b", || async {
        (a.handle.leader().borrow().as_deref() == Some("b")).then_some(())
    })
    .await;

    // a can lead again later in the same process: term 2.
    preempt(&client, "handoff", "a").await;
    next_transition(&mut b_events, "b releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    assign(&client, "handoff", "a").await;
    wait_state(&a.handle, "a leads term 2", |s| {
        s == LeaderState::Leading { term: 2 }
    })
    .await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// The release is written over the version the term read last, to save a read; a controller's
/// write during the drain makes that write conflict, and the release then reads the Lease again:
/// it still releases, and keeps what the controller wrote (here the strategy) instead of undoing
/// it.
#[tokio::test]
async fn a_release_after_a_write_during_the_drain_reads_again_and_keeps_that_write() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let writer = client.clone();
    let a = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("drain-write", "a"),
            candidate_config("1.31.0"),
        )
        .unwrap(),
        move |term: Term| {
            let writer = writer.clone();
            async move {
                let worker = term.clone();
                term.spawn(async move {
                    worker.cancelled().await;
                    // The controller changes the Lease while the term drains.
                    modify(&writer, "drain-write", |spec| {
                        spec.strategy = Some("conclave.dev/priority".into());
                    })
                    .await;
                });
            }
        },
    );
    let mut events = a.handle.transitions();
    wait_for("registered", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&client, "drain-write", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;

    preempt(&client, "drain-write", "b").await;
    next_transition(&mut events, "a releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    let spec = get_spec(&client, "drain-write").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""), "{spec:?}");
    assert_eq!(
        spec.strategy.as_deref(),
        Some("conclave.dev/priority"),
        "the release kept the controller's write made during the drain: {spec:?}"
    );
    a.stop().await.unwrap();
}

#[tokio::test]
async fn lost_lease_cancels_at_once_and_writes_no_release() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let a = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("lost", "a"),
            candidate_config("1.31.0"),
        )
        .unwrap(),
        idle_leader(),
    );
    let mut events = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&client, "lost", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    // Every renewal fails from now on.
    emulator
        .faults()
        .fail_next(Verb::Update, "leases", usize::MAX, Failure::InternalError);
    let stopped = next_transition(&mut events, "a loses the lease", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(
            stopped,
            Transition::StoppedLeading {
                reason: StopReason::LeaseLost,
                ..
            }
        ),
        "{stopped:?}"
    );
    let next = next_transition(&mut events, "a follows", |_| true).await;
    assert!(
        matches!(next, Transition::Following { .. }),
        "no release after a lost lease: {next:?}"
    );
    emulator.faults().clear();
    assert_eq!(
        get_spec(&client, "lost")
            .await
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
    a.stop().await.unwrap();
}

/// Review finding 5 (issue 34): a candidate whose clock runs a minute behind the controller's
/// answers a ping once, with a `renewTime` the controller counts (not before the ping), and does
/// not write again and again.
#[tokio::test]
async fn a_candidate_whose_clock_is_behind_answers_a_ping_once() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let candidate = Candidate::new(
        client.clone(),
        lease_config("skewed", "slow-clock"),
        candidate_config("1.32.0"),
    )
    .unwrap();
    let handle = candidate.handle();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(candidate.run(shutdown.clone()));
    wait_for("registered", || async {
        handle.is_registered().then_some(())
    })
    .await;
    let api = candidates(&client);
    let mut pinged = api.get("slow-clock").await.unwrap();
    let ping = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60);
    pinged.spec.as_mut().unwrap().ping_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(ping),
    );
    api.replace("slow-clock", &Default::default(), &pinged)
        .await
        .unwrap();
    let answered = wait_for_within(
        "the ping answered by a clock a minute behind",
        Duration::from_secs(20),
        || async {
            let object = api.get("slow-clock").await.unwrap();
            let renew = object
                .spec
                .as_ref()?
                .renew_time
                .as_ref()
                .map(|t| timestamp(t.0));
            (renew >= Some(timestamp(ping))).then_some(object)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        api.get("slow-clock")
            .await
            .unwrap()
            .metadata
            .resource_version,
        answered.metadata.resource_version,
        "answered once, no further writes"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// Review finding 1 (issue 34): `kubectl delete lease` while a term's task ignores cancellation,
/// and a controller that creates the Lease again for another candidate at once (kube-apiserver's
/// does; Conclave's waits until the last renewal could have expired). The old leader must not
/// drain on until its own expiry: it looks again every retry period, sees the new holder, and
/// aborts the task at once.
#[tokio::test]
async fn a_deleted_lease_created_again_for_another_aborts_a_stubborn_term_at_once() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let mut config = lease_config("deleted", "a");
    config.lease_duration = Duration::from_secs(60);
    config.renew_deadline = Duration::from_secs(40);
    let elector = Elector::coordinated(
        common::client(&emulator),
        config,
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_drain_timeout(Duration::from_secs(3600));
    let held = Arc::new(());
    let in_term = held.clone();
    let a = Running::start(elector, move |term: Term| {
        let in_term = in_term.clone();
        async move {
            // Ignores cancellation: only an abort ends it.
            term.spawn(async move {
                let _held = in_term;
                std::future::pending::<()>().await;
            });
        }
    });
    let mut events = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&client, "deleted", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    wait_for("the term's task runs", || async {
        (Arc::strong_count(&held) == 3).then_some(())
    })
    .await;
    leases(&client)
        .delete("deleted", &Default::default())
        .await
        .unwrap();
    wait_state(&a.handle, "a no longer leads", |s| {
        !matches!(s, LeaderState::Leading { .. })
    })
    .await;
    assign(&client, "deleted", "b").await;
    // The Lease's last renewal expires a minute later: the task must be gone well before.
    wait_for_within(
        "the stubborn task aborted",
        Duration::from_secs(30),
        || async { (Arc::strong_count(&held) <= 2).then_some(()) },
    )
    .await;
    let stopped = next_transition(&mut events, "a stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(
            stopped,
            Transition::StoppedLeading {
                reason: StopReason::LeaseLost,
                leaked_tasks: 1,
                ..
            }
        ),
        "{stopped:?}"
    );
    a.stop().await.unwrap();
}

#[tokio::test]
async fn tasks_alive_past_the_drain_timeout_are_reported_and_aborted() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::coordinated(
        common::client(&emulator),
        lease_config("leak", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_drain_timeout(Duration::from_millis(300));
    let a = Running::start(elector, |term: Term| async move {
        // Ignores cancellation.
        term.spawn(std::future::pending::<()>());
        let worker = term.clone();
        term.spawn(async move { worker.cancelled().await });
    });
    let mut events = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&client, "leak", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    preempt(&client, "leak", "b").await;
    let stopped = next_transition(&mut events, "a stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(
            stopped,
            Transition::StoppedLeading {
                leaked_tasks: 1,
                ..
            }
        ),
        "{stopped:?}"
    );
    assert_eq!(a.handle.metrics().leaked_tasks("default/leak", "a"), 1);
    // The stubborn task was aborted, so the release still happens.
    next_transition(&mut events, "a releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    a.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_leaves_the_election_before_releasing() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = order.clone();
    let checker = client.clone();
    let a = Running::start(
        Elector::coordinated(
            common::client(&emulator),
            lease_config("bye", "a"),
            candidate_config("1.31.0"),
        )
        .unwrap(),
        move |term: Term| {
            let (log, checker) = (log.clone(), checker.clone());
            async move {
                let worker = term.clone();
                term.spawn(async move {
                    worker.cancelled().await;
                    // Wait (while draining) until the candidate is gone, then check the Lease.
                    wait_for("candidate deleted", || async {
                        candidates(&checker)
                            .get_opt("a")
                            .await
                            .unwrap()
                            .is_none()
                            .then_some(())
                    })
                    .await;
                    let holder = get_spec(&checker, "bye").await.unwrap().holder_identity;
                    log.lock()
                        .unwrap()
                        .push(format!("candidate gone, holder {holder:?}"));
                });
            }
        },
    );
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&client, "bye", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    a.stop().await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["candidate gone, holder Some(\"a\")"]
    );
    assert_eq!(
        get_spec(&client, "bye")
            .await
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("")
    );
}

#[tokio::test]
async fn fallback_takes_a_free_lease_when_no_controller_assigns_one() {
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::coordinated(
        common::client(&emulator),
        lease_config("fallback", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_fallback_after(Duration::from_secs(2));
    let a = Running::start(elector, idle_leader());
    wait_state(&a.handle, "a takes the lease itself", |s| {
        matches!(s, LeaderState::Leading { .. })
    })
    .await;
    let spec = get_spec(&client, "fallback").await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(
        spec.strategy.as_deref(),
        Some(STRATEGY),
        "created with the candidate's strategy"
    );
    a.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_ends_the_term_and_leaves_the_election() {
    // An application that gives up on `run` (drops its future, e.g. in a `select!`) while leading:
    // nobody renews the Lease any more, so the term's work must stop, and the LeaseCandidate must
    // go rather than keep answering pings for an instance that no longer takes part.
    let emulator = emulator().await;
    let client = client(&emulator);
    let elector = Elector::coordinated(
        common::client(&emulator),
        lease_config("dropped", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap();
    let held = Arc::new(());
    let in_term = held.clone();
    // The term's work holds `in_term` until it is cancelled or aborted; it ignores the term token
    // on purpose, so only an abort ends it.
    let a = Running::start(elector, move |term: Term| {
        let in_term = in_term.clone();
        async move {
            term.spawn(async move {
                let _held = in_term;
                std::future::pending::<()>().await;
            });
        }
    });
    wait_for("a's candidate", || async {
        candidates(&client).get_opt("a").await.unwrap().map(|_| ())
    })
    .await;
    assign(&client, "dropped", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        s == LeaderState::Leading { term: 1 }
    })
    .await;
    // Held here, by the lead closure, and by the term's task (the state may be published just
    // before the term's closure runs).
    wait_for("the term's task runs", || async {
        (Arc::strong_count(&held) == 3).then_some(())
    })
    .await;

    a.task.abort();
    wait_for("the term's task ended", || async {
        (Arc::strong_count(&held) == 1).then_some(())
    })
    .await;
    wait_for("a's LeaseCandidate deleted", || async {
        candidates(&client)
            .get_opt("a")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}
