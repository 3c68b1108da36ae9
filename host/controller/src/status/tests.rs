//! Tests of `conclave status` over synthetic Leases and LeaseCandidates (no cluster): the health
//! of candidates, the prediction, the table and the document, with the fixtures they share.

use super::table::pick_text;
use super::times::ago;
use super::{
    Health, Pick, PredictOptions, STATUS_LIST_API_VERSION, STATUS_LIST_KIND, StrategySource,
    collect, document, render, render_wide,
};
use conclave_core::k8s::now;
use conclave_core::plan::Mode;
use conclave_core::time::Timestamp;
use conclave_engine::{Engine, EngineConfig};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use std::time::Duration;

#[test]
fn ages_read_naturally() {
    let now = Timestamp::from_secs(10_000);
    assert_eq!(ago(None, now), "-");
    assert_eq!(
        ago(Some(now - Duration::from_millis(1500)), now),
        "1.5s ago"
    );
    assert_eq!(ago(Some(now - Duration::from_secs(42)), now), "42s ago");
    assert_eq!(ago(Some(now - Duration::from_secs(125)), now), "2m05s ago");
    assert_eq!(ago(Some(now - Duration::from_secs(7300)), now), "2h01m ago");
}

fn candidate(
    name: &str,
    lease: &str,
    versions: (&str, &str),
    strategy: &str,
    renewed_ago: i64,
    pinged_ago: Option<i64>,
) -> LeaseCandidate {
    let now = jiff::Timestamp::now();
    let at = |secs: i64| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            now - jiff::SignedDuration::from_secs(secs),
        )
    };
    LeaseCandidate {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now - jiff::SignedDuration::from_secs(3600),
            )),
            ..Default::default()
        },
        spec: Some(
            k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec {
                lease_name: lease.into(),
                binary_version: versions.0.into(),
                emulation_version: Some(versions.1.into()),
                strategy: strategy.into(),
                renew_time: Some(at(renewed_ago)),
                ping_time: pinged_ago.map(at),
            },
        ),
    }
}

fn lease(name: &str, holder: Option<&str>, strategy: Option<&str>) -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: holder.map(Into::into),
            lease_duration_seconds: Some(15),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                jiff::Timestamp::now(),
            )),
            strategy: strategy.map(Into::into),
            ..Default::default()
        }),
    }
}

#[test]
fn the_pick_follows_the_controllers_rules() {
    let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
    let options = PredictOptions::default();
    const OEV: &str = "OldestEmulationVersion";
    let leases = [
        lease("held", Some("b"), None),
        lease("unknown", Some("x"), Some("example.com/none")),
        lease("classic", Some("x"), None),
    ];
    let candidates = [
        // "held": a is best but pinged 10 s ago and never acked (left out); b holds; c is
        // invalid (binary below emulation); d is stale (renewed 60 s ago, not pinged).
        candidate("a", "held", ("1.30.0", "1.29.0"), OEV, 600, Some(10)),
        candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None),
        candidate("c", "held", ("1.29.0", "1.30.0"), OEV, 1, None),
        candidate("d", "held", ("1.31.0", "1.30.0"), OEV, 60, None),
        // "conflict": two candidates at the same binary version disagree.
        candidate("e", "conflict", ("1.31.0", "1.31.0"), OEV, 1, None),
        candidate(
            "f",
            "conflict",
            ("1.31.0", "1.31.0"),
            "example.com/x",
            1,
            None,
        ),
        // "unknown": names a strategy no plugin implements.
        candidate(
            "g",
            "unknown",
            ("1.31.0", "1.31.0"),
            "example.com/none",
            1,
            None,
        ),
    ];
    let now = now();
    let statuses = collect(&leases, &candidates, &engine, now, options);
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["conflict", "held", "unknown"],
        "classic is not coordinated"
    );

    let held = &statuses[1];
    let health: Vec<(&str, &str)> = held
        .candidates
        .iter()
        .map(|c| (c.view.name.as_str(), c.health.label()))
        .collect();
    assert_eq!(
        health,
        [
            ("a", "failed ping"),
            ("b", "healthy"),
            ("c", "invalid"),
            ("d", "healthy"),
        ]
    );
    assert_eq!(held.candidates[3].health, Health::Stale);
    assert!(
        held.candidates[0]
            .health
            .note(now)
            .contains("garbage-collected at"),
        "{:?}",
        held.candidates[0].health
    );
    assert_eq!(held.strategy, StrategySource::Candidates(OEV.into()));
    assert_eq!(
        held.pick,
        Pick::Candidate {
            name: "d".into(),
            needs_ping: true
        }
    );
    assert!(pick_text(held, now).contains("d (would pre-empt b), after a ping"));

    assert!(matches!(&statuses[0].strategy, StrategySource::Conflict(c) if c.contains("e")));
    assert!(matches!(&statuses[0].pick, Pick::Unavailable(_)));
    assert!(
        matches!(&statuses[2].pick, Pick::Unavailable(why) if why.contains("example.com/none"))
    );
    let text = render(&statuses, now);
    assert!(text.contains("ns/held"), "{text}");
    assert!(text.contains("b *"), "the holder is marked: {text}");
}

#[test]
fn the_document_has_a_stable_shape() {
    let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
    const OEV: &str = "OldestEmulationVersion";
    let leases = [lease("held", Some("b"), None)];
    let candidates = [
        candidate("a", "held", ("1.31.0", "1.30.0"), OEV, 60, None),
        candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None),
        candidate("c", "held", ("1.29.0", "1.30.0"), OEV, 1, None),
        candidate("e", "conflict", ("1.31.0", "1.31.0"), OEV, 1, None),
        candidate(
            "f",
            "conflict",
            ("1.31.0", "1.31.0"),
            "example.com/x",
            1,
            None,
        ),
    ];
    let now = now();
    let statuses = collect(
        &leases,
        &candidates,
        &engine,
        now,
        PredictOptions::default(),
    );
    let value = serde_json::to_value(document(&statuses, now)).expect("serializes");
    assert_eq!(value["apiVersion"], STATUS_LIST_API_VERSION);
    assert_eq!(value["kind"], STATUS_LIST_KIND);
    assert!(
        value["observedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    };
    let conflict = &value["items"][0];
    assert_eq!(
        keys(conflict),
        [
            "acquireTime",
            "candidates",
            "expired",
            "holder",
            "leaseDurationSeconds",
            "leaseExists",
            "leaseTransitions",
            "name",
            "namespace",
            "prediction",
            "preferredHolder",
            "renewTime",
            "strategy",
            "strategySource",
        ],
        "every field is always present, null or not: {conflict}"
    );
    assert_eq!(conflict["leaseExists"], false);
    assert_eq!(conflict["strategy"], serde_json::Value::Null);
    assert_eq!(conflict["strategySource"], "conflict");
    assert_eq!(conflict["prediction"]["outcome"], "unavailable");
    assert!(
        conflict["prediction"]["why"]
            .as_str()
            .is_some_and(|why| why.contains("example.com/x")),
        "{conflict}"
    );

    let held = &value["items"][1];
    assert_eq!(held["namespace"], "ns");
    assert_eq!(held["name"], "held");
    assert_eq!(held["strategy"], OEV);
    assert_eq!(held["strategySource"], "candidates");
    assert_eq!(held["holder"], "b");
    assert_eq!(held["leaseDurationSeconds"], 15);
    assert_eq!(held["expired"], false);
    assert_eq!(
        held["prediction"],
        serde_json::json!({
            "outcome": "preempt",
            "winner": "a",
            "afterPing": true,
            "why": "would pre-empt b, after a ping",
        }),
        "a renewed a minute ago, so the controller pings it before writing"
    );
    let candidates = held["candidates"].as_array().expect("a list");
    assert_eq!(
        keys(&candidates[0]),
        [
            "binaryVersion",
            "collectedAt",
            "creationTime",
            "emulationVersion",
            "healthy",
            "holder",
            "name",
            "note",
            "pingTime",
            "renewTime",
            "state",
            "strategy",
        ]
    );
    let field = |i: usize, key: &str| candidates[i][key].clone();
    assert_eq!(field(0, "state"), "stale");
    assert_eq!(field(0, "healthy"), true);
    assert_eq!(field(0, "holder"), false);
    assert_eq!(field(0, "emulationVersion"), "1.30.0");
    assert_eq!(field(1, "state"), "fresh");
    assert_eq!(field(1, "note"), serde_json::Value::Null);
    assert_eq!(field(1, "holder"), true);
    assert_eq!(field(2, "state"), "invalid");
    assert_eq!(field(2, "healthy"), false);
    assert!(field(2, "note").as_str().is_some_and(|n| !n.is_empty()));
    assert!(
        field(0, "collectedAt")
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
}

#[test]
fn wide_adds_columns() {
    let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
    const OEV: &str = "OldestEmulationVersion";
    let leases = [lease("held", Some("b"), None)];
    let candidates = [candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None)];
    let now = now();
    let statuses = collect(
        &leases,
        &candidates,
        &engine,
        now,
        PredictOptions::default(),
    );
    let header = |text: &str, starts: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(starts))
            .unwrap_or_else(|| panic!("no {starts} header in\n{text}"))
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let narrow = render(&statuses, now);
    let wide = render_wide(&statuses, now);
    assert_eq!(
        header(&wide, "LEASE"),
        [
            "LEASE",
            "STRATEGY",
            "HOLDER",
            "PREFERRED",
            "RENEWED",
            "DURATION",
            "ACQUIRED",
            "TRANSITIONS",
            "WOULD PICK NOW",
        ]
    );
    assert_eq!(header(&narrow, "LEASE").len(), 6, "{narrow}");
    assert_eq!(
        header(&wide, "CANDIDATE"),
        [
            "CANDIDATE",
            "BINARY",
            "EMULATION",
            "STRATEGY",
            "RENEWED",
            "PINGED",
            "STATE",
            "AGE",
            "COLLECTED",
            "NOTE",
        ]
    );
    let b = wide
        .lines()
        .find(|l| l.trim_start().starts_with("b *"))
        .expect("b's row");
    assert!(b.contains("1h00m"), "created an hour ago: {b}");
    assert!(
        b.contains("in 29m5"),
        "collected 30 m after its renewal: {b}"
    );
    assert!(wide.contains("15s"), "the lease duration: {wide}");
}

#[test]
fn the_mode_is_part_of_the_prediction() {
    let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
    const OEV: &str = "OldestEmulationVersion";
    let leases = [lease("held", Some("b"), None)];
    let candidates = [candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None)];
    let auto_beside_builtin = PredictOptions {
        builtin_active: true,
        ..PredictOptions::default()
    };
    let statuses = collect(&leases, &candidates, &engine, now(), auto_beside_builtin);
    assert_eq!(statuses[0].pick, Pick::NotHandled);
    let all = PredictOptions {
        mode: Mode::All,
        ..auto_beside_builtin
    };
    let statuses = collect(&leases, &candidates, &engine, now(), all);
    assert_eq!(
        statuses[0].pick,
        Pick::Candidate {
            name: "b".into(),
            needs_ping: false
        },
        "b holds it and is fresh: nothing to write, nobody to ping"
    );
}
