//! Fuzzing what the controller reads from its watches (issue 32, part 3): arbitrary Lease,
//! LeaseCandidate and Pod objects, as a watch line carries them, through the same path the
//! controller takes, without a server.
//!
//! What is fuzzed: each object as JSON (mutated-valid objects with absent, empty, huge or
//! non-ASCII strings, negative and huge durations and counters, times at the ends of the range
//! and malformed, unknown strategies, malformed versions, unknown fields, wrong types; and plain
//! garbage), decoded as kube-rs's watcher decodes a watch line (`WatchEvent<K>`): Leases and
//! LeaseCandidates through [`wire::Cached`], as the controller's watches decode them (and each
//! checked against k8s-openapi's own decoder: whatever it decodes, `Cached` decodes to the same
//! object without managedFields), Pods slimmed as [`pods::slim_pod`] slims them; then applied
//! and deleted in any order through [`index::leases`] (its cache) and [`index::candidates`] (on
//! a reflector store); sometimes hundreds of candidates for one Lease. Then, for every Lease key enqueued, what `reconcile` reads: the Lease
//! record, the candidates of its key with invalid ones left out (`validate_lease_candidate`), the
//! process records and Pod reports of pod liveness, and one election step answered by the first
//! candidate by name.
//!
//! Why: a Lease or LeaseCandidate is written by any component holding RBAC on it, and older API
//! servers or other writers may store what kube-apiserver's validation would refuse today. The
//! controller must never panic on one, must index the candidates it holds consistently (the index
//! names exactly the cached candidates of each Lease), must leave an invalid candidate out of the
//! election with a reason (its field errors), and must never write a holder who is not a valid
//! candidate.
//!
//! Cases: [`DEFAULT_CASES`] in `cargo test`; `CONCLAVE_FUZZ_CASES=N` for a longer run, e.g.
//! `CONCLAVE_FUZZ_CASES=20000 cargo test -p conclave-controller --test fuzz_watch_objects`.

use conclave_controller::index::{self, CandidateIndex, Pings, Renewals};
use conclave_controller::own_writes::OwnWrites;
use conclave_controller::queue::WorkQueue;
use conclave_controller::{LeaseKey, pods, wire};
use conclave_core::k8s::{
    candidate_view, lease_record, pod_report, process_record, validate_lease,
    validate_lease_candidate,
};
use conclave_core::plan::Mode;
use conclave_core::pod::process_dead;
use conclave_core::step::{Outcome, Plan, Settle, StepConfig, StepInput, plan_step};
use conclave_core::time::Timestamp;
use conclave_testkit::fuzz_cases;
use futures::stream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::WatchEvent;
use kube::runtime::{reflector, watcher};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::cell::Cell;
use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Cases in a plain `cargo test`.
const DEFAULT_CASES: u32 = 2_000;

fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A plausible value, or anything at all, or the field left out (`Null` is removed).
fn field(plausible: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![30 => plausible, 1 => json_values(), 2 => Just(Value::Null)].boxed()
}

fn names() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => "c[0-5]".prop_map(Value::from),
        1 => Just(json!("")),
        1 => "[a-z0-9.-]{0,70}".prop_map(Value::from),
        1 => "\\PC{0,8}".prop_map(Value::from),
        1 => Just(json!("n".repeat(300))),
        1 => Just(json!("x".repeat(70_000))),
    ]
}

fn times() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (1_799_999_900i64..1_800_000_010).prop_map(|s| {
            json!(jiff::Timestamp::from_second(s).unwrap().to_string())
        }),
        1 => Just(json!("0001-01-01T00:00:00Z")),
        1 => Just(json!("9999-12-31T23:59:59.999999Z")),
        1 => Just(json!("-009999-01-01T00:00:00Z")),
        1 => Just(json!("2026-13-45T99:99:99Z")),
        1 => "\\PC{0,30}".prop_map(Value::from),
    ]
}

fn ints() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (1i64..40).prop_map(Value::from),
        1 => (-3i64..1).prop_map(Value::from),
        1 => any::<i32>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(json!(u64::MAX)),
    ]
}

fn versions() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => "1\\.3[0-4]\\.[0-2]".prop_map(Value::from),
        1 => Just(json!("v1.33.0")),
        1 => Just(json!("1.33.0-rc.1+meta")),
        1 => Just(json!("99999999999999999999.0.0")),
        1 => Just(json!("")),
        1 => "\\PC{0,10}".prop_map(Value::from),
    ]
}

fn strategies() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => Just(json!("OldestEmulationVersion")),
        1 => Just(json!("example.com/x")),
        1 => Just(json!("")),
        1 => "\\PC{0,12}".prop_map(Value::from),
    ]
}

/// `json!` with `Null` fields left out, so that a field is absent rather than null.
fn without_nulls(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.retain(|_, v| !v.is_null());
        for v in map.values_mut() {
            *v = without_nulls(v.take());
        }
    }
    value
}

fn metadata(namespace: &'static str) -> impl Strategy<Value = Value> {
    (
        field(names()),
        field(prop_oneof![8 => Just(json!(namespace)), 1 => Just(json!("other"))]),
        field("[0-9]{1,4}".prop_map(Value::from)),
        field(times()),
        proptest::option::weighted(
            0.2,
            proptest::collection::btree_map("\\PC{0,12}", "\\PC{0,12}", 0..3),
        ),
        proptest::option::weighted(
            0.3,
            (
                field(names()),
                field("[a-f0-9-]{0,12}".prop_map(Value::from)),
            ),
        ),
        proptest::option::weighted(
            0.3,
            (
                field(times()),
                field("(containerd|docker)://[a-f0-9]{0,12}".prop_map(Value::from)),
            ),
        ),
    )
        .prop_map(|(name, ns, rv, created, annotations, owner, container)| {
            let mut meta = json!({
                "name": name, "namespace": ns, "resourceVersion": rv,
                "creationTimestamp": created,
                "managedFields": [{"manager": "m", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:holderIdentity": {}}}}],
            });
            if let Some(labels) = &annotations {
                meta["labels"] = json!(labels);
            }
            let mut notes = json!(annotations.unwrap_or_default());
            if let Some((pod, uid)) = owner {
                meta["ownerReferences"] = json!([
                    {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}
                ]);
            }
            if let Some((started, id)) = container {
                notes["coordination.conclave.dev/container"] = json!("app");
                notes["coordination.conclave.dev/container-id"] = id;
                notes["coordination.conclave.dev/process-started"] = started;
            }
            meta["annotations"] = notes;
            meta
        })
}

fn leases() -> BoxedStrategy<Value> {
    (
        metadata("ns"),
        field(names()),
        field(ints()),
        field(times()),
        field(times()),
        field(ints()),
        field(strategies()),
        proptest::option::weighted(0.3, field(names())),
    )
        .prop_map(
            |(meta, holder, duration, acquire, renew, transitions, strategy, preferred)| {
                without_nulls(json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                    "spec": {
                        "holderIdentity": holder, "leaseDurationSeconds": duration,
                        "acquireTime": acquire, "renewTime": renew,
                        "leaseTransitions": transitions, "strategy": strategy,
                        "preferredHolder": preferred.unwrap_or(Value::Null),
                    }
                }))
            },
        )
        .boxed()
}

fn candidates() -> BoxedStrategy<Value> {
    (
        metadata("ns"),
        field(prop_oneof![8 => Just(json!("lease")), 1 => names()]),
        field(versions()),
        field(versions()),
        field(times()),
        proptest::option::weighted(0.2, field(times())),
        field(strategies()),
    )
        .prop_map(|(meta, lease, binary, emulation, renew, ping, strategy)| {
            without_nulls(json!({
                "apiVersion": "coordination.k8s.io/v1beta1", "kind": "LeaseCandidate",
                "metadata": meta,
                "spec": {
                    "leaseName": lease, "binaryVersion": binary,
                    "emulationVersion": emulation, "renewTime": renew,
                    "pingTime": ping.unwrap_or(Value::Null), "strategy": strategy,
                }
            }))
        })
        .boxed()
}

fn pods_json() -> BoxedStrategy<Value> {
    (
        metadata("ns"),
        field(prop_oneof![Just(json!("app")), names()]),
        field("(containerd|docker)://[a-f0-9]{0,12}".prop_map(Value::from)),
        field(times()),
        any::<bool>(),
        field(ints()),
    )
        .prop_map(|(meta, container, id, started, terminated, restarts)| {
            let state = if terminated {
                json!({"terminated": {"exitCode": 1, "startedAt": started, "containerID": id}})
            } else {
                json!({"running": {"startedAt": started}})
            };
            without_nulls(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "status": {"containerStatuses": [{
                    "name": container, "containerID": id, "state": state,
                    "lastState": {"terminated": {"exitCode": 0, "containerID": id}},
                    "restartCount": restarts, "ready": true, "image": "i", "imageID": "i",
                }]},
            }))
        })
        .boxed()
}

/// An object of one kind, with now and then an unknown field, a wrong `kind`, or nothing of it
/// at all (garbage or a truncated rendering).
fn lines(object: BoxedStrategy<Value>) -> impl Strategy<Value = String> {
    prop_oneof![
        10 => (object.clone(), proptest::option::weighted(0.2, ("[a-zA-Z]{1,10}", json_values())))
            .prop_map(|(mut o, unknown)| {
                if let Some((key, value)) = unknown {
                    o["spec"][key] = value;
                }
                o.to_string()
            }),
        1 => (object, any::<prop::sample::Index>()).prop_map(|(o, cut)| {
            let text = o.to_string();
            text.chars().take(cut.index(text.len().max(1))).collect()
        }),
        1 => json_values().prop_map(|v| v.to_string()),
    ]
}

/// A watch event of an object: applied (added or modified) or deleted.
#[derive(Debug, Clone)]
struct Line {
    delete: bool,
    object: String,
}

fn events(object: BoxedStrategy<Value>) -> impl Strategy<Value = Line> {
    (proptest::bool::weighted(0.15), lines(object))
        .prop_map(|(delete, object)| Line { delete, object })
}

/// Hundreds of valid-looking candidates of one Lease, now and then.
fn crowds() -> impl Strategy<Value = Vec<Line>> {
    prop_oneof![
        8 => Just(Vec::new()),
        1 => (200usize..600).prop_map(|n| {
            (0..n)
                .map(|i| Line {
                    delete: false,
                    object: json!({
                        "metadata": {"name": format!("crowd-{i}"), "namespace": "ns"},
                        "spec": {
                            "leaseName": "lease", "binaryVersion": "1.33.0",
                            "emulationVersion": format!("1.{}.0", 30 + i % 4),
                            "strategy": "OldestEmulationVersion",
                            "renewTime": "2027-01-15T08:00:00.000000Z",
                        }
                    })
                    .to_string(),
                })
                .collect()
        }),
    ]
}

#[derive(Debug, Clone)]
struct Batch {
    leases: Vec<Line>,
    candidates: Vec<Line>,
    pods: Vec<Line>,
}

fn batches() -> impl Strategy<Value = Batch> {
    (
        proptest::collection::vec(events(leases()), 0..4),
        proptest::collection::vec(events(candidates()), 0..10),
        crowds(),
        proptest::collection::vec(events(pods_json()), 0..4),
    )
        .prop_map(|(leases, mut candidates, crowd, pods)| {
            candidates.extend(crowd);
            Batch {
                leases,
                candidates,
                pods,
            }
        })
}

/// Decodes a watch line as kube-rs's watcher does; an undecodable one is an error the watcher
/// reports (and the controller logs), never an object.
///
/// An object without `metadata.name` is left out too: kube-apiserver never serves one, and
/// kube-rs's reflector (kube-runtime 5.0's `ObjectRef::from_obj`) panics on it
/// (`.metadata.name missing`), before the controller's code sees it.
fn decode<K: serde::de::DeserializeOwned + kube::Resource>(
    line: &Line,
) -> Result<Option<watcher::Event<K>>, String> {
    let kind = if line.delete { "DELETED" } else { "MODIFIED" };
    let text = format!(r#"{{"type":"{kind}","object":{}}}"#, line.object);
    match serde_json::from_str::<WatchEvent<K>>(&text) {
        Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o))
            if o.meta().name.is_none() =>
        {
            Ok(None)
        }
        Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => Ok(Some(watcher::Event::Apply(o))),
        Ok(WatchEvent::Deleted(o)) => Ok(Some(watcher::Event::Delete(o))),
        Ok(other) => Err(format!("not an object event: {other:?}")),
        // The watcher reports a line it cannot decode as an error, which the controller logs.
        Err(_) => Ok(None),
    }
}

/// `line` decoded as the controller's watches decode it ([`wire::Cached`]), after checking it
/// against k8s-openapi's decoder: what that decodes, `Cached` decodes to the same object without
/// managedFields; what `Cached` refuses, that refuses too (`Cached` only accepts more: any JSON as
/// managedFields, which it never reads).
fn decode_slim<K>(line: &Line) -> Result<Option<watcher::Event<wire::Cached<K>>>, String>
where
    K: wire::SpecKind
        + serde::de::DeserializeOwned
        + kube::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Clone
        + PartialEq
        + std::fmt::Debug,
{
    let whole = decode::<K>(line)?.and_then(|event| match event {
        watcher::Event::Apply(mut o) | watcher::Event::Delete(mut o) => {
            o.meta_mut().managed_fields = None;
            Some(o)
        }
        _ => None,
    });
    let cached = decode::<wire::Cached<K>>(line)?;
    let cached_object = cached.as_ref().and_then(|event| match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => Some(K::clone(o)),
        _ => None,
    });
    match (whole, cached_object) {
        (Some(whole), Some(cached)) if whole != cached => Err(format!(
            "Cached decoded {cached:?}, k8s-openapi {whole:?}, from {}",
            line.object
        )),
        (Some(_), None) => Err(format!(
            "Cached refused what k8s-openapi decodes: {}",
            line.object
        )),
        _ => Ok(cached),
    }
}

/// The time the fuzzed objects cluster around (2027-01-15T08:00:00Z).
const NOW: i64 = 1_800_000_000;

/// A relist first (as at start), then `events` as a watch delivers them.
fn watch_stream<K>(
    events: Vec<watcher::Event<K>>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> {
    let mut all = vec![watcher::Event::Init, watcher::Event::InitDone];
    all.extend(events);
    stream::iter(all.into_iter().map(Ok))
}

/// What a run reached, printed at its end.
#[derive(Debug, Default)]
struct Reached {
    undecodable: Cell<u32>,
    lease_keys: Cell<u32>,
    valid_candidates: Cell<u32>,
    invalid_candidates: Cell<u32>,
    elections: Cell<u32>,
    writes: Cell<u32>,
}

fn bump(counter: &Cell<u32>, by: usize) {
    counter.set(counter.get() + u32::try_from(by).unwrap_or(u32::MAX));
}

fn check(
    batch: &Batch,
    rt: &tokio::runtime::Runtime,
    reached: &Reached,
) -> Result<(), TestCaseError> {
    let total = batch.leases.len() + batch.candidates.len() + batch.pods.len();
    let mut lease_events = Vec::new();
    for line in &batch.leases {
        if let Some(event) = decode_slim::<Lease>(line).map_err(TestCaseError::fail)? {
            lease_events.push(event);
        }
    }
    let mut candidate_events = Vec::new();
    for line in &batch.candidates {
        if let Some(event) = decode_slim::<LeaseCandidate>(line).map_err(TestCaseError::fail)? {
            candidate_events.push(event);
        }
    }
    let mut pod_objects = Vec::new();
    for line in &batch.pods {
        if let Some(watcher::Event::Apply(mut pod)) =
            decode::<Pod>(line).map_err(TestCaseError::fail)?
        {
            pods::slim_pod(&mut pod);
            pod_objects.push(pod);
        }
    }

    bump(
        &reached.undecodable,
        total - lease_events.len() - candidate_events.len() - pod_objects.len(),
    );
    let (candidate_store, candidate_writer) = reflector::store();
    let own_writes = OwnWrites::default();
    let renewals = Renewals::default();
    let index_state = Mutex::new(CandidateIndex::default());
    let pings = Pings::new(prometheus_client::metrics::counter::Counter::default());
    let queue = WorkQueue::default();
    rt.block_on(async {
        index::leases(
            watch_stream(lease_events),
            None,
            &own_writes,
            &renewals,
            &queue,
            &tokio::sync::watch::Sender::new(false),
        )
        .await;
        index::candidates(
            reflector::reflector(candidate_writer, watch_stream(candidate_events)),
            &candidate_store,
            &index_state,
            &pings,
            &queue,
        )
        .await;
    });

    let mut keys = BTreeSet::new();
    rt.block_on(async {
        while !queue.is_empty() {
            let item = queue.next().await.expect("queue open");
            keys.insert(item.key.clone());
            queue.done(item);
        }
    });
    let cached = candidate_store.state();
    let now = Timestamp::from_secs(NOW);
    bump(&reached.lease_keys, keys.len());
    for key in &keys {
        // The index names exactly the cached candidates of the Lease.
        let indexed: HashSet<String> = index_state.lock().unwrap().names(key).into_iter().collect();
        let of_key: Vec<_> = cached
            .iter()
            .filter(|c| LeaseKey::of_candidate(c).as_ref() == Some(key))
            .collect();
        let in_store: HashSet<String> = of_key
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        prop_assert_eq!(
            &indexed,
            &in_store,
            "the index differs from the cache for {}",
            key
        );

        // What `reconcile` reads: the Lease record, and the valid candidates.
        let lease = renewals.lease(key);
        let record = lease.as_deref().map(|lease| {
            let _ = validate_lease(lease);
            let mut record = lease_record(lease);
            renewals.annotate(key, &mut record, now);
            record
        });
        let mut valid = Vec::new();
        let mut invalid = HashSet::new();
        for candidate in &of_key {
            let errors = validate_lease_candidate(candidate);
            if errors.is_empty() {
                valid.push(candidate_view(candidate));
            } else {
                for error in &errors {
                    prop_assert!(
                        !error.to_string().is_empty(),
                        "a field error without a reason"
                    );
                }
                invalid.insert(candidate.metadata.name.clone().unwrap_or_default());
            }
            // Pod liveness reads the candidate's process record against each Pod.
            if let Some(process) = process_record(candidate) {
                for pod in &pod_objects {
                    let _ = process_dead(&process, &pod_report(pod));
                }
            }
        }
        bump(&reached.valid_candidates, valid.len());
        bump(&reached.invalid_candidates, invalid.len());
        let has_strategy = |s: &str| s == "OldestEmulationVersion";
        let plan = plan_step(&StepInput {
            namespace: &key.namespace,
            name: &key.name,
            lease: record.as_ref(),
            candidates: &valid,
            now,
            config: StepConfig {
                ack_window: Duration::from_secs(5),
                candidate_gc_after: Duration::from_secs(1_800),
                lease_duration_seconds: 15,
                mode: Mode::All,
                settle: Settle::DEFAULT,
            },
            builtin_active: false,
            has_strategy: &has_strategy,
            arrivals: index_state.lock().unwrap().arrivals(key),
            deleted_while_held_until: None,
            sitting_out: &[],
        });
        if let Plan::Decide(election) = &plan {
            bump(&reached.elections, 1);
            let first = election
                .request()
                .candidates
                .iter()
                .map(|c| c.name.clone())
                .min();
            if let Outcome::Write { winner, .. } = election.apply_answer(first.as_deref()) {
                bump(&reached.writes, 1);
                prop_assert!(
                    valid.iter().any(|c| c.name == winner),
                    "wrote {winner:?}, not a valid candidate"
                );
            }
        }
    }
    Ok(())
}

/// Arbitrary objects from the watches never panic the controller's index and step, keep the
/// index equal to the cache, and never get an invalid candidate elected.
#[test]
fn arbitrary_watched_objects_are_indexed_or_left_out() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let reached = Reached::default();
    let result = runner.run(&batches(), |batch| check(&batch, &rt, &reached));
    eprintln!(
        "arbitrary_watched_objects_are_indexed_or_left_out: {} cases in {:.1?}; {reached:?}",
        fuzz_cases(DEFAULT_CASES),
        started.elapsed()
    );
    result.unwrap();
}
