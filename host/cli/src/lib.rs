//! The subcommands of the `conclave` binary: each parses its flags and wires the library that does
//! the job (the engine, the controller and its `status`, the emulator, the demo, the candidate
//! library). What every subcommand shares is here: logging, the runtime, the client, the duration
//! parser and `--mode`.
#![forbid(unsafe_code)]

pub mod candidate;
pub mod demo;
pub mod duration;
pub mod emulator;
pub mod run;
pub mod scaffold;
pub mod status;
pub mod strategy;

use anyhow::Context as _;
use conclave_core::plan::Mode;
use std::io::IsTerminal as _;
use std::path::Path;

/// Which Leases to handle (`--mode` of `conclave run` and `conclave status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Every Lease, but leave `OldestEmulationVersion` to kube-apiserver's built-in controller
    /// while it is active.
    Auto,
    /// Every Lease.
    All,
    /// Only Leases whose strategy has a domain prefix (`example.com/...`).
    ThirdParty,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Auto => Self::Auto,
            ModeArg::All => Self::All,
            ModeArg::ThirdParty => Self::ThirdParty,
        }
    }
}

/// How log lines are written (`conclave run --log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the process's log subscriber. `RUST_LOG` wins over `default_level`. Logs go to
/// stderr, so a command's own output on stdout stays clean, and carry colours only when stderr is
/// a terminal, so files and log collectors get no escape codes.
pub(crate) fn init_logging(default_level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second subscriber (tests may install one first) is not worth failing for.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// The multi-threaded Tokio runtime a subcommand runs on.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")
}

/// Builds a Kubernetes client (with `TCP_NODELAY`, see [`conclave_candidate::client`]) from
/// `kubeconfig`, or, when `None`, from the usual places: the in-cluster config, `$KUBECONFIG`,
/// then `~/.kube/config`.
pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a cluster (in-cluster config, $KUBECONFIG or ~/.kube/config)")?,
    };
    conclave_candidate::client(config).context("building the Kubernetes client")
}
