//! The wasmtime engine configuration, its epoch ticker, and compilation with an on-disk code
//! cache.

use super::error::LoadError;
use super::limits::Limits;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// How often the epoch advances; the resolution of the per-call time limit.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How long the epoch ticker keeps ticking after the last plugin call before it parks.
const IDLE_LINGER: Duration = Duration::from_millis(100);

/// Component instances the pool holds, i.e. elections that can run at the same time.
const POOL_SLOTS: u32 = 64;

/// Bytes of each linear memory and table kept resident between calls (see [`Runtime::new`]):
/// enough for a plugin's stack, data and the request of a few thousand candidates.
const KEEP_RESIDENT: usize = 4 << 20;

/// The wasmtime version the host is built with, from Cargo.lock (see build.rs); part of the cache key.
const WASMTIME_VERSION: &str = env!("CONCLAVE_WASMTIME_VERSION");

/// The thread that advances the engine's epoch, every [`EPOCH_TICK`] while any plugin code runs
/// (and for [`IDLE_LINGER`] after), and not at all otherwise: an idle controller should not wake a
/// thousand times a second.
pub(super) struct Ticker {
    running: AtomicUsize,
    stop: AtomicBool,
    thread: std::thread::Thread,
}

impl Ticker {
    /// Keeps the epoch advancing until the guard is dropped; hold it while plugin code runs.
    pub(super) fn tick(self: &Arc<Self>) -> Ticking {
        if self.running.fetch_add(1, Ordering::SeqCst) == 0 {
            self.thread.unpark();
        }
        Ticking(Arc::clone(self))
    }
}

/// Plugin code is running: the epoch advances (see [`Ticker::tick`]).
pub(super) struct Ticking(Arc<Ticker>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A wasmtime engine set up for strategy plugins: pooling allocator sized by [`Limits`]'s
/// ceilings, epoch interruption driven by a [`Ticker`].
pub(super) struct Runtime {
    pub(super) engine: wasmtime::Engine,
    pub(super) ticker: Arc<Ticker>,
}

impl Runtime {
    pub(super) fn new() -> Result<Self, LoadError> {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        let slots = POOL_SLOTS;
        let per_component = u32::try_from(Limits::MAX_INSTANCES).unwrap_or(u32::MAX);
        // A Rust plugin instantiates 3 core instances, 2 tables and 1 memory; the interpreters
        // that componentize-py and componentize-js build, dozens of core instances and tables.
        // Core instances cost the pool only a count; each table slot reserves address space.
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 8)
            .max_memory_size(Limits::MAX_MEMORY_BYTES)
            .table_elements(Limits::MAX_TABLE_ELEMENTS)
            .max_core_instances_per_component(per_component)
            .max_memories_per_component(per_component)
            .max_tables_per_component(per_component)
            // Every election instantiates afresh, so a slot is reset after every call. Resetting
            // with madvise drops the pages: the next call page-faults them back in, and each
            // madvise flushes the TLB of every core running the process. Keeping the first
            // KEEP_RESIDENT bytes resident and zeroing them in place (only the pages actually
            // touched, found with PAGEMAP_SCAN where the kernel has it) avoids both.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = wasmtime::Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine = wasmtime::Engine::new(&config).map_err(|source| LoadError::Engine {
            what: "creating the wasmtime engine",
            source,
        })?;
        let ticker_engine = engine.clone();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<Arc<Ticker>>();
        let thread = std::thread::Builder::new()
            .name("conclave-epoch".into())
            .spawn(move || {
                let Ok(ticker) = started_rx.recv() else {
                    return;
                };
                // A park wakes at once if `tick` unparked in between, so no start is missed. The
                // thread parks only after IDLE_LINGER without plugin code: a controller deciding
                // elections back to back then never pays a wake-up per call.
                let mut idle_since: Option<Instant> = None;
                while !ticker.stop.load(Ordering::SeqCst) {
                    if ticker.running.load(Ordering::SeqCst) == 0 {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= IDLE_LINGER {
                            idle_since = None;
                            std::thread::park();
                            continue;
                        }
                    } else {
                        idle_since = None;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })
            .map_err(|error| LoadError::Engine {
                what: "starting the epoch ticker thread",
                source: wasmtime::Error::new(error),
            })?;
        let ticker = Arc::new(Ticker {
            running: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            thread: thread.thread().clone(),
        });
        // The thread only exits early if this send fails, i.e. never: it holds the receiver.
        let _ = started_tx.send(Arc::clone(&ticker));
        Ok(Self { engine, ticker })
    }

    /// Compiles `bytes`, or loads the compiled code from `cache_dir` if an earlier run cached it.
    pub(super) fn compile(
        &self,
        plugin: &str,
        bytes: &[u8],
        sha256: &str,
        cache_dir: Option<&Path>,
    ) -> Result<(Component, LoadStats), LoadError> {
        let started = Instant::now();
        let cache_file = cache_dir.map(|dir| dir.join(self.cache_file_name(sha256)));
        if let Some(path) = cache_file.as_deref().filter(|path| path.is_file()) {
            match load_cached(&self.engine, path) {
                Ok(component) => {
                    return Ok((
                        component,
                        LoadStats {
                            elapsed: started.elapsed(),
                            from_cache: true,
                        },
                    ));
                }
                Err(error) => tracing::warn!(
                    plugin,
                    path = %path.display(),
                    error = format!("{error:#}"),
                    "ignoring unusable compiled-code cache entry; recompiling"
                ),
            }
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|source| LoadError::Compile {
                plugin: plugin.to_owned(),
                source,
            })?;
        let stats = LoadStats {
            elapsed: started.elapsed(),
            from_cache: false,
        };
        if let Some(path) = cache_file
            && let Err(error) = store_cached(&component, &path)
        {
            tracing::warn!(
                plugin,
                path = %path.display(),
                error = format!("{error:#}"),
                "cannot write compiled-code cache entry"
            );
        }
        Ok((component, stats))
    }

    /// `SHA256-wasmtime-VERSION-CONFIG.cwasm`: the component's digest, the wasmtime version and a
    /// digest of the engine settings that affect compiled code.
    fn cache_file_name(&self, sha256: &str) -> String {
        let mut hasher = Sha256Hasher(Sha256::new());
        std::hash::Hash::hash(&self.engine.precompile_compatibility_hash(), &mut hasher);
        let config = hex::encode(&hasher.0.finalize()[..8]);
        format!("{sha256}-wasmtime-{WASMTIME_VERSION}-{config}.cwasm")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::SeqCst);
        self.ticker.thread.unpark();
    }
}

/// How a plugin's code was obtained at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadStats {
    /// Time spent compiling, or loading compiled code from the cache.
    pub elapsed: Duration,
    /// Whether the code came from the on-disk cache.
    pub from_cache: bool,
}

/// Feeds `Hash` output into SHA-256, for a digest that is stable across Rust releases.
struct Sha256Hasher(Sha256);

impl std::hash::Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The lowercase hex SHA-256 of `bytes`.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Loads compiled code that [`store_cached`] wrote.
#[allow(unsafe_code)]
fn load_cached(engine: &wasmtime::Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize_file` trusts its input to be code wasmtime itself produced,
    // and maps the file. That holds here: the file was written by `store_cached` from
    // `Component::serialize` into a cache directory Conclave creates owner-only (0700); it is
    // written to a temporary name and renamed into place, so it is never modified while mapped;
    // its name carries the component's sha256, the wasmtime version and a digest of the engine's
    // compilation settings, so it is only ever loaded for the same component, wasmtime and
    // settings. wasmtime also checks the version and settings recorded inside the file and
    // refuses a mismatch, which we treat as a cache miss.
    unsafe { Component::deserialize_file(engine, path) }
}

/// Writes `component`'s compiled code to `path` atomically.
fn store_cached(component: &Component, path: &Path) -> wasmtime::Result<()> {
    let bytes = component.serialize()?;
    let dir = path
        .parent()
        .ok_or_else(|| wasmtime::Error::msg("cache path has no directory"))?;
    create_private_dir(dir)?;
    // Unique per process and per write, so concurrent engines never share a temporary file.
    static NEXT_WRITE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("cwasm"),
        std::process::id(),
        NEXT_WRITE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The default compiled-code cache directory: `$XDG_CACHE_HOME/conclave/wasm`, else
/// `~/.cache/conclave/wasm`; `None` when neither variable is set.
#[must_use]
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .map(|base| base.join("conclave").join("wasm"))
}
