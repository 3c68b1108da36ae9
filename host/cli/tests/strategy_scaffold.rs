//! `conclave strategy new`: the scaffolded crate builds for wasm32-wasip2 as generated, its
//! vectors pass through the engine, and it loads from a plugin directory like any third-party
//! plugin.

use conclave_engine::{Engine, EngineConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use conclave_testkit::wasm_build;

use wasm_build::repo;

fn conclave(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .output()
        .expect("run conclave")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn scaffolded_plugin_builds_and_passes_its_vectors() {
    // A temp dir inside the checkout: the scaffolder finds the SDK there by itself.
    let work = tempfile::tempdir_in(repo().join("target")).unwrap();
    let dir = work.path().join("my-rule");
    let output = conclave(&[
        "strategy",
        "new",
        "my-rule",
        "--strategy",
        "example.com/my-rule",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "src/lib.rs",
        "vectors/my-rule.json",
        "README.md",
    ] {
        assert!(dir.join(file).is_file(), "missing {file}");
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("conclave-strategy = { path = \"../../../strategies/sdk\" }"),
        "{manifest}"
    );

    let wasm = build_and_test(&dir, "my-rule");

    // Shipped like any third-party plugin: a .wasm in the plugins directory.
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(&wasm, plugins.join("my_rule.wasm")).unwrap();
    let engine = Engine::new(EngineConfig {
        plugins_dir: Some(plugins),
        ..EngineConfig::default()
    })
    .unwrap();
    assert!(engine.has_strategy("example.com/my-rule"));
}

/// Builds the scaffolded crate in `dir` exactly as its README says (with a target dir kept between
/// runs for speed), runs its vectors through `conclave strategy test`, and returns the component.
fn build_and_test(dir: &Path, name: &str) -> PathBuf {
    let target_dir = repo().join("target").join("scaffold-build");
    wasm_build::cargo_build_wasm(dir, &["--target-dir", target_dir.to_str().unwrap()]);
    let wasm = repo().join(format!(
        "target/scaffold-build/wasm32-wasip2/release/{}.wasm",
        name.replace('-', "_")
    ));
    assert!(wasm.is_file());

    let vectors = dir.join(format!("vectors/{name}.json"));
    let tested = conclave(&[
        "strategy",
        "test",
        wasm.to_str().unwrap(),
        "--vectors",
        vectors.to_str().unwrap(),
    ]);
    assert!(tested.status.success(), "{}", text(&tested));
    assert_eq!(
        String::from_utf8_lossy(&tested.stdout).lines().last(),
        Some("3 passed, 0 failed")
    );
    wasm
}

#[test]
fn outside_a_checkout_the_plugin_builds_against_the_bundled_sdk() {
    // A directory outside the checkout, and no --sdk: the binary writes the SDK it was built with.
    let work = tempfile::tempdir().unwrap();
    assert!(!work.path().starts_with(repo()));
    let output = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .current_dir(work.path())
        .args([
            "strategy",
            "new",
            "far-rule",
            "--strategy",
            "example.com/far-rule",
        ])
        .output()
        .expect("run conclave");
    assert!(output.status.success(), "{}", text(&output));
    let dir = work.path().join("far-rule");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("conclave-strategy = { path = \"conclave-sdk/strategies/sdk\" }"),
        "{manifest}"
    );
    assert!(
        dir.join("conclave-sdk/docs/strategy-authoring.md")
            .is_file()
    );
    build_and_test(&dir, "far-rule");
}

#[test]
fn scaffolding_refuses_a_strategy_kubernetes_would_reject() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("plain");
    let output = conclave(&[
        "strategy",
        "new",
        "plain",
        "--strategy",
        "Plain",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("domain-prefixed"),
        "{}",
        text(&output)
    );
    assert!(!dir.exists());
}
