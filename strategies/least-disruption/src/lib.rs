//! `conclave.dev/least-disruption`: `OldestEmulationVersion` without needless hand-overs.
//!
//! The rule is `OldestEmulationVersion` (lowest emulation version, lowest binary version, oldest
//! creation time, then name), except that it never pre-empts an eligible live holder whose
//! emulation and binary versions equal the best candidate's: on such a tie the holder stays,
//! whatever its creation time or name. A leader is therefore replaced only when a strictly older
//! version is available, which is what an upgrade or a rollback needs, and nothing else moves it.
//!
//! The holder counts as eligible and live when the Lease is not expired, the holder is one of the
//! candidates (the host leaves out candidates that did not answer a ping), and its versions parse.
//! Otherwise the plain `OldestEmulationVersion` answer stands.
// no_std in the component; the native build (linked by the host for `strategy bench`, and the
// cdylib that `cargo test` builds) takes std's allocator and panic handler.
#![cfg_attr(target_arch = "wasm32", no_std)]

use conclave_strategy::prelude::*;
use core::cmp::Ordering;

/// The strategy name, as operators write it in `spec.strategy`.
pub const STRATEGY: &str = "conclave.dev/least-disruption";

/// The `conclave.dev/least-disruption` strategy.
pub struct LeastDisruption;

impl Strategy for LeastDisruption {
    const STRATEGIES: &'static [&'static str] = &[STRATEGY];
    const DESCRIPTION: &'static str = "OldestEmulationVersion, but keeps a live holder whose \
         emulation and binary versions equal the best candidate's";

    // Versions, creation times, the holder's position and `lease.expired` are all the rule reads.
    // `expired` is the host's reading of the clock, not the rule's: the host asks again when the
    // Lease expires, so the rule compares nothing with `now` itself.
    const READS: Reads = Reads {
        now: false,
        ..Reads::NOTHING
    };

    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {
        let live_holder = request
            .lease
            .holder_index
            .filter(|_| !request.lease.expired);
        let mut best: Option<OldestEmulationKey> = None;
        let mut holder: Option<OldestEmulationKey> = None;
        for (position, candidate) in positions(&request.candidates) {
            let Some(key) = OldestEmulationKey::new(&candidate) else {
                continue;
            };
            if live_holder == Some(position) {
                holder = Some(key);
            }
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        let Some(best) = best else {
            return Ok(None);
        };
        let keep_holder = holder.is_some_and(|h| h.cmp_versions(&best) == Ordering::Equal);
        let leader = if keep_holder { holder } else { Some(best) };
        Ok(leader.map(|key| key.position))
    }
}

conclave_strategy::export_strategy!(LeastDisruption);

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_strategy::native::{CandidateView, ControllerRequest, LeaseView, elect_native};

    fn cand(name: &str, emulation: &str, binary: &str, created: i64) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: binary.into(),
            emulation_version: emulation.into(),
            creation_time: Some(Timestamp::from_secs(created)),
            ..CandidateView::default()
        }
    }

    fn elect(holder: Option<&str>, expired: bool, candidates: &[CandidateView]) -> Option<String> {
        let mut request = ControllerRequest {
            lease: LeaseView {
                holder: holder.map(Into::into),
                expired,
                ..LeaseView::default()
            },
            candidates: candidates.to_vec(),
            ..ControllerRequest::default()
        };
        let forward = elect_native::<LeastDisruption>(&request).unwrap();
        request.candidates.reverse();
        assert_eq!(
            elect_native::<LeastDisruption>(&request).unwrap(),
            forward,
            "order matters"
        );
        forward
    }

    #[test]
    fn keeps_a_live_holder_on_a_version_tie() {
        let candidates = [
            cand("younger-holder", "1.31.0", "1.31.2", 90),
            cand("older", "1.31.0", "1.31.2", 10),
        ];
        assert_eq!(
            elect(Some("younger-holder"), false, &candidates).as_deref(),
            Some("younger-holder")
        );
        assert_eq!(elect(None, false, &candidates).as_deref(), Some("older"));
    }

    #[test]
    fn replaces_the_holder_only_for_a_strictly_older_version() {
        let older_binary = [
            cand("holder", "1.31.0", "1.31.2", 1),
            cand("better", "1.31.0", "1.31.1", 90),
        ];
        assert_eq!(
            elect(Some("holder"), false, &older_binary).as_deref(),
            Some("better")
        );
        let older_emulation = [
            cand("holder", "1.31.0", "1.31.0", 1),
            cand("better", "1.30.0", "1.32.0", 90),
        ];
        assert_eq!(
            elect(Some("holder"), false, &older_emulation).as_deref(),
            Some("better")
        );
    }

    #[test]
    fn an_expired_absent_or_ineligible_holder_is_not_kept() {
        let tie = [
            cand("holder", "1.31.0", "1.31.0", 90),
            cand("older", "1.31.0", "1.31.0", 10),
        ];
        assert_eq!(elect(Some("holder"), true, &tie).as_deref(), Some("older"));
        assert_eq!(elect(Some("gone"), false, &tie).as_deref(), Some("older"));
        let broken = [
            cand("holder", "1.31.0", "bad", 1),
            cand("other", "1.31.0", "1.31.0", 90),
        ];
        assert_eq!(
            elect(Some("holder"), false, &broken).as_deref(),
            Some("other")
        );
        assert_eq!(elect(Some("holder"), false, &[]), None);
    }
}
