//! Where each candidate of a Lease stands, as the controller would see it now: [`Health`], judged
//! by the same validation, expiry and liveness rules the controller applies.

use super::predict::PredictOptions;
use super::times::{ago, clock, until};
use conclave_core::k8s::{candidate_view, validate_lease_candidate};
use conclave_core::plan::{Liveness, candidate_expired, candidate_expires_at, liveness};
use conclave_core::request::CandidateView;
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use std::fmt::Write as _;

/// Where a candidate stands, as the controller would see it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Renewed within the ack window: electable at once.
    Fresh,
    /// Healthy, renewed longer ago than the ack window and not pinged since: the controller pings
    /// it before electing it (candidates renew every few minutes; this is their normal state).
    Stale,
    /// Pinged less than one ack window ago, no answer yet.
    Pinged {
        /// When it was pinged.
        at: Timestamp,
    },
    /// Did not answer its last ping within the ack window: left out of elections until it
    /// renews, and garbage-collected once it has not renewed for the candidate expiry.
    FailedPing {
        /// When it was pinged.
        pinged_at: Timestamp,
        /// When garbage collection deletes it unless it renews.
        collected_at: Option<Timestamp>,
    },
    /// Not renewed for the candidate expiry: takes no part, and garbage collection deletes it.
    Expired,
    /// Breaks kube-apiserver's validation rules (the first one broken): ignored.
    Invalid(String),
}

impl Health {
    /// A short label for the table's STATE column.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Fresh | Self::Stale => "healthy",
            Self::Pinged { .. } => "pinged",
            Self::FailedPing { .. } => "failed ping",
            Self::Expired => "expired",
            Self::Invalid(_) => "invalid",
        }
    }

    /// The `state` of a [`CandidateReport`]: [`label`](Self::label) with `healthy` told apart
    /// as `fresh` and `stale`.
    #[must_use]
    pub const fn state(&self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Stale => "stale",
            Self::Pinged { .. } => "pinged",
            Self::FailedPing { .. } => "failed-ping",
            Self::Expired => "expired",
            Self::Invalid(_) => "invalid",
        }
    }

    /// Whether the candidate renews and answers pings.
    #[must_use]
    pub const fn is_healthy(&self) -> bool {
        matches!(self, Self::Fresh | Self::Stale)
    }

    /// What the state means now, for the table's NOTE column.
    #[must_use]
    pub fn note(&self, now: Timestamp) -> String {
        match self {
            Self::Fresh => String::new(),
            Self::Stale => "stale: pinged before its next election".into(),
            Self::Pinged { at } => {
                format!("pinged {}, waiting for its answer", ago(Some(*at), now))
            }
            Self::FailedPing {
                pinged_at,
                collected_at,
            } => {
                let mut note = format!(
                    "no answer to the ping at {}; left out until it renews",
                    clock(*pinged_at)
                );
                if let Some(at) = collected_at {
                    let _ = write!(
                        note,
                        "; garbage-collected at {} ({}) unless it renews",
                        clock(*at),
                        until(*at, now)
                    );
                }
                note
            }
            Self::Expired => {
                "not renewed for the candidate expiry; garbage collection deletes it".into()
            }
            Self::Invalid(why) => why.clone(),
        }
    }
}

/// One candidate of a Lease.
#[derive(Debug, Clone)]
pub struct CandidateStatus {
    /// The candidate as the strategy would see it.
    pub view: CandidateView,
    /// Its standing now.
    pub health: Health,
    /// When garbage collection deletes it unless it renews: its last renewal plus the candidate
    /// expiry (`None` if it never renewed).
    pub collected_at: Option<Timestamp>,
}

/// The status of each candidate object at `now`, sorted by name.
pub(super) fn candidate_statuses(
    objects: &[&LeaseCandidate],
    now: Timestamp,
    options: PredictOptions,
) -> Vec<CandidateStatus> {
    let mut candidates: Vec<CandidateStatus> = objects
        .iter()
        .map(|object| {
            let view = candidate_view(object);
            let health = if let Some(error) = validate_lease_candidate(object).first() {
                Health::Invalid(error.to_string())
            } else if candidate_expired(&view, now, options.candidate_gc_after) {
                Health::Expired
            } else {
                match liveness(&view, now, options.ack_window) {
                    Liveness::Fresh => Health::Fresh,
                    Liveness::Stale => Health::Stale,
                    Liveness::Pending { .. } => Health::Pinged {
                        at: view.ping_time.unwrap_or(now),
                    },
                    Liveness::Unresponsive => Health::FailedPing {
                        pinged_at: view.ping_time.unwrap_or(now),
                        collected_at: candidate_expires_at(&view, options.candidate_gc_after),
                    },
                }
            };
            let collected_at = candidate_expires_at(&view, options.candidate_gc_after);
            CandidateStatus {
                view,
                health,
                collected_at,
            }
        })
        .collect();
    candidates.sort_by(|a, b| a.view.name.cmp(&b.view.name));
    candidates
}
