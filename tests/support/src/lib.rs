//! conclave-testkit: a real Kubernetes control plane for Conclave's tests.
//!
//! [`ControlPlane`] runs etcd and kube-apiserver, built from Go modules by `tests/kube/build.sh`,
//! on free loopback ports with coordinated leader election enabled
//! (`--feature-gates=CoordinatedLeaderElection=true`,
//! `--runtime-config=coordination.k8s.io/v1beta1=true`), RBAC, a generated CA, serving
//! certificate and service-account key, and an admin client certificate (`O=system:masters`).
//!
//! Tests share one control plane per test binary ([`ControlPlane::shared`]) and isolate
//! themselves by namespace ([`ControlPlane::namespace`]); tests that touch cluster-wide state
//! (the `kube-system` leases of real components, or anything that may crash the apiserver) start
//! their own with [`ControlPlane::start`]. Helpers run real `kube-scheduler` and
//! `kube-controller-manager` candidates ([`ControlPlane::start_scheduler`],
//! [`ControlPlane::start_controller_manager`]), keep the apiserver's built-in election controller
//! passive ([`ControlPlane::hold_builtin_controller_lease`]), and register LeaseCandidates that
//! answer pings ([`CandidateResponder`]). [`ControlPlane::stall`] and [`ControlPlane::freeze`]
//! pause kube-apiserver and/or etcd (SIGSTOP, then SIGCONT) to inject API faults on the real
//! server.
//!
//! [`Node`] joins a real node to a control plane: containerd and the kubelet (built by
//! `tests/kube/build.sh`), with kube-controller-manager and kube-scheduler, so that Pods run; it
//! needs root and Debian's runc, CNI plugins, iptables and podman, and skips (or fails, with
//! `CONCLAVE_REQUIRE_NODE=1`) without them.
//!
//! [`Prometheus`] runs Debian's `prometheus` server on loopback, scraping the targets and
//! evaluating the rule files a test names, and answers queries through its HTTP API; it skips
//! (or fails, with `CONCLAVE_REQUIRE_PROMETHEUS=1`) when the binary is missing.
//!
//! [`Registry`] runs Debian's `docker-registry` (the CNCF distribution registry) on loopback,
//! anonymous or behind basic auth, for the OCI plugin tests; it skips (or fails, with
//! `CONCLAVE_REQUIRE_REGISTRY=1`) when the binary is missing.
//!
//! [`CutProxy`] stands between one client and an API server and cuts that client off while it
//! runs on (a node partitioned from the control plane). [`fixture_plugin`] is a hand-written
//! strategy component whose `elect` runs any WebAssembly text: loops, memory bombs, traps.
//!
//! When the binaries are missing, `start` and `shared` return `Ok(None)` after printing why, so
//! the calling test can return early; with `CONCLAVE_REQUIRE_KUBE=1` (set by CI) a missing binary
//! is an error instead.
#![deny(unsafe_code)]

mod binaries;
mod candidate;
pub mod checker;
mod components;
mod control_plane;
mod cut_proxy;
mod differential;
pub mod fixture_plugin;
mod fuzz;
mod holder;
mod node;
mod observer;
mod pki;
mod process;
mod prometheus;
mod registry;
mod sets;
mod stall;

pub mod wasm_build;

pub use binaries::{Binaries, KUBERNETES_VERSION, REQUIRE_ENV};
pub use candidate::{CandidateResponder, lease_candidate};
pub use components::{ComponentKind, KubeComponent};
pub use control_plane::{ControlPlane, SharedControlPlane};
pub use cut_proxy::CutProxy;
pub use differential::{
    Case, CaseCandidate, CoordinatedNamespace, Deviation, Gap, Observed, QUIET, Report,
    STICKY_STRATEGY, SettleTracker, Verdict, classify, clear, run_batch, run_differential, settled,
    wait_builtin_leading,
};
pub use fuzz::{FUZZ_CASES_ENV, fuzz_cases};
pub use holder::BuiltinControllerHold;
pub use node::{NODE_NAME, NODE_REQUIRE_ENV, Node, PROBE_IMAGE};
pub use observer::Observer;
pub use process::ManagedProcess;
pub use prometheus::{PROMETHEUS_REQUIRE_ENV, Prometheus, PrometheusConfig};
pub use registry::{REGISTRY_REQUIRE_ENV, Registry, RegistryResponse};
pub use sets::{SeededSets, oldest_emulation_winner};
pub use stall::{Stall, StallTarget};

use std::path::PathBuf;

/// Everything that can go wrong while running the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is missing while `CONCLAVE_REQUIRE_KUBE` demands it.
    #[error(
        "{binary} not found (or not executable); build the control plane with tests/kube/build.sh \
         (CONCLAVE_REQUIRE_KUBE is set, so this is an error rather than a skip)"
    )]
    BinaryMissing {
        /// The missing file.
        binary: PathBuf,
    },
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process exited (or never became ready) while the harness waited for it.
    #[error("{name} failed: {reason}; log {log}; last lines:\n{tail}")]
    Process {
        /// The process name.
        name: String,
        /// What went wrong.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// Generating certificates or keys failed.
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    /// Building a client from the generated kubeconfig failed.
    #[error("loading kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A condition did not become true in time.
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        seconds: u64,
    },
    /// The node cannot run on this machine while `CONCLAVE_REQUIRE_NODE` demands it.
    #[error(
        "no node: {reason} (CONCLAVE_REQUIRE_NODE is set, so this is an error rather than a skip)"
    )]
    NodeUnavailable {
        /// Why (not root, a binary, image or Debian package missing).
        reason: String,
    },
    /// A step of the node's host set-up (`tests/kube/node/node.sh`, `ctr`) failed.
    #[error("{what} failed ({status}): {stderr}")]
    NodeCommand {
        /// The step.
        what: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// `prometheus` is missing while `CONCLAVE_REQUIRE_PROMETHEUS` demands it.
    #[error(
        "prometheus not found: run .ci/prepare-prometheus.sh (Debian's prometheus) or set \
         PROMETHEUS (CONCLAVE_REQUIRE_PROMETHEUS is set, so this is an error rather than a skip)"
    )]
    PrometheusMissing,
    /// A request to Prometheus's HTTP API failed or was answered with an error.
    #[error("prometheus {request}: {message}")]
    Prometheus {
        /// The request (path and query).
        request: String,
        /// What went wrong: the API's error type and message, or the transport's.
        message: String,
    },
    /// `docker-registry` is missing while `CONCLAVE_REQUIRE_REGISTRY` demands it.
    #[error(
        "docker-registry not found: run .ci/prepare-registry.sh (Debian's docker-registry) or set \
         CONCLAVE_REGISTRY_BINARY (CONCLAVE_REQUIRE_REGISTRY is set, so this is an error rather \
         than a skip)"
    )]
    RegistryMissing,
    /// A caller passed an argument the harness cannot honour.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Polls `check` every 250 ms until it returns `Ok(Some(value))`, for at most `timeout`.
///
/// Errors from `check` are not retried. Tests wait on conditions with this instead of sleeping.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut check: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, Error>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
