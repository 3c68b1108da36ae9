//! Shared by the build scripts of `conclave-engine` (which embeds the built-in plugins) and
//! `conclave-demo` (which embeds the demo's plugin): builds the plugin workspace `strategies/` from
//! source for wasm32-wasip2, once per target directory.
//!
//! The plugins are built by a nested cargo with its own target directory (`<target>/wasm-plugins`):
//! the outer cargo holds the lock on its profile directory while a build script runs, so sharing
//! it would deadlock. Both build scripts use the same directory; cargo's lock on it serializes them
//! and the second finds everything built.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const WASM_TARGET: &str = "wasm32-wasip2";

/// The repository root, two levels above a `host/CRATE` manifest directory.
pub fn repo() -> PathBuf {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .nth(2)
        .expect("host/CRATE has a repository above it")
        .to_path_buf()
}

/// Builds every plugin of `strategies/` and returns the target directory they were built in.
pub fn build_plugins(repo: &Path, out_dir: &Path) -> PathBuf {
    for input in ["strategies", "wit", "core/src", "core/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", repo.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=CONCLAVE_PLUGINS_TARGET_DIR");
    let strategies = repo.join("strategies");
    let target_dir = env::var_os("CONCLAVE_PLUGINS_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cargo_target_dir(out_dir).join("wasm-plugins"));

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&strategies)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            WASM_TARGET,
            "--target-dir",
        ])
        .arg(&target_dir);
    // The whole plugin workspace is built, though only the built-ins are embedded: the other
    // plugins land beside them in `<target>/wasm-plugins`, where `conclave demo` finds one for its
    // plugin Lease without a separate build step.
    command.arg("--workspace");
    // Settings meant for the host build must not leak into the plugin build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        command.env_remove(var);
    }
    let status = command.status().unwrap_or_else(|error| {
        panic!("cannot run cargo to build the built-in strategy plugins: {error}")
    });
    assert!(
        status.success(),
        "building the built-in strategy plugins failed ({status}); is the {WASM_TARGET} target \
         installed? (`rustup target add {WASM_TARGET}`)"
    );

    target_dir
}

/// The component the plugin build produced for `package`, as a path string for `include_bytes!`.
pub fn built_component(target_dir: &Path, package: &str) -> String {
    let wasm = target_dir
        .join(WASM_TARGET)
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    assert!(
        wasm.is_file(),
        "plugin build did not produce {}",
        wasm.display()
    );
    wasm.display().to_string()
}

/// The outer build's target directory: the nearest ancestor of `OUT_DIR` that cargo tagged with
/// `CACHEDIR.TAG`, falling back to `OUT_DIR` itself.
fn cargo_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out_dir)
        .to_path_buf()
}
