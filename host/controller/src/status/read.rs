//! Reading the cluster for `conclave status`: one list of the Leases and LeaseCandidates of some
//! namespaces, or watches that keep them current (`--watch`). Only reads.

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
#[error("listing {what} in {scope}: {source}")]
pub struct ListError {
    /// What was listed (`Leases`, `LeaseCandidates`).
    pub what: &'static str,
    /// The namespace, or `all namespaces`.
    pub scope: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

fn scopes(namespaces: &[String]) -> Vec<Option<&str>> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Lists the Leases and LeaseCandidates of the given namespaces (all when empty).
pub async fn list(
    client: &Client,
    namespaces: &[String],
) -> Result<(Vec<Lease>, Vec<LeaseCandidate>), ListError> {
    let mut leases = Vec::new();
    let mut candidates = Vec::new();
    for namespace in scopes(namespaces) {
        let error = |what| {
            let scope = namespace.unwrap_or("all namespaces").to_owned();
            move |source| ListError {
                what,
                scope,
                source,
            }
        };
        leases.extend(
            api::<Lease>(client, namespace)
                .list(&Default::default())
                .await
                .map_err(error("Leases"))?
                .items,
        );
        candidates.extend(
            api::<LeaseCandidate>(client, namespace)
                .list(&Default::default())
                .await
                .map_err(error(
                    "LeaseCandidates (is coordination.k8s.io/v1beta1 enabled?)",
                ))?
                .items,
        );
    }
    Ok((leases, candidates))
}

/// Leases and LeaseCandidates of some namespaces kept current by watches, for `status --watch`.
pub struct Watch {
    leases: Vec<Store<Lease>>,
    candidates: Vec<Store<LeaseCandidate>>,
    changes: SelectAll<BoxStream<'static, Result<(), String>>>,
}

impl Watch {
    /// Starts watching the given namespaces (all when empty). The watches run as
    /// [`changed`](Self::changed) is polled.
    #[must_use]
    pub fn start(client: &Client, namespaces: &[String]) -> Self {
        let mut watch = Self {
            leases: Vec::new(),
            candidates: Vec::new(),
            changes: SelectAll::new(),
        };
        for namespace in scopes(namespaces) {
            let (reader, writer) = reflector::store();
            watch.leases.push(reader);
            watch.changes.push(
                watcher(api::<Lease>(client, namespace), watcher::Config::default())
                    .default_backoff()
                    .reflect(writer)
                    .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
                    .boxed(),
            );
            let (reader, writer) = reflector::store();
            watch.candidates.push(reader);
            watch.changes.push(
                watcher(
                    api::<LeaseCandidate>(client, namespace),
                    watcher::Config::default(),
                )
                .default_backoff()
                .reflect(writer)
                .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
                .boxed(),
            );
        }
        watch
    }

    /// The next change (`Err` for a watch error, retried by the watch); `None` once every watch
    /// ended.
    pub async fn changed(&mut self) -> Option<Result<(), String>> {
        self.changes.next().await
    }

    /// Whether every store holds its initial list.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.leases
            .iter()
            .all(|s| s.wait_until_ready().now_or_never().is_some())
            && self
                .candidates
                .iter()
                .all(|s| s.wait_until_ready().now_or_never().is_some())
    }

    /// Every Lease and LeaseCandidate watched, as they are now.
    #[must_use]
    pub fn objects(&self) -> (Vec<Lease>, Vec<LeaseCandidate>) {
        let leases = self
            .leases
            .iter()
            .flat_map(|s| s.state().into_iter().map(|l| (*l).clone()))
            .collect();
        let candidates = self
            .candidates
            .iter()
            .flat_map(|s| s.state().into_iter().map(|c| (*c).clone()))
            .collect();
        (leases, candidates)
    }
}
