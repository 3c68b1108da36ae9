//! The only code that writes: Leases (create, or replace with the resourceVersion read), pings
//! (candidate replace with its resourceVersion) and candidate deletion (with a resourceVersion
//! precondition). A 409 is reported as [`WriteError::Conflict`] so the caller re-reads.

use super::Context;
use conclave_core::k8s::{candidate_view, micro_time};
use conclave_core::lease::{ELECTED_BY_ANNOTATION, ELECTED_BY_VALUE, LeaseRecord};
use conclave_core::plan::{Liveness, candidate_expired, liveness};
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Error};

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed (409 Conflict) or already exists: re-read and plan again.
    #[error("the object changed since it was read")]
    Conflict,
    /// Any other API failure.
    #[error(transparent)]
    Api(Error),
}

fn classify(error: Error) -> WriteError {
    match &error {
        Error::Api(status) if status.is_conflict() || status.is_already_exists() => {
            WriteError::Conflict
        }
        _ => WriteError::Api(error),
    }
}

fn result_label<T>(result: &Result<T, WriteError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(WriteError::Conflict) => "conflict",
        Err(WriteError::Api(_)) => "error",
    }
}

/// Reads the Lease from the API server (after a conflict: the cache may lag).
pub async fn read_lease(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<Lease>, Error> {
    Api::<Lease>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await
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

/// Creates (no `base`) or replaces (`base`, with its resourceVersion) the Lease.
pub async fn write_lease(
    ctx: &Context,
    base: Option<&Lease>,
    desired: &LeaseRecord,
) -> Result<Lease, WriteError> {
    let api = Api::<Lease>::namespaced(ctx.client.clone(), &desired.namespace);
    let object = lease_object(base, desired);
    let _in_flight = ctx.writes_in_flight.read().await;
    let (operation, result) = match base {
        None => (
            "lease_create",
            api.create(&PostParams::default(), &object)
                .await
                .map_err(classify),
        ),
        Some(_) => (
            "lease_update",
            api.replace(&desired.name, &PostParams::default(), &object)
                .await
                .map_err(classify),
        ),
    };
    ctx.metrics.write(operation, result_label(&result));
    result
}

/// Pings every named candidate of `namespace` concurrently. Fails if any ping failed for a reason
/// other than the candidate having changed or disappeared.
pub async fn ping_all(
    ctx: &Context,
    namespace: &str,
    names: &[String],
    now: Timestamp,
) -> Result<(), ()> {
    let results =
        futures::future::join_all(names.iter().map(|name| ping(ctx, namespace, name, now))).await;
    if results.iter().any(Result::is_err) {
        Err(())
    } else {
        Ok(())
    }
}

/// Sets `spec.pingTime = now` on one candidate with its resourceVersion as precondition; on a
/// conflict re-reads it once and pings again if it still needs a ping.
async fn ping(
    ctx: &Context,
    namespace: &str,
    name: &str,
    now: Timestamp,
) -> Result<(), WriteError> {
    let api = Api::<LeaseCandidate>::namespaced(ctx.client.clone(), namespace);
    let mut current = ctx.caches.candidate(namespace, name).map(|c| (*c).clone());
    for _ in 0..2 {
        let Some(mut candidate) = current.take() else {
            return Ok(());
        };
        if liveness(&candidate_view(&candidate), now, ctx.config.ack_window) != Liveness::Stale {
            return Ok(());
        }
        let Some(spec) = candidate.spec.as_mut() else {
            return Ok(());
        };
        spec.ping_time = Some(micro_time(now));
        let _in_flight = ctx.writes_in_flight.read().await;
        let result = api
            .replace(name, &PostParams::default(), &candidate)
            .await
            .map_err(classify);
        ctx.metrics.write("ping", result_label(&result));
        match result {
            Ok(_) => {
                ctx.metrics.pings_sent.inc();
                ctx.record_ping(namespace, name, now);
                tracing::debug!(candidate = name, "pinged");
                return Ok(());
            }
            Err(WriteError::Conflict) => {
                current = api.get_opt(name).await.map_err(WriteError::Api)?;
            }
            Err(error) => {
                tracing::warn!(candidate = name, %error, "ping failed");
                return Err(error);
            }
        }
    }
    Ok(())
}

/// Deletes `namespace/name` if a fresh read shows it has still not renewed for the GC period;
/// the delete carries the resourceVersion just read. Returns whether it was deleted.
pub async fn collect_candidate(
    ctx: &Context,
    namespace: &str,
    name: &str,
    now: Timestamp,
) -> Result<bool, Error> {
    let api = Api::<LeaseCandidate>::namespaced(ctx.client.clone(), namespace);
    let Some(fresh) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if !candidate_expired(&candidate_view(&fresh), now, ctx.config.candidate_gc_after) {
        return Ok(false);
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: fresh.metadata.resource_version.clone(),
            uid: fresh.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    let _in_flight = ctx.writes_in_flight.read().await;
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.write("candidate_delete", "ok");
            Ok(true)
        }
        Err(Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
            ctx.metrics.write("candidate_delete", "conflict");
            Ok(false)
        }
        Err(error) => {
            ctx.metrics.write("candidate_delete", "error");
            Err(error)
        }
    }
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
