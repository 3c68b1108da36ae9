//! The strategy engine: runs each election through a sandboxed WebAssembly component.
//!
//! This is the only crate that names wasmtime types. The rest of Conclave sees an [`Engine`]
//! built from an [`EngineConfig`], asks it [`Engine::elect`] with a plain
//! [`ElectionRequest`](conclave_core::request::ElectionRequest), and gets back the name of an
//! eligible candidate, `None`, or an [`EngineError`] whose [`kind`](EngineError::kind) labels a
//! metric.
//!
//! Vocabulary:
//! - a **plugin** is one component (built in, or a `.wasm` file from `--plugins DIR`); it implements
//!   one or more **strategies** (the names in `info()`);
//! - a plugin is compiled once (or loaded from the on-disk cache), checked and linked once into a
//!   [`StrategyPre`](plugin::StrategyPre) (wasmtime's `InstancePre`); every election instantiates
//!   it afresh from the pooling allocator under per-call [`Limits`], so no state survives a call.
//!
//! The answer is checked: a name that is not one of the request's candidates is an
//! [`EngineError::InvalidAnswer`] and is never applied.
// `deny` rather than `forbid`: the compiled-code cache needs one audited `unsafe` call
// (`compile::load_cached`), allowed there and nowhere else.
#![deny(unsafe_code)]

mod bindings;
mod compile;
mod convert;
mod limits;
mod plugin;
mod registry;

pub use compile::{LoadStats, default_cache_dir};
pub use limits::Limits;
pub use plugin::{PluginInfo, PluginSource};

use conclave_core::request::ElectionRequest;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
}

/// The strategy engine: a registry of loaded plugins by strategy name.
///
/// Cheap to clone and share (`Send + Sync`); [`elect`](Self::elect) is synchronous and CPU-bound,
/// so call it from async code through `tokio::task::spawn_blocking`.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<registry::Registry>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("strategies", &self.inner.strategy_names())
            .finish()
    }
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
    /// Fails if any plugin cannot be loaded (bad file, forbidden import, sha256 mismatch, invalid
    /// sidecar, `info()` failing) or if two plugins claim the same strategy name: a controller must
    /// not start with a registry that differs from what the operator configured.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        let registry =
            registry::Registry::load(&config, true, config.plugins_dir.as_deref(), None)?;
        Ok(Self {
            inner: Arc::new(registry),
        })
    }

    /// Loads exactly one plugin file (and its sidecar, if any) and no built-ins; for testing,
    /// inspecting and benchmarking a plugin on its own. `config.plugins_dir` is ignored.
    pub fn from_file(config: EngineConfig, path: &Path) -> Result<Self, EngineError> {
        let registry = registry::Registry::load(&config, false, None, Some(path))?;
        Ok(Self {
            inner: Arc::new(registry),
        })
    }

    /// Whether a plugin implements `strategy`.
    #[must_use]
    pub fn has_strategy(&self, strategy: &str) -> bool {
        self.inner.get(strategy).is_some()
    }

    /// Every strategy name the engine can run, sorted by name.
    #[must_use]
    pub fn strategies(&self) -> Vec<StrategyInfo> {
        self.inner
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
        self.inner.plugins().map(|plugin| plugin.info()).collect()
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
    ) -> Result<Option<String>, EngineError> {
        let plugin = self
            .inner
            .get(strategy)
            .ok_or_else(|| EngineError::UnknownStrategy {
                strategy: strategy.to_owned(),
                known: self.inner.strategy_names(),
            })?;
        let answer = plugin.elect(strategy, request)?;
        match answer {
            Some(name) if !request.has_candidate(&name) => Err(EngineError::InvalidAnswer {
                strategy: strategy.to_owned(),
                answer: name,
            }),
            answer => Ok(answer),
        }
    }
}

/// Why the engine could not load a plugin or decide an election.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No loaded plugin implements the strategy.
    #[error("no plugin implements strategy {strategy:?} (known: {})", known.join(", "))]
    UnknownStrategy {
        /// The requested strategy.
        strategy: String,
        /// The strategies the engine knows.
        known: Vec<String>,
    },
    /// A plugin could not be loaded; `plugin` names it (a file path or `builtin:NAME`).
    #[error("cannot load plugin {plugin}: {reason}")]
    Load {
        /// The plugin.
        plugin: String,
        /// What is wrong and, where possible, what to do.
        reason: String,
    },
    /// The component imports something other than the Conclave host interface.
    #[error(
        "cannot load plugin {plugin}: it imports {import:?}, which Conclave does not provide{hint}"
    )]
    ForbiddenImport {
        /// The plugin.
        plugin: String,
        /// The first offending import.
        import: String,
        /// What the operator can do about it.
        hint: &'static str,
    },
    /// Two plugins claim the same strategy name.
    #[error("strategy {strategy:?} is claimed by both {first} and {second}; remove one of them")]
    DuplicateStrategy {
        /// The contested name.
        strategy: String,
        /// The plugin loaded first.
        first: String,
        /// The plugin loaded second.
        second: String,
    },
    /// The call ran out of its CPU time budget.
    #[error("strategy {strategy:?} exceeded its time limit of {limit:?}")]
    LimitExceeded {
        /// The strategy.
        strategy: String,
        /// The budget.
        limit: Duration,
    },
    /// The plugin tried to use more memory (or table space) than allowed.
    #[error("strategy {strategy:?} exceeded its memory limit: {detail}")]
    Memory {
        /// The strategy.
        strategy: String,
        /// Which limit, and by how much.
        detail: String,
    },
    /// The plugin trapped (a panic, `unreachable`, an out-of-bounds access...).
    #[error("strategy {strategy:?} trapped: {message}")]
    Trap {
        /// The strategy.
        strategy: String,
        /// The trap and its backtrace.
        message: String,
    },
    /// The plugin could not be instantiated (e.g. every pooled instance slot is busy).
    #[error("cannot instantiate the plugin for strategy {strategy:?}: {message}")]
    Instantiate {
        /// The strategy.
        strategy: String,
        /// Why.
        message: String,
    },
    /// The plugin's `elect` returned an error.
    #[error("strategy {strategy:?} could not decide: {message}")]
    PluginError {
        /// The strategy.
        strategy: String,
        /// The plugin's message.
        message: String,
    },
    /// The plugin named someone who is not an eligible candidate; the answer is not applied.
    #[error(
        "strategy {strategy:?} elected {answer:?}, which is not one of the eligible candidates"
    )]
    InvalidAnswer {
        /// The strategy.
        strategy: String,
        /// The rejected answer.
        answer: String,
    },
}

impl EngineError {
    /// A short, stable label for metrics and events.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::UnknownStrategy { .. } => "unknown_strategy",
            Self::Load { .. } | Self::ForbiddenImport { .. } | Self::DuplicateStrategy { .. } => {
                "load"
            }
            Self::LimitExceeded { .. } => "limit_exceeded",
            Self::Memory { .. } => "memory",
            Self::Trap { .. } => "trap",
            Self::Instantiate { .. } => "instantiate",
            Self::PluginError { .. } => "plugin_error",
            Self::InvalidAnswer { .. } => "invalid_answer",
        }
    }
}
