//! The strategy the model and the property tests ask: `OldestEmulationVersion` as
//! [`conclave_core::election`] ranks it, a deterministic stand-in for the plugin.

use conclave_core::election::{OldestEmulationRank, pick_oldest_emulation_version};
use conclave_core::request::{CandidateView, ElectionRequest};

/// The rank of one candidate under `OldestEmulationVersion`; `None` when its versions do not
/// parse (it is ineligible).
#[must_use]
pub fn rank(candidate: &CandidateView) -> Option<OldestEmulationRank<'_>> {
    OldestEmulationRank::new(
        &candidate.name,
        &candidate.binary_version,
        &candidate.emulation_version,
        candidate.creation_time,
    )
}

/// The answer of the built-in strategy to `request`: the best-ranked eligible candidate, or
/// `None` when none is eligible, as the `OldestEmulationVersion` plugin answers.
#[must_use]
pub fn oldest_emulation_version(request: &ElectionRequest) -> Option<String> {
    pick_oldest_emulation_version(request.candidates.iter().filter_map(rank)).map(str::to_owned)
}
