//! The plain-data request as the plugin's WIT records, lowered straight from borrowed data: the
//! host copies each string once, into guest memory, and never into an owned WIT value first.

use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;
use wasmtime::component::{ComponentType, Lower};

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
