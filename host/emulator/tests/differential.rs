//! The same scripted request sequence against the emulator and, when the control-plane
//! harness has its binaries, against a real kube-apiserver: both must answer with the same
//! status codes and the same object fields (apart from uids, timestamps and resourceVersions).

mod common;

use http::{Method, Request};
use kube::client::Body;
use serde_json::{Value, json};

/// One request of the script and the status code kube-apiserver answers it with.
struct Step {
    label: &'static str,
    method: Method,
    /// Path below `/apis/coordination.k8s.io/` or an absolute path (starting with `/`); `{ns}`
    /// is replaced by the namespace.
    path: String,
    content_type: &'static str,
    body: Option<String>,
    expect: u16,
    /// Set where kube-apiserver is known to answer differently on purpose (the issue asks for
    /// more than upstream serves); such steps are left out of the comparison.
    upstream_differs: bool,
}

/// What one step produced: its label, status code and normalised response body.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// The step's label.
    pub label: &'static str,
    /// HTTP status code.
    pub code: u16,
    /// The response body with volatile fields removed.
    pub body: Value,
}

fn step(
    label: &'static str,
    method: Method,
    path: &str,
    content_type: &'static str,
    body: Option<Value>,
    expect: u16,
) -> Step {
    Step {
        label,
        method,
        path: path.to_string(),
        content_type,
        body: body.map(|b| b.to_string()),
        expect,
        upstream_differs: false,
    }
}

fn yaml_step(label: &'static str, path: &str, yaml: &str, expect: u16) -> Step {
    Step {
        label,
        method: Method::PATCH,
        path: path.to_string(),
        content_type: "application/apply-patch+yaml",
        body: Some(yaml.to_string()),
        expect,
        upstream_differs: false,
    }
}

/// Replaces UUIDs inside a message (precondition errors quote the object's uid).
fn mask_uuids(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let candidate = text.get(i..i + 36).unwrap_or("");
        let is_uuid = candidate.len() == 36
            && candidate.char_indices().all(|(j, c)| {
                if [8, 13, 18, 23].contains(&j) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if is_uuid {
            out.push_str("<uid>");
            i += 36;
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The events of a watch stream (one JSON object a line), without periodic bookmarks: when
/// those come depends on timing (kube-apiserver sends one shortly before the watch times out),
/// while the initial-events-end bookmark is part of the protocol and kept.
fn watch_events(bytes: &[u8]) -> Value {
    let events = String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
        .filter(|e: &Value| {
            e["type"] != "BOOKMARK"
                || e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
        })
        .collect();
    Value::Array(events)
}

/// Removes what legitimately differs between two servers.
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for volatile in [
                "uid",
                "creationTimestamp",
                "resourceVersion",
                "deletionTimestamp",
                "time",
                "continue",
                "selfLink",
            ] {
                if let Some(x) = map.get_mut(volatile) {
                    *x = json!("<volatile>");
                }
            }
            sort_causes(map);
            // Decoding errors quote Go's JSON decoder after the common prefix; keep the prefix.
            if let Some(Value::String(message)) = map.get_mut("message") {
                *message = mask_uuids(message);
                // The versions differ between servers; the wording must not.
                if message.starts_with("Timeout: Too large resource version: ") {
                    *message = "Timeout: Too large resource version: <rv>, current: <rv>".into();
                }
                if let Some(at) = message.find(" cannot be handled as a ")
                    && let Some(colon) = message[at..].find(": ").map(|c| at + c)
                    && !message[colon..].starts_with(": no kind")
                {
                    message.truncate(colon);
                }
                // The emulator's 404 for a resource it does not serve goes on to say what it
                // serves; kube-apiserver's sentence is the prefix.
                const NOT_FOUND: &str = "the server could not find the requested resource";
                if message.starts_with(NOT_FOUND) {
                    message.truncate(NOT_FOUND.len());
                }
            }
            if let Some(Value::Array(entries)) = map.get_mut("managedFields") {
                let mut managers: Vec<Value> = entries
                    .iter()
                    .map(|e| json!([e["manager"], e["operation"], e["fieldsV1"]]))
                    .collect();
                managers.sort_by_key(ToString::to_string);
                map.insert("managedFields".into(), Value::Array(managers));
            }
            for child in map.values_mut() {
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// kube-apiserver validates map entries (labels, annotations) in Go's random map order, so a
/// Status's causes, and the list of them in its message, are compared in a canonical order.
fn sort_causes(map: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(causes)) = map.get_mut("details").and_then(|d| d.get_mut("causes"))
    else {
        return;
    };
    causes.sort_by_key(ToString::to_string);
    let mut listed: Vec<String> = causes
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    listed.sort();
    let canonical = listed.join(", ");
    if let Some(Value::String(message)) = map.get_mut("message")
        && let Some(open) = message.find(": [")
        && message.ends_with(']')
    {
        let list = &message[open + 3..message.len() - 1];
        // Only a permutation of the causes is reordered; any other difference stays visible.
        if list.len() == canonical.len() && listed.iter().all(|part| list.contains(part.as_str())) {
            *message = format!("{}[{canonical}]", &message[..open + 2]);
        }
    }
}

fn lease(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": name, "labels": { "suite": "diff" } }, "spec": spec })
}

fn candidate(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "coordination.k8s.io/v1beta1", "kind": "LeaseCandidate", "metadata": { "name": name }, "spec": spec })
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";

/// Runs the script against `client` in namespace `ns` and returns the transcript. Fails if a
/// status code differs from what kube-apiserver is known to answer.
///
/// Steps marked `upstream_differs` are sent only when `upstream` is false.
pub async fn run_script(client: &kube::Client, ns: &str, upstream: bool) -> Vec<Exchange> {
    let leases = "v1/namespaces/{ns}/leases";
    let l1 = "v1/namespaces/{ns}/leases/l1";
    let cands = "v1beta1/namespaces/{ns}/leasecandidates";
    let valid_spec = json!({ "holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2024-01-01T00:00:00.000000Z" });
    let cand_spec = json!({ "leaseName": "l1", "binaryVersion": "1.33.0", "emulationVersion": "1.33.0", "strategy": "OldestEmulationVersion" });
    let mut transcript = Vec::new();
    let run = async |s: Step, transcript: &mut Vec<Exchange>| -> Value {
        if upstream && s.upstream_differs {
            return Value::Null;
        }
        let path = s.path.replace("{ns}", ns);
        let uri = if path.starts_with('/') {
            path
        } else {
            format!("/apis/coordination.k8s.io/{path}")
        };
        let mut req = Request::builder()
            .method(s.method.clone())
            .uri(&uri)
            .header("Accept", "application/json");
        if s.body.is_some() {
            req = req.header("Content-Type", s.content_type);
        }
        let req = req
            .body(Body::from(s.body.clone().unwrap_or_default().into_bytes()))
            .expect("request builds");
        let resp = client.send(req).await.expect("request is answered");
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect_bytes().await.expect("body reads");
        let raw: Value = if uri.contains("watch=true") {
            watch_events(&bytes)
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
        };
        assert_eq!(code, s.expect, "{} {uri} ({}): {raw}", s.method, s.label);
        let mut body = raw.clone();
        normalize(&mut body);
        if !s.upstream_differs {
            transcript.push(Exchange {
                label: s.label,
                code,
                body,
            });
        }
        raw
    };

    let created = run(
        step(
            "create lease",
            Method::POST,
            leases,
            JSON,
            Some(lease("l1", valid_spec.clone())),
            201,
        ),
        &mut transcript,
    )
    .await;
    let rv1 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let uid = created["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    run(
        step(
            "create existing",
            Method::POST,
            leases,
            JSON,
            Some(lease("l1", valid_spec.clone())),
            409,
        ),
        &mut transcript,
    )
    .await;
    run(
        step("get", Method::GET, l1, JSON, None, 200),
        &mut transcript,
    )
    .await;
    let mut update = lease(
        "l1",
        json!({ "holderIdentity": "b", "leaseDurationSeconds": 15 }),
    );
    update["metadata"]["resourceVersion"] = json!(rv1);
    // dryRun=All: every write is checked and answered, nothing is stored.
    let dry = |path: &str| format!("{path}?dryRun=All");
    let l2 = "v1/namespaces/{ns}/leases/l2";
    let dry_steps = [
        step(
            "dry-run create",
            Method::POST,
            &dry(leases),
            JSON,
            Some(lease("l2", valid_spec.clone())),
            201,
        ),
        step(
            "dry-run create stored nothing",
            Method::GET,
            l2,
            JSON,
            None,
            404,
        ),
        step(
            "dry-run create of an existing lease",
            Method::POST,
            &dry(leases),
            JSON,
            Some(lease("l1", valid_spec.clone())),
            409,
        ),
        step(
            "dry-run create of an invalid lease",
            Method::POST,
            &dry(leases),
            JSON,
            Some(lease("l2", json!({ "leaseDurationSeconds": -1 }))),
            422,
        ),
        step(
            "unsupported dryRun value",
            Method::POST,
            &format!("{leases}?dryRun=Maybe"),
            JSON,
            Some(lease("l2", valid_spec.clone())),
            422,
        ),
        step(
            "dry-run update",
            Method::PUT,
            &dry(l1),
            JSON,
            Some(update.clone()),
            200,
        ),
        step(
            "dry-run merge patch",
            Method::PATCH,
            &dry(l1),
            MERGE,
            Some(json!({ "spec": { "holderIdentity": "dry" } })),
            200,
        ),
        step("dry-run delete", Method::DELETE, &dry(l1), JSON, None, 200),
        step(
            "dry-run delete in DeleteOptions",
            Method::DELETE,
            l1,
            JSON,
            Some(json!({ "dryRun": ["All"] })),
            200,
        ),
        step(
            "dry-run delete collection",
            Method::DELETE,
            &dry(&format!("{leases}?labelSelector=suite%3Ddiff")).replacen("?dryRun", "&dryRun", 1),
            JSON,
            None,
            200,
        ),
        step(
            "the lease is unchanged after the dry runs",
            Method::GET,
            l1,
            JSON,
            None,
            200,
        ),
    ];
    for dry_step in dry_steps {
        run(dry_step, &mut transcript).await;
    }
    assert_eq!(
        transcript.last().map(|e| &e.body),
        transcript
            .iter()
            .find(|e| e.label == "get")
            .map(|e| &e.body),
        "dry runs changed the stored lease"
    );
    let updated = run(
        step("update", Method::PUT, l1, JSON, Some(update.clone()), 200),
        &mut transcript,
    )
    .await;
    run(
        step(
            "update with stale resourceVersion",
            Method::PUT,
            l1,
            JSON,
            Some(update.clone()),
            409,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "update without resourceVersion",
            Method::PUT,
            l1,
            JSON,
            Some(lease("l1", json!({ "holderIdentity": "c" }))),
            422,
        ),
        &mut transcript,
    )
    .await;
    let noop = run(
        step(
            "no-op update",
            Method::PUT,
            l1,
            JSON,
            Some(updated.clone()),
            200,
        ),
        &mut transcript,
    )
    .await;
    assert_eq!(
        noop["metadata"]["resourceVersion"], updated["metadata"]["resourceVersion"],
        "a no-op update keeps the resourceVersion"
    );
    let mut invalid_put = updated.clone();
    invalid_put["spec"]["leaseDurationSeconds"] = json!(0);
    invalid_put["spec"]["leaseTransitions"] = json!(-2);
    let mut bad_labels = lease("lbl", json!({}));
    bad_labels["metadata"]["labels"] =
        json!({ "bad key!": "x", "ok": "-not-valid-", "a/b/c": "y" });
    // One label per object: the length limits (counted in bytes, as upstream words them).
    let mut long_label_value = lease("lblv", json!({}));
    long_label_value["metadata"]["labels"] = json!({ "long": "v".repeat(64) });
    let mut long_label_key = lease("lblk", json!({}));
    long_label_key["metadata"]["labels"] =
        json!({ format!("{}/{}", "p".repeat(254), "n".repeat(64)): "x" });
    for invalid in [
        step(
            "label value over 63 bytes",
            Method::POST,
            leases,
            JSON,
            Some(long_label_value),
            422,
        ),
        step(
            "label key prefix over 253 bytes, name over 63",
            Method::POST,
            leases,
            JSON,
            Some(long_label_key),
            422,
        ),
        step(
            "invalid update",
            Method::PUT,
            l1,
            JSON,
            Some(invalid_put),
            422,
        ),
        step(
            "invalid labels",
            Method::POST,
            leases,
            JSON,
            Some(bad_labels),
            422,
        ),
    ] {
        run(invalid, &mut transcript).await;
    }
    run(step("invalid lease", Method::POST, leases, JSON, Some(lease("bad", json!({ "leaseDurationSeconds": 0, "leaseTransitions": -1, "preferredHolder": "x" }))), 422), &mut transcript).await;
    run(
        step(
            "invalid lease name",
            Method::POST,
            leases,
            JSON,
            Some(lease("Bad_Name", json!({}))),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "unsupported strategy",
            Method::POST,
            leases,
            JSON,
            Some(lease("s1", json!({ "strategy": "foobar" }))),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "too many slashes",
            Method::POST,
            leases,
            JSON,
            Some(lease(
                "s2",
                json!({ "strategy": "example.com/foobar/toomanyslashes" }),
            )),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "third-party strategy",
            Method::POST,
            leases,
            JSON,
            Some(lease(
                "s3",
                json!({ "strategy": "example.com/foobar", "preferredHolder": "x" }),
            )),
            201,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "wrong type",
            Method::POST,
            leases,
            JSON,
            Some(lease("t", json!({ "leaseDurationSeconds": "ten" }))),
            400,
        ),
        &mut transcript,
    )
    .await;
    run(step("wrong kind", Method::POST, leases, JSON, Some(json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "LeaseCandidate", "metadata": { "name": "k" } })), 400), &mut transcript).await;
    run(
        step(
            "missing namespace",
            Method::POST,
            "v1/namespaces/conclave-no-such-ns/leases",
            JSON,
            Some(lease("x", json!({}))),
            404,
        ),
        &mut transcript,
    )
    .await;

    run(
        step(
            "create candidate",
            Method::POST,
            cands,
            JSON,
            Some(candidate("Cand_1.a", cand_spec.clone())),
            201,
        ),
        &mut transcript,
    )
    .await;
    run(step("candidate binary < emulation", Method::POST, cands, JSON, Some(candidate("c2", json!({ "leaseName": "l1", "binaryVersion": "1.30.0", "emulationVersion": "1.31.0", "strategy": "OldestEmulationVersion" }))), 422), &mut transcript).await;
    run(
        step(
            "candidate missing versions",
            Method::POST,
            cands,
            JSON,
            Some(candidate(
                "c3",
                json!({ "leaseName": "l1", "strategy": "OldestEmulationVersion" }),
            )),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(step("candidate four-part version", Method::POST, cands, JSON, Some(candidate("c4", json!({ "leaseName": "l1", "binaryVersion": "1.30.1.6", "strategy": "example.com/x" }))), 422), &mut transcript).await;
    run(
        step(
            "candidate missing everything",
            Method::POST,
            cands,
            JSON,
            Some(candidate("c5", json!({}))),
            422,
        ),
        &mut transcript,
    )
    .await;
    let candidate_spec = |version: &str, strategy: &str| json!({ "leaseName": "l1", "binaryVersion": version, "emulationVersion": version, "strategy": strategy });
    for invalid in [
        step(
            "candidate v-prefixed version",
            Method::POST,
            cands,
            JSON,
            Some(candidate(
                "c7",
                candidate_spec("v1.33.0", "OldestEmulationVersion"),
            )),
            422,
        ),
        step(
            "candidate name with dot-dot",
            Method::POST,
            cands,
            JSON,
            Some(candidate("..x", cand_spec.clone())),
            422,
        ),
        step(
            "candidate name with a slash",
            Method::POST,
            cands,
            JSON,
            Some(candidate("a/b", cand_spec.clone())),
            422,
        ),
        step(
            "candidate unqualified strategy",
            Method::POST,
            cands,
            JSON,
            Some(candidate("c8", candidate_spec("1.33.0", "MyStrategy"))),
            422,
        ),
        step(
            "invalid candidate update",
            Method::PUT,
            &format!("{cands}/Cand_1.a"),
            JSON,
            Some(candidate(
                "Cand_1.a",
                candidate_spec("1.33.0", "1nvalid strategy!"),
            )),
            422,
        ),
    ] {
        run(invalid, &mut transcript).await;
    }
    run(step("candidate third-party strategy", Method::POST, cands, JSON, Some(candidate("c6", json!({ "leaseName": "l2", "binaryVersion": "1.33.0", "strategy": "example.com/foo" }))), 201), &mut transcript).await;
    run(
        step(
            "candidate leaseName is immutable",
            Method::PATCH,
            &format!("{cands}/c6"),
            MERGE,
            Some(json!({ "spec": { "leaseName": "other" } })),
            422,
        ),
        &mut transcript,
    )
    .await;
    // kube-apiserver v1.37 rejects this selector for v1beta1 ("not a known field selector");
    // the issue asks for it and the controller relies on it, so the emulator serves it.
    let by_lease = Step {
        upstream_differs: true,
        ..step(
            "list candidates by leaseName",
            Method::GET,
            &format!("{cands}?fieldSelector=spec.leaseName%3Dl2"),
            JSON,
            None,
            200,
        )
    };
    let listed = run(by_lease, &mut transcript).await;
    if !upstream {
        let names: Vec<&str> = listed["items"]
            .as_array()
            .map(|i| {
                i.iter()
                    .filter_map(|c| c["metadata"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, vec!["c6"]);
    }
    run(
        step(
            "unsupported field selector",
            Method::GET,
            &format!("{cands}?fieldSelector=spec.strategy%3Dx"),
            JSON,
            None,
            400,
        ),
        &mut transcript,
    )
    .await;

    run(step("merge patch", Method::PATCH, l1, MERGE, Some(json!({ "metadata": { "labels": { "extra": "yes" } }, "spec": { "leaseTransitions": 3 } })), 200), &mut transcript).await;
    run(
        step(
            "json patch test fails",
            Method::PATCH,
            l1,
            "application/json-patch+json",
            Some(json!([{ "op": "test", "path": "/spec/holderIdentity", "value": "zzz" }])),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "json patch",
            Method::PATCH,
            l1,
            "application/json-patch+json",
            Some(json!([{ "op": "replace", "path": "/spec/holderIdentity", "value": "j" }])),
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "strategic merge patch",
            Method::PATCH,
            l1,
            "application/strategic-merge-patch+json",
            Some(json!({ "spec": { "holderIdentity": "s" } })),
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "invalid patch result",
            Method::PATCH,
            l1,
            MERGE,
            Some(json!({ "spec": { "leaseDurationSeconds": -5 } })),
            422,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "unsupported patch type",
            Method::PATCH,
            l1,
            "text/plain",
            Some(json!({})),
            415,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "patch missing object",
            Method::PATCH,
            &format!("{leases}/missing"),
            MERGE,
            Some(json!({})),
            404,
        ),
        &mut transcript,
    )
    .await;

    let ssa = format!("{leases}/ssa?fieldManager=alice");
    let config = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: ssa\nspec:\n  holderIdentity: alice\n  leaseDurationSeconds: 10\n";
    run(
        yaml_step("apply creates", &ssa, config, 201),
        &mut transcript,
    )
    .await;
    run(yaml_step("apply again", &ssa, config, 200), &mut transcript).await;
    let bob = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: ssa\nspec:\n  holderIdentity: bob\n";
    run(
        yaml_step(
            "apply conflict",
            &format!("{leases}/ssa?fieldManager=bob"),
            bob,
            409,
        ),
        &mut transcript,
    )
    .await;
    run(
        yaml_step(
            "apply force",
            &format!("{leases}/ssa?fieldManager=bob&force=true"),
            bob,
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        yaml_step(
            "apply shrink",
            &ssa,
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: ssa\n",
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        yaml_step(
            "apply without fieldManager",
            &format!("{leases}/ssa"),
            config,
            422,
        ),
        &mut transcript,
    )
    .await;

    run(
        step(
            "list by label",
            Method::GET,
            &format!("{leases}?labelSelector=suite%3Ddiff,extra"),
            JSON,
            None,
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "list page",
            Method::GET,
            &format!("{leases}?limit=1"),
            JSON,
            None,
            200,
        ),
        &mut transcript,
    )
    .await;
    // Watches: the events and their order, with the same options, and the option checks.
    let watch = |query: &str| {
        format!("{leases}?watch=true&timeoutSeconds=1&labelSelector=suite%3Ddiff&{query}")
    };
    let initial = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    let future = rv1.parse::<u64>().unwrap_or(0) + 1_000_000_000;
    let watch_steps = [
        step(
            "watch with initial events",
            Method::GET,
            &watch(&format!("{initial}&allowWatchBookmarks=true")),
            JSON,
            None,
            200,
        ),
        step(
            "watch with initial events without bookmarks",
            Method::GET,
            &watch(initial),
            JSON,
            None,
            200,
        ),
        step(
            "watch with sendInitialEvents=false",
            Method::GET,
            &watch(
                "sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            ),
            JSON,
            None,
            200,
        ),
        step(
            "legacy watch from now",
            Method::GET,
            &watch("allowWatchBookmarks=true"),
            JSON,
            None,
            200,
        ),
        step(
            "watch resumed from a version",
            Method::GET,
            &watch(&format!("resourceVersion={rv1}")),
            JSON,
            None,
            200,
        ),
        step(
            "watch from a future version waits",
            Method::GET,
            &watch(&format!("resourceVersion={future}")),
            JSON,
            None,
            200,
        ),
        step(
            "watch with initial events from a future version",
            Method::GET,
            &watch(&format!("{initial}&resourceVersion={future}")),
            JSON,
            None,
            200,
        ),
        step(
            "sendInitialEvents without resourceVersionMatch",
            Method::GET,
            &watch("sendInitialEvents=true"),
            JSON,
            None,
            422,
        ),
        step(
            "resourceVersionMatch on a watch without sendInitialEvents",
            Method::GET,
            &watch("resourceVersionMatch=NotOlderThan"),
            JSON,
            None,
            422,
        ),
        step(
            "sendInitialEvents with resourceVersionMatch=Exact",
            Method::GET,
            &watch("sendInitialEvents=true&resourceVersionMatch=Exact"),
            JSON,
            None,
            422,
        ),
        step(
            "sendInitialEvents on a list",
            Method::GET,
            &format!("{leases}?{initial}"),
            JSON,
            None,
            422,
        ),
        step(
            "resourceVersionMatch on a list without resourceVersion",
            Method::GET,
            &format!("{leases}?resourceVersionMatch=NotOlderThan"),
            JSON,
            None,
            422,
        ),
        step(
            "unsupported resourceVersionMatch on a list",
            Method::GET,
            &format!("{leases}?resourceVersion=1&resourceVersionMatch=Newest"),
            JSON,
            None,
            422,
        ),
        step(
            "resourceVersionMatch=Exact for resourceVersion 0",
            Method::GET,
            &format!("{leases}?resourceVersion=0&resourceVersionMatch=Exact"),
            JSON,
            None,
            422,
        ),
        step(
            "timeoutSeconds that is not a number",
            Method::GET,
            &watch("timeoutSeconds=soon").replacen("timeoutSeconds=1&", "", 1),
            JSON,
            None,
            400,
        ),
        step(
            "limit that is not a number",
            Method::GET,
            &format!("{leases}?limit=ten"),
            JSON,
            None,
            400,
        ),
        step(
            "list from a future version",
            Method::GET,
            &format!("{leases}?resourceVersion={future}"),
            JSON,
            None,
            504,
        ),
    ];
    for watch_step in watch_steps {
        run(watch_step, &mut transcript).await;
    }
    // What each server must send, so the comparison cannot pass on two empty streams.
    let types = |label: &str| -> Vec<String> {
        let events = transcript.iter().find(|e| e.label == label);
        events
            .and_then(|e| e.body.as_array())
            .map(|events| {
                events
                    .iter()
                    .map(|e| e["type"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let initial_events = types("watch with initial events");
    assert!(
        initial_events.len() >= 2
            && initial_events.last().is_some_and(|t| t == "BOOKMARK")
            && initial_events[..initial_events.len() - 1]
                .iter()
                .all(|t| t == "ADDED"),
        "initial events, then the initial-events-end bookmark: {initial_events:?}"
    );
    assert_eq!(
        types("watch with initial events without bookmarks"),
        initial_events[..initial_events.len() - 1],
        "without allowWatchBookmarks there is no initial-events-end bookmark"
    );
    assert_eq!(
        types("legacy watch from now"),
        initial_events,
        "a legacy watch from now lists like sendInitialEvents"
    );
    assert!(types("watch with sendInitialEvents=false").is_empty());
    assert!(types("watch resumed from a version").contains(&"MODIFIED".to_string()));
    assert!(types("watch from a future version waits").is_empty());
    assert_eq!(
        types("watch with initial events from a future version"),
        ["ERROR"]
    );
    // The all-namespaces path serves only list and watch: a delete there must not empty every
    // namespace, and a create there has no namespace.
    for refused in [
        step(
            "delete collection without a namespace",
            Method::DELETE,
            "v1/leases?labelSelector=suite%3Ddiff",
            JSON,
            None,
            405,
        ),
        step(
            "create without a namespace",
            Method::POST,
            "v1/leases",
            JSON,
            Some(lease("l9", valid_spec.clone())),
            405,
        ),
        step(
            "delete candidates without a namespace",
            Method::DELETE,
            "v1beta1/leasecandidates",
            JSON,
            None,
            405,
        ),
        step(
            "the lease survives a refused delete",
            Method::GET,
            l1,
            JSON,
            None,
            200,
        ),
    ] {
        run(refused, &mut transcript).await;
    }
    let wrong_uid = json!({ "preconditions": { "uid": "00000000-0000-0000-0000-000000000000" } });
    run(
        step(
            "delete with wrong uid",
            Method::DELETE,
            l1,
            JSON,
            Some(wrong_uid),
            409,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "delete",
            Method::DELETE,
            l1,
            JSON,
            Some(json!({ "preconditions": { "uid": uid } })),
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step("get deleted", Method::GET, l1, JSON, None, 404),
        &mut transcript,
    )
    .await;
    run(
        step("delete deleted", Method::DELETE, l1, JSON, None, 404),
        &mut transcript,
    )
    .await;
    run(
        step(
            "delete collection",
            Method::DELETE,
            &format!("{leases}?labelSelector=suite%3Ddiff"),
            JSON,
            None,
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "list after delete collection",
            Method::GET,
            leases,
            JSON,
            None,
            200,
        ),
        &mut transcript,
    )
    .await;
    run(
        step(
            "unknown resource",
            Method::GET,
            "v1/namespaces/{ns}/widgets",
            JSON,
            None,
            404,
        ),
        &mut transcript,
    )
    .await;
    transcript
}

/// A client that shows every answer as it came: kube-rs would otherwise retry the 504 of a
/// read from a future resourceVersion (it carries Retry-After) for minutes.
fn without_retries(mut config: kube::Config) -> kube::Client {
    config.default_retry = false;
    kube::Client::try_from(config).expect("client builds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_matches_kube_apiserver() {
    let (emulator, _) = common::start().await;
    let client = without_retries(kube::Config::new(emulator.url().parse().unwrap()));
    let ns_name = "differential-0";
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({ "metadata": { "name": ns_name } })).unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();
    let ours = run_script(&client, ns_name, false).await;

    let plane = match conclave_testkit::ControlPlane::start().await {
        Ok(Some(plane)) => plane,
        Ok(None) => {
            eprintln!(
                "SKIP real-server comparison: control-plane binaries missing; the emulator ran the script alone"
            );
            return;
        }
        Err(e) => panic!("control plane failed to start: {e}"),
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig_path())
        .expect("the control plane's kubeconfig reads");
    let real_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("the control plane's kubeconfig loads");
    let real_client = without_retries(real_config);
    let real_ns = plane.namespace("differential").await.expect("namespace");
    assert_eq!(
        real_ns, ns_name,
        "both runs use the same namespace name so messages compare"
    );
    let theirs = run_script(&real_client, &real_ns, true).await;
    let mut differences = Vec::new();
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(theirs.iter()) {
        if a != b {
            differences.push(format!(
                "step {:?}:\n  emulator:       {} {}\n  kube-apiserver: {} {}",
                a.label, a.code, a.body, b.code, b.body
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    emulator.shutdown().await.unwrap();
}
