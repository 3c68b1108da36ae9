//! The only code that writes: Leases (create, or replace with the resourceVersion read), pings
//! (candidate replace with its resourceVersion) and candidate deletion (with a resourceVersion
//! precondition).
//!
//! A [`Writer`] holds what writing needs and nothing else: the client, the metrics, the ping
//! record and a [`Leadership`] handle. Before every write it checks that this replica still leads
//! and drops the write otherwise (counted in `conclave_api_writes_dropped`), so a replica that
//! lost its own Lease while a step was under way sends nothing more; every call it makes, reads
//! included, is bounded by the API timeout. A 409 is reported as [`WriteError::Conflict`] so the
//! caller re-reads.

use super::index::Pings;
use super::key::{CandidateKey, LeaseKey};
use super::leadership::Leadership;
use super::metrics::{Metrics, Operation, WriteResult};
use conclave_core::k8s::{candidate_view, micro_time};
use conclave_core::lease::{ELECTED_BY_ANNOTATION, ELECTED_BY_VALUE, LeaseRecord, Release};
use conclave_core::plan::{Liveness, candidate_expired, liveness_since};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Client};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The field manager of every write the controller sends: `metadata.managedFields` then names
/// Conclave as the writer of each holder it elected (`kubectl get lease NAME -o yaml
/// --show-managed-fields`), apart from the candidates' renewals and from kube-apiserver's
/// built-in controller.
pub const FIELD_MANAGER: &str = "conclave";

/// The create/replace parameters of the controller's writes: [`FIELD_MANAGER`], no dry run.
#[must_use]
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// Why a write (or a read made for one) did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed (409 Conflict) or already exists: re-read and plan again.
    #[error("the object changed since it was read")]
    Conflict,
    /// This replica no longer holds the controller Lease; nothing was sent.
    #[error("this replica no longer leads; the write was not sent")]
    NotLeading,
    /// The API server did not answer within the API timeout.
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    /// Any other API failure.
    #[error(transparent)]
    Api(kube::Error),
}

impl WriteError {
    /// The `result` label of a write that failed this way (a dropped write is not sent, and
    /// counted apart).
    #[must_use]
    pub const fn result(&self) -> WriteResult {
        match self {
            Self::Conflict => WriteResult::Conflict,
            Self::Timeout(_) => WriteResult::Timeout,
            Self::NotLeading | Self::Api(_) => WriteResult::Error,
        }
    }
}

/// Sends the controller's writes, gated on leadership and bounded by a timeout.
pub struct Writer {
    client: Client,
    metrics: Metrics,
    leadership: Leadership,
    pings: Arc<Pings>,
    timeout: Duration,
    /// Writes hold it shared; [`Writer::drain`] takes it exclusively to wait for them.
    in_flight: tokio::sync::RwLock<()>,
}

impl Writer {
    /// A writer that sends through `client` while `leadership` leads, records the pings it sends
    /// in `pings`, and gives every API call `timeout`.
    #[must_use]
    pub fn new(
        client: Client,
        metrics: Metrics,
        leadership: Leadership,
        pings: Arc<Pings>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            metrics,
            leadership,
            pings,
            timeout,
            in_flight: tokio::sync::RwLock::new(()),
        }
    }

    /// Waits until no write is in flight (at shutdown).
    pub async fn drain(&self) {
        drop(self.in_flight.write().await);
    }

    /// Runs a read within the timeout.
    async fn read<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        tokio::time::timeout(self.timeout, request)
            .await
            .map_err(|_| WriteError::Timeout(self.timeout))?
            .map_err(WriteError::Api)
    }

    /// Sends a write if this replica still leads, within the timeout, and counts it.
    async fn send<T>(
        &self,
        operation: Operation,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        if !self.leadership.is_leading() {
            self.metrics.write_dropped(operation);
            tracing::debug!(
                operation = operation.label(),
                "not leading any more; write dropped"
            );
            return Err(WriteError::NotLeading);
        }
        let _in_flight = self.in_flight.read().await;
        let result = match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(classify(error, operation)),
            Err(_) => Err(WriteError::Timeout(self.timeout)),
        };
        let label = result
            .as_ref()
            .map_or_else(WriteError::result, |_| WriteResult::Ok);
        self.metrics.write(operation, label);
        result
    }

    /// Reads the Lease from the API server (after a conflict: the cache may lag).
    pub async fn read_lease(&self, key: &LeaseKey) -> Result<Option<Lease>, WriteError> {
        let api = Api::<Lease>::namespaced(self.client.clone(), &key.namespace);
        self.read(api.get_opt(&key.name)).await
    }

    /// Creates (no `base`) or replaces (`base`, with its resourceVersion) the Lease.
    #[tracing::instrument(skip_all, fields(operation))]
    pub async fn write_lease(
        &self,
        base: Option<&Lease>,
        desired: &LeaseRecord,
    ) -> Result<Lease, WriteError> {
        let api = Api::<Lease>::namespaced(self.client.clone(), &desired.namespace);
        let object = lease_object(base, desired);
        let params = post_params();
        let operation = if base.is_some() {
            Operation::LeaseUpdate
        } else {
            Operation::LeaseCreate
        };
        tracing::Span::current().record("operation", operation.label());
        match base {
            None => self.send(operation, api.create(&params, &object)).await,
            Some(_) => {
                self.send(operation, api.replace(&desired.name, &params, &object))
                    .await
            }
        }
    }

    /// Pings every given candidate that needs it concurrently (the one `release` names needs one
    /// unless it showed life since; see [`liveness_since`]). Fails with the first failure of a
    /// ping for a reason other than the candidate having changed or disappeared.
    pub async fn ping_all(
        &self,
        candidates: &[Arc<LeaseCandidate>],
        now: Timestamp,
        ack_window: Duration,
        release: Option<Release<'_>>,
    ) -> Result<(), WriteError> {
        let results = futures::future::join_all(
            candidates
                .iter()
                .map(|candidate| self.ping(candidate, now, ack_window, release)),
        )
        .await;
        results.into_iter().collect()
    }

    /// Sets `spec.pingTime = now` on a stale candidate with its resourceVersion as precondition;
    /// on a conflict re-reads it once and pings again if it still needs a ping.
    async fn ping(
        &self,
        cached: &LeaseCandidate,
        now: Timestamp,
        ack_window: Duration,
        release: Option<Release<'_>>,
    ) -> Result<(), WriteError> {
        self.ping_when(cached, now, |candidate| {
            liveness_since(&candidate_view(candidate), now, ack_window, release) == Liveness::Stale
        })
        .await
    }

    /// Pings `candidate` unless it was pinged at or after `since`, even while an earlier ping is
    /// outstanding: pod liveness counts only an answer to a ping sent since the kubelet's report
    /// was seen (an answer to an earlier one may have been written before the process died), so
    /// a holder with a ping outstanding from before the report must be asked again, or its
    /// answer would not count and a live holder would be declared dead.
    pub async fn ping_since(
        &self,
        candidate: &LeaseCandidate,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<(), WriteError> {
        self.ping_when(candidate, now, |candidate| {
            candidate_view(candidate)
                .ping_time
                .is_none_or(|ping| ping < since)
        })
        .await
    }

    /// Sets `spec.pingTime = now` on the candidate if `needs_ping` says so, with its
    /// resourceVersion as precondition; on a conflict re-reads it once and asks again.
    #[tracing::instrument(skip_all, fields(candidate = cached.metadata.name.as_deref()))]
    async fn ping_when(
        &self,
        cached: &LeaseCandidate,
        now: Timestamp,
        needs_ping: impl Fn(&LeaseCandidate) -> bool,
    ) -> Result<(), WriteError> {
        let Some(key) = CandidateKey::of(cached) else {
            return Ok(());
        };
        let api = Api::<LeaseCandidate>::namespaced(self.client.clone(), &key.namespace);
        let mut current = Some(cached.clone());
        for _ in 0..2 {
            let Some(mut candidate) = current.take() else {
                return Ok(());
            };
            if !needs_ping(&candidate) {
                return Ok(());
            }
            let Some(spec) = candidate.spec.as_mut() else {
                return Ok(());
            };
            spec.ping_time = Some(micro_time(now));
            let params = post_params();
            let replace = api.replace(&key.name, &params, &candidate);
            match self.send(Operation::Ping, replace).await {
                Ok(_) => {
                    self.metrics.pings_sent.inc();
                    self.pings.sent(key, now);
                    tracing::debug!("pinged");
                    return Ok(());
                }
                Err(WriteError::Conflict) => {
                    current = self.read(api.get_opt(&key.name)).await?;
                }
                Err(error) => {
                    tracing::warn!(%error, "ping failed");
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Deletes the candidate if a fresh read shows it has still not renewed for `expiry`; the
    /// delete carries the resourceVersion just read. Returns whether it was deleted.
    #[tracing::instrument(skip_all, fields(candidate = %key))]
    pub async fn collect_candidate(
        &self,
        key: &CandidateKey,
        now: Timestamp,
        expiry: Duration,
    ) -> Result<bool, WriteError> {
        let api = Api::<LeaseCandidate>::namespaced(self.client.clone(), &key.namespace);
        let Some(fresh) = self.read(api.get_opt(&key.name)).await? else {
            return Ok(false);
        };
        if !candidate_expired(&candidate_view(&fresh), now, expiry) {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: fresh.metadata.resource_version.clone(),
                uid: fresh.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match self
            .send(Operation::CandidateDelete, api.delete(&key.name, &params))
            .await
        {
            Ok(_) => Ok(true),
            Err(WriteError::Conflict) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// A conflict, an existing object on create, or (for a delete) an object already gone, is
/// [`WriteError::Conflict`]: the caller re-reads. Anything else is an API failure.
fn classify(error: kube::Error, operation: Operation) -> WriteError {
    match &error {
        kube::Error::Api(status)
            if status.is_conflict()
                || status.is_already_exists()
                || (matches!(operation, Operation::CandidateDelete | Operation::Ping)
                    && status.is_not_found()) =>
        {
            WriteError::Conflict
        }
        _ => WriteError::Api(error),
    }
}

/// The Lease object to send: `base` (or a new object) with `desired`'s fields applied. Fields of
/// the spec that the record does not model are kept; the resourceVersion of `base` stays as the
/// precondition.
#[must_use]
pub fn lease_object(base: Option<&Lease>, desired: &LeaseRecord) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(desired.name.clone()),
            namespace: Some(desired.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity.clone_from(&desired.holder_identity);
    spec.preferred_holder.clone_from(&desired.preferred_holder);
    spec.strategy.clone_from(&desired.strategy);
    spec.lease_duration_seconds = desired.lease_duration_seconds;
    spec.renew_time = desired.renew_time.map(micro_time);
    spec.acquire_time = desired.acquire_time.map(micro_time);
    spec.lease_transitions = desired.lease_transitions;
    if desired.elected_by_conclave {
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ELECTED_BY_ANNOTATION.into(), ELECTED_BY_VALUE.into());
    }
    lease
}

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_core::k8s::lease_record;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    #[test]
    fn lease_object_applies_the_record_and_keeps_the_precondition() {
        let base = Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                namespace: Some("ns".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("old".into()),
                preferred_holder: Some("x".into()),
                ..LeaseSpec::default()
            }),
        };
        let mut desired = lease_record(&base);
        desired.holder_identity = Some("new".into());
        desired.preferred_holder = None;
        desired.renew_time = Some(Timestamp::from_secs(1_700_000_000));
        desired.elected_by_conclave = true;
        let object = lease_object(Some(&base), &desired);
        assert_eq!(object.metadata.resource_version.as_deref(), Some("42"));
        let record = lease_record(&object);
        assert_eq!(record.holder(), Some("new"));
        assert_eq!(record.preferred_holder, None);
        assert_eq!(record.renew_time, desired.renew_time);
        assert!(record.elected_by_conclave);
    }
}
