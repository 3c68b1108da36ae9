//! A component that runs a `kube_runtime::Controller` only while it leads, on a cache it keeps
//! warm while it follows.
//!
//! The controller stamps every Lease labelled `example.com/stamp=true` in the namespace with an
//! annotation naming the replica and term that reconciled it. Run two or more replicas: one
//! stamps, the others keep their caches current and take over without listing anything.
//!
//! ```text
//! conclave emulator &                      # or any cluster; KUBECONFIG as usual
//! conclave run --mode all &                # an election controller, for coordinated mode
//! POD_NAME=replica-a cargo run -p conclave-candidate --example controller
//! POD_NAME=replica-b cargo run -p conclave-candidate --example controller
//! ELECTION=classic ...                     # without an election controller
//! ```
//!
//! SIGTERM or Ctrl-C hands over: the controller finishes its reconciles in flight, the Lease is
//! released, and another replica's controller starts on its warm cache.

use conclave_candidate::{CandidateConfig, Elector, LeaseConfig, Term, WarmCache};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The label that selects the objects this controller manages.
const SELECTOR: &str = "example.com/stamp=true";
/// The annotation it writes.
const STAMP: &str = "example.com/stamped-by";

/// What every reconcile of one term needs.
struct Context {
    api: Api<Lease>,
    stamp: String,
}

#[derive(Debug, thiserror::Error)]
#[error("could not stamp Lease {name}: {source}")]
struct StampError {
    name: String,
    #[source]
    source: kube::Error,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let client = conclave_candidate::client(kube::Config::infer().await?)?;
    let lease = LeaseConfig::for_client(&client, "example-stamper");
    let identity = lease.identity.clone();
    let objects: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);

    // Started now, while following: the first LIST happens here, not when a term starts.
    let cache = WarmCache::new(objects.clone(), watcher::Config::default().labels(SELECTOR));

    let elector = if std::env::var("ELECTION").as_deref() == Ok("classic") {
        Elector::classic(client, lease)?
    } else {
        let candidate = CandidateConfig::new("1.33.0", "1.33.0", "OldestEmulationVersion");
        Elector::coordinated(client, lease, candidate)?
    };
    // No part in the election until the cache's first LIST is in (reported once, with the
    // server's answer, if that takes over 30 s: a resource not served, a watch RBAC forbids):
    // a replica that cannot reconcile leaves leadership to one that can.
    let elector = elector.require_synced_cache(&cache);
    let elector = elector.on_transition(|transition| {
        let line = serde_json::to_string(transition).unwrap_or_default();
        tracing::info!(transition = %line, "leadership");
    });

    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    // A pod is stopped with SIGTERM: without this handler it would die without handing over.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        signal.cancel();
    });

    elector
        .run(
            move |term: Term| {
                let context = Arc::new(Context {
                    api: objects.clone(),
                    stamp: format!("{identity} term {}", term.number()),
                });
                let controller = Controller::for_stream(cache.triggers(&term), cache.store())
                    .graceful_shutdown_on(term.token().clone().cancelled_owned())
                    .run(reconcile, error_policy, context)
                    .for_each(|result| async move {
                        if let Err(error) = result {
                            tracing::warn!(%error, "reconcile failed");
                        }
                    });
                // The Lease is released only after this task returned: no stamp after the term.
                // `run_when_ready`: a cache that never syncs does not hold the hand-off.
                term.spawn(cache.run_when_ready(&term, controller));
                async {}
            },
            shutdown,
        )
        .await?;
    Ok(())
}

/// Writes the stamp if the object does not carry it yet.
async fn reconcile(object: Arc<Lease>, context: Arc<Context>) -> Result<Action, StampError> {
    let name = object.name_any();
    if object.annotations().get(STAMP) != Some(&context.stamp) {
        let patch = json!({ "metadata": { "annotations": { STAMP: context.stamp } } });
        context
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| StampError {
                name: name.clone(),
                source,
            })?;
        tracing::info!(lease = %name, stamp = %context.stamp, "stamped");
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<Lease>, error: &StampError, _: Arc<Context>) -> Action {
    tracing::warn!(%error, "retrying in 5 s");
    Action::requeue(Duration::from_secs(5))
}
