//! Tests of `conclave strategy test`'s reports.

use super::{Expect, failure_table};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;

/// A candidate name wider than `u16::MAX` characters is printed, not a formatting panic.
#[test]
fn a_failure_table_prints_a_huge_name() {
    let name = "x".repeat(70_000);
    let request = ElectionRequest {
        lease: LeaseView::default(),
        now: Timestamp::from_secs(0),
        settings: String::new(),
        candidates: vec![CandidateView {
            name: name.clone(),
            ..CandidateView::default()
        }],
    };
    let expect = Expect {
        leader: Some("a".into()),
        error: false,
        message: None,
    };
    let table = failure_table(&request, &expect, Some(&name), None);
    assert!(table.contains(&name));
}
