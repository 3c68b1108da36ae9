//! `conclave.dev/priority`: the candidate with the highest priority leads.
//!
//! A candidate states its priority in the annotation `coordination.conclave.dev/priority`, a
//! decimal int32 greater than zero. The highest priority leads; a missing annotation counts as 0,
//! and so does an invalid one (not a decimal number, zero, negative, or past `i32::MAX`), which is
//! also reported through the host's log so the operator can fix it. Equal priorities are decided
//! by the `OldestEmulationVersion` rule (lowest emulation version, lowest binary version, oldest
//! creation time, then name); a candidate whose versions do not parse is ineligible under that
//! rule and so here too, whatever its priority.
//!
//! This is the priority proposal of KEP-4355 (2025) that upstream never shipped.
// no_std in the component; the native build (linked by the host for `strategy bench`, and the
// cdylib that `cargo test` builds) takes std's allocator and panic handler.
#![cfg_attr(target_arch = "wasm32", no_std)]

use conclave_strategy::prelude::*;
use core::cmp::Reverse;

/// The strategy name, as operators write it in `spec.strategy`.
pub const STRATEGY: &str = "conclave.dev/priority";

/// The annotation a candidate states its priority in.
pub const PRIORITY_ANNOTATION: &str = "coordination.conclave.dev/priority";

/// The `conclave.dev/priority` strategy.
pub struct Priority;

impl Strategy for Priority {
    const STRATEGIES: &'static [&'static str] = &[STRATEGY];
    const DESCRIPTION: &'static str = "highest coordination.conclave.dev/priority annotation \
         (int32 > 0; missing or invalid = 0), ties by OldestEmulationVersion";

    // Names only for the warning about an invalid priority. The annotation, versions and
    // creation times decide; nothing is compared with `now`.
    const READS: Reads = Reads {
        fields: CandidateFields::NAME,
        annotation_keys: &[PRIORITY_ANNOTATION],
        now: false,
        ..Reads::NOTHING
    };

    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {
        Ok(request
            .candidates
            .iter()
            .filter_map(|c| {
                let key = OldestEmulationKey::new(&c)?;
                Some((Reverse(priority(&c)), key))
            })
            .min()
            .map(|(_, key)| key.position))
    }
}

fn priority(candidate: &Candidate<'_>) -> i32 {
    let Some(value) = candidate.annotation(PRIORITY_ANNOTATION) else {
        return 0;
    };
    match parse_priority(value) {
        Some(priority) => priority,
        None => {
            log::warn(&format!(
                "candidate {:?}: annotation {PRIORITY_ANNOTATION}={value:?} is not an integer \
                 between 1 and {}; counting its priority as 0",
                candidate.name(),
                i32::MAX
            ));
            0
        }
    }
}

fn parse_priority(value: &str) -> Option<i32> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<i32>().ok().filter(|p| *p > 0)
}

conclave_strategy::export_strategy!(Priority);

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_strategy::native::{CandidateView, ControllerRequest, elect_native};

    fn cand(name: &str, version: &str, priority: Option<&str>, created: i64) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: version.into(),
            emulation_version: version.into(),
            creation_time: Some(Timestamp::from_secs(created)),
            annotations: priority
                .map(|p| vec![(PRIORITY_ANNOTATION.into(), p.into())])
                .unwrap_or_default(),
            ..CandidateView::default()
        }
    }

    fn elect(candidates: &[CandidateView]) -> Option<String> {
        let mut request = ControllerRequest {
            candidates: candidates.to_vec(),
            ..ControllerRequest::default()
        };
        let forward = elect_native::<Priority>(&request).unwrap();
        request.candidates.reverse();
        assert_eq!(
            elect_native::<Priority>(&request).unwrap(),
            forward,
            "order matters"
        );
        forward
    }

    #[test]
    fn parses_only_positive_int32() {
        let table = [
            ("1", Some(1)),
            ("100", Some(100)),
            ("007", Some(7)),
            ("2147483647", Some(i32::MAX)),
            ("2147483648", None),
            ("0", None),
            ("-5", None),
            ("+5", None),
            (" 5", None),
            ("5.0", None),
            ("", None),
            ("high", None),
        ];
        for (value, want) in table {
            assert_eq!(parse_priority(value), want, "{value:?}");
        }
    }

    #[test]
    fn highest_priority_wins_over_older_version() {
        let candidates = [
            cand("old", "1.30.0", Some("1"), 1),
            cand("new", "1.33.0", Some("10"), 9),
            cand("none", "1.29.0", None, 0),
        ];
        assert_eq!(elect(&candidates).as_deref(), Some("new"));
    }

    #[test]
    fn invalid_counts_as_zero_and_ties_use_oldest_emulation_version() {
        let candidates = [
            cand("bad", "1.31.0", Some("-3"), 1),
            cand("missing", "1.30.0", None, 5),
        ];
        assert_eq!(elect(&candidates).as_deref(), Some("missing"));
        let tied = [
            cand("b", "1.31.0", Some("5"), 1),
            cand("a", "1.31.0", Some("5"), 1),
        ];
        assert_eq!(elect(&tied).as_deref(), Some("a"));
    }

    #[test]
    fn unparseable_versions_are_ineligible_even_with_priority() {
        let candidates = [
            cand("broken", "one", Some("99"), 1),
            cand("ok", "1.31.0", None, 1),
        ];
        assert_eq!(elect(&candidates).as_deref(), Some("ok"));
        assert_eq!(elect(&[cand("broken", "x", Some("9"), 1)]), None);
    }
}
