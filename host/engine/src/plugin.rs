//! One loaded plugin: its linked [`StrategyPre`] and what a call into it looks like, in each
//! contract version the host loads.

use super::bindings;
use super::compile::{LoadStats, Runtime, Ticker, Ticking};
use super::convert;
use super::error::{CallError, LoadError};
use super::limits::{CallLimiter, Limits};
use super::{CallPhases, MAX_PLUGIN_TEXT};
use conclave_core::columns::FieldSet;
use conclave_core::prepared::PreparedRequest;
use conclave_core::request::ElectionRequest;
use conclave_core::text::{floor_char_boundary, truncate_utf8};
use conclave_core::time::Timestamp;
use cpu_time::ThreadTime;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wasmtime::component::{
    ComponentExportIndex, ComponentNamedList, HasSelf, Instance, Lift, Linker, Lower,
    ResourceTable, TypedFunc,
};
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
/// Longest label or annotation key a plugin may ask for (a qualified name: a DNS subdomain
/// prefix, `/`, and a 63-character name).
const MAX_KEY: usize = 253 + 1 + 63;
/// Most label and annotation keys a plugin may ask for, together.
const MAX_READ_KEYS: usize = 64;
/// Bytes of stdout and of stderr kept per call from a WASI plugin.
const STDIO_CAPACITY: usize = 64 * 1024;

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Embedded in the binary; the cargo package name in `strategies/`.
    Builtin(&'static str),
    /// A `.wasm` file.
    File(PathBuf),
    /// A Kubernetes object (a `StrategyPlugin`), installed while the engine runs.
    Object {
        /// The object's name.
        name: String,
        /// Where its component came from: an OCI reference, a ConfigMap key, a file.
        origin: String,
    },
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Builtin(name) => write!(f, "builtin:{name}"),
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Object { name, origin } => write!(f, "strategyplugin/{name} ({origin})"),
        }
    }
}

/// How many elections a plugin decided and failed since it was loaded (a `StrategyPlugin`'s
/// status reports them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginCounts {
    /// Calls that answered (a leader, or nobody).
    pub decided: u64,
    /// Calls that failed (trap, limit, error, invalid answer).
    pub failed: u64,
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
    /// The contract version it was built against, e.g. `0.2.0`.
    pub contract: &'static str,
    /// What it reads of each candidate beyond versions and times (0.2 and later), e.g.
    /// `name, labels topology.kubernetes.io/zone`; every field for 0.1 plugins.
    pub reads: String,
    /// Whether its answer may depend on the request's `now`, as it declared (`reads.now`, 0.4
    /// and later); `true` for a plugin built against 0.3 or earlier, which cannot say. When
    /// `false`, the controller does not ask it again for a renewal that only moved the clock.
    pub reads_now: bool,
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

/// A plugin linked once (wasmtime's `InstancePre`), ready to be instantiated per call, in the
/// contract version it was built against.
pub(super) struct StrategyPre {
    contract: Contract,
    /// The `elect` export, looked up once.
    elect: ComponentExportIndex,
    ticker: Arc<Ticker>,
}

/// The contract versions the host loads, newest first.
enum Contract {
    V0_4(bindings::v0_4::StrategyPre<CallState>),
    V0_3(bindings::v0_3::StrategyPre<CallState>),
    V0_2(bindings::v0_2::StrategyPre<CallState>),
    V0_1(bindings::v0_1::StrategyPre<CallState>),
}

impl Contract {
    fn instance_pre(&self) -> &wasmtime::component::InstancePre<CallState> {
        match self {
            Self::V0_4(pre) => pre.instance_pre(),
            Self::V0_3(pre) => pre.instance_pre(),
            Self::V0_2(pre) => pre.instance_pre(),
            Self::V0_1(pre) => pre.instance_pre(),
        }
    }

    /// Calls `info()` on `instance`, an instance of this contract's plugin.
    fn info(
        &self,
        store: &mut Store<CallState>,
        instance: &wasmtime::component::Instance,
    ) -> wasmtime::Result<ReportedInfo> {
        match self {
            Self::V0_4(_) => bindings::v0_4::Strategy::new(&mut *store, instance)?
                .call_info(&mut *store)
                .map(|info| ReportedInfo {
                    strategies: info.strategies,
                    description: info.description,
                    version: info.version,
                    reads_now: info.reads.now,
                    reads: Some(reads_v0_4(info.reads)),
                }),
            Self::V0_3(_) => bindings::v0_3::Strategy::new(&mut *store, instance)?
                .call_info(&mut *store)
                .map(|info| ReportedInfo {
                    strategies: info.strategies,
                    description: info.description,
                    version: info.version,
                    reads_now: true,
                    reads: Some(reads_v0_3(info.reads)),
                }),
            Self::V0_2(_) => bindings::v0_2::Strategy::new(&mut *store, instance)?
                .call_info(&mut *store)
                .map(|info| ReportedInfo {
                    strategies: info.strategies,
                    description: info.description,
                    version: info.version,
                    reads_now: true,
                    reads: Some(reads_v0_2(info.reads)),
                }),
            Self::V0_1(_) => bindings::v0_1::Strategy::new(&mut *store, instance)?
                .call_info(&mut *store)
                .map(|info| ReportedInfo {
                    strategies: info.strategies,
                    description: info.description,
                    version: info.version,
                    reads_now: true,
                    reads: None,
                }),
        }
    }

    fn version(&self) -> &'static str {
        match self {
            Self::V0_4(_) => "0.4.0",
            Self::V0_3(_) => "0.3.0",
            Self::V0_2(_) => "0.2.0",
            Self::V0_1(_) => "0.1.0",
        }
    }
}

impl StrategyPre {
    /// Links `component` against the host interface (and WASI, if the linker has it), as the
    /// newest contract version whose exports it has.
    ///
    /// The component model compares types by structure: `elect` has the same type in 0.3 and
    /// 0.4, so what tells those two apart is `info`, whose `reads` record gained a field in 0.4.
    /// The bindings of each version check the types of both exports.
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
        let contract = match bindings::v0_4::StrategyPre::new(instance_pre.clone()) {
            Ok(pre) => Contract::V0_4(pre),
            Err(newest) => bindings::v0_3::StrategyPre::new(instance_pre.clone())
                .map(Contract::V0_3)
                .or_else(|_| {
                    bindings::v0_2::StrategyPre::new(instance_pre.clone()).map(Contract::V0_2)
                })
                .or_else(|_| bindings::v0_1::StrategyPre::new(instance_pre).map(Contract::V0_1))
                .map_err(|_| {
                    load_error(
                        "it does not export the conclave:strategy world (info, elect) of a \
                         version this host loads (0.4.0, 0.3.0, 0.2.0 or 0.1.0); as 0.4.0",
                        newest,
                    )
                })?,
        };
        let elect = component.get_export_index(None, "elect").ok_or_else(|| {
            load_error("it has no elect export", wasmtime::format_err!("missing"))
        })?;
        Ok(Self {
            contract,
            elect,
            ticker: Arc::clone(&runtime.ticker),
        })
    }

    /// Checks, once per plugin, that the `elect` export of `instance` has exactly the type the
    /// host lowers the request into and lifts the answer from for its contract version, so that
    /// [`elect_func`] can skip that check on every call.
    fn check_elect_type(
        &self,
        store: &mut Store<CallState>,
        instance: &wasmtime::component::Instance,
    ) -> wasmtime::Result<()> {
        match self.contract {
            Contract::V0_4(_) | Contract::V0_3(_) => instance
                .get_typed_func::<_, _>(&mut *store, &self.elect)
                .map(|_: ElectV0_3<'_>| ()),
            Contract::V0_2(_) => instance
                .get_typed_func::<_, _>(&mut *store, &self.elect)
                .map(|_: ElectV0_2<'_>| ()),
            Contract::V0_1(_) => instance
                .get_typed_func::<_, _>(&mut *store, &self.elect)
                .map(|_: ElectV0_1<'_>| ()),
        }
    }
}

/// `elect` as the host calls it under each contract version: the borrowed request it lowers and
/// the answer it lifts. [`StrategyPre::check_elect_type`] and [`elect_func`] must name the same
/// alias for a version; these aliases are the one place the pairing is written. 0.4's `elect` is
/// 0.3's, so both use [`ElectV0_3`].
type ElectV0_3<'a> = TypedFunc<(&'a convert::v0_3::Request<'a>,), (Answer<u32>,)>;
type ElectV0_2<'a> = TypedFunc<(&'a convert::v0_2::Request<'a>,), (Answer<u32>,)>;
type ElectV0_1<'a> = TypedFunc<(&'a convert::Request<'a>,), (Answer<String>,)>;

/// A typed function with its parameter and result types, for [`elect_func`].
trait TypedElect {
    type Params: ComponentNamedList + Lower;
    type Results: ComponentNamedList + Lift;
}

impl<P: ComponentNamedList + Lower, R: ComponentNamedList + Lift> TypedElect for TypedFunc<P, R> {
    type Params = P;
    type Results = R;
}

/// The `elect` export of a fresh `instance`, typed as `F` without checking the type again.
///
/// Checking it (`get_typed_func`) walks the whole request type and compares every field name: a
/// measurable part of a small election, repeated on every call for an answer that cannot change,
/// since a component's export types are fixed when it is compiled.
#[allow(unsafe_code)]
fn elect_func<F: TypedElect>(
    instance: &Instance,
    store: &mut Store<CallState>,
    elect: &ComponentExportIndex,
) -> wasmtime::Result<TypedFunc<F::Params, F::Results>> {
    let func = instance
        .get_func(&mut *store, elect)
        .ok_or_else(|| wasmtime::format_err!("the plugin has no elect function"))?;
    // SAFETY: `new_unchecked` requires the parameter and result types to match the function's
    // component type. Every caller names the alias of the plugin's contract version, which
    // `StrategyPre::check_elect_type` checked against this same export of this same component
    // when the plugin was loaded (a plugin whose check fails is never loaded), and an instance's
    // export types are those of its component.
    Ok(unsafe { TypedFunc::new_unchecked(func) })
}

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

/// A loaded plugin.
pub(super) struct Plugin {
    info: Arc<PluginInfo>,
    pre: StrategyPre,
    /// What the plugin reads (every field for 0.1).
    reads: convert::Reads,
    settings: String,
    label: Arc<str>,
    /// Elections it decided (named a leader or nobody) and failed, since it was loaded.
    decided: AtomicU64,
    failed: AtomicU64,
}

/// What `info()` reported, whichever the contract version.
struct ReportedInfo {
    strategies: Vec<String>,
    description: String,
    version: String,
    reads: Option<convert::Reads>,
    /// `reads.now` of 0.4; `true` before, when a plugin could not say.
    reads_now: bool,
}

/// `reads` as a plugin of each contract version declares it (one generated type per version, of
/// the same shape), as the host's [`convert::Reads`].
macro_rules! reads_from {
    ($($name:ident: $version:ident),+) => {$(
        fn $name(reads: bindings::$version::Reads) -> convert::Reads {
            use bindings::$version::CandidateFields as F;
            let fields = reads.fields;
            convert::Reads {
                fields: FieldSet {
                    name: fields.contains(F::NAME),
                    strategy: fields.contains(F::STRATEGY),
                    version_text: fields.contains(F::VERSION_TEXT),
                    labels: fields.contains(F::LABELS),
                    annotations: fields.contains(F::ANNOTATIONS),
                },
                label_keys: reads.label_keys,
                annotation_keys: reads.annotation_keys,
            }
        }
    )+};
}

reads_from!(reads_v0_4: v0_4, reads_v0_3: v0_3, reads_v0_2: v0_2);

/// `reads` in words, for `strategy inspect` and the load log.
fn describe_reads(reads: Option<&convert::Reads>) -> String {
    let Some(reads) = reads else {
        return "every field (0.1 contract)".to_owned();
    };
    let fields = reads.fields;
    let mut parts: Vec<String> = [
        (fields.name, "name"),
        (fields.strategy, "strategy"),
        (fields.version_text, "version text"),
        (fields.labels, "labels"),
        (fields.annotations, "annotations"),
    ]
    .into_iter()
    .filter(|(read, _)| *read)
    .map(|(_, name)| name.to_owned())
    .collect();
    for (kind, keys) in [
        ("label", &reads.label_keys),
        ("annotation", &reads.annotation_keys),
    ] {
        parts.extend(keys.iter().map(|key| format!("{kind} {key}")));
    }
    if parts.is_empty() {
        "versions and times only".to_owned()
    } else {
        format!("versions, times, {}", parts.join(", "))
    }
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
        let info_error = |error, store: &Store<CallState>| LoadError::Info {
            plugin: label.to_string(),
            source: Box::new(classify(&label, error, store, info.limits.time, true)),
        };
        let instance = match pre.contract.instance_pre().instantiate(&mut store) {
            Ok(instance) => instance,
            Err(error) => {
                store.data_mut().flush_stdio();
                return Err(info_error(error, &store));
            }
        };
        pre.check_elect_type(&mut store, &instance)
            .map_err(|source| LoadError::Link {
                plugin: label.to_string(),
                what: "its elect export does not have the type of its contract version".to_owned(),
                source,
            })?;
        let reported = pre.contract.info(&mut store, &instance);
        store.data_mut().flush_stdio();
        let reported = reported.map_err(|error| info_error(error, &store))?;
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
        if let Some(reads) = &reported.reads {
            let keys = reads.label_keys.iter().chain(&reads.annotation_keys);
            if let Some(key) = keys
                .clone()
                .find(|key| key.is_empty() || key.len() > MAX_KEY)
            {
                return Err(invalid(format!(
                    "reads a label or annotation key of {} bytes; a key is 1 to {MAX_KEY}",
                    key.len()
                )));
            }
            if keys.count() > MAX_READ_KEYS {
                return Err(invalid(format!(
                    "reads more than {MAX_READ_KEYS} label and annotation keys"
                )));
            }
        }
        info.strategies = reported.strategies;
        info.description = reported.description;
        info.version = reported.version;
        info.contract = pre.contract.version();
        info.reads = describe_reads(reported.reads.as_ref());
        info.reads_now = reported.reads_now;
        Ok(Self {
            info: Arc::new(info),
            pre,
            reads: reported.reads.unwrap_or_else(convert::Reads::everything),
            settings,
            label,
            decided: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// Whether it ships with the host.
    pub(super) fn is_builtin(&self) -> bool {
        matches!(self.info.source, PluginSource::Builtin(_))
    }

    /// Counts one call's outcome.
    pub(super) fn count(&self, decided: bool) {
        let counter = if decided { &self.decided } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Elections decided and failed since it was loaded.
    pub(super) fn counts(&self) -> PluginCounts {
        PluginCounts {
            decided: self.decided.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// Whether its answer may depend on the request's `now` ([`PluginInfo::reads_now`]).
    pub(super) fn reads_now(&self) -> bool {
        self.info.reads_now
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
        let prepared = match &self.pre.contract {
            Contract::V0_4(_) | Contract::V0_3(_) | Contract::V0_2(_) => Some(
                PreparedRequest::new(request).map_err(|error| CallError::InvalidRequest {
                    strategy: strategy.to_owned(),
                    reason: error.to_string(),
                })?,
            ),
            Contract::V0_1(_) => None,
        };
        let columns = match (&self.pre.contract, &prepared) {
            (Contract::V0_4(_) | Contract::V0_3(_), Some(prepared)) => {
                Some(convert::v0_3::columns(prepared, &self.reads))
            }
            _ => None,
        };
        let wit_request = match (&prepared, &columns) {
            (Some(prepared), Some(columns)) => {
                WitRequest::V0_3(convert::v0_3::request(prepared, columns, settings))
            }
            (Some(prepared), None) => {
                WitRequest::V0_2(convert::v0_2::request(prepared, settings, &self.reads))
            }
            _ => WitRequest::V0_1(convert::request(request, settings)),
        };
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
        let instance = self.pre.contract.instance_pre().instantiate(&mut store);
        lap(|p| &mut p.instantiate);
        let elect = &self.pre.elect;
        let result = instance
            .map_err(|error| (error, true))
            .and_then(|instance| {
                // No post-return: the instance is dropped right after, with everything it allocated.
                let answer = match &wit_request {
                    WitRequest::V0_3(wit) => {
                        elect_func::<ElectV0_3<'_>>(&instance, &mut store, elect)
                            .and_then(|elect| elect.call(&mut store, (wit,)))
                            .map(|(answer,)| answer.map(|choice| choice.map(Choice::Position)))
                    }
                    WitRequest::V0_2(wit) => {
                        elect_func::<ElectV0_2<'_>>(&instance, &mut store, elect)
                            .and_then(|elect| elect.call(&mut store, (wit,)))
                            .map(|(answer,)| answer.map(|choice| choice.map(Choice::Position)))
                    }
                    WitRequest::V0_1(wit) => {
                        elect_func::<ElectV0_1<'_>>(&instance, &mut store, elect)
                            .and_then(|elect| elect.call(&mut store, (wit,)))
                            .map(|(answer,)| answer.map(|choice| choice.map(Choice::Name)))
                    }
                };
                answer.map_err(|error| (error, false))
            });
        lap(|p| &mut p.call);
        store.data_mut().flush_stdio();
        let invalid = |answer: String| CallError::InvalidAnswer {
            strategy: strategy.to_owned(),
            answer,
        };
        let outcome = match result {
            Ok(Ok(None)) => Ok(None),
            Ok(Ok(Some(Choice::Name(answer)))) if answer.len() > MAX_ANSWER => {
                Err(invalid(bounded(answer)))
            }
            Ok(Ok(Some(Choice::Name(answer)))) => Ok(Some(answer)),
            Ok(Ok(Some(Choice::Position(position)))) => {
                let prepared = prepared
                    .as_ref()
                    .expect("a position answers a request of 0.2 or later");
                match prepared.name_at(position) {
                    Some(name) => Ok(Some(name.to_owned())),
                    None => Err(invalid(format!(
                        "position {position} (there are {} candidates)",
                        prepared.candidates.len()
                    ))),
                }
            }
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
        drop(columns);
        lap(|p| &mut p.teardown);
        outcome
    }
}

/// The request as the plugin's contract version shapes it (0.4's is 0.3's).
#[allow(
    clippy::large_enum_variant,
    reason = "one per call, on the stack; boxing the 0.3 request would add an allocation to every call"
)]
enum WitRequest<'a> {
    V0_3(convert::v0_3::Request<'a>),
    V0_2(convert::v0_2::Request<'a>),
    V0_1(convert::Request<'a>),
}

/// What `elect` returns: `T` is a position (0.2 and later) or a name (0.1).
type Answer<T> = Result<Option<T>, String>;

/// Whom a plugin elected, as its contract version says it.
enum Choice {
    Position(u32),
    Name(String),
}

/// `text` cut to [`MAX_PLUGIN_TEXT`] bytes, saying so if it was cut.
fn bounded(mut text: String) -> String {
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
        last_words: None,
        now,
        wasi: None,
        _ticking: pre.ticker.tick(),
    };
    let mut store = Store::new(pre.contract.instance_pre().engine(), state);
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
    fn flush_stdio(&mut self) {
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
