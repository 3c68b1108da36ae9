//! `conclave demo`: flags, then [`conclave_demo::run_demo`] on this terminal.

use anyhow::Context as _;
use conclave_demo::{DemoConfig, Target};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Arguments of `conclave demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// How long the whole demo may take, start-up and clean-up included; the upgrade's steps are
    /// spread over it.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse)]
    pub duration: Duration,
    /// Run against this cluster instead of the embedded API server (needs LeaseCandidates,
    /// coordination.k8s.io/v1beta1, and rights to create a namespace unless --namespace is given).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace to use. Default: `conclave-demo` on the emulator; on a cluster a fresh
    /// `conclave-demo-<random>`, deleted at the end (a given namespace is kept, only the demo's
    /// objects are deleted).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Directory of strategy plugins for the controller (as `conclave run --plugins`); default:
    /// a plugin found in the plugin workspace's build output, else the one embedded for the demo.
    #[arg(long)]
    pub plugins: Option<PathBuf>,
    /// The plugin strategy of the second Lease; default: conclave.dev/priority if available,
    /// else another plugin strategy found.
    #[arg(long)]
    pub plugin_strategy: Option<String>,
    /// The controller's ack window (a candidate that renewed longer ago is pinged first).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::duration::parse)]
    pub ack_window: Duration,
    /// Do not start a controller; rely on one already running in the cluster.
    #[arg(long)]
    pub no_controller: bool,
}

/// Runs `conclave demo`: live lines on stdout, problems on stderr, exit 1 unless it succeeded.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    super::init_logging("error", super::LogFormat::Text);
    let runtime = super::runtime()?;
    let report = runtime.block_on(async {
        let target = match &args.kubeconfig {
            None => Target::Emulator,
            Some(path) => Target::Cluster {
                client: super::kube_client(Some(path)).await?,
                description: format!("the cluster of {}", path.display()),
            },
        };
        let config = DemoConfig {
            duration: args.duration,
            target,
            namespace: args.namespace,
            plugins: args.plugins,
            plugin_strategy: args.plugin_strategy,
            ack_window: args.ack_window,
            no_controller: args.no_controller,
        };
        let interrupted = CancellationToken::new();
        let signal = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                signal.cancel();
            }
        });
        conclave_demo::run_demo(config, Box::new(std::io::stdout()), interrupted)
            .await
            .context("running the demo")
    });
    // Do not let a stuck task keep the process past --duration.
    runtime.shutdown_timeout(Duration::from_millis(500));
    let report = report?;
    if report.succeeded() {
        Ok(ExitCode::SUCCESS)
    } else {
        for problem in &report.problems {
            eprintln!("demo: {problem}");
        }
        Ok(ExitCode::FAILURE)
    }
}
