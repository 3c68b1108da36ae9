//! On a real kube-apiserver (conclave-testkit), driven by kube-apiserver's built-in coordinated
//! leader election controller: the oldest emulation version leads, an upgrade hands over through
//! preferredHolder with no process exiting, and a conclave-candidate interoperates with a real
//! kube-scheduler on the same Lease. Skipped (with a SKIP line) when the binaries are missing.

mod common;

use common::*;
use conclave_candidate::{CandidateConfig, Elector, LeaderState, StopReason, Transition};
use conclave_testkit::ControlPlane;
use kube::{Api, Client};
use std::time::Duration;

fn start(
    client: Client,
    namespace: &str,
    identity: &str,
    binary: &str,
    emulation: &str,
) -> Running {
    let elector = Elector::coordinated(
        client,
        lease_config_in(namespace, "upgrade", identity),
        CandidateConfig::new(binary, emulation, STRATEGY),
    )
    .unwrap();
    Running::start(elector, idle_leader())
}

#[tokio::test(flavor = "multi_thread")]
async fn builtin_controller_elects_the_oldest_and_an_upgrade_hands_over_gracefully() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    let ns = cp.namespace("candidate-upgrade").await.unwrap();
    let client = cp.client().await.unwrap();
    // Three candidates on different versions; the oldest emulation version must lead.
    let c = start(cp.client().await.unwrap(), &ns, "c", "1.33.0", "1.33.0");
    let b = start(cp.client().await.unwrap(), &ns, "b", "1.33.0", "1.31.0");
    let a = start(cp.client().await.unwrap(), &ns, "a", "1.33.0", "1.32.0");
    let mut b_events = b.handle.transitions();
    wait_for_within(
        "b (oldest emulation version) to lead",
        REAL_WAIT,
        || async {
            (b.handle.is_leading() && holder(&client, &ns, "upgrade").await.as_deref() == Some("b"))
                .then_some(())
        },
    )
    .await;
    assert!(!a.handle.is_leading() && !c.handle.is_leading());

    // Upgrade: c restarts with a newer version; nothing changes for the leader.
    c.stop().await.unwrap();
    let c = start(cp.client().await.unwrap(), &ns, "c2", "1.34.0", "1.34.0");
    wait_for_within("c2 registered", REAL_WAIT, || async {
        c.handle.is_ready().then_some(())
    })
    .await;
    assert!(
        b.handle.is_leading(),
        "a newer candidate does not pre-empt the oldest"
    );

    // An older candidate joins: the controller sets preferredHolder = d; b hands over gracefully.
    let d = start(cp.client().await.unwrap(), &ns, "d", "1.33.0", "1.30.0");
    let mut d_events = d.handle.transitions();
    let stopped = next_transition_within(&mut b_events, "b stops leading", REAL_WAIT, |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(&stopped, Transition::StoppedLeading { reason: StopReason::Preempted { preferred_holder }, leaked_tasks: 0, .. } if preferred_holder == "d"),
        "{stopped:?}"
    );
    let released = next_transition_within(&mut b_events, "b releases", REAL_WAIT, |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    let leading = next_transition_within(&mut d_events, "d leads", REAL_WAIT, |t| {
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
    assert!(observed_at > released_at, "d started only after b released");
    assert_eq!(holder(&client, &ns, "upgrade").await.as_deref(), Some("d"));
    // No process (elector) exited: b follows and is ready.
    for (name, running) in [("a", &a), ("b", &b), ("c2", &c), ("d", &d)] {
        assert!(!running.task.is_finished(), "{name} exited");
    }
    assert_eq!(*b.handle.leader_state().borrow(), LeaderState::Following);
    assert!(b.handle.is_ready());
    for running in [a, b, c, d] {
        running.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conclave_candidate_and_a_real_kube_scheduler_share_the_lease() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.unwrap();
    let lease = "kube-scheduler";
    let mut ours = lease_config_in("kube-system", lease, "conclave-scheduler-a");
    ours.lease_duration = Duration::from_secs(15);
    ours.renew_deadline = Duration::from_secs(10);
    ours.retry_period = Duration::from_secs(2);
    // Older emulation version than the scheduler's (1.37 by default): ours is the best.
    let elector = Elector::coordinated(
        cp.client().await.unwrap(),
        ours,
        CandidateConfig::new("1.37.2", "1.36.0", STRATEGY),
    )
    .unwrap();
    let a = Running::start(elector, idle_leader());
    wait_for_within("our candidate leads kube-scheduler", REAL_WAIT, || async {
        (a.handle.is_leading()
            && holder(&client, "kube-system", lease).await.as_deref()
                == Some("conclave-scheduler-a"))
        .then_some(())
    })
    .await;
    let mut scheduler = cp.start_scheduler(None).unwrap();
    // The scheduler registers its candidate and follows.
    let candidates: Api<k8s_openapi::api::coordination::v1beta1::LeaseCandidate> =
        Api::namespaced(client.clone(), "kube-system");
    wait_for_within("the scheduler's LeaseCandidate", REAL_WAIT, || async {
        let list = candidates.list(&Default::default()).await.ok()?;
        (list
            .items
            .iter()
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.lease_name == lease))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    assert!(
        a.handle.is_leading(),
        "the newer scheduler does not pre-empt us"
    );
    // We leave gracefully: the built-in controller elects the scheduler.
    a.stop().await.unwrap();
    let next = wait_for_within("the scheduler to lead", REAL_WAIT, || async {
        holder(&client, "kube-system", lease)
            .await
            .filter(|h| !h.is_empty() && h != "conclave-scheduler-a")
    })
    .await;
    eprintln!("kube-scheduler lease holder after our release: {next}");
    assert!(
        scheduler.exit_status().is_none(),
        "kube-scheduler kept running; holder now {next}"
    );
}
