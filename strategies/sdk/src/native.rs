//! Running a strategy without WebAssembly, on the request the controller builds: the same data the
//! host lowers into the component, for unit tests and the host's native benchmark.

pub use conclave_core::request::{CandidateView, ElectionRequest as ControllerRequest, LeaseView};

use crate::Strategy;
use crate::bindings::{
    CandidateColumns, CandidateFields, ElectionRequest, KeyedColumn, Lease, PackedStrings,
    ParsedVersion, StringColumn,
};
use crate::request::Reads;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use conclave_core::columns::{self, Columns, FieldSet};
use conclave_core::prepared::PreparedRequest;

fn packed(packed: &columns::PackedStrings) -> PackedStrings {
    PackedStrings {
        text: packed.text.clone(),
        ends: packed.ends.clone(),
    }
}

fn column(column: &columns::StringColumn) -> StringColumn {
    StringColumn {
        values: column.values.clone(),
        dictionary: packed(&column.dictionary),
    }
}

fn keyed(columns: &[columns::KeyedColumn<'_>]) -> Vec<KeyedColumn> {
    columns
        .iter()
        .map(|keyed| KeyedColumn {
            key: keyed.key.to_string(),
            column: column(&keyed.column),
        })
        .collect()
}

/// The request a component that reads `reads` gets for `prepared`, as owned WIT values.
#[must_use]
pub fn request_from_core(prepared: &PreparedRequest<'_>, reads: &Reads) -> ElectionRequest {
    let request = prepared.request;
    let lease = &request.lease;
    let fields = FieldSet {
        name: reads.fields.contains(CandidateFields::NAME),
        strategy: reads.fields.contains(CandidateFields::STRATEGY),
        version_text: reads.fields.contains(CandidateFields::VERSION_TEXT),
        labels: reads.fields.contains(CandidateFields::LABELS),
        annotations: reads.fields.contains(CandidateFields::ANNOTATIONS),
    };
    let columns = Columns::new(prepared, fields, reads.label_keys, reads.annotation_keys);
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
        candidates: CandidateColumns {
            binary_version: columns.binary_version,
            emulation_version: columns.emulation_version,
            versions: columns
                .versions
                .iter()
                .map(|version| ParsedVersion {
                    major: version.major,
                    minor: version.minor,
                    patch: version.patch,
                    pre_release: version.pre_release,
                })
                .collect(),
            creation_time: columns.creation_time,
            renew_time: columns.renew_time,
            ping_time: columns.ping_time,
            names: columns.names.as_ref().map(packed),
            strategy: columns.strategy.as_ref().map(column),
            binary_version_text: columns.binary_version_text.as_ref().map(column),
            emulation_version_text: columns.emulation_version_text.as_ref().map(column),
            labels: keyed(&columns.labels),
            annotations: keyed(&columns.annotations),
        },
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
