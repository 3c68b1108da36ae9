//! Builds the strategy plugins from source for wasm32-wasip2 and generates
//! `$OUT_DIR/builtins.rs`, which embeds the built-in ones with `include_bytes!`, so a plain `cargo build` of the
//! host yields a `conclave` binary that needs no file at run time.
//!
//! The plugins live in their own cargo workspace (`strategies/`). They are built by a nested cargo
//! with its own target directory (`<target>/wasm-plugins`): the outer cargo holds the lock on its
//! profile directory while this script runs, so sharing it would deadlock.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The built-in plugins: cargo package name in `strategies/`.
const BUILTINS: &[&str] = &["oldest-emulation-version"];
/// The plugin `conclave demo` falls back to for its plugin Lease when none is found on disk (a
/// binary far from its source tree, such as the container image's). It is embedded as bytes and
/// loaded from a file like any third-party plugin, never registered as a built-in.
const DEMO_PLUGIN: &str = "priority";

const WASM_TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .expect("host/ has a parent")
        .to_path_buf();
    let strategies = repo.join("strategies");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    for input in ["strategies", "wit", "core/src", "core/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", repo.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=CONCLAVE_PLUGINS_TARGET_DIR");

    let lock = repo.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let wasmtime_version = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|lock| locked_version(&lock, "wasmtime"))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CONCLAVE_WASMTIME_VERSION={wasmtime_version}");

    let target_dir = env::var_os("CONCLAVE_PLUGINS_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cargo_target_dir(&out_dir).join("wasm-plugins"));

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

    let mut generated = String::from(
        "/// The built-in plugins, built from `strategies/` by `host/build.rs`: \
         (package name, component bytes).\n\
         pub(crate) const BUILTINS: &[(&str, &[u8])] = &[\n",
    );
    for package in BUILTINS {
        writeln!(
            generated,
            "    ({package:?}, include_bytes!({:?})),",
            built_component(&target_dir, package)
        )
        .expect("writing to a String");
    }
    generated.push_str("];\n");
    std::fs::write(out_dir.join("builtins.rs"), generated).expect("write builtins.rs");

    let demo = format!(
        "/// The plugin `conclave demo` falls back to, built from `strategies/` by \
         `host/build.rs`: (package name, component bytes).\n\
         pub(crate) const DEMO_PLUGIN: (&str, &[u8]) = ({DEMO_PLUGIN:?}, include_bytes!({:?}));\n",
        built_component(&target_dir, DEMO_PLUGIN)
    );
    std::fs::write(out_dir.join("demo_plugin.rs"), demo).expect("write demo_plugin.rs");
}

/// The component the plugin build produced for `package`, as a path string for `include_bytes!`.
fn built_component(target_dir: &Path, package: &str) -> String {
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

/// The version of `package` recorded in a Cargo.lock.
fn locked_version(lock: &str, package: &str) -> Option<String> {
    let name_line = format!("name = \"{package}\"");
    let mut lines = lock.lines();
    lines.find(|line| *line == name_line)?;
    let version = lines
        .next()?
        .strip_prefix("version = \"")?
        .strip_suffix('"')?;
    Some(version.to_owned())
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
