//! Kubernetes Events on the Leases the controller elects for: why a Lease changed hands, or why
//! it did not. Publishing is best effort: a failure or a timeout is logged, never fatal.

use super::key::LeaseKey;
use conclave_core::text::truncate_utf8;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::time::Duration;

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
        }
    }

    /// Normal for elections, Warning for what needs someone's attention.
    #[must_use]
    pub const fn event_type(self) -> EventType {
        match self {
            Self::Elected | Self::Preempted => EventType::Normal,
            Self::PluginError | Self::StrategyConflict | Self::UnknownStrategy => {
                EventType::Warning
            }
        }
    }
}

/// Publishes the controller's Events, each within the API timeout.
pub struct Events {
    recorder: Recorder,
    timeout: Duration,
}

impl Events {
    /// Events reported by controller `conclave`, instance `identity`.
    #[must_use]
    pub fn new(client: Client, identity: &str, timeout: Duration) -> Self {
        let reporter = Reporter {
            controller: "conclave".into(),
            instance: Some(identity.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            timeout,
        }
    }

    /// Publishes an Event on the Lease `key` (`lease` as last read, for its uid and version); a
    /// note longer than kube-apiserver accepts is cut at a character boundary.
    pub async fn publish(
        &self,
        lease: Option<&Lease>,
        key: &LeaseKey,
        reason: EventReason,
        mut note: String,
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
            secondary: None,
        };
        let reason = reason.label();
        match tokio::time::timeout(self.timeout, self.recorder.publish(&event, &reference)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, reason, "publishing an Event failed"),
            Err(_) => {
                tracing::warn!(timeout = ?self.timeout, reason, "publishing an Event timed out")
            }
        }
    }
}
