//! `conclave status` (and `kubectl conclave status`): flags, then [`conclave_controller::status`]
//! once or on every change, as a table, a wide table, JSON or YAML.

use crate::{Invocation, ModeArg};
use anyhow::Context as _;
use conclave_controller::status::{self, LeaseStatus, PredictOptions, Watch};
use conclave_core::k8s::now;
use conclave_core::time::Timestamp;
use conclave_engine::{Engine, EngineConfig, Limits, default_cache_dir};
use kube::Client;
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

/// What `conclave status --help` says after the flags: namespaces, the kubectl plugin, the
/// output formats and their schema, durations.
#[must_use]
pub fn long_help() -> String {
    format!("{LONG_HELP}\n\n{}", crate::duration::HELP)
}

const LONG_HELP: &str = "\
Which namespaces: -n NS (repeatable, or NS1,NS2), or -A for all. With neither, `conclave status` \
shows every namespace, and `kubectl conclave status` shows the namespace of the kubeconfig \
context (`default` when it sets none), as `kubectl get` does.

As a kubectl plugin: put this binary on the PATH as `kubectl-conclave` (a copy or a symlink, as \
krew installs plugins); then `kubectl conclave status` takes kubectl's -n, -A, --context, \
--kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster config) and -o. \
kubectl does not pass its own flags on: write them after `kubectl conclave status`.

-o wide adds the Lease's duration, acquire time and transitions, and each candidate's age and \
when garbage collection deletes it unless it renews. -o json and -o yaml print a \
LeaseStatusList (apiVersion conclave.dev/v1alpha1), every field always present, null when \
unset, times in RFC 3339: observedAt, and items[] with namespace, name, leaseExists, strategy, \
strategySource (lease|candidates|conflict|none), holder, preferredHolder, renewTime, \
acquireTime, leaseDurationSeconds, leaseTransitions, expired, prediction {outcome \
(holds|preempt|assign|nobody|no-candidates|all-unresponsive|not-handled|unavailable), winner, \
afterPing, why} and candidates[] {name, holder, binaryVersion, emulationVersion, strategy, \
creationTime, renewTime, pingTime, state (fresh|stale|pinged|failed-ping|expired|invalid), \
healthy, note, collectedAt}. With --watch, one document per change (YAML documents start \
with ---).";

/// How `status` prints (`-o`, as kubectl spells it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The table with more columns.
    Wide,
    /// A LeaseStatusList as JSON.
    Json,
    /// A LeaseStatusList as YAML.
    Yaml,
}

/// Arguments of `conclave status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, then ~/.kube/config, then in-cluster config.
    #[arg(long, env = "CONCLAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; default: its current-context.
    #[arg(long)]
    pub context: Option<String>,
    /// Show only this namespace (repeatable); default: every namespace for `conclave status`,
    /// the context's namespace for `kubectl conclave status`.
    #[arg(
        long = "namespace",
        short = 'n',
        value_delimiter = ',',
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Show every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Output format: the table (default), `wide` (more columns), `json` or `yaml`.
    #[arg(long, short = 'o', value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
    /// Keep watching and redraw the table whenever a Lease or LeaseCandidate changes (with
    /// `-o json|yaml`: print one document per change).
    #[arg(long, short = 'w')]
    pub watch: bool,
    /// Directory of extra strategy plugins, as given to `conclave run --plugins`.
    #[arg(long, env = "CONCLAVE_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Accept plugins that import WASI, as `conclave run --allow-wasi`.
    #[arg(long, env = "CONCLAVE_ALLOW_WASI")]
    pub allow_wasi: bool,
    /// The controller's ack window: a candidate is fresh if it renewed within it.
    #[arg(long, env = "CONCLAVE_ACK_WINDOW", value_name = "DURATION", default_value = "5s", value_parser = crate::duration::parse)]
    pub ack_window: Duration,
    /// The controller's candidate expiry: candidates not renewed for this long take no part.
    #[arg(long, env = "CONCLAVE_CANDIDATE_GC_AFTER", value_name = "DURATION", default_value = "30m", value_parser = crate::duration::parse)]
    pub candidate_gc_after: Duration,
    /// The controller's `--mode`: which Leases it handles (with `auto`, whether kube-apiserver's
    /// built-in controller is active is read from the cluster).
    #[arg(long, env = "CONCLAVE_MODE", value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
}

/// Loads the strategy engine as the controller would (built-ins plus `plugins`).
fn engine(plugins: Option<PathBuf>, allow_wasi: bool) -> anyhow::Result<Engine> {
    Engine::new(EngineConfig {
        plugins_dir: plugins,
        allow_wasi,
        cache_dir: default_cache_dir(),
        default_limits: Limits::default(),
        ..EngineConfig::default()
    })
    .context("loading strategy plugins")
}

/// Runs `conclave status`, started as `invocation` (which decides the default namespaces).
pub fn run(args: StatusArgs, invocation: Invocation) -> anyhow::Result<()> {
    super::init_logging("warn", super::LogFormat::Text);
    let runtime = super::runtime()?;
    runtime.block_on(show(args, invocation))
}

async fn show(args: StatusArgs, invocation: Invocation) -> anyhow::Result<()> {
    let engine = engine(args.plugins.clone(), args.allow_wasi)?;
    let config = super::kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let namespaces = namespaces(&args, invocation, &config.default_namespace);
    let client = conclave_candidate::client(config).context("building the Kubernetes client")?;
    let mut options = PredictOptions {
        ack_window: args.ack_window,
        candidate_gc_after: args.candidate_gc_after,
        mode: args.mode.into(),
        builtin_active: false,
    };
    if !args.watch {
        options.builtin_active = builtin_active(&client).await;
        let (leases, candidates) = status::list(&client, &namespaces).await?;
        let now = now();
        let statuses = status::collect(&leases, &candidates, &engine, now, options);
        let mut stdout = std::io::stdout().lock();
        write!(
            stdout,
            "{}",
            print(&statuses, now, args.output, &namespaces)?
        )?;
        if !matches!(args.output, Some(Output::Json | Output::Yaml))
            && options.mode == conclave_core::plan::Mode::Auto
            && let Some(line) = who_elects_the_builtins_leases(&client).await
        {
            writeln!(stdout, "\n{line}")?;
        }
        return Ok(stdout.flush()?);
    }
    watch(&client, &namespaces, &engine, options, args.output).await
}

/// The namespaces to show, empty for all: `-A`, else `-n`, else every namespace for
/// `conclave status` and the context's namespace for `kubectl conclave status`, as kubectl's
/// own commands default.
fn namespaces(args: &StatusArgs, invocation: Invocation, context_namespace: &str) -> Vec<String> {
    if args.all_namespaces {
        Vec::new()
    } else if !args.namespaces.is_empty() {
        args.namespaces.clone()
    } else {
        match invocation {
            Invocation::Conclave => Vec::new(),
            Invocation::KubectlPlugin => vec![context_namespace.to_owned()],
        }
    }
}

/// The statuses as `output` asks.
fn print(
    statuses: &[LeaseStatus],
    now: Timestamp,
    output: Option<Output>,
    namespaces: &[String],
) -> anyhow::Result<String> {
    Ok(match output {
        None | Some(Output::Wide) if statuses.is_empty() => {
            let scope = match namespaces {
                [] => String::new(),
                [one] => format!(" in namespace {one}"),
                many => format!(" in namespaces {}", many.join(", ")),
            };
            format!(
                "No Leases under coordination{scope} (none has LeaseCandidates or a \
                 spec.strategy).\n"
            )
        }
        None => status::render(statuses, now),
        Some(Output::Wide) => status::render_wide(statuses, now),
        Some(Output::Json) => {
            let mut text = serde_json::to_string_pretty(&status::document(statuses, now))
                .context("writing JSON")?;
            text.push('\n');
            text
        }
        Some(Output::Yaml) => {
            serde_saphyr::to_string(&status::document(statuses, now)).context("writing YAML")?
        }
    })
}

/// Who elects the OldestEmulationVersion Leases under `--mode auto`, from the built-in election
/// controller's Lease: a Conclave replica that took it over, or a kube-apiserver; `None` when
/// the Lease cannot be read or no one holds it.
async fn who_elects_the_builtins_leases(client: &Client) -> Option<String> {
    let (namespace, name) = conclave_controller::BUILTIN_LEASE;
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), namespace);
    let lease = api.get_opt(name).await.ok()??;
    let record = conclave_core::k8s::lease_record(&lease);
    let holder = record.holder().filter(|_| !record.is_expired(now()))?;
    Some(if conclave_controller::takeover::is_conclave(holder) {
        format!(
            "OldestEmulationVersion Leases: elected by Conclave ({holder} holds \
             {namespace}/{name}: kube-apiserver's built-in election controller is taken over)"
        )
    } else {
        format!(
            "OldestEmulationVersion Leases: left to kube-apiserver's built-in election controller \
             ({holder} holds {namespace}/{name}); to have Conclave elect them, run the controller \
             with --take-over=on (chart: controller.takeOver=on)"
        )
    })
}

/// Whether kube-apiserver's built-in controller is active, as `--mode auto` reads it; a cluster
/// that does not answer counts as not active (as the controller starts).
async fn builtin_active(client: &Client) -> bool {
    conclave_controller::builtin_controller_active(client)
        .await
        .unwrap_or(false)
}

async fn watch(
    client: &Client,
    namespaces: &[String],
    engine: &Engine,
    mut options: PredictOptions,
    output: Option<Output>,
) -> anyhow::Result<()> {
    let mut watch = Watch::start(client, namespaces);
    // JSON and YAML stream one document per change, with no screen to redraw.
    let document = matches!(output, Some(Output::Json | Output::Yaml));
    let terminal = std::io::stdout().is_terminal() && !document;
    // On a terminal the ages tick every second; in a pipe only changes redraw.
    let tick = if terminal {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3600)
    };
    let mut synced = false;
    let mut last_error: Option<String> = None;
    loop {
        if synced {
            options.builtin_active = builtin_active(client).await;
            let (leases, candidates) = watch.objects();
            let now = now();
            let statuses = status::collect(&leases, &candidates, engine, now, options);
            let text = print(&statuses, now, output, namespaces)?;
            let mut stdout = std::io::stdout().lock();
            if document {
                if let Some(error) = &last_error {
                    eprintln!("watch error (retrying): {error}");
                }
                if output == Some(Output::Yaml) {
                    let _ = writeln!(stdout, "---");
                }
                let _ = write!(stdout, "{text}");
            } else {
                let stamp = jiff::Timestamp::now().strftime("%H:%M:%S");
                if terminal {
                    // Clear the screen and home the cursor, then draw.
                    let _ = write!(stdout, "\x1b[H\x1b[2J");
                }
                let _ = writeln!(
                    stdout,
                    "conclave status at {stamp} (watching; Ctrl-C to stop)"
                );
                if let Some(error) = &last_error {
                    let _ = writeln!(stdout, "watch error (retrying): {error}");
                }
                let _ = writeln!(stdout, "\n{text}");
            }
            let _ = stdout.flush();
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            () = tokio::time::sleep(tick) => {}
            event = watch.changed() => match event {
                Some(Ok(())) => {
                    last_error = None;
                    // Let a burst of events settle before drawing once.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(Err(error)) => {
                    last_error = Some(error);
                }
                None => anyhow::bail!("the watches ended"),
            },
        }
        if !synced {
            // The stores fill as the streams are polled; draw once every initial list is in.
            synced = watch.is_synced();
        }
    }
}
