//! Embeds what the `conclave` binary carries besides the built-in plugins (which
//! `conclave-engine` embeds) and the demo's plugin (which `conclave-demo` embeds): the strategy SDK
//! `conclave strategy new` writes out (`$OUT_DIR/bundled_sdk.rs`).

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .ancestors()
        .nth(2)
        .expect("host/cli has a repository above it")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    bundle_sdk(&repo, &out_dir);
}

/// Writes `$OUT_DIR/bundled_sdk.rs`: the strategy SDK, the core crate it depends on, the WIT
/// contract, the plugin workspace's lockfile and the authoring guide, as (path, contents) pairs in
/// the checkout's layout. `conclave strategy new` writes them beside a crate it creates outside a
/// Conclave checkout, so that crate builds at once, offline, against the SDK of this very binary.
/// Manifest keys inherited from a workspace are written out, since the bundle has no workspace.
fn bundle_sdk(repo: &Path, out_dir: &Path) {
    for input in [
        "docs/strategy-authoring.md",
        "Cargo.toml",
        "core",
        "wit",
        "strategies/Cargo.toml",
        "strategies/Cargo.lock",
        "strategies/sdk",
    ] {
        println!("cargo:rerun-if-changed={}", repo.join(input).display());
    }
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
        "/// The strategy SDK and what it needs to build, bundled by `host/cli/build.rs` from this \
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
