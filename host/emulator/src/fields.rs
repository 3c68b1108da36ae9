//! `metadata.managedFields` bookkeeping and server-side apply.
//!
//! Ownership is tracked per leaf field (maps are recursed into, lists are atomic, which is how
//! every list of Lease and LeaseCandidate behaves). Updates (create, PUT, non-apply PATCH) give
//! the fields they change to the writer's `Update` entry; apply gives the applied fields to the
//! manager's `Apply` entry, reports conflicts with other owners whose value differs, and removes
//! fields the manager applied before but no longer applies and nobody else owns.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// A field path: the keys from the object root to a leaf.
pub(crate) type FieldPath = Vec<String>;

/// Metadata fields the system owns; they are never part of anyone's field set.
const SYSTEM_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Maps (as opposed to structs) among the served types' fields: an `Update` that creates one
/// also owns the map itself, which `FieldsV1` records as a `"."` entry.
const MAPS: &[&[&str]] = &[&["metadata", "labels"], &["metadata", "annotations"]];

/// The value at `path`, where a trailing `"."` stands for "the map exists".
static PRESENT: Value = Value::Bool(true);

fn collect(v: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            if MAPS.iter().any(|m| m.iter().eq(path.iter())) {
                let mut own = path.clone();
                own.push(".".into());
                out.insert(own);
            }
            for (k, child) in map {
                if path.len() == 1 && path[0] == "metadata" && SYSTEM_META.contains(&k.as_str()) {
                    continue;
                }
                if path.is_empty() && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                path.push(k.clone());
                collect(child, path, out);
                path.pop();
            }
        }
        _ if path.is_empty() => {}
        _ => {
            out.insert(path.clone());
        }
    }
}

fn is_map_itself(path: &FieldPath) -> bool {
    path.last().is_some_and(|k| k == ".")
}

/// The leaf field paths set in an object.
pub(crate) fn leaves(obj: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    collect(obj, &mut Vec::new(), &mut out);
    out
}

fn get_path<'a>(obj: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    if is_map_itself(path) {
        let parent = &path[..path.len() - 1];
        return parent
            .iter()
            .try_fold(obj, |v, k| v.get(k))
            .map(|_| &PRESENT);
    }
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn remove_path(obj: &mut Value, path: &FieldPath) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(map) = cur.as_object_mut() {
        map.remove(last);
    }
}

/// Merges `patch` into `target`: maps recursively, everything else replaced.
fn deep_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Renders a field set in the `FieldsV1` format (`{"f:spec":{"f:holderIdentity":{}}}`).
fn to_fields_v1(set: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for k in path {
            let key = if k == "." {
                k.clone()
            } else {
                format!("f:{k}")
            };
            let entry = cur.entry(key).or_insert_with(|| Value::Object(Map::new()));
            cur = entry.as_object_mut().expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let children: Vec<(&String, &Value)> = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("f:") || *k == ".")
                .collect()
        })
        .unwrap_or_default();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path.clone());
        }
        return;
    }
    for (k, child) in children {
        path.push(if k == "." {
            k.clone()
        } else {
            k[2..].to_string()
        });
        from_fields_v1(child, path, out);
        path.pop();
    }
}

/// A `ManagedFieldsEntry`, decoded.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    fields: BTreeSet<FieldPath>,
    subresource: Option<String>,
}

fn read_entries(obj: Option<&Value>) -> Vec<Entry> {
    obj.and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    let mut fields = BTreeSet::new();
                    if let Some(f) = e.get("fieldsV1") {
                        from_fields_v1(f, &mut Vec::new(), &mut fields);
                    }
                    Entry {
                        manager: s("manager"),
                        operation: s("operation"),
                        api_version: s("apiVersion"),
                        time: s("time"),
                        fields,
                        subresource: e
                            .get("subresource")
                            .and_then(Value::as_str)
                            .map(String::from),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(s) = e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    let meta = crate::objects::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Renders a field path as apply conflicts name it (`.spec.holderIdentity`).
pub(crate) fn display(path: &FieldPath) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// Records a non-apply write by `manager`: the fields it changed become its own and leave
/// every other entry; removed fields leave every entry.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    now: &str,
) {
    let mut entries = read_entries(old);
    let new_leaves = leaves(new);
    let old_leaves = old.map(leaves).unwrap_or_default();
    let changed: BTreeSet<FieldPath> = new_leaves
        .iter()
        .filter(|p| old.and_then(|o| get_path(o, p)) != get_path(new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<FieldPath> = old_leaves.difference(&new_leaves).cloned().collect();
    for e in &mut entries {
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update" && e.subresource.is_none())
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
                e.api_version = api_version.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                fields: changed,
                subresource: None,
            }),
        }
    }
    write_entries(new, entries);
}

/// A server-side apply refused because other managers own fields with different values:
/// (manager, field) pairs.
#[derive(Debug)]
pub(crate) struct ApplyConflicts(pub Vec<(String, String)>);

/// Applies `config` for `manager` on top of `live` (None when the object does not exist yet).
/// Returns the merged object with updated managedFields.
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<Value, ApplyConflicts> {
    let mut entries = read_entries(live);
    // Apply owns what the configuration sets, never a map itself.
    let wanted: BTreeSet<FieldPath> = leaves(config)
        .into_iter()
        .filter(|p| !is_map_itself(p))
        .collect();
    let mut conflicts = Vec::new();
    for e in &mut entries {
        if e.manager == manager {
            continue;
        }
        let clashing: Vec<FieldPath> = e
            .fields
            .iter()
            .filter(|p| {
                wanted.contains(*p) && live.and_then(|l| get_path(l, p)) != get_path(config, p)
            })
            .cloned()
            .collect();
        if force {
            for p in &clashing {
                e.fields.remove(p);
            }
        } else {
            conflicts.extend(clashing.iter().map(|p| (e.manager.clone(), display(p))));
        }
    }
    if !conflicts.is_empty() {
        return Err(ApplyConflicts(conflicts));
    }
    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    deep_merge(&mut result, config);
    let previous: BTreeSet<FieldPath> = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply")
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&wanted) {
        let owned_elsewhere = entries
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.fields.contains(p));
        if !owned_elsewhere {
            remove_path(&mut result, p);
        }
    }
    entries.retain(|e| !(e.manager == manager && e.operation == "Apply"));
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        time: now.to_string(),
        fields: wanted,
        subresource: None,
    });
    write_entries(&mut result, entries);
    Ok(result)
}

/// A copy of an object with managedFields timestamps and resourceVersion blanked, for
/// detecting no-op writes the way kube-apiserver does.
pub(crate) fn comparable(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        if let Some(Value::Array(list)) = meta.get_mut("managedFields") {
            for e in list {
                if let Some(m) = e.as_object_mut() {
                    m.remove("time");
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const AV: &str = "coordination.k8s.io/v1";

    fn lease(holder: &str) -> Value {
        json!({ "apiVersion": AV, "kind": "Lease", "metadata": { "name": "l", "namespace": "d" },
                "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 } })
    }

    #[test]
    fn fields_v1_round_trip() {
        let set = leaves(&lease("a"));
        let v = to_fields_v1(&set);
        assert_eq!(
            v,
            json!({ "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} } })
        );
        let mut back = BTreeSet::new();
        from_fields_v1(&v, &mut Vec::new(), &mut back);
        assert_eq!(back, set);
    }

    #[test]
    fn apply_conflicts_with_updater_unless_forced() {
        let mut live = lease("a");
        record_update(None, &mut live, "controller", AV, "t");
        let config = json!({ "apiVersion": AV, "kind": "Lease", "metadata": { "name": "l" }, "spec": { "holderIdentity": "b" } });
        let err = apply(Some(&live), &config, "me", false, AV, "t").unwrap_err();
        assert_eq!(
            err.0,
            vec![("controller".to_string(), ".spec.holderIdentity".to_string())]
        );
        let forced = apply(Some(&live), &config, "me", true, AV, "t").unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        let entries = read_entries(Some(&forced));
        let ctl = entries.iter().find(|e| e.manager == "controller").unwrap();
        assert!(
            !ctl.fields
                .contains(&vec!["spec".to_string(), "holderIdentity".to_string()])
        );
    }

    #[test]
    fn same_value_is_shared_not_a_conflict() {
        let mut live = lease("a");
        record_update(None, &mut live, "controller", AV, "t");
        let config = json!({ "apiVersion": AV, "kind": "Lease", "metadata": { "name": "l" }, "spec": { "holderIdentity": "a" } });
        assert!(apply(Some(&live), &config, "me", false, AV, "t").is_ok());
    }

    #[test]
    fn apply_removes_fields_it_no_longer_applies() {
        let first = json!({ "apiVersion": AV, "kind": "Lease", "metadata": { "name": "l", "labels": { "a": "1", "b": "2" } } });
        let live = apply(None, &first, "me", false, AV, "t").unwrap();
        let second = json!({ "apiVersion": AV, "kind": "Lease", "metadata": { "name": "l", "labels": { "a": "1" } } });
        let out = apply(Some(&live), &second, "me", false, AV, "t").unwrap();
        assert_eq!(out["metadata"]["labels"], json!({ "a": "1" }));
    }
}
