//! Watched Leases and LeaseCandidates as the caches hold them: decoded without their
//! managedFields, and shared.
//!
//! Every renewal of a Lease reaches the controller as a watch event carrying the whole object,
//! managedFields included: one entry per field manager, each with a `fieldsV1` tree that serde
//! builds into `serde_json::Value`s. No step reads them, and decoding and then dropping them was
//! more than half of the cost of decoding a renewal (issue 31: `perf` at 10,000 Leases renewing
//! every 2 s). [`Cached`] decodes the same JSON into the same k8s-openapi type, skipping the
//! `managedFields` key as serde skips an unknown field (parsed, never built), so the store holds
//! what it held before, when the object was decoded whole and its managedFields then dropped.
//! A write built from a cached object carries no managedFields, which the API server reads as
//! "keep the stored ones" (an empty or absent list never clears them).
//!
//! kube-rs's reflector stores a clone of each object it applies, and hands the event's object on
//! to [`super::index`]: a deep copy of every renewal, made and dropped again, which with the
//! decoding was most of the rest. A [`Cached`] holds its object behind an `Arc`, so that clone
//! copies a pointer and the store and the event share one object.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::de::{DeserializeOwned, Error as _, Unexpected};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A `K` decoded from its JSON without `metadata.managedFields` (always `None` here), shared:
/// cloning it clones the `Arc`. As k8s-openapi's decoder, it refuses an `apiVersion` or `kind`
/// other than `K`'s, and takes a missing or null `metadata` as empty; unlike it, it accepts any
/// JSON as `managedFields`, which it never reads.
#[derive(Debug, PartialEq)]
pub struct Cached<K>(pub Arc<K>);

impl<K> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<K> std::ops::Deref for Cached<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.0
    }
}

impl<K> From<K> for Cached<K> {
    fn from(object: K) -> Self {
        Self(Arc::new(object))
    }
}

/// A kind whose objects are `metadata` plus an optional `spec`, as Lease and LeaseCandidate are:
/// what [`Cached`] needs to build one from its parts.
pub trait SpecKind: k8s_openapi::Resource + Sized {
    /// The kind's `spec`.
    type Spec: DeserializeOwned;

    /// The object of `metadata` and `spec`.
    fn from_parts(metadata: ObjectMeta, spec: Option<Self::Spec>) -> Self;
}

impl SpecKind for Lease {
    type Spec = LeaseSpec;

    fn from_parts(metadata: ObjectMeta, spec: Option<LeaseSpec>) -> Self {
        Self { metadata, spec }
    }
}

impl SpecKind for LeaseCandidate {
    type Spec = LeaseCandidateSpec;

    fn from_parts(metadata: ObjectMeta, spec: Option<LeaseCandidateSpec>) -> Self {
        Self { metadata, spec }
    }
}

/// `ObjectMeta` without `managedFields`: serde skips that key, as any other unknown key.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Meta> for ObjectMeta {
    fn from(meta: Meta) -> Self {
        Self {
            annotations: meta.annotations,
            creation_timestamp: meta.creation_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            generate_name: meta.generate_name,
            generation: meta.generation,
            labels: meta.labels,
            managed_fields: None,
            name: meta.name,
            namespace: meta.namespace,
            owner_references: meta.owner_references,
            resource_version: meta.resource_version,
            self_link: meta.self_link,
            uid: meta.uid,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object<S> {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<Meta>,
    spec: Option<S>,
}

impl<'de, K: SpecKind> Deserialize<'de> for Cached<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = Object::<K::Spec>::deserialize(deserializer)?;
        for (found, expected) in [
            (&object.api_version, K::API_VERSION),
            (&object.kind, K::KIND),
        ] {
            if let Some(found) = found.as_deref().filter(|found| *found != expected) {
                return Err(D::Error::invalid_value(Unexpected::Str(found), &expected));
            }
        }
        let metadata = object.metadata.map(ObjectMeta::from).unwrap_or_default();
        Ok(Self::from(K::from_parts(metadata, object.spec)))
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Cached<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::ListableResource> k8s_openapi::ListableResource for Cached<K> {
    const LIST_KIND: &'static str = K::LIST_KIND;
}

impl<K: k8s_openapi::Metadata<Ty = ObjectMeta> + Clone> k8s_openapi::Metadata for Cached<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        self.0.metadata()
    }

    /// The metadata of this `Cached`'s own copy of the object (copied first if shared).
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        Arc::make_mut(&mut self.0).metadata_mut()
    }
}

/// `event` with its object as a [`Cached`] one: how a test feeds objects it built to what
/// takes watch events.
#[cfg(test)]
pub(crate) fn cached_event<K>(
    event: kube::runtime::watcher::Event<K>,
) -> kube::runtime::watcher::Event<Cached<K>> {
    use kube::runtime::watcher;
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(object.into()),
        watcher::Event::Delete(object) => watcher::Event::Delete(object.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(object.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: &str = r#"{
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": "l", "namespace": "ns", "uid": "u", "resourceVersion": "42",
            "creationTimestamp": "2026-12-05T10:00:00Z",
            "annotations": {"a": "1"}, "labels": {"b": "2"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu"}],
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:holderIdentity": {}}}}]
        },
        "spec": {"holderIdentity": "h", "leaseDurationSeconds": 15,
            "renewTime": "2026-12-05T10:00:01.000001Z", "strategy": "OldestEmulationVersion"}
    }"#;

    #[test]
    fn a_lease_decodes_as_k8s_openapi_decodes_it_without_its_managed_fields() {
        let mut whole: Lease = serde_json::from_str(LEASE).unwrap();
        assert!(whole.metadata.managed_fields.is_some());
        whole.metadata.managed_fields = None;
        let cached = serde_json::from_str::<Cached<Lease>>(LEASE).unwrap();
        assert_eq!(*cached, whole);
        // The reflector's clone shares the object.
        assert!(Arc::ptr_eq(&cached.clone().0, &cached.0));
        // Serialised (as a write built from it is), no managedFields key at all: an empty list
        // would be sent otherwise, and the API server would clear the stored ones.
        let json = serde_json::to_value(&*cached).unwrap();
        assert!(json["metadata"].get("managedFields").is_none());
        assert_eq!(json["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn another_kind_or_api_version_is_refused_as_k8s_openapi_refuses_it() {
        for (from, to) in [
            (r#""kind": "Lease""#, r#""kind": "Pod""#),
            (
                r#""coordination.k8s.io/v1""#,
                r#""coordination.k8s.io/v1beta1""#,
            ),
        ] {
            let text = LEASE.replace(from, to);
            assert!(serde_json::from_str::<Lease>(&text).is_err());
            let error = serde_json::from_str::<Cached<Lease>>(&text).unwrap_err();
            assert!(error.to_string().contains("invalid value"), "{error}");
        }
    }

    #[test]
    fn missing_or_null_metadata_is_empty_and_a_bad_managed_fields_is_not_read() {
        for text in [r#"{"spec": null}"#, r#"{"metadata": null}"#] {
            let lease = serde_json::from_str::<Cached<Lease>>(text).unwrap();
            assert_eq!(*lease, Lease::default());
        }
        let lease = serde_json::from_str::<Cached<Lease>>(
            r#"{"metadata": {"name": "x", "managedFields": 7}}"#,
        )
        .unwrap();
        assert_eq!(lease.metadata.name.as_deref(), Some("x"));
        assert!(lease.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_candidate_decodes_with_its_spec() {
        let text = r#"{"metadata": {"name": "c", "managedFields": []},
            "spec": {"leaseName": "l", "binaryVersion": "1.37.0", "strategy": "OldestEmulationVersion"}}"#;
        let candidate = serde_json::from_str::<Cached<LeaseCandidate>>(text).unwrap();
        assert_eq!(candidate.spec.as_ref().unwrap().lease_name, "l");
        assert!(candidate.metadata.managed_fields.is_none());
    }
}
