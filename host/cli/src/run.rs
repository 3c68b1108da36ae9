//! `conclave run`: the coordinated leader election controller.

use super::{LogFormat, ModeArg};
use crate::duration::parse as parse_duration;
use anyhow::Context as _;
use conclave_controller::{self as controller, ControllerConfig};
use conclave_engine::{Engine, EngineConfig, Limits, default_cache_dir};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Arguments of `conclave run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kubeconfig to use; default: in-cluster config, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "CONCLAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (repeatable); default: the whole cluster.
    #[arg(long = "namespace", env = "CONCLAVE_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Leases reconciled in parallel.
    #[arg(long, env = "CONCLAVE_WORKERS", default_value_t = 16)]
    pub workers: usize,
    /// Threads that run the controller's I/O: its watches, writes, timers and election steps.
    /// Strategy calls do not run on them but on a pool of their own (at most --workers at a
    /// time), so one thread serves tens of thousands of Leases, and each watch event then wakes
    /// one thread instead of handing work between several (at 10,000 Leases renewing every 2 s,
    /// half the CPU of two threads, and faster storms; docs/benchmarks.md).
    #[arg(long, env = "CONCLAVE_IO_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub io_threads: u16,
    /// A candidate is fresh if it renewed within this window; pings wait this long for an ack.
    #[arg(long, env = "CONCLAVE_ACK_WINDOW", value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub ack_window: Duration,
    /// Delete candidates not renewed for this long.
    #[arg(long, env = "CONCLAVE_CANDIDATE_GC_AFTER", value_name = "DURATION", default_value = "30m", value_parser = parse_duration)]
    pub candidate_gc_after: Duration,
    /// Which Leases to handle.
    #[arg(long, env = "CONCLAVE_MODE", value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// Directory of extra strategy plugins (NAME.wasm plus optional NAME.json).
    #[arg(long, env = "CONCLAVE_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Cache compiled plugins in this directory (keyed by content digest and wasmtime version), so a
    /// restart loads them without recompiling; default: `$XDG_CACHE_HOME/conclave/wasm`, else
    /// `~/.cache/conclave/wasm`. A cache that cannot be written only costs the recompile.
    #[arg(long, env = "CONCLAVE_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
    /// Accept plugins that import WASI (given a deny-all context).
    #[arg(long, env = "CONCLAVE_ALLOW_WASI")]
    pub allow_wasi: bool,
    #[command(flatten)]
    pub limits: crate::strategy::LimitArgs,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "CONCLAVE_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[arg(long, env = "CONCLAVE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Namespace of the controller's own Lease `conclave-controller`; default: in a pod, the pod's
    /// namespace (its service account's), else `kube-system`, which every cluster has.
    #[arg(long, env = "POD_NAMESPACE")]
    pub controller_namespace: Option<String>,
    /// This replica's identity; default: `$POD_NAME` (in a pod), else the hostname, plus a
    /// random suffix drawn once per process, so that a container the kubelet restarts never
    /// inherits its predecessor's leadership.
    #[arg(long, env = "CONCLAVE_IDENTITY")]
    pub identity: Option<String>,
    /// `leaseDurationSeconds` written into Leases Conclave assigns (upstream: 5). It only bounds
    /// how long a newly elected holder has to start renewing (its renewals write its own duration),
    /// and how long a pre-empted holder that never steps down keeps the Lease.
    #[arg(long, env = "CONCLAVE_LEASE_DURATION_SECONDS", default_value_t = 5)]
    pub lease_duration_seconds: i32,
    /// Duration of the controller's own Lease.
    #[arg(long, env = "CONCLAVE_LEADER_LEASE_DURATION", value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_lease_duration: Duration,
    /// The active replica steps down if it cannot renew its own Lease for this long.
    #[arg(long, env = "CONCLAVE_LEADER_RENEW_DEADLINE", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub leader_renew_deadline: Duration,
    /// How often the active replica renews, and followers retry, the controller's own Lease.
    #[arg(long, env = "CONCLAVE_LEADER_RETRY_PERIOD", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub leader_retry_period: Duration,
    /// How long any one API call of the controller may take (its watches excepted).
    #[arg(long, env = "CONCLAVE_API_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub api_timeout: Duration,
    /// The first election of a Lease that does not exist yet waits this long after each
    /// candidate's arrival (at most 200 ms, or four times this), so replicas registering together
    /// get the best of them as first holder; `0s` elects the first to arrive at once.
    #[arg(long, env = "CONCLAVE_FIRST_ELECTION_SETTLE", value_name = "DURATION", default_value = "30ms", value_parser = parse_duration)]
    pub first_election_settle: Duration,
    /// Pod liveness: watch the Pods that LeaseCandidates name (conclave-candidate in a pod) and
    /// elect the next candidate as soon as the kubelet reports that the holder's container
    /// terminated or was replaced (a Pod's deletion alone is no evidence: a force delete may
    /// leave the process running), instead of when its Lease expires.
    /// Needs get, list and watch on pods; without them, one warning and failover at expiry.
    #[arg(long, env = "CONCLAVE_POD_LIVENESS", value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub pod_liveness: bool,
    /// Take over from kube-apiserver's built-in election controller (with `--mode auto`): the
    /// active replica holds that controller's Lease, kube-system/leader-election-controller, so
    /// every kube-apiserver stays a follower of it, and Conclave elects the
    /// OldestEmulationVersion Leases too (kube-controller-manager's, kube-scheduler's). Taken
    /// from a kube-apiserver, those Leases are elected three of its lease durations later (45 s),
    /// once it must have stopped. Given back when Conclave stops: the Lease expires and a
    /// kube-apiserver takes it. Needs get, create and update on that Lease; without them the
    /// Leases are left to the built-in controller while it is active.
    #[arg(long, env = "CONCLAVE_TAKE_OVER", value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub take_over: bool,
    /// Load StrategyPlugin objects (conclave.dev/v1alpha1) live: watch them, pull and compile
    /// their plugins, and report each one's status. `off` serves only the built-in plugins and
    /// --plugins DIR. Needs the CRD (`conclave crd`); without it the controller logs a warning and
    /// keeps retrying.
    #[arg(long, env = "CONCLAVE_STRATEGY_PLUGINS", value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub strategy_plugins: bool,
    /// A registry (HOST:PORT, as in a StrategyPlugin's reference) reached over plain HTTP
    /// instead of HTTPS; repeat or separate with commas. For a registry on loopback or inside a
    /// trusted network only.
    #[arg(
        long,
        env = "CONCLAVE_PLAIN_HTTP_REGISTRIES",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    pub plain_http_registry: Vec<String>,
    /// The bound on each step of pulling a StrategyPlugin's component (connect, manifest, blob).
    #[arg(long, env = "CONCLAVE_PLUGIN_PULL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub plugin_pull_timeout: Duration,
    /// How often the plugins directory and the ConfigMap and file sources of StrategyPlugins are
    /// read again (a ConfigMap volume or image volume updated in place is picked up then).
    #[arg(long, env = "CONCLAVE_PLUGIN_RESYNC", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub plugin_resync: Duration,
}

/// `on` or `off` (also `true`/`false`), for switches written as `--flag=on`.
fn parse_on_off(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => Err(format!("expected on or off, got {other:?}")),
    }
}

/// Namespace of the controller's own Lease outside a pod, when no flag names one: it exists on
/// every cluster and on `conclave emulator`, and holds the control plane's own leader election
/// Leases.
pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "kube-system";

/// Exit code of `conclave run` when its own Lease cannot work until the user acts (its namespace
/// does not exist, or RBAC refuses it), outside a pod.
pub const EXIT_OWN_LEASE_BLOCKED: u8 = 2;

/// Where the controller's own Lease lives, and how that was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ControllerNamespace {
    name: String,
    chosen_by: &'static str,
}

impl ControllerNamespace {
    /// The flag (or `POD_NAMESPACE`), else the pod's service account namespace, else
    /// [`DEFAULT_CONTROLLER_NAMESPACE`].
    fn resolve(flag: Option<String>, service_account: Option<String>) -> Self {
        if let Some(name) = flag.filter(|name| !name.is_empty()) {
            return Self {
                name,
                chosen_by: "--controller-namespace or POD_NAMESPACE",
            };
        }
        if let Some(name) = service_account {
            return Self {
                name,
                chosen_by: "the pod's service account",
            };
        }
        Self {
            name: DEFAULT_CONTROLLER_NAMESPACE.into(),
            chosen_by: "the default outside a pod",
        }
    }
}

/// Whether this process runs in a Kubernetes pod (the kubelet sets this in every container).
fn in_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    super::init_logging("info", args.log_format);
    let runtime = super::runtime_with(args.io_threads.into())?;
    runtime.block_on(serve(args))
}

async fn serve(args: RunArgs) -> anyhow::Result<ExitCode> {
    let engine = Engine::new(EngineConfig {
        plugins_dir: args.plugins.clone(),
        allow_wasi: args.allow_wasi,
        cache_dir: args.plugin_cache_dir.clone().or_else(default_cache_dir),
        default_limits: Limits::default(),
        limit_overrides: args.limits.overrides(),
    })
    .context("loading strategy plugins")?;
    for info in engine.strategies() {
        tracing::info!(strategy = %info.name, "strategy available");
    }
    let client = super::kube_client(args.kubeconfig.as_deref()).await?;
    let namespace = ControllerNamespace::resolve(
        args.controller_namespace,
        conclave_candidate::service_account_namespace(),
    );
    tracing::info!(namespace = %namespace.name, chosen_by = namespace.chosen_by, "namespace of the controller's own Lease");
    let config = ControllerConfig {
        namespaces: args.namespaces,
        workers: args.workers,
        ack_window: args.ack_window,
        candidate_gc_after: args.candidate_gc_after,
        lease_duration_seconds: args.lease_duration_seconds,
        mode: args.mode.into(),
        identity: args
            .identity
            .unwrap_or_else(conclave_candidate::default_identity),
        controller_namespace: namespace.name.clone(),
        own_lease_duration: args.leader_lease_duration,
        own_renew_deadline: args.leader_renew_deadline,
        own_retry_period: args.leader_retry_period,
        metrics_addr: Some(args.metrics_addr),
        api_timeout: args.api_timeout,
        // A pod waits, unready, for the fix to reach it; a user at a shell fixes the flag.
        fail_when_blocked: !in_pod(),
        first_election_settle: conclave_core::step::Settle::after_gap(args.first_election_settle),
        pod_liveness: args.pod_liveness,
        take_over: args.take_over,
        // The product's rule: the longer of the lease duration and kube-apiserver's default.
        unseen_lease_hold: None,
    };
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("shutting down: finishing in-flight work, then releasing the Lease");
        signal.cancel();
    });
    let plugin_objects =
        args.strategy_plugins
            .then(|| controller::plugin_objects::PluginObjectsConfig {
                engine: engine.clone(),
                plugins_dir: args.plugins.clone(),
                namespace: namespace.name.clone(),
                oci: conclave_oci::ClientOptions {
                    timeout: args.plugin_pull_timeout,
                    plain_http: args.plain_http_registry.clone(),
                    ..conclave_oci::ClientOptions::default()
                },
                resync: args.plugin_resync,
            });
    match controller::run_with_plugin_objects(
        client,
        Arc::new(engine),
        config,
        plugin_objects,
        shutdown,
    )
    .await
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(controller::Error::OwnLeaseBlocked(blocked)) => {
            tracing::error!(
                "{blocked}. The controller keeps its own Lease {} in namespace {:?} (chosen by {}); \
                 pass --controller-namespace NAMESPACE (or set POD_NAMESPACE) to use another",
                controller::CONTROLLER_LEASE,
                namespace.name,
                namespace.chosen_by
            );
            Ok(ExitCode::from(EXIT_OWN_LEASE_BLOCKED))
        }
        Err(error) => Err(anyhow::Error::new(error).context("running the controller")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_namespace_is_the_flag_then_the_pods_then_kube_system() {
        let resolve = |flag: Option<&str>, pod: Option<&str>| {
            ControllerNamespace::resolve(flag.map(Into::into), pod.map(Into::into)).name
        };
        assert_eq!(resolve(Some("ops"), Some("conclave-system")), "ops");
        assert_eq!(resolve(None, Some("conclave-system")), "conclave-system");
        assert_eq!(
            resolve(Some(""), Some("conclave-system")),
            "conclave-system"
        );
        assert_eq!(resolve(None, None), "kube-system");
    }

    /// `conclave run`'s flags parsed from `extra`.
    fn parse_run(extra: &[&str]) -> Result<RunArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        <Cli as clap::Parser>::try_parse_from(["run"].iter().chain(extra)).map(|cli| cli.run)
    }

    #[test]
    fn pod_liveness_is_on_unless_switched_off() {
        let parse = |extra: &[&str]| parse_run(extra).map(|run| run.pod_liveness);
        assert!(parse(&[]).unwrap());
        assert!(!parse(&["--pod-liveness=off"]).unwrap());
        assert!(parse(&["--pod-liveness", "on"]).unwrap());
        assert!(parse(&["--pod-liveness=maybe"]).is_err());
    }

    #[test]
    fn the_take_over_is_on_unless_switched_off() {
        let parse = |extra: &[&str]| parse_run(extra).map(|run| run.take_over);
        assert!(parse(&[]).unwrap());
        assert!(!parse(&["--take-over=off"]).unwrap());
        assert!(parse(&["--take-over", "on"]).unwrap());
    }
}
