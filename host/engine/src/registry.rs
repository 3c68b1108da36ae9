//! The registry from strategy name to plugin: built-ins, `--plugins DIR`, sidecar configs.

use super::EngineConfig;
use super::compile::{self, Runtime};
use super::error::LoadError;
use super::imports;
use super::limits::LimitOverrides;
use super::plugin::{self, CallState, Plugin, PluginInfo, PluginSource, StrategyPre};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::Linker;

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// A plugin's optional sidecar config, `NAME.json` next to `NAME.wasm`.
///
/// ```json
/// {"settings": {"any": "JSON"}, "limits": {"time_ms": 20, "memory_bytes": 33554432},
///  "sha256": "<hex digest the .wasm must have>"}
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sidecar {
    /// Passed to every `elect` call as JSON text.
    settings: Option<serde_json::Value>,
    /// Overrides the engine's default limits, field by field.
    limits: Option<LimitOverrides>,
    /// The SHA-256 the component must have; a mismatch refuses the plugin.
    sha256: Option<String>,
}

/// The loaded plugins and the strategy names they claim.
pub(super) struct Registry {
    /// Keeps the engine and its epoch ticker alive as long as any plugin may run.
    _runtime: Runtime,
    plugins: Vec<Arc<Plugin>>,
    by_name: BTreeMap<String, Arc<Plugin>>,
}

impl Registry {
    /// Loads the built-ins (if `builtins`), every `.wasm` in `dir`, and `file`.
    pub(super) fn load(
        config: &EngineConfig,
        builtins: bool,
        dir: Option<&Path>,
        file: Option<&Path>,
    ) -> Result<Self, LoadError> {
        config
            .limit_overrides
            .apply(config.default_limits)
            .validate()
            .map_err(|reason| LoadError::DefaultLimits { reason })?;
        let runtime = Runtime::new()?;
        let linker = plugin::linker(&runtime, config.allow_wasi)?;
        let loader = Loader {
            runtime: &runtime,
            linker: &linker,
            config,
        };
        let mut loaded = Vec::new();
        if builtins {
            for (package, bytes) in BUILTINS {
                loaded.push(loader.load(
                    PluginSource::Builtin(package),
                    bytes,
                    Sidecar::default(),
                )?);
            }
        }
        if let Some(dir) = dir {
            for wasm in wasm_files(dir)? {
                loaded.push(loader.load_file(&wasm)?);
            }
        }
        if let Some(file) = file {
            loaded.push(loader.load_file(file)?);
        }
        let mut by_name: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
        for plugin in &loaded {
            let info = plugin.info();
            for name in &info.strategies {
                if let Some(first) = by_name.get(name) {
                    return Err(LoadError::DuplicateStrategy {
                        strategy: name.clone(),
                        first: first.info().source.to_string(),
                        second: info.source.to_string(),
                    });
                }
                by_name.insert(name.clone(), Arc::clone(plugin));
            }
        }
        drop(linker);
        Ok(Self {
            _runtime: runtime,
            plugins: loaded,
            by_name,
        })
    }

    pub(super) fn get(&self, strategy: &str) -> Option<&Plugin> {
        self.by_name.get(strategy).map(AsRef::as_ref)
    }

    pub(super) fn strategies(&self) -> impl Iterator<Item = (&str, &Plugin)> {
        self.by_name
            .iter()
            .map(|(name, plugin)| (name.as_str(), plugin.as_ref()))
    }

    pub(super) fn strategy_names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    pub(super) fn plugins(&self) -> impl Iterator<Item = &Plugin> {
        self.plugins.iter().map(AsRef::as_ref)
    }
}

/// The `.wasm` files in `dir`, sorted by name so loading (and duplicate reports) are stable.
fn wasm_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let io_error = |source: std::io::Error| LoadError::PluginsDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error)? {
        let path = entry.map_err(io_error)?.path();
        if path.extension().is_some_and(|ext| ext == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

struct Loader<'a> {
    runtime: &'a Runtime,
    linker: &'a Linker<CallState>,
    config: &'a EngineConfig,
}

impl Loader<'_> {
    fn load_file(&self, path: &Path) -> Result<Arc<Plugin>, LoadError> {
        let plugin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            plugin: plugin.clone(),
            path: path.to_path_buf(),
            source,
        })?;
        let sidecar_path = path.with_extension("json");
        let sidecar = match std::fs::read_to_string(&sidecar_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|error| LoadError::Sidecar {
                plugin: plugin.clone(),
                path: sidecar_path.clone(),
                reason: error.to_string(),
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Sidecar::default(),
            Err(source) => {
                return Err(LoadError::Read {
                    plugin,
                    path: sidecar_path,
                    source,
                });
            }
        };
        self.load(PluginSource::File(path.to_path_buf()), &bytes, sidecar)
    }

    fn load(
        &self,
        source: PluginSource,
        bytes: &[u8],
        sidecar: Sidecar,
    ) -> Result<Arc<Plugin>, LoadError> {
        let label = source.to_string();
        let sha256 = compile::sha256_hex(bytes);
        if let Some(expected) = &sidecar.sha256
            && !expected.eq_ignore_ascii_case(&sha256)
        {
            return Err(LoadError::Sha256Mismatch {
                plugin: label,
                actual: sha256,
                expected: expected.clone(),
            });
        }
        let sidecar_limits = sidecar.limits.unwrap_or_default();
        for (key, operator, plugin_own) in self.config.limit_overrides.replaced(&sidecar_limits) {
            tracing::warn!(
                plugin = %label,
                limit = key,
                operator,
                sidecar = plugin_own,
                "the operator's limit replaces the one in the plugin's sidecar"
            );
        }
        let limits = self
            .config
            .limit_overrides
            .apply(sidecar_limits.apply(self.config.default_limits));
        limits.validate().map_err(|reason| LoadError::Sidecar {
            plugin: label.clone(),
            path: match &source {
                PluginSource::File(path) => path.with_extension("json"),
                PluginSource::Builtin(_) => PathBuf::from("(built in)"),
            },
            reason: format!("invalid limits: {reason}"),
        })?;
        let settings = sidecar
            .settings
            .as_ref()
            .map(serde_json::Value::to_string)
            .unwrap_or_default();

        let (component, load) =
            self.runtime
                .compile(&label, bytes, &sha256, self.config.cache_dir.as_deref())?;
        let imports = imports::check(
            &self.runtime.engine,
            &label,
            bytes,
            &component,
            self.config.allow_wasi,
        )?;
        let pre = StrategyPre::new(self.runtime, self.linker, &label, &component)?;
        let info = PluginInfo {
            source,
            strategies: Vec::new(),
            description: String::new(),
            version: String::new(),
            contract: "",
            reads: String::new(),
            imports,
            size: bytes.len(),
            sha256,
            limits,
            has_settings: !settings.is_empty(),
            load,
        };
        let plugin = Plugin::new(pre, info, settings)?;
        let info = plugin.info();
        tracing::info!(
            plugin = %label,
            strategies = ?info.strategies,
            version = %info.version,
            sha256 = %info.sha256,
            from_cache = load.from_cache,
            load_ms = load.elapsed.as_secs_f64() * 1e3,
            "loaded strategy plugin"
        );
        Ok(Arc::new(plugin))
    }
}
