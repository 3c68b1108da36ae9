//! The controller's Prometheus metrics (`/metrics`) and their label values, each an enum with a
//! `label()` so a value is named once and a typo cannot make a new series.

use crate::decide::DecideErrorKind;
use conclave_core::plan::WriteKind;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::fmt::Write as _;

/// Implements [`EncodeLabelValue`] through the type's `label()`.
macro_rules! label_value {
    ($type:ty) => {
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.label())
            }
        }
    };
}

/// How an election step ended, as counted by `conclave_elections`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// The Lease was written: created, taken over, pre-empted or its `preferredHolder` cleared
    /// (labelled by [`WriteKind::label`]).
    Written(WriteKind),
    /// No loaded plugin implements the strategy.
    UnknownStrategy,
    /// The strategy call failed.
    PluginError,
    /// The strategy elected nobody.
    NoWinner,
    /// The Lease write failed (not a conflict).
    WriteError,
    /// The Lease write was refused with a conflict: it raced another writer (the holder's
    /// renewal, most often), and the step was retried on a fresh read. Labelled `conflict_` and
    /// the [`WriteKind::label`], so an operator sees which kind of write loses its races.
    Conflict(WriteKind),
}

impl ElectionOutcome {
    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Written(kind) => kind.label(),
            Self::UnknownStrategy => "unknown_strategy",
            Self::PluginError => "plugin_error",
            Self::NoWinner => "no_winner",
            Self::WriteError => "write_error",
            Self::Conflict(WriteKind::Create) => "conflict_create",
            Self::Conflict(WriteKind::TakeOver) => "conflict_take_over",
            Self::Conflict(WriteKind::Preempt) => "conflict_preempt",
            Self::Conflict(WriteKind::ClearPreferred) => "conflict_clear_preferred",
        }
    }
}

label_value!(ElectionOutcome);

/// A kind of API write the controller makes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Operation {
    /// Create a Lease.
    LeaseCreate,
    /// Replace a Lease (resourceVersion precondition).
    LeaseUpdate,
    /// Set a candidate's `spec.pingTime` (resourceVersion precondition).
    Ping,
    /// Delete a candidate (garbage collection; resourceVersion precondition).
    CandidateDelete,
}

impl Operation {
    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::LeaseCreate => "lease_create",
            Self::LeaseUpdate => "lease_update",
            Self::Ping => "ping",
            Self::CandidateDelete => "candidate_delete",
        }
    }
}

label_value!(Operation);

/// How an API write ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WriteResult {
    /// Written.
    Ok,
    /// The object changed since it was read (409), already exists, or is gone.
    Conflict,
    /// No answer within the controller's API timeout.
    Timeout,
    /// Any other failure.
    Error,
}

impl WriteResult {
    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Conflict => "conflict",
            Self::Timeout => "timeout",
            Self::Error => "error",
        }
    }
}

label_value!(WriteResult);
label_value!(DecideErrorKind);

/// Labels of an election outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    /// The strategy the election ran under.
    pub strategy: String,
    /// How the step ended. A strategy conflict has no strategy to label it with; it is counted by
    /// `strategy_conflicts` and shown by `strategy_conflicted_leases`.
    pub outcome: ElectionOutcome,
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
    /// [`DecideError::kind`](crate::DecideError::kind).
    pub kind: DecideErrorKind,
}

/// Labels of an API write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What was written.
    pub operation: Operation,
    /// How it ended.
    pub result: WriteResult,
}

/// Labels of a write that was not sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// What would have been written.
    pub operation: Operation,
}

/// Labels of a holder declared dead by pod liveness.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeathLabels {
    /// What proved it: `container_terminated` or `container_replaced`
    /// ([`conclave_core::pod::Death::label`]).
    pub reason: String,
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
    /// Managed Leases without a live holder (missing, released or expired) while candidates
    /// exist ([`conclave_core::plan::leaderless`]); counted by the active replica every
    /// [`LEADERLESS_TICK`](crate::LEADERLESS_TICK), 0 on followers.
    pub leases_without_holder: Gauge,
    /// LeaseCandidates in the cache.
    pub candidates: Gauge,
    /// Candidates deleted by garbage collection.
    pub gc_deletions: Counter,
    /// Holders that never renewed the Lease they were given, set aside from its elections.
    pub holders_never_renewed: Counter,
    /// Holders declared dead by pod liveness before their Lease expired, by what proved it.
    pub holders_dead: Family<DeathLabels, Counter>,
    /// Whether pod liveness is in effect (1), or off or unavailable (0: the flag, or the API
    /// server does not serve Pods to this controller).
    pub pod_liveness: Gauge,
    /// Whether this replica elects kube-apiserver's built-in controller's Leases because it
    /// holds that controller's Lease (1), or not (0) ([`crate::takeover`]).
    pub builtin_taken_over: Gauge,
    /// API writes by operation and result.
    pub writes: Family<WriteLabels, Counter>,
    /// Writes not sent because this replica no longer leads, by operation.
    pub writes_dropped: Family<OperationLabels, Counter>,
    /// Whether this replica is the active one (1) or a follower (0).
    pub active: Gauge,
    /// `StrategyPlugin` objects by whether their spec's version serves (`ready` `true`) or
    /// their last load failed (`false`).
    pub plugin_objects: Family<ReadyLabels, Gauge>,
    /// Plugin loads that failed (objects and the plugins directory), by reason.
    pub plugin_load_failures: Family<ReasonLabels, Counter>,
}

/// Labels of [`Metrics::plugin_objects`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadyLabels {
    /// `true` or `false`.
    pub ready: &'static str,
}

/// Labels naming a reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The reason, as in the `Ready` condition (`PullFailed`, `InvalidComponent`, ...) or
    /// `PluginsDir`.
    pub reason: String,
}

impl Metrics {
    /// Sets the `StrategyPlugin` gauges.
    pub fn set_plugin_objects(&self, ready: usize, failed: usize) {
        for (label, count) in [("true", ready), ("false", failed)] {
            self.plugin_objects
                .get_or_create(&ReadyLabels { ready: label })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Counts a failed plugin load.
    pub fn plugin_load_failed(&self, reason: &str) {
        self.plugin_load_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

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
            leases_without_holder: Gauge::default(),
            candidates: Gauge::default(),
            gc_deletions: Counter::default(),
            holders_never_renewed: Counter::default(),
            holders_dead: Family::default(),
            pod_liveness: Gauge::default(),
            builtin_taken_over: Gauge::default(),
            writes: Family::default(),
            writes_dropped: Family::default(),
            active: Gauge::default(),
            plugin_objects: Family::default(),
            plugin_load_failures: Family::default(),
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
            "leases_without_holder",
            "Leases this controller elects for that have no live holder (missing, released or \
             expired) while LeaseCandidates for them exist; 0 on followers",
            metrics.leases_without_holder.clone(),
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
            "holders_never_renewed",
            "Holders elected that never renewed the Lease before it expired, set aside from its \
             elections",
            metrics.holders_never_renewed.clone(),
        );
        r.register(
            "holders_dead",
            "Holders declared dead by pod liveness (the kubelet reported their container \
             terminated or replaced, or their Pod was deleted) before their Lease expired",
            metrics.holders_dead.clone(),
        );
        r.register(
            "strategy_plugins",
            "StrategyPlugin objects by whether their version serves (ready=true) or their last \
             load failed (ready=false)",
            metrics.plugin_objects.clone(),
        );
        r.register(
            "strategy_plugin_load_failures",
            "Strategy plugin loads that failed (StrategyPlugin objects and the plugins \
             directory), by reason",
            metrics.plugin_load_failures.clone(),
        );
        r.register(
            "pod_liveness",
            "Whether pod liveness is in effect (1) or off or unavailable (0)",
            metrics.pod_liveness.clone(),
        );
        r.register(
            "builtin_taken_over",
            "1 while this replica holds kube-apiserver's built-in election controller's Lease and \
             elects its Leases (--take-over), else 0",
            metrics.builtin_taken_over.clone(),
        );
        r.register(
            "api_writes",
            "API writes by operation and result",
            metrics.writes.clone(),
        );
        r.register(
            "api_writes_dropped",
            "API writes not sent because this replica no longer holds the controller Lease",
            metrics.writes_dropped.clone(),
        );
        r.register(
            "active",
            "1 if this replica is the active controller, 0 if it follows",
            metrics.active.clone(),
        );
        metrics
    }

    /// Counts one election step outcome.
    pub fn election(&self, strategy: &str, outcome: ElectionOutcome) {
        self.elections
            .get_or_create(&ElectionLabels {
                strategy: strategy.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts one API write.
    pub fn write(&self, operation: Operation, result: WriteResult) {
        self.writes
            .get_or_create(&WriteLabels { operation, result })
            .inc();
    }

    /// Counts one write not sent because this replica no longer leads.
    pub fn write_dropped(&self, operation: Operation) {
        self.writes_dropped
            .get_or_create(&OperationLabels { operation })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_the_enums_labels() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        metrics.write(Operation::LeaseCreate, WriteResult::Conflict);
        metrics.election("S", ElectionOutcome::Written(WriteKind::TakeOver));
        metrics.election("S", ElectionOutcome::Conflict(WriteKind::Preempt));
        metrics.write_dropped(Operation::Ping);
        metrics
            .plugin_errors
            .get_or_create(&PluginErrorLabels {
                strategy: "S".into(),
                kind: DecideErrorKind::LimitExceeded,
            })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"conclave_api_writes_total{operation="lease_create",result="conflict"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"conclave_elections_total{strategy="S",outcome="take_over"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"conclave_elections_total{strategy="S",outcome="conflict_preempt"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"conclave_api_writes_dropped_total{operation="ping"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"conclave_plugin_errors_total{strategy="S",kind="limit_exceeded"} 1"#),
            "{text}"
        );
    }
}
