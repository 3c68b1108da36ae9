//! Watch streams: newline-delimited JSON events, with initial events, resumption from a
//! resourceVersion, bookmarks, timeouts and in-stream 410 errors, as kube-apiserver sends them.

use crate::resources::RESOURCES;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::{Event, EventType, Store, WatchStart};
use crate::table::{IncludeObject, object_table};
use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// Everything a watch request asked for.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    /// Resource id.
    pub res: usize,
    /// Namespace, or None for all namespaces.
    pub namespace: Option<String>,
    /// Selectors.
    pub filter: Filter,
    /// Where to start.
    pub start: WatchStart,
    /// `sendInitialEvents`, when given (kube-apiserver reads "false" and "0" as false and any
    /// other value as true).
    pub initial_events: Option<bool>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// How long the watch may stay open.
    pub timeout: Duration,
    /// Table rendering, when the client asked for `as=Table`.
    pub table: Option<IncludeObject>,
}

/// How long a watch with `sendInitialEvents=true` waits for a resourceVersion the store has not
/// reached before it answers 504, as kube-apiserver's watch cache does (its `blockTimeout`).
pub(crate) const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// What the watch loop listens to besides the store.
pub(crate) struct WatchControl {
    /// Cancelled by `Faults::drop_watches`.
    pub dropped: CancellationToken,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Interval between periodic bookmarks.
    pub bookmark_interval: Duration,
    /// The resources whose live events are held back (`Faults::hold_watch_events`).
    pub held: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    /// Where the watch is counted once it follows live events (`Faults::watch_followed`).
    pub faults: crate::faults::Faults,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = format!("{{\"type\":\"{kind}\",\"object\":");
    s.push_str(&object.to_string());
    s.push_str("}\n");
    Bytes::from(s)
}

/// A BOOKMARK event. kube-apiserver sends an otherwise empty object of the kind, so it carries
/// the fields Go serialises for a zero value; they are copied here so clients see the same.
fn bookmark(res: usize, rv: u64, initial_end: bool) -> Bytes {
    let info = &RESOURCES[res];
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let mut object = match (info.group, info.kind) {
        ("", "Namespace") => json!({ "spec": {}, "status": {} }),
        ("", "Event") => json!({
            "involvedObject": {}, "source": {}, "firstTimestamp": null, "lastTimestamp": null,
            "eventTime": null, "reportingComponent": "", "reportingInstance": "",
        }),
        ("events.k8s.io", _) => json!({
            "eventTime": null, "regarding": {}, "deprecatedSource": {},
            "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null,
        }),
        (_, "LeaseCandidate") => json!({ "spec": { "leaseName": "", "binaryVersion": "" } }),
        _ => json!({ "spec": {} }),
    };
    object["kind"] = json!(info.kind);
    object["apiVersion"] = json!(info.api_version());
    object["metadata"] = meta;
    line("BOOKMARK", &object)
}

struct Sender {
    tx: mpsc::Sender<Bytes>,
    req: WatchRequest,
}

impl Sender {
    async fn send(&self, bytes: Bytes) -> bool {
        self.tx.send(bytes).await.is_ok()
    }

    async fn object(&self, kind: EventType, obj: &Value, pre_serialized: Option<&str>) -> bool {
        match (self.req.table, pre_serialized) {
            (Some(include), _) => {
                self.send(line(
                    kind.as_str(),
                    &object_table(self.req.res, obj, include),
                ))
                .await
            }
            (None, Some(json)) => {
                let mut s = String::with_capacity(json.len() + 32);
                s.push_str("{\"type\":\"");
                s.push_str(kind.as_str());
                s.push_str("\",\"object\":");
                s.push_str(json);
                s.push_str("}\n");
                self.send(Bytes::from(s)).await
            }
            (None, None) => self.send(line(kind.as_str(), obj)).await,
        }
    }

    /// Sends what a watcher with these selectors should see of one change.
    async fn event(&self, ev: &Event) -> bool {
        if ev.resource != self.req.res
            || self
                .req
                .namespace
                .as_deref()
                .is_some_and(|n| n != ev.namespace)
        {
            return true;
        }
        let filter = &self.req.filter;
        if filter.is_empty() {
            return self
                .object(ev.kind, &ev.object, Some(&ev.object_json))
                .await;
        }
        let now = filter.matches(&ev.object);
        let before = ev.prev.as_ref().is_some_and(|p| filter.matches(p));
        match (ev.kind, before, now) {
            (EventType::Added, _, true) => {
                self.object(EventType::Added, &ev.object, Some(&ev.object_json))
                    .await
            }
            (EventType::Modified, true, true) => {
                self.object(EventType::Modified, &ev.object, Some(&ev.object_json))
                    .await
            }
            (EventType::Modified, false, true) => {
                self.object(EventType::Added, &ev.object, Some(&ev.object_json))
                    .await
            }
            (EventType::Modified, true, false) => {
                let mut gone = ev.prev.as_deref().cloned().unwrap_or(Value::Null);
                gone["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                self.object(EventType::Deleted, &gone, None).await
            }
            (EventType::Deleted, b, n) if b || n => {
                self.object(EventType::Deleted, &ev.object, Some(&ev.object_json))
                    .await
            }
            _ => true,
        }
    }
}

async fn run(store: Arc<Store>, sender: Sender, control: WatchControl) {
    let req = sender.req.clone();
    // As kube-apiserver: `sendInitialEvents=true` lists the state first (after waiting for a
    // version not reached yet), an explicit false never does, and a legacy watch does only
    // from "now". The initial-events-end bookmark follows the list when bookmarks are allowed.
    let with_initial = match (req.initial_events, req.start) {
        (Some(initial), _) => initial,
        (None, WatchStart::Now) => true,
        (None, WatchStart::After(_)) => false,
    };
    if with_initial && let WatchStart::After(wanted) = req.start {
        let reached = store.wait_for(wanted, FRESHNESS_WAIT).await;
        if reached < wanted {
            let error = ApiError::too_large_resource_version(wanted, reached);
            sender.send(line("ERROR", &error.to_status())).await;
            return;
        }
    }
    let sub = match store.subscribe(
        req.res,
        req.namespace.as_deref(),
        &req.filter,
        req.start,
        with_initial,
    ) {
        Ok(s) => s,
        Err(e) => {
            sender.send(line("ERROR", &e.to_status())).await;
            return;
        }
    };
    let mut live = sub.live;
    // A watch from a version the store has not reached yet waits for it: nothing at or below
    // the version asked for is sent, and bookmarks never go back before it.
    let skip_through = match req.start {
        WatchStart::After(from) if !with_initial => from,
        _ => 0,
    };
    let mut last_rv = sub.rv.max(skip_through);
    for obj in &sub.initial {
        if !sender.object(EventType::Added, obj, None).await {
            return;
        }
    }
    if with_initial && req.bookmarks && !sender.send(bookmark(req.res, sub.rv, true)).await {
        return;
    }
    for ev in &sub.replay {
        if !sender.event(ev).await {
            return;
        }
    }
    let deadline = tokio::time::sleep(req.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + control.bookmark_interval,
        control.bookmark_interval,
    );
    let plural = RESOURCES[req.res].plural;
    let _following = control.faults.follow(plural, req.namespace.as_deref());
    let mut held = control.held;
    loop {
        // Held events wait in `live`, in order, until released (a long hold ends in `Lagged`,
        // as a watcher too slow to keep up would).
        let holding = held.borrow_and_update().contains(plural);
        tokio::select! {
            () = control.dropped.cancelled() => return,
            () = control.shutdown.cancelled() => return,
            () = &mut deadline => return,
            () = sender.tx.closed() => return,
            changed = held.changed() => if changed.is_err() {
                return;
            },
            received = live.recv(), if !holding => match received {
                Ok(ev) if ev.rv <= skip_through => {}
                Ok(ev) => {
                    last_rv = ev.rv;
                    if !sender.event(&ev).await {
                        return;
                    }
                }
                // A watcher too slow to keep up is closed; it resumes from its last version.
                Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
            },
            _ = ticker.tick(), if req.bookmarks && !holding => {
                if !sender.send(bookmark(req.res, last_rv, false)).await {
                    return;
                }
            }
        }
    }
}

/// Starts a watch and returns its response body.
pub(crate) fn watch_body(store: Arc<Store>, req: WatchRequest, control: WatchControl) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(run(store, Sender { tx, req }, control));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    Body::from_stream(stream)
}

/// The watch start a resourceVersion query parameter asks for.
pub(crate) fn parse_start(rv: Option<&str>) -> Result<WatchStart, ApiError> {
    match rv {
        None | Some("") | Some("0") => Ok(WatchStart::Now),
        Some(s) => s
            .parse::<u64>()
            .map(WatchStart::After)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}"))),
    }
}
