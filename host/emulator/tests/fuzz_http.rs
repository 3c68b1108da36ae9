//! Fuzzing the emulator's HTTP API from outside (issue 32, part 3): arbitrary requests over a raw
//! TCP connection, so that nothing a client library would refuse to send is left out.
//!
//! What is fuzzed: paths (the served group/version/resource prefixes and `watch/` mixed with
//! garbage, percent-encoded bytes, very long segments), verbs (the five of the API, `HEAD`,
//! `OPTIONS` and made-up ones), bodies (random bytes, truncated or malformed JSON, Leases,
//! LeaseCandidates, Pods, Namespaces and Events with random, huge, unknown or wrongly typed
//! fields, the wrong kind), patch content types (merge, strategic, JSON patch, apply as YAML or
//! JSON, and unknown ones) with arbitrary patch bodies, `Accept` (JSON, Table, garbage) and the
//! query parameters (`watch`, `resourceVersion`, `resourceVersionMatch`, `fieldSelector`,
//! `labelSelector`, `limit`, `continue`, `timeoutSeconds`, `sendInitialEvents`, `dryRun`,
//! `fieldManager`, `fieldValidation`, `force`, ...) with garbage values.
//!
//! Why: the emulator stands in for kube-apiserver in every fast test and in `conclave demo`; a
//! bad request from any client must be answered, never drop the connection (a handler panic),
//! never hang, and never be a 5xx (a 5xx for bad client input is a bug: kube-apiserver answers
//! 4xx). The one 5xx kube-apiserver itself gives a client is the 504 `Timeout` of a read from a
//! resourceVersion the store has not reached, which the emulator reproduces.
//!
//! Each response must arrive within [`REQUEST_TIMEOUT`]; an error must be a `Status` object
//! whose `code` is the HTTP status; a JSON success must parse, and every line of a watch must be
//! a JSON event. After every request the server must still answer a plain GET.
//!
//! Cases: [`DEFAULT_CASES`] in `cargo test`; `CONCLAVE_FUZZ_CASES=N` for a longer run, e.g.
//! `CONCLAVE_FUZZ_CASES=20000 cargo test -p conclave-emulator --test fuzz_http`.

mod common;

use conclave_emulator::EmulatorConfig;
use conclave_testkit::fuzz_cases;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Cases in a plain `cargo test`.
const DEFAULT_CASES: u32 = 500;

/// The longest any response may take: a watch lasts at most [`MAX_WATCH`] and a read from a
/// future resourceVersion waits 3 s before its 504, so anything longer is a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The emulator's longest watch here, so that fuzzed watches end quickly.
const MAX_WATCH: Duration = Duration::from_millis(150);

/// One request as sent on the wire.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    query: String,
    content_type: Option<String>,
    accept: Option<String>,
    body: Vec<u8>,
}

/// Percent-encodes every byte outside RFC 3986's unreserved set, so that the request line is
/// valid and the request reaches the emulator's handler (hyper answers a malformed request line
/// itself).
fn encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn methods() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just("GET".to_owned()),
        4 => Just("POST".to_owned()),
        3 => Just("PUT".to_owned()),
        4 => Just("PATCH".to_owned()),
        1 => Just("DELETE".to_owned()),
        1 => Just("HEAD".to_owned()),
        1 => Just("OPTIONS".to_owned()),
        1 => Just("TRACE".to_owned()),
        1 => "[A-Z]{1,12}",
    ]
}

fn prefixes() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("/apis/coordination.k8s.io/v1"),
        3 => Just("/apis/coordination.k8s.io/v1beta1"),
        3 => Just("/api/v1"),
        1 => Just("/apis/events.k8s.io/v1"),
        1 => Just("/apis/coordination.k8s.io/v1alpha2"),
        1 => Just("/apis"),
        1 => Just("/api"),
        1 => Just("/openapi/v3"),
        1 => Just("/apis/example.com/v9"),
        1 => Just(""),
    ]
}

/// A path segment: a real one, a name, garbage, or something very long.
fn segments() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("namespaces".to_owned()),
        3 => Just("default".to_owned()),
        1 => Just("kube-system".to_owned()),
        1 => Just("nowhere".to_owned()),
        3 => Just("leases".to_owned()),
        2 => Just("leasecandidates".to_owned()),
        2 => Just("pods".to_owned()),
        1 => Just("events".to_owned()),
        1 => Just("status".to_owned()),
        1 => Just("watch".to_owned()),
        4 => "[a-c]".prop_map(|s| s),
        1 => "[a-z0-9.-]{0,20}",
        1 => proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| encode(&b)),
        1 => "\\PC{1,6}".prop_map(|s| encode(s.as_bytes())),
        1 => "[a-z]{200,4000}",
        1 => Just("%".to_owned()),
        1 => Just("%zz".to_owned()),
        1 => Just("..".to_owned()),
    ]
}

/// Random segments after a prefix: mostly paths nothing serves.
fn random_paths() -> impl Strategy<Value = String> {
    (
        prefixes(),
        any::<bool>(),
        proptest::collection::vec(segments(), 0..6),
    )
        .prop_map(|(prefix, watch, rest)| {
            let mut path = prefix.to_owned();
            if watch {
                path.push_str("/watch");
            }
            for segment in rest {
                path.push('/');
                path.push_str(&segment);
            }
            path
        })
}

/// A served resource: its path prefix, plural, whether it is namespaced, and the index of its
/// kind in [`objects`].
type Resource = (&'static str, &'static str, bool, usize);

fn resources() -> impl Strategy<Value = Resource> {
    prop_oneof![
        4 => Just(("/apis/coordination.k8s.io/v1", "leases", true, 0)),
        3 => Just(("/apis/coordination.k8s.io/v1beta1", "leasecandidates", true, 1)),
        2 => Just(("/api/v1", "pods", true, 2)),
        1 => Just(("/api/v1", "namespaces", false, 3)),
        1 => Just(("/api/v1", "events", true, 4)),
        1 => Just(("/apis/events.k8s.io/v1", "events", true, 4)),
    ]
}

/// The path of `resource` (its collection, all namespaces' or one namespace's, an object, its
/// status), naming an object with probability `named`, with a segment now and then replaced by
/// garbage.
fn resource_paths(resource: Resource, named: f64) -> impl Strategy<Value = String> {
    let namespace = prop_oneof![
        6 => Just(Some("default".to_owned())),
        1 => Just(Some("kube-system".to_owned())),
        1 => Just(Some("nowhere".to_owned())),
        1 => Just(None),
        1 => segments().prop_map(Some),
    ];
    let name = proptest::option::weighted(
        named,
        prop_oneof![6 => "[a-c]".prop_map(|s| s), 1 => segments()],
    );
    (
        Just(resource),
        proptest::bool::weighted(0.15),
        namespace,
        name,
        proptest::bool::weighted(0.1),
        proptest::option::weighted(0.1, (any::<prop::sample::Index>(), segments())),
    )
        .prop_map(
            |((prefix, plural, namespaced, _), watch, namespace, name, status, garbage)| {
                let mut parts: Vec<String> = Vec::new();
                if watch {
                    parts.push("watch".into());
                }
                match (namespaced, namespace) {
                    (true, Some(ns)) => {
                        parts.extend(["namespaces".into(), ns, plural.into()]);
                    }
                    _ => parts.push(plural.into()),
                }
                if let Some(name) = name {
                    parts.push(name);
                    if status {
                        parts.push("status".into());
                    }
                }
                if let Some((at, segment)) = garbage {
                    let at = at.index(parts.len());
                    parts[at] = segment;
                }
                format!("{prefix}/{}", parts.join("/"))
            },
        )
}

fn paths(resource: Resource, named: f64) -> impl Strategy<Value = String> {
    (
        prop_oneof![5 => resource_paths(resource, named), 1 => random_paths()],
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(mut path, slash)| {
            if slash || path.is_empty() {
                path.push('/');
            }
            path
        })
}

fn query_values() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("true".to_owned()),
        1 => Just("false".to_owned()),
        1 => Just("1".to_owned()),
        2 => Just("0".to_owned()),
        1 => Just(String::new()),
        // Resource versions the seeded store has reached.
        3 => "[1-3]?[0-9]",
        1 => Just("18446744073709551616".to_owned()),
        1 => Just("-1".to_owned()),
        1 => Just("-9223372036854775808".to_owned()),
        1 => Just("9223372036854775807".to_owned()),
        1 => Just("NotOlderThan".to_owned()),
        1 => Just("Exact".to_owned()),
        1 => Just("All".to_owned()),
        1 => Just("Strict".to_owned()),
        1 => Just("Ignore".to_owned()),
        2 => Just("metadata.name=a".to_owned()),
        1 => Just("metadata.namespace!=default,spec.holderIdentity=x".to_owned()),
        1 => Just("spec.nodeName=n,status.phase==Running".to_owned()),
        2 => Just("app=x,tier!=y".to_owned()),
        1 => Just("app in (x, y),!tier,zone notin ()".to_owned()),
        1 => Just("app in (x".to_owned()),
        1 => Just("=,!=,==,()".to_owned()),
        1 => Just("a".repeat(5000)),
        2 => "\\PC{0,12}",
        1 => proptest::collection::vec(any::<u8>(), 0..16)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn query_keys() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("watch"),
        3 => Just("resourceVersion"),
        2 => Just("resourceVersionMatch"),
        2 => Just("fieldSelector"),
        2 => Just("labelSelector"),
        2 => Just("limit"),
        2 => Just("continue"),
        2 => Just("timeoutSeconds"),
        1 => Just("sendInitialEvents"),
        1 => Just("allowWatchBookmarks"),
        1 => Just("dryRun"),
        1 => Just("fieldManager"),
        1 => Just("fieldValidation"),
        1 => Just("force"),
        1 => Just("includeObject"),
        1 => Just("propagationPolicy"),
        1 => Just("pretty"),
    ]
    .prop_map(str::to_owned)
}

fn queries() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::collection::vec((query_keys(), query_values()), 0..5).prop_map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v.as_bytes())))
                .collect::<Vec<_>>()
                .join("&")
        }),
        // Unencoded separators and stray percent signs: the query string does not decode.
        1 => Just("watch=true&&=&%&limit=%zz".to_owned()),
        1 => "[a-z=&%0-9]{0,30}",
    ]
}

fn content_types() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        4 => Just(Some("application/json".to_owned())),
        3 => Just(Some("application/merge-patch+json".to_owned())),
        3 => Just(Some("application/strategic-merge-patch+json".to_owned())),
        3 => Just(Some("application/json-patch+json".to_owned())),
        3 => Just(Some("application/apply-patch+yaml".to_owned())),
        1 => Just(Some("application/apply-patch+json; charset=utf-8".to_owned())),
        1 => Just(Some("application/yaml".to_owned())),
        1 => Just(Some("application/vnd.kubernetes.protobuf".to_owned())),
        1 => "[ -~]{0,30}".prop_map(Some),
    ]
}

fn accepts() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        2 => Just(Some("application/json".to_owned())),
        1 => Just(Some("application/json;as=Table;v=v1;g=meta.k8s.io".to_owned())),
        1 => "[ -~]{0,30}".prop_map(Some),
    ]
}

/// Arbitrary JSON, nested a little.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,10}".prop_map(Value::from),
        Just(json!("x".repeat(70_000))),
        Just(json!(1e308)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A plausible value of the given flavour, or anything at all.
fn field(plausible: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![12 => plausible, 1 => json_values()].boxed()
}

fn names() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => "[a-c]".prop_map(Value::from),
        1 => "[a-z0-9.-]{0,70}".prop_map(Value::from),
        1 => "\\PC{0,8}".prop_map(Value::from),
        1 => Just(json!("n".repeat(300))),
    ]
}

fn times() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(json!("2026-01-01T00:00:00.000000Z")),
        1 => Just(json!("2026-01-01T00:00:00Z")),
        1 => Just(json!("0001-01-01T00:00:00Z")),
        1 => Just(json!("9999-12-31T23:59:59.999999Z")),
        1 => Just(json!("-000001-01-01T00:00:00Z")),
        1 => Just(json!("2026-13-45T99:99:99Z")),
        1 => "\\PC{0,30}".prop_map(Value::from),
    ]
}

fn ints() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (-2i64..40).prop_map(Value::from),
        1 => any::<i32>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(1.5)),
    ]
}

fn versions() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "1\\.3[0-4]\\.[0-2]".prop_map(Value::from),
        1 => Just(json!("v1.33.0")),
        1 => Just(json!("99999999999999999999.0.0")),
        1 => "\\PC{0,10}".prop_map(Value::from),
    ]
}

fn metadata() -> impl Strategy<Value = Value> {
    (
        field(names()),
        proptest::option::of(field(prop_oneof![Just(json!("default")), names()])),
        proptest::option::of(field(
            proptest::collection::btree_map("[a-z/.]{0,12}", "\\PC{0,8}", 0..3)
                .prop_map(|m| json!(m)),
        )),
        proptest::option::of(field("[0-9]{1,3}".prop_map(Value::from))),
        proptest::option::of(field(
            proptest::collection::vec("[a-z./]{1,12}".prop_map(Value::from), 0..3)
                .prop_map(Value::from),
        )),
    )
        .prop_map(|(name, namespace, labels, rv, finalizers)| {
            let mut meta = json!({ "name": name });
            for (key, value) in [
                ("namespace", namespace),
                ("labels", labels),
                ("resourceVersion", rv),
                ("finalizers", finalizers),
            ] {
                if let Some(value) = value {
                    meta[key] = value;
                }
            }
            meta
        })
}

/// A body of one of the served kinds (mostly the kind of index `preferred`: Lease,
/// LeaseCandidate, Pod, Namespace, Event), its fields plausible or not.
fn objects(preferred: usize) -> impl Strategy<Value = Value> {
    let weight = |kind: usize| if kind == preferred { 20 } else { 1 };
    let lease = (
        metadata(),
        field(names()),
        field(ints()),
        field(times()),
        field(times()),
        field(ints()),
        field(prop_oneof![
            Just(json!("OldestEmulationVersion")),
            "\\PC{0,12}".prop_map(Value::from)
        ]),
        field(names()),
    )
        .prop_map(
            |(meta, holder, duration, acquire, renew, transitions, strategy, preferred)| {
                json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                    "spec": {
                        "holderIdentity": holder, "leaseDurationSeconds": duration,
                        "acquireTime": acquire, "renewTime": renew, "leaseTransitions": transitions,
                        "strategy": strategy, "preferredHolder": preferred,
                    }
                })
            },
        );
    let candidate = (
        metadata(),
        field(names()),
        field(versions()),
        field(versions()),
        field(times()),
        field(times()),
        field(prop_oneof![
            Just(json!("OldestEmulationVersion")),
            "\\PC{0,12}".prop_map(Value::from)
        ]),
    )
        .prop_map(|(meta, lease, binary, emulation, renew, ping, strategy)| {
            json!({
                "apiVersion": "coordination.k8s.io/v1beta1", "kind": "LeaseCandidate",
                "metadata": meta,
                "spec": {
                    "leaseName": lease, "binaryVersion": binary, "emulationVersion": emulation,
                    "renewTime": renew, "pingTime": ping, "strategy": strategy,
                }
            })
        });
    let pod = (
        metadata(),
        field(names()),
        field(json_values()),
        field(times()),
    )
        .prop_map(|(meta, node, phase, started)| {
            json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "i" }] },
                "status": { "phase": phase, "startTime": started },
            })
        });
    let namespace = metadata()
        .prop_map(|meta| json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": meta }));
    let event =
        (metadata(), field(names()), field(json_values())).prop_map(|(meta, reason, object)| {
            json!({
                "apiVersion": "v1", "kind": "Event", "metadata": meta, "reason": reason,
                "involvedObject": object, "type": "Normal",
            })
        });
    let kind = prop_oneof![
        Just(None),
        Just(Some(json!("Pod"))),
        Just(Some(json!(""))),
        Just(Some(json!(3))),
    ];
    let api_version = prop_oneof![
        Just(None),
        Just(Some(json!("v1"))),
        Just(Some(json!("example.com/v9"))),
        Just(Some(json!(null))),
    ];
    (
        prop_oneof![
            weight(0) => lease,
            weight(1) => candidate,
            weight(2) => pod,
            weight(3) => namespace,
            weight(4) => event,
        ],
        proptest::option::weighted(0.2, ("[a-zA-Z]{1,10}", json_values())),
        proptest::option::weighted(0.1, kind),
        proptest::option::weighted(0.1, api_version),
    )
        .prop_map(|(mut obj, unknown, kind, api_version)| {
            if let Some((key, value)) = unknown {
                obj["spec"][key] = value;
            }
            if let Some(kind) = kind {
                match kind {
                    Some(kind) => obj["kind"] = kind,
                    None => drop(obj.as_object_mut().map(|o| o.remove("kind"))),
                }
            }
            if let Some(api_version) = api_version {
                match api_version {
                    Some(v) => obj["apiVersion"] = v,
                    None => drop(obj.as_object_mut().map(|o| o.remove("apiVersion"))),
                }
            }
            obj
        })
}

/// RFC 6902 operations, some of them valid.
fn json_patches() -> impl Strategy<Value = Value> {
    let op = (
        prop_oneof![
            Just("add"),
            Just("remove"),
            Just("replace"),
            Just("move"),
            Just("copy"),
            Just("test"),
            Just("bogus"),
        ],
        prop_oneof![
            Just("/spec/holderIdentity"),
            Just("/spec/leaseDurationSeconds"),
            Just("/metadata/labels/x"),
            Just("/metadata/name"),
            Just("/metadata/finalizers/-"),
            Just("/spec"),
            Just(""),
            Just("/"),
            Just("/spec/0/~2"),
        ],
        json_values(),
        prop_oneof![Just("/spec"), Just("/metadata/annotations"), Just("bad")],
    )
        .prop_map(|(op, path, value, from)| {
            json!({ "op": op, "path": path, "value": value, "from": from })
        });
    proptest::collection::vec(op, 0..4).prop_map(Value::from)
}

/// A YAML rendering of an object, as `kubectl apply --server-side` sends it.
fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_default()
}

fn bodies(kind: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => Just(Vec::new()),
        6 => objects(kind).prop_map(|o| o.to_string().into_bytes()),
        2 => (objects(kind), any::<prop::sample::Index>()).prop_map(|(o, cut)| {
            let text = o.to_string().into_bytes();
            let at = cut.index(text.len().max(1));
            text[..at.min(text.len())].to_vec()
        }),
        2 => objects(kind).prop_map(|o| yaml(&o).into_bytes()),
        2 => json_patches().prop_map(|p| p.to_string().into_bytes()),
        2 => json_values().prop_map(|v| v.to_string().into_bytes()),
        1 => json_values().prop_map(|v| yaml(&v).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => Just(b"{\"metadata\":{\"name\":\"a\"}}{}".to_vec()),
        1 => Just(b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".to_vec()),
        1 => Just(b"a: &a [*a, *a, *a]\nb: *a\n".to_vec()),
        1 => Just("x: !!binary AAAA\ny: ~\n? [complex]\n: key\n".as_bytes().to_vec()),
    ]
}

fn requests() -> impl Strategy<Value = Request> {
    (methods(), resources())
        .prop_flat_map(|(method, resource)| {
            // Most creates name no object, most other writes name one.
            let named = match method.as_str() {
                "POST" => 0.1,
                "GET" => 0.5,
                _ => 0.9,
            };
            (
                Just(method),
                paths(resource, named),
                queries(),
                content_types(),
                accepts(),
                bodies(resource.3),
            )
        })
        .prop_map(
            |(method, path, query, content_type, accept, body)| Request {
                method,
                path,
                query,
                content_type,
                accept,
                body,
            },
        )
}

/// What came back: the status, the headers (lower-cased names) and the body, de-chunked.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Decodes a chunked body, or returns why it is not one.
fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF (truncated body)")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err("chunk shorter than its size (truncated body)".into());
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// Sends `request` on a new connection and reads the whole response (the connection is closed
/// by the server after it), within [`REQUEST_TIMEOUT`].
async fn send(address: &str, request: &Request) -> Result<Response, String> {
    let mut head = format!(
        "{} {}{}{} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nUser-Agent: fuzz/1\r\n",
        request.method,
        request.path,
        if request.query.is_empty() { "" } else { "?" },
        request.query
    );
    if let Some(ct) = &request.content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if let Some(accept) = &request.accept {
        head.push_str(&format!("Accept: {accept}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", request.body.len()));
    let exchange = async {
        let mut stream = TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        // The server may answer (and close) before reading a body it does not want.
        let _ = stream.write_all(&request.body).await;
        let mut raw = Vec::new();
        match stream.read_to_end(&mut raw).await {
            Ok(_) => Ok(raw),
            // A reset after a complete response (the unread request body) is not a failure.
            Err(e) if !raw.is_empty() => {
                let _ = e;
                Ok(raw)
            }
            Err(e) => Err(format!("read: {e}")),
        }
    };
    let raw = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete response within {REQUEST_TIMEOUT:?} (a hang)"))??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no response head (connection dropped: a panic?): {:?}",
                String::from_utf8_lossy(&raw)
            )
        })?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut response = Response {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    };
    if request.method == "HEAD" {
        // No body, whatever the headers say.
    } else if response.header("transfer-encoding") == Some("chunked") {
        response.body = dechunk(&response.body)?;
    } else if let Some(length) = response.header("content-length") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        if response.body.len() != length {
            return Err(format!(
                "body of {} bytes, content-length {length} (truncated: a panic?)",
                response.body.len()
            ));
        }
    }
    Ok(response)
}

/// The properties every response must have.
fn check(request: &Request, response: &Response) -> Result<(), String> {
    let status = response.status;
    let text = String::from_utf8_lossy(&response.body);
    if !(200..300).contains(&status) && !(400..600).contains(&status) {
        return Err(format!("status {status} is neither 2xx, 4xx nor 5xx"));
    }
    if status >= 400 {
        if request.method == "HEAD" {
            return Ok(());
        }
        let body: Value = serde_json::from_slice(&response.body)
            .map_err(|e| format!("error body is not JSON ({e}): {text}"))?;
        if body["kind"] != "Status" || body["code"] != status {
            return Err(format!(
                "error body is not a Status of code {status}: {body}"
            ));
        }
        // kube-apiserver's only 5xx for a client's input: a read from a resourceVersion it has
        // not reached (504 Timeout, after waiting for it).
        if status >= 500 && !(status == 504 && body["reason"] == "Timeout") {
            return Err(format!("5xx for client input: {body}"));
        }
        return Ok(());
    }
    let json = response
        .header("content-type")
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !json || request.method == "HEAD" {
        return Ok(());
    }
    if response.header("transfer-encoding") == Some("chunked") {
        // A watch: one JSON event a line.
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let event: Value = serde_json::from_str(line)
                .map_err(|e| format!("watch line is not JSON ({e}): {line}"))?;
            if !event["type"].is_string() || !event["object"].is_object() {
                return Err(format!("watch line is not an event: {line}"));
            }
        }
    } else {
        serde_json::from_slice::<Value>(&response.body)
            .map_err(|e| format!("2xx body is not JSON ({e}): {text}"))?;
    }
    Ok(())
}

fn plain(method: &str, path: &str, body: Value) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        query: String::new(),
        content_type: Some("application/json".into()),
        accept: None,
        body: body.to_string().into_bytes(),
    }
}

/// Creates the Leases, LeaseCandidates and Pods `a`, `b` and `c` of namespace `default` that do
/// not exist (all of them when `fresh`), so that most writes find an object to change.
async fn create_missing(address: &str, fresh: bool) {
    for name in ["a", "b", "c"] {
        for (path, body) in [
            (
                "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                json!({"metadata": {"name": name}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
            ),
            (
                "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates",
                json!({"metadata": {"name": name}, "spec": {"leaseName": "a", "binaryVersion": "1.33.0", "emulationVersion": "1.33.0", "strategy": "OldestEmulationVersion"}}),
            ),
            (
                "/api/v1/namespaces/default/pods",
                json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            ),
        ] {
            let response = send(address, &plain("POST", path, body)).await.unwrap();
            // An object being deleted (a finalizer) answers 409 too.
            let expected: &[u16] = if fresh { &[201] } else { &[201, 409] };
            assert!(expected.contains(&response.status), "{response:?}");
        }
    }
}

/// Objects to find, and enough writes that the resourceVersions the fuzzer picks exist.
async fn seed(address: &str) {
    create_missing(address, true).await;
    for i in 0..40 {
        let patch = Request {
            method: "PATCH".into(),
            content_type: Some("application/merge-patch+json".into()),
            ..plain(
                "PATCH",
                "/apis/coordination.k8s.io/v1/namespaces/default/leases/a",
                json!({"spec": {"leaseTransitions": i}}),
            )
        };
        assert_eq!(send(address, &patch).await.unwrap().status, 200);
    }
}

/// Arbitrary requests never drop the connection, hang, get a 5xx or a malformed answer, and the
/// server answers a plain GET after each.
#[test]
fn arbitrary_requests_are_answered() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (emulator, _client) = rt.block_on(common::start_with(EmulatorConfig {
        bookmark_interval: Duration::from_millis(50),
        max_watch_timeout: MAX_WATCH,
        ..EmulatorConfig::default()
    }));
    let address = emulator
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    rt.block_on(seed(&address));
    let health = plain("GET", "/api/v1/namespaces/default", Value::Null);
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    // (method, status) -> count, printed so that a run shows what it reached.
    let seen = std::cell::RefCell::new(std::collections::BTreeMap::<(String, u16), u32>::new());
    let result = runner.run(&requests(), |request| {
        rt.block_on(async {
            let response = send(&address, &request)
                .await
                .map_err(TestCaseError::fail)?;
            *seen
                .borrow_mut()
                .entry((request.method.clone(), response.status))
                .or_default() += 1;
            check(&request, &response)
                .map_err(|why| TestCaseError::fail(format!("{why}\nstatus {}", response.status)))?;
            let after = send(&address, &health).await.map_err(|e| {
                TestCaseError::fail(format!("server does not answer after the request: {e}"))
            })?;
            prop_assert_eq!(after.status, 200, "after the request: {:?}", after);
            if request.method == "DELETE" && response.status == 200 {
                create_missing(&address, false).await;
            }
            Ok(())
        })
    });
    eprintln!(
        "fuzz_http: {} cases in {:.1?}; (method, status): count {:?}",
        fuzz_cases(DEFAULT_CASES),
        started.elapsed(),
        seen.borrow()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    drop(emulator);
}
