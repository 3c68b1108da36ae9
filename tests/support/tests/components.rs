//! Upstream behaviour Conclave must match: real kube-schedulers (and kube-controller-managers)
//! with different emulated versions register LeaseCandidates, and kube-apiserver's built-in
//! election controller makes the one with the oldest emulation version the holder of the
//! component's Lease in `kube-system`.

use std::time::Duration;

use conclave_testkit::{ComponentKind, ControlPlane, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Generous: several Go processes start on a shared 2-core machine, then an election with pings.
const TIMEOUT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn three_schedulers_oldest_emulation_version_leads() {
    // Newest first, so the oldest is not simply the first to register.
    oldest_emulation_version_leads(ComponentKind::Scheduler, &["1.37", "1.35", "1.36"], "1.35")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_controller_managers_oldest_emulation_version_leads() {
    oldest_emulation_version_leads(ComponentKind::ControllerManager, &["1.37", "1.36"], "1.36")
        .await;
}

async fn oldest_emulation_version_leads(kind: ComponentKind, emulated: &[&str], oldest: &str) {
    let Some(cp) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let lease_name = kind.binary();
    let client = cp.client().await.unwrap();
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");

    let mut components: Vec<_> = emulated
        .iter()
        .map(|v| cp.start_component(kind, Some(v)).expect("start component"))
        .collect();

    // No field selector on spec.leaseName in v1.37.2 (see tests/api.rs): filter here.
    let registered = wait_for("a LeaseCandidate per component", TIMEOUT, || async {
        let list = candidates.list(&ListParams::default()).await?;
        let items: Vec<LeaseCandidate> = list
            .items
            .into_iter()
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.lease_name == lease_name))
            .collect();
        Ok((items.len() == emulated.len()).then_some(items))
    })
    .await
    .unwrap();

    // The binaries report the stamped version, and --emulated-version reaches the candidate.
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
    let mut expected: Vec<(String, String, String)> = emulated
        .iter()
        .map(|e| {
            (
                format!("{e}.0"),
                "1.37.2".to_owned(),
                "OldestEmulationVersion".to_owned(),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(versions, expected);
    let oldest_full = format!("{oldest}.0");
    let winner = registered
        .iter()
        .find(|c| {
            c.spec.as_ref().unwrap().emulation_version.as_deref() == Some(oldest_full.as_str())
        })
        .unwrap()
        .name_any();

    // The oldest holds the lease, nobody is asked to step down, and the component itself renews
    // it (it rewrites leaseDurationSeconds from the controller's 5 to its own 15).
    let lease = wait_for(
        "the lease held and renewed by the oldest",
        TIMEOUT,
        || async {
            let Some(lease) = leases.get_opt(lease_name).await? else {
                return Ok(None);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let settled = spec.holder_identity.as_deref() == Some(winner.as_str())
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

    // The elected process runs and leads.
    let leader = components
        .iter_mut()
        .find(|s| s.emulated_version() == Some(oldest))
        .unwrap();
    assert!(
        leader.exit_status().is_none(),
        "the elected {lease_name} exited"
    );
    // klog buffers its output and flushes every few seconds, so the line may arrive after the
    // Lease already shows the renewal.
    let log_path = leader.log_path().to_owned();
    let acquired = format!(r#""Successfully acquired lease" lock="kube-system/{lease_name}""#);
    let logged = wait_for("the leader's log to show the acquisition", TIMEOUT, || {
        let contains = std::fs::read_to_string(&log_path)
            .map(|log| log.contains(&acquired))
            .unwrap_or(false);
        async move { Ok(contains.then_some(())) }
    })
    .await;
    assert!(
        logged.is_ok(),
        "the elected {lease_name}'s log does not show it acquiring the lease: {}",
        log_path.display()
    );
}
