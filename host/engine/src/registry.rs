//! The registry from strategy name to plugin: built-ins, `--plugins DIR`, sidecar configs, and
//! plugins installed and removed while the engine runs (`StrategyPlugin` objects, a watched
//! plugins directory).
//!
//! The engine keeps one [`Snapshot`] at a time behind a lock and replaces it whole: an install
//! or a removal builds the next snapshot beside the current one and swaps it in. A call takes
//! the plugin it needs out of the snapshot (an `Arc`) before it runs, so an election in flight
//! finishes on the plugin it started with, and a call never waits for a compilation.

use super::compile::{self, Runtime};
use super::contract::StrategyPre;
use super::error::{InstallError, LoadError};
use super::imports;
use super::limits::LimitOverrides;
use super::plugin::{Plugin, PluginInfo, PluginSource};
use super::sandbox::{self, CallState};
use super::{DirSync, EngineConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use wasmtime::component::Linker;

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// How a plugin is configured: a file plugin's optional sidecar, `NAME.json` next to
/// `NAME.wasm`, or what a `StrategyPlugin` object's spec says.
///
/// ```json
/// {"settings": {"any": "JSON"}, "limits": {"time_ms": 20, "memory_bytes": 33554432},
///  "sha256": "<hex digest the .wasm must have>"}
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginOptions {
    /// Passed to every `elect` call as JSON text.
    pub settings: Option<serde_json::Value>,
    /// Overrides the engine's default limits, field by field.
    pub limits: Option<LimitOverrides>,
    /// The SHA-256 the component must have; a mismatch refuses the plugin.
    pub sha256: Option<String>,
}

/// What every snapshot shares: the wasmtime engine (and its epoch ticker), the host interface,
/// and the configuration.
pub(super) struct Shared {
    runtime: Runtime,
    linker: Linker<CallState>,
    config: EngineConfig,
}

/// One plugin in a snapshot, under the key it was installed with.
#[derive(Clone)]
struct Entry {
    key: String,
    plugin: Arc<Plugin>,
}

/// The plugins serving at one moment and the strategy names they claim.
#[derive(Clone, Default)]
pub(super) struct Snapshot {
    /// In load order: built-ins first, then the plugins directory (or file), then installs.
    entries: Vec<Entry>,
    by_name: BTreeMap<String, Arc<Plugin>>,
}

/// The shared setup and the current snapshot.
pub(super) struct Registry {
    shared: Shared,
    current: RwLock<Arc<Snapshot>>,
    /// The fingerprint ([`file_fingerprint`]) of each plugins-directory file as last loaded or
    /// refused, so that [`Registry::sync_dir`] loads a file again only when it changed.
    dir_files: Mutex<BTreeMap<PathBuf, String>>,
}

/// The key a plugin loaded at start from `source` is installed under.
fn key_of(source: &PluginSource) -> String {
    source.to_string()
}

impl Registry {
    /// Loads the built-ins (if `builtins`), every `.wasm` in `dir`, and `file`.
    ///
    /// All of them must load and no two may claim one strategy: an engine does not start with a
    /// set that differs from what it was configured with.
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
        let linker = sandbox::linker(&runtime, config.allow_wasi)?;
        let shared = Shared {
            runtime,
            linker,
            config: config.clone(),
        };
        let mut loaded = Vec::new();
        let mut dir_files = BTreeMap::new();
        if builtins {
            for (package, bytes) in BUILTINS {
                loaded.push(shared.load(
                    PluginSource::Builtin(package),
                    bytes,
                    PluginOptions::default(),
                )?);
            }
        }
        if let Some(dir) = dir {
            for wasm in wasm_files(dir)? {
                if let Some(fingerprint) = file_fingerprint(&wasm) {
                    dir_files.insert(wasm.clone(), fingerprint);
                }
                loaded.push(shared.load_file(&wasm)?);
            }
        }
        if let Some(file) = file {
            loaded.push(shared.load_file(file)?);
        }
        let mut snapshot = Snapshot::default();
        for plugin in loaded {
            let key = key_of(&plugin.info().source);
            if let Err(
                InstallError::StrategyConflict {
                    strategy, holder, ..
                }
                | InstallError::ShadowsBuiltin {
                    strategy, holder, ..
                },
            ) = snapshot.check(&key, &plugin)
            {
                return Err(LoadError::DuplicateStrategy {
                    strategy,
                    first: holder,
                    second: plugin.info().source.to_string(),
                });
            }
            snapshot.put(key, plugin);
        }
        Ok(Self {
            shared,
            current: RwLock::new(Arc::new(snapshot)),
            dir_files: Mutex::new(dir_files),
        })
    }

    /// The snapshot serving now.
    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Compiles, links and checks a plugin without installing it. CPU-bound (a compilation can
    /// take seconds); the elections keep running on the current snapshot meanwhile.
    pub(super) fn prepare(
        &self,
        source: PluginSource,
        bytes: &[u8],
        options: PluginOptions,
    ) -> Result<Arc<Plugin>, LoadError> {
        self.shared.load(source, bytes, options)
    }

    /// Puts `plugin` in service under `key`, replacing what `key` served before (returned). The
    /// swap is atomic; refused, the current snapshot stays as it was.
    pub(super) fn install(
        &self,
        key: &str,
        plugin: Arc<Plugin>,
    ) -> Result<Option<Arc<Plugin>>, InstallError> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        current.check(key, &plugin)?;
        let mut next = Snapshot::clone(&current);
        let replaced = next.remove(key);
        next.put(key.to_owned(), plugin);
        *current = Arc::new(next);
        Ok(replaced)
    }

    /// Takes the plugin installed under `key` out of service. Built-ins cannot be removed.
    pub(super) fn uninstall(&self, key: &str) -> Option<Arc<Plugin>> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current
            .entry(key)
            .is_none_or(|entry| entry.plugin.is_builtin())
        {
            return None;
        }
        let mut next = Snapshot::clone(&current);
        let removed = next.remove(key);
        *current = Arc::new(next);
        removed
    }

    /// The configuration the engine was built with.
    pub(super) fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Brings the plugins of `dir` in service up to date with its files (see
    /// [`Engine::sync_plugins_dir`](super::Engine::sync_plugins_dir)).
    pub(super) fn sync_dir(&self, dir: &Path) -> DirSync {
        let mut sync = DirSync::default();
        let files = match wasm_files(dir) {
            Ok(files) => files,
            Err(error) => {
                sync.failed.push((dir.to_path_buf(), error.to_string()));
                return sync;
            }
        };
        let mut known = self
            .dir_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for file in &files {
            let Some(fingerprint) = file_fingerprint(file) else {
                // Gone or unreadable between the listing and the read: the next sync sees it.
                continue;
            };
            if known.get(file) == Some(&fingerprint) {
                continue;
            }
            known.insert(file.clone(), fingerprint);
            let key = key_of(&PluginSource::File(file.clone()));
            let result = self
                .shared
                .load_file(file)
                .map_err(|error| error.to_string())
                .and_then(|plugin| {
                    self.install(&key, plugin)
                        .map_err(|error| error.to_string())
                });
            match result {
                Ok(_) => sync.loaded.push(file.clone()),
                Err(error) => sync.failed.push((file.clone(), error)),
            }
        }
        let gone: Vec<PathBuf> = known
            .keys()
            .filter(|file| !files.contains(file))
            .cloned()
            .collect();
        for file in gone {
            known.remove(&file);
            if self
                .uninstall(&key_of(&PluginSource::File(file.clone())))
                .is_some()
            {
                sync.removed.push(file);
            }
        }
        sync
    }
}

impl Snapshot {
    pub(super) fn get(&self, strategy: &str) -> Option<&Arc<Plugin>> {
        self.by_name.get(strategy)
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
        self.entries.iter().map(|entry| entry.plugin.as_ref())
    }

    /// The keys and plugins, in load order.
    pub(super) fn keyed(&self) -> impl Iterator<Item = (&str, &Arc<Plugin>)> {
        self.entries
            .iter()
            .map(|entry| (entry.key.as_str(), &entry.plugin))
    }

    fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|entry| entry.key == key)
    }

    /// Whether `plugin` may serve under `key`: none of its strategies may be claimed by a
    /// built-in or by a plugin under another key.
    fn check(&self, key: &str, plugin: &Plugin) -> Result<(), InstallError> {
        if self
            .entry(key)
            .is_some_and(|entry| entry.plugin.is_builtin())
        {
            return Err(InstallError::BuiltinKey {
                key: key.to_owned(),
            });
        }
        let info = plugin.info();
        for strategy in &info.strategies {
            let Some(holder) = self.entries.iter().find(|entry| {
                entry.key != key && entry.plugin.info().strategies.contains(strategy)
            }) else {
                continue;
            };
            let error = if holder.plugin.is_builtin() {
                InstallError::ShadowsBuiltin {
                    strategy: strategy.clone(),
                    holder: holder.plugin.info().source.to_string(),
                    plugin: info.source.to_string(),
                }
            } else {
                InstallError::StrategyConflict {
                    strategy: strategy.clone(),
                    holder: holder.plugin.info().source.to_string(),
                    plugin: info.source.to_string(),
                }
            };
            return Err(error);
        }
        Ok(())
    }

    fn put(&mut self, key: String, plugin: Arc<Plugin>) {
        for name in &plugin.info().strategies {
            self.by_name.insert(name.clone(), Arc::clone(&plugin));
        }
        self.entries.push(Entry { key, plugin });
    }

    fn remove(&mut self, key: &str) -> Option<Arc<Plugin>> {
        let position = self.entries.iter().position(|entry| entry.key == key)?;
        let removed = self.entries.remove(position).plugin;
        self.by_name
            .retain(|_, plugin| !Arc::ptr_eq(plugin, &removed));
        Some(removed)
    }
}

/// The `.wasm` files in `dir`, sorted by name so loading (and duplicate reports) are stable.
/// What identifies a plugin file's content: the sha256 of the `.wasm` and of its sidecar (empty
/// when there is none). `None` when the `.wasm` cannot be read.
fn file_fingerprint(wasm: &Path) -> Option<String> {
    let component = std::fs::read(wasm).ok()?;
    let sidecar = std::fs::read(wasm.with_extension("json")).unwrap_or_default();
    Some(format!(
        "{}:{}",
        compile::sha256_hex(&component),
        compile::sha256_hex(&sidecar)
    ))
}

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

impl Shared {
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
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => PluginOptions::default(),
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
        sidecar: PluginOptions,
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
                PluginSource::Object { name, .. } => {
                    PathBuf::from(format!("strategyplugin/{name}"))
                }
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
        let pre = StrategyPre::new(&self.runtime, &self.linker, &label, &component)?;
        let info = PluginInfo {
            source,
            strategies: Vec::new(),
            description: String::new(),
            version: String::new(),
            contract: "",
            reads: String::new(),
            reads_now: true,
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
