//! The seam between the controller and the strategy engine: a small trait, implemented for
//! [`Engine`], so the controller can be tested with a plain Rust decider.

use conclave_core::request::ElectionRequest;
use conclave_engine::{CallError, Engine};

/// Why a decision failed; `kind` labels metrics and events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecideError {
    /// A short, stable label (e.g. `trap`, `limit_exceeded`, `invalid_answer`).
    pub kind: &'static str,
    /// What went wrong, for the event and the log.
    pub message: String,
}

/// Decides elections: names the best candidate of a request under a strategy.
///
/// Implementations are synchronous and may be CPU-bound; the controller calls them through
/// `tokio::task::spawn_blocking`.
pub trait Decide: Send + Sync + 'static {
    /// Whether `strategy` can be decided at all (a plugin implements it).
    fn has_strategy(&self, strategy: &str) -> bool;

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
            kind: error.label(),
            message: error.to_string(),
        }
    }
}

impl Decide for Engine {
    fn has_strategy(&self, strategy: &str) -> bool {
        Engine::has_strategy(self, strategy)
    }

    fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
    ) -> Result<Option<String>, DecideError> {
        Engine::elect(self, strategy, request).map_err(DecideError::from)
    }
}
