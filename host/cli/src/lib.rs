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

/// The multi-threaded Tokio runtime a subcommand runs on (one worker thread per core).
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")
}

/// A Tokio runtime with `threads` worker threads, for a subcommand whose CPU-heavy work runs on
/// the blocking pool (`conclave run`'s strategy calls), so its workers only do I/O.
pub(crate) fn runtime_with(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("starting the Tokio runtime")
}

/// Builds a Kubernetes client (with `TCP_NODELAY`, see [`conclave_candidate::client`]) from
/// `kubeconfig`, or, when `None`, from the usual places: the in-cluster config, `$KUBECONFIG`,
/// then `~/.kube/config`.
pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = kube_config(kubeconfig, None).await?;
    conclave_candidate::client(config).context("building the Kubernetes client")
}

/// The client configuration kubectl would use: `kubeconfig`, or, when `None`, `$KUBECONFIG`
/// (a list of files, merged), then `~/.kube/config`, then the in-cluster config; with `context`,
/// that context instead of the current one (and a kubeconfig is then required). Its
/// `default_namespace` is the context's namespace (`default` when it sets none), or the pod's.
pub(crate) async fn kube_config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let (file, source) = match (kubeconfig, context) {
        (None, None) => {
            return kube::Config::infer()
                .await
                .context("finding a cluster (in-cluster config, $KUBECONFIG or ~/.kube/config)");
        }
        (Some(path), _) => (
            Kubeconfig::read_from(path),
            format!("kubeconfig {}", path.display()),
        ),
        (None, Some(_)) => (Kubeconfig::read(), "$KUBECONFIG or ~/.kube/config".into()),
    };
    let file = file.with_context(|| format!("reading {source}"))?;
    if let Some(context) = context
        && !file.contexts.iter().any(|c| c.name == context)
    {
        let known: Vec<&str> = file.contexts.iter().map(|c| c.name.as_str()).collect();
        anyhow::bail!(
            "context {context:?} does not exist in {source} (its contexts: {})",
            known.join(", ")
        );
    }
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .with_context(|| match context {
            Some(context) => format!("loading {source} (context {context:?})"),
            None => format!("loading {source}"),
        })
}

/// How the binary was started, which names it in help and usage and decides the default
/// namespace of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    /// As `conclave`.
    Conclave,
    /// As the kubectl plugin `kubectl conclave`: kubectl runs a file (or symlink to this binary)
    /// named [`PLUGIN_FILE_NAME`](Self::PLUGIN_FILE_NAME) found on the `PATH`, as krew installs
    /// plugins, with the arguments after `kubectl conclave`.
    KubectlPlugin,
}

impl Invocation {
    /// The file name kubectl looks for on the `PATH` to run `kubectl conclave`.
    pub const PLUGIN_FILE_NAME: &str = "kubectl-conclave";

    /// How a process started as `program` (its `argv[0]`) was invoked.
    #[must_use]
    pub fn from_program(program: &std::ffi::OsStr) -> Self {
        // file_stem: `kubectl-conclave.exe` is the plugin too.
        if Path::new(program).file_stem() == Some(Self::PLUGIN_FILE_NAME.as_ref()) {
            Self::KubectlPlugin
        } else {
            Self::Conclave
        }
    }

    /// The command's name in help and usage lines.
    #[must_use]
    pub const fn command_name(self) -> &'static str {
        match self {
            Self::Conclave => "conclave",
            Self::KubectlPlugin => "kubectl conclave",
        }
    }
}
