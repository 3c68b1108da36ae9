//! The Lease as a lock: read it, write this identity as holder, release it. Every write replaces
//! the whole object with the resourceVersion it was read at, so a concurrent change fails with
//! 409 Conflict instead of being overwritten.

use crate::config::LeaseConfig;
use crate::error::{Error, Result, is_already_exists, is_conflict, is_not_found};
use conclave_core::k8s::micro_time;
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// What a conditional write returned.
#[derive(Debug)]
pub(crate) enum Write {
    /// Written; the object as stored.
    Done(Box<Lease>),
    /// The precondition failed (409): someone else wrote first; read again.
    Conflict,
}

/// Reads and writes one Lease for one identity.
#[derive(Clone)]
pub(crate) struct LeaseLock {
    api: Api<Lease>,
    config: LeaseConfig,
}

impl LeaseLock {
    pub(crate) fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    pub(crate) fn config(&self) -> &LeaseConfig {
        &self.config
    }

    pub(crate) fn api(&self) -> &Api<Lease> {
        &self.api
    }

    fn error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Kube {
            action,
            object: self.config.key(),
            source,
        }
    }

    /// The Lease, or `None` when it does not exist.
    pub(crate) async fn get(&self) -> Result<Option<Lease>> {
        self.api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.error("get Lease", e))
    }

    /// Creates the Lease held by this identity (classic mode and fallback); `Conflict` when it
    /// already exists.
    pub(crate) async fn create(&self, strategy: Option<String>, now: Timestamp) -> Result<Write> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration_seconds()),
                acquire_time: Some(micro_time(now)),
                renew_time: Some(micro_time(now)),
                lease_transitions: Some(0),
                strategy,
                preferred_holder: None,
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(stored) => Ok(Write::Done(Box::new(stored))),
            Err(e) if is_already_exists(&e) || is_conflict(&e) => Ok(Write::Conflict),
            Err(e) => Err(self.error("create Lease", e)),
        }
    }

    /// Writes this identity as holder of `current` (renew, or acquire when another holder was
    /// recorded), keeping `strategy`. A renewal keeps `preferredHolder` (the controller's request
    /// stays visible while the term drains); an acquisition clears it and counts a transition.
    ///
    /// The write that starts a term (`starts_term`) counts a transition too when the Lease
    /// already names this identity: an election controller names the holder without counting
    /// (kube-apiserver's never touches `leaseTransitions`; Conclave's counts a change only from
    /// another holder, not after a release), so without this every term of a coordinated Lease
    /// could carry the same number, and the terms of different replicas could not be told
    /// apart by it ([`crate::Transition::Leading`]'s `lease_transitions`).
    pub(crate) async fn write_holder(
        &self,
        current: &Lease,
        now: Timestamp,
        starts_term: bool,
    ) -> Result<Write> {
        let old = current.spec.clone().unwrap_or_default();
        let same_holder = old.holder_identity.as_deref() == Some(self.config.identity.as_str());
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration_seconds()),
            renew_time: Some(micro_time(now)),
            acquire_time: if same_holder {
                old.acquire_time.clone()
            } else {
                Some(micro_time(now))
            },
            lease_transitions: if same_holder && !starts_term {
                old.lease_transitions
            } else {
                Some(old.lease_transitions.unwrap_or(0).saturating_add(1))
            },
            strategy: old.strategy.clone(),
            preferred_holder: if same_holder {
                old.preferred_holder.clone()
            } else {
                None
            },
        };
        self.replace(current, spec, "renew Lease").await
    }

    /// Releases the Lease (KEP-5366 / client-go `ReleaseOnCancel` shape): `holderIdentity` "",
    /// `leaseDurationSeconds` 1, `renewTime` = `acquireTime` = now, transitions and `strategy`
    /// kept, `preferredHolder` cleared.
    pub(crate) async fn release(&self, current: &Lease, now: Timestamp) -> Result<Write> {
        let old = current.spec.clone().unwrap_or_default();
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            renew_time: Some(micro_time(now)),
            acquire_time: Some(micro_time(now)),
            lease_transitions: old.lease_transitions,
            strategy: old.strategy,
            preferred_holder: None,
        };
        self.replace(current, spec, "release Lease").await
    }

    async fn replace(
        &self,
        current: &Lease,
        spec: LeaseSpec,
        action: &'static str,
    ) -> Result<Write> {
        let mut lease = current.clone();
        // Keep metadata.resourceVersion: it is the precondition of the update.
        lease.metadata.managed_fields = None;
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(stored) => Ok(Write::Done(Box::new(stored))),
            // Deleted meanwhile counts as changed meanwhile: read again.
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(Write::Conflict),
            Err(e) => Err(self.error(action, e)),
        }
    }
}
