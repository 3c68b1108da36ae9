//! Fault injection for tests: latency, failing requests, dropped or held watches, expired history.
//!
//! Only reachable in-process through [`crate::RunningEmulator::faults`]; nothing on the HTTP
//! side can turn faults on.

use crate::resources::ResourceInfo;
use crate::status::ApiError;
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// An API verb, as Kubernetes names it in authorization and audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, including server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// The verb as RBAC names it (`get`, `list`, `deletecollection`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }
}

/// How an injected failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 500 InternalError.
    InternalError,
    /// 429 TooManyRequests with `Retry-After: seconds`.
    TooManyRequests {
        /// The Retry-After value, in seconds.
        retry_after_seconds: u64,
    },
    /// 409 Conflict, worded as kube-apiserver words a stale resourceVersion ("the object has
    /// been modified; please apply your changes to the latest version and try again"), so a
    /// test can make a writer lose a race it would otherwise win. Meant for writes (create,
    /// update, patch, delete); the object named is the one in the URL, or in a create's body.
    Conflict,
    /// 403 Forbidden, worded as kube-apiserver's authorizer words a refusal for the user
    /// `system:serviceaccount:test:test`, so a test can play RBAC that does not allow a verb.
    Forbidden,
}

#[derive(Debug)]
struct FailRule {
    verb: Verb,
    resource: String,
    remaining: usize,
    failure: Failure,
    /// How long the failure's answer is held back.
    held: Duration,
    /// Only requests about the object of this name, if set.
    name: Option<String>,
}

#[derive(Debug, Default)]
struct FaultState {
    latency: Duration,
    rules: Vec<FailRule>,
}

/// A watch's resource (plural name) and namespace (`None`: all namespaces).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct WatchScope {
    resource: String,
    namespace: Option<String>,
}

impl WatchScope {
    fn new(resource: &str, namespace: Option<&str>) -> Self {
        Self {
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
        }
    }
}

/// A watch counted by [`Faults::watch_followed`] while it lives.
pub(crate) struct Following {
    faults: Faults,
    scope: WatchScope,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.faults.inner.following.send_modify(|open| {
            if let Some(n) = open.get_mut(&self.scope) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

/// The shared fault state plus what it needs to act on watches and history.
pub(crate) struct FaultsInner {
    state: Mutex<FaultState>,
    watches: Mutex<CancellationToken>,
    /// The resources (plural names) whose watch events are held back.
    held: watch::Sender<BTreeSet<String>>,
    /// How many watches of each resource and scope follow live events now.
    following: watch::Sender<BTreeMap<WatchScope, usize>>,
    store: Arc<Store>,
}

/// A handle to inject faults into a running emulator. Cloning shares the same faults.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<FaultsInner>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("state", &self.inner.state)
            .finish_non_exhaustive()
    }
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            inner: Arc::new(FaultsInner {
                state: Mutex::new(FaultState::default()),
                watches: Mutex::new(CancellationToken::new()),
                held: watch::Sender::new(BTreeSet::new()),
                following: watch::Sender::new(BTreeMap::new()),
                store,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Delays every API request by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Fails the next `count` requests with this verb on this resource (plural name, e.g.
    /// `leases`) with `failure`. Rules for the same verb and resource queue up.
    pub fn fail_next(&self, verb: Verb, resource: &str, count: usize, failure: Failure) {
        self.state().rules.push(FailRule {
            verb,
            resource: resource.to_string(),
            remaining: count,
            failure,
            held: Duration::ZERO,
            name: None,
        });
    }

    /// As [`Faults::fail_next`], for requests about the object `name` only, each failure
    /// answered only after `held`, while the server goes on: the request changes nothing, and
    /// what other clients do meanwhile (a delete, say) is watched before the answer arrives, as
    /// when a response is held back on its way to a client (a slow network path, a proxy) while
    /// its watch stream flows.
    pub fn fail_next_held(
        &self,
        verb: Verb,
        resource: &str,
        name: &str,
        count: usize,
        failure: Failure,
        held: Duration,
    ) {
        self.state().rules.push(FailRule {
            verb,
            resource: resource.to_string(),
            remaining: count,
            failure,
            held,
            name: Some(name.to_owned()),
        });
    }

    /// How many injected failures for this verb and resource are still to come (a test waits for
    /// none, to know that the request it aimed at has arrived).
    #[must_use]
    pub fn failures_pending(&self, verb: Verb, resource: &str) -> usize {
        self.state()
            .rules
            .iter()
            .filter(|r| r.verb == verb && r.resource == resource)
            .map(|r| r.remaining)
            .sum()
    }

    /// Ends every open watch stream now (clients see the connection end and re-watch).
    pub fn drop_watches(&self) {
        let mut token = self
            .inner
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        token.cancel();
        *token = CancellationToken::new();
    }

    /// Holds back the events of every open watch of `resource` (plural name, e.g. `leases`),
    /// bookmarks included, until [`Faults::release_watch_events`]: the connections stay open and
    /// the events queue up in order, as when kube-apiserver's watch cache falls behind etcd.
    /// Lets a test make a client act on a cache that lags behind the server. Watches started
    /// while held send their initial list and replay at once, and hold only later events: wait
    /// for the client's watch with [`Faults::watch_followed`] before holding.
    pub fn hold_watch_events(&self, resource: &str) {
        self.inner.held.send_modify(|held| {
            held.insert(resource.to_owned());
        });
    }

    /// Waits until a watch of `resource` (plural name) in `namespace` (`None`: across all
    /// namespaces) has sent its initial events and replay and follows live events. A test that
    /// holds a client's watch events ([`Faults::hold_watch_events`]) waits for this first: a
    /// watch that opens while held still replays what happened since its resourceVersion, so
    /// holding before the client's watch is open holds nothing.
    pub async fn watch_followed(&self, resource: &str, namespace: Option<&str>) {
        let scope = WatchScope::new(resource, namespace);
        let mut following = self.inner.following.subscribe();
        // The sender lives in `self`, so the wait cannot end in an error.
        let _ = following
            .wait_for(|open| open.get(&scope).is_some_and(|n| *n > 0))
            .await;
    }

    /// Counts a watch of `resource` in `namespace` as following live events until the returned
    /// guard is dropped (see [`Faults::watch_followed`]).
    pub(crate) fn follow(&self, resource: &str, namespace: Option<&str>) -> Following {
        let scope = WatchScope::new(resource, namespace);
        self.inner.following.send_modify(|open| {
            *open.entry(scope.clone()).or_default() += 1;
        });
        Following {
            faults: self.clone(),
            scope,
        }
    }

    /// Delivers the events held back by [`Faults::hold_watch_events`] of `resource`, in order,
    /// and stops holding them.
    pub fn release_watch_events(&self, resource: &str) {
        self.inner.held.send_modify(|held| {
            held.remove(resource);
        });
    }

    /// Forgets the watch history, so the next watch from an older resourceVersion gets 410 Gone.
    pub fn expire_history(&self) {
        self.inner.store.expire_history();
    }

    /// Removes latency and pending failures, and releases held watch events.
    pub fn clear(&self) {
        let mut st = self.state();
        st.latency = Duration::ZERO;
        st.rules.clear();
        self.inner.held.send_modify(BTreeSet::clear);
    }

    /// A token cancelled by the next [`Faults::drop_watches`].
    pub(crate) fn watch_token(&self) -> CancellationToken {
        self.inner
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Which resources' watch events are held back (see [`Faults::hold_watch_events`]).
    pub(crate) fn held_watches(&self) -> watch::Receiver<BTreeSet<String>> {
        self.inner.held.subscribe()
    }

    /// Applies latency and consumes a matching failure rule, if any. `name` gives the object the
    /// request is about (empty for collections), for the message of an injected conflict; it is
    /// only called then, so requests without faults pay nothing for it.
    pub(crate) async fn before_request(
        &self,
        verb: Verb,
        res: &ResourceInfo,
        name: impl FnOnce() -> String,
    ) -> Result<(), ApiError> {
        let resource = res.plural;
        let mut name = Some(name);
        let mut object_name = None::<String>;
        let (latency, failure) = {
            let mut st = self.state();
            let failure = st
                .rules
                .iter_mut()
                .find(|r| {
                    r.verb == verb
                        && r.resource == resource
                        && r.remaining > 0
                        && r.name.as_deref().is_none_or(|wanted| {
                            let named = object_name.get_or_insert_with(|| {
                                name.take().map(|f| f()).unwrap_or_default()
                            });
                            named == wanted
                        })
                })
                .map(|r| {
                    r.remaining -= 1;
                    (r.failure, r.held)
                });
            st.rules.retain(|r| r.remaining > 0);
            (st.latency, failure)
        };
        let held = failure.map_or(Duration::ZERO, |(_, held)| held);
        if !(latency + held).is_zero() {
            tokio::time::sleep(latency + held).await;
        }
        let failure = failure.map(|(failure, _)| failure);
        match failure {
            None => Ok(()),
            Some(Failure::InternalError) => Err(ApiError::internal(format!(
                "injected fault for {verb:?} {resource}"
            ))),
            Some(Failure::TooManyRequests {
                retry_after_seconds,
            }) => Err(ApiError::too_many_requests(retry_after_seconds)),
            Some(Failure::Conflict) => {
                let named =
                    object_name.unwrap_or_else(|| name.take().map(|f| f()).unwrap_or_default());
                Err(ApiError::conflict(res, &named))
            }
            Some(Failure::Forbidden) => Err(ApiError::forbidden(res, verb.as_str())),
        }
    }
}
