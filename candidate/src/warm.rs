//! Controllers that run only while leading, on caches kept warm while following.
//!
//! KEP-4355 lets a candidate "warm up (e.g. start informers to pull k8s objects) before actually
//! becoming the leader". A [`WarmCache`] is that informer: a reflector started once per process,
//! kept running while the process follows, and shared by every term. What runs only while
//! leading (reconcilers, writers) reads it:
//!
//! - [`WarmCache::store`] is the reflector's [`Store`], for plain tasks and for a controller;
//! - [`WarmCache::triggers`] is one term's stream of objects to reconcile: every object in the
//!   cache when the term starts (what a fresh controller's initial LIST would give, without the
//!   LIST), then every change, until the term ends.
//!
//! With a `kube_runtime::Controller` (`Controller::for_stream` needs kube's `unstable-runtime`
//! feature, or kube-runtime's `unstable-runtime-stream-control`), inside the term's closure:
//!
//! ```no_run
//! # use conclave_candidate::{Term, WarmCache};
//! # use k8s_openapi::api::coordination::v1::Lease;
//! # use kube::runtime::controller::{Action, Controller};
//! # use futures::StreamExt;
//! # use std::sync::Arc;
//! # async fn reconcile(_: Arc<Lease>, _: Arc<()>) -> Result<Action, kube::Error> { Ok(Action::await_change()) }
//! # fn error_policy(_: Arc<Lease>, _: &kube::Error, _: Arc<()>) -> Action { Action::await_change() }
//! # fn lead(cache: WarmCache<Lease>, term: Term) {
//! let controller = Controller::for_stream(cache.triggers(&term), cache.store())
//!     // Finish the reconciles in flight, start no new one, once the term ends.
//!     .graceful_shutdown_on(term.token().clone().cancelled_owned())
//!     .run(reconcile, error_policy, Arc::new(()))
//!     .for_each(|_| async {});
//! // A task of the term: the Lease is released only after it returned.
//! term.spawn(controller);
//! # }
//! ```
//!
//! Without unstable kube features, `kube::runtime::controller::applier` takes the same store
//! and `cache.triggers(&term).map_ok(|o| ObjectRef::from_obj(&o))` as its queue.
//!
//! Nothing reconciles outside a term: the triggers end when the term's token is cancelled, the
//! controller then drains, and the elector releases the Lease only after the term's tasks (the
//! controller among them) have returned. `examples/controller.rs` is a whole component.
//!
//! # A cache that cannot sync
//!
//! A cache of a resource the server does not serve (a CRD not installed; `conclave emulator`,
//! which serves Leases, LeaseCandidates, Pods, Namespaces and Events only) or that RBAC does not
//! let this identity list and watch never completes its first LIST: its watch fails and is
//! retried with backoff for as long as the cause lasts (logged once as `warn`, then at `debug`).
//! Three things keep that from going unnoticed or doing harm:
//!
//! - inside a term, wait with [`WarmCache::run_when_ready`] (or [`WarmCache::triggers`], which
//!   ends with the term): `store().wait_until_ready()` ignores the term's cancellation and would
//!   hold the hand-off for the whole drain timeout;
//! - give the cache to the elector, [`crate::Elector::with_warm_cache`]: if it has not synced
//!   within the cache sync timeout (30 s by default), the elector says so once, with the
//!   server's last answer: a `warn` line, `conclave_candidate_cache_unsynced{cache}` = 1 and a
//!   [`crate::Notice::CacheNotSynced`] (then [`crate::Notice::CacheSynced`] if it recovers);
//! - or make it a reason not to lead, [`crate::Elector::require_synced_cache`]: the same
//!   report, and until the cache has synced the candidate takes no part in the election (no
//!   LeaseCandidate registered, no Lease taken, not ready), so a replica that could not
//!   reconcile leaves leadership to one that can.
//!
//! ```no_run
//! # use conclave_candidate::{CandidateConfig, Elector, LeaseConfig, WarmCache};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kube::runtime::watcher;
//! # async fn demo(client: kube::Client) -> conclave_candidate::Result<()> {
//! let cache: WarmCache<ConfigMap> =
//!     WarmCache::new(kube::Api::default_namespaced(client.clone()), watcher::Config::default());
//! let lease = LeaseConfig::for_client(&client, "my-controller");
//! let candidate = CandidateConfig::new("1.33.0", "1.33.0", "OldestEmulationVersion");
//! let elector = Elector::coordinated(client, lease, candidate)?.require_synced_cache(&cache);
//! # Ok(())
//! # }
//! ```

use crate::term::Term;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// Changes buffered per term; a term that falls further behind replays the whole cache instead
/// (reconcilers are level-triggered, so a replay loses nothing).
const CHANGE_BUFFER: usize = 1024;

/// A reflector that keeps a cache of `K` current from its creation until its last clone is
/// dropped, across terms; see the [module docs](self).
///
/// Cheap to clone (clones share the cache); create it before [`crate::Elector::run`] and move
/// clones into the term's closure.
pub struct WarmCache<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    inner: Arc<Inner<K>>,
}

struct Inner<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    changes: broadcast::Sender<Arc<K>>,
    sync: CacheSync,
    stop: CancellationToken,
}

/// Whether a [`WarmCache`] completed its first LIST, and if not, the last watch error: what
/// [`crate::Elector::with_warm_cache`] watches, without the cache's type.
#[derive(Debug, Clone)]
pub(crate) struct CacheSync {
    /// The resource, as kube-apiserver names it in messages: `configmaps`,
    /// `widgets.example.com`.
    pub(crate) resource: Arc<str>,
    pub(crate) state: watch::Receiver<SyncState>,
}

/// A cache's progress towards its first LIST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SyncState {
    /// Not listed yet; the last watch error, if one failed.
    Syncing { error: Option<String> },
    /// The first LIST is in (later watch errors keep the cache, stale, and retry).
    Synced,
}

impl CacheSync {
    /// Resolves once the cache synced; pending forever if it is dropped first.
    pub(crate) async fn synced(&mut self) {
        if self
            .state
            .wait_for(|s| *s == SyncState::Synced)
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// The last watch error while not synced.
    pub(crate) fn error(&self) -> Option<String> {
        match &*self.state.borrow() {
            SyncState::Syncing { error } => error.clone(),
            SyncState::Synced => None,
        }
    }
}

impl<K> Drop for Inner<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<K> Clone for WarmCache<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for WarmCache<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmCache")
            .field("objects", &self.inner.store.len())
            .finish_non_exhaustive()
    }
}

impl<K> WarmCache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching `api` with `config` on a task of its own (call it inside a Tokio
    /// runtime). The first LIST happens now, while following; terms then start on a warm cache.
    /// Watch errors are retried with kube's default backoff; the first of a run of failures is
    /// logged as `warn`, the retries as `debug`, and the recovery as `info`. Give the cache to
    /// [`crate::Elector::with_warm_cache`] or [`crate::Elector::require_synced_cache`] so that
    /// one that cannot sync is reported (and, with the latter, keeps this candidate out of the
    /// election).
    #[must_use]
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        let writer = Writer::default();
        let store = writer.as_reader();
        let changes = broadcast::channel(CHANGE_BUFFER).0;
        let stop = CancellationToken::new();
        let (state, state_rx) = watch::channel(SyncState::Syncing { error: None });
        let resource = match K::group(&()).as_ref() {
            "" => K::plural(&()).into_owned(),
            group => format!("{}.{group}", K::plural(&())),
        };
        let events = watcher(api, config).default_backoff();
        tokio::spawn(reflect(
            writer,
            events,
            changes.clone(),
            state,
            stop.clone(),
        ));
        Self {
            inner: Arc::new(Inner {
                store,
                changes,
                sync: CacheSync {
                    resource: resource.into(),
                    state: state_rx,
                },
                stop,
            }),
        }
    }
}

impl<K> WarmCache<K>
where
    K: Lookup + Clone + Send + Sync + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// The cache, filled while following. `store().wait_until_ready()` resolves once the first
    /// LIST is in (for a readiness probe). Inside a term, wait with
    /// [`WarmCache::run_when_ready`] instead: `wait_until_ready` ignores the term's cancellation,
    /// so a cache that never syncs (a resource the server does not serve, a watch RBAC forbids)
    /// would hold the hand-off for the whole drain timeout, and its task would be reported
    /// leaked. `kube_runtime::Controller` waits for its store the same way.
    #[must_use]
    pub fn store(&self) -> Store<K> {
        self.inner.store.clone()
    }

    /// The resource cached, as kube-apiserver names it in messages and as the elector's
    /// reports name the cache: `configmaps`, `widgets.example.com`.
    #[must_use]
    pub fn resource(&self) -> &str {
        &self.inner.sync.resource
    }

    pub(crate) fn sync(&self) -> CacheSync {
        self.inner.sync.clone()
    }

    /// Whether the cache has completed its first LIST.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.inner
            .store
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|ready| ready.is_ok())
    }

    /// Runs `work` (typically a term's `kube_runtime::Controller`, which waits for its store
    /// without regard to cancellation) once the cache is ready; if `term` ends first, returns
    /// without running it and says so once in the log. Spawn the result on the term.
    pub fn run_when_ready<F>(
        &self,
        term: &Term,
        work: F,
    ) -> impl Future<Output = ()> + Send + use<K, F>
    where
        F: Future<Output = ()> + Send,
    {
        let store = self.inner.store.clone();
        let token = term.token().clone();
        let number = term.number();
        async move {
            tokio::select! {
                biased;
                () = token.cancelled() => {
                    tracing::warn!(
                        kind = %std::any::type_name::<K>(),
                        term = number,
                        "warm cache: the term ended before the cache's first LIST completed; its work never ran (does the server serve this resource, and may this identity watch it?)"
                    );
                }
                ready = store.wait_until_ready() => {
                    if ready.is_ok() {
                        work.await;
                    }
                }
            }
        }
    }

    /// The objects to reconcile in `term`: every object in the cache once it is ready, then each
    /// object as it is created or changed (deletions are not sent: use finalizers). Ends when
    /// the term ends. The item type is what `Controller::for_stream` takes; it is never `Err`.
    ///
    /// Makes no API request: a term started on a warm cache reconciles from memory.
    pub fn triggers(
        &self,
        term: &Term,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + use<K> {
        // Subscribed before the snapshot is taken, so no change falls between the two.
        let state = Triggers {
            store: self.inner.store.clone(),
            changes: self.inner.changes.subscribe(),
            phase: Phase::Warming,
        };
        futures::stream::unfold(state, Triggers::next)
            .take_until(term.token().clone().cancelled_owned())
            .map(Ok)
    }
}

/// Keeps the store current and announces each applied object once the store shows it;
/// publishes whether the first LIST is in and, until then, the last watch error.
async fn reflect<K>(
    mut writer: Writer<K>,
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    changes: broadcast::Sender<Arc<K>>,
    state: watch::Sender<SyncState>,
    stop: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + 'static,
{
    let mut events = std::pin::pin!(events);
    let kind = K::kind(&());
    // A (re)list is applied to the store at its end; its objects are announced then, so a
    // reconciler never gets an object the store does not have yet.
    let mut listed: Vec<K> = Vec::new();
    // Failures since the last success: the first is a `warn`, the retries (every few seconds
    // with backoff, for as long as the cause lasts) are `debug`.
    let mut failures: u64 = 0;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        let event = match event {
            None => return,
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(%kind, %error, "warm cache: watch failed; retrying with backoff (further failures are logged at debug level)");
                } else {
                    tracing::debug!(%kind, %error, failures, "warm cache: watch failed again");
                }
                state.send_if_modified(|current| match current {
                    SyncState::Syncing { error: last } => {
                        *last = Some(error.to_string());
                        true
                    }
                    SyncState::Synced => false,
                });
                continue;
            }
        };
        // `Init` starts a (re)list and comes before the LIST request, so only what follows
        // shows that the server answered.
        if !matches!(event, watcher::Event::Init) && std::mem::take(&mut failures) > 0 {
            tracing::info!(%kind, "warm cache: watch works again");
        }
        writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Apply(object) => {
                // No subscriber (no term running) is fine.
                let _ = changes.send(Arc::new(object));
            }
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(object) => listed.push(object),
            watcher::Event::InitDone => {
                tracing::debug!(%kind, objects = listed.len(), "warm cache: listed");
                state.send_if_modified(|current| {
                    let first = *current != SyncState::Synced;
                    *current = SyncState::Synced;
                    first
                });
                for object in listed.drain(..) {
                    let _ = changes.send(Arc::new(object));
                }
            }
            watcher::Event::Delete(_) => {}
        }
    }
}

/// The state of one term's [`WarmCache::triggers`].
struct Triggers<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    changes: broadcast::Receiver<Arc<K>>,
    phase: Phase<K>,
}

enum Phase<K> {
    /// Waiting for the cache's first LIST.
    Warming,
    /// Sending a snapshot of the cache.
    Replaying(std::vec::IntoIter<Arc<K>>),
    /// Sending changes as they come.
    Live,
}

impl<K> Triggers<K>
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    async fn next(mut self) -> Option<(K, Self)> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Live) {
                Phase::Warming => {
                    // Err: the cache was dropped before its first LIST.
                    self.store.wait_until_ready().await.ok()?;
                    self.phase = Phase::Replaying(self.store.state().into_iter());
                }
                Phase::Replaying(mut objects) => {
                    if let Some(object) = objects.next() {
                        self.phase = Phase::Replaying(objects);
                        return Some((K::clone(&object), self));
                    }
                }
                Phase::Live => match self.changes.recv().await {
                    Ok(object) => return Some((K::clone(&object), self)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(
                            missed,
                            "warm cache: term fell behind; replaying the cache"
                        );
                        self.phase = Phase::Replaying(self.store.state().into_iter());
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}
