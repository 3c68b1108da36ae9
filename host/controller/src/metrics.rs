//! The controller's Prometheus metrics (`/metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of an election outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    /// The strategy the election ran under.
    pub strategy: String,
    /// `create`, `take_over`, `preempt`, `clear_preferred`, `unknown_strategy`, `plugin_error`,
    /// `no_winner`, `write_error`. A strategy conflict has no strategy to label it with; it is
    /// counted by `strategy_conflicts` and shown by `strategy_conflicted_leases`.
    pub outcome: String,
}

/// Labels naming a strategy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StrategyLabels {
    /// The strategy.
    pub strategy: String,
}

/// Labels of a plugin error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginErrorLabels {
    /// The strategy.
    pub strategy: String,
    /// [`EngineError::kind`](conclave_engine::EngineError::kind).
    pub kind: String,
}

/// Labels of an API write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `lease_create`, `lease_update`, `ping`, `candidate_delete`.
    pub operation: String,
    /// `ok`, `conflict`, `error`.
    pub result: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// Every metric the controller exports.
#[derive(Clone)]
pub struct Metrics {
    /// Elections by strategy and outcome.
    pub elections: Family<ElectionLabels, Counter>,
    /// Seconds from the trigger (first event for the key) to the Lease write.
    pub election_latency: HistogramFamily<StrategyLabels>,
    /// Pre-emptions (preferredHolder set on a live holder).
    pub preemptions: Family<StrategyLabels, Counter>,
    /// Pings written to candidates.
    pub pings_sent: Counter,
    /// Pings answered (a candidate renewed after a ping).
    pub pings_acked: Counter,
    /// Seconds per strategy plugin call.
    pub plugin_latency: HistogramFamily<StrategyLabels>,
    /// Plugin errors by strategy and kind.
    pub plugin_errors: Family<PluginErrorLabels, Counter>,
    /// Strategy conflicts among candidates (each blocked election step).
    pub conflicts: Counter,
    /// Leases whose election is blocked now by a strategy conflict.
    pub conflicted_leases: Gauge,
    /// Leases this controller currently manages (have candidates and a handled strategy).
    pub managed_leases: Gauge,
    /// LeaseCandidates in the cache.
    pub candidates: Gauge,
    /// Candidates deleted by garbage collection.
    pub gc_deletions: Counter,
    /// API writes by operation and result.
    pub writes: Family<WriteLabels, Counter>,
    /// Whether this replica is the active one (1) or a follower (0).
    pub active: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under the `conclave` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            elections: Family::default(),
            election_latency: Family::new_with_constructor(latency_histogram),
            preemptions: Family::default(),
            pings_sent: Counter::default(),
            pings_acked: Counter::default(),
            plugin_latency: Family::new_with_constructor(latency_histogram),
            plugin_errors: Family::default(),
            conflicts: Counter::default(),
            conflicted_leases: Gauge::default(),
            managed_leases: Gauge::default(),
            candidates: Gauge::default(),
            gc_deletions: Counter::default(),
            writes: Family::default(),
            active: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("conclave");
        r.register(
            "elections",
            "Election steps by strategy and outcome",
            metrics.elections.clone(),
        );
        r.register(
            "election_latency_seconds",
            "Time from the trigger of an election to the Lease write",
            metrics.election_latency.clone(),
        );
        r.register(
            "preemptions",
            "Live holders asked to step down through preferredHolder",
            metrics.preemptions.clone(),
        );
        r.register(
            "pings_sent",
            "Pings written to LeaseCandidates",
            metrics.pings_sent.clone(),
        );
        r.register(
            "pings_acked",
            "Pings answered by a renewal",
            metrics.pings_acked.clone(),
        );
        r.register(
            "plugin_call_seconds",
            "Duration of strategy plugin calls",
            metrics.plugin_latency.clone(),
        );
        r.register(
            "plugin_errors",
            "Strategy plugin errors by kind",
            metrics.plugin_errors.clone(),
        );
        r.register(
            "strategy_conflicts",
            "Election steps blocked by candidates disagreeing on the strategy",
            metrics.conflicts.clone(),
        );
        r.register(
            "strategy_conflicted_leases",
            "Leases whose election is blocked now by candidates disagreeing on the strategy",
            metrics.conflicted_leases.clone(),
        );
        r.register(
            "managed_leases",
            "Leases with candidates that this controller elects for",
            metrics.managed_leases.clone(),
        );
        r.register(
            "candidates",
            "LeaseCandidates in the cache",
            metrics.candidates.clone(),
        );
        r.register(
            "gc_deletions",
            "LeaseCandidates deleted by garbage collection",
            metrics.gc_deletions.clone(),
        );
        r.register(
            "api_writes",
            "API writes by operation and result",
            metrics.writes.clone(),
        );
        r.register(
            "active",
            "1 if this replica is the active controller, 0 if it follows",
            metrics.active.clone(),
        );
        metrics
    }

    /// Counts one election step outcome.
    pub fn election(&self, strategy: &str, outcome: &str) {
        self.elections
            .get_or_create(&ElectionLabels {
                strategy: strategy.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts one API write.
    pub fn write(&self, operation: &str, result: &str) {
        self.writes
            .get_or_create(&WriteLabels {
                operation: operation.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }
}
