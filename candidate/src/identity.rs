//! Defaults that fit a pod: this process's identity and the namespace it runs in.
//!
//! In a pod, set `POD_NAME` from the downward API (`fieldRef: metadata.name`): the identity is
//! the pod's name plus a random suffix drawn once per process (`web-7d9f-abcde-1a2b3c4d`), so
//! `kubectl get leasecandidates` still names pods, and a container the kubelet restarts in the
//! same pod comes back under a new identity: the Lease its predecessor held (and may still be
//! named in until the controller replaces it) is never mistaken for its own, and an election
//! controller never takes the new process's renewals for the dead one's. Without `POD_NAME` the
//! identity is the hostname plus a random suffix, because a hostname alone is not unique:
//! processes on one machine share it, and so do `hostNetwork` pods on one node (their hostname
//! is the node's).

use std::hash::{BuildHasher, Hasher};

/// Environment variable holding the pod's name (downward API), preferred as identity.
pub const POD_NAME_ENV: &str = "POD_NAME";

/// Where Kubernetes mounts the namespace of a pod's service account (the pod's namespace).
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Longest identity: a LeaseCandidate name is a DNS-1123 subdomain (at most 253 characters).
const MAX_IDENTITY: usize = 253;

/// This process's identity: `$POD_NAME`, else the hostname, with a random suffix drawn once per
/// process (`<pod or hostname>-<8 hex digits>`), lower-cased and with characters a LeaseCandidate
/// name cannot hold replaced by `-`. Every call in one process returns the same identity; a
/// restarted process (a container the kubelet restarted) gets another.
#[must_use]
pub fn default_identity() -> String {
    static SUFFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let pod_name = std::env::var(POD_NAME_ENV).ok();
    let hostname = hostname::get()
        .ok()
        .map(|h| h.to_string_lossy().into_owned());
    identity_from(
        pod_name.as_deref(),
        hostname.as_deref(),
        *SUFFIX.get_or_init(random_suffix),
    )
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
    let suffix = format!("-{suffix:08x}");
    let name = |raw: &str| sanitize(raw, MAX_IDENTITY - suffix.len());
    let prefix = pod_name
        .map(name)
        .filter(|p| !p.is_empty())
        .or_else(|| hostname.map(name).filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "candidate".to_owned());
    prefix + &suffix
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
    fn identity_prefers_the_pod_name_and_always_has_a_per_process_suffix() {
        let table = [
            (
                Some("web-7d9f-abcde"),
                Some("node-1"),
                "web-7d9f-abcde-0000002a",
            ),
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
        for (pod, host) in [
            (None, Some(long.as_str())),
            (Some("Pod_A"), None),
            (Some(long.as_str()), None),
        ] {
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

    /// Two processes in the same pod (a container the kubelet restarted) draw different
    /// suffixes, so they never share an identity; one process keeps its own.
    #[test]
    fn two_processes_of_one_pod_get_different_identities() {
        let first = identity_from(Some("web-0"), None, random_suffix());
        let restarted = identity_from(Some("web-0"), None, random_suffix());
        assert_ne!(first, restarted);
        assert!(first.starts_with("web-0-") && restarted.starts_with("web-0-"));
        assert_eq!(
            default_identity(),
            default_identity(),
            "stable within a process"
        );
    }
}
