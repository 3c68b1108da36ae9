//! `conclave candidate`: a real example component built on `conclave-candidate`. It registers a
//! LeaseCandidate, leads while the Lease names it, hands over gracefully when pre-empted, and
//! prints one JSON line per transition on stdout (logs go to stderr), each with its
//! `CLOCK_MONOTONIC` reading in nanoseconds. Tests, the demo and users smoke-testing a cluster run
//! it.

use crate::duration::parse as parse_duration;
use anyhow::Context as _;
use conclave_candidate::{
    CandidateConfig, Elector, LeaseConfig, MonotonicTime, Term, Transition, default_identity,
};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Arguments of `conclave candidate`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::duration::HELP)]
pub struct CandidateArgs {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the Lease and the LeaseCandidate.
    #[arg(long, env = "CONCLAVE_CANDIDATE_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Name of the Lease to lead.
    #[arg(long, env = "CONCLAVE_CANDIDATE_LEASE")]
    pub lease: String,
    /// This instance's identity: LeaseCandidate name and holderIdentity when leading; default:
    /// $POD_NAME, else the hostname, plus a random suffix drawn per process.
    #[arg(long, env = "CONCLAVE_CANDIDATE_IDENTITY")]
    pub identity: Option<String>,
    /// `spec.binaryVersion` of the LeaseCandidate (e.g. 1.33.0).
    #[arg(long, env = "CONCLAVE_CANDIDATE_BINARY_VERSION")]
    pub binary_version: String,
    /// `spec.emulationVersion` of the LeaseCandidate (e.g. 1.32.0).
    #[arg(long, env = "CONCLAVE_CANDIDATE_EMULATION_VERSION", default_value = "")]
    pub emulation_version: String,
    /// `spec.strategy` of the LeaseCandidate.
    #[arg(
        long,
        env = "CONCLAVE_CANDIDATE_STRATEGY",
        default_value = "OldestEmulationVersion"
    )]
    pub strategy: String,
    /// Length of one unit of work done while leading; a unit in progress is finished after the
    /// term is cancelled, so draining takes up to this long.
    #[arg(long, env = "CONCLAVE_CANDIDATE_WORK", value_name = "DURATION", default_value = "100ms", value_parser = parse_duration)]
    pub work: Duration,
    /// `leaseDurationSeconds` written on renewal (rounded up to whole seconds; at least 1s).
    #[arg(long, env = "CONCLAVE_CANDIDATE_LEASE_DURATION", value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Stop leading after failing to renew for this long (must be below the lease duration).
    #[arg(long, env = "CONCLAVE_CANDIDATE_RENEW_DEADLINE", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Renewal and polling period (must be below the renew deadline).
    #[arg(long, env = "CONCLAVE_CANDIDATE_RETRY_PERIOD", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// How long the term's tasks may take to stop before they count as leaked.
    #[arg(long, env = "CONCLAVE_CANDIDATE_DRAIN_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// KEP-4355 fallback: take a free Lease after this long without a controller.
    #[arg(long, env = "CONCLAVE_CANDIDATE_FALLBACK_AFTER", value_name = "DURATION", value_parser = parse_duration)]
    pub fallback_after: Option<Duration>,
}

/// Runs the candidate until SIGTERM or Ctrl-C, then leaves the election gracefully.
pub fn run(args: CandidateArgs) -> anyhow::Result<()> {
    super::init_logging("info", super::LogFormat::Text);
    let runtime = super::runtime()?;
    runtime.block_on(serve(args))
}

async fn serve(args: CandidateArgs) -> anyhow::Result<()> {
    // Handle SIGTERM from the start: a stop request while connecting still stops cleanly.
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(shutdown.clone()));
    let client = super::kube_client(args.kubeconfig.as_deref()).await?;
    let lease = LeaseConfig {
        namespace: args.namespace.clone(),
        name: args.lease.clone(),
        identity: args.identity.clone().unwrap_or_else(default_identity),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    tracing::info!(identity = %lease.identity, lease = %lease.key(), "taking part in the election");
    let candidate = CandidateConfig::new(
        args.binary_version.clone(),
        args.emulation_version.clone(),
        args.strategy.clone(),
    );
    let mut elector =
        Elector::coordinated(client, lease, candidate)?.with_drain_timeout(args.drain_timeout);
    if let Some(after) = args.fallback_after {
        elector = elector.with_fallback_after(after);
    }
    let mut transitions = elector.handle().transitions();
    let printer = tokio::spawn(async move {
        while let Ok(transition) = transitions.recv().await {
            println!("{}", transition_line(&transition));
        }
    });
    let work = args.work;
    let result = elector
        .run(move |term: Term| lead(term, work), shutdown)
        .await;
    signals.abort();
    // The elector is gone, so the channel closes and the printer ends after the last line.
    printer.await.context("printing transitions")?;
    result.context("running the candidate")
}

/// The example work: units of `work` each, until the term ends; a unit in progress is finished.
/// Its last log line says when it stopped on the monotonic clock (`monotonic_ns`), comparable with
/// the transitions' readings: the soak's checker uses it to see the term's tasks stop before the
/// term ends.
async fn lead(term: Term, work: Duration) {
    let worker = term.clone();
    term.spawn(async move {
        let mut units: u64 = 0;
        while !worker.is_cancelled() {
            tokio::time::sleep(work).await;
            units += 1;
        }
        let monotonic_ns = MonotonicTime::now().as_nanos();
        tracing::info!(term = worker.number(), units, monotonic_ns, "work stopped");
    });
}

/// One JSON line per transition: the library's serialized form (`event`, `term`, `at` and
/// details, RFC 3339 times, `monotonic_ns` or, for `leading`, `observed_monotonic_ns`), so every
/// kind of transition is printed as it is defined there.
fn transition_line(transition: &Transition) -> String {
    serde_json::to_string(transition).unwrap_or_else(|error| {
        json!({ "event": "unprintable", "error": error.to_string() }).to_string()
    })
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot install the SIGTERM handler");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: leaving the election");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;
    use conclave_candidate::{StopReason, Timestamp};
    use serde_json::Value;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: CandidateArgs,
    }

    #[test]
    fn transitions_print_as_one_json_object_each() {
        let at = Timestamp::from_secs(1_764_500_000);
        let line = transition_line(&Transition::StoppedLeading {
            term: 3,
            lease_transitions: Some(7),
            at,
            monotonic: MonotonicTime::from_nanos(81_234_567_890),
            reason: StopReason::Preempted {
                preferred_holder: "b".into(),
            },
            leaked_tasks: 0,
        });
        assert!(!line.contains('\n'), "{line}");
        let line: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(line["event"], "stopped-leading");
        assert_eq!(line["term"], 3);
        assert_eq!(line["lease_transitions"], 7);
        assert_eq!(line["reason"], "preempted");
        assert_eq!(line["preferred_holder"], "b");
        assert_eq!(line["at"], "2025-11-30T10:53:20Z");
        assert_eq!(line["monotonic_ns"], 81_234_567_890_u64);
        let line: Value = serde_json::from_str(&transition_line(&Transition::ReleaseFailed {
            term: 3,
            lease_transitions: Some(7),
            at,
            monotonic: MonotonicTime::from_nanos(1),
            error: "the API server said no".into(),
        }))
        .unwrap();
        assert_eq!(line["event"], "release-failed");
        assert_eq!(line["error"], "the API server said no");
    }

    #[test]
    fn timers_are_durations_as_kube_users_write_them() {
        let cli = Cli::try_parse_from([
            "candidate",
            "--lease",
            "l",
            "--binary-version",
            "1.33.0",
            "--work",
            "20ms",
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "300ms",
            "--drain-timeout",
            "1m30s",
            "--fallback-after",
            "1.5s",
        ])
        .unwrap();
        let args = cli.args;
        assert_eq!(args.work, Duration::from_millis(20));
        assert_eq!(args.lease_duration, Duration::from_secs(3));
        assert_eq!(args.renew_deadline, Duration::from_secs(2));
        assert_eq!(args.retry_period, Duration::from_millis(300));
        assert_eq!(args.drain_timeout, Duration::from_secs(90));
        assert_eq!(args.fallback_after, Some(Duration::from_millis(1500)));
        assert_eq!(args.identity, None);
        let defaults = Cli::try_parse_from(["candidate", "--lease", "l", "--binary-version", "1"])
            .unwrap()
            .args;
        assert_eq!(defaults.work, Duration::from_millis(100));
        assert_eq!(defaults.renew_deadline, Duration::from_secs(10));
        assert_eq!(defaults.fallback_after, None);
        assert!(
            Cli::try_parse_from([
                "candidate",
                "--lease",
                "l",
                "--binary-version",
                "1",
                "--retry-period",
                "2 seconds"
            ])
            .is_err()
        );
    }
}
