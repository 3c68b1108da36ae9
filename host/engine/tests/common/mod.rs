//! What the engine's test files share: the hand-written fixture plugin and a request.

use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;

/// A fixture plugin claiming strategy `name`, whose `elect` runs `body` (the testkit's
/// hand-written component, as text: the engine's tests build wasmtime with `wat`).
pub fn fixture(name: &str, body: &str) -> String {
    conclave_testkit::fixture_plugin::fixture_text(name, body)
}

/// A candidate of the given versions, created at a fixed time.
pub fn candidate(name: &str, binary: &str, emulation: &str) -> CandidateView {
    CandidateView {
        name: name.into(),
        binary_version: binary.into(),
        emulation_version: emulation.into(),
        strategy: OLDEST_EMULATION_VERSION.into(),
        creation_time: Some(Timestamp::from_secs(1_700_000_000)),
        ..CandidateView::default()
    }
}

/// An election of two candidates under `strategy`; `old` ranks first by
/// `OldestEmulationVersion`.
pub fn request(strategy: &str) -> ElectionRequest {
    ElectionRequest {
        lease: LeaseView {
            namespace: "kube-system".into(),
            name: "kube-scheduler".into(),
            strategy: strategy.into(),
            expired: true,
            ..LeaseView::default()
        },
        now: Timestamp::from_secs(1_800_000_000),
        settings: String::new(),
        candidates: vec![
            candidate("new", "1.33.0", "1.33.0"),
            candidate("old", "1.32.0", "1.32.0"),
        ],
    }
}
