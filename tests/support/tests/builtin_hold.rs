//! Holding `kube-system/leader-election-controller` keeps kube-apiserver's built-in election
//! controller passive; releasing it lets the controller elect again.

use std::time::Duration;

use conclave_testkit::{CandidateResponder, ControlPlane, lease_candidate, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::Api;

const TIMEOUT: Duration = Duration::from_secs(120);
/// How long the passive controller is watched for any reaction. It pings a new candidate within
/// a second or two when active, so silence this long means it is not running.
const QUIET: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn held_lease_keeps_the_builtin_controller_passive_until_released() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.unwrap();

    // A fresh apiserver starts its controller: wait until it leads, then take its lease.
    wait_for("the built-in controller to lead", TIMEOUT, || async {
        Ok(cp.builtin_controller_leading().await?.then_some(()))
    })
    .await
    .unwrap();
    let hold = cp.hold_builtin_controller_lease().await.unwrap();
    assert!(!cp.builtin_controller_leading().await.unwrap());

    let ns = cp.namespace("hold").await.unwrap();
    let candidate = lease_candidate(
        &ns,
        "only",
        "held",
        "1.37.2",
        Some("1.37.0"),
        "OldestEmulationVersion",
    );
    let responder = CandidateResponder::register(client.clone(), candidate)
        .await
        .unwrap();
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    tokio::time::sleep(QUIET).await;
    let seen = candidates.get("only").await.unwrap();
    assert!(
        seen.spec.unwrap().ping_time.is_none(),
        "a passive controller must not ping candidates"
    );
    assert!(
        leases.get_opt("held").await.unwrap().is_none(),
        "a passive controller must not create leases"
    );
    assert!(!cp.builtin_controller_leading().await.unwrap());

    hold.release().await.unwrap();
    let holder = wait_for(
        "the built-in controller to elect after release",
        TIMEOUT,
        || async {
            let lease = leases.get_opt("held").await?;
            Ok(lease.and_then(|l| l.spec?.holder_identity))
        },
    )
    .await
    .unwrap();
    assert_eq!(holder, responder.name());
    assert!(cp.builtin_controller_leading().await.unwrap());
}
