//! Seeded random candidate sets, for the tests and benches that register a batch of candidates
//! and compare whom a controller elects with the best of the batch.

use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;

/// A seeded source of candidate sets: the same seed gives the same sets on every run (a linear
/// congruential generator; print the seed with the results so a run can be replayed).
#[derive(Debug, Clone)]
pub struct SeededSets {
    state: u64,
}

impl SeededSets {
    /// Starts from `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.state >> 33) % bound
    }

    /// A set size from 1 to `max`.
    pub fn size(&mut self, max: u64) -> u64 {
        1 + self.below(max)
    }

    /// A binary version `1.M.0` with M in `lowest_minor..lowest_minor + 3`, and an emulation
    /// version equal to it or one minor lower.
    pub fn versions(&mut self, lowest_minor: u64) -> (String, String) {
        let binary = lowest_minor + self.below(3);
        let emulation = binary - self.below(2);
        (format!("1.{binary}.0"), format!("1.{emulation}.0"))
    }
}

/// The best of `candidates` by the OldestEmulationVersion rule with Conclave's tie-break by name,
/// as stored (creation times included); `None` when none is eligible.
#[must_use]
pub fn oldest_emulation_winner(candidates: &[LeaseCandidate]) -> Option<String> {
    use conclave_core::election::{OldestEmulationRank, pick_oldest_emulation_version};
    let views: Vec<_> = candidates
        .iter()
        .map(conclave_core::k8s::candidate_view)
        .collect();
    pick_oldest_emulation_version(views.iter().filter_map(|v| {
        OldestEmulationRank::new(
            &v.name,
            &v.binary_version,
            &v.emulation_version,
            v.creation_time,
        )
    }))
    .map(str::to_owned)
}
