//! Builds the strategy plugins from source for wasm32-wasip2 (see `../plugin_build.rs`) and
//! generates `$OUT_DIR/builtins.rs`, which embeds the built-in ones with `include_bytes!`, so an
//! engine needs no file at run time.

#[path = "../plugin_build.rs"]
mod plugin_build;

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The built-in plugins: cargo package name in `strategies/`.
const BUILTINS: &[&str] = &["oldest-emulation-version"];

fn main() {
    let repo = plugin_build::repo();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    let lock = repo.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let wasmtime_version = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|lock| locked_version(&lock, "wasmtime"))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CONCLAVE_WASMTIME_VERSION={wasmtime_version}");

    let target_dir = plugin_build::build_plugins(&repo, &out_dir);
    let mut generated = String::from(
        "/// The built-in plugins, built from `strategies/` by `host/engine/build.rs`: \
         (package name, component bytes).\n\
         pub(crate) const BUILTINS: &[(&str, &[u8])] = &[\n",
    );
    for package in BUILTINS {
        writeln!(
            generated,
            "    ({package:?}, include_bytes!({:?})),",
            plugin_build::built_component(&target_dir, package)
        )
        .expect("writing to a String");
    }
    generated.push_str("];\n");
    std::fs::write(out_dir.join("builtins.rs"), generated).expect("write builtins.rs");
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
