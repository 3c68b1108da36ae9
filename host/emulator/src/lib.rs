//! conclave-emulator: an embedded Kubernetes API server for the objects Conclave uses.
//!
//! It serves `coordination.k8s.io/v1` Leases, `coordination.k8s.io/v1beta1` LeaseCandidates,
//! Namespaces and Events (`v1` and `events.k8s.io/v1`) over plain HTTP on loopback, with
//! kube-apiserver's semantics for the things clients rely on: one global resourceVersion,
//! optimistic concurrency, watches (resume, initial events, bookmarks, 410 Gone), selectors,
//! paging, every patch type including server-side apply, server-side validation with the same
//! 422 messages, `Status` errors, discovery, tables and a minimal OpenAPI v3 for kubectl.
//!
//! `metadata.generation` is not set on Leases and LeaseCandidates, though the issue that asked
//! for the emulator says create sets it: kube-apiserver's strategies for both kinds do not set
//! it either, and the differential test (`tests/differential.rs`, which does not mask the field)
//! proves the real server's objects carry none. Setting it would break parity.
//!
//! Where it knowingly differs from kube-apiserver:
//! - `spec.leaseName` field selectors on LeaseCandidates are served (kube-apiserver v1.37
//!   rejects them for `v1beta1` as "not a known field selector");
//! - lists always read the latest state (paging continues from the next key, not from a
//!   snapshot) and `resourceVersionMatch=Exact` for an older version answers 410;
//! - protobuf and CBOR bodies are refused with 415, and core `v1` Events
//!   and `events.k8s.io/v1` Events are stored separately (no conversion between them);
//! - deleting a namespace removes its objects at once instead of passing through Terminating;
//! - server-side apply treats every list as atomic and tracks maps per key.
//!
//! Newcomers run it with `conclave emulator`; tests start it in-process with
//! [`Emulator::start`] and break it on purpose through [`RunningEmulator::faults`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), conclave_emulator::Error> {
//! let emulator = conclave_emulator::Emulator::start(Default::default()).await?;
//! println!("kubectl --server {}", emulator.url());
//! emulator.shutdown().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod discovery;
mod faults;
mod fields;
mod objects;
mod patch;
mod resources;
mod selector;
mod server;
mod status;
mod store;
mod table;
mod watch;

pub use faults::{Failure, Faults, Verb};

use server::AppState;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Everything that can go wrong starting or stopping the emulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound (in use, or not a local address).
    #[error("cannot listen on {addr}: {source} (choose another --listen address or port 0)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server failed while running.
    #[error("the emulator's HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// The server task panicked or was aborted.
    #[error("the emulator's server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The kubeconfig could not be written.
    #[error("cannot write kubeconfig to {path}: {source}")]
    WriteKubeconfig {
        /// Where it was to be written.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How to run the emulator. `Default` listens on `127.0.0.1:0` (a free port).
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// How many changes the watch history keeps; watches resuming from older versions get 410.
    pub history_capacity: usize,
    /// Interval of periodic BOOKMARK events for watches that allow them (kube-apiserver: ~1m).
    pub bookmark_interval: Duration,
    /// Longest a watch stays open (and the length of watches without `timeoutSeconds`).
    pub max_watch_timeout: Duration,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_capacity: 10_000,
            bookmark_interval: Duration::from_secs(60),
            max_watch_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// Entry point: see [`Emulator::start`].
#[derive(Debug)]
pub struct Emulator;

impl Emulator {
    /// Binds the listen address and serves until [`RunningEmulator::shutdown`] (or drop, which
    /// stops the server too). Must be called inside a Tokio runtime.
    pub async fn start(config: EmulatorConfig) -> Result<RunningEmulator, Error> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let store = Arc::new(Store::new(config.history_capacity));
        let faults = Faults::new(store.clone());
        let shutdown = CancellationToken::new();
        let state = Arc::new(AppState {
            store: store.clone(),
            faults: faults.clone(),
            shutdown: shutdown.clone(),
            address: addr.to_string(),
            bookmark_interval: config.bookmark_interval,
            max_watch_timeout: config.max_watch_timeout,
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(state);
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
        });
        tracing::info!(%addr, "Kubernetes API emulator listening");
        Ok(RunningEmulator {
            addr,
            faults,
            shutdown,
            task: Some(task),
            store,
        })
    }
}

/// A running emulator. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningEmulator {
    addr: SocketAddr,
    faults: Faults,
    shutdown: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
    store: Arc<Store>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl RunningEmulator {
    /// The bound address (with the real port when 0 was asked for).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server URL, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this emulator (no credentials; context `conclave-emulator`,
    /// namespace `default`).
    #[must_use]
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: conclave-emulator\n  cluster:\n    server: {url}\ncontexts:\n- name: conclave-emulator\n  context:\n    cluster: conclave-emulator\n    user: conclave-emulator\n    namespace: default\ncurrent-context: conclave-emulator\nusers:\n- name: conclave-emulator\n  user: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`RunningEmulator::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| Error::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The fault-injection handle (in-process only).
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The current global resourceVersion.
    #[must_use]
    pub fn resource_version(&self) -> u64 {
        self.store.resource_version()
    }

    /// How many objects of all kinds are stored (including the initial namespaces).
    #[must_use]
    pub fn object_count(&self) -> usize {
        self.store.len()
    }

    /// Stops accepting requests, ends open watches and waits for the server to finish.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(task) => task.await.map_err(Error::Task)?.map_err(Error::Serve),
            None => Ok(()),
        }
    }

    /// Resolves when the server stops on its own (it only does on an I/O error).
    pub async fn wait(&mut self) -> Result<(), Error> {
        match self.task.as_mut() {
            Some(task) => {
                let result = task.await;
                self.task = None;
                result.map_err(Error::Task)?.map_err(Error::Serve)
            }
            None => Ok(()),
        }
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
