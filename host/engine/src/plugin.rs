//! One loaded plugin: what it is ([`PluginInfo`], checked when it is loaded) and a call into it
//! under its limits, in the contract version it was built against ([`super::contract`]), in a
//! fresh sandbox per call ([`super::sandbox`]).

use super::CallPhases;
use super::compile::LoadStats;
use super::contract::{
    Choice, Contract, ElectV0_1, ElectV0_2, ElectV0_3, StrategyPre, WitRequest, elect_func,
};
use super::convert;
use super::error::{CallError, LoadError};
use super::limits::Limits;
use super::sandbox::{CallState, bounded, classify};
use conclave_core::prepared::PreparedRequest;
use conclave_core::request::ElectionRequest;
use conclave_core::text::truncate_utf8;
use conclave_core::time::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wasmtime::Store;

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
        let mut store = pre.new_store(&label, "", Timestamp::default(), info.limits);
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
    /// it is bounded: an error message is cut to [`MAX_PLUGIN_TEXT`](super::MAX_PLUGIN_TEXT)
    /// bytes, and an answer longer than any candidate name can be is an invalid answer.
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
        let mut store = self
            .pre
            .new_store(&self.label, &lease, request.now, self.info.limits);
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
