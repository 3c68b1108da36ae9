//! A `kube_runtime::Controller` run per term on a [`WarmCache`]: a term started on the warm cache
//! makes no LIST, and nothing is reconciled outside a term.

mod common;

use common::*;
use conclave_candidate::{Elector, ElectorHandle, Notice, Term, Transition, WarmCache};
use conclave_emulator::RunningEmulator;
use futures::StreamExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::client::ConfigExt as _;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const LABEL: &str = "example.com/warm";
const NOTE: &str = "example.com/note";

/// One call of the reconciler.
#[derive(Debug, Clone)]
struct Reconciled {
    term: u64,
    name: String,
    note: Option<String>,
    /// The term was running and the elector leading when the call began.
    in_term: bool,
}

struct Context {
    term: Term,
    elector: ElectorHandle,
    log: Arc<Mutex<Vec<Reconciled>>>,
}

/// A client that counts the LIST requests it sends (GETs of a collection without `watch`).
fn counting_client(emulator: &RunningEmulator, lists: Arc<AtomicUsize>) -> Client {
    let config = kube::Config::new(emulator.url().parse().expect("valid URL"));
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build(HttpConnector::new());
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_request(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri();
            let watch = uri.query().is_some_and(|q| q.contains("watch=true"));
            if request.method() == http::Method::GET && uri.path().ends_with("/leases") && !watch {
                lists.fetch_add(1, Ordering::SeqCst);
            }
            request
        })
        .map_err(tower::BoxError::from)
        .service(http);
    Client::new(service, config.default_namespace)
}

async fn create_object(api: &Api<Lease>, name: &str) {
    let object = Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(LABEL.into(), "true".into())])),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    api.create(&PostParams::default(), &object)
        .await
        .expect("create object");
}

async fn reconcile(object: Arc<Lease>, context: Arc<Context>) -> Result<Action, std::io::Error> {
    let in_term = !context.term.is_cancelled() && context.elector.is_leading();
    context.log.lock().unwrap().push(Reconciled {
        term: context.term.number(),
        name: object.name_any(),
        note: object.annotations().get(NOTE).cloned(),
        in_term,
    });
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Lease>, _: &std::io::Error, _: Arc<Context>) -> Action {
    Action::await_change()
}

/// The names reconciled in `term` (and whether each call was inside the term).
fn reconciled_in(log: &Mutex<Vec<Reconciled>>, term: u64) -> Vec<Reconciled> {
    let log = log.lock().unwrap();
    log.iter().filter(|r| r.term == term).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_reconcile_from_the_warm_cache_and_only_while_leading() {
    let emulator = emulator().await;
    let admin = client(&emulator);
    let objects: Api<Lease> = Api::namespaced(admin.clone(), NS);
    for name in ["obj-1", "obj-2", "obj-3"] {
        create_object(&objects, name).await;
    }

    // The cache lists once, now, while this process does not lead.
    let lists = Arc::new(AtomicUsize::new(0));
    let cache: WarmCache<Lease> = WarmCache::new(
        Api::namespaced(counting_client(&emulator, lists.clone()), NS),
        watcher::Config::default().labels(&format!("{LABEL}=true")),
    );
    tokio::time::timeout(WAIT, cache.store().wait_until_ready())
        .await
        .expect("the cache is warm")
        .expect("cache alive");
    assert_eq!(cache.store().len(), 3);
    let warm_lists = lists.load(Ordering::SeqCst);
    assert_eq!(warm_lists, 1, "warming the cache is the one LIST");

    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("warm", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap();
    let handle = elector.handle();
    let log: Arc<Mutex<Vec<Reconciled>>> = Arc::default();
    let (lead_cache, lead_log, lead_handle) = (cache.clone(), log.clone(), handle.clone());
    let a = Running::start(elector, move |term: Term| {
        let context = Arc::new(Context {
            term: term.clone(),
            elector: lead_handle.clone(),
            log: lead_log.clone(),
        });
        let controller = Controller::for_stream(lead_cache.triggers(&term), lead_cache.store())
            .graceful_shutdown_on(term.token().clone().cancelled_owned())
            .run(reconcile, error_policy, context)
            .for_each(|_| async {});
        term.spawn(controller);
        async {}
    });
    let mut transitions = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;

    // Following: the cache takes a new object in, nothing reconciles it.
    create_object(&objects, "obj-4").await;
    wait_for("the cache sees obj-4", || async {
        (cache.store().len() == 4).then_some(())
    })
    .await;
    assert!(
        log.lock().unwrap().is_empty(),
        "nothing reconciles while following"
    );

    // Term 1 reconciles all four from memory.
    assign(&admin, "warm", "a").await;
    wait_for("term 1 reconciles every object", || async {
        let mut names: Vec<_> = reconciled_in(&log, 1).into_iter().map(|r| r.name).collect();
        names.sort();
        names.dedup();
        (names == ["obj-1", "obj-2", "obj-3", "obj-4"]).then_some(())
    })
    .await;
    assert_eq!(
        lists.load(Ordering::SeqCst),
        warm_lists,
        "a term on a warm cache makes no LIST"
    );

    // The term ends; the Lease is released only after the controller drained.
    preempt(&admin, "warm", "b").await;
    next_transition(&mut transitions, "a releases", |t| {
        matches!(t, Transition::Released { term: 1, .. })
    })
    .await;
    let after_term_1 = log.lock().unwrap().len();

    // Following again: a change reaches the cache but no reconciler.
    objects
        .patch(
            "obj-1",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({ "metadata": { "annotations": { NOTE: "changed" } } }),
            ),
        )
        .await
        .expect("annotate obj-1");
    wait_for("the cache sees the change", || async {
        let key = kube::runtime::reflector::ObjectRef::new("obj-1").within(NS);
        let cached = cache.store().get(&key)?;
        (cached.annotations().get(NOTE).map(String::as_str) == Some("changed")).then_some(())
    })
    .await;
    assert_eq!(
        log.lock().unwrap().len(),
        after_term_1,
        "nothing reconciles between terms"
    );

    // Term 2 picks up the change made while following, still without a LIST.
    assign(&admin, "warm", "a").await;
    wait_for("term 2 reconciles the changed obj-1", || async {
        reconciled_in(&log, 2)
            .iter()
            .any(|r| r.name == "obj-1" && r.note.as_deref() == Some("changed"))
            .then_some(())
    })
    .await;
    assert_eq!(
        lists.load(Ordering::SeqCst),
        warm_lists,
        "term 2 made no LIST"
    );

    a.stop().await.unwrap();
    let log = log.lock().unwrap();
    assert!(
        log.iter().all(|r| r.in_term),
        "every reconcile began inside a running term: {log:?}"
    );
}

/// Issue 36, point 3: a cache that never becomes ready (a resource the server does not serve:
/// the emulator serves no ConfigMaps; or one RBAC forbids) must not hold a hand-off. The term's
/// controller waits for the store; when the term ends, that wait ends too, and the term's tasks
/// stop within the drain timeout: none is leaked, and the Lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_never_syncs_does_not_hold_a_hand_off() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let emulator = emulator().await;
    let admin = client(&emulator);
    let cache: WarmCache<ConfigMap> = WarmCache::new(
        Api::namespaced(admin.clone(), NS),
        watcher::Config::default(),
    );
    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("unsynced", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_drain_timeout(std::time::Duration::from_secs(3));
    let handle = elector.handle();
    let mut events = handle.transitions();
    let term_cache = cache.clone();
    let a = Running::start(elector, move |term: Term| {
        let controller = Controller::for_stream(term_cache.triggers(&term), term_cache.store())
            .graceful_shutdown_on(term.token().clone().cancelled_owned())
            .run(
                |_: Arc<ConfigMap>, _: Arc<()>| async {
                    Ok::<_, std::io::Error>(Action::await_change())
                },
                |_: Arc<ConfigMap>, _: &std::io::Error, _: Arc<()>| Action::await_change(),
                Arc::new(()),
            )
            .for_each(|_| async {});
        term.spawn(term_cache.run_when_ready(&term, controller));
        async {}
    });
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&admin, "unsynced", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, conclave_candidate::LeaderState::Leading { .. })
    })
    .await;
    assert!(!cache.is_ready(), "the emulator serves no ConfigMaps");
    preempt(&admin, "unsynced", "b").await;
    let stopped = next_transition(&mut events, "a stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(
            stopped,
            Transition::StoppedLeading {
                leaked_tasks: 0,
                ..
            }
        ),
        "{stopped:?}"
    );
    next_transition(&mut events, "a releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    a.stop().await.unwrap();
}

/// Namespaced resources no server here serves (no CRD is installed for them, and the emulator
/// serves no custom resources): a cache of one never completes its first LIST. Gadgets are
/// watched by one test only, so that its log lines are its own.
macro_rules! unserved {
    ($type:ident, $kind:literal, $plural:literal) => {
        #[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
        struct $type {
            metadata: ObjectMeta,
        }

        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "example.com".into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

unserved!(Widget, "Widget", "widgets");
unserved!(Gadget, "Gadget", "gadgets");

/// Waits for the first [`Notice::CacheNotSynced`] on `notices`.
async fn cache_not_synced(
    notices: &mut tokio::sync::broadcast::Receiver<Notice>,
    patience: std::time::Duration,
) -> Notice {
    tokio::time::timeout(patience, async {
        loop {
            let notice = notices.recv().await.expect("notices");
            if matches!(notice, Notice::CacheNotSynced { .. }) {
                return notice;
            }
        }
    })
    .await
    .expect("the unsynced cache is reported")
}

/// Issue 36, point 3: a cache that cannot sync is a state the elector reports, once: a notice
/// (with the server's answer), a metric, one `warn` line (the watch's retries are `debug`).
/// Reporting only: the candidate stays in the election and leads when elected.
#[tokio::test]
async fn a_cache_that_cannot_sync_is_reported_once() {
    let logs = captured_logs();
    let emulator = emulator().await;
    let admin = client(&emulator);
    let cache: WarmCache<Gadget> = WarmCache::new(
        Api::namespaced(admin.clone(), NS),
        watcher::Config::default(),
    );
    assert_eq!(cache.resource(), "gadgets.example.com");
    let elector = Elector::coordinated(
        client(&emulator),
        lease_config("reported", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .with_warm_cache(&cache)
    .with_cache_sync_timeout(std::time::Duration::from_secs(2));
    let mut notices = elector.handle().notices();
    let a = Running::start(elector, idle_leader());
    let notice = cache_not_synced(&mut notices, WAIT).await;
    let Notice::CacheNotSynced {
        cache: resource,
        error: Some(error),
        stands_aside: false,
        ..
    } = &notice
    else {
        panic!("{notice:?}");
    };
    assert_eq!(resource, "gadgets.example.com");
    // The emulator's 404 says what it serves (a real kube-apiserver: "the server could not
    // find the requested resource").
    assert!(
        error.contains("the server could not find the requested resource")
            && error.contains("the Conclave emulator serves only"),
        "{error}"
    );
    assert!(
        a.handle
            .metrics()
            .is_cache_unsynced("default/reported", "a", "gadgets.example.com")
    );
    // Reporting only: ready, elected, leading.
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    assign(&admin, "reported", "a").await;
    wait_state(&a.handle, "a leads", |s| {
        matches!(s, conclave_candidate::LeaderState::Leading { .. })
    })
    .await;
    // The watch keeps failing and retrying (with backoff): logged once at `warn`, then `debug`.
    let gadgets = |level: &str, prefix: &str| {
        logs.lines(level, prefix)
            .into_iter()
            .filter(|l| {
                l["fields"]["kind"] == "Gadget" || l["fields"]["cache"] == "gadgets.example.com"
            })
            .count()
    };
    wait_for("the watch retried", || async {
        (gadgets("DEBUG", "warm cache: watch failed again") >= 2).then_some(())
    })
    .await;
    a.stop().await.unwrap();
    assert_eq!(
        gadgets("WARN", "warm cache: watch failed"),
        1,
        "one warning for the failing watch"
    );
    assert_eq!(
        gadgets(
            "WARN",
            "the warm cache of gadgets.example.com has not completed"
        ),
        1,
        "one report of the unsynced cache"
    );
    assert!(!cache.is_ready());
}

/// Issue 36, point 3, by the author's choice: a required cache that cannot sync keeps the
/// candidate out of the election. Coordinated: no LeaseCandidate is registered (so no
/// election controller can elect it) and it is not ready; classic: it never takes the free
/// Lease. A required cache that syncs (Leases) does not hold anyone back.
async fn a_required_cache_that_cannot_sync_keeps_the_candidate_out(server: &Server) {
    let ns = server.namespace();
    let patience = server.patience();
    let admin = server.client().await;
    let widgets: WarmCache<Widget> = WarmCache::new(
        Api::namespaced(admin.clone(), ns),
        watcher::Config::default(),
    );
    let leases: WarmCache<Lease> = WarmCache::new(
        Api::namespaced(admin.clone(), ns),
        watcher::Config::default(),
    );
    let timeout = std::time::Duration::from_secs(2);

    let coordinated = Elector::coordinated(
        server.client().await,
        server.lease_config("required", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap()
    .require_synced_cache(&widgets)
    .with_cache_sync_timeout(timeout);
    let mut a_notices = coordinated.handle().notices();
    let a = Running::start(coordinated, idle_leader());
    let c = Elector::classic(
        server.client().await,
        server.lease_config("required-classic", "c"),
    )
    .unwrap()
    .require_synced_cache(&widgets)
    .with_cache_sync_timeout(timeout);
    let mut c_notices = c.handle().notices();
    let c = Running::start(c, idle_leader());
    let d = Elector::classic(
        server.client().await,
        server.lease_config("required-synced", "d"),
    )
    .unwrap()
    .require_synced_cache(&leases)
    .with_cache_sync_timeout(timeout);
    let d = Running::start(d, idle_leader());

    for (who, notices) in [("a", &mut a_notices), ("c", &mut c_notices)] {
        let notice = cache_not_synced(notices, patience).await;
        assert!(
            matches!(
                &notice,
                Notice::CacheNotSynced { cache, error: Some(_), stands_aside: true, .. }
                    if cache == "widgets.example.com"
            ),
            "{who} on {}: {notice:?}",
            server.kind()
        );
    }
    // The positive control leads: a required cache that synced holds nobody back.
    wait_state(&d.handle, "d leads", |s| {
        matches!(s, conclave_candidate::LeaderState::Leading { .. })
    })
    .await;
    assert!(leases.is_ready());
    // Well past the report: a is no candidate and not ready; c has not taken its free Lease.
    tokio::time::sleep(timeout).await;
    assert!(!a.handle.is_ready() && !c.handle.is_ready());
    assert!(
        !a.handle.candidate().unwrap().is_registered(),
        "no LeaseCandidate while the required cache is unsynced"
    );
    let candidates: Api<k8s_openapi::api::coordination::v1beta1::LeaseCandidate> =
        Api::namespaced(admin.clone(), ns);
    assert!(candidates.get_opt("a").await.unwrap().is_none());
    assert!(holder(&admin, ns, "required-classic").await.is_none());
    assert!(!a.handle.is_leading() && !c.handle.is_leading());
    assert!(a.handle.metrics().is_cache_unsynced(
        &format!("{ns}/required"),
        "a",
        "widgets.example.com"
    ));
    for replica in [a, c, d] {
        replica.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_cache_that_cannot_sync_keeps_the_candidate_out_on_the_emulator() {
    let server = Server::emulator("required-cache").await;
    a_required_cache_that_cannot_sync_keeps_the_candidate_out(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_cache_that_cannot_sync_keeps_the_candidate_out_on_kube_apiserver() {
    let Some(server) = Server::real("required-cache").await else {
        return;
    };
    a_required_cache_that_cannot_sync_keeps_the_candidate_out(&server).await;
}
