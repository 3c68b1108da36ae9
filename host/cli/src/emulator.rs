//! `conclave emulator`: run the embedded Kubernetes API server on its own, so a newcomer can
//! point kubectl, the controller and candidates at it without a cluster.

use anyhow::Context as _;
use conclave_emulator::{Emulator, EmulatorConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `conclave emulator`.
#[derive(Debug, clap::Args)]
pub struct EmulatorArgs {
    /// Address to listen on: keep it on loopback, the API has no authentication (port 0 picks
    /// a free port, written to the kubeconfig).
    #[arg(long, env = "CONCLAVE_EMULATOR_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Where to write a kubeconfig that points at the emulator.
    #[arg(
        long,
        env = "CONCLAVE_EMULATOR_KUBECONFIG_OUT",
        default_value = "conclave-emulator.kubeconfig"
    )]
    pub kubeconfig_out: PathBuf,
    /// How many changes the watch history keeps before resuming watches get 410 Gone.
    #[arg(long, env = "CONCLAVE_EMULATOR_HISTORY", default_value_t = 10_000)]
    pub history: usize,
    /// Time between BOOKMARK events on watches that allow them (at least 1s).
    #[arg(long, env = "CONCLAVE_EMULATOR_BOOKMARK_INTERVAL", value_name = "DURATION", default_value = "60s", value_parser = crate::duration::parse)]
    pub bookmark_interval: Duration,
}

/// Runs the emulator until Ctrl-C (or SIGTERM), then shuts it down cleanly.
pub fn run(args: EmulatorArgs) -> anyhow::Result<()> {
    super::init_logging("info", super::LogFormat::Text);
    let runtime = super::runtime()?;
    runtime.block_on(serve(args))
}

/// The warning `conclave emulator` gives when `listen` is not a loopback address: the emulator
/// has no authentication, so anyone who can reach the address can read and change every object.
/// `None` for loopback addresses, the intended use.
#[must_use]
pub fn exposure_warning(listen: SocketAddr) -> Option<String> {
    (!listen.ip().is_loopback()).then(|| {
        format!(
            "warning: --listen {listen} is not a loopback address; the emulator's Kubernetes API \
             has no authentication, so anyone who can reach it can read and change every object \
             (use 127.0.0.1 unless you mean to share it)"
        )
    })
}

async fn serve(args: EmulatorArgs) -> anyhow::Result<()> {
    if let Some(warning) = exposure_warning(args.listen) {
        tracing::warn!(listen = %args.listen, "unauthenticated Kubernetes API on a non-loopback address");
        eprintln!("{warning}");
    }
    let config = EmulatorConfig {
        listen: args.listen,
        history_capacity: args.history,
        bookmark_interval: args.bookmark_interval.max(Duration::from_secs(1)),
        ..EmulatorConfig::default()
    };
    let mut emulator = Emulator::start(config).await?;
    emulator.write_kubeconfig(&args.kubeconfig_out)?;
    let path =
        std::fs::canonicalize(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    println!("Kubernetes API emulator listening on {}", emulator.url());
    println!("kubeconfig written to {}", path.display());
    println!("try: KUBECONFIG={} kubectl get leases -A", path.display());
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
        result = emulator.wait() => return result.context("the emulator stopped unexpectedly"),
    }
    println!("shutting down");
    emulator.shutdown().await?;
    Ok(())
}
