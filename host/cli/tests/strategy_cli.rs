//! `conclave strategy test`: the shipped vectors pass through the built-in plugin, and a failing
//! case is reported and fails the command.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use conclave_testkit::fixture_plugin::fixture_component;

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/oldest-emulation-version.json")
}

fn conclave(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .output()
        .expect("run conclave")
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn shipped_vectors_pass_under_both_names() {
    let text = std::fs::read_to_string(vectors()).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = file["cases"].as_array().unwrap().len();
    assert!(cases >= 20);
    for strategy in ["OldestEmulationVersion", "MinimumCompatibilityVersion"] {
        let output = conclave(&[
            "strategy",
            "test",
            "OldestEmulationVersion",
            "--vectors",
            vectors().to_str().unwrap(),
            "--strategy",
            strategy,
            // The limit is CPU time; the 100-candidate cases need more than 10 ms in a debug build.
            "--time-limit-ms",
            "1000",
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert_eq!(last_line(&output), format!("{cases} passed, 0 failed"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains(
                r#"PASS upstream integration example elects baz3: expected leader "baz3", got "baz3""#
            ),
            "{stdout}"
        );
    }
}

#[test]
fn a_wrong_expectation_fails_the_run() {
    let text = std::fs::read_to_string(vectors()).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = file["cases"].as_array().unwrap().len();
    file["cases"][0]["expect"]["leader"] = "baz1".into();
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, file.to_string()).unwrap();
    let output = conclave(&[
        "strategy",
        "test",
        "OldestEmulationVersion",
        "--vectors",
        broken.to_str().unwrap(),
        "--time-limit-ms",
        "1000",
    ]);
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            r#"FAIL upstream integration example elects baz3: expected leader "baz1", got "baz3""#
        ),
        "{stdout}"
    );
    assert_eq!(
        last_line(&output),
        format!("{} passed, 1 failed", cases - 1)
    );
}

#[test]
fn inspect_shows_names_imports_and_digest() {
    let output = conclave(&["strategy", "inspect", "MinimumCompatibilityVersion"]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("strategies:  OldestEmulationVersion, MinimumCompatibilityVersion"),
        "{stdout}"
    );
    assert!(
        stdout.contains("imports:     conclave:strategy/log@0.4.0\n")
            && stdout.contains("contract:    conclave:strategy@0.4.0\n")
            && stdout.contains("reads:       versions and times only\n")
            && stdout.contains("reads now:   no "),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sha256:") && l.len() == "sha256:      ".len() + 64),
        "{stdout}"
    );
}

/// `conclave` with `args` and a private compiled-code cache (`XDG_CACHE_HOME`).
fn conclave_cached(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("CONCLAVE_CACHE_DIR")
        .output()
        .expect("run conclave")
}

/// The 0.2 build of the built-in, copied into `dir` with a sidecar setting `time_ms`.
fn plugin_with_sidecar(dir: &Path, time_ms: u64) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/v0.2/oldest_emulation_version.wasm");
    let plugin = dir.join("oldest.wasm");
    std::fs::copy(fixture, &plugin).unwrap();
    std::fs::write(
        dir.join("oldest.json"),
        format!(r#"{{"limits": {{"time_ms": {time_ms}}}}}"#),
    )
    .unwrap();
    plugin
}

#[test]
fn inspect_test_and_bench_share_the_default_compiled_code_cache() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_with_sidecar(dir.path(), 20);
    let plugin = plugin.to_str().unwrap();
    let first = conclave_cached(cache.path(), &["strategy", "inspect", plugin]);
    assert!(first.status.success());
    assert!(String::from_utf8_lossy(&first.stdout).contains("load:        compiled"));
    assert!(cache.path().join("conclave/wasm").is_dir());
    let again = conclave_cached(cache.path(), &["strategy", "inspect", plugin]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(
        stdout.contains("load:        loaded compiled code from cache"),
        "{stdout}"
    );
    let bench = conclave_cached(
        cache.path(),
        &[
            "strategy",
            "bench",
            plugin,
            "--candidates",
            "3",
            "--iterations",
            "10",
        ],
    );
    let stdout = String::from_utf8_lossy(&bench.stdout);
    assert!(stdout.contains("loaded from cache"), "{stdout}");
}

#[test]
fn a_command_line_limit_replaces_the_sidecars_and_says_so() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_with_sidecar(dir.path(), 20);
    let plugin = plugin.to_str().unwrap();
    let sidecar_only = conclave_cached(cache.path(), &["strategy", "inspect", plugin]);
    assert!(String::from_utf8_lossy(&sidecar_only.stdout).contains("limits:      20ms per call"));
    let flagged = conclave_cached(
        cache.path(),
        &["strategy", "inspect", plugin, "--time-limit-ms", "50"],
    );
    assert!(flagged.status.success());
    let stdout = String::from_utf8_lossy(&flagged.stdout);
    assert!(stdout.contains("limits:      50ms per call"), "{stdout}");
    let stderr = String::from_utf8_lossy(&flagged.stderr);
    assert!(
        stderr.contains("the operator's limit replaces the one in the plugin's sidecar")
            && stderr.contains("time_ms")
            && stderr.contains("sidecar=20"),
        "{stderr}"
    );
}

#[test]
fn the_strategy_flag_overrides_the_strategy_a_case_names() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("vectors.json");
    let text = std::fs::read_to_string(vectors()).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    for case in file["cases"].as_array_mut().unwrap() {
        case["strategy"] = "example.com/not-implemented".into();
    }
    std::fs::write(&foreign, file.to_string()).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "strategy",
            "test",
            "OldestEmulationVersion",
            "--vectors",
            foreign.to_str().unwrap(),
            "--time-limit-ms",
            "1000",
        ];
        args.extend_from_slice(extra);
        conclave(&args)
    };
    let named_by_cases = run(&[]);
    assert!(!named_by_cases.status.success());
    assert!(
        String::from_utf8_lossy(&named_by_cases.stdout)
            .contains("does not implement strategy \"example.com/not-implemented\"")
    );
    let overridden = run(&["--strategy", "MinimumCompatibilityVersion"]);
    assert!(
        overridden.status.success(),
        "{}",
        String::from_utf8_lossy(&overridden.stdout)
    );
    assert!(last_line(&overridden).ends_with(" passed, 0 failed"));
}

/// The testkit's hand-written fixture plugin (conclave:strategy@0.1.0) implementing `strategy`
/// with `body` as its `elect`, as a component file in `dir`.
fn fixture_plugin(dir: &Path, strategy: &str, body: &str) -> PathBuf {
    let path = dir.join("plugin.wasm");
    std::fs::write(&path, fixture_component(strategy, body)).unwrap();
    path
}

#[test]
fn bench_counts_decisions_over_the_time_limit_and_reports_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Spins when the request has more than 3 candidates, else answers none: 3 candidates
    // decide and 4 never do. The 0.1 request is passed by pointer; its candidate list's length
    // is at byte 76 (the lease record takes 52 bytes, then `now`, `settings`, the list's pointer).
    let plugin = fixture_plugin(
        dir.path(),
        "test/slow",
        "(if (i32.gt_u (i32.load offset=76 (local.get 0)) (i32.const 3)) \
           (then (loop $spin (br $spin)))) (i32.const 0x120)",
    );
    let output = conclave(&[
        "strategy",
        "bench",
        plugin.to_str().unwrap(),
        "--candidates",
        "3,4",
        "--iterations",
        "2",
        "--time-limit-ms",
        "20",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    let small = stdout
        .lines()
        .find(|line| line.starts_with("test/slow") && line.contains(" 3 "))
        .unwrap_or_else(|| panic!("no row for 3 candidates: {stdout}"));
    assert!(small.contains("  none"), "{small}");
    assert!(
        stdout.contains("every decision failed (3 over the time limit, 0 otherwise)"),
        "{stdout}"
    );
}
