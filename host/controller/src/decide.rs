//! The seam between the controller and the strategy engine: a small trait, implemented for
//! [`Engine`], so the controller can be tested with a plain Rust decider.

use conclave_core::request::ElectionRequest;
use conclave_engine::{CallError, Engine};

/// Why a decision failed; `kind` labels metrics and events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecideError {
    /// What kind of failure it was (its [`DecideErrorKind::label`] is the metric label).
    pub kind: DecideErrorKind,
    /// What went wrong, for the event and the log.
    pub message: String,
}

/// The kinds of [`DecideError`]: one per kind of the engine's [`CallError`], whose labels they
/// keep, plus a call that did not complete. The `kind` label of `conclave_plugin_errors`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DecideErrorKind {
    /// No loaded plugin implements the strategy ([`CallError::UnknownStrategy`]).
    UnknownStrategy,
    /// The call ran out of its CPU time budget ([`CallError::LimitExceeded`]).
    LimitExceeded,
    /// The plugin tried to use more memory than allowed ([`CallError::Memory`]).
    Memory,
    /// The plugin trapped ([`CallError::Trap`]).
    Trap,
    /// The plugin could not be instantiated ([`CallError::Instantiate`]).
    Instantiate,
    /// The request could not be handed to the plugin ([`CallError::InvalidRequest`]).
    InvalidRequest,
    /// The plugin's `elect` returned an error ([`CallError::PluginError`]).
    PluginError,
    /// The plugin named someone who is not an eligible candidate ([`CallError::InvalidAnswer`]).
    InvalidAnswer,
    /// The decider panicked, or its blocking task was cancelled, before it answered.
    Panic,
}

impl DecideErrorKind {
    /// The metric label: [`CallError::label`] for the engine's kinds, `panic` for [`Self::Panic`].
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::UnknownStrategy => "unknown_strategy",
            Self::LimitExceeded => "limit_exceeded",
            Self::Memory => "memory",
            Self::Trap => "trap",
            Self::Instantiate => "instantiate",
            Self::InvalidRequest => "invalid_request",
            Self::PluginError => "plugin_error",
            Self::InvalidAnswer => "invalid_answer",
            Self::Panic => "panic",
        }
    }
}

impl std::fmt::Display for DecideErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl From<&CallError> for DecideErrorKind {
    fn from(error: &CallError) -> Self {
        match error {
            CallError::UnknownStrategy { .. } => Self::UnknownStrategy,
            CallError::LimitExceeded { .. } => Self::LimitExceeded,
            CallError::Memory { .. } => Self::Memory,
            CallError::Trap { .. } => Self::Trap,
            CallError::Instantiate { .. } => Self::Instantiate,
            CallError::InvalidRequest { .. } => Self::InvalidRequest,
            CallError::PluginError { .. } => Self::PluginError,
            CallError::InvalidAnswer { .. } => Self::InvalidAnswer,
        }
    }
}

/// Decides elections: names the best candidate of a request under a strategy.
///
/// Implementations are synchronous and may be CPU-bound; the controller calls them through
/// `tokio::task::spawn_blocking`.
pub trait Decide: Send + Sync + 'static {
    /// Whether `strategy` can be decided at all (a plugin implements it).
    fn has_strategy(&self, strategy: &str) -> bool;

    /// Whether the answer for `strategy` may depend on the request's `now` (beyond what the rest
    /// of the request says): then a step asks again at every renewal of the Lease's holder, as
    /// the clock moved. `false` lets a renewal that changes nothing else skip the step (issue 31;
    /// [`crate::index::Watched::Renewal`]). A wrong `false` leaves a Lease decided on a stale
    /// clock until something else changes, so the default is `true`.
    fn reads_clock(&self, strategy: &str) -> bool {
        let _ = strategy;
        true
    }

    /// The elected candidate (one of `request.candidates`), or `None` if nobody should lead.
    fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
    ) -> Result<Option<String>, DecideError>;
}

impl From<CallError> for DecideError {
    fn from(error: CallError) -> Self {
        Self {
            kind: DecideErrorKind::from(&error),
            message: error.to_string(),
        }
    }
}

impl Decide for Engine {
    fn has_strategy(&self, strategy: &str) -> bool {
        Engine::has_strategy(self, strategy)
    }

    /// What the plugin implementing `strategy` declared ([`Engine::reads_now`]): a plugin built
    /// against `conclave:strategy@0.4.0` says in `info()` whether it compares anything with
    /// `now` (the built-in `OldestEmulationVersion` and the `conclave.dev/` plugins say they do
    /// not); one built against 0.3 or earlier cannot say, and is taken to read it.
    fn reads_clock(&self, strategy: &str) -> bool {
        Engine::reads_now(self, strategy)
    }

    fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
    ) -> Result<Option<String>, DecideError> {
        Engine::elect(self, strategy, request).map_err(DecideError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn kinds_keep_the_engine_labels() {
        let strategy = || "example.com/s".to_owned();
        let errors = [
            CallError::UnknownStrategy {
                strategy: strategy(),
                known: vec![],
            },
            CallError::LimitExceeded {
                strategy: strategy(),
                limit: Duration::from_millis(10),
            },
            CallError::Memory {
                strategy: strategy(),
                detail: "16 MiB".into(),
            },
            CallError::Trap {
                strategy: strategy(),
                message: "unreachable".into(),
            },
            CallError::Instantiate {
                strategy: strategy(),
                message: "no free slot".into(),
            },
            CallError::InvalidRequest {
                strategy: strategy(),
                reason: "candidate \"a\" is listed twice".into(),
            },
            CallError::PluginError {
                strategy: strategy(),
                message: "no".into(),
            },
            CallError::InvalidAnswer {
                strategy: strategy(),
                answer: "z".into(),
            },
        ];
        for error in errors {
            let decided = DecideError::from(error.clone());
            assert_eq!(decided.kind.label(), error.label(), "{error:?}");
            assert_eq!(decided.message, error.to_string());
        }
        assert_eq!(DecideErrorKind::Panic.label(), "panic");
    }
}
