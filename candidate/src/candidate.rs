//! The component's own LeaseCandidate: announce it, keep it fresh, answer pings, remove it on the
//! way out (spec §8.1).

use crate::config::{CandidateConfig, LeaseConfig};
use crate::error::{Error, Result, is_conflict, is_not_found};
use conclave_core::k8s::{self, micro_time, timestamp, validate_lease_candidate_update};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Shortest and longest wait before retrying a failed renewal.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Keeps this instance's LeaseCandidate (name = identity) registered while it runs.
#[derive(Debug)]
pub struct Candidate {
    api: Api<LeaseCandidate>,
    lease: LeaseConfig,
    config: CandidateConfig,
    registered: watch::Sender<bool>,
    renewals: watch::Sender<u64>,
}

/// Read side of a running [`Candidate`]: registration state (for readiness) and renewal count.
#[derive(Debug, Clone)]
pub struct CandidateHandle {
    registered: watch::Receiver<bool>,
    renewals: watch::Receiver<u64>,
}

impl CandidateHandle {
    /// Whether the LeaseCandidate exists as this instance last wrote it.
    #[must_use]
    pub fn is_registered(&self) -> bool {
        *self.registered.borrow()
    }

    /// Changes of the registration state.
    #[must_use]
    pub fn registered(&self) -> watch::Receiver<bool> {
        self.registered.clone()
    }

    /// How many times `spec.renewTime` was written (creation included); grows by one per
    /// answered ping.
    #[must_use]
    pub fn renewals(&self) -> watch::Receiver<u64> {
        self.renewals.clone()
    }
}

impl Candidate {
    /// Checks the LeaseCandidate this instance would send with kube-apiserver's rules; a bad
    /// version, strategy, label or identity is an error here, before any request.
    pub fn new(client: Client, lease: LeaseConfig, config: CandidateConfig) -> Result<Self> {
        lease.validate()?;
        config.validate(&lease)?;
        Ok(Self {
            api: Api::namespaced(client, &lease.namespace),
            lease,
            config,
            registered: watch::channel(false).0,
            renewals: watch::channel(0).0,
        })
    }

    /// A handle to observe this candidate while it runs.
    #[must_use]
    pub fn handle(&self) -> CandidateHandle {
        CandidateHandle {
            registered: self.registered.subscribe(),
            renewals: self.renewals.subscribe(),
        }
    }

    fn object_key(&self) -> String {
        format!("{}/{}", self.lease.namespace, self.lease.identity)
    }

    fn error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Kube {
            action,
            object: self.object_key(),
            source,
        }
    }

    /// Creates or updates the LeaseCandidate, renews it every `renew_interval` and at once when
    /// pinged (`pingTime > renewTime`, seen by watching the object itself), recreates it if it
    /// disappears, and deletes it when `shutdown` is cancelled.
    ///
    /// Returns an error only for problems retrying cannot fix (an existing object for another
    /// Lease, or an object the server rejects as invalid); transient API errors are retried, and a
    /// failed delete on shutdown is logged, not returned (a process asked to stop exits cleanly).
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let selector = format!("metadata.name={}", self.lease.identity);
        let mut events = watcher(
            self.api.clone(),
            watcher::Config::default().fields(&selector),
        )
        .default_backoff()
        .boxed();
        let mut next_renew = Instant::now();
        let mut retry = RETRY_MIN;
        let mut uid: Option<String> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next_renew) => {}
                event = events.next() => {
                    let Some(event) = event else { continue };
                    match event {
                        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                            if !is_pinged(&object) {
                                continue;
                            }
                            tracing::debug!(candidate = %self.object_key(), "pinged, renewing at once");
                        }
                        Ok(watcher::Event::Delete(_)) => {
                            self.registered.send_replace(false);
                            tracing::info!(candidate = %self.object_key(), "LeaseCandidate deleted by someone else, recreating");
                        }
                        Ok(_) => continue,
                        Err(error) => {
                            tracing::debug!(candidate = %self.object_key(), %error, "LeaseCandidate watch error");
                            continue;
                        }
                    }
                }
            }
            match self.ensure().await {
                Ok(stored) => {
                    uid = stored.metadata.uid;
                    retry = RETRY_MIN;
                    next_renew = Instant::now() + self.config.renew_interval;
                }
                Err(
                    error @ (Error::CandidateForOtherLease { .. } | Error::InvalidCandidate { .. }),
                ) => {
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(candidate = %self.object_key(), %error, retry_in = ?retry, "renewing LeaseCandidate failed");
                    next_renew = Instant::now() + retry;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
        self.registered.send_replace(false);
        // Leaving, nothing is fatal any more: a delete that fails (the API server unreachable, the
        // connection dropped) leaves the object to go stale, and the election controller collects
        // it, as when the delete takes too long.
        if let Err(error) = self.delete(uid).await {
            tracing::warn!(candidate = %self.object_key(), %error, "deleting the LeaseCandidate failed; the controller will collect it");
        }
        Ok(())
    }

    /// Creates the object, or updates it to this configuration with `renewTime = now`.
    async fn ensure(&self) -> Result<LeaseCandidate> {
        loop {
            let Some(existing) = self
                .api
                .get_opt(&self.lease.identity)
                .await
                .map_err(|e| self.error("get LeaseCandidate", e))?
            else {
                let mut object = self.config.object(&self.lease);
                if let Some(spec) = object.spec.as_mut() {
                    spec.renew_time = Some(micro_time(k8s::now()));
                }
                match self.api.create(&PostParams::default(), &object).await {
                    Ok(stored) => return Ok(self.renewed(stored, "created")),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(self.rejected_or(e, "create LeaseCandidate")),
                }
            };
            let mut wanted = self.config.object(&self.lease);
            let existing_lease = existing
                .spec
                .as_ref()
                .map(|s| s.lease_name.clone())
                .unwrap_or_default();
            if existing_lease != self.lease.name {
                return Err(Error::CandidateForOtherLease {
                    namespace: self.lease.namespace.clone(),
                    name: self.lease.identity.clone(),
                    existing: existing_lease,
                    wanted: self.lease.name.clone(),
                });
            }
            let errors = validate_lease_candidate_update(&existing, &wanted);
            if !errors.is_empty() {
                return Err(Error::InvalidCandidate {
                    message: conclave_core::validation::invalid_message(
                        "LeaseCandidate.coordination.k8s.io",
                        &self.lease.identity,
                        &errors,
                    ),
                    errors,
                });
            }
            let mut metadata = existing.metadata.clone();
            metadata.labels = wanted.metadata.labels.take();
            metadata.managed_fields = None;
            merge_pod_record(&mut metadata, &mut wanted.metadata);
            wanted.metadata = metadata;
            if let (Some(spec), Some(old)) = (wanted.spec.as_mut(), existing.spec.as_ref()) {
                // pingTime belongs to the controller: keep it (pings are persistent upstream).
                spec.ping_time = old.ping_time.clone();
                spec.renew_time = Some(micro_time(answer_time(
                    k8s::now(),
                    old.ping_time.as_ref().map(|p| timestamp(p.0)),
                )));
            }
            match self
                .api
                .replace(&self.lease.identity, &PostParams::default(), &wanted)
                .await
            {
                Ok(stored) => return Ok(self.renewed(stored, "renewed")),
                Err(e) if is_conflict(&e) || is_not_found(&e) => continue,
                Err(e) => return Err(self.rejected_or(e, "update LeaseCandidate")),
            }
        }
    }

    fn renewed(&self, stored: LeaseCandidate, what: &'static str) -> LeaseCandidate {
        tracing::debug!(candidate = %self.object_key(), what, "LeaseCandidate written");
        self.registered.send_replace(true);
        self.renewals.send_modify(|n| *n += 1);
        stored
    }

    /// A 422 from the server means the local validation missed a rule: not worth retrying.
    fn rejected_or(&self, error: kube::Error, action: &'static str) -> Error {
        match &error {
            kube::Error::Api(status) if status.code == 422 => Error::InvalidCandidate {
                message: status.message.clone(),
                errors: Vec::new(),
            },
            _ => self.error(action, error),
        }
    }

    async fn delete(&self, uid: Option<String>) -> Result<()> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.lease.identity, &params).await {
            Ok(_) => {
                tracing::info!(candidate = %self.object_key(), "LeaseCandidate deleted");
                Ok(())
            }
            // Gone already, or replaced by another object with this name: nothing of ours left.
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(self.error("delete LeaseCandidate", e)),
        }
    }
}

/// The `renewTime` of a renewal at `now` (this instance's clock) of a candidate last pinged at
/// `ping` (the controller's clock): never before the ping. With a clock behind the controller's,
/// `now` alone would leave the ping unanswered: the controller would not count the answer, and
/// this instance would read its own renewal as still pinged and write again at once, GET and PUT
/// in a loop; with a skew past the ack window, a Lease whose only candidate it is would never get
/// a leader (issue 34, finding 5).
fn answer_time(
    now: conclave_core::time::Timestamp,
    ping: Option<conclave_core::time::Timestamp>,
) -> conclave_core::time::Timestamp {
    ping.map_or(now, |ping| ping.max(now))
}

/// Carries this process's Pod record (ownerReference and annotations, [`crate::PodRef`]) from
/// `wanted` into the stored `metadata`, keeping what others put there: annotations under other
/// keys, and owners other than a Pod. A candidate object taken over from an earlier process (a
/// name set by hand) then names this process, not its predecessor.
fn merge_pod_record(metadata: &mut kube::api::ObjectMeta, wanted: &mut kube::api::ObjectMeta) {
    if let Some(ours) = wanted.annotations.take() {
        metadata.annotations.get_or_insert_default().extend(ours);
    }
    if let Some(ours) = wanted.owner_references.take() {
        let owners = metadata.owner_references.get_or_insert_default();
        owners.retain(|o| !(o.kind == "Pod" && o.api_version == "v1"));
        owners.extend(ours);
    }
}

/// Whether the controller asked for proof of life that has not been given yet.
fn is_pinged(object: &LeaseCandidate) -> bool {
    let Some(spec) = object.spec.as_ref() else {
        return false;
    };
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => timestamp(ping.0) > timestamp(renew.0),
        (Some(_), None) => true,
        _ => false,
    }
}
