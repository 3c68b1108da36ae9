//! Conversions between k8s-openapi objects and the core's plain data, and validation of whole
//! objects. Needs the `k8s` feature (std).

use crate::lease::{ELECTED_BY_ANNOTATION, ELECTED_BY_VALUE, LeaseRecord};
use crate::pod::{
    CONTAINER_ANNOTATION, CONTAINER_ID_ANNOTATION, ContainerReport, MIRROR_ANNOTATION,
    POD_ANNOTATION, POD_UID_ANNOTATION, PROCESS_STARTED_ANNOTATION, PodReport, ProcessRecord,
};
use crate::request::CandidateView;
use crate::time::Timestamp;
use crate::validation::{self, FieldError, LeaseCandidateFields, LeaseFields, MetaFields};
use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff;
use std::collections::BTreeMap;

/// Converts a Kubernetes timestamp to a core [`Timestamp`].
#[must_use]
pub fn timestamp(at: jiff::Timestamp) -> Timestamp {
    Timestamp::from_micros(at.as_microsecond())
}

/// The time now, as a core [`Timestamp`]: the one clock read of every host crate, so the
/// controller, `conclave status` and the demo compare against the same notion of now.
///
/// It reads like wall-clock time (microseconds since the Unix epoch, as `renewTime` and
/// `pingTime` are written) but advances on the monotonic clock: the wall clock is read once, at
/// the first call, and every later reading adds the monotonic time elapsed since. A step of the
/// system clock (an administrator's `date -s`, a first NTP sync after boot) then moves no expiry,
/// window or timer: read from the wall clock every time, a forward step expired every Lease early
/// and a backward one kept dead holders (issue 34, finding 2). Rate corrections (NTP slewing)
/// apply to the monotonic clock too, so readings keep pace with real time.
#[must_use]
pub fn now() -> Timestamp {
    static ANCHOR: std::sync::OnceLock<MonotonicWallClock> = std::sync::OnceLock::new();
    ANCHOR
        .get_or_init(MonotonicWallClock::start)
        .at(std::time::Instant::now())
}

/// Wall-clock time read once and advanced on the monotonic clock ([`now`]).
#[derive(Debug, Clone, Copy)]
struct MonotonicWallClock {
    started: std::time::Instant,
    wall_at_start: Timestamp,
}

impl MonotonicWallClock {
    fn start() -> Self {
        let micros =
            |since: std::time::Duration| i64::try_from(since.as_micros()).unwrap_or(i64::MAX);
        let wall_at_start = match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        {
            Ok(since) => Timestamp::from_micros(micros(since)),
            Err(before) => Timestamp::from_micros(-micros(before.duration())),
        };
        Self {
            started: std::time::Instant::now(),
            wall_at_start,
        }
    }

    /// The reading at the monotonic instant `instant` (not before the start).
    fn at(self, instant: std::time::Instant) -> Timestamp {
        self.wall_at_start + instant.saturating_duration_since(self.started)
    }
}

/// Converts a core [`Timestamp`] to a `MicroTime` for writing into an object.
#[must_use]
pub fn micro_time(at: Timestamp) -> MicroTime {
    MicroTime(jiff::Timestamp::from_microsecond(at.as_micros()).unwrap_or(jiff::Timestamp::MAX))
}

fn micro(at: Option<&MicroTime>) -> Option<Timestamp> {
    at.map(|t| timestamp(t.0))
}

fn created(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp
        .as_ref()
        .map(|Time(t)| timestamp(*t))
}

fn pairs(map: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    map.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// The core view of a Lease.
#[must_use]
pub fn lease_record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        namespace: lease.metadata.namespace.clone().unwrap_or_default(),
        name: lease.metadata.name.clone().unwrap_or_default(),
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder_identity: spec.holder_identity,
        preferred_holder: spec.preferred_holder,
        strategy: spec.strategy,
        lease_duration_seconds: spec.lease_duration_seconds,
        renew_time: micro(spec.renew_time.as_ref()),
        acquire_time: micro(spec.acquire_time.as_ref()),
        lease_transitions: spec.lease_transitions,
        elected_by_conclave: elected_by_conclave_of(&lease.metadata),
        observed_renewal: None,
        renew_period: None,
        released_by: None,
        released_for: None,
        preemption_held_since: None,
        sitting_out: Vec::new(),
        holder_dead: false,
    }
}

/// Whether `record`, a [`lease_record`] of an earlier version of the Lease with its
/// `resourceVersion` and `renewTime` cleared and nothing else changed, carries what
/// [`lease_record`] of `lease` would but those two: whether `lease` only renewed it. Compared in
/// place, with nothing copied, for the controller's check of every renewal it watches (thousands
/// a second at scale). Every field is named, so a field added to [`LeaseRecord`] is compared here
/// too, or deliberately not.
#[must_use]
pub fn same_but_renewal(record: &LeaseRecord, lease: &Lease) -> bool {
    let LeaseRecord {
        namespace,
        name,
        resource_version: _,
        holder_identity,
        preferred_holder,
        strategy,
        lease_duration_seconds,
        renew_time: _,
        acquire_time,
        lease_transitions,
        elected_by_conclave,
        observed_renewal,
        renew_period,
        released_by,
        released_for,
        preemption_held_since,
        sitting_out,
        holder_dead,
    } = record;
    let meta = &lease.metadata;
    let spec = lease.spec.as_ref();
    let field = |get: fn(&k8s_openapi::api::coordination::v1::LeaseSpec) -> Option<&String>| {
        spec.and_then(get).map(String::as_str)
    };
    *namespace == meta.namespace.as_deref().unwrap_or_default()
        && *name == meta.name.as_deref().unwrap_or_default()
        && holder_identity.as_deref() == field(|s| s.holder_identity.as_ref())
        && preferred_holder.as_deref() == field(|s| s.preferred_holder.as_ref())
        && strategy.as_deref() == field(|s| s.strategy.as_ref())
        && *lease_duration_seconds == spec.and_then(|s| s.lease_duration_seconds)
        && *acquire_time == micro(spec.and_then(|s| s.acquire_time.as_ref()))
        && *lease_transitions == spec.and_then(|s| s.lease_transitions)
        && *elected_by_conclave == elected_by_conclave_of(meta)
        // What lease_record leaves unset: the controller annotates a copy.
        && observed_renewal.is_none()
        && renew_period.is_none()
        && released_by.is_none()
        && released_for.is_none()
        && preemption_held_since.is_none()
        && sitting_out.is_empty()
        && !holder_dead
}

/// A watched or listed Lease read in place by the controller's memory of it: a renewal that
/// decides nothing builds no record of the Lease (issue 31).
impl crate::memory::SeenLease for Lease {
    fn holder_identity(&self) -> Option<&str> {
        self.spec.as_ref()?.holder_identity.as_deref()
    }

    fn renew_time(&self) -> Option<Timestamp> {
        micro(self.spec.as_ref()?.renew_time.as_ref())
    }

    fn preferred_holder(&self) -> Option<&str> {
        self.spec.as_ref()?.preferred_holder.as_deref()
    }

    fn lease_duration(&self) -> Option<core::time::Duration> {
        crate::memory::duration_of(self.spec.as_ref()?.lease_duration_seconds)
    }

    fn same_but_renewal(&self, decided_by: &LeaseRecord) -> bool {
        same_but_renewal(decided_by, self)
    }

    fn record(&self) -> LeaseRecord {
        lease_record(self)
    }
}

/// Whether the Lease carries Conclave's elected-by annotation ([`ELECTED_BY_ANNOTATION`]).
fn elected_by_conclave_of(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ELECTED_BY_ANNOTATION))
        .is_some_and(|v| v == ELECTED_BY_VALUE)
}

/// The core view of a LeaseCandidate.
#[must_use]
pub fn candidate_view(candidate: &LeaseCandidate) -> CandidateView {
    let spec = candidate.spec.clone().unwrap_or_default();
    CandidateView {
        name: candidate.metadata.name.clone().unwrap_or_default(),
        binary_version: spec.binary_version,
        emulation_version: spec.emulation_version.unwrap_or_default(),
        strategy: spec.strategy,
        creation_time: created(&candidate.metadata),
        renew_time: micro(spec.renew_time.as_ref()),
        ping_time: micro(spec.ping_time.as_ref()),
        labels: pairs(candidate.metadata.labels.as_ref()),
        annotations: pairs(candidate.metadata.annotations.as_ref()),
    }
}

/// What a LeaseCandidate records about the process behind it: its Pod (the ownerReference of
/// kind `Pod`, `apiVersion: v1`, else the annotations [`POD_ANNOTATION`] and
/// [`POD_UID_ANNOTATION`] a process in a static pod writes) and the container annotations of
/// [`crate::pod`]. `None` when it names no Pod. A malformed annotation is left out, never an
/// error: the record then only proves less.
#[must_use]
pub fn process_record(candidate: &LeaseCandidate) -> Option<ProcessRecord> {
    let annotation = |key: &str| {
        candidate
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let owner = candidate
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Pod" && o.api_version == "v1" && !o.name.is_empty());
    let (pod_name, pod_uid) = match owner {
        Some(owner) => (owner.name.clone(), owner.uid.clone()),
        None => (
            annotation(POD_ANNOTATION)?,
            annotation(POD_UID_ANNOTATION).unwrap_or_default(),
        ),
    };
    Some(ProcessRecord {
        pod_name,
        pod_uid,
        container: annotation(CONTAINER_ANNOTATION),
        container_id: annotation(CONTAINER_ID_ANNOTATION),
        started: annotation(PROCESS_STARTED_ANNOTATION)
            .and_then(|v| v.parse::<jiff::Timestamp>().ok())
            .map(timestamp),
    })
}

/// The liveness view of a Pod: its UID, the [`MIRROR_ANNOTATION`] of a static pod's mirror, and
/// `status.containerStatuses[]` (a Pod without status has none).
#[must_use]
pub fn pod_report(pod: &Pod) -> PodReport {
    let containers = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| {
            let state = c.state.as_ref();
            let terminated = state.and_then(|s| s.terminated.as_ref());
            let started_at = state
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .or_else(|| terminated.and_then(|t| t.started_at.as_ref()))
                .map(|t| timestamp(t.0));
            ContainerReport {
                name: c.name.clone(),
                container_id: c.container_id.clone().filter(|id| !id.is_empty()),
                terminated: terminated.is_some(),
                started_at,
                last_terminated_id: c
                    .last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .and_then(|t| t.container_id.clone())
                    .filter(|id| !id.is_empty()),
            }
        })
        .collect();
    PodReport {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        mirror_of: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .filter(|v| !v.is_empty())
            .cloned(),
        containers,
    }
}

fn with_meta<T>(meta: &ObjectMeta, f: impl FnOnce(&MetaFields<'_>) -> T) -> T {
    let labels: Vec<(&str, &str)> = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let annotation_keys: Vec<&str> = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .collect();
    f(&MetaFields {
        name: meta.name.as_deref().unwrap_or_default(),
        namespace: meta.namespace.as_deref().unwrap_or_default(),
        labels: &labels,
        annotation_keys: &annotation_keys,
    })
}

fn candidate_fields(candidate: &LeaseCandidate) -> LeaseCandidateFields<'_> {
    candidate
        .spec
        .as_ref()
        .map(|spec| LeaseCandidateFields {
            lease_name: &spec.lease_name,
            binary_version: &spec.binary_version,
            emulation_version: spec.emulation_version.as_deref().unwrap_or_default(),
            strategy: &spec.strategy,
        })
        .unwrap_or_default()
}

/// Validates a LeaseCandidate as kube-apiserver does on create.
#[must_use]
pub fn validate_lease_candidate(candidate: &LeaseCandidate) -> Vec<FieldError> {
    with_meta(&candidate.metadata, |meta| {
        validation::validate_lease_candidate(meta, &candidate_fields(candidate))
    })
}

/// Validates a LeaseCandidate update as kube-apiserver does.
#[must_use]
pub fn validate_lease_candidate_update(
    old: &LeaseCandidate,
    new: &LeaseCandidate,
) -> Vec<FieldError> {
    with_meta(&new.metadata, |meta| {
        validation::validate_lease_candidate_update(
            meta,
            &candidate_fields(old),
            &candidate_fields(new),
        )
    })
}

/// Validates a Lease as kube-apiserver does (create and update).
#[must_use]
pub fn validate_lease(lease: &Lease) -> Vec<FieldError> {
    let spec = lease.spec.clone().unwrap_or_default();
    with_meta(&lease.metadata, |meta| {
        validation::validate_lease(
            meta,
            &LeaseFields {
                lease_duration_seconds: spec.lease_duration_seconds,
                lease_transitions: spec.lease_transitions,
                strategy: spec.strategy.as_deref(),
                preferred_holder: spec.preferred_holder.as_deref(),
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec;

    /// `same_but_renewal` answers what comparing whole records would, without building one: a
    /// renewal (resourceVersion, renewTime) changes nothing, any other field does, an absent
    /// field equals no field, and a record the controller annotated is never the same.
    #[test]
    fn only_a_renewal_is_the_same_but_renewal() {
        let base: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "l", "namespace": "ns", "resourceVersion": "7",
                "annotations": {ELECTED_BY_ANNOTATION: ELECTED_BY_VALUE}
            },
            "spec": {
                "holderIdentity": "a", "leaseDurationSeconds": 15, "strategy": "S",
                "acquireTime": "2026-12-05T10:00:00.000000Z",
                "renewTime": "2026-12-05T10:00:02.000000Z", "leaseTransitions": 3
            }
        }))
        .unwrap();
        let whole = |record: &LeaseRecord, lease: &Lease| {
            let mut of_lease = lease_record(lease);
            of_lease.resource_version.clear();
            of_lease.renew_time = None;
            *record == of_lease
        };
        let mut record = lease_record(&base);
        record.resource_version.clear();
        record.renew_time = None;
        type Edit = fn(&mut Lease);
        let edits: [(&str, Edit); 14] = [
            ("nothing", |_| {}),
            ("a renewal", |l| {
                l.metadata.resource_version = Some("8".into());
                let spec = l.spec.as_mut().unwrap();
                spec.renew_time = Some(MicroTime(
                    jiff::Timestamp::from_second(1_800_000_000).unwrap(),
                ));
            }),
            ("another holder", |l| {
                l.spec.as_mut().unwrap().holder_identity = Some("b".into())
            }),
            ("released", |l| {
                l.spec.as_mut().unwrap().holder_identity = None
            }),
            ("preferredHolder", |l| {
                l.spec.as_mut().unwrap().preferred_holder = Some("b".into())
            }),
            ("strategy", |l| l.spec.as_mut().unwrap().strategy = None),
            ("duration", |l| {
                l.spec.as_mut().unwrap().lease_duration_seconds = Some(10)
            }),
            ("acquireTime", |l| {
                l.spec.as_mut().unwrap().acquire_time = None
            }),
            ("transitions", |l| {
                l.spec.as_mut().unwrap().lease_transitions = Some(4)
            }),
            ("no spec", |l| l.spec = None),
            ("name", |l| l.metadata.name = Some("m".into())),
            ("namespace", |l| l.metadata.namespace = None),
            ("not elected by Conclave", |l| l.metadata.annotations = None),
            ("another annotation only", |l| {
                l.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert("x".into(), "y".into());
            }),
        ];
        for (what, edit) in edits {
            let mut lease = base.clone();
            edit(&mut lease);
            let expected = matches!(what, "nothing" | "a renewal" | "another annotation only");
            assert_eq!(whole(&record, &lease), expected, "{what}: the reference");
            assert_eq!(same_but_renewal(&record, &lease), expected, "{what}");
        }
        let mut annotated = record.clone();
        annotated.observed_renewal = Some(Timestamp::from_secs(1));
        assert!(!same_but_renewal(&annotated, &base), "annotated");
    }

    /// A Pod and a candidate from JSON as the API server serves them; malformed or missing parts
    /// only prove less, and never panic.
    #[test]
    fn pods_and_process_records_read_from_json_without_panicking() {
        let candidate: LeaseCandidate = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0-1a2b3c4d", "namespace": "ns",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"},
                    {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "uid": "u1"}
                ],
                "annotations": {
                    CONTAINER_ANNOTATION: "app",
                    CONTAINER_ID_ANNOTATION: " abc ",
                    PROCESS_STARTED_ANNOTATION: "not a time"
                }
            },
            "spec": {"leaseName": "l", "binaryVersion": "1.33.0", "strategy": "S"}
        }))
        .unwrap();
        assert_eq!(
            process_record(&candidate),
            Some(ProcessRecord {
                pod_name: "web-0".into(),
                pod_uid: "u1".into(),
                container: Some("app".into()),
                container_id: Some("abc".into()),
                started: None,
            })
        );
        let mut bare = candidate.clone();
        bare.metadata.owner_references = None;
        assert_eq!(process_record(&bare), None);
        // A static pod's process names its Pod in annotations (no ownerReference: its UID names
        // no API object).
        let mut static_pod = bare.clone();
        let annotations = static_pod.metadata.annotations.get_or_insert_default();
        annotations.insert(POD_ANNOTATION.into(), "kube-scheduler-node-1".into());
        annotations.insert(POD_UID_ANNOTATION.into(), "0f0f".into());
        let record = process_record(&static_pod).expect("named in annotations");
        assert_eq!(
            (record.pod_name.as_str(), record.pod_uid.as_str()),
            ("kube-scheduler-node-1", "0f0f")
        );

        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "u1"},
            "status": {"containerStatuses": [{
                "name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
                "containerID": "containerd://new",
                "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}},
                "lastState": {"terminated": {"exitCode": 137, "containerID": "containerd://abc"}}
            }]}
        }))
        .unwrap();
        let PodReport {
            uid,
            mirror_of,
            containers,
        } = pod_report(&pod);
        assert_eq!(uid, "u1");
        assert_eq!(mirror_of, None);
        assert_eq!(
            containers[0].container_id.as_deref(),
            Some("containerd://new")
        );
        assert_eq!(
            containers[0].last_terminated_id.as_deref(),
            Some("containerd://abc")
        );
        assert!(!containers[0].terminated);
        assert!(containers[0].started_at.is_some());
        assert_eq!(pod_report(&Pod::default()), PodReport::default());
        let mut mirror = pod.clone();
        mirror.metadata.annotations =
            Some([(String::from(MIRROR_ANNOTATION), String::from("0f0f"))].into());
        assert_eq!(pod_report(&mirror).mirror_of.as_deref(), Some("0f0f"));
    }

    /// The clock advances with the monotonic clock from one wall-clock reading: whatever the
    /// system clock does after the start, a reading 5 s later is 5 s later.
    #[test]
    fn the_clock_advances_on_the_monotonic_clock_from_one_wall_reading() {
        let clock = MonotonicWallClock {
            started: std::time::Instant::now(),
            wall_at_start: Timestamp::from_secs(1_000),
        };
        let later = clock.started + std::time::Duration::from_secs(5);
        assert_eq!(clock.at(later), Timestamp::from_secs(1_005));
        assert_eq!(clock.at(clock.started), Timestamp::from_secs(1_000));
        let first = now();
        assert!(now() >= first, "never goes back");
    }

    #[test]
    fn timestamps_round_trip_at_microsecond_precision() {
        let at = Timestamp::from_micros(1_764_500_000_123_456);
        assert_eq!(timestamp(micro_time(at).0), at);
    }

    #[test]
    fn candidate_view_and_validation_read_the_object() {
        let candidate = LeaseCandidate {
            metadata: ObjectMeta {
                name: Some("node_1".into()),
                namespace: Some("kube-system".into()),
                labels: Some(
                    [(
                        String::from("topology.kubernetes.io/zone"),
                        String::from("a"),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(LeaseCandidateSpec {
                lease_name: "kube-scheduler".into(),
                binary_version: "1.30.0".into(),
                emulation_version: Some("1.31.0".into()),
                strategy: "OldestEmulationVersion".into(),
                ..Default::default()
            }),
        };
        let view = candidate_view(&candidate);
        assert_eq!(view.label("topology.kubernetes.io/zone"), Some("a"));
        let errors = validate_lease_candidate(&candidate);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "spec.binaryVersion");
    }
}
