//! The strategy engine: runs each election through a sandboxed WebAssembly component.
//!
//! This is the only crate that names wasmtime types. The rest of Conclave sees an [`Engine`]
//! built from an [`EngineConfig`], asks it [`Engine::elect`] with a plain
//! [`ElectionRequest`](conclave_core::request::ElectionRequest), and gets back the name of an
//! eligible candidate, `None`, or a [`CallError`] whose [`label`](CallError::label) labels a
//! metric. Setting the engine up fails with a [`LoadError`] instead, which names the plugin.
//!
//! Vocabulary:
//! - a **plugin** is one component (built in, or a `.wasm` file from `--plugins DIR`); it implements
//!   one or more **strategies** (the names in `info()`);
//! - a plugin is compiled once (or loaded from the on-disk cache), checked and linked once into a
//!   [`StrategyPre`](contract::StrategyPre) (wasmtime's `InstancePre`); every election instantiates
//!   it afresh from the pooling allocator under per-call [`Limits`], so no state survives a call.
//!
//! The answer is checked: a name that is not one of the request's candidates is an
//! [`CallError::InvalidAnswer`] and is never applied. Everything a plugin hands back is bounded:
//! error messages, traps and log lines are cut to [`MAX_PLUGIN_TEXT`] bytes (saying so), and an
//! answer longer than any candidate name is invalid.
// `deny` rather than `forbid`: two audited `unsafe` calls are allowed where they are made, and
// nowhere else: loading compiled code from the cache (`compile::load_cached`) and calling `elect`
// without checking its type again on every call (`contract::elect_func`).
#![deny(unsafe_code)]

mod bindings;
mod compile;
mod contract;
mod convert;
mod error;
mod imports;
mod limits;
mod plugin;
mod registry;
mod sandbox;

pub use compile::{LoadStats, default_cache_dir};
pub use error::{CallError, InstallError, LoadError};
pub use limits::{LimitOverrides, Limits};
pub use plugin::{PluginCounts, PluginInfo, PluginSource};
pub use registry::PluginOptions;

use conclave_core::request::ElectionRequest;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The most bytes of text the engine passes on from a plugin: an error message, a trap's message,
/// one log line. Longer text is cut at a character boundary and marked as cut.
pub const MAX_PLUGIN_TEXT: usize = 4096;

/// Where one call's time went, for `conclave strategy bench --phases` and profiling. Durations
/// add up over the calls a value is passed to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallPhases {
    /// Turning the request into the plugin's WIT values (host copies).
    pub convert: Duration,
    /// Creating the store: limits, CPU deadline, epoch ticker.
    pub store: Duration,
    /// Instantiating the component from the pool (memory image, tables, instance state).
    pub instantiate: Duration,
    /// The `elect` call: lowering the request into guest memory, the plugin's code, lifting the
    /// answer.
    pub call: Duration,
    /// Dropping the instance: resetting its memory and returning its slot to the pool.
    pub teardown: Duration,
}

impl CallPhases {
    /// The sum of all phases.
    #[must_use]
    pub fn total(&self) -> Duration {
        self.convert + self.store + self.instantiate + self.call + self.teardown
    }
}

/// How to build an [`Engine`].
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// A directory of extra plugins (`NAME.wasm`, each with an optional `NAME.json` sidecar);
    /// loaded in addition to the built-in ones.
    pub plugins_dir: Option<PathBuf>,
    /// Accept components that import WASI (e.g. plugins written in other languages). Their WASI
    /// imports are satisfied by a deny-all context: no directories, sockets or environment, a clock
    /// fixed at the request's `now`, and stdout/stderr into the host log. Without it such a
    /// component is refused at load.
    pub allow_wasi: bool,
    /// Where to cache compiled code, keyed by the component's sha256 and the wasmtime version and
    /// configuration. `None` compiles every plugin at every start.
    pub cache_dir: Option<PathBuf>,
    /// The per-call limits for plugins whose sidecar sets none.
    pub default_limits: Limits,
    /// Limits the operator set explicitly (command-line flags): they win over every plugin's
    /// sidecar, with a warning naming each value they replace.
    pub limit_overrides: LimitOverrides,
}

/// The strategy engine: a registry of loaded plugins by strategy name.
///
/// Cheap to clone and share (`Send + Sync`); every clone sees the same plugins.
/// [`elect`](Self::elect) is synchronous and CPU-bound, so call it from async code through
/// `tokio::task::spawn_blocking`.
///
/// Plugins can be added, replaced and removed while elections run: [`prepare`](Self::prepare)
/// compiles and checks one off the election path, [`install`](Self::install) swaps it in
/// atomically under a key, [`uninstall`](Self::uninstall) takes it out. A call in flight
/// finishes on the plugin it started with.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<registry::Registry>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("strategies", &self.inner.snapshot().strategy_names())
            .finish()
    }
}

/// A plugin compiled, linked and checked by [`Engine::prepare`], not yet in service.
pub struct PreparedPlugin {
    plugin: Arc<plugin::Plugin>,
}

impl PreparedPlugin {
    /// What it is: its strategies, contract version, digest, limits.
    #[must_use]
    pub fn info(&self) -> Arc<PluginInfo> {
        self.plugin.info()
    }

    /// Runs one election with no candidates for each of its strategies, under its configured
    /// settings, as a check before it serves: the contract's answer is "nobody", and a plugin
    /// that fails instead (its settings are missing or invalid, typically) would fail every
    /// election of its Leases.
    pub fn trial(&self) -> Result<(), CallError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        for strategy in &self.plugin.info().strategies {
            let request = ElectionRequest {
                lease: conclave_core::request::LeaseView {
                    namespace: "default".into(),
                    name: "trial".into(),
                    strategy: strategy.clone(),
                    expired: true,
                    ..conclave_core::request::LeaseView::default()
                },
                now: conclave_core::time::Timestamp::from_secs(
                    i64::try_from(now).unwrap_or(i64::MAX),
                ),
                settings: String::new(),
                candidates: Vec::new(),
            };
            self.plugin.elect(strategy, &request, None)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for PreparedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedPlugin")
            .field("source", &self.plugin.info().source)
            .finish_non_exhaustive()
    }
}

/// What [`Engine::sync_plugins_dir`] did.
#[derive(Debug, Default)]
pub struct DirSync {
    /// Files loaded and put in service (new or changed).
    pub loaded: Vec<PathBuf>,
    /// Files gone, whose plugins were taken out of service.
    pub removed: Vec<PathBuf>,
    /// Files (or the directory) that could not be loaded, and why; a changed file's last good
    /// version stays in service.
    pub failed: Vec<(PathBuf, String)>,
}

/// One strategy name the engine can run, and the plugin implementing it.
#[derive(Debug, Clone)]
pub struct StrategyInfo {
    /// The strategy name, as in `spec.strategy`.
    pub name: String,
    /// The plugin that implements it.
    pub plugin: Arc<PluginInfo>,
}

impl Engine {
    /// Loads the built-in plugins and every plugin in `config.plugins_dir`.
    ///
    /// Fails with a [`LoadError`] if any plugin cannot be loaded (bad file, forbidden import, sha256 mismatch, invalid
    /// sidecar, `info()` failing) or if two plugins claim the same strategy name: a controller must
    /// not start with a registry that differs from what the operator configured.
    pub fn new(config: EngineConfig) -> Result<Self, LoadError> {
        let registry =
            registry::Registry::load(&config, true, config.plugins_dir.as_deref(), None)?;
        Ok(Self {
            inner: Arc::new(registry),
        })
    }

    /// Loads exactly one plugin file (and its sidecar, if any) and no built-ins; for testing,
    /// inspecting and benchmarking a plugin on its own. `config.plugins_dir` is ignored.
    pub fn from_file(config: EngineConfig, path: &Path) -> Result<Self, LoadError> {
        let registry = registry::Registry::load(&config, false, None, Some(path))?;
        Ok(Self {
            inner: Arc::new(registry),
        })
    }

    /// Whether a plugin implements `strategy`.
    #[must_use]
    pub fn has_strategy(&self, strategy: &str) -> bool {
        self.inner.snapshot().get(strategy).is_some()
    }

    /// Whether the answer of the plugin implementing `strategy` may depend on the request's
    /// `now`: what a 0.4 plugin declared (`reads.now`); `true` for a plugin built against 0.3 or
    /// earlier, which cannot say, and for a strategy no plugin implements. The built-in plugin
    /// declares `false`. The controller asks a plugin that declares `false` nothing for a renewal
    /// that only moved the clock.
    #[must_use]
    pub fn reads_now(&self, strategy: &str) -> bool {
        self.inner
            .snapshot()
            .get(strategy)
            .is_none_or(|plugin| plugin.reads_now())
    }

    /// Every strategy name the engine can run, sorted by name.
    #[must_use]
    pub fn strategies(&self) -> Vec<StrategyInfo> {
        self.inner
            .snapshot()
            .strategies()
            .map(|(name, plugin)| StrategyInfo {
                name: name.to_owned(),
                plugin: plugin.info(),
            })
            .collect()
    }

    /// The loaded plugins, each once, in load order (built-ins first).
    #[must_use]
    pub fn plugins(&self) -> Vec<Arc<PluginInfo>> {
        self.inner
            .snapshot()
            .plugins()
            .map(|plugin| plugin.info())
            .collect()
    }

    /// Compiles, links and checks a plugin (calling its `info()`) without putting it in service,
    /// under the engine's configuration (`allow_wasi`, the code cache, default and operator
    /// limits) and `options` (its settings, limits, pinned sha256).
    ///
    /// CPU-bound, possibly for seconds: call it through `tokio::task::spawn_blocking`. Elections
    /// keep running on the plugins in service meanwhile.
    pub fn prepare(
        &self,
        source: PluginSource,
        bytes: &[u8],
        options: PluginOptions,
    ) -> Result<PreparedPlugin, LoadError> {
        self.inner
            .prepare(source, bytes, options)
            .map(|plugin| PreparedPlugin { plugin })
    }

    /// Puts a prepared plugin in service under `key` (a name of the caller's choice, e.g.
    /// `strategyplugin/NAME`), replacing what `key` served before, atomically: the next call of
    /// any of its strategies runs it, calls in flight finish on the plugin they started with.
    ///
    /// Refused, with the engine unchanged, when one of its strategies is implemented by a
    /// built-in ([`InstallError::ShadowsBuiltin`]) or by a plugin under another key
    /// ([`InstallError::StrategyConflict`]). Returns the plugin it replaced.
    pub fn install(
        &self,
        key: &str,
        plugin: PreparedPlugin,
    ) -> Result<Option<Arc<PluginInfo>>, InstallError> {
        let replaced = self.inner.install(key, plugin.plugin)?;
        Ok(replaced.map(|plugin| plugin.info()))
    }

    /// Takes the plugin under `key` out of service; its strategies become unknown. Returns it,
    /// or `None` if nothing (or a built-in, which cannot be removed) is under `key`.
    pub fn uninstall(&self, key: &str) -> Option<Arc<PluginInfo>> {
        self.inner.uninstall(key).map(|plugin| plugin.info())
    }

    /// The plugin in service under `key`, with how many elections it decided and failed.
    #[must_use]
    pub fn installed(&self, key: &str) -> Option<(Arc<PluginInfo>, PluginCounts)> {
        self.inner
            .snapshot()
            .keyed()
            .find(|(installed, _)| *installed == key)
            .map(|(_, plugin)| (plugin.info(), plugin.counts()))
    }

    /// Brings the plugins directory's plugins in service up to date with the directory: loads a
    /// new or changed `.wasm` (or sidecar) and installs it, removes the plugin of a deleted file,
    /// and leaves the last good version in service when a changed file does not load. Does
    /// nothing without a plugins directory.
    ///
    /// Reads and hashes every file (a ConfigMap volume replaces files without changing their
    /// modification time) and compiles what changed: call it through
    /// `tokio::task::spawn_blocking`.
    pub fn sync_plugins_dir(&self) -> DirSync {
        match self.inner.config().plugins_dir.clone() {
            Some(dir) => self.inner.sync_dir(&dir),
            None => DirSync::default(),
        }
    }

    /// Decides one election with the plugin implementing `strategy`.
    ///
    /// The plugin sees `request.settings` if it is not empty, otherwise the settings configured
    /// for it (its sidecar). Returns the elected candidate's name, which is guaranteed to be one of
    /// `request.candidates`, or `None` when the plugin elects nobody. A plugin that fails, exceeds a
    /// limit or answers with a name that is not a candidate yields an error; the engine and its
    /// other plugins are unaffected.
    pub fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
    ) -> Result<Option<String>, CallError> {
        self.decide(strategy, request, None)
    }

    /// [`elect`](Self::elect), adding the time each phase of the call took to `phases`.
    pub fn elect_with_phases(
        &self,
        strategy: &str,
        request: &ElectionRequest,
        phases: &mut CallPhases,
    ) -> Result<Option<String>, CallError> {
        self.decide(strategy, request, Some(phases))
    }

    fn decide(
        &self,
        strategy: &str,
        request: &ElectionRequest,
        phases: Option<&mut CallPhases>,
    ) -> Result<Option<String>, CallError> {
        let snapshot = self.inner.snapshot();
        let plugin = snapshot
            .get(strategy)
            .ok_or_else(|| CallError::UnknownStrategy {
                strategy: strategy.to_owned(),
                known: snapshot.strategy_names(),
            })?;
        let plugin = Arc::clone(plugin);
        // The call holds its plugin, not the snapshot: a swap meanwhile frees the rest.
        drop(snapshot);
        let answer = match plugin.elect(strategy, request, phases) {
            Ok(Some(name)) if !request.has_candidate(&name) => Err(CallError::InvalidAnswer {
                strategy: strategy.to_owned(),
                answer: name,
            }),
            answer => answer,
        };
        plugin.count(answer.is_ok());
        answer
    }
}
