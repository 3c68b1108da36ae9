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
    /// `sendInitialEvents=true`.
    pub send_initial: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// How long the watch may stay open.
    pub timeout: Duration,
    /// Table rendering, when the client asked for `as=Table`.
    pub table: Option<IncludeObject>,
}

/// What the watch loop listens to besides the store.
pub(crate) struct WatchControl {
    /// Cancelled by `Faults::drop_watches`.
    pub dropped: CancellationToken,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Interval between periodic bookmarks.
    pub bookmark_interval: Duration,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = format!("{{\"type\":\"{kind}\",\"object\":");
    s.push_str(&object.to_string());
    s.push_str("}\n");
    Bytes::from(s)
}

fn bookmark(res: usize, rv: u64, initial_end: bool) -> Bytes {
    let info = &RESOURCES[res];
    let mut meta = json!({ "resourceVersion": rv.to_string(), "creationTimestamp": null });
    if initial_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    line(
        "BOOKMARK",
        &json!({ "kind": info.kind, "apiVersion": info.api_version(), "metadata": meta }),
    )
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
    let sub = match store.subscribe(
        req.res,
        req.namespace.as_deref(),
        &req.filter,
        req.start,
        req.send_initial,
    ) {
        Ok(s) => s,
        Err(e) => {
            sender.send(line("ERROR", &e.to_status())).await;
            return;
        }
    };
    let mut live = sub.live;
    let mut last_rv = sub.rv;
    for obj in &sub.initial {
        if !sender.object(EventType::Added, obj, None).await {
            return;
        }
    }
    if req.send_initial && !sender.send(bookmark(req.res, sub.rv, true)).await {
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
    loop {
        tokio::select! {
            () = control.dropped.cancelled() => return,
            () = control.shutdown.cancelled() => return,
            () = &mut deadline => return,
            () = sender.tx.closed() => return,
            received = live.recv() => match received {
                Ok(ev) => {
                    last_rv = ev.rv;
                    if !sender.event(&ev).await {
                        return;
                    }
                }
                // A watcher too slow to keep up is closed; it resumes from its last version.
                Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
            },
            _ = ticker.tick(), if req.bookmarks => {
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
