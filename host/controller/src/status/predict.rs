//! Whom each Lease's election would pick now: the controller's own step ([`plan_step`], then the
//! strategy through [`Decide`] and
//! [`Election::apply_answer`](conclave_core::step::Election::apply_answer)), stopped before
//! anything would be written, so the prediction cannot drift from what the controller does.

use super::health::{CandidateStatus, Health, candidate_statuses};
use crate::config::ControllerConfig;
use crate::decide::Decide;
use conclave_core::k8s::lease_record;
use conclave_core::lease::LeaseRecord;
use conclave_core::plan::Mode;
use conclave_core::request::CandidateView;
use conclave_core::step::{Outcome, Plan, SkipReason, StepConfig, StepInput, plan_step};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a Lease's strategy was determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrategySource {
    /// `spec.strategy` of the Lease.
    Lease(String),
    /// The candidates with the highest binary version.
    Candidates(String),
    /// Candidates at the highest binary version disagree.
    Conflict(String),
    /// No strategy and no candidates.
    None,
}

impl StrategySource {
    /// The strategy name, if one was determined.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Lease(s) | Self::Candidates(s) => Some(s),
            Self::Conflict(_) | Self::None => None,
        }
    }
}

/// Whom the election would pick now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// This candidate; `needs_ping` when the controller would ping before writing.
    Candidate {
        /// The candidate's name.
        name: String,
        /// Whether the controller would ping candidates before electing it.
        needs_ping: bool,
    },
    /// The strategy elects nobody.
    Nobody,
    /// No valid, unexpired candidate.
    NoCandidates,
    /// Every candidate was pinged and never answered.
    AllUnresponsive,
    /// `--mode` leaves the strategy to kube-apiserver's built-in controller.
    NotHandled,
    /// The strategy could not be determined or run (conflict, unknown strategy, plugin error).
    Unavailable(String),
}

/// One Lease under coordination.
#[derive(Debug, Clone)]
pub struct LeaseStatus {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// The Lease, or `None` when only candidates exist so far.
    pub record: Option<LeaseRecord>,
    /// The strategy and where it comes from.
    pub strategy: StrategySource,
    /// The candidates, sorted by name.
    pub candidates: Vec<CandidateStatus>,
    /// Whom the election would pick now.
    pub pick: Pick,
}

impl LeaseStatus {
    /// The current holder, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.record.as_ref().and_then(LeaseRecord::holder)
    }

    /// The picked candidate's name, if the election picks one.
    #[must_use]
    pub fn picked(&self) -> Option<&str> {
        match &self.pick {
            Pick::Candidate { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Settings of the prediction, mirroring the controller's flags and state.
#[derive(Debug, Clone, Copy)]
pub struct PredictOptions {
    /// The controller's ack window.
    pub ack_window: Duration,
    /// The controller's candidate expiry.
    pub candidate_gc_after: Duration,
    /// The controller's `--mode`.
    pub mode: Mode,
    /// Whether kube-apiserver's built-in controller is active (see
    /// [`builtin_controller_active`](crate::builtin_controller_active)).
    pub builtin_active: bool,
}

impl Default for PredictOptions {
    fn default() -> Self {
        let config = ControllerConfig::default();
        Self {
            ack_window: config.ack_window,
            candidate_gc_after: config.candidate_gc_after,
            mode: config.mode,
            builtin_active: false,
        }
    }
}

impl PredictOptions {
    fn step_config(self) -> StepConfig {
        StepConfig {
            ack_window: self.ack_window,
            candidate_gc_after: self.candidate_gc_after,
            lease_duration_seconds: ControllerConfig::default().lease_duration_seconds,
            mode: self.mode,
            settle: conclave_core::step::Settle::DEFAULT,
        }
    }
}

/// A Lease (if it exists) and its candidates.
type Objects<'a> = (Option<&'a Lease>, Vec<&'a LeaseCandidate>);

/// Builds the status of every Lease under coordination among `leases` and `candidates`, sorted
/// by namespace and name, deciding through `decider` as the controller would.
#[must_use]
pub fn collect(
    leases: &[Lease],
    candidates: &[LeaseCandidate],
    decider: &dyn Decide,
    now: Timestamp,
    options: PredictOptions,
) -> Vec<LeaseStatus> {
    let mut by_lease: BTreeMap<(String, String), Objects<'_>> = BTreeMap::new();
    for lease in leases {
        let record = lease_record(lease);
        by_lease
            .entry((record.namespace, record.name))
            .or_default()
            .0 = Some(lease);
    }
    for candidate in candidates {
        let (Some(namespace), Some(spec)) = (
            candidate.metadata.namespace.as_ref(),
            candidate.spec.as_ref(),
        ) else {
            continue;
        };
        by_lease
            .entry((namespace.clone(), spec.lease_name.clone()))
            .or_default()
            .1
            .push(candidate);
    }
    by_lease
        .into_iter()
        .filter_map(|((namespace, name), (lease, candidates))| {
            let record = lease.map(lease_record);
            let coordinated =
                !candidates.is_empty() || record.as_ref().and_then(LeaseRecord::strategy).is_some();
            coordinated.then(|| {
                let mut status = LeaseStatus {
                    namespace,
                    name,
                    record,
                    strategy: StrategySource::None,
                    candidates: candidate_statuses(&candidates, now, options),
                    pick: Pick::NoCandidates,
                };
                (status.strategy, status.pick) = predict(&status, decider, now, options);
                status
            })
        })
        .collect()
}

/// The controller's step for the Lease, stopped before anything would be written.
fn predict(
    status: &LeaseStatus,
    decider: &dyn Decide,
    now: Timestamp,
    options: PredictOptions,
) -> (StrategySource, Pick) {
    let record = status.record.as_ref();
    let valid: Vec<CandidateView> = status
        .candidates
        .iter()
        .filter(|c| !matches!(c.health, Health::Invalid(_)))
        .map(|c| c.view.clone())
        .collect();
    let has_strategy = |strategy: &str| decider.has_strategy(strategy);
    let plan = plan_step(&StepInput {
        namespace: &status.namespace,
        name: &status.name,
        lease: record,
        candidates: &valid,
        now,
        config: options.step_config(),
        builtin_active: options.builtin_active,
        has_strategy: &has_strategy,
        // A prediction shows whom the election picks, not when.
        arrivals: None,
        deleted_while_held_until: None,
        // Sit-outs are the controller's memory, not the cluster's: a missing Lease has none here.
        sitting_out: &[],
    });
    let lease_strategy = record.and_then(LeaseRecord::strategy);
    let source = |strategy: String| {
        if lease_strategy.is_some() {
            StrategySource::Lease(strategy)
        } else {
            StrategySource::Candidates(strategy)
        }
    };
    let election = match plan {
        Plan::Skip(skip) => {
            return match skip.reason {
                SkipReason::NoCandidates => (
                    lease_strategy.map_or(StrategySource::None, |s| {
                        StrategySource::Lease(s.to_owned())
                    }),
                    Pick::NoCandidates,
                ),
                SkipReason::Conflict(conflict) => (
                    StrategySource::Conflict(conflict.to_string()),
                    Pick::Unavailable(conflict.to_string()),
                ),
                SkipReason::NotHandled { strategy } => (source(strategy), Pick::NotHandled),
                SkipReason::UnknownStrategy { strategy } => {
                    let why = format!(
                        "no loaded plugin implements {strategy:?} (pass the controller's \
                         --plugins DIR)"
                    );
                    (source(strategy), Pick::Unavailable(why))
                }
                SkipReason::AllUnresponsive { strategy } => {
                    (source(strategy), Pick::AllUnresponsive)
                }
                SkipReason::Settling { strategy } => (
                    source(strategy),
                    Pick::Unavailable("its candidates are still arriving".into()),
                ),
                SkipReason::DeletedWhileHeld { strategy } => (
                    source(strategy),
                    Pick::Unavailable(
                        "it was deleted while held; its holder may still be leading".into(),
                    ),
                ),
            };
        }
        Plan::Decide(election) => election,
    };
    let pick = match decider.elect(election.strategy(), election.request()) {
        Err(error) => Pick::Unavailable(error.to_string()),
        Ok(answer) => match election.apply_answer(answer.as_deref()) {
            Outcome::NoWinner { .. } => Pick::Nobody,
            Outcome::Unchanged { winner, .. } | Outcome::Write { winner, .. } => Pick::Candidate {
                name: winner,
                needs_ping: false,
            },
            Outcome::Ping { winner, .. }
            | Outcome::Wait { winner, .. }
            | Outcome::AwaitRenewal { winner, .. } => Pick::Candidate {
                name: winner,
                needs_ping: true,
            },
        },
    };
    (source(election.strategy().to_owned()), pick)
}

/// What electing `name` would do to the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect<'a> {
    /// It holds the Lease already.
    Holds,
    /// It would replace this live holder (through `preferredHolder`).
    Preempts(&'a str),
    /// The Lease is free: it would be written as the holder.
    Assigned,
}

/// What electing `name` would do to the Lease of `status`, judged at `now`.
pub(super) fn effect<'a>(status: &'a LeaseStatus, name: &str, now: Timestamp) -> Effect<'a> {
    let holder = status.holder();
    let live = status.record.as_ref().is_some_and(|r| !r.is_free(now));
    if holder == Some(name) {
        Effect::Holds
    } else if live {
        Effect::Preempts(holder.unwrap_or_default())
    } else {
        Effect::Assigned
    }
}
