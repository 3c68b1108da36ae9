//! One election step for one Lease key: read the caches, plan with the pure core, ask the
//! strategy, then ping or write.

use super::Context;
use super::latency::Progress;
use super::writer::{self, WriteError};
use conclave_core::k8s::{candidate_view, lease_record, validate_lease_candidate};
use conclave_core::lease::LeaseRecord;
use conclave_core::plan::{
    self, PingPlan, WriteInput, WriteKind, candidate_expired, considered, plan_pings, plan_writes,
};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::{StrategyChoice, StrategyVote, resolve_strategy};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::EventType;
use std::sync::Arc;
use tokio::time::Instant;

/// What the worker does with the key after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing pending; wait for the next watch event.
    Idle,
    /// Look again at this time (ping window end, Lease expiry), or sooner on an event.
    At(Timestamp),
    /// Something failed (API or plugin): retry with backoff.
    Retry,
}

/// How many times a step re-reads the Lease after a write conflict before requeueing.
const CONFLICT_ATTEMPTS: usize = 3;

/// Runs one election step for `namespace/name`. Never panics on missing fields.
///
/// Every exit reports to the election's start time: it is kept while the election goes on
/// (pings outstanding, retry), observed as `election_latency_seconds` on a write, and forgotten
/// on any other exit.
pub async fn reconcile(ctx: &Arc<Context>, key: &str, triggered_at: Instant) -> Next {
    let (next, progress) = reconcile_key(ctx, key).await;
    if let Some(latency) = ctx.starts.finish(key, triggered_at, &progress)
        && let Progress::Written { strategy, .. } = progress
    {
        ctx.metrics
            .election_latency
            .get_or_create(&super::metrics::StrategyLabels { strategy })
            .observe(latency.as_secs_f64());
    }
    next
}

async fn reconcile_key(ctx: &Arc<Context>, key: &str) -> (Next, Progress) {
    let Some((namespace, name)) = key.split_once('/') else {
        tracing::warn!("malformed Lease key; dropped");
        return (Next::Idle, Progress::Settled);
    };
    let mut lease_obj = ctx.caches.lease(namespace, name);
    for _ in 0..CONFLICT_ATTEMPTS {
        match step(ctx, key, namespace, name, lease_obj.as_deref()).await {
            Ok(stepped) => return stepped,
            Err(StepError::Conflict) => {
                tracing::debug!("Lease changed under the write; re-reading it");
                match writer::read_lease(ctx, namespace, name).await {
                    Ok(fresh) => lease_obj = fresh.map(Arc::new),
                    Err(error) => {
                        tracing::warn!(%error, "re-reading the Lease after a conflict");
                        return (Next::Retry, Progress::Continues);
                    }
                }
            }
            Err(StepError::Retry) => return (Next::Retry, Progress::Continues),
        }
    }
    (Next::Retry, Progress::Continues)
}

enum StepError {
    Conflict,
    Retry,
}

/// The live, valid candidates of a Lease, as core views.
fn live_candidates(
    ctx: &Context,
    namespace: &str,
    name: &str,
    now: Timestamp,
) -> Vec<CandidateView> {
    let mut views: Vec<CandidateView> = ctx
        .caches
        .candidates_for(namespace, name)
        .iter()
        .filter(|c| {
            let errors = validate_lease_candidate(c);
            if !errors.is_empty() {
                tracing::debug!(
                    candidate = c.metadata.name.as_deref().unwrap_or_default(),
                    errors = ?errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "ignoring an invalid LeaseCandidate"
                );
            }
            errors.is_empty()
        })
        .map(|c| candidate_view(c))
        .filter(|c| !candidate_expired(c, now, ctx.config.candidate_gc_after))
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

async fn step(
    ctx: &Arc<Context>,
    key: &str,
    namespace: &str,
    name: &str,
    lease_obj: Option<&Lease>,
) -> Result<(Next, Progress), StepError> {
    let now = ctx.now();
    let lease = lease_obj.map(lease_record);
    let candidates = live_candidates(ctx, namespace, name, now);
    if candidates.is_empty() {
        // Not managed by coordinated election (upstream: a Lease without candidates is left alone).
        ctx.set_managed(key, false);
        ctx.set_conflicted(key, false);
        return Ok((Next::Idle, Progress::Settled));
    }
    let votes: Vec<StrategyVote<'_>> = candidates
        .iter()
        .map(|c| StrategyVote {
            candidate: &c.name,
            strategy: &c.strategy,
            binary_version: &c.binary_version,
        })
        .collect();
    let choice = resolve_strategy(lease.as_ref().and_then(LeaseRecord::strategy), &votes);
    ctx.set_conflicted(key, matches!(choice, StrategyChoice::Conflict(_)));
    let strategy = match choice {
        StrategyChoice::FromLease(s) | StrategyChoice::FromCandidates(s) => s,
        StrategyChoice::Conflict(conflict) => {
            ctx.metrics.conflicts.inc();
            tracing::warn!(%conflict, "strategy conflict; nothing written");
            ctx.event(
                lease_obj,
                namespace,
                name,
                EventType::Warning,
                "StrategyConflict",
                conflict.to_string(),
            )
            .await;
            return Ok((Next::Idle, Progress::Settled));
        }
        StrategyChoice::NoCandidates => return Ok((Next::Idle, Progress::Settled)),
    };
    if !ctx.config.mode.handles(&strategy, ctx.builtin_active()) {
        tracing::debug!(%strategy, "left to kube-apiserver's built-in controller");
        ctx.set_managed(key, false);
        return Ok((Next::Idle, Progress::Settled));
    }
    ctx.set_managed(key, true);
    if !ctx.decider.has_strategy(&strategy) {
        ctx.metrics.election(&strategy, "unknown_strategy");
        tracing::warn!(%strategy, "no plugin implements the strategy; nothing written");
        ctx.event(
            lease_obj,
            namespace,
            name,
            EventType::Warning,
            "UnknownStrategy",
            format!(
                "no loaded plugin implements strategy {strategy:?}; add one with --plugins or fix \
                 spec.strategy"
            ),
        )
        .await;
        return Ok((Next::Idle, Progress::Settled));
    }

    let pool = considered(&candidates, now, ctx.config.ack_window);
    if pool.is_empty() {
        tracing::debug!("every candidate is unresponsive; waiting for one to renew");
        return Ok((idle_until_expiry(lease.as_ref(), now), Progress::Settled));
    }
    let request = ElectionRequest {
        lease: LeaseView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            holder: lease.as_ref().and_then(|l| l.holder()).map(Into::into),
            preferred_holder: lease.as_ref().and_then(|l| l.preferred()).map(Into::into),
            strategy: strategy.clone(),
            expired: lease.as_ref().is_none_or(|l| l.is_expired(now)),
        },
        now,
        settings: String::new(),
        candidates: pool.clone(),
    };
    let best = match ctx.decide(&strategy, request).await {
        Ok(Some(best)) => best,
        Ok(None) => {
            ctx.metrics.election(&strategy, "no_winner");
            tracing::info!(%strategy, "the strategy elected nobody");
            return Ok((idle_until_expiry(lease.as_ref(), now), Progress::Settled));
        }
        Err(error) => {
            ctx.metrics.election(&strategy, "plugin_error");
            ctx.metrics
                .plugin_errors
                .get_or_create(&super::metrics::PluginErrorLabels {
                    strategy: strategy.clone(),
                    kind: error.kind.to_owned(),
                })
                .inc();
            tracing::warn!(%strategy, kind = error.kind, %error, "plugin error; Lease left as it is");
            ctx.event(
                lease_obj,
                namespace,
                name,
                EventType::Warning,
                "PluginError",
                format!("strategy {strategy:?} failed ({}): {error}", error.kind),
            )
            .await;
            return Err(StepError::Retry);
        }
    };

    let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let Some(write) = plan_writes(&WriteInput {
        namespace,
        name,
        lease: lease.as_ref(),
        winner: &best,
        strategy: &strategy,
        candidates: &names,
        now,
        lease_duration_seconds: ctx.config.lease_duration_seconds,
    }) else {
        return Ok((idle_until_expiry(lease.as_ref(), now), Progress::Settled));
    };

    match plan_pings(&pool, &best, now, ctx.config.ack_window) {
        PingPlan::Elect => {}
        PingPlan::Ping {
            candidates: to_ping,
            recheck_at,
        } => {
            tracing::debug!(winner = %best, pings = ?to_ping, "pinging candidates before electing");
            if writer::ping_all(ctx, namespace, &to_ping, now)
                .await
                .is_err()
            {
                return Err(StepError::Retry);
            }
            return Ok((Next::At(recheck_at), Progress::Continues));
        }
        PingPlan::Wait { recheck_at } => {
            tracing::debug!(winner = %best, "waiting for acks");
            return Ok((Next::At(recheck_at), Progress::Continues));
        }
    }

    let kind = write.kind;
    match writer::write_lease(ctx, lease_obj, &write.desired).await {
        Ok(written) => {
            let written_at = Instant::now();
            ctx.metrics.election(&strategy, kind.label());
            let (reason, message) = match kind {
                WriteKind::Create | WriteKind::TakeOver => (
                    "Elected",
                    format!("{best} elected by strategy {strategy:?} ({})", kind.label()),
                ),
                WriteKind::Preempt => {
                    ctx.metrics
                        .preemptions
                        .get_or_create(&super::metrics::StrategyLabels {
                            strategy: strategy.clone(),
                        })
                        .inc();
                    (
                        "Preempted",
                        format!(
                            "{} asked to step down for {best} (strategy {strategy:?})",
                            lease.as_ref().and_then(|l| l.holder()).unwrap_or_default()
                        ),
                    )
                }
                WriteKind::ClearPreferred => (
                    "Elected",
                    format!("{best} holds the Lease; preferredHolder cleared"),
                ),
            };
            tracing::info!(winner = %best, %strategy, write = kind.label(), "Lease written");
            ctx.event(
                Some(&written),
                namespace,
                name,
                EventType::Normal,
                reason,
                message,
            )
            .await;
            let record = lease_record(&written);
            Ok((
                idle_until_expiry(Some(&record), now),
                Progress::Written {
                    strategy,
                    at: written_at,
                },
            ))
        }
        Err(WriteError::Conflict) => Err(StepError::Conflict),
        Err(WriteError::Api(error)) => {
            ctx.metrics.election(&strategy, "write_error");
            tracing::warn!(%error, write = kind.label(), "writing the Lease failed");
            Err(StepError::Retry)
        }
    }
}

fn idle_until_expiry(lease: Option<&LeaseRecord>, now: Timestamp) -> Next {
    plan::recheck_at(lease, now).map_or(Next::Idle, Next::At)
}
