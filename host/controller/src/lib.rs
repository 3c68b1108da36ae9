//! The coordinated leader election controller (`conclave run`) and `conclave status`, which
//! predicts through the same rules.
//!
//! Shape: one election step is a pure function over plain data (`conclave_core::step`: a Lease
//! snapshot, candidate snapshots and now in, the writes to make out); this crate does the I/O
//! around it, one concern per module, in the order a watch event meets them:
//! - [`cache`]: kube-rs reflectors on Leases and LeaseCandidates (cluster-wide or per namespace),
//!   decoded without their managedFields ([`wire`]); followers keep these caches warm;
//! - [`index`]: what each watch event does besides updating its store: the candidate index, acks,
//!   read-your-writes ([`own_writes`]) and enqueueing its [`LeaseKey`] (testable without a server);
//! - [`queue`]: Lease keys, deduplicated, delayed re-adds (ping windows, expiry timers), one worker
//!   per key at a time;
//! - [`reconcile`]: one election step: `conclave_core::step` + the strategy ([`Decide`]) + the
//!   [`writer`], which carries a resourceVersion precondition on every write and sends only while
//!   this replica leads ([`leadership`]);
//! - [`events`] and [`metrics`]: what an operator sees; candidate garbage collection and detection
//!   of kube-apiserver's built-in controller (`--mode auto`) are here, `/metrics` `/healthz`
//!   `/readyz` in `http`;
//! - [`pods`]: pod liveness: a cache of the Pods candidates name, and the rule that declares a
//!   holder dead as soon as the kubelet reports that its process stopped (`--pod-liveness`);
//! - [`status`]: `conclave status`, the same step predicted for every Lease, read-only.
//!
//! Only the replica holding the plain Lease `conclave-controller` (taken through
//! `conclave-candidate`'s classic elector) runs workers and writes.
#![forbid(unsafe_code)]

pub mod cache;
pub mod decide;
pub mod events;
mod http;
pub mod index;
pub mod key;
mod latency;
pub mod leadership;
pub mod metrics;
pub mod own_writes;
pub mod plugin_objects;
pub mod pods;
pub mod queue;
pub mod reconcile;
pub mod status;
pub mod takeover;
pub mod wire;
pub mod writer;

pub use decide::{Decide, DecideError, DecideErrorKind};
pub use key::{CandidateKey, LeaseKey};

use cache::Caches;
use conclave_core::k8s::{candidate_view, lease_record, now, validate_lease_candidate};
use conclave_core::plan::{Mode, candidate_expired, leaderless, without_leader};
use conclave_core::request::ElectionRequest;
use conclave_core::step::StepConfig;
use conclave_core::time::Timestamp;
use events::Events;
use index::Pings;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use leadership::Leadership;
use prometheus_client::registry::Registry;
use queue::{Item, WorkQueue};
use reconcile::Next;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use writer::Writer;

/// The name of the controller's own Lease (in `controller_namespace`).
pub const CONTROLLER_LEASE: &str = "conclave-controller";

/// How often the active replica counts the Leases it elects for that have no live holder
/// (`conclave_leases_without_holder`): a pass over the managed Leases and their cached
/// candidates, no API call. The alert on it waits minutes, so a few seconds' delay is nothing.
pub const LEADERLESS_TICK: Duration = Duration::from_secs(5);

/// Namespace and name of kube-apiserver's built-in controller Lease.
pub const BUILTIN_LEASE: (&str, &str) = ("kube-system", "leader-election-controller");

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Namespaces to watch; empty means the whole cluster.
    pub namespaces: Vec<String>,
    /// Leases reconciled in parallel.
    pub workers: usize,
    /// A candidate is fresh if it renewed within this window; pings wait this long for an ack.
    pub ack_window: Duration,
    /// Candidates not renewed for this long take no part and are deleted.
    pub candidate_gc_after: Duration,
    /// `leaseDurationSeconds` written when Conclave assigns a holder.
    pub lease_duration_seconds: i32,
    /// Which Leases to handle.
    pub mode: Mode,
    /// This replica's identity (holder of its own Lease, reporting instance of Events).
    pub identity: String,
    /// Namespace of the controller's own Lease.
    pub controller_namespace: String,
    /// Timers of the controller's own Lease.
    pub own_lease_duration: Duration,
    /// How long the active replica keeps trying to renew before it steps down.
    pub own_renew_deadline: Duration,
    /// How often the active replica renews and followers retry.
    pub own_retry_period: Duration,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// How long any one API call of the controller may take (the watches excepted: they are
    /// long-running by design and restart on their own).
    pub api_timeout: Duration,
    /// What to do when the API answers about the controller's own Lease in a way only an
    /// operator can fix (its namespace does not exist, RBAC refuses): `true` ends [`run`] at
    /// once with [`Error::OwnLeaseBlocked`] (a process started by hand, whose user can fix the
    /// flag); `false` keeps trying, unready, with `/readyz` saying why (a pod, which the fix
    /// of a manifest reaches while it runs).
    pub fail_when_blocked: bool,
    /// How the first election of a Lease that does not exist waits for its batch of candidates.
    pub first_election_settle: conclave_core::step::Settle,
    /// Pod liveness ([`pods`]): watch the Pods candidates name, and elect the next candidate as
    /// soon as the kubelet reports that the holder's process stopped, instead of when its Lease
    /// expires. Needs `get`, `list` and `watch` on pods; without them it falls back to expiry.
    pub pod_liveness: bool,
    /// Take over from kube-apiserver's built-in election controller ([`takeover`]): the active
    /// replica holds that controller's Lease, and `--mode auto` elects its Leases too. Needs
    /// `get`, `create` and `update` on `kube-system/leader-election-controller`; without them
    /// the Leases are left to the built-in controller while it is active.
    pub take_over: bool,
    /// How long after its first list the controller counts a Lease it has not seen as possibly
    /// held (deleted while held just before this process started: nothing it saw tells when
    /// that holder renewed last), and so does not create it. `None`: the longer of
    /// `lease_duration_seconds` and kube-apiserver's default lease duration (15 s), the longest
    /// such a Lease could have had from Conclave or the built-in controller. Zero only where no
    /// Lease can have existed before (an emulator started with the controller).
    pub unseen_lease_hold: Option<Duration>,
}

impl ControllerConfig {
    /// [`ControllerConfig::unseen_lease_hold`] as it applies.
    #[must_use]
    pub fn unseen_lease_hold(&self) -> Duration {
        self.unseen_lease_hold.unwrap_or_else(|| {
            Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0))
                .max(takeover::DEFAULT_BUILTIN_DURATION)
        })
    }

    /// The settings an election step depends on.
    #[must_use]
    pub const fn step_config(&self) -> StepConfig {
        StepConfig {
            ack_window: self.ack_window,
            candidate_gc_after: self.candidate_gc_after,
            lease_duration_seconds: self.lease_duration_seconds,
            mode: self.mode,
            settle: self.first_election_settle,
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            workers: 16,
            ack_window: Duration::from_secs(5),
            candidate_gc_after: Duration::from_secs(30 * 60),
            lease_duration_seconds: 5,
            mode: Mode::Auto,
            identity: "conclave".into(),
            controller_namespace: "kube-system".into(),
            own_lease_duration: Duration::from_secs(15),
            own_renew_deadline: Duration::from_secs(10),
            own_retry_period: Duration::from_secs(2),
            metrics_addr: None,
            api_timeout: Duration::from_secs(10),
            fail_when_blocked: false,
            first_election_settle: conclave_core::step::Settle::DEFAULT,
            pod_liveness: true,
            take_over: true,
            unseen_lease_hold: None,
        }
    }
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("invalid controller configuration: {0}")]
    Config(String),
    /// The controller's own leader election failed.
    #[error("leader election for {CONTROLLER_LEASE}: {0}")]
    Election(#[from] conclave_candidate::Error),
    /// The controller's own Lease cannot be taken or watched until an operator acts (see
    /// [`ControllerConfig::fail_when_blocked`]).
    #[error("{0}")]
    OwnLeaseBlocked(conclave_candidate::Blocked),
    /// The metrics server could not bind.
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
}

/// Shared state of one controller process: the caches and queue every replica keeps warm, and
/// what the active replica's workers need to step, write and report.
pub struct Context {
    /// Reads only (the built-in controller's Lease); writes go through `writer`.
    client: Client,
    caches: Caches,
    queue: WorkQueue,
    decider: Arc<dyn Decide>,
    writer: Writer,
    events: Events,
    metrics: metrics::Metrics,
    config: ControllerConfig,
    builtin_active: AtomicBool,
    /// The take-over of the built-in controller's Lease; `None` with `--take-over=false` or a
    /// mode other than `auto` (which do not look at the built-in controller).
    takeover: Option<Arc<takeover::TakeOver>>,
    leases: LeaseStates,
    /// Pod liveness; `None` when `--pod-liveness=off`.
    pods: Option<Arc<pods::PodLiveness>>,
}

/// What the active replica tracks per Lease between steps.
#[derive(Default)]
struct LeaseStates {
    /// Leases with candidates and a strategy this controller handles.
    managed: Mutex<HashSet<LeaseKey>>,
    /// Leases whose election a strategy conflict blocks now.
    conflicted: Mutex<HashSet<LeaseKey>>,
    /// Start of each election in progress.
    starts: latency::ElectionStarts,
    /// Consecutive failed steps, for the retry backoff.
    failures: Mutex<HashMap<LeaseKey, u32>>,
}

/// Locks `m`, also after a panic elsewhere held it: every value guarded in the controller stays
/// consistent between statements, so a poisoned lock holds nothing half-written.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Inserts or removes `key` and returns the set's new size, for a gauge.
fn mark(set: &Mutex<HashSet<LeaseKey>>, key: &LeaseKey, member: bool) -> i64 {
    let mut set = lock(set);
    if member {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
    i64::try_from(set.len()).unwrap_or(i64::MAX)
}

impl Context {
    /// Whether kube-apiserver's built-in controller may be electing its Leases: as the take-over
    /// knows it (this replica holds its Lease, and waited for the apiserver it replaced), else as
    /// that controller's Lease shows it (held by a kube-apiserver and fresh).
    fn builtin_active(&self) -> bool {
        self.takeover
            .as_ref()
            .and_then(|t| t.builtin_may_elect())
            .unwrap_or_else(|| self.builtin_active.load(Ordering::Relaxed))
    }

    fn set_managed(&self, key: &LeaseKey, managed: bool) {
        let count = mark(&self.leases.managed, key, managed);
        self.metrics.managed_leases.set(count);
    }

    /// Marks the election of `key` as blocked by a strategy conflict, or not (any other outcome
    /// of a step: elected, nothing to do, no candidates left, ...).
    fn set_conflicted(&self, key: &LeaseKey, conflicted: bool) {
        let count = mark(&self.leases.conflicted, key, conflicted);
        self.metrics.conflicted_leases.set(count);
    }

    /// Forgets every managed and every blocked Lease: the term ended, and a follower manages and
    /// blocks nothing.
    fn end_term(&self) {
        lock(&self.leases.managed).clear();
        self.metrics.managed_leases.set(0);
        lock(&self.leases.conflicted).clear();
        self.metrics.conflicted_leases.set(0);
        self.metrics.leases_without_holder.set(0);
    }

    /// How many managed Leases have no live holder while candidates exist
    /// ([`conclave_core::plan::leaderless`]), from the caches: the Lease as a step reads it, and
    /// its valid candidates.
    fn count_leaderless(&self) -> usize {
        let managed: Vec<LeaseKey> = lock(&self.leases.managed).iter().cloned().collect();
        let now = now();
        managed
            .iter()
            .filter(|key| {
                // Most Leases have a leader, which one lookup finds: no record is built.
                if self.caches.has_live_holder(key, now) {
                    return false;
                }
                let lease = self.caches.lease(key).map(|lease| {
                    let mut record = lease_record(&lease);
                    self.caches.annotate(key, &mut record, now);
                    record
                });
                // Nor are the candidates of a Lease with a leader gathered.
                if !without_leader(lease.as_ref(), now) {
                    return false;
                }
                let candidates: Vec<_> = self
                    .caches
                    .candidates_for(key)
                    .iter()
                    .filter(|c| validate_lease_candidate(c).is_empty())
                    .map(|c| candidate_view(c))
                    .collect();
                leaderless(
                    lease.as_ref(),
                    &candidates,
                    now,
                    self.config.candidate_gc_after,
                )
            })
            .count()
    }

    async fn decide(
        &self,
        strategy: &str,
        request: ElectionRequest,
    ) -> Result<Option<String>, DecideError> {
        let decider = Arc::clone(&self.decider);
        let owned = strategy.to_owned();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || decider.elect(&owned, &request))
            .await
            .unwrap_or_else(|join| {
                Err(DecideError {
                    kind: DecideErrorKind::Panic,
                    message: format!("the strategy call did not complete: {join}"),
                })
            });
        self.metrics
            .plugin_latency
            .get_or_create(&metrics::StrategyLabels {
                strategy: strategy.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
        result
    }

    fn backoff(&self, key: &LeaseKey) -> Duration {
        let mut failures = lock(&self.leases.failures);
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let exp = (*n - 1).min(7);
        Duration::from_millis(500u64 << exp).min(Duration::from_secs(60))
    }

    fn succeeded(&self, key: &LeaseKey) {
        lock(&self.leases.failures).remove(key);
    }

    /// Enqueues every Lease that has candidates (on becoming active, or when the built-in
    /// controller's state changes).
    fn enqueue_all(&self) {
        let keys: HashSet<LeaseKey> = self
            .caches
            .all_candidates()
            .iter()
            .filter_map(|c| LeaseKey::of_candidate(c))
            .collect();
        for key in keys {
            self.queue.add(key);
        }
    }
}

/// The monotonic instant at wall-clock time `at` (now if it has passed).
fn instant_at(at: Timestamp) -> Instant {
    let wait = at.as_micros().saturating_sub(now().as_micros()).max(0);
    Instant::now() + Duration::from_micros(wait.unsigned_abs())
}

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
