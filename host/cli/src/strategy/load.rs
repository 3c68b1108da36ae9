//! The plugin a `conclave strategy` subcommand names, loaded: the engine options and per-call
//! limits every subcommand shares, and [`Target`], a `.wasm` file or a built-in strategy loaded
//! as the controller would load it.

use anyhow::{Context as _, bail};
use clap::Args;
use conclave_engine::{
    Engine, EngineConfig, LimitOverrides, Limits, PluginInfo, default_cache_dir,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Engine options shared by the `strategy` subcommands.
#[derive(Debug, Args)]
pub struct EngineArgs {
    /// Accept plugins that import WASI, giving them a deny-all WASI context.
    #[arg(long, env = "CONCLAVE_ALLOW_WASI")]
    allow_wasi: bool,
    /// Cache compiled plugin code in this directory (keyed by sha256 and wasmtime version);
    /// default: the cache `conclave run` uses, `$XDG_CACHE_HOME/conclave/wasm`, else
    /// `~/.cache/conclave/wasm`.
    #[arg(long, env = "CONCLAVE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
}

impl EngineArgs {
    fn config(&self) -> EngineConfig {
        EngineConfig {
            plugins_dir: None,
            allow_wasi: self.allow_wasi,
            cache_dir: self.cache_dir.clone().or_else(default_cache_dir),
            default_limits: Limits::default(),
            limit_overrides: self.limits.overrides(),
        }
    }
}

/// Per-call plugin limits set on the command line: each replaces the same limit in every
/// plugin's sidecar (with a warning that says so); unset, the sidecar's or the default applies.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// CPU time one call may take, in milliseconds (default: the sidecar's `time_ms`, else 10).
    #[arg(long, env = "CONCLAVE_PLUGIN_TIME_LIMIT_MS", value_name = "MS")]
    time_limit_ms: Option<u64>,
    /// Linear memory one call may grow to, in MiB (default: the sidecar's `memory_bytes`, else 16).
    #[arg(long, env = "CONCLAVE_PLUGIN_MEMORY_LIMIT_MIB", value_name = "MIB")]
    memory_limit_mib: Option<usize>,
    /// Elements a table may grow to (default: the sidecar's `table_elements`, else 10000).
    #[arg(long, env = "CONCLAVE_PLUGIN_TABLE_LIMIT", value_name = "ELEMENTS")]
    table_limit: Option<usize>,
    /// Core instances, tables and memories one instantiation may create (default: the sidecar's
    /// `instances`, else 64; at most 128).
    #[arg(long, env = "CONCLAVE_PLUGIN_INSTANCE_LIMIT", value_name = "COUNT")]
    instance_limit: Option<usize>,
}

impl LimitArgs {
    /// The limits given, as overrides of every sidecar.
    pub fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            time_ms: self.time_limit_ms,
            memory_bytes: self.memory_limit_mib.map(|mib| mib.saturating_mul(1 << 20)),
            table_elements: self.table_limit,
            instances: self.instance_limit,
        }
    }
}

/// A loaded plugin and the strategy name to call it by.
pub(super) struct Target {
    pub(super) engine: Engine,
    pub(super) plugin: Arc<PluginInfo>,
    /// The name given on the command line, if it was a strategy name rather than a file.
    named: Option<String>,
}

impl Target {
    /// `plugin` is a path if it ends in `.wasm` or names an existing file, else a built-in name.
    pub(super) fn load(plugin: &str, args: &EngineArgs) -> anyhow::Result<Self> {
        let path = Path::new(plugin);
        if plugin.ends_with(".wasm") || path.is_file() {
            return Self::load_file(path, args);
        }
        let engine = Engine::new(args.config())?;
        let Some(info) = engine
            .strategies()
            .into_iter()
            .find(|s| s.name == plugin)
            .map(|s| s.plugin)
        else {
            let known: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
            bail!(
                "{plugin:?} is neither a .wasm file nor a built-in strategy (built-ins: {})",
                known.join(", ")
            );
        };
        Ok(Self {
            engine,
            plugin: info,
            named: Some(plugin.to_owned()),
        })
    }

    /// Loads exactly the plugin file at `path` (and its sidecar, if any).
    pub(super) fn load_file(path: &Path, args: &EngineArgs) -> anyhow::Result<Self> {
        let engine = Engine::from_file(args.config(), path)?;
        let info = engine
            .plugins()
            .into_iter()
            .next()
            .context("the plugin file loaded no plugin")?;
        Ok(Self {
            engine,
            plugin: info,
            named: None,
        })
    }

    /// The strategy to elect under: `preferred` if given, else the name used on the command line,
    /// else the plugin's first strategy.
    pub(super) fn strategy(&self, preferred: Option<&str>) -> String {
        preferred
            .map(str::to_owned)
            .or_else(|| self.named.clone())
            .unwrap_or_else(|| self.plugin.strategies[0].clone())
    }
}
