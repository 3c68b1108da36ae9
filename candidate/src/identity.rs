//! Defaults that fit a pod: this process's identity and the namespace it runs in.
//!
//! In a pod, set `POD_NAME` from the downward API (`fieldRef: metadata.name`): a pod's name is
//! unique in its namespace, so it is the identity as it is, and `kubectl get leasecandidates`
//! then names pods. Without it the identity is the hostname plus a random suffix, because a
//! hostname alone is not unique: processes on one machine share it, and so do `hostNetwork` pods
//! on one node (their hostname is the node's).

use std::hash::{BuildHasher, Hasher};

/// Environment variable holding the pod's name (downward API), preferred as identity.
pub const POD_NAME_ENV: &str = "POD_NAME";

/// Where Kubernetes mounts the namespace of a pod's service account (the pod's namespace).
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Longest identity: a LeaseCandidate name is a DNS-1123 subdomain (at most 253 characters).
const MAX_IDENTITY: usize = 253;

/// This process's identity: `$POD_NAME` when set, else the hostname with a random suffix
/// (`<hostname>-<8 hex digits>`), lower-cased and with characters a LeaseCandidate name cannot
/// hold replaced by `-`. Call it once per process and keep the result: the suffix differs on
/// every call.
#[must_use]
pub fn default_identity() -> String {
    let pod_name = std::env::var(POD_NAME_ENV).ok();
    let hostname = hostname::get()
        .ok()
        .map(|h| h.to_string_lossy().into_owned());
    identity_from(pod_name.as_deref(), hostname.as_deref(), random_suffix())
}

/// The namespace of this pod, read from its service account (`None` outside a pod, or when the
/// service account token is not mounted).
#[must_use]
pub fn service_account_namespace() -> Option<String> {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
        .ok()
        .map(|ns| ns.trim().to_owned())
        .filter(|ns| !ns.is_empty())
}

/// The identity from its sources, for [`default_identity`] (separate so it can be tested
/// without touching the process environment).
fn identity_from(pod_name: Option<&str>, hostname: Option<&str>, suffix: u32) -> String {
    if let Some(pod) = pod_name.map(str::trim).filter(|p| !p.is_empty()) {
        // Already a valid, unique name; sanitized anyway in case it was set by hand.
        return sanitize(pod, MAX_IDENTITY);
    }
    let suffix = format!("-{suffix:08x}");
    let host = hostname
        .map(|h| sanitize(h, MAX_IDENTITY - suffix.len()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "candidate".to_owned());
    host + &suffix
}

/// Lower-cases `raw` and keeps what a DNS-1123 subdomain allows (`a-z`, `0-9`, `-`, `.`),
/// replacing anything else by `-`; trims to `max` characters and to alphanumeric ends.
fn sanitize(raw: &str, max: usize) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// 32 random bits from the standard library's per-process random hasher keys.
fn random_suffix() -> u32 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    // Truncation intended: any 32 of the 64 random bits will do.
    hasher.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_prefers_the_pod_name_and_suffixes_only_the_hostname() {
        let table = [
            (Some("web-7d9f-abcde"), Some("node-1"), "web-7d9f-abcde"),
            (
                Some("  "),
                Some("Node_1.Example"),
                "node-1.example-0000002a",
            ),
            (None, Some("laptop.local"), "laptop.local-0000002a"),
            (None, Some("--"), "candidate-0000002a"),
            (None, None, "candidate-0000002a"),
        ];
        for (pod, host, want) in table {
            assert_eq!(identity_from(pod, host, 42), want, "{pod:?} {host:?}");
        }
    }

    #[test]
    fn identities_are_valid_lease_candidate_names() {
        let long = "h".repeat(400);
        let lease = crate::LeaseConfig::new("default", "lease", "x");
        for (pod, host) in [(None, Some(long.as_str())), (Some("Pod_A"), None)] {
            let mut config = lease.clone();
            config.identity = identity_from(pod, host, u32::MAX);
            assert!(config.identity.len() <= MAX_IDENTITY);
            let candidate =
                crate::CandidateConfig::new("1.33.0", "1.33.0", "OldestEmulationVersion");
            assert!(
                candidate.validate(&config).is_ok(),
                "{:?}: {:?}",
                config.identity,
                candidate.validate(&config)
            );
        }
    }

    #[test]
    fn random_suffixes_differ() {
        assert_ne!(random_suffix(), random_suffix());
    }
}
