//! `conclave strategy test`: the shipped vectors pass through the built-in plugin, and a failing
//! case is reported and fails the command.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
        stdout.contains("imports:     conclave:strategy/log@0.3.0\n")
            && stdout.contains("contract:    conclave:strategy@0.3.0\n")
            && stdout.contains("reads:       versions and times only\n"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sha256:") && l.len() == "sha256:      ".len() + 64),
        "{stdout}"
    );
}
