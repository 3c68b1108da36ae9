//! Read-your-writes for the controller's own Lease writes.
//!
//! Right after a write, the cache still holds the Lease as it was before: the watch event that
//! brings the new version comes a little later. A step that runs in between (another candidate of
//! the same Lease appeared) would decide on the old version and write again, only to be refused
//! with a conflict. So the Lease as the server returned it is kept and read instead of the cache,
//! until the next watch event of that Lease (then the cache holds the write or something newer),
//! a relist, or a conflict.
//!
//! A write whose response arrives after a watch event of its Lease is not kept: that event may be
//! the write itself or a newer change, and the cache is then at least as new as the write.

use super::key::LeaseKey;
use super::lock;
use k8s_openapi::api::coordination::v1::Lease;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    /// Lease key -> the Lease as this controller last wrote it.
    written: HashMap<LeaseKey, Arc<Lease>>,
    /// Lease key -> the ticket of the write in flight, while no watch event of it has arrived.
    in_flight: HashMap<LeaseKey, u64>,
    next_ticket: u64,
}

/// The controller's own Lease writes whose watch events have not arrived yet.
#[derive(Default)]
pub struct OwnWrites {
    state: Mutex<State>,
}

/// A Lease write in flight (see [`OwnWrites::begin`]); dropping it without
/// [`WriteTicket::succeeded`] records nothing.
pub struct WriteTicket {
    owner: Arc<OwnWrites>,
    key: LeaseKey,
    id: u64,
}

impl OwnWrites {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A write of Lease `key` is about to be sent.
    pub fn begin(self: &Arc<Self>, key: LeaseKey) -> WriteTicket {
        let mut state = self.lock();
        state.next_ticket += 1;
        let id = state.next_ticket;
        state.in_flight.insert(key.clone(), id);
        WriteTicket {
            owner: Arc::clone(self),
            key,
            id,
        }
    }

    /// The Lease `key` as this controller wrote it, if no watch event of it came since.
    #[must_use]
    pub fn get(&self, key: &LeaseKey) -> Option<Arc<Lease>> {
        self.lock().written.get(key).cloned()
    }

    /// A watch event of Lease `key` arrived: the cache is now the truth for it.
    pub fn observed(&self, key: &LeaseKey) {
        let mut state = self.lock();
        state.written.remove(key);
        state.in_flight.remove(key);
    }

    /// A relist completed: the cache is the truth for every Lease.
    pub fn relisted(&self) {
        let mut state = self.lock();
        state.written.clear();
        state.in_flight.clear();
    }

    /// A write based on the kept Lease `key` was refused: stop reading it.
    pub fn forget(&self, key: &LeaseKey) {
        self.lock().written.remove(key);
    }
}

impl WriteTicket {
    /// The write succeeded and the server returned `written`; it is kept unless a watch event of
    /// the Lease arrived while the write was in flight.
    pub fn succeeded(self, written: &Lease) {
        let mut state = self.owner.lock();
        // The in-flight entry goes when the ticket is dropped, right after.
        if state.in_flight.get(&self.key) == Some(&self.id) {
            state
                .written
                .insert(self.key.clone(), Arc::new(written.clone()));
        }
    }
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        let mut state = self.owner.lock();
        if state.in_flight.get(&self.key) == Some(&self.id) {
            state.in_flight.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn key() -> LeaseKey {
        LeaseKey::new("ns", "lease")
    }

    fn other() -> LeaseKey {
        LeaseKey::new("ns", "other")
    }

    fn lease(resource_version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("lease".into()),
                resource_version: Some(resource_version.into()),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    fn kept_version(own: &OwnWrites) -> Option<String> {
        own.get(&key())
            .and_then(|l| l.metadata.resource_version.clone())
    }

    #[test]
    fn a_write_is_read_back_until_the_next_watch_event() {
        let own = Arc::new(OwnWrites::default());
        own.begin(key()).succeeded(&lease("10"));
        assert_eq!(kept_version(&own).as_deref(), Some("10"));
        assert!(own.get(&other()).is_none());
        own.observed(&key());
        assert!(own.get(&key()).is_none());
    }

    #[test]
    fn a_write_answered_after_a_watch_event_is_not_kept() {
        let own = Arc::new(OwnWrites::default());
        let ticket = own.begin(key());
        // The write's own event, or a newer change, reached the cache before the response.
        own.observed(&key());
        ticket.succeeded(&lease("10"));
        assert!(own.get(&key()).is_none(), "the cache may already be newer");
    }

    #[test]
    fn a_failed_write_leaves_nothing_and_the_next_write_is_kept() {
        let own = Arc::new(OwnWrites::default());
        drop(own.begin(key()));
        assert!(own.lock().in_flight.is_empty());
        own.begin(key()).succeeded(&lease("11"));
        assert_eq!(kept_version(&own).as_deref(), Some("11"));
    }

    #[test]
    fn a_conflict_or_a_relist_drops_kept_writes() {
        let own = Arc::new(OwnWrites::default());
        own.begin(key()).succeeded(&lease("10"));
        own.forget(&key());
        assert!(own.get(&key()).is_none());

        own.begin(key()).succeeded(&lease("12"));
        let in_flight = own.begin(other());
        own.relisted();
        assert!(own.get(&key()).is_none());
        in_flight.succeeded(&lease("13"));
        assert!(
            own.get(&other()).is_none(),
            "a relist supersedes writes in flight"
        );
    }
}
