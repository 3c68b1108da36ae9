//! `conclave strategy inspect`: what a plugin is (names, description, version, contract,
//! imports, size, sha256, limits, load time), from a file, a built-in name or an OCI reference.

use super::load::{EngineArgs, Target};
use super::registry;
use anyhow::Context as _;
use conclave_engine::PluginInfo;
use std::process::ExitCode;

/// Prints what `plugin` is: its source (and, for a reference, its digests), then [`print_info`].
pub(super) fn inspect(
    plugin: &str,
    args: &EngineArgs,
    registry: &registry::RegistryArgs,
) -> anyhow::Result<ExitCode> {
    if !registry::is_reference(plugin) {
        let target = Target::load(plugin, args)?;
        println!("source:      {}", target.plugin.source);
        print_info(&target.plugin);
        return Ok(ExitCode::SUCCESS);
    }
    // A reference: pull it (verified) into memory, then load it as a file would be.
    let reference = conclave_oci::Reference::parse(plugin)?;
    let pulled = registry::fetch(&reference, registry)?;
    let (_dir, path) = registry::to_temp_file(&pulled)?;
    let target = Target::load_file(&path, args)
        .with_context(|| format!("{reference} is not a plugin the engine can load"))?;
    println!("source:      {reference}");
    for line in registry::describe(&reference, &pulled)? {
        println!("{line}");
    }
    print_info(&target.plugin);
    Ok(ExitCode::SUCCESS)
}

/// What `inspect` prints about a loaded plugin, after its source.
fn print_info(info: &PluginInfo) {
    println!("strategies:  {}", info.strategies.join(", "));
    println!("description: {}", info.description);
    println!("version:     {}", info.version);
    println!("contract:    conclave:strategy@{}", info.contract);
    println!("reads:       {}", info.reads);
    println!(
        "reads now:   {}",
        if info.reads_now {
            "yes (called at every renewal of a Lease by its holder)"
        } else {
            "no (a renewal of a Lease by its holder that changes nothing else calls nothing)"
        }
    );
    println!(
        "imports:     {}",
        if info.imports.is_empty() {
            "(none)".to_owned()
        } else {
            info.imports.join(", ")
        }
    );
    println!("size:        {} bytes", info.size);
    println!("sha256:      {}", info.sha256);
    println!(
        "limits:      {:?} per call, {} MiB memory, {} table elements, {} instances",
        info.limits.time,
        info.limits.memory_bytes >> 20,
        info.limits.table_elements,
        info.limits.instances
    );
    println!(
        "load:        {} in {:.1} ms",
        if info.load.from_cache {
            "loaded compiled code from cache"
        } else {
            "compiled"
        },
        info.load.elapsed.as_secs_f64() * 1e3
    );
}
