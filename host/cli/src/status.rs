//! `conclave status`: flags, then [`conclave_controller::status`] once or on every change.

use crate::ModeArg;
use anyhow::Context as _;
use conclave_controller::status::{self, PredictOptions, Watch};
use conclave_core::k8s::now;
use conclave_engine::{Engine, EngineConfig, Limits, default_cache_dir};
use kube::Client;
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `conclave status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, then ~/.kube/config, then in-cluster config.
    #[arg(long, env = "CONCLAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Show only this namespace (repeatable); default: every namespace.
    #[arg(long = "namespace", short = 'n', value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Keep watching and redraw the table whenever a Lease or LeaseCandidate changes.
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
    })
    .context("loading strategy plugins")
}

/// Runs `conclave status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    super::init_logging("warn", super::LogFormat::Text);
    let runtime = super::runtime()?;
    runtime.block_on(show(args))
}

async fn show(args: StatusArgs) -> anyhow::Result<()> {
    let engine = engine(args.plugins.clone(), args.allow_wasi)?;
    let client = super::kube_client(args.kubeconfig.as_deref()).await?;
    let mut options = PredictOptions {
        ack_window: args.ack_window,
        candidate_gc_after: args.candidate_gc_after,
        mode: args.mode.into(),
        builtin_active: false,
    };
    if !args.watch {
        options.builtin_active = builtin_active(&client).await;
        let (leases, candidates) = status::list(&client, &args.namespaces).await?;
        let now = now();
        let statuses = status::collect(&leases, &candidates, &engine, now, options);
        print!("{}", status::render(&statuses, now));
        return Ok(());
    }
    watch(&client, &args.namespaces, &engine, options).await
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
) -> anyhow::Result<()> {
    let mut watch = Watch::start(client, namespaces);
    let terminal = std::io::stdout().is_terminal();
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
            let text = status::render(
                &status::collect(&leases, &candidates, engine, now, options),
                now,
            );
            let stamp = jiff::Timestamp::now().strftime("%H:%M:%S");
            let mut stdout = std::io::stdout().lock();
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
