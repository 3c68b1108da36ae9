//! Upstream behaviour Conclave must match: three real kube-schedulers with different emulated
//! versions register LeaseCandidates, and kube-apiserver's built-in election controller makes the
//! one with the oldest emulation version the holder of `kube-system/kube-scheduler`.

use std::time::Duration;

use conclave_testkit::{ControlPlane, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Generous: three Go processes start on a shared 2-core machine, then an election with pings.
const TIMEOUT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn builtin_controller_elects_the_oldest_emulation_version() {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let client = cp.client().await.unwrap();
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");

    // Newest first, so the oldest is not simply the first to register.
    let mut schedulers: Vec<_> = ["1.37", "1.35", "1.36"]
        .iter()
        .map(|v| cp.start_scheduler(Some(v)).expect("start kube-scheduler"))
        .collect();

    // No field selector on spec.leaseName in v1.37.2 (see tests/api.rs): filter here.
    let registered = wait_for("three kube-scheduler LeaseCandidates", TIMEOUT, || async {
        let list = candidates.list(&ListParams::default()).await?;
        let items: Vec<LeaseCandidate> = list
            .items
            .into_iter()
            .filter(|c| {
                c.spec
                    .as_ref()
                    .is_some_and(|s| s.lease_name == "kube-scheduler")
            })
            .collect();
        Ok((items.len() == 3).then_some(items))
    })
    .await
    .unwrap();

    let mut versions: Vec<(String, String, String)> = registered
        .iter()
        .map(|c| {
            let spec = c.spec.clone().unwrap();
            (
                spec.emulation_version.unwrap_or_default(),
                spec.binary_version,
                spec.strategy,
            )
        })
        .collect();
    versions.sort();
    // The binaries report the stamped version, and --emulated-version reaches the candidate.
    let expected = |e: &str| {
        (
            e.to_owned(),
            "1.37.2".to_owned(),
            "OldestEmulationVersion".to_owned(),
        )
    };
    assert_eq!(
        versions,
        [expected("1.35.0"), expected("1.36.0"), expected("1.37.0")]
    );
    let oldest = registered
        .iter()
        .find(|c| c.spec.as_ref().unwrap().emulation_version.as_deref() == Some("1.35.0"))
        .unwrap()
        .name_any();

    // The oldest holds the lease, nobody is asked to step down, and the scheduler itself renews
    // it (it rewrites leaseDurationSeconds from the controller's 5 to its own 15).
    let lease = wait_for(
        "kube-scheduler lease held and renewed by the oldest",
        TIMEOUT,
        || async {
            let Some(lease) = leases.get_opt("kube-scheduler").await? else {
                return Ok(None);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let settled = spec.holder_identity.as_deref() == Some(oldest.as_str())
                && spec.preferred_holder.is_none()
                && spec.lease_duration_seconds == Some(15);
            Ok(settled.then_some(lease))
        },
    )
    .await
    .unwrap();
    assert_eq!(
        lease.spec.unwrap().strategy.as_deref(),
        Some("OldestEmulationVersion")
    );

    // The elected scheduler runs and leads.
    let leader = schedulers
        .iter_mut()
        .find(|s| s.emulated_version() == Some("1.35"))
        .unwrap();
    assert!(
        leader.exit_status().is_none(),
        "the elected scheduler exited"
    );
    let log = std::fs::read_to_string(leader.log_path()).unwrap();
    assert!(
        log.contains(r#""Successfully acquired lease" lock="kube-system/kube-scheduler""#),
        "the elected scheduler's log does not show it acquiring the lease: {}",
        leader.log_path().display()
    );
}
