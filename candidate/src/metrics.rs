//! Prometheus metrics of an elector, so leaks and leadership are visible in production.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of every metric: the Lease (`namespace/name`) and this instance's identity.
type Labels = Vec<(String, String)>;

/// The metrics of one or more electors. Cheap to clone (handles share the same values); register
/// them once with [`ElectorMetrics::register`] and pass clones to
/// [`crate::Elector::with_metrics`].
#[derive(Debug, Clone, Default)]
pub struct ElectorMetrics {
    leader: Family<Labels, Gauge>,
    terms: Family<Labels, Counter>,
    leaked_tasks: Family<Labels, Counter>,
}

impl ElectorMetrics {
    /// Registers `conclave_candidate_leader` (1 while leading, like client-go's
    /// `leader_election_master_status`), `conclave_candidate_terms_total` and
    /// `conclave_candidate_leaked_tasks_total` (term tasks still alive past the drain timeout).
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
}

fn labels(lease: &str, identity: &str) -> Labels {
    vec![
        ("lease".into(), lease.into()),
        ("identity".into(), identity.into()),
    ]
}
