//! Conversions between k8s-openapi objects and the core's plain data, and validation of whole
//! objects. Needs the `k8s` feature (std).

use crate::lease::{ELECTED_BY_ANNOTATION, ELECTED_BY_VALUE, LeaseRecord};
use crate::pod::{
    CONTAINER_ANNOTATION, CONTAINER_ID_ANNOTATION, ContainerReport, PROCESS_STARTED_ANNOTATION,
    PodReport, ProcessRecord,
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
        elected_by_conclave: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ELECTED_BY_ANNOTATION))
            .is_some_and(|v| v == ELECTED_BY_VALUE),
        observed_renewal: None,
        renew_period: None,
        released_by: None,
        released_for: None,
        preemption_held_since: None,
        sitting_out: Vec::new(),
        holder_dead: false,
    }
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
/// kind `Pod`, `apiVersion: v1`) and the container annotations of [`crate::pod`]. `None` when it
/// names no Pod. A malformed annotation is left out, never an error: the record then only proves
/// less.
#[must_use]
pub fn process_record(candidate: &LeaseCandidate) -> Option<ProcessRecord> {
    let owner = candidate
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Pod" && o.api_version == "v1" && !o.name.is_empty())?;
    let annotation = |key: &str| {
        candidate
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    Some(ProcessRecord {
        pod_name: owner.name.clone(),
        pod_uid: owner.uid.clone(),
        container: annotation(CONTAINER_ANNOTATION),
        container_id: annotation(CONTAINER_ID_ANNOTATION),
        started: annotation(PROCESS_STARTED_ANNOTATION)
            .and_then(|v| v.parse::<jiff::Timestamp>().ok())
            .map(timestamp),
    })
}

/// The liveness view of a Pod: its UID and `status.containerStatuses[]` (a Pod without status
/// has none).
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
    PodReport::Present {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
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
        let PodReport::Present { uid, containers } = pod_report(&pod) else {
            panic!("present");
        };
        assert_eq!(uid, "u1");
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
        assert_eq!(
            pod_report(&Pod::default()),
            PodReport::Present {
                uid: String::new(),
                containers: Vec::new()
            }
        );
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
