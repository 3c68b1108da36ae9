//! Watches through kube-rs: resume from a resourceVersion, selectors entering and leaving,
//! initial events with the end bookmark, periodic bookmarks, timeoutSeconds, 410 Gone in the
//! stream, kube-runtime watchers recovering from dropped watches and expired history, and watch
//! events held back and released.

mod common;

use common::WAIT;
use conclave_emulator::{EmulatorConfig, Failure, Verb};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            ..Default::default()
        }),
    }
}

async fn next<S: Stream + Unpin>(s: &mut S) -> S::Item {
    tokio::time::timeout(WAIT, s.next())
        .await
        .expect("event within the wait bound")
        .expect("stream still open")
}

/// The next event that is not a bookmark.
async fn next_change<S: Stream<Item = kube::Result<WatchEvent<Lease>>> + Unpin>(
    s: &mut S,
) -> WatchEvent<Lease> {
    loop {
        match next(s).await.expect("watch event decodes") {
            WatchEvent::Bookmark(_) => {}
            other => return other,
        }
    }
}

fn holder(l: &Lease) -> &str {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

async fn set_holder(api: &Api<Lease>, name: &str, h: &str) -> Lease {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"holderIdentity": h}})),
    )
    .await
    .expect("patch")
}

#[tokio::test]
async fn watch_from_resource_version_replays_then_follows() {
    let (_emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &lease("w", "a"))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    // Changes made before the watch starts are replayed from history.
    set_holder(&api, "w", "b").await;
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_change(&mut stream).await {
        WatchEvent::Modified(l) => assert_eq!(holder(&l), "b"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // A no-op write sends nothing; the next real change comes through.
    set_holder(&api, "w", "b").await;
    set_holder(&api, "w", "c").await;
    match next_change(&mut stream).await {
        WatchEvent::Modified(l) => assert_eq!(holder(&l), "c"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    api.delete("w", &DeleteParams::default()).await.unwrap();
    match next_change(&mut stream).await {
        WatchEvent::Deleted(l) => assert_eq!(l.metadata.name.as_deref(), Some("w")),
        other => panic!("expected DELETED, got {other:?}"),
    }
}

#[tokio::test]
async fn label_selector_watch_sees_objects_enter_and_leave() {
    let (_emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &lease("s", "a"))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=x"), "0")
        .await
        .unwrap()
        .boxed();
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_change(&mut stream).await, WatchEvent::Added(ref l) if l.metadata.name.as_deref() == Some("s"))
    );
    set_holder(&api, "s", "b").await;
    assert!(
        matches!(next_change(&mut stream).await, WatchEvent::Modified(ref l) if holder(l) == "b")
    );
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_change(&mut stream).await, WatchEvent::Deleted(ref l) if l.metadata.name.as_deref() == Some("s"))
    );
}

#[tokio::test]
async fn initial_events_end_with_the_bookmark_then_periodic_bookmarks() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &lease("i1", "a"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &lease("i2", "a"))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "0")
        .await
        .unwrap()
        .boxed();
    let mut initial = Vec::new();
    let end = loop {
        match next(&mut stream).await.unwrap() {
            WatchEvent::Added(l) => initial.push(l.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => break b,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(initial, vec!["i1", "i2"]);
    assert_eq!(
        end.metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        end.metadata.resource_version,
        emulator.resource_version().to_string()
    );
    // With nothing happening, periodic bookmarks keep arriving (every 300ms in tests).
    match next(&mut stream).await.unwrap() {
        WatchEvent::Bookmark(b) => {
            assert!(b.metadata.annotations.is_empty());
            assert_eq!(
                b.metadata.resource_version,
                emulator.resource_version().to_string()
            );
        }
        other => panic!("expected a periodic bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let (_emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let mut stream = api
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the server ends the watch");
    assert!(ended.is_none(), "no events expected, got {ended:?}");
}

#[tokio::test]
async fn watching_from_expired_history_gets_410_in_the_stream() {
    let (emulator, client) = common::start_with(EmulatorConfig {
        history_capacity: 3,
        ..EmulatorConfig::default()
    })
    .await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &lease("e", "a"))
        .await
        .unwrap();
    let first = created.metadata.resource_version.unwrap();
    for h in ["b", "c", "d", "e", "f"] {
        set_holder(&api, "e", h).await;
    }
    let mut stream = api
        .watch(&WatchParams::default(), &first)
        .await
        .unwrap()
        .boxed();
    match next(&mut stream).await.unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status
                    .message
                    .starts_with(&format!("too old resource version: {first} (")),
                "{}",
                status.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // A recent version is still in the kept history...
    let recent = (emulator.resource_version() - 1).to_string();
    let mut ok = api
        .watch(&WatchParams::default(), &recent)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next_change(&mut ok).await, WatchEvent::Modified(ref l) if holder(l) == "f"));
    // ...until the history is expired on purpose.
    emulator.faults().expire_history();
    let mut gone = api
        .watch(&WatchParams::default(), &recent)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next(&mut gone).await.unwrap(), WatchEvent::Error(ref s) if s.code == 410));
}

/// Waits until a kube-runtime watcher reports the lease with holder `want`; returns the
/// errors the watcher reported on the way.
async fn until_holder<S>(stream: &mut S, want: &str) -> Vec<String>
where
    S: Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Unpin,
{
    let mut errors = Vec::new();
    tokio::time::timeout(WAIT, async move {
        loop {
            match stream.next().await {
                Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)))
                    if holder(&l) == want =>
                {
                    return errors;
                }
                Some(Err(e)) => errors.push(format!("{e:?}")),
                Some(Ok(_)) => {}
                None => panic!("watcher ended"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("watcher never saw holder {want}"))
}

async fn watcher_recovers(config: watcher::Config) {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &lease("r", "a"))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), config).default_backoff().boxed();
    until_holder(&mut stream, "a").await;
    set_holder(&api, "r", "b").await;
    until_holder(&mut stream, "b").await;

    // Every watch is cut: the watcher re-watches from its last version and sees the next change.
    emulator.faults().drop_watches();
    set_holder(&api, "r", "c").await;
    until_holder(&mut stream, "c").await;

    // Cut again while re-watches fail, change the lease and forget history: when re-watching
    // is allowed again it resumes from a version older than the history, gets 410 in the
    // stream, and the watcher re-lists.
    let faults = emulator.faults();
    faults.fail_next(Verb::Watch, "leases", 1_000_000, Failure::InternalError);
    faults.drop_watches();
    set_holder(&api, "r", "d").await;
    faults.expire_history();
    faults.clear();
    let errors = until_holder(&mut stream, "d").await;
    assert!(
        errors.iter().any(|e| e.contains("410")),
        "the watcher should have seen 410 Gone: {errors:?}"
    );
    set_holder(&api, "r", "e").await;
    until_holder(&mut stream, "e").await;
}

#[tokio::test]
async fn kube_watcher_recovers_from_dropped_watches_and_410() {
    watcher_recovers(watcher::Config::default()).await;
}

#[tokio::test]
async fn kube_streaming_list_watcher_recovers_from_dropped_watches_and_410() {
    watcher_recovers(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn drop_watches_ends_open_streams() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    // Make sure the watch is established before cutting it.
    api.create(&PostParams::default(), &lease("d", "a"))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut stream).await.unwrap(),
        WatchEvent::Added(_)
    ));
    emulator.faults().drop_watches();
    let ended = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("stream ends");
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    // New watches work again.
    let mut again = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next(&mut again).await.unwrap(),
        WatchEvent::Added(_)
    ));
}

/// A test that holds a client's watch events first waits for the client's watch: it is counted
/// once it follows live events, in its own namespace only, and no longer once it ends.
#[tokio::test]
async fn a_watch_is_counted_as_followed_while_it_follows_live_events() {
    let (emulator, client) = common::start().await;
    let faults = emulator.faults();
    let api: Api<Lease> = Api::namespaced(client, "default");
    let short = std::time::Duration::from_millis(300);
    let followed = || faults.watch_followed("leases", Some("default"));
    assert!(
        tokio::time::timeout(short, followed()).await.is_err(),
        "followed before any watch"
    );
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    tokio::time::timeout(WAIT, followed())
        .await
        .expect("the open watch is counted");
    let elsewhere = faults.watch_followed("leases", Some("other"));
    assert!(
        tokio::time::timeout(short, elsewhere).await.is_err(),
        "a watch of default counted for another namespace"
    );
    let everywhere = faults.watch_followed("leases", None);
    assert!(
        tokio::time::timeout(short, everywhere).await.is_err(),
        "a namespaced watch counted as one across all namespaces"
    );

    faults.drop_watches();
    let ended = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("stream ends");
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    // The server's side of the watch ends with the stream; it is no longer counted.
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::timeout(short, followed()).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "an ended watch still counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn held_watch_events_arrive_in_order_when_released() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &lease("d", "a"))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut stream).await.unwrap(),
        WatchEvent::Added(_)
    ));

    emulator.faults().hold_watch_events("leases");
    api.create(&PostParams::default(), &lease("e", "b"))
        .await
        .unwrap();
    api.delete("d", &DeleteParams::default()).await.unwrap();
    // Reads see the changes; the watch does not (yet).
    assert!(api.get_opt("d").await.unwrap().is_none());
    let early = tokio::time::timeout(std::time::Duration::from_millis(500), stream.next()).await;
    assert!(early.is_err(), "an event arrived while held: {early:?}");

    emulator.faults().release_watch_events("leases");
    match next_change(&mut stream).await {
        WatchEvent::Added(l) => assert_eq!(l.metadata.name.as_deref(), Some("e")),
        other => panic!("expected e's creation first, got {other:?}"),
    }
    match next_change(&mut stream).await {
        WatchEvent::Deleted(l) => assert_eq!(l.metadata.name.as_deref(), Some("d")),
        other => panic!("expected d's deletion next, got {other:?}"),
    }
}

#[tokio::test]
async fn timeout_seconds_zero_means_the_default_timeout() {
    let (_emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    // kube-apiserver treats timeoutSeconds=0 as unset: the watch stays open and sees changes.
    let mut stream = api
        .watch(&WatchParams::default().timeout(0).disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &lease("zero", "a"))
        .await
        .unwrap();
    match next_change(&mut stream).await {
        WatchEvent::Added(l) => assert_eq!(l.metadata.name.as_deref(), Some("zero")),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_future_version_sends_only_later_changes() {
    let (_emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let current: u64 = api
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    // As kube-apiserver: the watch waits for the version asked for, and nothing at or below it
    // is delivered.
    let mut stream = api
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &(current + 3).to_string(),
        )
        .await
        .unwrap()
        .boxed();
    for i in 1..=5 {
        api.create(&PostParams::default(), &lease(&format!("f{i}"), "a"))
            .await
            .unwrap();
    }
    for expected in ["f4", "f5"] {
        match next_change(&mut stream).await {
            WatchEvent::Added(l) => assert_eq!(l.metadata.name.as_deref(), Some(expected)),
            other => panic!("expected ADDED {expected}, got {other:?}"),
        }
    }
}
