//! The statuses as a [`StatusList`], the stable machine-readable shape of `conclave status -o json`
//! and `-o yaml`.

use super::predict::{Effect, LeaseStatus, Pick, StrategySource, effect};
use conclave_core::lease::LeaseRecord;
use conclave_core::time::Timestamp;

/// `apiVersion` of [`StatusList`]: the version of the output schema, not a resource the
/// cluster serves. A field is only ever added within one version.
pub const STATUS_LIST_API_VERSION: &str = "conclave.dev/v1alpha1";

/// `kind` of [`StatusList`].
pub const STATUS_LIST_KIND: &str = "LeaseStatusList";

/// The machine-readable form of the statuses (`conclave status -o json|yaml`). Every field is
/// always present (`null` when it has no value), times are RFC 3339 in UTC, and names are
/// camelCase as in Kubernetes objects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusList {
    /// [`STATUS_LIST_API_VERSION`].
    pub api_version: &'static str,
    /// [`STATUS_LIST_KIND`].
    pub kind: &'static str,
    /// When the prediction was made: the `now` the freshness and the pick were judged at.
    pub observed_at: Option<String>,
    /// One per Lease under coordination, sorted by namespace and name.
    pub items: Vec<LeaseReport>,
}

/// One Lease in a [`StatusList`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Whether the Lease object exists (candidates can exist before the first election).
    pub lease_exists: bool,
    /// The strategy the election uses; `null` on a conflict or with neither a strategy nor
    /// candidates.
    pub strategy: Option<String>,
    /// Where the strategy comes from: `lease` (`spec.strategy`), `candidates` (those at the
    /// highest binary version), `conflict` (they disagree) or `none`.
    pub strategy_source: &'static str,
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.preferredHolder`.
    pub preferred_holder: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<String>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    pub lease_transitions: Option<i32>,
    /// Whether the holder stopped renewing for longer than the lease duration.
    pub expired: bool,
    /// Whom the election would pick now.
    pub prediction: PredictionReport,
    /// The candidates, sorted by name.
    pub candidates: Vec<CandidateReport>,
}

/// Whom a Lease's election would pick now, in a [`LeaseReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PredictionReport {
    /// `holds` (the winner holds the Lease already), `preempt` (it would replace the live
    /// holder), `assign` (the Lease is free), or, with no winner: `nobody` (the strategy elects
    /// no one), `no-candidates`, `all-unresponsive`, `not-handled` (left to kube-apiserver's
    /// built-in controller by `--mode`), `unavailable` (conflict, unknown strategy, plugin error).
    pub outcome: &'static str,
    /// The candidate the election picks.
    pub winner: Option<String>,
    /// Whether the controller pings the candidates before writing.
    pub after_ping: bool,
    /// Why, in words (the table's WOULD PICK NOW column without the winner's name).
    pub why: String,
}

/// One candidate in a [`LeaseReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateReport {
    /// The LeaseCandidate's name, the identity written into `holderIdentity`.
    pub name: String,
    /// Whether it holds the Lease.
    pub holder: bool,
    /// `spec.binaryVersion`.
    pub binary_version: String,
    /// `spec.emulationVersion`.
    pub emulation_version: Option<String>,
    /// `spec.strategy`.
    pub strategy: String,
    /// `metadata.creationTimestamp`.
    pub creation_time: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<String>,
    /// `spec.pingTime`.
    pub ping_time: Option<String>,
    /// `fresh` (renewed within the ack window), `stale` (healthy, pinged before its next
    /// election), `pinged` (awaiting its answer), `failed-ping`, `expired` or `invalid`.
    pub state: &'static str,
    /// Whether it renews and answers pings (`fresh` or `stale`; the table's `healthy`).
    pub healthy: bool,
    /// What the state means now (the table's NOTE), `null` when there is nothing to say.
    pub note: Option<String>,
    /// When garbage collection deletes it unless it renews.
    pub collected_at: Option<String>,
}

/// RFC 3339 in UTC, as Kubernetes writes times.
fn rfc3339(at: Timestamp) -> Option<String> {
    jiff::Timestamp::from_microsecond(at.as_micros())
        .ok()
        .map(|t| t.to_string())
}

fn prediction(status: &LeaseStatus, now: Timestamp) -> PredictionReport {
    let (outcome, why): (&'static str, String) = match &status.pick {
        Pick::Candidate { name, needs_ping } => {
            let (outcome, mut why) = match effect(status, name, now) {
                Effect::Holds => ("holds", "holds it".to_owned()),
                Effect::Preempts(holder) => ("preempt", format!("would pre-empt {holder}")),
                Effect::Assigned => ("assign", "would be assigned".to_owned()),
            };
            if *needs_ping {
                why.push_str(", after a ping");
            }
            (outcome, why)
        }
        Pick::Nobody => ("nobody", "the strategy elects no one".into()),
        Pick::NoCandidates => ("no-candidates", "no live candidates".into()),
        Pick::AllUnresponsive => (
            "all-unresponsive",
            "every candidate failed its last ping".into(),
        ),
        Pick::NotHandled => (
            "not-handled",
            "left to kube-apiserver's built-in controller (--mode)".into(),
        ),
        Pick::Unavailable(why) => ("unavailable", why.clone()),
    };
    PredictionReport {
        outcome,
        winner: status.picked().map(str::to_owned),
        after_ping: matches!(
            status.pick,
            Pick::Candidate {
                needs_ping: true,
                ..
            }
        ),
        why,
    }
}

/// The statuses as a [`StatusList`], judged at `now`.
#[must_use]
pub fn document(statuses: &[LeaseStatus], now: Timestamp) -> StatusList {
    let items = statuses
        .iter()
        .map(|status| {
            let record = status.record.as_ref();
            let time = |at: Option<Timestamp>| at.and_then(rfc3339);
            LeaseReport {
                namespace: status.namespace.clone(),
                name: status.name.clone(),
                lease_exists: record.is_some(),
                strategy: status.strategy.name().map(str::to_owned),
                strategy_source: match status.strategy {
                    StrategySource::Lease(_) => "lease",
                    StrategySource::Candidates(_) => "candidates",
                    StrategySource::Conflict(_) => "conflict",
                    StrategySource::None => "none",
                },
                holder: status.holder().map(str::to_owned),
                preferred_holder: record.and_then(LeaseRecord::preferred).map(str::to_owned),
                renew_time: time(record.and_then(|r| r.renew_time)),
                acquire_time: time(record.and_then(|r| r.acquire_time)),
                lease_duration_seconds: record.and_then(|r| r.lease_duration_seconds),
                lease_transitions: record.and_then(|r| r.lease_transitions),
                expired: record.is_some_and(|r| r.holder().is_some() && r.is_expired(now)),
                prediction: prediction(status, now),
                candidates: status
                    .candidates
                    .iter()
                    .map(|candidate| {
                        let view = &candidate.view;
                        let note = candidate.health.note(now);
                        CandidateReport {
                            name: view.name.clone(),
                            holder: status.holder() == Some(view.name.as_str()),
                            binary_version: view.binary_version.clone(),
                            emulation_version: Some(view.emulation_version.clone())
                                .filter(|v| !v.is_empty()),
                            strategy: view.strategy.clone(),
                            creation_time: time(view.creation_time),
                            renew_time: time(view.renew_time),
                            ping_time: time(view.ping_time),
                            state: candidate.health.state(),
                            healthy: candidate.health.is_healthy(),
                            note: (!note.is_empty()).then_some(note),
                            collected_at: time(candidate.collected_at),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    StatusList {
        api_version: STATUS_LIST_API_VERSION,
        kind: STATUS_LIST_KIND,
        observed_at: rfc3339(now),
        items,
    }
}
