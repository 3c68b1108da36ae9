//! conclave-candidate: take part in Kubernetes coordinated leader election (KEP-4355) and hand
//! leadership over gracefully (KEP-5366) without leaving the process.
//!
//! Three pieces, named as in the KEPs:
//! - [`Candidate`]: the component's own LeaseCandidate (create or update, renew every 5 min and
//!   at once when pinged, delete on graceful shutdown);
//! - [`Elector`]: watches the Lease and leads while it names this identity as holder;
//!   [`Elector::coordinated`] never acquires (an election controller assigns the holder, spec
//!   §8.2), [`Elector::classic`] acquires free or expired Leases itself;
//! - [`Term`]: one period of leadership. User code runs inside it; its token is cancelled and
//!   its tasks are drained before the Lease is released.
//!
//! Build the `kube::Client` with [`client()`]: kube's default client leaves Nagle's algorithm on,
//! which can hold each small write (a renewal, a release) for about 40 ms.
//!
//! ```no_run
//! # async fn demo(kube_config: kube::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use conclave_candidate::{Elector, LeaseConfig, Term};
//! use tokio_util::sync::CancellationToken;
//! let client = conclave_candidate::client(kube_config)?;
//! let config = LeaseConfig::new("kube-system", "my-controller", "pod-a");
//! let elector = Elector::classic(client, config)?;
//! let shutdown = CancellationToken::new();
//! elector
//!     .run(
//!         |term: Term| async move {
//!             let worker = term.clone();
//!             term.spawn(async move { worker.cancelled().await });
//!             term.cancelled().await;
//!         },
//!         shutdown,
//!     )
//!     .await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod candidate;
mod client;
mod config;
mod elector;
mod lock;
mod metrics;
mod term;

pub use candidate::{Candidate, CandidateHandle};
pub use client::client;
pub use config::{CandidateConfig, DEFAULT_DRAIN_TIMEOUT, DEFAULT_RENEW_INTERVAL, LeaseConfig};
pub use elector::{Elector, ElectorHandle, LeaderState, StopReason, Transition};
pub use metrics::ElectorMetrics;
pub use term::{Term, TermLease};

use conclave_core::validation::FieldError;

/// Everything that can go wrong in this crate. Errors name the object they are about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A [`LeaseConfig`] or [`CandidateConfig`] cannot work; fix the named setting.
    #[error("invalid configuration for Lease {lease}: {reason}")]
    InvalidConfig {
        /// `namespace/name` of the Lease.
        lease: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The LeaseCandidate this component would send breaks kube-apiserver's validation; nothing
    /// was sent.
    #[error("{message} (checked locally, nothing was sent)")]
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
    #[error("{action} {object}: {source}")]
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

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a client error is an HTTP 409 Conflict (a resourceVersion precondition failed).
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Whether a client error is an HTTP 404 Not Found.
fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether a client error is an HTTP 409 AlreadyExists answer to a create.
fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}

/// The wall clock as a core timestamp (microsecond precision, like `MicroTime`).
fn wall_now() -> conclave_core::time::Timestamp {
    conclave_core::k8s::timestamp(jiff::Timestamp::now())
}
