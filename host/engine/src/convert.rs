//! The plain-data request as the plugin's WIT records, lowered straight from borrowed data: the
//! host copies each string once, into guest memory, and never into an owned WIT value first.
//! [`v0_3`] is the request of the current contract (0.4 kept 0.3's) and of 0.3, [`v0_2`] the one
//! before, the rest of this module 0.1.

use conclave_core::columns::FieldSet;
use conclave_core::prepared::PreparedRequest;
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;
use wasmtime::component::{ComponentType, Lower};

/// What a plugin reads beyond versions and times, whichever contract it declared it in (0.1
/// plugins read everything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// Fields read whole.
    pub(crate) fields: FieldSet,
    /// Label keys read, when not every label is.
    pub(crate) label_keys: Vec<String>,
    /// Annotation keys read, when not every annotation is.
    pub(crate) annotation_keys: Vec<String>,
}

impl Reads {
    /// Every field, as a 0.1 plugin gets.
    pub(crate) fn everything() -> Self {
        Self {
            fields: FieldSet {
                name: true,
                strategy: true,
                version_text: true,
                labels: true,
                annotations: true,
            },
            ..Self::default()
        }
    }
}

/// `lease` of 0.2, 0.3 and 0.4, which have the same shape.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct IndexedLease<'a> {
    namespace: &'a str,
    name: &'a str,
    holder: Option<&'a str>,
    #[component(name = "holder-index")]
    holder_index: Option<u32>,
    #[component(name = "preferred-holder")]
    preferred_holder: Option<&'a str>,
    #[component(name = "preferred-holder-index")]
    preferred_holder_index: Option<u32>,
    strategy: &'a str,
    expired: bool,
}

impl<'a> IndexedLease<'a> {
    fn new(prepared: &'a PreparedRequest<'a>) -> Self {
        let lease = &prepared.request.lease;
        Self {
            namespace: &lease.namespace,
            name: &lease.name,
            holder: lease.holder.as_deref(),
            holder_index: prepared.holder_index,
            preferred_holder: lease.preferred_holder.as_deref(),
            preferred_holder_index: prepared.preferred_holder_index,
            strategy: &lease.strategy,
            expired: lease.expired,
        }
    }
}

pub(super) mod v0_3 {
    //! `conclave:strategy@0.3.0` and `@0.4.0`, whose requests are the same: the candidates as
    //! columns, so a request crosses in a few copies.

    use super::{IndexedLease, Reads};
    use conclave_core::columns::{Columns, KeyedColumn, PackedStrings, StringColumn};
    use conclave_core::prepared::{self, PreparedRequest};
    use wasmtime::component::{ComponentType, Lower};

    /// `parsed-version`.
    #[derive(ComponentType, Lower, Clone, Copy)]
    #[component(record)]
    pub(crate) struct ParsedVersion {
        major: u64,
        minor: u64,
        patch: u64,
        #[component(name = "pre-release")]
        pre_release: bool,
    }

    /// `packed-strings`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Packed<'a> {
        text: &'a str,
        ends: &'a [u32],
    }

    /// `string-column`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Column<'a> {
        values: &'a [u32],
        dictionary: Packed<'a>,
    }

    /// `keyed-column`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Keyed<'a> {
        key: &'a str,
        column: Column<'a>,
    }

    /// `candidate-columns`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Candidates<'a> {
        #[component(name = "binary-version")]
        binary_version: &'a [u32],
        #[component(name = "emulation-version")]
        emulation_version: &'a [u32],
        versions: Vec<ParsedVersion>,
        #[component(name = "creation-time")]
        creation_time: &'a [i64],
        #[component(name = "renew-time")]
        renew_time: &'a [i64],
        #[component(name = "ping-time")]
        ping_time: &'a [i64],
        names: Option<Packed<'a>>,
        strategy: Option<Column<'a>>,
        #[component(name = "binary-version-text")]
        binary_version_text: Option<Column<'a>>,
        #[component(name = "emulation-version-text")]
        emulation_version_text: Option<Column<'a>>,
        labels: Vec<Keyed<'a>>,
        annotations: Vec<Keyed<'a>>,
    }

    /// `election-request`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Request<'a> {
        lease: IndexedLease<'a>,
        now: i64,
        settings: &'a str,
        candidates: Candidates<'a>,
    }

    /// The columns of `prepared` a plugin that reads `reads` gets.
    pub(crate) fn columns<'a>(prepared: &PreparedRequest<'a>, reads: &Reads) -> Columns<'a> {
        Columns::new(
            prepared,
            reads.fields,
            &reads.label_keys,
            &reads.annotation_keys,
        )
    }

    fn packed(packed: &PackedStrings) -> Packed<'_> {
        Packed {
            text: &packed.text,
            ends: &packed.ends,
        }
    }

    fn column(column: &StringColumn) -> Column<'_> {
        Column {
            values: &column.values,
            dictionary: packed(&column.dictionary),
        }
    }

    fn keyed<'a>(columns: &'a [KeyedColumn<'_>]) -> Vec<Keyed<'a>> {
        columns
            .iter()
            .map(|keyed| Keyed {
                key: keyed.key,
                column: column(&keyed.column),
            })
            .collect()
    }

    /// The WIT request for `prepared` and its `columns`, with `settings` as the plugin's settings.
    pub(crate) fn request<'a>(
        prepared: &'a PreparedRequest<'a>,
        columns: &'a Columns<'a>,
        settings: &'a str,
    ) -> Request<'a> {
        let version = |v: &prepared::ParsedVersion| ParsedVersion {
            major: v.major,
            minor: v.minor,
            patch: v.patch,
            pre_release: v.pre_release,
        };
        Request {
            lease: IndexedLease::new(prepared),
            now: prepared.request.now.as_micros(),
            settings,
            candidates: Candidates {
                binary_version: &columns.binary_version,
                emulation_version: &columns.emulation_version,
                versions: columns.versions.iter().map(version).collect(),
                creation_time: &columns.creation_time,
                renew_time: &columns.renew_time,
                ping_time: &columns.ping_time,
                names: columns.names.as_ref().map(packed),
                strategy: columns.strategy.as_ref().map(column),
                binary_version_text: columns.binary_version_text.as_ref().map(column),
                emulation_version_text: columns.emulation_version_text.as_ref().map(column),
                labels: keyed(&columns.labels),
                annotations: keyed(&columns.annotations),
            },
        }
    }
}

pub(super) mod v0_2 {
    //! `conclave:strategy@0.2.0`: only the fields the plugin reads, versions parsed.

    use super::{IndexedLease, Reads, micros};
    use conclave_core::prepared::{self, PreparedCandidate, PreparedRequest};
    use wasmtime::component::{ComponentType, Lower};

    /// `parsed-version`.
    #[derive(ComponentType, Lower, Clone, Copy)]
    #[component(record)]
    pub(crate) struct ParsedVersion {
        major: u64,
        minor: u64,
        patch: u64,
        #[component(name = "pre-release")]
        pre_release: bool,
        order: u32,
    }

    /// `candidate`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Candidate<'a> {
        #[component(name = "binary-version")]
        binary_version: Option<ParsedVersion>,
        #[component(name = "emulation-version")]
        emulation_version: Option<ParsedVersion>,
        #[component(name = "creation-time")]
        creation_time: Option<i64>,
        #[component(name = "renew-time")]
        renew_time: Option<i64>,
        #[component(name = "ping-time")]
        ping_time: Option<i64>,
        name: Option<&'a str>,
        strategy: Option<&'a str>,
        #[component(name = "binary-version-text")]
        binary_version_text: Option<&'a str>,
        #[component(name = "emulation-version-text")]
        emulation_version_text: Option<&'a str>,
        labels: Option<Vec<(&'a str, &'a str)>>,
        annotations: Option<Vec<(&'a str, &'a str)>>,
    }

    /// `election-request`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Request<'a> {
        lease: IndexedLease<'a>,
        now: i64,
        settings: &'a str,
        candidates: Vec<Candidate<'a>>,
    }

    fn version(parsed: prepared::ParsedVersion) -> ParsedVersion {
        ParsedVersion {
            major: parsed.major,
            minor: parsed.minor,
            patch: parsed.patch,
            pre_release: parsed.pre_release,
            order: parsed.order,
        }
    }

    fn pairs<'a>(
        pairs: &'a [(String, String)],
        all: bool,
        keys: &'a [String],
    ) -> Option<Vec<(&'a str, &'a str)>> {
        if !all && keys.is_empty() {
            return None;
        }
        let read: Vec<(&str, &str)> = prepared::read_pairs(pairs, all, keys)
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        (!read.is_empty()).then_some(read)
    }

    fn candidate<'a>(prepared: &PreparedCandidate<'a>, reads: &'a Reads) -> Candidate<'a> {
        let view = prepared.view;
        let fields = reads.fields;
        let text = |read: bool, value: &'a str| read.then_some(value);
        Candidate {
            binary_version: prepared.binary_version.map(version),
            emulation_version: prepared.emulation_version.map(version),
            creation_time: micros(view.creation_time),
            renew_time: micros(view.renew_time),
            ping_time: micros(view.ping_time),
            name: text(fields.name, &view.name),
            strategy: text(fields.strategy, &view.strategy),
            binary_version_text: text(fields.version_text, &view.binary_version),
            emulation_version_text: text(fields.version_text, &view.emulation_version),
            labels: pairs(&view.labels, fields.labels, &reads.label_keys),
            annotations: pairs(
                &view.annotations,
                fields.annotations,
                &reads.annotation_keys,
            ),
        }
    }

    /// The WIT request for `prepared`, with `settings` as the plugin's settings and only the
    /// fields `reads` asks for.
    pub(crate) fn request<'a>(
        prepared: &'a PreparedRequest<'a>,
        settings: &'a str,
        reads: &'a Reads,
    ) -> Request<'a> {
        Request {
            lease: IndexedLease::new(prepared),
            now: prepared.request.now.as_micros(),
            settings,
            candidates: prepared
                .candidates
                .iter()
                .map(|c| candidate(c, reads))
                .collect(),
        }
    }
}

/// `lease` of `conclave:strategy@0.1.0`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Lease<'a> {
    namespace: &'a str,
    name: &'a str,
    holder: Option<&'a str>,
    #[component(name = "preferred-holder")]
    preferred_holder: Option<&'a str>,
    strategy: &'a str,
    expired: bool,
}

/// `candidate` of `conclave:strategy@0.1.0`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Candidate<'a> {
    name: &'a str,
    #[component(name = "binary-version")]
    binary_version: &'a str,
    #[component(name = "emulation-version")]
    emulation_version: &'a str,
    strategy: &'a str,
    #[component(name = "creation-time")]
    creation_time: Option<i64>,
    #[component(name = "renew-time")]
    renew_time: Option<i64>,
    #[component(name = "ping-time")]
    ping_time: Option<i64>,
    labels: &'a [(String, String)],
    annotations: &'a [(String, String)],
}

/// `election-request` of `conclave:strategy@0.1.0`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Request<'a> {
    lease: Lease<'a>,
    now: i64,
    settings: &'a str,
    candidates: Vec<Candidate<'a>>,
}

fn micros(time: Option<Timestamp>) -> Option<i64> {
    time.map(Timestamp::as_micros)
}

fn lease(lease: &LeaseView) -> Lease<'_> {
    Lease {
        namespace: &lease.namespace,
        name: &lease.name,
        holder: lease.holder.as_deref(),
        preferred_holder: lease.preferred_holder.as_deref(),
        strategy: &lease.strategy,
        expired: lease.expired,
    }
}

fn candidate(candidate: &CandidateView) -> Candidate<'_> {
    Candidate {
        name: &candidate.name,
        binary_version: &candidate.binary_version,
        emulation_version: &candidate.emulation_version,
        strategy: &candidate.strategy,
        creation_time: micros(candidate.creation_time),
        renew_time: micros(candidate.renew_time),
        ping_time: micros(candidate.ping_time),
        labels: &candidate.labels,
        annotations: &candidate.annotations,
    }
}

/// The WIT request for `request`, with `settings` as the plugin's settings.
pub(super) fn request<'a>(request: &'a ElectionRequest, settings: &'a str) -> Request<'a> {
    Request {
        lease: lease(&request.lease),
        now: request.now.as_micros(),
        settings,
        candidates: request.candidates.iter().map(candidate).collect(),
    }
}
