//! Large elections through the built-in plugin under the engine's default limits (10 ms of CPU,
//! 16 MiB): a DaemonSet electing one leader among its pods has this many candidates, and a large
//! cluster ten times as many.

use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use conclave_engine::{Engine, EngineConfig};

/// `size` candidates shaped like a cluster's (two labels each, an annotation on two in three),
/// all on 1.35 except one on 1.34, which must win wherever it sits in the list.
fn request(size: usize, oldest: usize) -> ElectionRequest {
    let candidates = (0..size)
        .map(|i| {
            let minor = if i == oldest { 34 } else { 35 };
            CandidateView {
                name: format!("node-agent-{i:05}"),
                binary_version: format!("1.{minor}.{}", i % 7),
                emulation_version: format!("1.{minor}.0"),
                strategy: OLDEST_EMULATION_VERSION.into(),
                creation_time: Some(Timestamp::from_secs(1_700_000_000 + (i % 97) as i64)),
                renew_time: Some(Timestamp::from_secs(1_800_000_000)),
                ping_time: None,
                labels: vec![
                    ("app.kubernetes.io/name".into(), "node-agent".into()),
                    ("kubernetes.io/hostname".into(), format!("node-{i:05}")),
                ],
                annotations: if i % 3 == 0 {
                    Vec::new()
                } else {
                    vec![("example.com/rack".into(), format!("rack-{}", i % 40))]
                },
            }
        })
        .collect();
    ElectionRequest {
        lease: LeaseView {
            namespace: "kube-system".into(),
            name: "node-agent".into(),
            strategy: OLDEST_EMULATION_VERSION.into(),
            expired: true,
            ..LeaseView::default()
        },
        now: Timestamp::from_secs(1_800_000_000),
        settings: String::new(),
        candidates,
    }
}

fn elect(size: usize) {
    let engine = Engine::new(EngineConfig::default()).expect("the built-in plugin loads");
    for oldest in [0, size / 2, size - 1] {
        let request = request(size, oldest);
        let answer = engine
            .elect(OLDEST_EMULATION_VERSION, &request)
            .unwrap_or_else(|error| panic!("{size} candidates: {error}"));
        assert_eq!(answer, Some(format!("node-agent-{oldest:05}")));
    }
}

#[test]
fn a_thousand_candidates_are_decided_under_the_default_limits() {
    elect(1_000);
}

#[test]
fn ten_thousand_candidates_are_decided_under_the_default_limits() {
    elect(10_000);
}
