//! Decoding, normalising and validating objects the way kube-apiserver's REST strategies do.
//!
//! Every body goes through the matching k8s-openapi type and back: wrong types are rejected with
//! 400 like Go's decoder, unknown fields are dropped (and reported, for `fieldValidation`), and
//! times are rendered in Kubernetes' formats.

use crate::resources::{LEASE_CANDIDATES, LEASES, NAMESPACES, RESOURCES, ResourceInfo};
use crate::status::ApiError;
use conclave_core::validation::{
    FieldError, FieldErrorKind, LeaseCandidateFields, LeaseFields, MetaFields,
    dns1123_label_errors, validate_lease, validate_lease_candidate,
    validate_lease_candidate_update,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

fn round_trip<T: DeserializeOwned + Serialize>(
    res: &ResourceInfo,
    v: &Value,
) -> Result<Value, ApiError> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = res.kind,
            version = res.version
        ))
    })?;
    serde_json::to_value(&typed).map_err(|e| ApiError::internal(e.to_string()))
}

/// Collects paths present in `input` but absent from `output` (fields the type does not know).
fn unknown_fields(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    if let (Value::Object(i), Value::Object(o)) = (input, output) {
        for (k, v) in i {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match o.get(k) {
                None if !v.is_null() => out.push(p),
                Some(ov) => unknown_fields(v, ov, &p, out),
                None => {}
            }
        }
    }
}

/// Decodes `body` as the resource's type, fills apiVersion and kind, and returns the normalised
/// object plus the unknown field paths it dropped.
pub(crate) fn normalize(res_id: usize, body: Value) -> Result<(Value, Vec<String>), ApiError> {
    use k8s_openapi::api;
    let res = &RESOURCES[res_id];
    let Value::Object(mut map) = body else {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: expected an object",
            kind = res.kind,
            v = res.version
        )));
    };
    let api_version = res.api_version();
    if map
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("apiVersion".into(), Value::String(api_version.clone()));
    }
    if map
        .get("kind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("kind".into(), Value::String(res.kind.into()));
    }
    let data_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let data_kind = map
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if data_version != api_version || data_kind != res.kind {
        let version = data_version.rsplit('/').next().unwrap_or("");
        return Err(ApiError::bad_request(format!(
            "{data_kind} in version \"{version}\" cannot be handled as a {kind}: no kind \"{data_kind}\" is registered for version \"{data_version}\" in scheme \"pkg/runtime/scheme.go:111\"",
            kind = res.kind
        )));
    }
    let input = Value::Object(map);
    let output = match (res.group, res.plural) {
        ("", "namespaces") => round_trip::<api::core::v1::Namespace>(res, &input)?,
        ("", "events") => round_trip::<api::core::v1::Event>(res, &input)?,
        ("", "pods") => round_trip::<api::core::v1::Pod>(res, &input)?,
        ("coordination.k8s.io", "leases") => {
            round_trip::<api::coordination::v1::Lease>(res, &input)?
        }
        ("coordination.k8s.io", "leasecandidates") => {
            round_trip::<api::coordination::v1beta1::LeaseCandidate>(res, &input)?
        }
        ("events.k8s.io", "events") => round_trip::<api::events::v1::Event>(res, &input)?,
        _ => input.clone(),
    };
    let mut unknown = Vec::new();
    unknown_fields(&input, &output, "", &mut unknown);
    Ok((output, unknown))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int_at(v: &Value, pointer: &str) -> Option<i32> {
    v.pointer(pointer)
        .and_then(Value::as_i64)
        .map(|n| n.clamp(i32::MIN.into(), i32::MAX.into()) as i32)
}

fn candidate_fields(v: &Value) -> LeaseCandidateFields<'_> {
    LeaseCandidateFields {
        lease_name: str_at(v, "/spec/leaseName"),
        binary_version: str_at(v, "/spec/binaryVersion"),
        emulation_version: str_at(v, "/spec/emulationVersion"),
        strategy: str_at(v, "/spec/strategy"),
    }
}

/// Validates an object about to be stored; `old` is the stored object on update.
pub(crate) fn validate(res_id: usize, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let res = &RESOURCES[res_id];
    let name = str_at(obj, "/metadata/name");
    let labels: Vec<(&str, &str)> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let annotation_keys: Vec<&str> = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let meta = MetaFields {
        name,
        namespace: str_at(obj, "/metadata/namespace"),
        labels: &labels,
        annotation_keys: &annotation_keys,
    };
    let mut errors = match res_id {
        LEASES => validate_lease(
            &meta,
            &LeaseFields {
                lease_duration_seconds: int_at(obj, "/spec/leaseDurationSeconds"),
                lease_transitions: int_at(obj, "/spec/leaseTransitions"),
                strategy: obj.pointer("/spec/strategy").and_then(Value::as_str),
                preferred_holder: obj.pointer("/spec/preferredHolder").and_then(Value::as_str),
            },
        ),
        LEASE_CANDIDATES => match old {
            Some(old) => validate_lease_candidate_update(
                &meta,
                &candidate_fields(old),
                &candidate_fields(obj),
            ),
            None => validate_lease_candidate(&meta, &candidate_fields(obj)),
        },
        NAMESPACES => {
            if name.is_empty() {
                vec![FieldError {
                    kind: FieldErrorKind::Required,
                    path: "metadata.name".into(),
                    value: None,
                    detail: "name or generateName is required".into(),
                }]
            } else {
                dns1123_label_errors(name)
                    .into_iter()
                    .map(|detail| FieldError {
                        kind: FieldErrorKind::Invalid,
                        path: "metadata.name".into(),
                        value: Some(format!("{name:?}")),
                        detail,
                    })
                    .collect()
            }
        }
        _ => {
            if name.is_empty() {
                vec![FieldError {
                    kind: FieldErrorKind::Required,
                    path: "metadata.name".into(),
                    value: None,
                    detail: "name or generateName is required".into(),
                }]
            } else {
                Vec::new()
            }
        }
    };
    if let Some(old) = old {
        for (field, pointer) in [
            ("metadata.uid", "/metadata/uid"),
            ("metadata.creationTimestamp", "/metadata/creationTimestamp"),
        ] {
            let new_value = str_at(obj, pointer);
            if !new_value.is_empty() && new_value != str_at(old, pointer) {
                errors.push(FieldError {
                    kind: FieldErrorKind::Invalid,
                    path: field.into(),
                    value: Some(format!("{new_value:?}")),
                    detail: "field is immutable".into(),
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(res, name, &errors))
    }
}

/// The current time in Kubernetes' `Time` format (RFC 3339, seconds).
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

static UID_COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 unpredictable bits: a per-process random hasher over a counter.
fn random_u64() -> u64 {
    static STATE: std::sync::OnceLock<RandomState> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(RandomState::new);
    state.hash_one(UID_COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A random version-4 UUID string for `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let hi = random_u64();
    let lo = random_u64();
    let hi = (hi & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    let lo = (lo & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// Five random lowercase alphanumerics, as `generateName` appends.
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// The `metadata` map of an object, created if missing.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// A string field of `metadata`, or "".
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let (out, unknown) = normalize(
            LEASES,
            json!({ "metadata": { "name": "a" }, "spec": { "holderIdentity": "x", "bogus": 1 }, "extra": null }),
        )
        .unwrap();
        assert_eq!(unknown, vec!["spec.bogus".to_string()]);
        assert_eq!(out["kind"], "Lease");
        assert_eq!(out["apiVersion"], "coordination.k8s.io/v1");
        assert!(out["spec"].get("bogus").is_none());
    }

    #[test]
    fn wrong_types_and_kinds_are_bad_requests() {
        let err =
            normalize(LEASES, json!({ "spec": { "leaseDurationSeconds": "ten" } })).unwrap_err();
        assert_eq!(err.code.as_u16(), 400);
        assert!(
            err.message
                .starts_with("Lease in version \"v1\" cannot be handled as a Lease"),
            "{}",
            err.message
        );
        let err = normalize(LEASES, json!({ "kind": "ConfigMap" })).unwrap_err();
        assert_eq!(err.code.as_u16(), 400);
    }

    #[test]
    fn uids_are_distinct_v4() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn candidate_update_keeps_lease_name_immutable() {
        let old = json!({ "metadata": { "name": "c", "namespace": "default" },
            "spec": { "leaseName": "a", "binaryVersion": "1.33.0", "emulationVersion": "1.33.0", "strategy": "OldestEmulationVersion" } });
        let mut new = old.clone();
        new["spec"]["leaseName"] = json!("b");
        let err = validate(LEASE_CANDIDATES, &new, Some(&old)).unwrap_err();
        assert_eq!(err.code.as_u16(), 422);
        assert_eq!(err.details.unwrap()["causes"][0]["field"], "spec.leaseName");
    }
}
