//! The coordinated leader election controller (`conclave run`).
//!
//! Shape: one election step is a pure function over plain data (`conclave_core::step`: a Lease
//! snapshot, candidate snapshots and now in, the writes to make out); this module does the I/O
//! around it:
//! - [`cache`]: kube-rs reflectors on Leases and LeaseCandidates (cluster-wide or per namespace);
//!   every watch event enqueues a Lease key; followers keep these caches warm;
//! - [`queue`]: Lease keys, deduplicated, delayed re-adds (ping windows, expiry timers), one worker
//!   per key at a time;
//! - [`reconcile`]: one election step: `conclave_core::step` + the strategy ([`Decide`]) + the
//!   [`writer`], which carries a resourceVersion precondition on every write;
//! - candidate garbage collection, detection of kube-apiserver's built-in controller (`--mode auto`),
//!   metrics, Kubernetes Events, `/metrics` `/healthz` `/readyz`.
//!
//! Only the replica holding the plain Lease `conclave-controller` (taken through
//! `conclave-candidate`'s classic elector) runs workers and writes.

pub mod cache;
pub mod decide;
mod http;
mod latency;
pub mod metrics;
pub mod own_writes;
pub mod queue;
pub mod reconcile;
pub mod writer;

pub use decide::{Decide, DecideError};

use cache::{Caches, PendingPings};
use conclave_core::k8s::{candidate_view, lease_record, timestamp};
use conclave_core::plan::{Mode, candidate_expired};
use conclave_core::request::ElectionRequest;
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
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

/// The name of the controller's own Lease (in `controller_namespace`).
pub const CONTROLLER_LEASE: &str = "conclave-controller";

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
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            workers: 4,
            ack_window: Duration::from_secs(5),
            candidate_gc_after: Duration::from_secs(30 * 60),
            lease_duration_seconds: 5,
            mode: Mode::Auto,
            identity: "conclave".into(),
            controller_namespace: "conclave-system".into(),
            own_lease_duration: Duration::from_secs(15),
            own_renew_deadline: Duration::from_secs(10),
            own_retry_period: Duration::from_secs(2),
            metrics_addr: None,
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

/// Shared state of one controller process.
pub struct Context {
    client: Client,
    caches: Caches,
    queue: WorkQueue,
    decider: Arc<dyn Decide>,
    recorder: Recorder,
    metrics: metrics::Metrics,
    config: ControllerConfig,
    builtin_active: AtomicBool,
    pings: PendingPings,
    managed: Mutex<HashSet<String>>,
    /// Leases whose election a strategy conflict blocks now.
    conflicted: Mutex<HashSet<String>>,
    starts: latency::ElectionStarts,
    failures: Mutex<HashMap<String, u32>>,
    /// Writers hold it shared; shutdown takes it exclusively to wait for in-flight writes.
    writes_in_flight: tokio::sync::RwLock<()>,
}

/// Locks `m`, also after a panic elsewhere held it: every value guarded in the controller stays
/// consistent between statements, so a poisoned lock holds nothing half-written.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Context {
    fn now(&self) -> Timestamp {
        timestamp(jiff::Timestamp::now())
    }

    fn builtin_active(&self) -> bool {
        self.builtin_active.load(Ordering::Relaxed)
    }

    fn set_managed(&self, key: &str, managed: bool) {
        let mut set = lock(&self.managed);
        if managed {
            set.insert(key.to_owned());
        } else {
            set.remove(key);
        }
        self.metrics
            .managed_leases
            .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
    }

    /// Marks the election of `key` as blocked by a strategy conflict, or not (any other outcome
    /// of a step: elected, nothing to do, no candidates left, ...).
    fn set_conflicted(&self, key: &str, conflicted: bool) {
        let mut set = lock(&self.conflicted);
        if conflicted {
            set.insert(key.to_owned());
        } else {
            set.remove(key);
        }
        self.metrics
            .conflicted_leases
            .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
    }

    /// Forgets every managed and every blocked Lease: the term ended, and a follower manages and
    /// blocks nothing.
    fn end_term(&self) {
        lock(&self.managed).clear();
        self.metrics.managed_leases.set(0);
        lock(&self.conflicted).clear();
        self.metrics.conflicted_leases.set(0);
    }

    fn record_ping(&self, namespace: &str, name: &str, at: Timestamp) {
        lock(&self.pings).insert(format!("{namespace}/{name}"), at.as_micros());
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
                    kind: "panic",
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

    /// Publishes an Event on the Lease; failures are logged, never fatal.
    async fn event(
        &self,
        lease: Option<&Lease>,
        namespace: &str,
        name: &str,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let reference = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            uid: lease.and_then(|l| l.metadata.uid.clone()),
            resource_version: lease.and_then(|l| l.metadata.resource_version.clone()),
            ..ObjectReference::default()
        };
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Elect".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, "publishing an Event failed");
        }
    }

    fn backoff(&self, key: &str) -> Duration {
        let mut failures = lock(&self.failures);
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        let exp = (*n - 1).min(7);
        Duration::from_millis(500u64 << exp).min(Duration::from_secs(60))
    }

    fn succeeded(&self, key: &str) {
        lock(&self.failures).remove(key);
    }

    fn instant_at(&self, at: Timestamp) -> Instant {
        let now = self.now();
        let wait = at.as_micros().saturating_sub(now.as_micros()).max(0);
        Instant::now() + Duration::from_micros(wait.unsigned_abs())
    }

    /// Enqueues every Lease that has candidates (on becoming active, or when the built-in
    /// controller's state changes).
    fn enqueue_all(&self) {
        let keys: HashSet<String> = self
            .caches
            .all_candidates()
            .iter()
            .filter_map(|c| cache::candidate_lease_key(c))
            .collect();
        for key in keys {
            self.queue.add(key);
        }
    }
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
    let pings: PendingPings = Arc::default();
    let mut tasks = JoinSet::new();
    let acked = metrics.pings_acked.clone();
    let caches = Caches::start(
        &client,
        &config.namespaces,
        &queue,
        &pings,
        move || {
            acked.inc();
        },
        &mut tasks,
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "conclave".into(),
            instance: Some(config.identity.clone()),
        },
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        caches,
        queue: queue.clone(),
        decider,
        recorder,
        metrics,
        config: config.clone(),
        builtin_active: AtomicBool::new(false),
        pings,
        managed: Mutex::default(),
        conflicted: Mutex::default(),
        starts: latency::ElectionStarts::default(),
        failures: Mutex::default(),
        writes_in_flight: tokio::sync::RwLock::new(()),
    });
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = config.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
        tasks.spawn(http::serve(
            listener,
            Arc::new(registry),
            ready.clone(),
            shutdown.clone(),
        ));
    }
    if config.mode == Mode::Auto {
        check_builtin(&ctx).await;
        tasks.spawn(watch_builtin(ctx.clone(), shutdown.clone()));
    }
    tasks.spawn(count_candidates(ctx.clone(), shutdown.clone()));

    ctx.caches.wait_until_ready().await;
    ready.store(true, Ordering::Relaxed);
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
    let lead_ctx = ctx.clone();
    let result = elector
        .run(
            move |term: conclave_candidate::Term| {
                let ctx = lead_ctx.clone();
                async move { lead(ctx, term).await }
            },
            shutdown.clone(),
        )
        .await;
    queue.shutdown();
    // Wait for writes still in flight (none should be, the term drained its workers).
    drop(ctx.writes_in_flight.write().await);
    tasks.shutdown().await;
    result.map_err(Error::from)
}

/// The active replica's work: workers and candidate GC, until the term ends.
async fn lead(ctx: Arc<Context>, term: conclave_candidate::Term) {
    tracing::info!(term = term.number(), "became the active controller");
    ctx.metrics.active.set(1);
    // Keys queued while following, and elections left over from an earlier term, start now.
    ctx.starts.reset();
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
    term.cancelled().await;
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
    match next {
        Next::Idle => ctx.succeeded(&item.key),
        Next::At(at) => {
            ctx.succeeded(&item.key);
            ctx.queue.add_at(item.key.clone(), ctx.instant_at(at));
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
        let now = ctx.now();
        for candidate in ctx.caches.all_candidates() {
            let lease = cache::candidate_lease_key(&candidate).unwrap_or_default();
            if !candidate_expired(
                &candidate_view(&candidate),
                now,
                ctx.config.candidate_gc_after,
            ) {
                continue;
            }
            let (Some(ns), Some(name)) = (
                candidate.metadata.namespace.as_deref(),
                candidate.metadata.name.as_deref(),
            ) else {
                continue;
            };
            match writer::collect_candidate(&ctx, ns, name, now).await {
                Ok(true) => {
                    ctx.metrics.gc_deletions.inc();
                    tracing::info!(%lease, candidate = %format!("{ns}/{name}"), "garbage-collected a LeaseCandidate");
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%lease, candidate = %format!("{ns}/{name}"), %error, "candidate GC failed");
                }
            }
        }
    }
}

/// Keeps the `candidates` gauge at the size of the cache, on followers too (they keep the cache
/// warm but reconcile nothing). Every 2 s, well within any scrape interval.
async fn count_candidates(ctx: Arc<Context>, shutdown: CancellationToken) {
    loop {
        ctx.metrics
            .candidates
            .set(i64::try_from(ctx.caches.candidate_count()).unwrap_or(i64::MAX));
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
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
    let api = kube::Api::<Lease>::namespaced(ctx.client.clone(), BUILTIN_LEASE.0);
    {
        let active = match api.get_opt(BUILTIN_LEASE.1).await {
            Ok(Some(lease)) => {
                let record = lease_record(&lease);
                record.holder().is_some() && !record.is_expired(ctx.now())
            }
            Ok(None) => false,
            Err(error) => {
                tracing::debug!(%error, "reading the built-in controller's Lease");
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
}
