//! The sandbox of one call: the store a plugin runs in (its memory limiter and CPU-time budget),
//! the host state behind its imports (the log interface, and a deny-all WASI for `--allow-wasi`
//! plugins: no files, no network, fixed clocks, deterministic randomness, captured stdio), the
//! linker that provides them, and the error a failed call is classified as.

use super::MAX_PLUGIN_TEXT;
use super::bindings;
use super::compile::{Runtime, Ticking};
use super::error::{CallError, LoadError};
use super::limits::{CallLimiter, Limits};
use conclave_core::text::{floor_char_boundary, truncate_utf8};
use conclave_core::time::Timestamp;
use cpu_time::ThreadTime;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Log messages (and lines of WASI stdout/stderr) a plugin may write per call; later ones are
/// dropped. Each is cut to [`MAX_PLUGIN_TEXT`] bytes.
const MAX_LOG_MESSAGES: u32 = 64;
/// Bytes of stdout and of stderr kept per call from a WASI plugin.
const STDIO_CAPACITY: usize = 64 * 1024;

/// The linker every plugin is linked with: the log interface, plus deny-all WASI if allowed.
pub(super) fn linker(runtime: &Runtime, allow_wasi: bool) -> Result<Linker<CallState>, LoadError> {
    let mut linker = Linker::new(&runtime.engine);
    let link_error = |source: wasmtime::Error| LoadError::Engine {
        what: "linking the host interface",
        source,
    };
    bindings::v0_4::Strategy::add_to_linker::<CallState, HasSelf<CallState>>(
        &mut linker,
        |state| state,
    )
    .map_err(link_error)?;
    bindings::v0_3::Strategy::add_to_linker::<CallState, HasSelf<CallState>>(
        &mut linker,
        |state| state,
    )
    .map_err(link_error)?;
    bindings::v0_2::Strategy::add_to_linker::<CallState, HasSelf<CallState>>(
        &mut linker,
        |state| state,
    )
    .map_err(link_error)?;
    bindings::v0_1::Strategy::add_to_linker::<CallState, HasSelf<CallState>>(
        &mut linker,
        |state| state,
    )
    .map_err(link_error)?;
    if allow_wasi {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(link_error)?;
    }
    Ok(linker)
}

/// `text` cut to [`MAX_PLUGIN_TEXT`] bytes, saying so if it was cut.
pub(super) fn bounded(mut text: String) -> String {
    let length = text.len();
    if truncate_utf8(&mut text, MAX_PLUGIN_TEXT) {
        text.push_str(&format!(" ({length} bytes in all)"));
    }
    text
}

/// [`bounded`] without taking `text`: copies no more than the bound.
fn bounded_copy(text: &str) -> String {
    if text.len() <= MAX_PLUGIN_TEXT {
        return text.to_owned();
    }
    let mut copy = text[..floor_char_boundary(text, MAX_PLUGIN_TEXT)].to_owned();
    truncate_utf8(&mut copy, MAX_PLUGIN_TEXT.saturating_sub(1));
    copy.push_str(&format!(" ({} bytes in all)", text.len()));
    copy
}

/// A store for one call: `plugin`'s label and `lease` for its log lines, `now` for WASI's wall
/// clock, `limits` enforced (memory through the limiter, CPU time through the epoch `ticking`
/// advances).
pub(super) fn new_store(
    engine: &wasmtime::Engine,
    ticking: Ticking,
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
        last_words: None,
        now,
        wasi: None,
        _ticking: ticking,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    // The budget is CPU time of the calling thread, not wall time, so a loaded machine does not
    // cut off a good plugin: each epoch tick (1 ms) checks the thread's CPU clock. The clock is
    // first read at the first tick, not here: reading it is a system call, and most calls end
    // before any tick. The budget therefore counts from the first tick, and a call may run up to
    // one tick past it (it could already: the clock is only checked at ticks).
    let mut deadline: Option<Duration> = None;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        let now = ThreadTime::now().as_duration();
        let deadline = *deadline.get_or_insert(now + limits.time);
        Ok(if now >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Continue(1)
        })
    });
    store
}

/// Turns a failed instantiation or call into the error that says which limit or fault it was.
pub(super) fn classify(
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
    let mut message = bounded(format!("{error:#}"));
    if let Some(last_words) = &store.data().last_words {
        message.push_str(&format!("; the plugin's last output: {last_words:?}"));
    }
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
    /// The last line the plugin logged or wrote to stderr (bounded), for the error of a call
    /// that traps: often the only account of why, such as an interpreter's traceback.
    last_words: Option<String>,
    now: Timestamp,
    /// Built on first use, only for plugins that import WASI.
    wasi: Option<DenyAllWasi>,
    /// Keeps the epoch (the CPU-time check) advancing while this store exists.
    _ticking: Ticking,
}

impl CallState {
    /// Copies what a WASI plugin wrote to stdout and stderr into the host log, line by line,
    /// within the same budget as log messages.
    pub(super) fn flush_stdio(&mut self) {
        let Some(wasi) = &self.wasi else { return };
        let streams = [
            ("stdout", wasi.stdout.contents()),
            ("stderr", wasi.stderr.contents()),
        ];
        for (stream, contents) in streams {
            let text = String::from_utf8_lossy(&contents);
            if stream == "stderr"
                && let Some(last) = text.lines().rev().find(|line| !line.trim().is_empty())
            {
                self.last_words = Some(bounded_copy(last.trim()));
            }
            for line in text.lines() {
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

impl CallState {
    /// Writes one plugin log message into the host log, within the call's budget.
    fn log(&mut self, level: tracing::Level, message: String) {
        self.last_words = Some(bounded_copy(&message));
        let Some(message) = self.take_log_budget(message) else {
            return;
        };
        let (plugin, lease) = (&*self.plugin, self.lease.as_str());
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, lease, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, lease, "{message}"),
            tracing::Level::INFO => tracing::info!(plugin, lease, "{message}"),
            tracing::Level::WARN => tracing::warn!(plugin, lease, "{message}"),
            tracing::Level::ERROR => tracing::error!(plugin, lease, "{message}"),
        }
    }
}

/// The `log` import of each contract version: the same interface, but a type of its own per
/// version, so one impl each, all mapping onto [`CallState::log`].
macro_rules! log_host {
    ($($version:ident),+) => {$(
        impl bindings::$version::conclave::strategy::log::Host for CallState {
            fn log(
                &mut self,
                level: bindings::$version::conclave::strategy::log::Level,
                message: String,
            ) {
                use bindings::$version::conclave::strategy::log::Level;
                let level = match level {
                    Level::Trace => tracing::Level::TRACE,
                    Level::Debug => tracing::Level::DEBUG,
                    Level::Info => tracing::Level::INFO,
                    Level::Warn => tracing::Level::WARN,
                    Level::Error => tracing::Level::ERROR,
                };
                CallState::log(self, level, message);
            }
        }
    )+};
}

log_host!(v0_4, v0_3, v0_2, v0_1);

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
