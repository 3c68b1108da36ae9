//! What kube-apiserver's built-in election controller does with candidates that ask for a
//! third-party strategy (`example.com/foo`). Findings are recorded in tests/kube/README.md.

use std::time::Duration;

use conclave_testkit::{CandidateResponder, ControlPlane, lease_candidate, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

const TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn third_party_strategy_gets_a_lease_without_holder() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("third-party").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let mut responders = Vec::new();
    for (name, emulation) in [("a", "1.36.0"), ("b", "1.37.0")] {
        let c = lease_candidate(
            &ns,
            name,
            "tp",
            "1.37.2",
            Some(emulation),
            "example.com/foo",
        );
        responders.push(
            CandidateResponder::register(client.clone(), c)
                .await
                .unwrap(),
        );
    }

    let lease = wait_for(
        "the built-in controller to create lease tp",
        TIMEOUT,
        || async { leases.get_opt("tp").await.map_err(Into::into) },
    )
    .await
    .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.strategy.as_deref(), Some("example.com/foo"));
    assert_eq!(
        spec.holder_identity, None,
        "the built-in controller must not pick a holder"
    );
    assert_eq!(spec.lease_duration_seconds, Some(5));
    assert!(spec.renew_time.is_some());

    // The lease expires after 5 s without a holder; the controller keeps it as it is and the
    // apiserver keeps running.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let later = leases.get("tp").await.unwrap().spec.unwrap();
    assert_eq!(later.holder_identity, None);
    assert_eq!(later.strategy.as_deref(), Some("example.com/foo"));
    cp.check_running().unwrap();
}

/// Spec §6.6: the controller dereferences the existing holder without a nil check when it
/// elects for `OldestEmulationVersion` on an expired Lease that has no holder, which is exactly
/// the Lease it creates itself for a third-party strategy. In v1.37.2 the panic is re-raised by
/// `HandleCrash` and kills kube-apiserver. Conclave must never leave such a Lease where the
/// built-in controller is active; if this test starts failing, upstream fixed the bug: update
/// tests/kube/README.md.
#[tokio::test(flavor = "multi_thread")]
async fn holderless_lease_switching_to_oldest_emulation_version_crashes_kube_apiserver() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("holderless").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let c = lease_candidate(&ns, "a", "hl", "1.37.2", Some("1.36.0"), "example.com/foo");
    let _a = CandidateResponder::register(client.clone(), c)
        .await
        .unwrap();
    let lease = wait_for(
        "the built-in controller to create lease hl",
        TIMEOUT,
        || async { leases.get_opt("hl").await.map_err(Into::into) },
    )
    .await
    .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);

    // Once the holderless Lease has expired (5 s), a newer binary asks for the built-in strategy.
    // The highest binary version decides the strategy, so the controller now elects "a"; it finds
    // the Lease expired and compares the new holder with the nil old one.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let c = lease_candidate(
        &ns,
        "b",
        "hl",
        "1.38.0",
        Some("1.37.0"),
        "OldestEmulationVersion",
    );
    let _b = CandidateResponder::register(client.clone(), c)
        .await
        .unwrap();

    wait_for("kube-apiserver to exit", TIMEOUT, || async {
        Ok((!cp.apiserver_running()).then_some(()))
    })
    .await
    .unwrap();
    let log = cp.apiserver_log_tail(200_000);
    assert!(log.contains("nil pointer dereference"), "{log}");
    assert!(
        log.contains("leaderelection.(*Controller).reconcileElectionStep"),
        "the panic is not in the election controller:\n{log}"
    );
}
