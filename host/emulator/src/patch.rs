//! PATCH bodies: JSON merge patch, JSON patch, and strategic merge patch for the types served
//! here (whose only strategic lists are `metadata.finalizers`, merged as a set, and
//! `metadata.ownerReferences`, merged by `uid`).

use crate::status::ApiError;
use serde_json::{Map, Value};

/// The patch types kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// Maps a Content-Type to a patch type.
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        tracing::trace!(content_type, "patch content type");
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type()),
        }
    }
}

/// Parses a JSON body, as a 400 BadRequest on failure.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Parses an apply body, which may be YAML or JSON.
pub(crate) fn parse_apply(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Applies a merge, JSON or strategic patch to `current`.
pub(crate) fn apply_patch(
    kind: PatchType,
    current: &Value,
    body: &[u8],
) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match kind {
        PatchType::Merge => {
            let patch = parse_json(body)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a merge patch must be a JSON object",
                ));
            }
            json_patch::merge(&mut doc, &patch);
        }
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut doc, &patch).map_err(|_| ApiError::patch_rejected())?;
        }
        PatchType::Strategic => {
            let patch = parse_json(body)?;
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "error decoding patch: a strategic merge patch must be a JSON object",
                ));
            };
            strategic_merge(&mut doc, &p, &[]);
        }
        PatchType::Apply => unreachable!("apply is handled by server-side apply"),
    }
    Ok(doc)
}

fn strategic_merge(target: &mut Value, patch: &Map<String, Value>, path: &[&str]) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target
        .as_object_mut()
        .expect("target was just made an object");
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(remove)) = (t.get_mut(field), v) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        let mut child_path = path.to_vec();
        child_path.push(k);
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(child)
                if child.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                t.remove(k);
            }
            Value::Object(child) => {
                let entry = t.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(entry, child, &child_path);
            }
            Value::Array(items) if child_path == ["metadata", "finalizers"] => {
                let entry = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(existing) = entry {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *entry = v.clone();
                }
            }
            Value::Array(items) if child_path == ["metadata", "ownerReferences"] => {
                let entry = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(existing) = entry {
                    for item in items {
                        let uid = item.get("uid");
                        let deleting = item.get("$patch").and_then(Value::as_str) == Some("delete");
                        existing.retain(|e| e.get("uid") != uid || uid.is_none());
                        if !deleting {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *entry = v.clone();
                }
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchType::Merge
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml").unwrap(),
            PatchType::Apply
        );
        assert_eq!(
            PatchType::from_content_type("text/plain")
                .unwrap_err()
                .code
                .as_u16(),
            415
        );
    }

    #[test]
    fn strategic_merges_finalizers_and_deletes_nulls() {
        let cur = json!({ "metadata": { "finalizers": ["a"], "labels": { "x": "1", "y": "2" } }, "spec": { "holderIdentity": "h" } });
        let patch = br#"{"metadata":{"finalizers":["b"],"labels":{"y":null},"$setElementOrder/finalizers":["a","b"]},"spec":{"holderIdentity":"k"}}"#;
        let out = apply_patch(PatchType::Strategic, &cur, patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(out["metadata"]["labels"], json!({ "x": "1" }));
        assert_eq!(out["spec"]["holderIdentity"], "k");
        let removed = apply_patch(PatchType::Strategic, &out, br#"{"$deleteFromPrimitiveList/metadata":[],"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}}"#).unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let cur = json!({ "spec": { "holderIdentity": "h" } });
        let err = apply_patch(
            PatchType::Json,
            &cur,
            br#"[{"op":"test","path":"/spec/holderIdentity","value":"z"}]"#,
        )
        .unwrap_err();
        assert_eq!(err.code.as_u16(), 422);
    }

    #[test]
    fn apply_bodies_may_be_yaml() {
        let v = parse_apply(b"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: a\nspec:\n  leaseDurationSeconds: 5\n").unwrap();
        assert_eq!(v["spec"]["leaseDurationSeconds"], json!(5));
    }
}
