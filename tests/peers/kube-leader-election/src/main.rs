//! `kle-peer`: the crates.io library kube-leader-election run the way its documentation shows,
//! as a process, so that `candidate/benches/handoff.rs` can time it on the same API server as
//! conclave-candidate.
//!
//! Every `--retry-period-ms` it calls `LeaseLock::try_acquire_or_renew()` (the library's whole
//! election: renew when holding, acquire when the Lease is missing or expired, otherwise wait).
//! It prints one JSON line per transition on stdout, flushed at once, in the shape
//! `conclave candidate` prints: `{"event":"leading","at":RFC3339}`, `stopped-leading`,
//! `released`, and `following` when it first sees another holder (or after losing the Lease).
//! On SIGTERM (or SIGINT) it steps down through `LeaseLock::step_down()` when leading, prints
//! `released` and exits 0. SIGKILL is a crash: nothing is released. When the process that started
//! it (the bench) is gone, it exits at once, so a killed bench leaves no peer behind.

#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use serde_json::json;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, MissedTickBehavior};

/// Command-line flags: where the Lease is and kube-leader-election's `LeaseLockParams`.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the Lease.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Name of the Lease (`LeaseLockParams::lease_name`).
    #[arg(long)]
    lease: String,
    /// This instance's holderIdentity (`LeaseLockParams::holder_id`).
    #[arg(long)]
    identity: String,
    /// `leaseDurationSeconds` written when acquiring and renewing (`LeaseLockParams::lease_ttl`).
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// How often to call `try_acquire_or_renew()`, leading or not; the library's documentation
    /// suggests a third of the lease duration.
    #[arg(long, default_value_t = 5_000)]
    retry_period_ms: u64,
}

/// Exits (status 0, nothing released, like a crash) when this process is reparented, i.e. the
/// bench that started it died without stopping it.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(0);
            }
        }
    });
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    exit_with_parent();
    // Installed first, so a stop request that arrives while connecting still stops cleanly.
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let client = client(&args).await?;
    let lease_ttl = Duration::from_secs(args.lease_duration_seconds);
    let lock = LeaseLock::new(
        client,
        &args.namespace,
        LeaseLockParams {
            lease_name: args.lease.clone(),
            holder_id: args.identity.clone(),
            lease_ttl,
        },
    );
    let mut tick = tokio::time::interval(Duration::from_millis(args.retry_period_ms));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut state = State::Starting;
    loop {
        tokio::select! {
            biased;
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        match lock.try_acquire_or_renew().await {
            Ok(LeaseLockResult::Acquired(_)) => {
                if !matches!(state, State::Leading { .. }) {
                    emit("leading")?;
                }
                state = State::Leading { renewed: started };
            }
            Ok(LeaseLockResult::NotAcquired(_)) => state = state.follow()?,
            Err(error) => {
                eprintln!(
                    "kle-peer: try_acquire_or_renew on {}/{} failed: {error}",
                    args.namespace, args.lease
                );
                // The library has no renew deadline: once the Lease may have expired for the
                // others, this instance must not act as leader any more.
                if let State::Leading { renewed } = state
                    && renewed.elapsed() >= lease_ttl
                {
                    state = state.follow()?;
                }
            }
        }
    }
    if let State::Leading { .. } = state {
        lock.step_down().await.with_context(|| {
            format!("stepping down from Lease {}/{}", args.namespace, args.lease)
        })?;
        emit("released")?;
    }
    Ok(())
}

/// Where this instance stands in the election.
#[derive(Debug, Clone, Copy)]
enum State {
    /// No answer from `try_acquire_or_renew()` yet.
    Starting,
    /// Holding the Lease; `renewed` is when the last successful acquire or renew was started.
    Leading { renewed: Instant },
    /// Another instance holds the Lease.
    Following,
}

impl State {
    /// Becomes a follower, printing the transition lines.
    fn follow(self) -> anyhow::Result<Self> {
        match self {
            Self::Leading { .. } => {
                emit("stopped-leading")?;
                emit("following")?;
            }
            Self::Starting => emit("following")?,
            Self::Following => {}
        }
        Ok(Self::Following)
    }
}

/// A kube 4 client from `--kubeconfig`, or kube's defaults without it.
async fn client(args: &Args) -> anyhow::Result<kube::Client> {
    let Some(path) = &args.kubeconfig else {
        return kube::Client::try_default()
            .await
            .context("building the Kubernetes client from the default configuration");
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// Prints one transition line and flushes it, so a reader sees it at once.
fn emit(event: &str) -> anyhow::Result<()> {
    let line = json!({ "event": event, "at": jiff::Timestamp::now().to_string() });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").context("writing to stdout")?;
    out.flush().context("flushing stdout")
}
