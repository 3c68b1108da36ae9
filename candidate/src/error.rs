//! The crate's one error type, the `Result` alias, and how a client error reads (conflict, not
//! found, already exists).

use conclave_core::validation::FieldError;

/// Everything that can go wrong in this crate. Each message is a sentence that names the object
/// it is about and, where there is one, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A [`LeaseConfig`](crate::LeaseConfig) or [`CandidateConfig`](crate::CandidateConfig)
    /// cannot work; fix the named setting.
    #[error("the configuration for Lease {lease} cannot work: {reason}")]
    InvalidConfig {
        /// `namespace/name` of the Lease.
        lease: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The LeaseCandidate this component would send breaks kube-apiserver's validation; nothing
    /// was sent.
    #[error("the LeaseCandidate would be refused: {message} (checked locally; nothing was sent)")]
    InvalidCandidate {
        /// The message kube-apiserver would have answered with.
        message: String,
        /// The individual field errors.
        errors: Vec<FieldError>,
    },
    /// A LeaseCandidate with this identity already exists for another Lease; `spec.leaseName` is
    /// immutable, so it was left alone.
    #[error(
        "LeaseCandidate {namespace}/{name} already exists for Lease {existing:?}, not {wanted:?}; \
         spec.leaseName is immutable: delete it or choose another identity"
    )]
    CandidateForOtherLease {
        /// Namespace of the candidate.
        namespace: String,
        /// Name (identity) of the candidate.
        name: String,
        /// The Lease the existing object names.
        existing: String,
        /// The Lease this candidate was configured for.
        wanted: String,
    },
    /// A Kubernetes API request failed.
    #[error("could not {action} {object}: {source}")]
    Kube {
        /// What was being done (`get Lease`, `create LeaseCandidate`, ...).
        action: &'static str,
        /// `namespace/name` of the object.
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A short label for metrics and structured logs: `invalid-config`, `invalid-candidate`,
    /// `candidate-for-other-lease` or `kube-api`.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::InvalidConfig { .. } => "invalid-config",
            Self::InvalidCandidate { .. } => "invalid-candidate",
            Self::CandidateForOtherLease { .. } => "candidate-for-other-lease",
            Self::Kube { .. } => "kube-api",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a client error is an HTTP 409 Conflict (a resourceVersion precondition failed).
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Whether a client error is an HTTP 404 Not Found.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether a client error is an HTTP 409 AlreadyExists answer to a create.
pub(crate) fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}

#[cfg(test)]
mod tests {
    use crate::{CandidateConfig, LeaseConfig};

    #[test]
    fn errors_read_as_sentences_naming_their_object() {
        let config = LeaseConfig {
            renew_deadline: std::time::Duration::from_secs(20),
            ..LeaseConfig::new("kube-system", "my-lease", "a")
        };
        let error = config.validate().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the configuration for Lease kube-system/my-lease cannot work: renew_deadline 20s \
             must be shorter than lease_duration 15s"
        );
        assert_eq!(error.metric_label(), "invalid-config");
        let error = CandidateConfig::new("1.33.0", "1.34.0", "OldestEmulationVersion")
            .validate(&LeaseConfig::new("kube-system", "my-lease", "a"))
            .unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("the LeaseCandidate would be refused: ")
                && message.ends_with("(checked locally; nothing was sent)"),
            "{message}"
        );
    }
}
