//! Fuzzing what crosses the plugin boundary (issue 32, part 3): the answer a plugin gives back
//! through WIT, and the sidecar JSON an operator writes next to a plugin.
//!
//! - The answer path: a hand-written 0.1 plugin (the testkit's `fixtures/strategy.wat`) that answers whatever
//!   the request's settings say, so one compiled plugin gives every answer: a candidate's name,
//!   a name next to one, the empty name, a huge or non-ASCII one, for requests whose candidates
//!   have empty, duplicate, huge or non-ASCII names. And the built-in plugins (0.4, answering
//!   with a position) on the same arbitrary requests. Whatever comes back, [`Engine::elect`]
//!   never panics and returns a name only if it is one of the request's candidates.
//! - The sidecar: arbitrary and mutated-valid `NAME.json` next to a plugin. Loading never panics;
//!   a sidecar that does not parse, or sets impossible limits, is refused with a
//!   [`LoadError::Sidecar`] naming the file and why; one that loads runs an election under the
//!   limits it set.
//!
//! Cases: [`DEFAULT_CASES`] (answers) and [`DEFAULT_SIDECAR_CASES`] in `cargo test`;
//! `CONCLAVE_FUZZ_CASES=N` for a longer run of each, e.g.
//! `CONCLAVE_FUZZ_CASES=20000 cargo test -p conclave-engine --test fuzz_plugin_io`.

use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;
use conclave_engine::{CallError, Engine, EngineConfig, LoadError, MAX_PLUGIN_TEXT};
use conclave_testkit::fuzz_cases;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::cell::Cell;
use std::path::Path;
use std::time::Instant;

/// Answer cases in a plain `cargo test`.
const DEFAULT_CASES: u32 = 1_000;

/// Sidecar cases in a plain `cargo test` (a sidecar that loads compiles its plugin, or reads it
/// from the cache).
const DEFAULT_SIDECAR_CASES: u32 = 300;

/// The strategy the echoing fixture claims.
const ECHO: &str = "test/answer-settings";

/// `elect` of the fixture: `ok(some(request.settings))`. The 0.1 request record lowers to memory
/// as the lease (52 bytes: five strings and options of strings, a bool), `now` at 56 and
/// `settings` (pointer, length) at 64; the answer is built in the return area at 0x300.
const ANSWER_SETTINGS: &str = concat!(
    // One line: the template names its placeholders in a comment too.
    "(i32.store (i32.const 0x300) (i32.const 0)) ",
    "(i32.store (i32.const 0x304) (i32.const 1)) ",
    "(i32.store (i32.const 0x308) (i32.load (i32.add (local.get $request) (i32.const 64)))) ",
    "(i32.store (i32.const 0x30c) (i32.load (i32.add (local.get $request) (i32.const 68)))) ",
    "(i32.const 0x300)",
);

/// The fixture plugin claiming `name`, whose `elect` runs `body`.
fn fixture(name: &str, body: &str) -> String {
    conclave_testkit::fixture_plugin::fixture_text(name, body)
}

/// The echoing fixture as `dir/answer.wasm` (wasmtime reads the text format).
fn write_echo(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("answer.wasm");
    std::fs::write(&path, fixture(ECHO, ANSWER_SETTINGS)).unwrap();
    path
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "c[0-5]",
        1 => Just(String::new()),
        1 => "\\PC{0,8}",
        1 => "[a-z0-9.-]{200,300}",
        1 => Just("x".repeat(70_000)),
    ]
}

fn texts() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "1\\.3[0-4]\\.[0-2]",
        1 => Just(String::new()),
        1 => "\\PC{0,12}",
        1 => Just("9".repeat(5_000)),
    ]
}

fn times() -> impl Strategy<Value = Option<Timestamp>> {
    prop_oneof![
        3 => (1_700_000_000i64..1_800_000_000).prop_map(|s| Some(Timestamp::from_secs(s))),
        1 => Just(None),
        1 => any::<i64>().prop_map(|us| Some(Timestamp::from_micros(us))),
    ]
}

fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec(
        (
            prop_oneof![
                3 => Just("topology.kubernetes.io/zone".to_owned()),
                3 => Just("coordination.conclave.dev/priority".to_owned()),
                1 => "\\PC{0,10}",
            ],
            prop_oneof![
                3 => "zone-[a-c]|[0-9]{1,3}",
                1 => "-?[0-9]{10,30}",
                1 => "\\PC{0,10}",
            ],
        ),
        0..4,
    )
}

fn candidates(strategy: String) -> impl Strategy<Value = CandidateView> {
    (
        names(),
        texts(),
        texts(),
        prop_oneof![4 => Just(strategy), 1 => "\\PC{0,10}"],
        times(),
        times(),
        times(),
        pairs(),
        pairs(),
    )
        .prop_map(
            |(name, binary, emulation, strategy, created, renewed, pinged, labels, annotations)| {
                CandidateView {
                    name,
                    binary_version: binary,
                    emulation_version: emulation,
                    strategy,
                    creation_time: created,
                    renew_time: renewed,
                    ping_time: pinged,
                    labels,
                    annotations,
                }
            },
        )
}

/// A request for `strategy`: candidates with any names (duplicates too), up to a few hundred.
fn requests(strategy: String) -> impl Strategy<Value = ElectionRequest> {
    (
        {
            let strategy = strategy.clone();
            prop_oneof![8 => 0usize..6, 1 => 100usize..400]
                .prop_flat_map(move |n| proptest::collection::vec(candidates(strategy.clone()), n))
        },
        proptest::option::of(names()),
        proptest::option::of(names()),
        any::<bool>(),
        times(),
    )
        .prop_map(
            move |(candidates, holder, preferred, expired, now)| ElectionRequest {
                lease: LeaseView {
                    namespace: "ns".into(),
                    name: "lease".into(),
                    holder,
                    preferred_holder: preferred,
                    strategy: strategy.clone(),
                    expired,
                },
                now: now.unwrap_or(Timestamp::from_secs(1_800_000_000)),
                settings: String::new(),
                candidates,
            },
        )
}

/// What the fixture is told to answer: mostly a candidate's name or one next to it.
fn answers() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "c[0-5]",
        1 => "c[0-5] |C[0-5]|c[0-5]\\.",
        1 => "\\PC{1,8}",
        1 => Just("c".repeat(254)),
        1 => Just("c".repeat(100_000)),
    ]
}

/// The properties of one answer: a name only if it is a candidate's, a refused answer bounded.
fn check_answer(
    request: &ElectionRequest,
    outcome: &Result<Option<String>, CallError>,
) -> Result<(), TestCaseError> {
    match outcome {
        Ok(Some(name)) => prop_assert!(
            request.has_candidate(name),
            "elected {name:?}, who is not a candidate"
        ),
        Ok(None) => {}
        Err(CallError::InvalidAnswer { answer, .. }) => {
            prop_assert!(
                answer.len() <= MAX_PLUGIN_TEXT + 64,
                "the refused answer is kept whole ({} bytes)",
                answer.len()
            );
        }
        // A request the engine cannot pass to a plugin of 0.2 or later (duplicate names), a plugin
        // refusing garbage, or the time limit on a big request under a debug build.
        Err(
            CallError::InvalidRequest { .. }
            | CallError::PluginError { .. }
            | CallError::LimitExceeded { .. },
        ) => {}
        Err(other) => {
            return Err(TestCaseError::fail(format!(
                "unexpected error ({}): {other}",
                other.label()
            )));
        }
    }
    Ok(())
}

/// Whatever the plugin answers, the engine returns only a candidate's name; an answer naming
/// anyone else is an `InvalidAnswer`.
#[test]
fn an_arbitrary_answer_elects_only_a_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_echo(dir.path());
    let engine = Engine::from_file(EngineConfig::default(), &path).expect("the fixture loads");
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let result = runner.run(
        &(requests(ECHO.to_owned()), answers()),
        |(mut request, answer)| {
            request.settings = answer.clone();
            let outcome = engine.elect(ECHO, &request);
            check_answer(&request, &outcome)?;
            match &outcome {
                Ok(Some(name)) => prop_assert_eq!(name, &answer),
                Ok(None) => prop_assert!(false, "the fixture always names someone"),
                Err(CallError::InvalidAnswer { .. }) => prop_assert!(
                    !request.has_candidate(&answer) || answer.len() > 253,
                    "a candidate's name was refused"
                ),
                Err(error) => prop_assert!(false, "unexpected error: {error}"),
            }
            Ok(())
        },
    );
    eprintln!(
        "an_arbitrary_answer_elects_only_a_candidate: {} cases in {:.1?}",
        fuzz_cases(DEFAULT_CASES),
        started.elapsed()
    );
    result.unwrap();
}

/// The built-in plugins (0.4, answering with a position) on arbitrary requests: never a panic,
/// never a name that is not a candidate's.
#[test]
fn built_in_plugins_on_arbitrary_requests_elect_only_a_candidate() {
    let engine = Engine::new(EngineConfig::default()).expect("the built-ins load");
    let strategies: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let result = runner.run(
        &proptest::sample::select(strategies)
            .prop_flat_map(|strategy| (Just(strategy.clone()), requests(strategy))),
        |(strategy, request)| check_answer(&request, &engine.elect(&strategy, &request)),
    );
    eprintln!(
        "built_in_plugins_on_arbitrary_requests_elect_only_a_candidate: {} cases in {:.1?}",
        fuzz_cases(DEFAULT_CASES),
        started.elapsed()
    );
    result.unwrap();
}

fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{0,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A limit: mostly plausible, sometimes zero, huge, negative or not a number.
fn limits() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (1u64..100_000_000).prop_map(Value::from),
        1 => Just(json!(0)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(-1)),
        1 => Just(json!(1.5)),
        1 => Just(json!("10")),
        1 => json_values(),
    ]
}

/// A sidecar as an operator might write it, valid or not.
fn sidecars(sha256: String) -> impl Strategy<Value = String> {
    let object = (
        proptest::option::of(json_values()),
        proptest::option::of(proptest::collection::btree_map(
            prop_oneof![
                4 => Just("time_ms".to_owned()),
                4 => Just("memory_bytes".to_owned()),
                2 => Just("table_elements".to_owned()),
                2 => Just("instances".to_owned()),
                1 => "[a-z_]{1,12}",
            ],
            limits(),
            0..4,
        )),
        proptest::option::of(prop_oneof![
            3 => Just(json!(sha256.clone())),
            1 => Just(json!(sha256.to_uppercase())),
            1 => "[0-9a-f]{64}".prop_map(Value::from),
            1 => json_values(),
        ]),
        proptest::option::weighted(0.1, ("[a-z]{1,8}", json_values())),
    )
        .prop_map(|(settings, limits, sha256, unknown)| {
            let mut sidecar = json!({});
            if let Some(settings) = settings {
                sidecar["settings"] = settings;
            }
            if let Some(limits) = limits {
                sidecar["limits"] = json!(limits);
            }
            if let Some(sha256) = sha256 {
                sidecar["sha256"] = sha256;
            }
            if let Some((key, value)) = unknown {
                sidecar[key] = value;
            }
            sidecar.to_string()
        })
        .boxed();
    prop_oneof![
        8 => object.clone(),
        2 => (object, any::<prop::sample::Index>()).prop_map(|(text, cut)| {
            let at = cut.index(text.len().max(1));
            text.chars().take(at).collect()
        }),
        1 => json_values().prop_map(|v| v.to_string()),
        1 => "\\PC{0,40}",
        1 => Just(String::new()),
    ]
}

/// An arbitrary sidecar never panics the loader: the plugin loads and runs, or is refused with
/// a sidecar (or digest) error naming the file.
#[test]
fn an_arbitrary_sidecar_loads_or_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let path = write_echo(dir.path());
    let sha256 = {
        // The digest the engine computes, read back from a load without a sidecar.
        let engine = Engine::from_file(EngineConfig::default(), &path).unwrap();
        engine.plugins()[0].sha256.clone()
    };
    let config = EngineConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..EngineConfig::default()
    };
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_SIDECAR_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let (loaded, refused) = (Cell::new(0u32), Cell::new(0u32));
    let result = runner.run(&sidecars(sha256), |sidecar| {
        std::fs::write(path.with_extension("json"), &sidecar).unwrap();
        match Engine::from_file(config.clone(), &path) {
            Ok(engine) => {
                loaded.set(loaded.get() + 1);
                let mut request = ElectionRequest {
                    lease: LeaseView {
                        namespace: "ns".into(),
                        name: "lease".into(),
                        strategy: ECHO.into(),
                        ..LeaseView::default()
                    },
                    now: Timestamp::from_secs(1_800_000_000),
                    settings: String::new(),
                    candidates: vec![CandidateView {
                        name: "c0".into(),
                        ..CandidateView::default()
                    }],
                };
                // The fixture answers the settings it was configured with (the sidecar's, as
                // JSON text) when the request carries none.
                let outcome = engine.elect(ECHO, &request);
                check_answer(&request, &outcome)?;
                request.settings = "c0".into();
                let outcome = engine.elect(ECHO, &request);
                prop_assert!(
                    matches!(&outcome, Ok(Some(name)) if name == "c0")
                        || matches!(&outcome, Err(CallError::LimitExceeded { .. })),
                    "{outcome:?}"
                );
            }
            Err(error @ LoadError::Sidecar { .. }) => {
                refused.set(refused.get() + 1);
                let text = error.to_string();
                prop_assert!(text.contains("answer.json"), "{text}");
            }
            Err(error @ LoadError::Sha256Mismatch { .. }) => {
                refused.set(refused.get() + 1);
                prop_assert!(!error.to_string().is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected load error: {other}"),
        }
        Ok(())
    });
    eprintln!(
        "an_arbitrary_sidecar_loads_or_is_refused_with_a_reason: {} cases in {:.1?} ({} loaded, {} refused)",
        fuzz_cases(DEFAULT_SIDECAR_CASES),
        started.elapsed(),
        loaded.get(),
        refused.get()
    );
    result.unwrap();
}
