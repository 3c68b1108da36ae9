//! The contract versions the host loads (`conclave:strategy` 0.1 to 0.4): how a component is
//! linked as the newest version whose exports it has, how `info()` and `elect` are called under
//! each, and the typed `elect` function of each version.

use super::bindings;
use super::compile::{Runtime, Ticker};
use super::convert;
use super::error::LoadError;
use super::limits::Limits;
use super::sandbox::{self, CallState};
use conclave_core::columns::FieldSet;
use conclave_core::time::Timestamp;
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::{
    ComponentExportIndex, ComponentNamedList, Instance, Lift, Linker, Lower, TypedFunc,
};

/// A plugin linked once (wasmtime's `InstancePre`), ready to be instantiated per call, in the
/// contract version it was built against.
pub(super) struct StrategyPre {
    pub(super) contract: Contract,
    /// The `elect` export, looked up once.
    pub(super) elect: ComponentExportIndex,
    ticker: Arc<Ticker>,
}

/// The contract versions the host loads, newest first.
pub(super) enum Contract {
    V0_4(bindings::v0_4::StrategyPre<CallState>),
    V0_3(bindings::v0_3::StrategyPre<CallState>),
    V0_2(bindings::v0_2::StrategyPre<CallState>),
    V0_1(bindings::v0_1::StrategyPre<CallState>),
}

impl Contract {
    /// The linked component, whichever the version.
    pub(super) fn instance_pre(&self) -> &wasmtime::component::InstancePre<CallState> {
        match self {
            Self::V0_4(pre) => pre.instance_pre(),
            Self::V0_3(pre) => pre.instance_pre(),
            Self::V0_2(pre) => pre.instance_pre(),
            Self::V0_1(pre) => pre.instance_pre(),
        }
    }

    /// Calls `info()` on `instance`, an instance of this contract's plugin.
    pub(super) fn info(
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

    /// The contract version, as `PluginInfo::contract` reports it.
    pub(super) fn version(&self) -> &'static str {
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
    pub(super) fn check_elect_type(
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
    /// A store for one call into this plugin ([`sandbox::new_store`]), on the plugin's engine,
    /// keeping the epoch ticking while it exists.
    pub(super) fn new_store(
        &self,
        plugin: &Arc<str>,
        lease: &str,
        now: Timestamp,
        limits: Limits,
    ) -> Store<CallState> {
        sandbox::new_store(
            self.contract.instance_pre().engine(),
            self.ticker.tick(),
            plugin,
            lease,
            now,
            limits,
        )
    }
}

/// `elect` as the host calls it under each contract version: the borrowed request it lowers and
/// the answer it lifts. [`StrategyPre::check_elect_type`] and [`elect_func`] must name the same
/// alias for a version; these aliases are the one place the pairing is written. 0.4's `elect` is
/// 0.3's, so both use [`ElectV0_3`].
pub(super) type ElectV0_3<'a> = TypedFunc<(&'a convert::v0_3::Request<'a>,), (Answer<u32>,)>;
pub(super) type ElectV0_2<'a> = TypedFunc<(&'a convert::v0_2::Request<'a>,), (Answer<u32>,)>;
pub(super) type ElectV0_1<'a> = TypedFunc<(&'a convert::Request<'a>,), (Answer<String>,)>;

/// A typed function with its parameter and result types, for [`elect_func`].
pub(super) trait TypedElect {
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
pub(super) fn elect_func<F: TypedElect>(
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

/// What `info()` reported, whichever the contract version.
pub(super) struct ReportedInfo {
    pub(super) strategies: Vec<String>,
    pub(super) description: String,
    pub(super) version: String,
    pub(super) reads: Option<convert::Reads>,
    /// `reads.now` of 0.4; `true` before, when a plugin could not say.
    pub(super) reads_now: bool,
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

/// The request as the plugin's contract version shapes it (0.4's is 0.3's).
#[allow(
    clippy::large_enum_variant,
    reason = "one per call, on the stack; boxing the 0.3 request would add an allocation to every call"
)]
pub(super) enum WitRequest<'a> {
    V0_3(convert::v0_3::Request<'a>),
    V0_2(convert::v0_2::Request<'a>),
    V0_1(convert::Request<'a>),
}

/// What `elect` returns: `T` is a position (0.2 and later) or a name (0.1).
pub(super) type Answer<T> = Result<Option<T>, String>;

/// Whom a plugin elected, as its contract version says it.
pub(super) enum Choice {
    Position(u32),
    Name(String),
}
