//! `meta.k8s.io/v1` Table rendering, which kubectl asks for to print `get` output.

use crate::resources::{LEASE_CANDIDATES, LEASES, NAMESPACES, RESOURCES};
use serde_json::{Value, json};

/// How much of each object a table row carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// No object.
    None,
    /// A PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// Kubernetes' `duration.HumanDuration`, used for Age columns.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(obj: &Value, field: &str) -> String {
    let Some(ts) = obj.pointer(field).and_then(Value::as_str) else {
        return "<unknown>".into();
    };
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

fn s(obj: &Value, pointer: &str) -> Value {
    json!(obj.pointer(pointer).and_then(Value::as_str).unwrap_or(""))
}

fn column(name: &str, description: &str) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({ "name": name, "type": "string", "format": format, "description": description, "priority": 0 })
}

fn columns(res: usize) -> Vec<Value> {
    let name = column("Name", "Name must be unique within a namespace.");
    let age = column(
        "Age",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match res {
        LEASES => vec![
            name,
            column(
                "Holder",
                "holderIdentity contains the identity of the holder of a current lease.",
            ),
            age,
        ],
        LEASE_CANDIDATES => vec![
            name,
            column(
                "LeaseName",
                "LeaseName is the name of the lease for which this candidate is contending.",
            ),
            column("BinaryVersion", "BinaryVersion is the binary version."),
            column(
                "EmulationVersion",
                "EmulationVersion is the emulation version.",
            ),
            age,
        ],
        NAMESPACES => vec![name, column("Status", "The status of the namespace"), age],
        _ => vec![
            column("Last Seen", "Time when the event was last observed."),
            column("Type", "Type of this event."),
            column(
                "Reason",
                "Short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            column("Object", "The object that this event is about."),
            column(
                "Message",
                "A human-readable description of the status of this operation.",
            ),
        ],
    }
}

fn cells(res: usize, obj: &Value) -> Vec<Value> {
    let name = s(obj, "/metadata/name");
    let created = json!(age(obj, "/metadata/creationTimestamp"));
    match res {
        LEASES => vec![name, s(obj, "/spec/holderIdentity"), created],
        LEASE_CANDIDATES => vec![
            name,
            s(obj, "/spec/leaseName"),
            s(obj, "/spec/binaryVersion"),
            s(obj, "/spec/emulationVersion"),
            created,
        ],
        NAMESPACES => vec![name, s(obj, "/status/phase"), created],
        _ => {
            let last = [
                "/lastTimestamp",
                "/eventTime",
                "/series/lastObservedTime",
                "/deprecatedLastTimestamp",
            ]
            .iter()
            .find(|p| obj.pointer(p).is_some_and(|v| v.is_string()))
            .map(|p| age(obj, p))
            .unwrap_or_else(|| age(obj, "/metadata/creationTimestamp"));
            let regarding = if obj.get("regarding").is_some() {
                "/regarding"
            } else {
                "/involvedObject"
            };
            let kind = obj
                .pointer(&format!("{regarding}/kind"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let target = obj
                .pointer(&format!("{regarding}/name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let message = if obj.get("note").is_some() {
                s(obj, "/note")
            } else {
                s(obj, "/message")
            };
            vec![
                json!(last),
                s(obj, "/type"),
                s(obj, "/reason"),
                json!(format!("{}/{target}", kind.to_ascii_lowercase())),
                message,
            ]
        }
    }
}

fn row(res: usize, obj: &Value, include: IncludeObject) -> Value {
    let mut row = json!({ "cells": cells(res, obj) });
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => {
            let mut full = obj.clone();
            full["apiVersion"] = json!(RESOURCES[res].api_version());
            full["kind"] = json!(RESOURCES[res].kind);
            row["object"] = full;
        }
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
            });
        }
    }
    row
}

/// A Table for a list response (`list` is the List object the store produced).
pub(crate) fn list_table(res: usize, list: &Value, include: IncludeObject) -> Value {
    let rows: Vec<Value> = list["items"]
        .as_array()
        .map(|items| items.iter().map(|o| row(res, o, include)).collect())
        .unwrap_or_default();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list["metadata"].clone(),
        "columnDefinitions": columns(res),
        "rows": rows,
    })
}

/// A Table with one row, for a single object or one watch event.
pub(crate) fn object_table(res: usize, obj: &Value, include: IncludeObject) -> Value {
    let rv = obj
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(json!(""));
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": rv },
        "columnDefinitions": columns(res),
        "rows": [row(res, obj, include)],
    })
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn durations_match_kubernetes() {
        for (secs, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (9 * 3600, "9h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }
}
