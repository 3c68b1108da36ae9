//! Read-your-writes for the controller's own Lease writes, and for what it read of a Lease after
//! a write conflict.
//!
//! Right after a write, the cache still holds the Lease as it was before: the watch event that
//! brings the new version comes a little later. A step that runs in between (another candidate of
//! the same Lease appeared) would decide on the old version and write again, only to be refused
//! with a conflict. So the Lease as the server returned it is kept and read instead of the cache,
//! until the next watch event of that Lease (then the cache holds the write or something newer)
//! or a relist.
//!
//! A write refused as a conflict is followed by a read of the Lease, and what that read found is
//! kept the same way: the watch may still be behind this controller's own earlier write (or
//! another writer's create), and forgetting the write would leave a cache showing no Lease at
//! all, on which a step creates it for whoever is best while its holder leads. A read that finds
//! the Lease deleted is kept too, as a deletion the watch has not delivered: no step runs on the
//! Lease until the watch delivers it (with the deleted Lease's last state, which says until when
//! its holder may lead; see `index.rs`), or a relist. Unless the watch's latest event of the
//! Lease is its deletion (delivered, say, while the refused write was in flight): then the cache
//! already shows it, and no later event would come to clear a deletion kept as ahead of the watch
//! (only this controller creates the Lease), which left the Lease leaderless for good.
//!
//! A write or read whose answer arrives after a watch event of its Lease is not kept: that event
//! may be the same version or a newer change, and the cache is then at least as new.

use super::key::LeaseKey;
use super::sync::lock;
use k8s_openapi::api::coordination::v1::Lease;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// What this controller learnt of a Lease ahead of its watch.
#[derive(Debug, Clone)]
enum Known {
    /// The Lease as this controller last wrote or read it.
    Stored(Arc<Lease>),
    /// A read found the Lease deleted.
    Deleted,
}

#[derive(Default)]
struct State {
    /// Lease key -> what this controller last learnt of it ahead of the watch.
    known: HashMap<LeaseKey, Known>,
    /// Lease key -> the ticket of the write or read in flight, while no watch event of it has
    /// arrived.
    in_flight: HashMap<LeaseKey, u64>,
    /// Leases whose latest watch event is their deletion (since the last relist): a read that
    /// finds one of them deleted is not ahead of the watch. One entry per Lease deleted and not
    /// created again, as the index keeps one per Lease.
    deleted_by_watch: HashSet<LeaseKey>,
    next_ticket: u64,
}

/// The controller's own Lease writes, and its reads after a conflict, whose watch events have
/// not arrived yet.
#[derive(Default)]
pub struct OwnWrites {
    state: Mutex<State>,
}

/// A Lease write or read in flight (see [`OwnWrites::begin`]); dropping it without
/// [`WriteTicket::succeeded`] or [`WriteTicket::found_deleted`] records nothing.
pub struct WriteTicket {
    owner: Arc<OwnWrites>,
    key: LeaseKey,
    id: u64,
}

impl OwnWrites {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A write or read of Lease `key` is about to be sent.
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

    /// The Lease `key` as this controller last wrote or read it, if no watch event of it came
    /// since.
    #[must_use]
    pub fn get(&self, key: &LeaseKey) -> Option<Arc<Lease>> {
        match self.lock().known.get(key) {
            Some(Known::Stored(lease)) => Some(Arc::clone(lease)),
            Some(Known::Deleted) | None => None,
        }
    }

    /// Whether a read found Lease `key` deleted and no watch event of it came since.
    #[must_use]
    pub fn deleted(&self, key: &LeaseKey) -> bool {
        matches!(self.lock().known.get(key), Some(Known::Deleted))
    }

    /// A watch event of Lease `key` other than its deletion arrived: the cache is now the truth
    /// for it.
    pub fn observed(&self, key: &LeaseKey) {
        let mut state = self.lock();
        // All are empty but while this controller's writes are in flight or unwatched: skip
        // hashing the key into them for each of the thousands of renewals a second.
        if !state.known.is_empty() {
            state.known.remove(key);
        }
        if !state.in_flight.is_empty() {
            state.in_flight.remove(key);
        }
        if !state.deleted_by_watch.is_empty() {
            state.deleted_by_watch.remove(key);
        }
    }

    /// The watch delivered the deletion of Lease `key`: the cache is now the truth for it, and a
    /// read that finds it deleted, until the next event of it, is not ahead of the watch.
    pub fn observed_deletion(&self, key: &LeaseKey) {
        let mut state = self.lock();
        state.known.remove(key);
        state.in_flight.remove(key);
        state.deleted_by_watch.insert(key.clone());
    }

    /// A relist completed: the cache is the truth for every Lease.
    pub fn relisted(&self) {
        let mut state = self.lock();
        state.known.clear();
        state.in_flight.clear();
        state.deleted_by_watch.clear();
    }
}

impl WriteTicket {
    /// The write or read succeeded and the server returned `stored`; it is kept unless a watch
    /// event of the Lease arrived while the request was in flight.
    pub fn succeeded(self, stored: &Lease) {
        self.keep(Known::Stored(Arc::new(stored.clone())));
    }

    /// The read found the Lease deleted; that is kept unless a watch event of the Lease arrived
    /// while the read was in flight, or the watch's latest event of it is its deletion (the cache
    /// shows it deleted already).
    pub fn found_deleted(self) {
        if self.owner.lock().deleted_by_watch.contains(&self.key) {
            return;
        }
        self.keep(Known::Deleted);
    }

    fn keep(self, known: Known) {
        let mut state = self.owner.lock();
        // The in-flight entry goes when the ticket is dropped, right after.
        if state.in_flight.get(&self.key) == Some(&self.id) {
            state.known.insert(self.key.clone(), known);
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
    fn a_read_after_a_conflict_replaces_the_kept_write_until_the_next_watch_event() {
        let own = Arc::new(OwnWrites::default());
        own.begin(key()).succeeded(&lease("10"));
        own.begin(key()).succeeded(&lease("11"));
        assert_eq!(kept_version(&own).as_deref(), Some("11"));
        own.observed(&key());
        assert!(own.get(&key()).is_none());
    }

    #[test]
    fn a_read_finding_the_lease_deleted_is_kept_until_the_watch_delivers_an_event() {
        let own = Arc::new(OwnWrites::default());
        own.begin(key()).succeeded(&lease("10"));
        own.begin(key()).found_deleted();
        assert!(own.deleted(&key()));
        assert!(own.get(&key()).is_none(), "no Lease to step on");
        assert!(!own.deleted(&other()));
        own.observed(&key());
        assert!(!own.deleted(&key()), "the watch delivered the deletion");

        let reading = own.begin(key());
        own.observed(&key());
        reading.found_deleted();
        assert!(
            !own.deleted(&key()),
            "a watch event during the read is at least as new"
        );
    }

    /// Finding 3 of the second review: the watch delivers the Lease's deletion while a write of
    /// it is in flight (here after a renewal of it, which also arrived meanwhile); the write is
    /// refused with a conflict, and the read after it finds the Lease deleted. The cache already
    /// shows that: nothing may wait for an event that will never come.
    #[test]
    fn a_read_finding_a_lease_deleted_that_the_watch_deleted_is_not_kept() {
        let own = Arc::new(OwnWrites::default());
        let write = own.begin(key());
        own.observed(&key());
        own.observed_deletion(&key());
        drop(write); // 409
        own.begin(key()).found_deleted();
        assert!(
            !own.deleted(&key()),
            "the watch delivered the deletion already"
        );
        assert!(own.get(&key()).is_none());

        // The Lease created again, and its creation watched: a read finding it deleted is ahead
        // of the watch again.
        own.observed(&key());
        own.begin(key()).found_deleted();
        assert!(own.deleted(&key()));

        // A relist forgets what the watch said.
        own.observed_deletion(&other());
        own.relisted();
        own.begin(other()).found_deleted();
        assert!(own.deleted(&other()));
    }

    #[test]
    fn a_relist_drops_kept_writes_and_deletions() {
        let own = Arc::new(OwnWrites::default());
        own.begin(other()).found_deleted();
        own.begin(key()).succeeded(&lease("12"));
        let in_flight = own.begin(other());
        own.relisted();
        assert!(own.get(&key()).is_none());
        assert!(!own.deleted(&other()));
        in_flight.succeeded(&lease("13"));
        assert!(
            own.get(&other()).is_none(),
            "a relist supersedes writes in flight"
        );
    }
}
