//! Settings of the Lease lock and of the LeaseCandidate, checked before any request is made.

use crate::error::{Error, Result};
use crate::pod::PodRef;
use conclave_core::validation::{dns1123_label_errors, dns1123_subdomain_errors};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a term's tasks may take to stop after its token is cancelled (KEP-5366 drain).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Coordinated mode: how long the Lease may have no holder before the elector reports that no
/// election controller acts on it ([`crate::Elector::with_controller_timeout`]). An election
/// takes about one ping round (5 s with kube-apiserver's controller); a minute leaves room for the
/// election controller's own failover (15 s lease) and a slow API server.
pub const DEFAULT_CONTROLLER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a [`crate::WarmCache`] given to the elector ([`crate::Elector::with_warm_cache`]) may
/// go without its first LIST before the elector reports it
/// ([`crate::Elector::with_cache_sync_timeout`]). A LIST takes well under a second; a watch that
/// fails is retried every few seconds with backoff, so 30 s is many failed attempts, not one
/// slow answer.
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a LeaseCandidate renews `spec.renewTime` when nobody pings it (client-go: 5 min).
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The Lease to lead and the timers of the lock, as client-go's `LeaderElectionConfig`.
///
/// `renew_deadline` must be shorter than `lease_duration`: a leader stops leading when it has not
/// renewed for `renew_deadline`, which must happen before anyone else could consider the Lease
/// expired (`lease_duration` after the last renewal). The gap also bounds how long a term whose
/// Lease was lost may take to stop its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease (and of the LeaseCandidate).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This instance's identity: the Lease's `holderIdentity` when it leads and, in coordinated
    /// mode, the name of its LeaseCandidate. Must be unique per process.
    pub identity: String,
    /// `leaseDurationSeconds` written on every renewal (whole seconds, at least 1).
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops leading.
    pub renew_deadline: Duration,
    /// How often the leader renews and a follower polls the Lease.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A configuration with client-go's usual timers: 15 s duration, 10 s deadline, 2 s retry.
    #[must_use]
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// A configuration with defaults that fit a pod, for the Lease `name`: the client's default
    /// namespace (in a pod, kube's in-cluster config reads it from the service account; outside,
    /// it is the kubeconfig context's, or `default`) and [`crate::default_identity`] (`POD_NAME`,
    /// else the hostname with a random suffix), with [`LeaseConfig::new`]'s timers.
    ///
    /// Build it once per process: without `POD_NAME` every call picks a new identity.
    #[must_use]
    pub fn for_client(client: &kube::Client, name: impl Into<String>) -> Self {
        Self::new(
            client.default_namespace(),
            name,
            crate::identity::default_identity(),
        )
    }

    /// `namespace/name` of the Lease, for messages.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `leaseDurationSeconds` to write, rounded up to whole seconds.
    pub(crate) fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }

    /// Checks names and timers; every problem is reported with the setting to change.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidConfig {
            lease: self.key(),
            reason,
        };
        if let Some(e) = dns1123_label_errors(&self.namespace).first() {
            return Err(invalid(format!("namespace {:?}: {e}", self.namespace)));
        }
        if let Some(e) = dns1123_subdomain_errors(&self.name).first() {
            return Err(invalid(format!("lease name {:?}: {e}", self.name)));
        }
        if self.identity.is_empty() {
            return Err(invalid("identity must not be empty".into()));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(invalid(format!(
                "lease_duration {:?} must be at least 1s",
                self.lease_duration
            )));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(invalid(format!(
                "renew_deadline {:?} must be shorter than lease_duration {:?}",
                self.renew_deadline, self.lease_duration
            )));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(invalid(format!(
                "retry_period {:?} must be positive and shorter than renew_deadline {:?}",
                self.retry_period, self.renew_deadline
            )));
        }
        Ok(())
    }
}

/// What this instance announces in its LeaseCandidate (coordinated mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateConfig {
    /// `spec.binaryVersion` (strict semver, e.g. `1.33.0`).
    pub binary_version: String,
    /// `spec.emulationVersion` (strict semver, at most `binary_version`; required for
    /// `OldestEmulationVersion`). Empty means absent.
    pub emulation_version: String,
    /// `spec.strategy`, e.g. `OldestEmulationVersion` or `example.com/my-strategy`.
    pub strategy: String,
    /// `metadata.labels` of the LeaseCandidate.
    pub labels: BTreeMap<String, String>,
    /// How often `spec.renewTime` is renewed when nobody pings ([`DEFAULT_RENEW_INTERVAL`]).
    pub renew_interval: Duration,
    /// The Pod and container this process runs in ([`PodRef::from_env`] by default): named in an
    /// ownerReference of the LeaseCandidate, so Kubernetes deletes the candidate with its Pod,
    /// and in annotations an election controller compares with the kubelet's report (pod
    /// liveness). `None` outside a pod.
    pub pod: Option<PodRef>,
}

impl CandidateConfig {
    /// A candidate with these versions and strategy, no labels, renewed every 5 minutes, naming
    /// the Pod it runs in when the environment says which ([`PodRef::from_env`]).
    #[must_use]
    pub fn new(
        binary_version: impl Into<String>,
        emulation_version: impl Into<String>,
        strategy: impl Into<String>,
    ) -> Self {
        Self {
            binary_version: binary_version.into(),
            emulation_version: emulation_version.into(),
            strategy: strategy.into(),
            labels: BTreeMap::new(),
            renew_interval: DEFAULT_RENEW_INTERVAL,
            pod: PodRef::from_env(),
        }
    }

    /// The same candidate naming `pod` as the Pod it runs in (`None`: no Pod).
    #[must_use]
    pub fn with_pod(mut self, pod: Option<PodRef>) -> Self {
        self.pod = pod;
        self
    }

    /// The LeaseCandidate object this instance sends for `lease` (without `renewTime`): in a pod,
    /// with the ownerReference (in a static pod, the annotations naming it instead) and the
    /// annotations of [`CandidateConfig::pod`], and, when its
    /// identity is this process's [`crate::default_identity`], the annotation saying no other
    /// process uses it ([`conclave_core::pod::IDENTITY_ANNOTATION`]).
    #[must_use]
    pub fn object(&self, lease: &LeaseConfig) -> LeaseCandidate {
        let pod = self.pod.as_ref();
        let annotations = pod.map(|pod| {
            let mut annotations = pod.annotations(&lease.namespace);
            if lease.identity == crate::identity::default_identity() {
                annotations.insert(
                    conclave_core::pod::IDENTITY_ANNOTATION.to_owned(),
                    conclave_core::pod::PER_PROCESS.to_owned(),
                );
            }
            annotations
        });
        LeaseCandidate {
            metadata: ObjectMeta {
                name: Some(lease.identity.clone()),
                namespace: Some(lease.namespace.clone()),
                labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                annotations,
                owner_references: pod
                    .and_then(|pod| pod.owner_reference(&lease.namespace))
                    .map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseCandidateSpec {
                lease_name: lease.name.clone(),
                binary_version: self.binary_version.clone(),
                emulation_version: (!self.emulation_version.is_empty())
                    .then(|| self.emulation_version.clone()),
                strategy: self.strategy.clone(),
                ping_time: None,
                renew_time: None,
            }),
        }
    }

    /// Validates the object of [`CandidateConfig::object`] with kube-apiserver's rules, so a bad
    /// version, strategy, label or name is an error before any request.
    pub fn validate(&self, lease: &LeaseConfig) -> Result<()> {
        if self.renew_interval.is_zero() {
            return Err(Error::InvalidConfig {
                lease: lease.key(),
                reason: "candidate renew_interval must be positive".into(),
            });
        }
        let object = self.object(lease);
        let errors = conclave_core::k8s::validate_lease_candidate(&object);
        if errors.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidCandidate {
            message: conclave_core::validation::invalid_message(
                "LeaseCandidate.coordination.k8s.io",
                &lease.identity,
                &errors,
            ),
            errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> LeaseConfig {
        LeaseConfig::new("default", "my-lease", "node_a")
    }

    #[test]
    fn timers_must_keep_the_deadline_inside_the_duration() {
        assert!(lease().validate().is_ok());
        let mut bad = lease();
        bad.renew_deadline = bad.lease_duration;
        let message = bad.validate().unwrap_err().to_string();
        assert!(message.contains("renew_deadline"), "{message}");
        let mut bad = lease();
        bad.retry_period = bad.renew_deadline;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("retry_period")
        );
        let mut bad = lease();
        bad.name = "Bad_Name".into();
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("lease name")
        );
        let mut bad = lease();
        bad.identity.clear();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn lease_duration_rounds_up_to_whole_seconds() {
        let mut config = lease();
        config.lease_duration = Duration::from_millis(2500);
        assert_eq!(config.lease_duration_seconds(), 3);
    }

    #[test]
    fn candidate_is_checked_with_the_api_server_rules() {
        let good = CandidateConfig::new("1.33.0", "1.32.0", "OldestEmulationVersion");
        assert!(good.validate(&lease()).is_ok());
        let table = [
            (
                CandidateConfig::new("v1.33.0", "1.32.0", "OldestEmulationVersion"),
                "spec.binaryVersion",
            ),
            (
                CandidateConfig::new("1.33.0", "1.34.0", "OldestEmulationVersion"),
                "spec.binaryVersion",
            ),
            (
                CandidateConfig::new("1.33.0", "", "OldestEmulationVersion"),
                "spec.emulationVersion",
            ),
            (
                CandidateConfig::new("1.33.0", "1.33.0", "foobar"),
                "spec.strategy",
            ),
        ];
        for (config, path) in table {
            match config.validate(&lease()) {
                Err(Error::InvalidCandidate { errors, message }) => {
                    assert!(errors.iter().any(|e| e.path.starts_with(path)), "{message}");
                    assert!(message.contains("node_a"), "{message}");
                }
                other => panic!("{config:?}: expected InvalidCandidate, got {other:?}"),
            }
        }
        let mut bad_name = lease();
        bad_name.identity = "no spaces allowed".into();
        assert!(matches!(
            good.validate(&bad_name),
            Err(Error::InvalidCandidate { .. })
        ));
        let mut bad_label = good.clone();
        bad_label.labels.insert("bad key!".into(), "x".into());
        assert!(matches!(
            bad_label.validate(&lease()),
            Err(Error::InvalidCandidate { .. })
        ));
    }
}
