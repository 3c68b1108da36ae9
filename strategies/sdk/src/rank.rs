//! Kubernetes' `OldestEmulationVersion` ranking on a 0.4 request, for the built-in strategy and the
//! strategies that break ties with it.

use crate::bindings::CandidateColumns;
use crate::request::Candidate;
use core::cmp::Ordering;

/// How one eligible candidate ranks under `OldestEmulationVersion`; smaller is better.
///
/// Lowest emulation version, then lowest binary version, then oldest creation time (an unknown
/// time after every known one), then name, which is the position since candidates arrive sorted
/// by name. A candidate whose versions do not parse is ineligible and has no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct OldestEmulationKey {
    emulation: u32,
    binary: u32,
    /// `(false, time)` for a known creation time, `(true, 0)` for an unknown one.
    created: (bool, i64),
    /// The candidate's position in the request.
    pub position: u32,
}

impl OldestEmulationKey {
    /// The candidate's key, or `None` when it is ineligible (a version does not
    /// parse, or the emulation version is empty).
    #[must_use]
    pub fn new(candidate: &Candidate<'_>) -> Option<Self> {
        Some(Self {
            emulation: candidate.emulation_version()?.order,
            binary: candidate.binary_version()?.order,
            created: candidate
                .creation_time()
                .map_or((true, 0), |created| (false, created)),
            position: candidate.position(),
        })
    }

    /// Compares only the versions: `Equal` means neither candidate is strictly older.
    #[must_use]
    pub fn cmp_versions(&self, other: &Self) -> Ordering {
        (self.emulation, self.binary).cmp(&(other.emulation, other.binary))
    }
}

/// The position of the candidate `OldestEmulationVersion` elects, or `None` when none is eligible.
#[must_use]
pub fn pick_oldest_emulation_version(candidates: &CandidateColumns) -> Option<u32> {
    candidates
        .iter()
        .filter_map(|candidate| OldestEmulationKey::new(&candidate))
        .min()
        .map(|key| key.position)
}
