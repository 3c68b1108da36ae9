//! Under Conclave's own controller (`conclave run`, the binary built from host/): three
//! candidates on different versions, the oldest emulation version leads; an upgrade hands over
//! through preferredHolder (Conclave records a `Preempted` Event), the new leader starts only
//! after the old one released, and no process exits.
//!
//! One scenario, run twice: on the emulator, and on a real kube-apiserver + etcd from
//! conclave-testkit (a dedicated control plane, the scenario in a namespace of its own, the
//! built-in election controller held passive while `conclave run --mode all` elects).
//!
//! Needs the `conclave` binary (`cargo build -p conclave`): `$CONCLAVE_BIN`, else
//! `target/debug/conclave`. Without it both tests print SKIP and return, unless
//! `CONCLAVE_REQUIRE_BIN` is set. The real-server test also prints SKIP when the control-plane
//! binaries are not built (tests/kube/build.sh), unless `CONCLAVE_REQUIRE_KUBE` is set.

mod common;

use common::*;
use conclave_candidate::{CandidateConfig, Elector, LeaderState, StopReason, Transition};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use std::path::Path;

const LEASE: &str = "component";

async fn start(server: &Server, who: &str, binary: &str, emulation: &str) -> Running {
    let elector = Elector::coordinated(
        server.client().await,
        server.lease_config(LEASE, who),
        CandidateConfig::new(binary, emulation, STRATEGY),
    )
    .unwrap();
    Running::start(elector, idle_leader())
}

/// The scenario, on either server.
async fn the_oldest_leads_and_an_upgrade_hands_over_gracefully(server: &Server, conclave: &Path) {
    let _controller = ConclaveRun::start(conclave, server).await;
    let ns = server.namespace();
    let patience = server.patience();
    let client = server.client().await;
    let c = start(server, "c", "1.33.0", "1.33.0").await;
    let b = start(server, "b", "1.33.0", "1.31.0").await;
    let a = start(server, "a", "1.33.0", "1.32.0").await;
    let mut b_events = b.handle.transitions();
    wait_for_within("b (oldest emulation version) to lead", patience, || async {
        (b.handle.is_leading() && holder(&client, ns, LEASE).await.as_deref() == Some("b"))
            .then_some(())
    })
    .await;
    assert!(!a.handle.is_leading() && !c.handle.is_leading());

    // Upgrade: c restarts with a newer version; the leader stays.
    c.stop().await.unwrap();
    let c = start(server, "c2", "1.34.0", "1.34.0").await;
    wait_for_within("c2 registered", patience, || async {
        c.handle.is_ready().then_some(())
    })
    .await;
    assert!(
        b.handle.is_leading(),
        "a newer candidate does not pre-empt the oldest"
    );

    // An older candidate joins: Conclave pre-empts b in favour of d.
    let d = start(server, "d", "1.33.0", "1.30.0").await;
    let mut d_events = d.handle.transitions();
    let stopped = next_transition_within(&mut b_events, "b stops", patience, |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(&stopped, Transition::StoppedLeading { reason: StopReason::Preempted { preferred_holder }, leaked_tasks: 0, .. } if preferred_holder == "d"),
        "{stopped:?}"
    );
    let released = next_transition_within(&mut b_events, "b releases", patience, |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    let leading = next_transition_within(&mut d_events, "d leads", patience, |t| {
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
    wait_for_within("the Lease to name d", patience, || async {
        (holder(&client, ns, LEASE).await.as_deref() == Some("d")).then_some(())
    })
    .await;
    // Conclave, not kube-apiserver's (held) controller, asked b to step down.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    wait_for_within("conclave's Preempted Event", patience, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Preempted")
                    && e.reporting_controller.as_deref() == Some("conclave")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(LEASE)
            })
            .then_some(())
    })
    .await;
    for (name, running) in [("a", &a), ("b", &b), ("c2", &c), ("d", &d)] {
        assert!(!running.task.is_finished(), "{name} exited");
    }
    assert_eq!(*b.handle.leader_state().borrow(), LeaderState::Following);
    assert!(b.handle.is_ready(), "a follower is ready");
    for running in [a, b, c, d] {
        running.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn under_conclave_on_the_emulator() {
    let Some(conclave) = conclave_binary() else {
        return;
    };
    let server = Server::emulator("under-conclave").await;
    the_oldest_leads_and_an_upgrade_hands_over_gracefully(&server, &conclave).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_conclave_on_kube_apiserver() {
    let Some(conclave) = conclave_binary() else {
        return;
    };
    let Some(server) = Server::real("under-conclave").await else {
        return;
    };
    the_oldest_leads_and_an_upgrade_hands_over_gracefully(&server, &conclave).await;
}
