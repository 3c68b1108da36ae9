//! The engine's two error types, one per phase, as Kubewarden's evaluator keeps them: a
//! [`LoadError`] means a plugin (or the engine itself) could not be set up, and is reported once,
//! at start; a [`CallError`] means one election could not be decided, and is counted per call.

use std::path::PathBuf;
use std::time::Duration;

/// Why the engine, or one of its plugins, could not be loaded. Each variant names the plugin (a
/// file path or `builtin:NAME`) and, where possible, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The wasmtime engine, its epoch ticker or the host interface could not be set up.
    #[error("cannot set up the strategy engine: {what}")]
    Engine {
        /// The step that failed.
        what: &'static str,
        /// The cause.
        #[source]
        source: wasmtime::Error,
    },
    /// The engine's default limits are outside the engine's ceilings.
    #[error("invalid default plugin limits: {reason}")]
    DefaultLimits {
        /// What is out of range.
        reason: String,
    },
    /// The plugins directory could not be listed.
    #[error("cannot read the plugins directory {}", dir.display())]
    PluginsDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A plugin file or its sidecar could not be read.
    #[error("cannot load plugin {plugin}: cannot read {}", path.display())]
    Read {
        /// The plugin.
        plugin: String,
        /// The file that could not be read.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The sidecar (`NAME.json`) is not valid or its limits are out of range.
    #[error("cannot load plugin {plugin}: invalid sidecar {}: {reason}", path.display())]
    Sidecar {
        /// The plugin.
        plugin: String,
        /// The sidecar file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The component's digest differs from the one its sidecar pins.
    #[error(
        "cannot load plugin {plugin}: its sha256 is {actual}, but its sidecar expects {expected}"
    )]
    Sha256Mismatch {
        /// The plugin.
        plugin: String,
        /// The component's digest.
        actual: String,
        /// The sidecar's digest.
        expected: String,
    },
    /// The bytes are not a WebAssembly component wasmtime can compile.
    #[error("cannot load plugin {plugin}: not a valid WebAssembly component")]
    Compile {
        /// The plugin.
        plugin: String,
        /// wasmtime's reason.
        #[source]
        source: wasmtime::Error,
    },
    /// The component imports something other than the Conclave host interface.
    #[error(
        "cannot load plugin {plugin}: it imports {import:?}, which Conclave does not provide; {hint}"
    )]
    ForbiddenImport {
        /// The plugin.
        plugin: String,
        /// The first offending import.
        import: String,
        /// What the operator or the plugin's author can do about it.
        hint: String,
    },
    /// The component does not export a `conclave:strategy` world this host supports, or cannot
    /// be linked against the host interface.
    #[error("cannot load plugin {plugin}: {what}")]
    Link {
        /// The plugin.
        plugin: String,
        /// What was expected.
        what: String,
        /// wasmtime's reason.
        #[source]
        source: wasmtime::Error,
    },
    /// `info()` failed (trapped, ran out of time or memory).
    #[error("cannot load plugin {plugin}: info() failed")]
    Info {
        /// The plugin.
        plugin: String,
        /// How the call failed.
        #[source]
        source: Box<CallError>,
    },
    /// `info()` answered something the host cannot use (no strategy name, an empty or overlong
    /// one, an overlong description or version).
    #[error("cannot load plugin {plugin}: info() {reason}")]
    InvalidInfo {
        /// The plugin.
        plugin: String,
        /// What is wrong with the answer.
        reason: String,
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
}

impl LoadError {
    /// A short, stable label for metrics and logs.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Engine { .. } => "engine",
            Self::DefaultLimits { .. } => "default_limits",
            Self::PluginsDir { .. } | Self::Read { .. } => "read",
            Self::Sidecar { .. } => "sidecar",
            Self::Sha256Mismatch { .. } => "sha256_mismatch",
            Self::Compile { .. } => "compile",
            Self::ForbiddenImport { .. } => "forbidden_import",
            Self::Link { .. } => "link",
            Self::Info { .. } | Self::InvalidInfo { .. } => "info",
            Self::DuplicateStrategy { .. } => "duplicate_strategy",
        }
    }
}

/// Why a loaded plugin could not be put in service ([`Engine::install`](crate::Engine::install)).
/// The engine keeps serving what it served before.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    /// The plugin claims a strategy a built-in plugin implements; built-ins cannot be replaced.
    #[error("{plugin} claims strategy {strategy:?}, which the built-in {holder} implements")]
    ShadowsBuiltin {
        /// The contested strategy.
        strategy: String,
        /// The built-in plugin.
        holder: String,
        /// The refused plugin.
        plugin: String,
    },
    /// The plugin claims a strategy another installed plugin implements.
    #[error("{plugin} claims strategy {strategy:?}, which {holder} already implements")]
    StrategyConflict {
        /// The contested strategy.
        strategy: String,
        /// The plugin that serves it.
        holder: String,
        /// The refused plugin.
        plugin: String,
    },
    /// The key names a built-in plugin, which cannot be replaced.
    #[error("{key} is a built-in plugin and cannot be replaced")]
    BuiltinKey {
        /// The key.
        key: String,
    },
}

/// Why one election could not be decided. The engine and its other plugins are unaffected; each
/// variant has a stable [`label`](Self::label) for metrics and events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No loaded plugin implements the strategy.
    #[error("no plugin implements strategy {strategy:?} (known: {})", known.join(", "))]
    UnknownStrategy {
        /// The requested strategy.
        strategy: String,
        /// The strategies the engine knows.
        known: Vec<String>,
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
        /// The trap and its backtrace, cut to a few KiB.
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
    /// The request cannot be handed to the plugin (two candidates share a name, so a position
    /// would not name one identity).
    #[error("cannot ask strategy {strategy:?}: {reason}")]
    InvalidRequest {
        /// The strategy.
        strategy: String,
        /// What is wrong with the request.
        reason: String,
    },
    /// The plugin's `elect` returned an error.
    #[error("strategy {strategy:?} could not decide: {message}")]
    PluginError {
        /// The strategy.
        strategy: String,
        /// The plugin's message, cut to [`MAX_PLUGIN_TEXT`](crate::MAX_PLUGIN_TEXT) bytes.
        message: String,
    },
    /// The plugin named someone who is not an eligible candidate (or, under 0.2, a position past
    /// the end); the answer is not applied.
    #[error(
        "strategy {strategy:?} elected {answer:?}, which is not one of the eligible candidates"
    )]
    InvalidAnswer {
        /// The strategy.
        strategy: String,
        /// The rejected answer, cut to [`MAX_PLUGIN_TEXT`](crate::MAX_PLUGIN_TEXT) bytes.
        answer: String,
    },
}

impl CallError {
    /// A short, stable label for metrics and events.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::UnknownStrategy { .. } => "unknown_strategy",
            Self::LimitExceeded { .. } => "limit_exceeded",
            Self::Memory { .. } => "memory",
            Self::Trap { .. } => "trap",
            Self::Instantiate { .. } => "instantiate",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::PluginError { .. } => "plugin_error",
            Self::InvalidAnswer { .. } => "invalid_answer",
        }
    }
}
