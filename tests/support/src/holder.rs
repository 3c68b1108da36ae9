//! Keeping kube-apiserver's built-in coordinated-leader-election controller passive.
//!
//! The built-in controller runs only in the apiserver that holds the ordinary Lease
//! `kube-system/leader-election-controller`. Holding that Lease with a placeholder identity (and
//! renewing it) keeps every apiserver's controller from running, so a test can let Conclave do
//! the electing instead. Not holding it leaves the built-in controller active.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::{ControlPlane, Error};

/// Namespace of the built-in controller's own Lease.
const NAMESPACE: &str = "kube-system";
/// Name of the built-in controller's own Lease (`controllerName` upstream).
pub const BUILTIN_CONTROLLER_LEASE: &str = "leader-election-controller";
/// The placeholder holder written into the Lease.
pub const PLACEHOLDER_HOLDER: &str = "conclave-testkit-placeholder";
/// Lease duration written by the placeholder; it renews far more often than this.
const LEASE_SECONDS: i32 = 30;
/// How often the placeholder renews.
const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long to wait for the built-in controller to notice it lost its Lease and stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(90);
/// The apiserver metric line reporting whether its controller leads.
const LEADING_METRIC: &str = "leader_election_master_status{name=\"leader-election-controller\"}";

/// Holds `kube-system/leader-election-controller` for a placeholder while it lives, renewing it
/// in a background task on the runtime that created it. Dropping it stops the renewals (the
/// built-in controller takes over once the Lease expires, within 30 s); [`release`](Self::release)
/// hands the Lease back at once.
pub struct BuiltinControllerHold {
    client: Client,
    renewer: tokio::task::JoinHandle<()>,
}

impl ControlPlane {
    /// Takes the built-in election controller's Lease for a placeholder and waits until the
    /// apiserver reports (metric `leader_election_master_status`) that its controller no longer
    /// leads. From then on only other controllers (Conclave) elect.
    pub async fn hold_builtin_controller_lease(&self) -> Result<BuiltinControllerHold, Error> {
        let client = self.client().await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
        take(&leases).await?;
        let renewer = tokio::spawn(renew_forever(leases));
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.builtin_controller_leading().await? {
            if Instant::now() > deadline {
                renewer.abort();
                return Err(Error::Timeout {
                    what: "the built-in election controller to stop leading".into(),
                    seconds: STOP_TIMEOUT.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(BuiltinControllerHold { client, renewer })
    }

    /// Whether this apiserver's built-in election controller currently leads, from its
    /// `leader_election_master_status{name="leader-election-controller"}` metric (absent before it
    /// first tried to lead, which counts as not leading).
    pub async fn builtin_controller_leading(&self) -> Result<bool, Error> {
        Ok(self
            .apiserver_metrics()
            .await?
            .lines()
            .filter_map(|line| line.strip_prefix(LEADING_METRIC))
            .any(|value| value.trim() == "1"))
    }
}

impl BuiltinControllerHold {
    /// Stops renewing and releases the Lease (empty holder, 1 s duration), so the built-in
    /// controller can take over right away.
    pub async fn release(self) -> Result<(), Error> {
        self.renewer.abort();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NAMESPACE);
        let mut lease = leases.get(BUILTIN_CONTROLLER_LEASE).await?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(PLACEHOLDER_HOLDER) {
            return Ok(());
        }
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        leases
            .replace(BUILTIN_CONTROLLER_LEASE, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}

impl Drop for BuiltinControllerHold {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Writes the placeholder as holder, creating the Lease or replacing whoever holds it. Every
/// update carries the resourceVersion just read; conflicts are retried.
async fn take(leases: &Api<Lease>) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let result = match leases.get_opt(BUILTIN_CONTROLLER_LEASE).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(BUILTIN_CONTROLLER_LEASE.into()),
                        namespace: Some(NAMESPACE.into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(PLACEHOLDER_HOLDER.into()),
                        lease_duration_seconds: Some(LEASE_SECONDS),
                        acquire_time: Some(now()),
                        renew_time: Some(now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                leases.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(Default::default);
                if spec.holder_identity.as_deref() != Some(PLACEHOLDER_HOLDER) {
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    spec.acquire_time = Some(now());
                }
                spec.holder_identity = Some(PLACEHOLDER_HOLDER.into());
                spec.lease_duration_seconds = Some(LEASE_SECONDS);
                spec.renew_time = Some(now());
                leases
                    .replace(BUILTIN_CONTROLLER_LEASE, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s))
                if (s.is_conflict() || s.is_already_exists()) && Instant::now() < deadline =>
            {
                tracing::debug!(reason = %s.message, "lease write conflicted; retrying");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Renews the placeholder's hold until aborted.
async fn renew_forever(leases: Api<Lease>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if let Err(error) = take(&leases).await {
            tracing::warn!(%error, "renewing the placeholder hold on the built-in controller lease");
        }
    }
}
