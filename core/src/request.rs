//! What a strategy sees when it decides an election: plain data shared by the host, the engine,
//! the vector runner and the guest SDK, so every side agrees on one shape.

use crate::time::Timestamp;
use alloc::string::String;
use alloc::vec::Vec;

/// The state of the Lease being elected for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// The current holder; an absent and an empty `holderIdentity` are both `None`.
    pub holder: Option<String>,
    /// The current `spec.preferredHolder`; absent and empty are both `None`.
    pub preferred_holder: Option<String>,
    /// The strategy the election runs under.
    pub strategy: String,
    /// Whether the Lease is expired (or does not exist) at the request's `now`.
    pub expired: bool,
}

/// One eligible candidate, as its LeaseCandidate announces itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateView {
    /// The LeaseCandidate's name, which is also the identity written into `holderIdentity`.
    pub name: String,
    /// `spec.binaryVersion`, unparsed.
    pub binary_version: String,
    /// `spec.emulationVersion`, unparsed (may be empty).
    pub emulation_version: String,
    /// `spec.strategy`.
    pub strategy: String,
    /// `metadata.creationTimestamp`.
    pub creation_time: Option<Timestamp>,
    /// `spec.renewTime`, the candidate's last renewal or ack.
    pub renew_time: Option<Timestamp>,
    /// `spec.pingTime`, the controller's last ping.
    pub ping_time: Option<Timestamp>,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// `metadata.annotations`, sorted by key.
    pub annotations: Vec<(String, String)>,
}

impl CandidateView {
    /// The value of a label, if set.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }

    /// The value of an annotation, if set.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(&self.annotations, key)
    }
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// One election to decide.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionRequest {
    /// The Lease.
    pub lease: LeaseView,
    /// The time the election runs at; strategies must not read a clock of their own.
    pub now: Timestamp,
    /// The operator's settings for the plugin, as JSON text; empty when none are configured.
    pub settings: String,
    /// The eligible candidates (alive and acked). The order carries no meaning.
    pub candidates: Vec<CandidateView>,
}

impl ElectionRequest {
    /// Whether `name` is one of the eligible candidates; an answer naming anyone else is invalid.
    #[must_use]
    pub fn has_candidate(&self, name: &str) -> bool {
        self.candidates.iter().any(|c| c.name == name)
    }
}
