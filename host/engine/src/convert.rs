//! The plain-data request as the plugin's WIT records, lowered straight from borrowed data: the
//! host copies each string once, into guest memory, and never into an owned WIT value first.
//! [`v0_2`] is the current contract, the rest of this module 0.1.

use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;
use wasmtime::component::{ComponentType, Lower};

pub(super) mod v0_2 {
    //! `conclave:strategy@0.2.0`: only the fields the plugin reads, versions parsed.

    use super::micros;
    use crate::bindings::v0_2::{CandidateFields, Reads};
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

    /// `lease`.
    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct Lease<'a> {
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
        lease: Lease<'a>,
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
        let text = |field: CandidateFields, value: &'a str| fields.contains(field).then_some(value);
        Candidate {
            binary_version: prepared.binary_version.map(version),
            emulation_version: prepared.emulation_version.map(version),
            creation_time: micros(view.creation_time),
            renew_time: micros(view.renew_time),
            ping_time: micros(view.ping_time),
            name: text(CandidateFields::NAME, &view.name),
            strategy: text(CandidateFields::STRATEGY, &view.strategy),
            binary_version_text: text(CandidateFields::VERSION_TEXT, &view.binary_version),
            emulation_version_text: text(CandidateFields::VERSION_TEXT, &view.emulation_version),
            labels: pairs(
                &view.labels,
                fields.contains(CandidateFields::LABELS),
                &reads.label_keys,
            ),
            annotations: pairs(
                &view.annotations,
                fields.contains(CandidateFields::ANNOTATIONS),
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
        let lease = &prepared.request.lease;
        Request {
            lease: Lease {
                namespace: &lease.namespace,
                name: &lease.name,
                holder: lease.holder.as_deref(),
                holder_index: prepared.holder_index,
                preferred_holder: lease.preferred_holder.as_deref(),
                preferred_holder_index: prepared.preferred_holder_index,
                strategy: &lease.strategy,
                expired: lease.expired,
            },
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
