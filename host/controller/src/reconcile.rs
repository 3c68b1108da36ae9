//! One election step for one Lease key, as I/O around the pure step in [`conclave_core::step`]:
//! read the caches, [`plan_step`], ask the strategy, [`Election::apply_answer`], then ping or
//! write, and report (metrics, Events, logs).

use super::context::Context;
use super::events::EventReason;
use super::key::{CandidateKey, LeaseKey};
use super::latency::Progress;
use super::metrics::{DeathLabels, ElectionOutcome, PluginErrorLabels, StrategyLabels};
use super::pods::{PodLiveness, Verdict};
use super::writer::WriteError;
use conclave_core::k8s::{candidate_view, lease_record, now, validate_lease_candidate};
use conclave_core::lease::{LeaseRecord, Release};
use conclave_core::plan::{self, LeaseWrite, WriteKind};
use conclave_core::request::CandidateView;
use conclave_core::step::{
    Election, Outcome, Plan, SkipReason, StepInput, plan_step, settled_until,
};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
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

/// Runs one election step for the Lease `key`. Never panics on missing fields.
///
/// Every exit reports to the election's start time: it is kept while the election goes on
/// (pings outstanding, retry), observed as `election_latency_seconds` on a write, and forgotten
/// on any other exit.
pub async fn reconcile(ctx: &Arc<Context>, key: &LeaseKey, triggered_at: Instant) -> Next {
    let (next, progress) = reconcile_key(ctx, key).await;
    if let Some(latency) = ctx.leases.starts.finish(key, triggered_at, &progress)
        && let Progress::Written { strategy, .. } = progress
    {
        ctx.metrics
            .election_latency
            .get_or_create(&StrategyLabels { strategy })
            .observe(latency.as_secs_f64());
    }
    next
}

async fn reconcile_key(ctx: &Arc<Context>, key: &LeaseKey) -> (Next, Progress) {
    if ctx.caches.deleted_ahead_of_watch(key) {
        tracing::debug!(
            "the Lease was read deleted; waiting for the watch to deliver its deletion"
        );
        return (Next::Retry, Progress::Continues);
    }
    let mut lease_obj = ctx.caches.lease(key);
    for _ in 0..CONFLICT_ATTEMPTS {
        match step(ctx, key, lease_obj.as_deref()).await {
            Ok(stepped) => return stepped,
            Err(StepError::Conflict) => {
                tracing::debug!("Lease changed under the write; re-reading it");
                // What the read finds stands in for the cache until the watch catches up: the
                // watch may still be behind this controller's own earlier write, and a cache
                // showing no Lease would let a later step create it while its holder leads.
                let reading = ctx.caches.begin_read(key);
                match ctx.writer.read_lease(key).await {
                    Ok(Some(fresh)) => {
                        reading.succeeded(&fresh);
                        lease_obj = Some(Arc::new(fresh));
                    }
                    Ok(None) => {
                        // Deleted: its deletion, when the watch delivers it, says until when its
                        // holder may lead; a step now would create it at once.
                        reading.found_deleted();
                        return (Next::Retry, Progress::Continues);
                    }
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

/// The valid candidates of a Lease, as core views (invalid ones are logged and left out, and so
/// are candidates pod liveness knows are dead: a dead process's LeaseCandidate stays until it is
/// garbage-collected and may look fresh, but it would never take the Lease). The holder stays
/// whatever its Pod says: its fate is [`pod_liveness`]'s, which pings it first.
fn valid_candidates(ctx: &Context, key: &LeaseKey, holder: Option<&str>) -> Vec<CandidateView> {
    ctx.caches
        .candidates_for(key)
        .iter()
        .filter(|c| {
            let dead = c.metadata.name.as_deref() != holder
                && ctx.pods.as_ref().is_some_and(|pods| pods.known_dead(c));
            if dead {
                tracing::debug!(
                    candidate = c.metadata.name.as_deref().unwrap_or_default(),
                    "leaving out a candidate whose container the kubelet reports dead"
                );
            }
            !dead
        })
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
        .collect()
}

async fn step(
    ctx: &Arc<Context>,
    key: &LeaseKey,
    lease_obj: Option<&Lease>,
) -> Result<(Next, Progress), StepError> {
    let now = now();
    // Renewals trigger steps again until this one finds the Lease settled.
    ctx.caches.unsettle(key);
    let mut lease = lease_obj.map(|lease| {
        let mut record = lease_record(lease);
        ctx.caches.annotate(key, &mut record, now);
        record
    });
    let pod_recheck = match (&ctx.pods, lease.as_mut()) {
        (Some(pods), Some(record)) if elects_here(ctx, record) => {
            pod_liveness(ctx, pods, key, lease_obj, record, now).await?
        }
        _ => None,
    };
    let stepped = elect(ctx, key, lease_obj, lease, now).await;
    if pod_recheck.is_some() {
        // The holder's Pod is reported dead: its renewals are news.
        ctx.caches.unsettle(key);
    }
    stepped.map(|(next, progress)| (next.or_at(pod_recheck), progress))
}

/// Whether this controller elects the holder of `record`'s next term: its strategy is one
/// `--mode` hands to Conclave now. Pod liveness only judges holders of such Leases: on a Lease
/// left to kube-apiserver's built-in controller, a ping and a `HolderDead` Event would announce
/// a failover that this controller does not make. A Lease without a strategy (not elected by a
/// coordinated election controller) keeps failing over at expiry.
fn elects_here(ctx: &Context, record: &LeaseRecord) -> bool {
    record
        .strategy
        .as_deref()
        .is_some_and(|strategy| ctx.config.mode.handles(strategy, ctx.builtin_active()))
}

/// Pod liveness for the holder of `record` ([`super::pods`]): pings a holder the kubelet just
/// reported dead, and marks it dead ([`LeaseRecord::holder_dead`]) once it has not answered
/// within the grace and the Lease as stored is the one judged, with a `HolderDead` Event the
/// first time. Returns when to look again; [`StepError::Conflict`] when the stored Lease is newer
/// than the one judged (the caller reads it and steps again).
async fn pod_liveness(
    ctx: &Context,
    pods: &PodLiveness,
    key: &LeaseKey,
    lease_obj: Option<&Lease>,
    record: &mut LeaseRecord,
    now: Timestamp,
) -> Result<Option<Timestamp>, StepError> {
    match pods.check(&ctx.caches, key, record, now) {
        Verdict::Alive => Ok(None),
        Verdict::Reported {
            holder,
            death,
            recheck_at,
        } => {
            tracing::info!(%holder, death = death.label(), "{}; pinging the holder before electing the next candidate", death.describe());
            if let Some(object) = ctx
                .caches
                .candidate(&CandidateKey::new(&key.namespace, &holder))
                && ctx.writer.ping_since(&object, now, now).await.is_err()
            {
                // Not asked: the report is looked at afresh, and the holder pinged, next time.
                pods.forget(key);
                return Err(StepError::Retry);
            }
            Ok(Some(recheck_at))
        }
        Verdict::Waiting { recheck_at } => Ok(Some(recheck_at)),
        Verdict::Dead {
            holder,
            death,
            first,
        } => {
            // The verdict weighed the Lease as cached, which may miss a renewal by a restarted
            // process of the holder's identity (the model's finding B): confirm on the Lease as
            // stored, else step again on it. A failed read declares nothing, and neither does a
            // Lease found deleted: its deletion is left to the watch, which records until when
            // the holder may still lead (a step on the read would create it at once).
            let judged = lease_obj.and_then(|l| l.metadata.resource_version.as_deref());
            match ctx.writer.read_lease(key).await {
                Ok(stored)
                    if stored
                        .as_ref()
                        .and_then(|l| l.metadata.resource_version.as_deref())
                        == judged => {}
                Ok(Some(_)) => return Err(StepError::Conflict),
                Ok(None) => return Err(StepError::Retry),
                Err(error) => {
                    tracing::warn!(%holder, %error, "reading the Lease before declaring its holder dead");
                    return Err(StepError::Retry);
                }
            }
            pods.declared(key);
            record.holder_dead = true;
            if first {
                ctx.metrics
                    .holders_dead
                    .get_or_create(&DeathLabels {
                        reason: death.label().to_owned(),
                    })
                    .inc();
                tracing::warn!(%holder, death = death.label(), "the holder is dead: {} and it did not answer a ping; electing the next candidate before its Lease expires", death.describe());
                ctx.events.publish_about_candidate(
                    lease_obj,
                    key,
                    EventReason::HolderDead,
                    format!(
                        "{holder} is dead: {} and it did not answer a ping; electing the next \
                         candidate without waiting for the Lease to expire",
                        death.describe()
                    ),
                    &holder,
                );
            }
            Ok(None)
        }
    }
}

/// The election proper: plan, ask the strategy, apply its answer.
async fn elect(
    ctx: &Arc<Context>,
    key: &LeaseKey,
    lease_obj: Option<&Lease>,
    lease: Option<LeaseRecord>,
    now: Timestamp,
) -> Result<(Next, Progress), StepError> {
    let candidates = valid_candidates(ctx, key, lease.as_ref().and_then(LeaseRecord::holder));
    let sitting_out = ctx.caches.sitting_out(key, now);
    let (plan, settled_until) = {
        let decider = &ctx.decider;
        let has_strategy = |strategy: &str| decider.has_strategy(strategy);
        let input = StepInput {
            namespace: &key.namespace,
            name: &key.name,
            lease: lease.as_ref(),
            candidates: &candidates,
            now,
            config: ctx.config.step_config(),
            builtin_active: ctx.builtin_active(),
            has_strategy: &has_strategy,
            arrivals: ctx.caches.arrivals(key),
            deleted_while_held_until: ctx.caches.held_after_deletion(key, now),
            sitting_out: &sitting_out,
        };
        (plan_step(&input), settled_until(&input))
    };
    let election = match plan {
        Plan::Skip(skip) => {
            report_skip(ctx, key, lease_obj, skip.reason);
            return Ok((next_at(skip.recheck_at), Progress::Settled));
        }
        Plan::Decide(election) => election,
    };
    ctx.set_conflicted(key, false);
    ctx.set_managed(key, true);
    let strategy = election.strategy().to_owned();
    let answer = match ctx.decide(&strategy, election.request().clone()).await {
        Ok(answer) => answer,
        Err(error) => {
            ctx.metrics
                .election(&strategy, ElectionOutcome::PluginError);
            ctx.metrics
                .plugin_errors
                .get_or_create(&PluginErrorLabels {
                    strategy: strategy.clone(),
                    kind: error.kind,
                })
                .inc();
            tracing::warn!(%strategy, kind = error.kind.label(), %error, "plugin error; Lease left as it is");
            ctx.events.publish(
                lease_obj,
                key,
                EventReason::PluginError,
                format!("strategy {strategy:?} failed ({}): {error}", error.kind),
            );
            return Err(StepError::Retry);
        }
    };
    let outcome = election.apply_answer(answer.as_deref());
    if outcome.settles() && !ctx.decider.reads_clock(&strategy) {
        ctx.caches.settle(key, settled_until);
    }
    match outcome {
        Outcome::NoWinner { recheck_at } => {
            ctx.metrics.election(&strategy, ElectionOutcome::NoWinner);
            tracing::info!(%strategy, "the strategy elected nobody");
            Ok((next_at(recheck_at), Progress::Settled))
        }
        Outcome::Unchanged {
            recheck_at, probe, ..
        } => {
            if let Some(holder) = probe {
                probe_holder(ctx, key, &holder, now).await?;
            }
            Ok((next_at(recheck_at), Progress::Settled))
        }
        Outcome::Ping {
            winner,
            candidates: to_ping,
            recheck_at,
        } => {
            tracing::debug!(%winner, pings = ?to_ping, "pinging candidates before electing");
            let objects: Vec<_> = to_ping
                .iter()
                .filter_map(|name| {
                    ctx.caches
                        .candidate(&CandidateKey::new(&key.namespace, name))
                })
                .collect();
            if ctx
                .writer
                .ping_all(
                    &objects,
                    now,
                    ctx.config.ack_window,
                    election.lease().and_then(LeaseRecord::released),
                )
                .await
                .is_err()
            {
                return Err(StepError::Retry);
            }
            Ok((Next::At(recheck_at), Progress::Continues))
        }
        Outcome::Wait { winner, recheck_at } => {
            tracing::debug!(%winner, "waiting for an ack");
            Ok((Next::At(recheck_at), Progress::Continues))
        }
        Outcome::AwaitRenewal { winner, recheck_at } => {
            tracing::debug!(%winner, "waiting for the holder to pre-empt to renew first");
            ctx.caches.preemption_held_back(key, now);
            Ok((Next::At(recheck_at), Progress::Continues))
        }
        Outcome::Write {
            winner,
            write,
            also_ping,
            sit_out,
        } => {
            if let Some(leaver) = also_ping {
                ping_leaver(ctx, key, &election, &leaver, now).await?;
            }
            let written = write_lease(ctx, key, lease_obj, &election, &winner, &write, now).await;
            if written.is_ok()
                && let Some(holder) = sit_out
            {
                sit_out_never_renewed(ctx, key, lease_obj, &holder, &winner, now);
            }
            written
        }
    }
}

/// Records that `holder`, written into the Lease and never renewing it, sits out its elections
/// (see `conclave_core::plan::never_renewed_holder`), with a Warning Event and a metric saying
/// why: it answers pings but cannot write its Lease (RBAC, an admission policy, a stuck hook).
fn sit_out_never_renewed(
    ctx: &Context,
    key: &LeaseKey,
    lease_obj: Option<&Lease>,
    holder: &str,
    winner: &str,
    now: Timestamp,
) {
    let (strikes, until) = ctx.caches.sit_out(key, holder, now);
    // How long from now until the sit-out ends.
    let seconds = now.elapsed_at(until).as_secs();
    ctx.metrics.holders_never_renewed.inc();
    tracing::warn!(%holder, %winner, strikes, sits_out_s = seconds, "the holder never renewed the Lease it was given; electing another");
    ctx.events.publish_about_candidate(
        lease_obj,
        key,
        EventReason::HolderNeverRenewed,
        format!(
            "{holder} was elected but never renewed the Lease before it expired (can it update \
             Leases? check its RBAC and admission policies); {winner} elected instead, and {holder} \
             sits out this Lease's elections for {seconds} s (time {strikes} in a row)"
        ),
        holder,
    );
}

/// Pings the instance that released the Lease unasked and has shown no life since, before the
/// next best is written (see `conclave_core::plan::set_aside_releaser`): a leaver stays silent
/// and drops out of later elections; a live one answers and is elected again if it is the best.
/// Pinged first, so that a failure leaves the Lease free for the next step instead of written
/// with a leaver that still looks fresh.
async fn ping_leaver(
    ctx: &Context,
    key: &LeaseKey,
    election: &Election,
    leaver: &str,
    now: Timestamp,
) -> Result<(), StepError> {
    tracing::info!(%leaver, "the instance that released the Lease has shown no life since; pinging it and electing the next best");
    let release = election.lease().and_then(LeaseRecord::released);
    ping_one(ctx, key, leaver, now, release).await
}

/// Pings the LeaseCandidate of a holder that has missed its renewals, before its Lease expires
/// (see `conclave_core::plan::probe_holder`): a live holder answers and keeps its Lease; a
/// crashed one is known unresponsive at expiry, so the next leader is written then.
async fn probe_holder(
    ctx: &Context,
    key: &LeaseKey,
    holder: &str,
    now: Timestamp,
) -> Result<(), StepError> {
    tracing::info!(%holder, "the holder has missed its renewals; pinging its LeaseCandidate before the Lease expires");
    ping_one(ctx, key, holder, now, None).await
}

/// Pings the cached LeaseCandidate `name` of the Lease `key` if it needs a ping (none cached:
/// nothing to do); a failed ping retries the step.
async fn ping_one(
    ctx: &Context,
    key: &LeaseKey,
    name: &str,
    now: Timestamp,
    release: Option<Release<'_>>,
) -> Result<(), StepError> {
    let Some(object) = ctx
        .caches
        .candidate(&CandidateKey::new(&key.namespace, name))
    else {
        return Ok(());
    };
    ctx.writer
        .ping_all(&[object], now, ctx.config.ack_window, release)
        .await
        .map_err(|_| StepError::Retry)
}

/// Reports a step that wrote nothing without asking the strategy: the managed and blocked
/// gauges, and for a conflict or an unknown strategy a metric, a warning and an Event.
fn report_skip(ctx: &Context, key: &LeaseKey, lease_obj: Option<&Lease>, reason: SkipReason) {
    ctx.set_conflicted(key, matches!(reason, SkipReason::Conflict(_)));
    if let Some(managed) = reason.managed() {
        ctx.set_managed(key, managed);
    }
    match reason {
        SkipReason::NoCandidates => {}
        SkipReason::Conflict(conflict) => {
            ctx.metrics.conflicts.inc();
            tracing::warn!(%conflict, "strategy conflict; nothing written");
            ctx.events.publish(
                lease_obj,
                key,
                EventReason::StrategyConflict,
                conflict.to_string(),
            );
        }
        SkipReason::NotHandled { strategy } => {
            tracing::debug!(%strategy, "left to kube-apiserver's built-in controller");
        }
        SkipReason::UnknownStrategy { strategy } => {
            ctx.metrics
                .election(&strategy, ElectionOutcome::UnknownStrategy);
            tracing::warn!(%strategy, "no plugin implements the strategy; nothing written");
            ctx.events.publish(
                lease_obj,
                key,
                EventReason::UnknownStrategy,
                format!(
                    "no loaded plugin implements strategy {strategy:?}; add one with \
                         --plugins or fix spec.strategy"
                ),
            );
        }
        SkipReason::AllUnresponsive { .. } => {
            tracing::debug!("every candidate is unresponsive; waiting for one to renew");
        }
        SkipReason::Settling { .. } => {
            tracing::debug!(
                "candidates of a new Lease are still arriving; electing once they settle"
            );
        }
        SkipReason::DeletedWhileHeld { .. } => {
            tracing::info!(
                "the Lease is missing and may have been deleted while held (its deletion seen, \
                 missing from a relist, or from this controller's first list after it started); \
                 creating it once such a holder's term could have ended"
            );
        }
    }
}

/// Makes the Lease write of an election (with the resourceVersion of `lease_obj`) and reports it.
async fn write_lease(
    ctx: &Context,
    key: &LeaseKey,
    lease_obj: Option<&Lease>,
    election: &Election,
    winner: &str,
    write: &LeaseWrite,
    now: Timestamp,
) -> Result<(Next, Progress), StepError> {
    let strategy = election.strategy();
    let kind = write.kind;
    let ticket = ctx.caches.begin_write(key);
    match ctx.writer.write_lease(lease_obj, &write.desired).await {
        Ok(written) => {
            let written_at = Instant::now();
            ticket.succeeded(&written);
            ctx.metrics
                .election(strategy, ElectionOutcome::Written(kind));
            let (reason, message) = match kind {
                WriteKind::Create | WriteKind::TakeOver => (
                    EventReason::Elected,
                    format!(
                        "{winner} elected by strategy {strategy:?} ({})",
                        kind.label()
                    ),
                ),
                WriteKind::Preempt => {
                    ctx.metrics
                        .preemptions
                        .get_or_create(&StrategyLabels {
                            strategy: strategy.to_owned(),
                        })
                        .inc();
                    (
                        EventReason::Preempted,
                        format!(
                            "{} asked to step down for {winner} (strategy {strategy:?})",
                            election
                                .lease()
                                .and_then(LeaseRecord::holder)
                                .unwrap_or_default()
                        ),
                    )
                }
                WriteKind::ClearPreferred => (
                    EventReason::Elected,
                    format!("{winner} holds the Lease; preferredHolder cleared"),
                ),
            };
            tracing::info!(%winner, %strategy, write = kind.label(), "Lease written");
            ctx.events.publish(Some(&written), key, reason, message);
            let record = lease_record(&written);
            Ok((
                next_at(plan::recheck_at(Some(&record), now)),
                Progress::Written {
                    strategy: strategy.to_owned(),
                    at: written_at,
                },
            ))
        }
        Err(WriteError::Conflict) => {
            ctx.metrics
                .election(strategy, ElectionOutcome::Conflict(kind));
            let read = election.lease();
            tracing::debug!(
                lease = %key,
                write = kind.label(),
                holder = read.and_then(LeaseRecord::holder),
                renewed_ms_ago = read
                    .and_then(LeaseRecord::renewed_at)
                    .map(|at| at.elapsed_at(now).as_millis()),
                "the Lease write raced another writer"
            );
            Err(StepError::Conflict)
        }
        Err(WriteError::NotLeading) => Err(StepError::Retry),
        Err(error @ (WriteError::Api(_) | WriteError::Timeout(_))) => {
            ctx.metrics.election(strategy, ElectionOutcome::WriteError);
            tracing::warn!(%error, write = kind.label(), "writing the Lease failed");
            Err(StepError::Retry)
        }
    }
}

/// Looks again at `at`, or waits for an event.
fn next_at(at: Option<Timestamp>) -> Next {
    at.map_or(Next::Idle, Next::At)
}

impl Next {
    /// This, or looking again at `at` if that is sooner (a retry stays a retry).
    #[must_use]
    pub fn or_at(self, at: Option<Timestamp>) -> Self {
        match (self, at) {
            (next, None) | (next @ Self::Retry, _) => next,
            (Self::Idle, Some(at)) => Self::At(at),
            (Self::At(mine), Some(at)) => Self::At(mine.min(at)),
        }
    }
}
