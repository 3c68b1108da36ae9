//! `/metrics` (Prometheus text), `/healthz` (the process serves) and `/readyz` (caches synced and
//! the controller's own Lease held or watched; the body says why not).

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use conclave_candidate::ElectorHandle;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What `/readyz` answers: ready once the caches are synced and the controller's own Lease has
/// been read, so that this replica leads (active) or watches it (standby), with no answer about
/// that Lease standing that only an operator can fix.
#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    elector: OnceLock<ElectorHandle>,
}

impl Readiness {
    /// The caches are synced.
    pub fn synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    /// The controller contends for its own Lease through this elector.
    pub fn contending(&self, elector: ElectorHandle) {
        let _ = self.elector.set(elector);
    }

    /// `Ok` with this replica's role when ready, else why not.
    pub fn check(&self) -> Result<&'static str, String> {
        if !self.synced.load(Ordering::Relaxed) {
            return Err("caches not synced yet".into());
        }
        let Some(elector) = self.elector.get() else {
            return Err("not contending for the controller Lease yet".into());
        };
        if let Some(blocked) = elector.blocked().borrow().as_ref() {
            return Err(blocked.to_string());
        }
        if !elector.is_ready() {
            return Err("the controller Lease has not been read yet".into());
        }
        Ok(if elector.is_leading() {
            "active"
        } else {
            "standby"
        })
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    readiness: Arc<Readiness>,
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics: {error}"),
        ),
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    match state.readiness.check() {
        Ok(role) => (StatusCode::OK, format!("ok: {role}\n")),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            registry,
            readiness,
        });
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::warn!(%error, "metrics server stopped");
    }
}
