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

    bundle_sdk(&repo, &out_dir);
}

/// Writes `$OUT_DIR/bundled_sdk.rs`: the strategy SDK, the core crate it depends on, the WIT
/// contract, the plugin workspace's lockfile and the authoring guide, as (path, contents) pairs in
/// the checkout's layout. `conclave strategy new` writes them beside a crate it creates outside a
/// Conclave checkout, so that crate builds at once, offline, against the SDK of this very binary.
/// Manifest keys inherited from a workspace are written out, since the bundle has no workspace.
fn bundle_sdk(repo: &Path, out_dir: &Path) {
    println!(
        "cargo:rerun-if-changed={}",
        repo.join("docs/strategy-authoring.md").display()
    );
    let root_workspace = read(&repo.join("Cargo.toml"));
    let plugin_workspace = read(&repo.join("strategies/Cargo.toml"));
    let mut files: Vec<(String, String)> = vec![
        (
            "core/Cargo.toml".into(),
            standalone_manifest(&read(&repo.join("core/Cargo.toml")), &root_workspace, ""),
        ),
        (
            "strategies/sdk/Cargo.toml".into(),
            standalone_manifest(
                &read(&repo.join("strategies/sdk/Cargo.toml")),
                &plugin_workspace,
                "../",
            ),
        ),
        (
            "Cargo.lock".into(),
            read(&repo.join("strategies/Cargo.lock")),
        ),
        (
            "docs/strategy-authoring.md".into(),
            read(&repo.join("docs/strategy-authoring.md")),
        ),
    ];
    for dir in ["wit", "core/src", "strategies/sdk/src"] {
        let mut names: Vec<String> = std::fs::read_dir(repo.join(dir))
            .unwrap_or_else(|error| panic!("cannot read {dir}: {error}"))
            .map(|entry| entry.expect("a directory entry").file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".rs") || name.ends_with(".wit"))
            .collect();
        names.sort();
        for name in names {
            let path = format!("{dir}/{name}");
            let contents = read(&repo.join(&path));
            files.push((path, contents));
        }
    }
    let mut generated = String::from(
        "/// The strategy SDK and what it needs to build, bundled by `host/build.rs` from this \
         checkout: (path in the checkout's layout, contents).\n\
         pub(crate) const BUNDLED_SDK: &[(&str, &str)] = &[\n",
    );
    for (path, contents) in &files {
        writeln!(generated, "    ({path:?}, {contents:?}),").expect("writing to a String");
    }
    generated.push_str("];\n");
    std::fs::write(out_dir.join("bundled_sdk.rs"), generated).expect("write bundled_sdk.rs");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// `manifest` with every `KEY.workspace = true` and `NAME = { workspace = true }` replaced by the
/// value `workspace` declares; a path dependency's path gets `path_prefix` (the member's depth
/// below its workspace root).
fn standalone_manifest(manifest: &str, workspace: &str, path_prefix: &str) -> String {
    let package = toml_section(workspace, "workspace.package");
    let dependencies = toml_section(workspace, "workspace.dependencies");
    let lookup = |table: &[(String, String)], key: &str| -> String {
        table
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("the workspace declares no {key}"))
    };
    let mut out = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        if let Some(key) = trimmed.strip_suffix(".workspace = true") {
            writeln!(out, "{key} = {}", lookup(&package, key)).expect("writing to a String");
        } else if let Some(name) = trimmed.strip_suffix(" = { workspace = true }") {
            let value = lookup(&dependencies, name)
                .replace("path = \"", &format!("path = \"{path_prefix}"));
            writeln!(out, "{name} = {value}").expect("writing to a String");
        } else {
            assert!(
                !trimmed.contains("workspace"),
                "cannot bundle a manifest line that inherits from the workspace in another form: {line}"
            );
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The `key = value` lines of `[section]` in a TOML file, values as written.
fn toml_section(toml: &str, section: &str) -> Vec<(String, String)> {
    let header = format!("[{section}]");
    toml.lines()
        .skip_while(|line| line.trim() != header)
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .filter_map(|line| line.split_once(" = "))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect()
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
