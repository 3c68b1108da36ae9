//! Embeds the plugin `conclave demo` falls back to (`$OUT_DIR/demo_plugin.rs`), built from
//! `strategies/` like the built-in plugins `conclave-engine` embeds.

#[path = "../plugin_build.rs"]
mod plugin_build;

use std::env;
use std::path::PathBuf;

/// The plugin `conclave demo` falls back to for its plugin Lease when none is found on disk (a
/// binary far from its source tree, such as the container image's). It is embedded as bytes and
/// loaded from a file like any third-party plugin, never registered as a built-in.
const DEMO_PLUGIN: &str = "priority";

fn main() {
    let repo = plugin_build::repo();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = plugin_build::build_plugins(&repo, &out_dir);
    let demo = format!(
        "/// The plugin `conclave demo` falls back to, built from `strategies/` by \
         `host/demo/build.rs`: (package name, component bytes).\n\
         pub(crate) const DEMO_PLUGIN: (&str, &[u8]) = ({DEMO_PLUGIN:?}, include_bytes!({:?}));\n",
        plugin_build::built_component(&target_dir, DEMO_PLUGIN)
    );
    std::fs::write(out_dir.join("demo_plugin.rs"), demo).expect("write demo_plugin.rs");
}
