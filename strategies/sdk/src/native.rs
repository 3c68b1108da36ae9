//! Running a strategy without WebAssembly, on the request the controller builds: the same data the
//! host lowers into the component, for unit tests and the host's native benchmark.

pub use conclave_core::request::{CandidateView, ElectionRequest as ControllerRequest, LeaseView};

use crate::Strategy;
use crate::bindings::{Candidate, CandidateFields, ElectionRequest, Lease, ParsedVersion};
use crate::request::Reads;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use conclave_core::prepared::{self, PreparedCandidate, PreparedRequest};

fn version(parsed: prepared::ParsedVersion) -> ParsedVersion {
    ParsedVersion {
        major: parsed.major,
        minor: parsed.minor,
        patch: parsed.patch,
        pre_release: parsed.pre_release,
        order: parsed.order,
    }
}

fn pairs(
    pairs: &[(String, String)],
    all: bool,
    keys: &'static [&'static str],
) -> Option<Vec<(String, String)>> {
    let read: Vec<(String, String)> = prepared::read_pairs(pairs, all, keys).cloned().collect();
    (!read.is_empty()).then_some(read)
}

fn candidate(prepared: &PreparedCandidate<'_>, reads: &Reads) -> Candidate {
    let view = prepared.view;
    let fields = reads.fields;
    let text =
        |field: CandidateFields, value: &str| fields.contains(field).then(|| value.to_string());
    Candidate {
        binary_version: prepared.binary_version.map(version),
        emulation_version: prepared.emulation_version.map(version),
        creation_time: view.creation_time.map(|t| t.as_micros()),
        renew_time: view.renew_time.map(|t| t.as_micros()),
        ping_time: view.ping_time.map(|t| t.as_micros()),
        name: text(CandidateFields::NAME, &view.name),
        strategy: text(CandidateFields::STRATEGY, &view.strategy),
        binary_version_text: text(CandidateFields::VERSION_TEXT, &view.binary_version),
        emulation_version_text: text(CandidateFields::VERSION_TEXT, &view.emulation_version),
        labels: pairs(
            &view.labels,
            fields.contains(CandidateFields::LABELS),
            reads.label_keys,
        ),
        annotations: pairs(
            &view.annotations,
            fields.contains(CandidateFields::ANNOTATIONS),
            reads.annotation_keys,
        ),
    }
}

/// The request a component that reads `reads` gets for `prepared`, as owned WIT values.
#[must_use]
pub fn request_from_core(prepared: &PreparedRequest<'_>, reads: &Reads) -> ElectionRequest {
    let request = prepared.request;
    let lease = &request.lease;
    ElectionRequest {
        lease: Lease {
            namespace: lease.namespace.clone(),
            name: lease.name.clone(),
            holder: lease.holder.clone(),
            holder_index: prepared.holder_index,
            preferred_holder: lease.preferred_holder.clone(),
            preferred_holder_index: prepared.preferred_holder_index,
            strategy: lease.strategy.clone(),
            expired: lease.expired,
        },
        now: request.now.as_micros(),
        settings: request.settings.clone(),
        candidates: prepared
            .candidates
            .iter()
            .map(|c| candidate(c, reads))
            .collect(),
    }
}

/// Runs `S` on `request` natively, as the host runs its component: the candidates sorted and
/// their versions parsed, only the fields `S` reads filled in, and the answer turned back into a
/// name.
///
/// # Errors
///
/// The strategy's own error, or a message when the request has two candidates of one name or the
/// strategy answers with a position past the end.
pub fn elect_native<S: Strategy>(request: &ControllerRequest) -> Result<Option<String>, String> {
    let prepared = PreparedRequest::new(request).map_err(|error| error.to_string())?;
    let wit = request_from_core(&prepared, &S::READS);
    match S::elect(&wit)? {
        None => Ok(None),
        Some(position) => prepared
            .name_at(position)
            .map(|name| Some(name.to_string()))
            .ok_or_else(|| {
                alloc::format!(
                    "answered position {position}, but there are {} candidates",
                    prepared.candidates.len()
                )
            }),
    }
}
