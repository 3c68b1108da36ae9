//! Typed keys: a Lease is named by a [`LeaseKey`] from the watch event that concerns it, through
//! the queue and the reconcile, to the writer; a candidate by a [`CandidateKey`]. Neither is ever
//! a `namespace/name` string that has to be split again.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use std::fmt;

/// Declares a key type: a namespace and a name, displayed as `namespace/name`.
macro_rules! object_key {
    ($(#[$doc:meta])* $key:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $key {
            #[doc = concat!("The ", $what, "'s namespace.")]
            pub namespace: String,
            #[doc = concat!("The ", $what, "'s name.")]
            pub name: String,
        }

        impl $key {
            #[doc = concat!("The key of ", $what, " `namespace/name`.")]
            #[must_use]
            pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
                Self {
                    namespace: namespace.into(),
                    name: name.into(),
                }
            }
        }

        impl fmt::Display for $key {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}/{}", self.namespace, self.name)
            }
        }
    };
}

object_key!(
    /// A Lease: its namespace and name. Displays as `namespace/name` (logs, spans, Events).
    LeaseKey,
    "Lease"
);

object_key!(
    /// A LeaseCandidate: its namespace (its Lease's too) and name. Displays as `namespace/name`.
    CandidateKey,
    "LeaseCandidate"
);

impl LeaseKey {
    /// The key of a Lease object; `None` if it lacks a namespace or a name.
    #[must_use]
    pub fn of_lease(lease: &Lease) -> Option<Self> {
        Some(Self::new(
            lease.metadata.namespace.as_deref()?,
            lease.metadata.name.as_deref()?,
        ))
    }

    /// The key of the Lease a candidate belongs to (same namespace, `spec.leaseName`); `None` if
    /// it names none.
    #[must_use]
    pub fn of_candidate(candidate: &LeaseCandidate) -> Option<Self> {
        let namespace = candidate.metadata.namespace.as_deref()?;
        let lease = candidate.spec.as_ref()?.lease_name.as_str();
        (!lease.is_empty()).then(|| Self::new(namespace, lease))
    }
}

impl CandidateKey {
    /// The key of a candidate object; `None` if it lacks a namespace or a name.
    #[must_use]
    pub fn of(candidate: &LeaseCandidate) -> Option<Self> {
        Some(Self::new(
            candidate.metadata.namespace.as_deref()?,
            candidate.metadata.name.as_deref()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec;
    use kube::api::ObjectMeta;

    #[test]
    fn keys_come_from_objects_and_display_as_namespace_slash_name() {
        let candidate = LeaseCandidate {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("c".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseCandidateSpec {
                lease_name: "l".into(),
                ..LeaseCandidateSpec::default()
            }),
        };
        assert_eq!(
            LeaseKey::of_candidate(&candidate),
            Some(LeaseKey::new("ns", "l"))
        );
        assert_eq!(
            CandidateKey::of(&candidate).map(|k| k.to_string()),
            Some("ns/c".into())
        );
        let mut orphan = candidate;
        orphan.spec = Some(LeaseCandidateSpec::default());
        assert_eq!(LeaseKey::of_candidate(&orphan), None, "no spec.leaseName");
        assert_eq!(LeaseKey::of_lease(&Lease::default()), None);
    }
}
