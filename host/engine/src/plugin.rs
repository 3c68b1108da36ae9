//! One loaded plugin: its linked [`StrategyPre`] and what a call into it looks like.

use super::bindings;
use super::compile::{LoadStats, Runtime, Ticker, Ticking};
use super::convert;
use super::error::{CallError, LoadError};
use super::limits::{CallLimiter, Limits};
use super::{CallPhases, MAX_PLUGIN_TEXT};
use conclave_core::request::ElectionRequest;
use conclave_core::text::truncate_utf8;
use conclave_core::time::Timestamp;
use cpu_time::ThreadTime;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Log messages (and lines of WASI stdout/stderr) a plugin may write per call; later ones are
/// dropped. Each is cut to [`MAX_PLUGIN_TEXT`] bytes.
const MAX_LOG_MESSAGES: u32 = 64;
/// Longest strategy name `info()` may report: a qualified name (a DNS subdomain prefix, `/`, and
/// a 63-character name), as `spec.strategy` allows.
const MAX_STRATEGY_NAME: usize = 253 + 1 + 63;
/// Longest description and version `info()` may report.
const MAX_INFO_TEXT: usize = 1024;
/// Longest answer that can be a candidate's name (a LeaseCandidate name is a DNS subdomain).
const MAX_ANSWER: usize = 253;
/// Bytes of stdout and of stderr kept per call from a WASI plugin.
const STDIO_CAPACITY: usize = 64 * 1024;

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Embedded in the binary; the cargo package name in `strategies/`.
    Builtin(&'static str),
    /// A `.wasm` file.
    File(PathBuf),
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Builtin(name) => write!(f, "builtin:{name}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a loaded plugin is: its own `info()` and what the host learned loading it.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    /// Where it came from.
    pub source: PluginSource,
    /// The strategy names it implements.
    pub strategies: Vec<String>,
    /// Its one-line description.
    pub description: String,
    /// Its own version.
    pub version: String,
    /// The component's imports (only the log interface, or WASI with `--allow-wasi`).
    pub imports: Vec<String>,
    /// The component's size in bytes.
    pub size: usize,
    /// The lowercase hex SHA-256 of the component.
    pub sha256: String,
    /// The per-call limits it runs under.
    pub limits: Limits,
    /// Whether settings are configured for it.
    pub has_settings: bool,
    /// How its code was obtained (compiled now or loaded from the cache), and how long it took.
    pub load: LoadStats,
}

/// A plugin linked once (wasmtime's `InstancePre`), ready to be instantiated per call.
pub(super) struct StrategyPre {
    pre: bindings::StrategyPre<CallState>,
    ticker: Arc<Ticker>,
}

impl StrategyPre {
    /// Links `component` against the host interface (and WASI, if the linker has it).
    pub(super) fn new(
        runtime: &Runtime,
        linker: &Linker<CallState>,
        plugin: &str,
        component: &wasmtime::component::Component,
    ) -> Result<Self, LoadError> {
        let load_error = |what: &str, source: wasmtime::Error| LoadError::Link {
            plugin: plugin.to_owned(),
            what: what.to_owned(),
            source,
        };
        let instance_pre = linker
            .instantiate_pre(component)
            .map_err(|e| load_error("cannot link it against the host interface", e))?;
        let pre = bindings::StrategyPre::new(instance_pre).map_err(|e| {
            load_error(
                "it does not export the conclave:strategy@0.1.0 world (info, elect)",
                e,
            )
        })?;
        Ok(Self {
            pre,
            ticker: Arc::clone(&runtime.ticker),
        })
    }
}

/// The linker every plugin is linked with: the log interface, plus deny-all WASI if allowed.
pub(super) fn linker(runtime: &Runtime, allow_wasi: bool) -> Result<Linker<CallState>, LoadError> {
    let mut linker = Linker::new(&runtime.engine);
    let link_error = |source: wasmtime::Error| LoadError::Engine {
        what: "linking the host interface",
        source,
    };
    bindings::Strategy::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
        .map_err(link_error)?;
    if allow_wasi {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(link_error)?;
    }
    Ok(linker)
}

/// A loaded plugin.
pub(super) struct Plugin {
    info: Arc<PluginInfo>,
    pre: StrategyPre,
    settings: String,
    label: Arc<str>,
}

impl Plugin {
    /// Wraps a linked plugin; calls `info()` once to learn its names.
    pub(super) fn new(
        pre: StrategyPre,
        mut info: PluginInfo,
        settings: String,
    ) -> Result<Self, LoadError> {
        let label: Arc<str> = info.source.to_string().into();
        let mut store = new_store(&pre, &label, "", Timestamp::default(), info.limits);
        let reported = pre
            .pre
            .instantiate(&mut store)
            .and_then(|instance| instance.call_info(&mut store));
        store.data_mut().flush_stdio();
        let reported = reported.map_err(|error| LoadError::Info {
            plugin: label.to_string(),
            source: Box::new(classify(&label, error, &store, info.limits.time, true)),
        })?;
        let invalid = |reason: String| LoadError::InvalidInfo {
            plugin: label.to_string(),
            reason,
        };
        if reported.strategies.is_empty() || reported.strategies.iter().any(String::is_empty) {
            return Err(invalid(format!(
                "must name at least one strategy and no empty name, got {:?}",
                reported.strategies
            )));
        }
        if let Some(long) = reported
            .strategies
            .iter()
            .find(|name| name.len() > MAX_STRATEGY_NAME)
        {
            let mut shown = long.clone();
            truncate_utf8(&mut shown, 64);
            return Err(invalid(format!(
                "names a strategy of {} bytes ({shown:?}); a strategy name is at most \
                 {MAX_STRATEGY_NAME}",
                long.len()
            )));
        }
        for (field, text) in [
            ("description", &reported.description),
            ("version", &reported.version),
        ] {
            if text.len() > MAX_INFO_TEXT {
                return Err(invalid(format!(
                    "reports a {field} of {} bytes; at most {MAX_INFO_TEXT} are allowed",
                    text.len()
                )));
            }
        }
        info.strategies = reported.strategies;
        info.description = reported.description;
        info.version = reported.version;
        Ok(Self {
            info: Arc::new(info),
            pre,
            settings,
            label,
        })
    }

    /// What this plugin is.
    pub(super) fn info(&self) -> Arc<PluginInfo> {
        Arc::clone(&self.info)
    }

    /// Runs `elect` in a fresh instance under the plugin's limits, recording how long each phase
    /// took into `phases` when given. The answer is not yet checked against the candidates, but
    /// it is bounded: an error message is cut to [`MAX_PLUGIN_TEXT`] bytes, and an answer longer
    /// than any candidate name can be is an invalid answer.
    pub(super) fn elect(
        &self,
        strategy: &str,
        request: &ElectionRequest,
        mut phases: Option<&mut CallPhases>,
    ) -> Result<Option<String>, CallError> {
        let mut clock = phases.as_ref().map(|_| Instant::now());
        let mut lap = |slot: fn(&mut CallPhases) -> &mut Duration| {
            if let (Some(phases), Some(clock)) = (phases.as_deref_mut(), clock.as_mut()) {
                let now = Instant::now();
                *slot(phases) += now - *clock;
                *clock = now;
            }
        };
        let settings = if request.settings.is_empty() {
            &self.settings
        } else {
            &request.settings
        };
        let wit_request = convert::request(request, settings);
        lap(|p| &mut p.convert);
        let lease = format!("{}/{}", request.lease.namespace, request.lease.name);
        let mut store = new_store(
            &self.pre,
            &self.label,
            &lease,
            request.now,
            self.info.limits,
        );
        lap(|p| &mut p.store);
        let instance = self.pre.pre.instance_pre().instantiate(&mut store);
        lap(|p| &mut p.instantiate);
        let result = instance
            .map_err(|error| (error, true))
            .and_then(|instance| {
                // No post-return: the instance is dropped right after, with everything it allocated.
                instance
                    .get_typed_func::<(&convert::Request<'_>,), (ElectAnswer,)>(&mut store, "elect")
                    .and_then(|elect| elect.call(&mut store, (&wit_request,)))
                    .map(|(answer,)| answer)
                    .map_err(|error| (error, false))
            });
        lap(|p| &mut p.call);
        store.data_mut().flush_stdio();
        let outcome = match result {
            Ok(Ok(Some(answer))) if answer.len() > MAX_ANSWER => Err(CallError::InvalidAnswer {
                strategy: strategy.to_owned(),
                answer: bounded(answer),
            }),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(message)) => Err(CallError::PluginError {
                strategy: strategy.to_owned(),
                message: bounded(message),
            }),
            Err((error, instantiating)) => Err(classify(
                strategy,
                error,
                &store,
                self.info.limits.time,
                instantiating,
            )),
        };
        drop(store);
        drop(wit_request);
        lap(|p| &mut p.teardown);
        outcome
    }
}

/// What `elect` returns in `conclave:strategy@0.1.0`.
type ElectAnswer = Result<Option<String>, String>;

/// `text` cut to [`MAX_PLUGIN_TEXT`] bytes, saying so if it was cut.
fn bounded(mut text: String) -> String {
    let length = text.len();
    if truncate_utf8(&mut text, MAX_PLUGIN_TEXT) {
        text.push_str(&format!(" ({length} bytes in all)"));
    }
    text
}

fn new_store(
    pre: &StrategyPre,
    plugin: &Arc<str>,
    lease: &str,
    now: Timestamp,
    limits: Limits,
) -> Store<CallState> {
    let state = CallState {
        limiter: CallLimiter::new(limits),
        plugin: Arc::clone(plugin),
        lease: lease.to_owned(),
        logs_left: MAX_LOG_MESSAGES,
        now,
        wasi: None,
        _ticking: pre.ticker.tick(),
    };
    let mut store = Store::new(pre.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    // The budget is CPU time of the calling thread, not wall time, so a loaded machine does not
    // cut off a good plugin: each epoch tick (1 ms) checks the thread's CPU clock.
    let deadline = ThreadTime::now().as_duration() + limits.time;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if ThreadTime::now().as_duration() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Continue(1)
        })
    });
    store
}

/// Turns a failed instantiation or call into the error that says which limit or fault it was.
fn classify(
    strategy: &str,
    error: wasmtime::Error,
    store: &Store<CallState>,
    time: Duration,
    instantiating: bool,
) -> CallError {
    let strategy = strategy.to_owned();
    if let Some(hit) = store.data().limiter.hit {
        return CallError::Memory {
            strategy,
            detail: hit.to_string(),
        };
    }
    if error.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
        return CallError::LimitExceeded {
            strategy,
            limit: time,
        };
    }
    let message = bounded(format!("{error:#}"));
    if instantiating {
        CallError::Instantiate { strategy, message }
    } else {
        CallError::Trap { strategy, message }
    }
}

/// The host state of one call.
pub(super) struct CallState {
    limiter: CallLimiter,
    plugin: Arc<str>,
    lease: String,
    logs_left: u32,
    now: Timestamp,
    /// Built on first use, only for plugins that import WASI.
    wasi: Option<DenyAllWasi>,
    /// Keeps the epoch (the CPU-time check) advancing while this store exists.
    _ticking: Ticking,
}

impl CallState {
    /// Copies what a WASI plugin wrote to stdout and stderr into the host log, line by line,
    /// within the same budget as log messages.
    fn flush_stdio(&mut self) {
        let Some(wasi) = &self.wasi else { return };
        let streams = [
            ("stdout", wasi.stdout.contents()),
            ("stderr", wasi.stderr.contents()),
        ];
        for (stream, contents) in streams {
            for line in String::from_utf8_lossy(&contents).lines() {
                let Some(line) = self.take_log_budget(line.to_owned()) else {
                    return;
                };
                tracing::info!(plugin = %self.plugin, lease = %self.lease, stream, "{line}");
            }
        }
    }

    /// Spends one message of the call's log budget on `message`, cut to [`MAX_PLUGIN_TEXT`]
    /// bytes; `None` once the budget is spent (warning once when it runs out).
    fn take_log_budget(&mut self, message: String) -> Option<String> {
        if self.logs_left == 0 {
            return None;
        }
        self.logs_left -= 1;
        if self.logs_left == 0 {
            tracing::warn!(
                plugin = %self.plugin,
                lease = %self.lease,
                "plugin reached its log budget of {MAX_LOG_MESSAGES} messages per call; dropping the rest"
            );
        }
        Some(bounded(message))
    }
}

impl bindings::conclave::strategy::log::Host for CallState {
    fn log(&mut self, level: bindings::conclave::strategy::log::Level, message: String) {
        use bindings::conclave::strategy::log::Level;
        let Some(message) = self.take_log_budget(message) else {
            return;
        };
        let (plugin, lease) = (&*self.plugin, self.lease.as_str());
        match level {
            Level::Trace => tracing::trace!(plugin, lease, "{message}"),
            Level::Debug => tracing::debug!(plugin, lease, "{message}"),
            Level::Info => tracing::info!(plugin, lease, "{message}"),
            Level::Warn => tracing::warn!(plugin, lease, "{message}"),
            Level::Error => tracing::error!(plugin, lease, "{message}"),
        }
    }
}

/// The WASI context for `--allow-wasi` plugins: no preopened directories, no environment or
/// arguments, no network, a wall clock fixed at the request's `now`, a monotonic clock that does
/// not move, deterministic randomness, and stdout/stderr captured into the host log.
struct DenyAllWasi {
    ctx: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl DenyAllWasi {
    fn new(now: Timestamp) -> Self {
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        let ctx = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(FixedWallClock(now))
            .monotonic_clock(FrozenMonotonicClock)
            .secure_random(wasmtime_wasi::Deterministic::new(vec![0]))
            .insecure_random_seed(0)
            .build();
        Self {
            ctx,
            table: ResourceTable::new(),
            stdout,
            stderr,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let now = self.now;
        let wasi = self.wasi.get_or_insert_with(|| DenyAllWasi::new(now));
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut wasi.table,
        }
    }
}

/// A wall clock that always reads the election's `now`, so a WASI plugin cannot depend on when it
/// runs.
struct FixedWallClock(Timestamp);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }

    fn now(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.0.as_micros()).unwrap_or(0))
    }
}

/// A monotonic clock that never advances.
struct FrozenMonotonicClock;

impl wasmtime_wasi::HostMonotonicClock for FrozenMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        0
    }
}
