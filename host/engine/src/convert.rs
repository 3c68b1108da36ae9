//! Conversion of the plain-data request into the WIT records a plugin receives.

use super::bindings;
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::time::Timestamp;

fn micros(time: Option<Timestamp>) -> Option<i64> {
    time.map(Timestamp::as_micros)
}

fn lease(lease: &LeaseView) -> bindings::Lease {
    bindings::Lease {
        namespace: lease.namespace.clone(),
        name: lease.name.clone(),
        holder: lease.holder.clone(),
        preferred_holder: lease.preferred_holder.clone(),
        strategy: lease.strategy.clone(),
        expired: lease.expired,
    }
}

fn candidate(candidate: &CandidateView) -> bindings::Candidate {
    bindings::Candidate {
        name: candidate.name.clone(),
        binary_version: candidate.binary_version.clone(),
        emulation_version: candidate.emulation_version.clone(),
        strategy: candidate.strategy.clone(),
        creation_time: micros(candidate.creation_time),
        renew_time: micros(candidate.renew_time),
        ping_time: micros(candidate.ping_time),
        labels: candidate.labels.clone(),
        annotations: candidate.annotations.clone(),
    }
}

/// The WIT request for `request`, with `settings` as the plugin's settings.
pub(super) fn request(request: &ElectionRequest, settings: &str) -> bindings::ElectionRequest {
    bindings::ElectionRequest {
        lease: lease(&request.lease),
        now: request.now.as_micros(),
        settings: settings.to_owned(),
        candidates: request.candidates.iter().map(candidate).collect(),
    }
}
