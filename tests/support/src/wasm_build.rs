//! Builds WebAssembly components from a test the way a plugin author does: `cargo build --release
//! --target wasm32-wasip2` in the crate's directory, without the settings the outer test build
//! passes down (flags and target directories meant for the host).
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cargo build --release --target wasm32-wasip2 ARGS` in `dir` and panics with cargo's
/// output if it fails.
pub fn cargo_build_wasm(dir: &Path, args: &[&str]) {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .args(args);
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
    ] {
        cargo.env_remove(var);
    }
    let output = cargo.output().expect("run cargo");
    assert!(
        output.status.success(),
        "cargo build in {} failed:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support has a repository above it")
        .to_path_buf()
}

/// Builds the given packages of the plugin workspace (`strategies/`) as the test script does, and returns the directory holding their `NAME.wasm` files.
pub fn build_plugins(packages: &[&str]) -> PathBuf {
    let mut args = vec!["--locked"];
    for package in packages {
        args.extend(["--package", package]);
    }
    cargo_build_wasm(&repo().join("strategies"), &args);
    repo().join("target/wasm/wasm32-wasip2/release")
}
