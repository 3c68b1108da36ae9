//! Prometheus metrics of an elector, so leadership, leaks, failed writes and failed releases are
//! visible in production, not only in logs.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of every metric: the Lease (`namespace/name`) and this instance's identity, plus the
/// failed operation for `conclave_candidate_api_errors_total`.
type Labels = Vec<(String, String)>;

/// An API request of the elector that can fail, as labelled in
/// `conclave_candidate_api_errors_total{operation}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Reading the Lease.
    Read,
    /// Creating the Lease (classic mode and fallback).
    Create,
    /// Writing this identity as holder: an acquisition or a renewal.
    Write,
    /// Releasing the Lease after a term.
    Release,
}

impl Operation {
    /// The label value: `read`, `create`, `write` or `release`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Create => "create",
            Self::Write => "write",
            Self::Release => "release",
        }
    }
}

/// The metrics of one or more electors. Cheap to clone (handles share the same values); register
/// them once with [`ElectorMetrics::register`] and pass clones to
/// [`crate::Elector::with_metrics`].
#[derive(Debug, Clone, Default)]
pub struct ElectorMetrics {
    leader: Family<Labels, Gauge>,
    terms: Family<Labels, Counter>,
    leaked_tasks: Family<Labels, Counter>,
    release_failures: Family<Labels, Counter>,
    api_errors: Family<Labels, Counter>,
    unattended: Family<Labels, Gauge>,
    cache_unsynced: Family<Labels, Gauge>,
}

impl ElectorMetrics {
    /// Registers, each labelled with `lease` and `identity`:
    /// - `conclave_candidate_leader`: 1 while leading (client-go's
    ///   `leader_election_master_status`);
    /// - `conclave_candidate_terms_total`: terms started;
    /// - `conclave_candidate_leaked_tasks_total`: term tasks still alive past the drain timeout;
    /// - `conclave_candidate_release_failures_total`: terms whose Lease could not be released
    ///   (it then expires, and the next leader waits for that);
    /// - `conclave_candidate_api_errors_total{operation}`: failed Lease requests (`read`,
    ///   `create`, `write`, `release`; retried, but a steady rise means the API server or RBAC
    ///   is in the way);
    /// - `conclave_candidate_election_unattended`: 1 while no election controller acts on the
    ///   Lease (coordinated mode, see [`crate::Elector::with_controller_timeout`]);
    /// - `conclave_candidate_cache_unsynced{cache}`: 1 while a warm cache given to the elector
    ///   has gone without its first LIST for the cache sync timeout (`cache` is the resource,
    ///   e.g. `configmaps`; see [`crate::Elector::with_warm_cache`]).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "conclave_candidate_leader",
            "Whether this instance leads the Lease (1) or follows (0)",
            self.leader.clone(),
        );
        registry.register(
            "conclave_candidate_terms",
            "Terms this instance started as leader",
            self.terms.clone(),
        );
        registry.register(
            "conclave_candidate_leaked_tasks",
            "Term tasks still running after the term's drain timeout",
            self.leaked_tasks.clone(),
        );
        registry.register(
            "conclave_candidate_release_failures",
            "Terms after which the Lease could not be released (it expires instead)",
            self.release_failures.clone(),
        );
        registry.register(
            "conclave_candidate_api_errors",
            "Failed Lease requests, by operation",
            self.api_errors.clone(),
        );
        registry.register(
            "conclave_candidate_election_unattended",
            "Whether no election controller has acted on the Lease for the controller timeout (1)",
            self.unattended.clone(),
        );
        registry.register(
            "conclave_candidate_cache_unsynced",
            "Whether a warm cache has not completed its first LIST within the cache sync timeout (1)",
            self.cache_unsynced.clone(),
        );
    }

    /// Whether the warm cache of `resource` is reported unsynced.
    #[must_use]
    pub fn is_cache_unsynced(&self, lease: &str, identity: &str, resource: &str) -> bool {
        self.cache_unsynced
            .get_or_create(&cache_labels(lease, identity, resource))
            .get()
            == 1
    }

    /// Total leaked tasks recorded for this Lease and identity.
    #[must_use]
    pub fn leaked_tasks(&self, lease: &str, identity: &str) -> u64 {
        self.leaked_tasks
            .get_or_create(&labels(lease, identity))
            .get()
    }

    /// Terms started for this Lease and identity.
    #[must_use]
    pub fn terms(&self, lease: &str, identity: &str) -> u64 {
        self.terms.get_or_create(&labels(lease, identity)).get()
    }

    /// Terms after which the Lease could not be released.
    #[must_use]
    pub fn release_failures(&self, lease: &str, identity: &str) -> u64 {
        self.release_failures
            .get_or_create(&labels(lease, identity))
            .get()
    }

    /// Failed requests of this kind.
    #[must_use]
    pub fn api_errors(&self, lease: &str, identity: &str, operation: Operation) -> u64 {
        self.api_errors
            .get_or_create(&operation_labels(lease, identity, operation))
            .get()
    }

    /// Whether the Lease is reported unattended (no election controller acting on it).
    #[must_use]
    pub fn is_unattended(&self, lease: &str, identity: &str) -> bool {
        self.unattended
            .get_or_create(&labels(lease, identity))
            .get()
            == 1
    }

    pub(crate) fn set_leader(&self, lease: &str, identity: &str, leading: bool) {
        self.leader
            .get_or_create(&labels(lease, identity))
            .set(i64::from(leading));
    }

    pub(crate) fn term_started(&self, lease: &str, identity: &str) {
        self.terms.get_or_create(&labels(lease, identity)).inc();
    }

    pub(crate) fn tasks_leaked(&self, lease: &str, identity: &str, count: u64) {
        self.leaked_tasks
            .get_or_create(&labels(lease, identity))
            .inc_by(count);
    }

    pub(crate) fn release_failed(&self, lease: &str, identity: &str) {
        self.release_failures
            .get_or_create(&labels(lease, identity))
            .inc();
    }

    pub(crate) fn api_error(&self, lease: &str, identity: &str, operation: Operation) {
        self.api_errors
            .get_or_create(&operation_labels(lease, identity, operation))
            .inc();
    }

    pub(crate) fn set_cache_unsynced(
        &self,
        lease: &str,
        identity: &str,
        resource: &str,
        unsynced: bool,
    ) {
        self.cache_unsynced
            .get_or_create(&cache_labels(lease, identity, resource))
            .set(i64::from(unsynced));
    }

    pub(crate) fn set_unattended(&self, lease: &str, identity: &str, unattended: bool) {
        self.unattended
            .get_or_create(&labels(lease, identity))
            .set(i64::from(unattended));
    }
}

fn labels(lease: &str, identity: &str) -> Labels {
    vec![
        ("lease".into(), lease.into()),
        ("identity".into(), identity.into()),
    ]
}

fn cache_labels(lease: &str, identity: &str, resource: &str) -> Labels {
    let mut labels = labels(lease, identity);
    labels.push(("cache".into(), resource.into()));
    labels
}

fn operation_labels(lease: &str, identity: &str, operation: Operation) -> Labels {
    let mut labels = labels(lease, identity);
    labels.push(("operation".into(), operation.label().into()));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn failures_are_exported_with_their_labels() {
        let metrics = ElectorMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.release_failed("ns/l", "a");
        metrics.api_error("ns/l", "a", Operation::Write);
        metrics.set_unattended("ns/l", "a", true);
        metrics.set_cache_unsynced("ns/l", "a", "configmaps", true);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"conclave_candidate_release_failures_total{lease="ns/l",identity="a"} 1"#,
            r#"conclave_candidate_api_errors_total{lease="ns/l",identity="a",operation="write"} 1"#,
            r#"conclave_candidate_election_unattended{lease="ns/l",identity="a"} 1"#,
            r#"conclave_candidate_cache_unsynced{lease="ns/l",identity="a",cache="configmaps"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        assert!(metrics.is_unattended("ns/l", "a"));
        assert_eq!(metrics.api_errors("ns/l", "a", Operation::Read), 0);
    }
}
