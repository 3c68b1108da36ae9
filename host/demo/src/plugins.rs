//! Finding a plugin strategy for the demo's second Lease: from `--plugins DIR` as the controller
//! would load it, else from the plugin workspace's build output, else the plugin embedded in this
//! crate for the purpose (so the demo shows a plugin Lease from a lone binary or image too).

use super::Error;
use conclave_engine::{Engine, EngineConfig, Limits, PluginSource, default_cache_dir};
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/demo_plugin.rs"));

/// Wraps an engine error with what was being loaded.
fn plugin_error<E>(action: String) -> impl FnOnce(E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |source| Error::Plugins {
        action,
        source: Box::new(source),
    }
}

/// Wraps an I/O error with what was being written.
fn io_error(action: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { action, source }
}

/// Plugin strategies the demo knows how to set up, best first.
pub const PREFERRED: &[&str] = &[
    "conclave.dev/priority",
    "conclave.dev/zone-affinity",
    "conclave.dev/least-disruption",
];

/// Settings for strategies that need them, written as a sidecar when the demo copies a plugin.
fn settings_for(strategy: &str) -> Option<serde_json::Value> {
    (strategy == "conclave.dev/zone-affinity")
        .then(|| serde_json::json!({"zones": ["zone-a", "zone-b", "zone-c"]}))
}

/// The engine for the demo and the plugin strategy of the second Lease, if any.
pub struct Plugins {
    /// Built-ins plus the plugin directory in use.
    pub engine: Engine,
    /// The second Lease's strategy and where its plugin came from; `Err` explains its absence.
    pub strategy: Result<(String, PathBuf), String>,
    /// Keeps a copied plugin directory alive.
    _scratch: Option<tempfile::TempDir>,
}

fn config(plugins_dir: Option<PathBuf>) -> EngineConfig {
    EngineConfig {
        plugins_dir,
        allow_wasi: false,
        cache_dir: default_cache_dir(),
        default_limits: Limits::default(),
        ..EngineConfig::default()
    }
}

/// Picks the plugin strategy: `wanted` if given, else the first of [`PREFERRED`] available, else
/// any strategy implemented by a plugin file.
fn choose(engine: &Engine, wanted: Option<&str>) -> Option<(String, PathBuf)> {
    let from_files: Vec<(String, PathBuf)> = engine
        .strategies()
        .into_iter()
        .filter_map(|info| match &info.plugin.source {
            PluginSource::File(path) => Some((info.name.clone(), path.clone())),
            PluginSource::Builtin(_) | PluginSource::Object { .. } => None,
        })
        .collect();
    if let Some(wanted) = wanted {
        return from_files.into_iter().find(|(name, _)| name == wanted);
    }
    PREFERRED
        .iter()
        .find_map(|p| from_files.iter().find(|(name, _)| name == p).cloned())
        .or_else(|| from_files.into_iter().next())
}

/// Where the plugin workspace writes its components (`cargo build` in `strategies/`, and the
/// nested build of host/engine/build.rs), relative to the working directory and to the source tree
/// this crate was built from.
fn build_outputs() -> Vec<PathBuf> {
    let relative = [
        "target/wasm/wasm32-wasip2/release",
        "target/wasm-plugins/wasm32-wasip2/release",
        "strategies/target/wasm32-wasip2/release",
    ];
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs: Vec<PathBuf> = relative.iter().map(PathBuf::from).collect();
    dirs.extend(relative.iter().map(|r| source.join(r)));
    dirs
}

/// Loads the engine: with `plugins_dir`, exactly as `conclave run --plugins` would; otherwise the
/// built-ins plus one plugin found in the plugin workspace's build output, copied (with a settings
/// sidecar where it needs one) into a scratch directory that the controller then loads.
pub fn load(plugins_dir: Option<PathBuf>, wanted: Option<&str>) -> Result<Plugins, Error> {
    if let Some(dir) = plugins_dir {
        let engine = Engine::new(config(Some(dir.clone()))).map_err(plugin_error(format!(
            "loading plugins from {}",
            dir.display()
        )))?;
        let strategy = choose(&engine, wanted).ok_or_else(|| match wanted {
            Some(w) => format!("no plugin in {} implements {w}", dir.display()),
            None => format!("no plugin in {} implements a strategy", dir.display()),
        });
        return Ok(Plugins {
            engine,
            strategy,
            _scratch: None,
        });
    }
    let builtins_only = |why: String| -> Result<Plugins, Error> {
        Ok(Plugins {
            engine: Engine::new(config(None))
                .map_err(plugin_error("loading the built-in strategies".into()))?,
            strategy: Err(why),
            _scratch: None,
        })
    };
    // The controller loads plugins from a directory; without a writable one (a read-only root
    // with no /tmp) the demo goes on with the built-in strategy alone.
    let scratch = match tempfile::Builder::new()
        .prefix("conclave-demo-plugins-")
        .tempdir()
    {
        Ok(scratch) => scratch,
        Err(error) => {
            return builtins_only(format!(
                "cannot create a scratch plugin directory ({error}); point TMPDIR at a writable one"
            ));
        }
    };
    let found = match discover(wanted) {
        Some((strategy, path)) => {
            let file = path
                .file_name()
                .map_or_else(|| PathBuf::from("plugin.wasm"), PathBuf::from);
            let copy = scratch.path().join(&file);
            std::fs::copy(&path, &copy).map_err(io_error(format!(
                "copying {} to {}",
                path.display(),
                copy.display()
            )))?;
            Some((strategy, path, copy))
        }
        None => embedded(scratch.path(), wanted)?,
    };
    let Some((strategy, origin, copy)) = found else {
        let hint = "build it with `cd strategies && cargo build --target wasm32-wasip2 --release`, \
                    or pass --plugins DIR";
        return builtins_only(format!(
            "no built or embedded plugin implements {}; {hint}",
            wanted.unwrap_or("a plugin strategy")
        ));
    };
    if let Some(settings) = settings_for(&strategy) {
        std::fs::write(
            copy.with_extension("json"),
            serde_json::json!({ "settings": settings }).to_string(),
        )
        .map_err(io_error("writing the plugin's settings sidecar".into()))?;
    }
    let engine = Engine::new(config(Some(scratch.path().to_path_buf()))).map_err(plugin_error(
        format!("loading the plugin {}", origin.display()),
    ))?;
    Ok(Plugins {
        engine,
        strategy: Ok((strategy, origin)),
        _scratch: Some(scratch),
    })
}

/// Writes [`DEMO_PLUGIN`] into `dir` and returns the strategy it implements (`wanted`, or its
/// first domain-prefixed one), a description of where it came from, and the written file; `None`
/// if it does not implement `wanted`.
fn embedded(dir: &Path, wanted: Option<&str>) -> Result<Option<(String, PathBuf, PathBuf)>, Error> {
    let (package, bytes) = DEMO_PLUGIN;
    let file = dir.join(format!("{}.wasm", package.replace('-', "_")));
    std::fs::write(&file, bytes).map_err(io_error(format!("writing {}", file.display())))?;
    let engine = Engine::from_file(config(None), &file).map_err(plugin_error(format!(
        "loading the embedded plugin strategies/{package}"
    )))?;
    let names: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
    let strategy = match wanted {
        Some(wanted) => names.into_iter().find(|n| n == wanted),
        None => names.into_iter().find(|n| n.contains('/')),
    };
    let origin = PathBuf::from(format!("strategies/{package}, embedded in this binary"));
    Ok(strategy.map(|strategy| (strategy, origin, file)))
}

/// Looks at each `.wasm` in the build outputs (most likely names first) and returns the first
/// that implements `wanted`, or one of [`PREFERRED`], or any strategy that is not built in.
fn discover(wanted: Option<&str>) -> Option<(String, PathBuf)> {
    let mut files: Vec<PathBuf> = build_outputs()
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.filter_map(Result::ok).map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    files.sort();
    files.dedup_by(|a, b| a.file_name() == b.file_name());
    let rank = |path: &PathBuf| {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().replace('_', "-"))
            .unwrap_or_default();
        PREFERRED
            .iter()
            .position(|p| {
                p.rsplit('/')
                    .next()
                    .is_some_and(|short| stem.contains(short))
            })
            .unwrap_or(PREFERRED.len())
    };
    files.sort_by_key(rank);
    let mut fallback = None;
    for file in files {
        let file = std::fs::canonicalize(&file).unwrap_or(file);
        let Ok(engine) = Engine::from_file(config(None), &file) else {
            continue;
        };
        let names: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
        if let Some(wanted) = wanted {
            if names.iter().any(|n| n == wanted) {
                return Some((wanted.to_owned(), file));
            }
            continue;
        }
        if let Some(name) = PREFERRED.iter().find(|p| names.iter().any(|n| n == *p)) {
            return Some(((*name).to_owned(), file));
        }
        if fallback.is_none()
            && let Some(name) = names.iter().find(|n| n.contains('/'))
        {
            fallback = Some((name.clone(), file));
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_demo_plugin_implements_priority_and_nothing_else_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (strategy, origin, file) = embedded(dir.path(), None).unwrap().expect("a strategy");
        assert_eq!(strategy, "conclave.dev/priority");
        assert!(origin.display().to_string().contains("embedded"));
        assert!(file.starts_with(dir.path()) && file.is_file());
        assert!(
            embedded(dir.path(), Some("conclave.dev/zone-affinity"))
                .unwrap()
                .is_none()
        );
    }
}
