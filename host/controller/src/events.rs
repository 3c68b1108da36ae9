//! Kubernetes Events on the Leases the controller elects for: why a Lease changed hands, or why
//! it did not. Publishing is best effort: a failure or a timeout is logged, never fatal.
//!
//! Events are published off the workers' path: [`Events::publish`] queues the Event and returns,
//! and a background task sends up to [`PUBLISHERS`] at a time. An Event is one more API
//! round-trip per election; sent inline it held the worker (and so the next election) for it,
//! which bounded an expiry storm of thousands of Leases. Past [`QUEUED`] Events waiting, new ones
//! are dropped with a warning rather than slowing elections down.

use super::key::LeaseKey;
use conclave_core::text::truncate_utf8;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};

/// Events sent to the API server at the same time.
pub const PUBLISHERS: usize = 8;

/// Events waiting to be sent; more are dropped.
pub const QUEUED: usize = 16_384;

/// The longest note kube-apiserver accepts on an Event (`note` is limited to 1 kB).
const NOTE_LIMIT: usize = 1000;

/// Why an Event is published (its `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventReason {
    /// A candidate was made holder (created, took over, or a stale preferredHolder was cleared).
    Elected,
    /// A live holder was asked to step down for a better candidate.
    Preempted,
    /// The strategy plugin failed; the Lease was left as it is.
    PluginError,
    /// The candidates disagree on the strategy; the election is blocked.
    StrategyConflict,
    /// No loaded plugin implements the Lease's strategy.
    UnknownStrategy,
    /// A holder was elected and never renewed the Lease before it expired: it sits out the
    /// Lease's elections for a while.
    HolderNeverRenewed,
    /// The kubelet reported that the holder's process stopped (pod liveness): the next
    /// candidate is elected without waiting for the Lease to expire.
    HolderDead,
    /// The active replica holds kube-apiserver's built-in election controller's Lease and
    /// elects its Leases ([`crate::takeover`]).
    BuiltinTakenOver,
    /// The built-in election controller's Lease was found with another holder while Conclave
    /// elected its Leases: they are left to the built-in controller again.
    BuiltinTakeOverLost,
}

impl EventReason {
    /// The Event's `reason`.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Elected => "Elected",
            Self::Preempted => "Preempted",
            Self::PluginError => "PluginError",
            Self::StrategyConflict => "StrategyConflict",
            Self::UnknownStrategy => "UnknownStrategy",
            Self::HolderNeverRenewed => "HolderNeverRenewed",
            Self::HolderDead => "HolderDead",
            Self::BuiltinTakenOver => "BuiltinTakenOver",
            Self::BuiltinTakeOverLost => "BuiltinTakeOverLost",
        }
    }

    /// Normal for elections, Warning for what needs someone's attention.
    #[must_use]
    pub const fn event_type(self) -> EventType {
        match self {
            Self::Elected | Self::Preempted | Self::BuiltinTakenOver => EventType::Normal,
            Self::PluginError
            | Self::StrategyConflict
            | Self::UnknownStrategy
            | Self::HolderNeverRenewed
            | Self::HolderDead
            | Self::BuiltinTakeOverLost => EventType::Warning,
        }
    }
}

/// An Event waiting to be sent.
struct Pending {
    event: Event,
    reference: ObjectReference,
}

/// Queues the controller's Events; a background task publishes each within the API timeout.
///
/// Warnings go through kube-rs's [`Recorder`], which turns a repeat of the same warning on the
/// same Lease version (a plugin failing on every retry) into one Event with a growing series.
/// Normal Events (elections) never repeat: each names the Lease version its write produced. They
/// are created directly: the `Recorder` keeps every Event it sent for 6 minutes and sweeps that
/// whole cache on each publish, which at 10,000 Leases took half of the controller's CPU.
pub struct Events {
    queue: mpsc::Sender<Pending>,
}

impl Events {
    /// Events reported by controller `conclave`, instance `identity`. Spawns the task that
    /// publishes them (on the current Tokio runtime); it ends once this value is dropped and
    /// the Events already queued are sent.
    #[must_use]
    pub fn new(client: Client, identity: &str, timeout: Duration) -> Self {
        let reporter = Reporter {
            controller: "conclave".into(),
            instance: Some(identity.to_owned()),
        };
        let (queue, pending) = mpsc::channel(QUEUED);
        let publisher = Publisher {
            client: client.clone(),
            instance: identity.to_owned(),
            recorder: Recorder::new(client, reporter),
        };
        tokio::spawn(send_all(Arc::new(publisher), pending, timeout));
        Self { queue }
    }

    /// Queues an Event on the Lease `key` (`lease` as last read, for its uid and version); a
    /// note longer than kube-apiserver accepts is cut at a character boundary. Never waits: a
    /// full queue drops the Event with a warning.
    pub fn publish(
        &self,
        lease: Option<&Lease>,
        key: &LeaseKey,
        reason: EventReason,
        note: String,
    ) {
        self.publish_related(lease, key, reason, note, None);
    }

    /// [`Self::publish`] for an Event about one candidate of the Lease (the holder found dead,
    /// the holder that never renewed), named as the Event's `related` object. A warning about
    /// another candidate is then an Event of its own: kube-rs's `Recorder` would otherwise take
    /// it for a repeat of the last one on the Lease (its key is the object, reason and action,
    /// not the note) and only count it in that Event's series, under the earlier candidate's
    /// name.
    pub fn publish_about_candidate(
        &self,
        lease: Option<&Lease>,
        key: &LeaseKey,
        reason: EventReason,
        note: String,
        candidate: &str,
    ) {
        let related = ObjectReference {
            api_version: Some("coordination.k8s.io/v1beta1".into()),
            kind: Some("LeaseCandidate".into()),
            namespace: Some(key.namespace.clone()),
            name: Some(candidate.to_owned()),
            ..ObjectReference::default()
        };
        self.publish_related(lease, key, reason, note, Some(related));
    }

    /// Queues `event` about any object (a `StrategyPlugin`: an object of the cluster scope's
    /// Events land in namespace `default`). Never waits: a full queue drops it with a warning.
    pub fn publish_object(&self, reference: ObjectReference, mut event: Event) {
        if let Some(note) = event.note.as_mut() {
            truncate_utf8(note, NOTE_LIMIT);
        }
        let reason = event.reason.clone();
        if self.queue.try_send(Pending { event, reference }).is_err() {
            tracing::warn!(
                reason,
                queued = QUEUED,
                "too many Events waiting to be published; this one is dropped"
            );
        }
    }

    fn publish_related(
        &self,
        lease: Option<&Lease>,
        key: &LeaseKey,
        reason: EventReason,
        mut note: String,
        related: Option<ObjectReference>,
    ) {
        let reference = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            uid: lease.and_then(|l| l.metadata.uid.clone()),
            resource_version: lease.and_then(|l| l.metadata.resource_version.clone()),
            ..ObjectReference::default()
        };
        truncate_utf8(&mut note, NOTE_LIMIT);
        let event = Event {
            type_: reason.event_type(),
            reason: reason.label().to_owned(),
            note: Some(note),
            action: "Elect".into(),
            secondary: related,
        };
        if self.queue.try_send(Pending { event, reference }).is_err() {
            tracing::warn!(
                lease = %key,
                reason = reason.label(),
                queued = QUEUED,
                "too many Events waiting to be published; this one is dropped"
            );
        }
    }
}

/// What sends the Events: the `Recorder` for warnings, a plain create for the others.
struct Publisher {
    client: Client,
    instance: String,
    recorder: Recorder,
}

impl Publisher {
    async fn publish(&self, event: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        if event.type_ == EventType::Warning {
            return self.recorder.publish(event, reference).await;
        }
        // A cluster-scoped object's Events go to `default`, as kube-rs's Recorder puts them.
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let now = jiff::Timestamp::now();
        let object = K8sEvent {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.as_deref().unwrap_or("conclave"),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some("conclave".into()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some("Normal".into()),
            ..K8sEvent::default()
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
            .create(&crate::writer::post_params(), &object)
            .await
            .map(drop)
    }
}

/// Sends every queued Event, [`PUBLISHERS`] at a time, until the queue is closed and drained.
async fn send_all(
    publisher: Arc<Publisher>,
    mut pending: mpsc::Receiver<Pending>,
    timeout: Duration,
) {
    let slots = Arc::new(Semaphore::new(PUBLISHERS));
    while let Some(Pending { event, reference }) = pending.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let publisher = Arc::clone(&publisher);
        tokio::spawn(async move {
            let reason = event.reason.as_str();
            match tokio::time::timeout(timeout, publisher.publish(&event, &reference)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, reason, "publishing an Event failed"),
                Err(_) => {
                    tracing::warn!(?timeout, reason, "publishing an Event timed out");
                }
            }
            drop(slot);
        });
    }
}
