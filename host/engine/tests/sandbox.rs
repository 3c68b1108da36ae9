//! The engine's sandbox, proven against hand-written fixtures (the testkit's `fixture_plugin`): runaway
//! loops, memory bombs, traps, bad answers and forbidden imports each become a typed error, and the
//! engine keeps serving good plugins afterwards. A plain `std` guest (`fixtures/wasi-guest`) runs only
//! with `--allow-wasi`, in a context that denies it the filesystem, environment and real clocks.

use conclave_core::request::{CandidateView, ElectionRequest};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use conclave_engine::{
    CallError, Engine, EngineConfig, LimitOverrides, Limits, LoadError, MAX_PLUGIN_TEXT,
};
use std::path::Path;
use std::time::{Duration, Instant};

use conclave_testkit::wasm_build;

mod common;
use common::{candidate, fixture, request};

use conclave_testkit::fixture_plugin::{MEMORY_BOMB, SPIN as LOOP, TRAP};
const UNKNOWN_NAME: &str = "(i32.const 0x100)";
const NOBODY: &str = "(i32.const 0x120)";
const REFUSE: &str = "(i32.const 0x140)";

/// Writes `NAME.wasm` (the fixture's text; the `wat` feature lets wasmtime read it) into `dir`.
fn write_plugin(dir: &Path, file: &str, strategy: &str, body: &str) {
    std::fs::write(dir.join(format!("{file}.wasm")), fixture(strategy, body)).unwrap();
}

/// The time limit (CPU time of the calling thread) the sandbox engines run under: generous, so that
/// a good call in an unoptimised test build never hits it, while a runaway loop still does.
const TIME_LIMIT: Duration = Duration::from_millis(250);

fn config(dir: &Path) -> EngineConfig {
    EngineConfig {
        plugins_dir: Some(dir.to_path_buf()),
        default_limits: Limits {
            time: TIME_LIMIT,
            ..Limits::default()
        },
        ..EngineConfig::default()
    }
}

fn engine_with(dir: &Path) -> Result<Engine, LoadError> {
    Engine::new(config(dir))
}

/// The sandbox fixtures all in one plugins directory, next to the built-in plugin.
fn sandbox() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "loop", "test/loop", LOOP);
    write_plugin(dir.path(), "bomb", "test/memory-bomb", MEMORY_BOMB);
    write_plugin(dir.path(), "trap", "test/trap", TRAP);
    write_plugin(dir.path(), "unknown", "test/unknown-name", UNKNOWN_NAME);
    write_plugin(dir.path(), "nobody", "test/nobody", NOBODY);
    write_plugin(dir.path(), "refuse", "test/refuse", REFUSE);
    let engine = engine_with(dir.path()).expect("fixtures load");
    (dir, engine)
}

/// The built-in strategy still answers correctly on the same engine.
fn assert_good_plugin_still_works(engine: &Engine) {
    let answer = engine
        .elect(OLDEST_EMULATION_VERSION, &request(OLDEST_EMULATION_VERSION))
        .expect("the built-in plugin still decides");
    assert_eq!(answer.as_deref(), Some("old"));
}

#[test]
fn infinite_loop_is_stopped_by_the_time_limit() {
    let (_dir, engine) = sandbox();
    for _ in 0..2 {
        let started = Instant::now();
        let cpu_before = cpu_time::ThreadTime::now();
        let error = engine
            .elect("test/loop", &request("test/loop"))
            .unwrap_err();
        let cpu_used = cpu_before.elapsed();
        let elapsed = started.elapsed();
        assert_eq!(error.label(), "limit_exceeded", "{error}");
        assert!(matches!(error, CallError::LimitExceeded { limit, .. } if limit == TIME_LIMIT));
        // The budget is the calling thread's CPU time, which a loaded machine does not inflate:
        // the loop used it up, and was stopped within it (plus the 1 ms epoch tick and the
        // instantiation, both far below the margin).
        assert!(
            cpu_used >= TIME_LIMIT,
            "stopped after only {cpu_used:?} of CPU"
        );
        assert!(
            cpu_used < TIME_LIMIT + Duration::from_millis(100),
            "stopped after {cpu_used:?} of CPU, limit {TIME_LIMIT:?}"
        );
        // Generous wall-clock bound: the call returns even on a loaded machine.
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
        assert_good_plugin_still_works(&engine);
    }
}

#[test]
fn time_limit_comes_from_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "loop", "test/loop", LOOP);
    std::fs::write(
        dir.path().join("loop.json"),
        r#"{"limits": {"time_ms": 40}}"#,
    )
    .unwrap();
    let engine = engine_with(dir.path()).unwrap();
    let error = engine
        .elect("test/loop", &request("test/loop"))
        .unwrap_err();
    assert!(
        matches!(error, CallError::LimitExceeded { limit, .. } if limit == Duration::from_millis(40)),
        "{error}"
    );
}

#[test]
fn the_operators_limits_win_over_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "loop", "test/loop", LOOP);
    std::fs::write(
        dir.path().join("loop.json"),
        r#"{"limits": {"time_ms": 5000}}"#,
    )
    .unwrap();
    let engine = Engine::new(EngineConfig {
        limit_overrides: LimitOverrides {
            time_ms: Some(40),
            ..LimitOverrides::default()
        },
        ..config(dir.path())
    })
    .unwrap();
    let plugin = engine
        .plugins()
        .into_iter()
        .find(|p| p.strategies.iter().any(|s| s == "test/loop"))
        .unwrap();
    assert_eq!(plugin.limits.time, Duration::from_millis(40));
    let error = engine
        .elect("test/loop", &request("test/loop"))
        .unwrap_err();
    assert!(
        matches!(error, CallError::LimitExceeded { limit, .. } if limit == Duration::from_millis(40)),
        "{error}"
    );
}

#[test]
fn operator_limits_beyond_the_engines_ceilings_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let error = Engine::new(EngineConfig {
        limit_overrides: LimitOverrides {
            instances: Some(Limits::MAX_INSTANCES + 1),
            ..LimitOverrides::default()
        },
        ..config(dir.path())
    })
    .unwrap_err();
    assert!(matches!(error, LoadError::DefaultLimits { .. }), "{error}");
}

#[test]
fn memory_bomb_is_stopped() {
    let (_dir, engine) = sandbox();
    let error = engine
        .elect("test/memory-bomb", &request("test/memory-bomb"))
        .unwrap_err();
    assert_eq!(error.label(), "memory", "{error}");
    assert!(error.to_string().contains("limit 16777216"), "{error}");
    assert_good_plugin_still_works(&engine);
}

#[test]
fn trap_becomes_an_error() {
    let (_dir, engine) = sandbox();
    let error = engine
        .elect("test/trap", &request("test/trap"))
        .unwrap_err();
    assert_eq!(error.label(), "trap", "{error}");
    assert!(error.to_string().contains("unreachable"), "{error}");
    assert_good_plugin_still_works(&engine);
}

#[test]
fn unknown_candidate_name_is_rejected() {
    let (_dir, engine) = sandbox();
    let error = engine
        .elect("test/unknown-name", &request("test/unknown-name"))
        .unwrap_err();
    assert_eq!(error.label(), "invalid_answer");
    assert!(
        matches!(&error, CallError::InvalidAnswer { answer, .. } if answer == "nobody"),
        "{error}"
    );
    assert_good_plugin_still_works(&engine);
}

#[test]
fn plugin_answers_none_or_an_error() {
    let (_dir, engine) = sandbox();
    assert_eq!(
        engine
            .elect("test/nobody", &request("test/nobody"))
            .unwrap(),
        None
    );
    let error = engine
        .elect("test/refuse", &request("test/refuse"))
        .unwrap_err();
    assert!(
        matches!(&error, CallError::PluginError { message, .. } if message == "cannot decide"),
        "{error}"
    );
    assert_eq!(error.label(), "plugin_error");
}

#[test]
fn unknown_strategy_is_a_typed_error() {
    let (_dir, engine) = sandbox();
    let error = engine
        .elect("example.com/nope", &request("example.com/nope"))
        .unwrap_err();
    assert_eq!(error.label(), "unknown_strategy");
    assert!(!engine.has_strategy("example.com/nope"));
    assert!(engine.has_strategy("test/loop"));
}

#[test]
fn component_importing_wasi_filesystem_is_rejected_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let wasi = r#"(component (import "wasi:filesystem/preopens@0.2.0" (instance)))"#;
    std::fs::write(dir.path().join("wasi.wasm"), wasi).unwrap();
    let error = engine_with(dir.path()).unwrap_err();
    assert_eq!(error.label(), "forbidden_import");
    assert!(
        matches!(&error, LoadError::ForbiddenImport { import, .. } if import == "wasi:filesystem/preopens@0.2.0"),
        "{error}"
    );
    assert!(error.to_string().contains("--allow-wasi"), "{error}");
}

#[test]
fn component_importing_an_unknown_host_interface_is_rejected_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let evil = r#"(component (import "example:evil/exfiltrate@1.0.0" (instance)))"#;
    std::fs::write(dir.path().join("evil.wasm"), evil).unwrap();
    let error = engine_with(dir.path()).unwrap_err();
    assert!(
        matches!(&error, LoadError::ForbiddenImport { import, .. } if import == "example:evil/exfiltrate@1.0.0"),
        "{error}"
    );
}

#[test]
fn two_plugins_claiming_one_name_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "impostor", OLDEST_EMULATION_VERSION, NOBODY);
    let error = engine_with(dir.path()).unwrap_err();
    assert!(
        matches!(&error, LoadError::DuplicateStrategy { strategy, .. } if strategy == OLDEST_EMULATION_VERSION),
        "{error}"
    );
}

#[test]
fn sidecar_sha256_mismatch_refuses_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "nobody", "test/nobody", NOBODY);
    std::fs::write(
        dir.path().join("nobody.json"),
        format!(r#"{{"sha256": "{}"}}"#, "0".repeat(64)),
    )
    .unwrap();
    let error = engine_with(dir.path()).unwrap_err();
    assert_eq!(error.label(), "sha256_mismatch");
    assert!(error.to_string().contains("sidecar expects"), "{error}");
}

#[test]
fn compiled_code_is_cached_on_disk_and_reused() {
    let plugins = tempfile::tempdir().unwrap();
    write_plugin(plugins.path(), "nobody", "test/nobody", NOBODY);
    let cache = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        cache_dir: Some(cache.path().join("wasm")),
        ..config(plugins.path())
    };
    let cold = Engine::new(config.clone()).unwrap();
    assert!(cold.plugins().iter().all(|p| !p.load.from_cache));
    let warm = Engine::new(config).unwrap();
    assert!(warm.plugins().iter().all(|p| p.load.from_cache));
    assert_eq!(
        warm.elect("test/nobody", &request("test/nobody")).unwrap(),
        None
    );
    assert_good_plugin_still_works(&warm);
}

#[test]
fn engine_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Engine>();
    let (_dir, engine) = sandbox();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    assert_good_plugin_still_works(&engine);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn wasi_component_is_accepted_only_with_allow_wasi() {
    let dir = tempfile::tempdir().unwrap();
    let with_wasi = fixture("test/wasi", NOBODY).replacen(
        "(component",
        r#"(component (import "wasi:random/insecure-seed@0.2.0" (instance (export "insecure-seed" (func (result (tuple u64 u64))))))"#,
        1,
    );
    std::fs::write(dir.path().join("wasi.wasm"), with_wasi).unwrap();
    let error = engine_with(dir.path()).unwrap_err();
    assert!(
        matches!(&error, LoadError::ForbiddenImport { import, .. } if import == "wasi:random/insecure-seed@0.2.0"),
        "{error}"
    );
    let engine = Engine::new(EngineConfig {
        allow_wasi: true,
        ..config(dir.path())
    })
    .expect("--allow-wasi accepts WASI imports");
    assert_eq!(
        engine.elect("test/wasi", &request("test/wasi")).unwrap(),
        None
    );
    assert_good_plugin_still_works(&engine);
}

#[test]
fn a_wasi_interface_the_deny_all_context_lacks_is_named_at_load_even_with_allow_wasi() {
    // componentize-js with its default features imports wasi:http; wasmtime alone would only
    // say "resource implementation is missing".
    let dir = tempfile::tempdir().unwrap();
    let with_http = fixture("test/http", TRAP).replacen(
        "(component",
        r#"(component (import "wasi:http/types@0.2.3" (instance (export "now" (func (result u64)))))"#,
        1,
    );
    std::fs::write(dir.path().join("http.wasm"), with_http).unwrap();
    let error = Engine::new(EngineConfig {
        allow_wasi: true,
        ..config(dir.path())
    })
    .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, LoadError::ForbiddenImport { import, .. } if import == "wasi:http/types@0.2.3"),
        "{message}"
    );
    assert!(message.contains("provides only"), "{message}");
}

/// Builds the fixture crate `fixtures/NAME` for wasm32-wasip2 and returns its component.
fn build_fixture(name: &str) -> std::path::PathBuf {
    let target_dir = wasm_build::repo().join("target/wasi-guest");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    wasm_build::cargo_build_wasm(
        &fixture,
        &["--locked", "--target-dir", target_dir.to_str().unwrap()],
    );
    target_dir.join(format!(
        "wasm32-wasip2/release/{}.wasm",
        name.replace('-', "_")
    ))
}

#[test]
fn a_panic_in_an_sdk_plugin_becomes_a_trap_error() {
    // Built with the SDK, whose panic handler aborts: the host must see a trap, not hang or crash.
    let wasm = build_fixture("panic-guest");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, dir.path().join("panic.wasm")).unwrap();
    let engine = engine_with(dir.path()).unwrap();
    for _ in 0..2 {
        let error = engine
            .elect("test/panic", &request("test/panic"))
            .unwrap_err();
        assert_eq!(error.label(), "trap", "{error}");
        // The SDK logs the panic before it traps: the error carries it, so the operator sees the
        // plugin's own account without turning up the log level.
        let message = error.to_string();
        assert!(
            message.contains("the plugin's last output") && message.contains("plugin panicked"),
            "{message}"
        );
        assert_good_plugin_still_works(&engine);
    }
}

#[test]
fn a_std_guest_runs_only_with_allow_wasi_and_in_a_deny_all_context() {
    let wasm = build_fixture("wasi-guest");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, dir.path().join("std.wasm")).unwrap();
    let error = engine_with(dir.path()).unwrap_err();
    assert!(
        matches!(&error, LoadError::ForbiddenImport { import, .. } if import.starts_with("wasi:")),
        "{error}"
    );

    // The guest names the candidate only if the filesystem, environment, arguments and clocks
    // were all denied; its stdout and stderr reach the host log.
    let mut config = config(dir.path());
    config.allow_wasi = true;
    let engine = Engine::new(config).expect("a std guest loads with allow_wasi");
    let log = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(log.clone())
        .finish();
    let answer = tracing::subscriber::with_default(subscriber, || {
        engine.elect("test/wasi-std", &request("test/wasi-std"))
    });
    assert_eq!(answer.unwrap().as_deref(), Some("new"));
    let log = log.contents();
    for line in [
        "wasi-guest stdout: 2 candidates",
        "wasi-guest stderr: probing the sandbox",
    ] {
        assert!(log.contains(line), "{line:?} not in the host log: {log}");
    }
}

/// A log writer whose output a test can read back.
#[derive(Clone, Default)]
struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    fn contents(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The loud fixture (`fixtures/loud-guest`) in a plugins directory of its own.
fn loud_engine() -> Engine {
    let wasm = build_fixture("loud-guest");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, dir.path().join("loud.wasm")).unwrap();
    Engine::new(config(dir.path())).expect("the loud fixture loads")
}

#[test]
fn a_huge_error_message_is_cut_and_says_so() {
    let engine = loud_engine();
    let error = engine
        .elect("test/huge-error", &request("test/huge-error"))
        .unwrap_err();
    let CallError::PluginError { message, .. } = &error else {
        panic!("expected a plugin error, got {error}");
    };
    assert!(
        message.len() <= MAX_PLUGIN_TEXT + 64,
        "{} bytes",
        message.len()
    );
    assert!(
        message.contains("[cut]") && message.ends_with("(2097152 bytes in all)"),
        "{}",
        &message[message.len() - 80..]
    );
    assert_good_plugin_still_works(&engine);
}

#[test]
fn a_position_past_the_last_candidate_is_invalid() {
    let engine = loud_engine();
    let error = engine
        .elect("test/huge-answer", &request("test/huge-answer"))
        .unwrap_err();
    let CallError::InvalidAnswer { answer, .. } = &error else {
        panic!("expected an invalid answer, got {error}");
    };
    assert_eq!(answer, "position 4294967295 (there are 2 candidates)");
    assert_good_plugin_still_works(&engine);
}

/// A 0.1 `elect` body answering `ok(some(name))` with a 2 MiB name of `x`s at 64 KiB.
const HUGE_NAME: &str = "(drop (memory.grow (i32.const 40))) \
    (memory.fill (i32.const 0x10000) (i32.const 0x78) (i32.const 0x200000)) \
    (i32.store (i32.const 0x300) (i32.const 0)) (i32.store (i32.const 0x304) (i32.const 1)) \
    (i32.store (i32.const 0x308) (i32.const 0x10000)) \
    (i32.store (i32.const 0x30c) (i32.const 0x200000)) (i32.const 0x300)";

#[test]
fn a_0_1_answer_longer_than_any_candidate_name_is_invalid_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    write_plugin(dir.path(), "huge", "test/huge-name", HUGE_NAME);
    let engine = engine_with(dir.path()).unwrap();
    let error = engine
        .elect("test/huge-name", &request("test/huge-name"))
        .unwrap_err();
    let CallError::InvalidAnswer { answer, .. } = &error else {
        panic!("expected an invalid answer, got {error}");
    };
    assert!(
        answer.len() <= MAX_PLUGIN_TEXT + 64,
        "{} bytes",
        answer.len()
    );
    assert!(answer.ends_with("(2097152 bytes in all)"), "{answer:.80}");
    assert!(error.to_string().len() < 2 * MAX_PLUGIN_TEXT);
}

/// The built-in OldestEmulationVersion as it was built against an older contract version, kept in
/// `fixtures/v0.1/`, `fixtures/v0.2/` and `fixtures/v0.3/`, loaded from a file.
fn fixture_engine(version: &str) -> Engine {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/fixtures/v{version}/oldest_emulation_version.wasm"
    ));
    Engine::from_file(config(Path::new("unused")), &path)
        .unwrap_or_else(|error| panic!("a {version} component loads: {error}"))
}

#[test]
fn components_built_against_0_1_0_2_and_0_3_load_and_elect_like_the_0_4_builtin() {
    let current = Engine::new(EngineConfig::default()).unwrap();
    let builtin = current.plugins();
    assert_eq!(builtin[0].contract, "0.4.0");
    assert_eq!(builtin[0].reads, "versions and times only");

    let mut cases = vec![request(OLDEST_EMULATION_VERSION)];
    let mut tie = request(OLDEST_EMULATION_VERSION);
    tie.candidates = vec![
        candidate("b", "1.33.0", "1.32.0"),
        candidate("a", "1.33.0", "1.32.0"),
        candidate("unparseable", "latest", "1.0.0"),
        candidate("pre", "1.33.0-rc.1", "1.32.0"),
    ];
    cases.push(tie);
    let mut nobody = request(OLDEST_EMULATION_VERSION);
    nobody.candidates = vec![candidate("broken", "x", "y")];
    cases.push(nobody);
    assert_eq!(
        current
            .elect(OLDEST_EMULATION_VERSION, &cases[1])
            .unwrap()
            .as_deref(),
        Some("pre"),
        "a pre-release sorts before its release"
    );
    for version in ["0.1", "0.2", "0.3"] {
        let old = fixture_engine(version);
        let info = old.plugins();
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].contract, format!("{version}.0"));
        assert!(
            info[0].reads_now && old.reads_now(OLDEST_EMULATION_VERSION),
            "a {version} component cannot say it does not read `now`"
        );
        assert!(
            info[0]
                .imports
                .iter()
                .any(|i| i.starts_with(&format!("conclave:strategy/log@{version}."))),
            "{:?}",
            info[0].imports
        );
        for case in &cases {
            let expected = current.elect(OLDEST_EMULATION_VERSION, case).unwrap();
            assert_eq!(
                old.elect(OLDEST_EMULATION_VERSION, case).unwrap(),
                expected,
                "the {version} component"
            );
        }
    }
}

/// What `fixtures/echo-guest` describes for `request`: what a 0.4 plugin reading every field
/// should see.
fn expected_echo(request: &ElectionRequest) -> String {
    use conclave_core::version::Version;
    let lease = &request.lease;
    let mut sorted: Vec<&CandidateView> = request.candidates.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let index = |name: &Option<String>| {
        name.as_ref()
            .and_then(|name| sorted.iter().position(|c| &c.name == name))
            .map(|i| i as u32)
    };
    let mut seen = format!(
        "lease {}/{} holder {:?}@{:?} preferred {:?}@{:?} expired {} now {} settings {:?}\n",
        lease.namespace,
        lease.name,
        lease.holder,
        index(&lease.holder),
        lease.preferred_holder,
        index(&lease.preferred_holder),
        lease.expired,
        request.now.as_micros(),
        request.settings
    );
    // Orders: the rank of each distinct parsed version of the request.
    let mut distinct: Vec<Version> = sorted
        .iter()
        .flat_map(|c| [&c.binary_version, &c.emulation_version])
        .filter_map(|text| Version::parse_tolerant(text).ok())
        .collect();
    distinct.sort();
    distinct.dedup();
    let version = |text: &str| match Version::parse_tolerant(text) {
        Ok(parsed) => {
            let order = distinct.iter().position(|v| *v == parsed).unwrap();
            let pre = if parsed.pre.is_empty() { "" } else { "-pre" };
            format!(
                "{}.{}.{}{pre}#{order}",
                parsed.major, parsed.minor, parsed.patch
            )
        }
        Err(_) => "none".into(),
    };
    let micros = |t: Option<Timestamp>| t.map(Timestamp::as_micros);
    for (i, c) in sorted.iter().enumerate() {
        let pairs = |pairs: &[(String, String)]| -> Vec<(String, String)> { pairs.to_vec() };
        seen.push_str(&format!(
            "{i} {} binary {} {:?} emulation {} {:?} strategy {:?} created {:?} renewed {:?} \
             pinged {:?} labels {:?} annotations {:?}\n",
            c.name,
            version(&c.binary_version),
            c.binary_version,
            version(&c.emulation_version),
            c.emulation_version,
            c.strategy,
            micros(c.creation_time),
            micros(c.renew_time),
            micros(c.ping_time),
            pairs(&c.labels),
            pairs(&c.annotations),
        ));
    }
    seen
}

/// Issue 31: a 0.4 plugin says whether its answer may depend on `now`, and the engine reports it
/// per strategy, so the controller can skip the renewals that only move the clock. The same rule
/// built against 0.3 (the `fixtures/v0.3` built-in) could not say it and is taken to read `now`:
/// telling the two apart is telling their contract versions apart, whose `elect` types are equal.
#[test]
fn a_0_4_plugin_declares_whether_it_reads_now_and_a_0_3_plugin_reads_it() {
    let builtin = Engine::new(EngineConfig::default()).unwrap();
    assert!(!builtin.reads_now(OLDEST_EMULATION_VERSION));
    assert!(!builtin.plugins()[0].reads_now);
    assert!(
        builtin.reads_now("example.com/not-loaded"),
        "no plugin, no declaration"
    );

    let old = fixture_engine("0.3");
    assert_eq!(old.plugins()[0].contract, "0.3.0");
    assert!(old.reads_now(OLDEST_EMULATION_VERSION));

    // A third-party plugin loaded from a file decides by its declaration, not by its source:
    // conclave.dev/priority declares `false`.
    let built = wasm_build::build_plugins(&["priority"]).join("priority.wasm");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&built, dir.path().join("priority.wasm")).unwrap();
    let loaded = engine_with(dir.path()).unwrap();
    let priority = loaded
        .plugins()
        .into_iter()
        .find(|info| info.strategies == ["conclave.dev/priority"])
        .unwrap();
    assert_eq!(priority.contract, "0.4.0");
    assert!(!priority.reads_now);
    assert!(!loaded.reads_now("conclave.dev/priority"));
}

#[test]
fn every_column_of_a_0_4_request_arrives_intact() {
    let wasm = build_fixture("echo-guest");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, dir.path().join("echo.wasm")).unwrap();
    let engine = engine_with(dir.path()).unwrap();
    let info = engine
        .plugins()
        .into_iter()
        .find(|info| info.strategies == ["test/echo"])
        .unwrap();
    assert_eq!(info.contract, "0.4.0");
    assert_eq!(
        info.reads,
        "versions, times, name, strategy, version text, labels, annotations"
    );
    // The SDK's default, `Reads::EVERYTHING`, declares that the rule reads `now`.
    assert!(info.reads_now && engine.reads_now("test/echo"));

    let mut request = request("test/echo");
    request.lease.holder = Some("zeta".into());
    request.lease.preferred_holder = Some("gone".into());
    request.settings = r#"{"a": 1}"#.into();
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let mut zeta = candidate("zeta", "v1.33", "1.32.0-rc.1");
    zeta.labels = vec![pair("app", "sched"), pair("zone", "b")];
    zeta.annotations = vec![pair("coordination.conclave.dev/priority", "7")];
    zeta.renew_time = Some(Timestamp::from_secs(1_799_999_990));
    zeta.ping_time = Some(Timestamp::from_secs(1_799_999_980));
    let mut alpha = candidate("alpha", "latest", "");
    alpha.creation_time = None;
    alpha.strategy = "example.com/other".into();
    alpha.labels = vec![pair("zone", "a")];
    let mut mid = candidate("mid", "1.33.0", "1.32.0");
    mid.labels = vec![pair("zone", "b"), pair("zzz", "ünïcode ✓")];
    request.candidates = vec![zeta, alpha, mid];
    let expected = expected_echo(&request);
    // The request's distinct versions in order: 1.32.0-rc.1 < 1.32.0 < 1.33.0 (= v1.33).
    assert!(
        expected.contains("2 zeta binary 1.33.0#2 \"v1.33\" emulation 1.32.0-pre#0"),
        "{expected}"
    );
    let error = engine.elect("test/echo", &request).unwrap_err();
    let CallError::PluginError { message, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(message, &expected);
}

#[test]
fn a_0_2_request_with_two_candidates_of_one_name_is_refused() {
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let mut request = request(OLDEST_EMULATION_VERSION);
    request
        .candidates
        .push(candidate("new", "1.30.0", "1.30.0"));
    let error = engine
        .elect(OLDEST_EMULATION_VERSION, &request)
        .unwrap_err();
    assert_eq!(error.label(), "invalid_request", "{error}");
    assert!(
        error.to_string().contains("\"new\" is listed twice"),
        "{error}"
    );
}

#[test]
fn log_lines_are_cut_and_counted() {
    let engine = loud_engine();
    let log = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(log.clone())
        .finish();
    let answer = tracing::subscriber::with_default(subscriber, || {
        engine.elect("test/loud-log", &request("test/loud-log"))
    });
    assert_eq!(answer, Ok(None));
    let log = log.contents();
    let lines: Vec<&str> = log.lines().collect();
    // 64 messages of at most MAX_PLUGIN_TEXT bytes each (plus the log line's own fields), and
    // one warning that the budget ran out; 100 × 2 MiB were written.
    let cut = lines.iter().filter(|line| line.contains("[cut]")).count();
    assert_eq!(cut, 64, "{} lines", lines.len());
    assert!(lines.iter().all(|line| line.len() < MAX_PLUGIN_TEXT + 512));
    let warnings = lines
        .iter()
        .filter(|line| line.contains("reached its log budget"))
        .count();
    assert_eq!(warnings, 1);
    assert!(
        log.len() < 64 * (MAX_PLUGIN_TEXT + 512) + 1024,
        "{} bytes",
        log.len()
    );
}
