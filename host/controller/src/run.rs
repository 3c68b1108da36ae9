//! The run loop: what every replica starts ([`run`]), what the active one runs while it leads
//! (workers, candidate GC, the leaderless count, the take-over), and the built-in controller check.

use crate::cache::Caches;
use crate::clock::instant_at;
use crate::config::ControllerConfig;
use crate::context::{Context, LeaseStates};
use crate::decide::Decide;
use crate::error::Error;
use crate::events::Events;
use crate::index::Pings;
use crate::key::{CandidateKey, LeaseKey};
use crate::leadership::Leadership;
use crate::own_leases::{BUILTIN_LEASE, CONTROLLER_LEASE};
use crate::queue::{Item, WorkQueue};
use crate::reconcile::Next;
use crate::writer::Writer;
use crate::{http, metrics, plugin_objects, pods, reconcile, takeover};
use conclave_core::k8s::{candidate_view, lease_record, now};
use conclave_core::plan::{Mode, candidate_expired};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How often the active replica counts the Leases it elects for that have no live holder
/// (`conclave_leases_without_holder`): a pass over the managed Leases and their cached
/// candidates, no API call. The alert on it waits minutes, so a few seconds' delay is nothing.
pub const LEADERLESS_TICK: Duration = Duration::from_secs(5);

/// Whether kube-apiserver's built-in election controller is active: its Lease
/// ([`BUILTIN_LEASE`]) is held by a kube-apiserver (not by a Conclave replica that took it
/// over, [`takeover`]) and not expired. This is what `--mode auto` looks at without the
/// take-over, and what `conclave status` and the demo show.
pub async fn builtin_controller_active(client: &Client) -> Result<bool, kube::Error> {
    let api = kube::Api::<Lease>::namespaced(client.clone(), BUILTIN_LEASE.0);
    Ok(api.get_opt(BUILTIN_LEASE.1).await?.is_some_and(|lease| {
        let record = lease_record(&lease);
        record.holder().is_some_and(|h| !takeover::is_conclave(h)) && !record.is_expired(now())
    }))
}

/// Runs the controller until `shutdown` is cancelled: caches and metrics at once, workers and GC
/// only while this replica holds `conclave-controller`. On shutdown the queue stops, in-flight
/// reconciles and writes finish, and the Lease is released.
pub async fn run(
    client: Client,
    decider: Arc<dyn Decide>,
    config: ControllerConfig,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    run_with_plugin_objects(client, decider, config, None, shutdown).await
}

/// [`run`], also loading `StrategyPlugin` objects into `plugin_objects.engine` (which should be
/// the engine behind `decider`) on every replica, the active one writing their status
/// ([`plugin_objects`]).
pub async fn run_with_plugin_objects(
    client: Client,
    decider: Arc<dyn Decide>,
    config: ControllerConfig,
    plugin_objects: Option<plugin_objects::PluginObjectsConfig>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    if config.workers == 0 {
        return Err(Error::Config("--workers must be at least 1".into()));
    }
    if config.lease_duration_seconds <= 0 {
        return Err(Error::Config(
            "the lease duration must be at least 1 second".into(),
        ));
    }
    if config.ack_window.is_zero() {
        return Err(Error::Config("--ack-window must be positive".into()));
    }
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let queue = WorkQueue::default();
    let pings = Arc::new(Pings::new(metrics.pings_acked.clone()));
    let mut tasks = JoinSet::new();
    let caches = Caches::start(
        &client,
        &config.namespaces,
        &queue,
        &pings,
        config.unseen_lease_hold(),
        &mut tasks,
    );
    let pods = config.pod_liveness.then(|| {
        pods::PodLiveness::start(&client, &config.namespaces, &caches, &queue, &mut tasks)
    });
    // A graceful stop drains with the Lease still held; see `leadership`.
    let drain_grace = config
        .own_renew_deadline
        .saturating_sub(config.own_retry_period);
    let leadership = Leadership::new(shutdown.clone(), drain_grace);
    let takeover = (config.take_over && config.mode == Mode::Auto)
        .then(|| Arc::new(takeover::TakeOver::new(metrics.builtin_taken_over.clone())));
    let ctx = Arc::new(Context {
        client: client.clone(),
        caches,
        queue: queue.clone(),
        decider,
        writer: Writer::new(
            client.clone(),
            metrics.clone(),
            leadership.clone(),
            pings,
            config.api_timeout,
        ),
        events: Events::new(client.clone(), &config.identity, config.api_timeout),
        metrics,
        config: config.clone(),
        builtin_active: AtomicBool::new(false),
        takeover,
        leases: LeaseStates::default(),
        pods,
    });
    let readiness = Arc::new(http::Readiness::default());
    if let Some(addr) = config.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
        tasks.spawn(http::serve(
            listener,
            Arc::new(registry),
            readiness.clone(),
            shutdown.clone(),
        ));
    }
    if config.mode == Mode::Auto {
        check_builtin(&ctx).await;
        tasks.spawn(watch_builtin(ctx.clone(), shutdown.clone()));
    }
    tasks.spawn(count_candidates(ctx.clone(), shutdown.clone()));
    if let Some(plugins) = plugin_objects {
        tasks.spawn(plugin_objects::run(
            ctx.clone(),
            plugins,
            leadership.clone(),
            shutdown.clone(),
        ));
    }

    ctx.caches.wait_until_ready().await;
    readiness.synced();
    tracing::info!(
        identity = %config.identity,
        namespaces = ?config.namespaces,
        mode = ?config.mode,
        "caches synced; contending for {}/{CONTROLLER_LEASE}",
        config.controller_namespace
    );

    let lease_config = conclave_candidate::LeaseConfig {
        namespace: config.controller_namespace.clone(),
        name: CONTROLLER_LEASE.into(),
        identity: config.identity.clone(),
        lease_duration: config.own_lease_duration,
        renew_deadline: config.own_renew_deadline,
        retry_period: config.own_retry_period,
    };
    let elector = conclave_candidate::Elector::classic(client, lease_config)?;
    readiness.contending(elector.handle());
    let mut blocked = elector.handle().blocked();
    let stop_electing = shutdown.child_token();
    let lead_ctx = ctx.clone();
    let electing = elector.run(
        move |term: conclave_candidate::Term| {
            let ctx = lead_ctx.clone();
            let leadership = leadership.clone();
            async move { lead(ctx, &leadership, term).await }
        },
        stop_electing.clone(),
    );
    tokio::pin!(electing);
    let result = if config.fail_when_blocked {
        let ended = tokio::select! {
            result = &mut electing => Some(result),
            _ = blocked.wait_for(Option::is_some) => None,
        };
        if let Some(result) = ended {
            result.map_err(Error::from)
        } else {
            let seen = blocked.borrow().clone();
            stop_electing.cancel();
            let result = electing.await.map_err(Error::from);
            seen.map_or(result, |blocked| Err(Error::OwnLeaseBlocked(blocked)))
        }
    } else {
        electing.await.map_err(Error::from)
    };
    queue.shutdown();
    // Wait for writes still in flight (none should be, the term drained its workers).
    ctx.writer.drain().await;
    tasks.shutdown().await;
    result
}

/// The active replica's work: workers and candidate GC, until the term ends. The writer sends
/// only while `leadership` holds this term.
async fn lead(ctx: Arc<Context>, leadership: &Leadership, term: conclave_candidate::Term) {
    tracing::info!(term = term.number(), "became the active controller");
    leadership.begin(term.token().clone(), term.held().clone());
    ctx.metrics.active.set(1);
    // Keys queued while following, and elections left over from an earlier term, start now.
    ctx.leases.starts.reset();
    ctx.queue.restart_triggers();
    ctx.enqueue_all();
    for worker in 0..ctx.config.workers {
        let ctx = ctx.clone();
        let token = term.token().clone();
        term.spawn(async move {
            loop {
                let item = tokio::select! {
                    () = token.cancelled() => break,
                    item = ctx.queue.next() => item,
                };
                let Some(item) = item else { break };
                process(&ctx, item).await;
            }
            tracing::debug!(worker, "worker stopped");
        });
    }
    let gc_ctx = ctx.clone();
    let token = term.token().clone();
    term.spawn(async move { candidate_gc(gc_ctx, token).await });
    let count_ctx = ctx.clone();
    let token = term.token().clone();
    term.spawn(async move { count_leaderless(count_ctx, token).await });
    if let Some(takeover) = ctx.takeover.clone() {
        let (hold_ctx, hold_leadership) = (ctx.clone(), leadership.clone());
        let token = term.token().clone();
        term.spawn(async move {
            let changed = || hold_ctx.enqueue_all();
            takeover::Holder {
                client: &hold_ctx.client,
                takeover: &takeover,
                leadership: &hold_leadership,
                events: &hold_ctx.events,
                identity: takeover::identity(
                    &hold_ctx.config.controller_namespace,
                    &hold_ctx.config.identity,
                ),
                prefix: takeover::identity_prefix(&hold_ctx.config.controller_namespace),
                lease_duration: hold_ctx.config.own_lease_duration * takeover::HOLD_DURATIONS,
                renew_deadline: hold_ctx.config.own_renew_deadline,
                retry_period: hold_ctx.config.own_retry_period,
                api_timeout: hold_ctx.config.api_timeout,
                changed: &changed,
            }
            .run(token)
            .await;
        });
    }
    term.cancelled().await;
    leadership.ended();
    ctx.metrics.active.set(0);
    ctx.end_term();
    tracing::info!(term = term.number(), "stopped being the active controller");
}

async fn process(ctx: &Arc<Context>, item: Item) {
    let span = tracing::info_span!("reconcile", lease = %item.key);
    let next = reconcile::reconcile(ctx, &item.key, item.triggered_at)
        .instrument(span.clone())
        .await;
    let _entered = span.enter();
    // Before the re-add below, so an election that goes on is queued ahead of new ones.
    ctx.queue
        .set_electing(&item.key, ctx.leases.starts.in_progress(&item.key));
    match next {
        Next::Idle => ctx.succeeded(&item.key),
        Next::At(at) => {
            ctx.succeeded(&item.key);
            ctx.queue.add_at(item.key.clone(), instant_at(at));
        }
        Next::Retry => {
            let delay = ctx.backoff(&item.key);
            tracing::debug!(?delay, "retrying");
            ctx.queue.add_at(item.key.clone(), Instant::now() + delay);
        }
    }
    ctx.queue.done(item);
}

/// Deletes candidates not renewed for `candidate_gc_after`, after a fresh read, with a
/// resourceVersion precondition. Sweeps every half period (at least every second, at most every
/// 5 minutes).
async fn candidate_gc(ctx: Arc<Context>, token: CancellationToken) {
    let period =
        (ctx.config.candidate_gc_after / 2).clamp(Duration::from_secs(1), Duration::from_secs(300));
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let now = now();
        for candidate in ctx.caches.all_candidates() {
            if !candidate_expired(
                &candidate_view(&candidate),
                now,
                ctx.config.candidate_gc_after,
            ) {
                continue;
            }
            let (Some(key), lease) = (
                CandidateKey::of(&candidate),
                LeaseKey::of_candidate(&candidate),
            ) else {
                continue;
            };
            let lease = lease.map(|l| l.to_string()).unwrap_or_default();
            match ctx
                .writer
                .collect_candidate(&key, now, ctx.config.candidate_gc_after)
                .await
            {
                Ok(true) => {
                    ctx.metrics.gc_deletions.inc();
                    tracing::info!(%lease, candidate = %key, "garbage-collected a LeaseCandidate");
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%lease, candidate = %key, %error, "candidate GC failed");
                }
            }
        }
    }
}

/// Keeps the `candidates` gauge at the size of the cache, and the `pod_liveness` gauge at whether
/// it is in effect, on followers too (they keep the cache warm but reconcile nothing). Every 2 s,
/// well within any scrape interval.
async fn count_candidates(ctx: Arc<Context>, shutdown: CancellationToken) {
    loop {
        ctx.metrics
            .candidates
            .set(i64::try_from(ctx.caches.candidate_count()).unwrap_or(i64::MAX));
        ctx.metrics.pod_liveness.set(i64::from(
            ctx.pods.as_ref().is_some_and(|pods| pods.available()),
        ));
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

/// Keeps `leases_without_holder` current while this replica leads, every [`LEADERLESS_TICK`]
/// (once per tick over the managed Leases, not per watch event). [`Context::end_term`] zeroes it,
/// so only the active replica reports Leases and two replicas never count one twice.
async fn count_leaderless(ctx: Arc<Context>, token: CancellationToken) {
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(LEADERLESS_TICK) => {}
        }
        let count = ctx.count_leaderless();
        ctx.metrics
            .leases_without_holder
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// Tracks whether kube-apiserver's built-in controller is active: its Lease is held and fresh.
/// Re-checks every 2 s (the built-in controller renews every 2 s) and re-enqueues every Lease when
/// the answer changes.
async fn watch_builtin(ctx: Arc<Context>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
        check_builtin(&ctx).await;
    }
}

async fn check_builtin(ctx: &Context) {
    let check = tokio::time::timeout(
        ctx.config.api_timeout,
        builtin_controller_active(&ctx.client),
    );
    let active = match check.await {
        Ok(Ok(active)) => active,
        Ok(Err(error)) => {
            tracing::debug!(%error, "reading the built-in controller's Lease");
            ctx.builtin_active()
        }
        Err(_) => {
            tracing::debug!("reading the built-in controller's Lease timed out");
            ctx.builtin_active()
        }
    };
    if ctx.builtin_active.swap(active, Ordering::Relaxed) != active {
        tracing::info!(
            active,
            "kube-apiserver's built-in election controller changed state"
        );
        ctx.enqueue_all();
    }
}
