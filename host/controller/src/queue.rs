//! The work queue: Lease keys, deduplicated, with delayed re-adds, and at most
//! one worker per key at a time.
//!
//! A key added while a worker holds it is marked dirty and handed out again once the worker is
//! done, so no event is lost and no Lease is reconciled twice concurrently. A delayed add keeps
//! only the earliest deadline per key; an immediate add supersedes any delay.
//!
//! Keys of elections in progress (candidates pinged, acks awaited) are handed out before any
//! other ready key. An ack is fresh for one ack window only: were the Lease whose candidates just
//! acked queued behind every Lease still to be pinged, a storm of thousands of expiries would
//! reach it after its acks went stale, ping again, and never elect. Finishing the elections
//! already started before starting new ones keeps their number bounded by what the workers
//! handle within an ack window.

use super::key::LeaseKey;
use super::sync::lock;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the queue holds: Leases.
pub type Key = LeaseKey;

/// A place in the queue's timer: a deadline and a sequence number unique to the slot.
type Slot = (Instant, u64);

#[derive(Default)]
struct State {
    /// Ready keys of elections in progress, handed out first.
    continuing: VecDeque<Key>,
    /// Other ready keys.
    ready: VecDeque<Key>,
    /// Keys whose last step left an election in progress.
    electing: HashSet<Key>,
    queued: HashSet<Key>,
    active: HashSet<Key>,
    dirty: HashSet<Key>,
    /// Delayed keys by deadline, then by when they were delayed: a slot is found and moved by
    /// comparing numbers only, never keys (each renewal of a settled Lease moves its key's slot,
    /// thousands of times a second at scale).
    delayed: BTreeMap<Slot, Key>,
    /// Each delayed key's slot in `delayed`.
    deadline_of: HashMap<Key, Slot>,
    /// The sequence number of the next slot.
    next_slot: u64,
    first_added: HashMap<Key, Instant>,
    shutdown: bool,
}

impl State {
    fn push_ready(&mut self, key: Key) {
        if let Some(slot) = self.deadline_of.remove(&key) {
            self.delayed.remove(&slot);
        }
        if self.active.contains(&key) {
            self.dirty.insert(key);
        } else if self.queued.insert(key.clone()) {
            if self.electing.contains(&key) {
                self.continuing.push_back(key);
            } else {
                self.ready.push_back(key);
            }
        }
    }

    fn promote_due(&mut self, now: Instant) {
        while let Some(((at, _), _)) = self.delayed.first_key_value() {
            if *at > now {
                break;
            }
            let Some((_, key)) = self.delayed.pop_first() else {
                break;
            };
            self.deadline_of.remove(&key);
            self.push_ready(key);
        }
    }

    /// The earliest deadline of a delayed key.
    fn earliest(&self) -> Option<Instant> {
        self.delayed.first_key_value().map(|((at, _), _)| *at)
    }

    /// Delays `key` until `at` (`None`: no longer delayed), whatever its deadline was. A key
    /// already delayed keeps its entries, moved, with no key cloned or compared but in one lookup.
    fn delay(&mut self, key: Key, at: Option<Instant>) {
        let slot = at.map(|at| (at, self.next_slot));
        self.next_slot += 1;
        match (self.deadline_of.get_mut(&key), slot) {
            (Some(current), Some(slot)) => {
                let moved = std::mem::replace(current, slot);
                let key = self.delayed.remove(&moved).unwrap_or(key);
                self.delayed.insert(slot, key);
            }
            (Some(_), None) => {
                if let Some(moved) = self.deadline_of.remove(&key) {
                    self.delayed.remove(&moved);
                }
            }
            (None, Some(slot)) => {
                self.deadline_of.insert(key.clone(), slot);
                self.delayed.insert(slot, key);
            }
            (None, None) => {}
        }
    }
}

/// A cloneable handle to the queue.
#[derive(Clone, Default)]
pub struct WorkQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

/// A key handed to a worker; pass it back to [`WorkQueue::done`].
#[derive(Debug)]
pub struct Item {
    /// The Lease key.
    pub key: Key,
    /// When the key was first added since it was last done: the trigger of this reconcile.
    pub triggered_at: Instant,
}

impl WorkQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Adds `key` for immediate processing.
    pub fn add(&self, key: Key) {
        {
            let mut st = self.lock();
            if st.shutdown {
                return;
            }
            st.first_added
                .entry(key.clone())
                .or_insert_with(Instant::now);
            st.push_ready(key);
        }
        self.notify.notify_one();
    }

    /// Adds `key` at `at`, unless it is already due earlier.
    pub fn add_at(&self, key: Key, at: Instant) {
        if at <= Instant::now() {
            self.add(key);
            return;
        }
        {
            let mut st = self.lock();
            if st.shutdown || st.queued.contains(&key) {
                return;
            }
            if st
                .deadline_of
                .get(&key)
                .is_some_and(|(existing, _)| *existing <= at)
            {
                return;
            }
            st.delay(key, Some(at));
        }
        // Wake a worker so it re-computes the earliest deadline it sleeps until.
        self.notify.notify_one();
    }

    /// A renewal of `key`'s Lease that decides nothing arrived (`index::Watched::Renewal`): the
    /// step it would trigger would only look again at `at` (`None`: wait for an event). So the
    /// key's delay becomes `at`, as an [`add`](Self::add) followed by that step's
    /// [`add_at`](Self::add_at) would leave it, without the step. A key queued or held by a worker
    /// is added as usual: a step runs anyway, and reads the renewal.
    pub fn renewed(&self, key: Key, at: Option<Instant>) {
        {
            let mut st = self.lock();
            if st.shutdown {
                return;
            }
            let busy = st.active.contains(&key) || st.queued.contains(&key);
            if !busy && at.is_none_or(|at| at > Instant::now()) {
                // Some sleeping worker wakes no later than the earliest deadline (every earlier
                // one added wakes a worker). A renewal moves its key's deadline later, so the
                // earliest rarely comes sooner: only then is a worker woken to sleep less. The
                // others cost at most one early wake-up, at the old deadline, not one per
                // renewal (5,000 a second at 10,000 Leases renewed every 2 s).
                let earliest = st.earliest();
                st.delay(key, at);
                let sooner = at.is_some_and(|at| earliest.is_none_or(|earliest| at < earliest));
                drop(st);
                if sooner {
                    self.notify.notify_one();
                }
                return;
            }
        }
        self.add(key);
    }

    /// Waits for the next key; `None` once the queue is shut down.
    pub async fn next(&self) -> Option<Item> {
        loop {
            let notified = self.notify.notified();
            let sleep_until = {
                let mut st = self.lock();
                if st.shutdown {
                    return None;
                }
                st.promote_due(Instant::now());
                if let Some(key) = st.continuing.pop_front().or_else(|| st.ready.pop_front()) {
                    st.queued.remove(&key);
                    st.active.insert(key.clone());
                    let triggered_at = st
                        .first_added
                        .get(&key)
                        .copied()
                        .unwrap_or_else(Instant::now);
                    let more = !st.continuing.is_empty() || !st.ready.is_empty();
                    drop(st);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some(Item { key, triggered_at });
                }
                st.earliest()
            };
            match sleep_until {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Records whether the step of `key` that just ran left its election in progress (pings
    /// outstanding, or a retry), so that its next adds go ahead of the keys of new elections.
    /// Call it before re-adding the key and before [`done`](Self::done).
    pub fn set_electing(&self, key: &Key, electing: bool) {
        let mut st = self.lock();
        if electing {
            st.electing.insert(key.clone());
        } else {
            st.electing.remove(key);
        }
    }

    /// Marks `item` finished; if it was added meanwhile, it is queued again.
    pub fn done(&self, item: Item) {
        let requeued = {
            let mut st = self.lock();
            st.active.remove(&item.key);
            if st.dirty.remove(&item.key) {
                st.push_ready(item.key);
                true
            } else {
                if !st.queued.contains(&item.key) {
                    st.first_added.remove(&item.key);
                }
                false
            }
        };
        if requeued {
            self.notify.notify_one();
        }
    }

    /// Restarts the trigger time of every key that is waiting or held to now.
    ///
    /// A follower's queue collects keys from watch events for as long as it follows, with no
    /// worker to take them; when it becomes active, those keys were triggered by the term start,
    /// not by an event seen hours ago, so election latency is measured from now.
    pub fn restart_triggers(&self) {
        let now = Instant::now();
        for at in self.lock().first_added.values_mut() {
            *at = now;
        }
    }

    /// Number of keys waiting (ready or delayed).
    pub fn len(&self) -> usize {
        let st = self.lock();
        st.continuing.len() + st.ready.len() + st.delayed.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops handing out keys; workers get `None` from [`next`](Self::next).
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(name: &str) -> LeaseKey {
        LeaseKey::new("ns", name)
    }

    #[tokio::test(start_paused = true)]
    async fn deduplicates_and_holds_one_worker_per_key() {
        let q = WorkQueue::default();
        q.add(key("a"));
        q.add(key("a"));
        q.add(key("b"));
        let a = q.next().await.expect("a");
        assert_eq!(a.key, key("a"));
        // Added again while a worker holds it: not handed out until done.
        q.add(key("a"));
        let b = q.next().await.expect("b");
        assert_eq!(b.key, key("b"));
        assert!(q.is_empty());
        q.done(a);
        let again = q.next().await.expect("a again");
        assert_eq!(again.key, key("a"));
        q.done(again);
        q.done(b);
        assert!(q.is_empty());
    }

    /// The expiry storm of issue 16: every Lease is queued, the first is pinged, and its ack
    /// must not wait behind the thousands still to be pinged (an ack is fresh for 5 s only).
    #[tokio::test(start_paused = true)]
    async fn elections_in_progress_go_before_new_ones() {
        let q = WorkQueue::default();
        for i in 0..1000 {
            q.add(key(&format!("l{i}")));
        }
        let first = q.next().await.expect("l0");
        assert_eq!(first.key, key("l0"));
        // The step pinged l0's candidates: its election goes on, rechecked at the window's end.
        q.set_electing(&first.key, true);
        q.add_at(first.key.clone(), Instant::now() + Duration::from_secs(5));
        q.done(first);
        let second = q.next().await.expect("l1");
        assert_eq!(second.key, key("l1"));
        // The ack arrives while l1 is being stepped: l0 comes next, not after l999.
        q.add(key("l0"));
        let acked = q.next().await.expect("l0 again");
        assert_eq!(acked.key, key("l0"));
        // l0 is elected: its later events queue behind the others again.
        q.set_electing(&acked.key, false);
        q.done(acked);
        q.add(key("l0"));
        assert_eq!(q.next().await.expect("l2").key, key("l2"));
        q.done(second);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_keep_the_earliest_deadline() {
        let q = WorkQueue::default();
        let now = Instant::now();
        q.add_at(key("a"), now + Duration::from_secs(10));
        q.add_at(key("a"), now + Duration::from_secs(3));
        q.add_at(key("a"), now + Duration::from_secs(7));
        assert_eq!(q.len(), 1);
        let item = q.next().await.expect("a");
        assert_eq!(item.key, key("a"));
        let waited = Instant::now() - now;
        assert!(waited >= Duration::from_secs(3) && waited < Duration::from_secs(7));
        q.done(item);
        assert!(q.is_empty());
    }

    /// Issue 31: a renewal that decides nothing moves the key's delay to the step's own recheck,
    /// later or earlier, as an add and that step would; a key queued or held is added as usual.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_decides_nothing_re_arms_the_delay_without_a_step() {
        let q = WorkQueue::default();
        let now = Instant::now();
        q.add_at(key("a"), now + Duration::from_secs(5));
        q.renewed(key("a"), Some(now + Duration::from_secs(9)));
        assert_eq!(q.len(), 1);
        let item = q.next().await.expect("a");
        let waited = Instant::now() - now;
        assert!(
            waited >= Duration::from_secs(9),
            "re-armed later: {waited:?}"
        );
        // Held by a worker: the renewal is added, and handed out again once done.
        q.renewed(key("a"), Some(Instant::now() + Duration::from_secs(9)));
        q.done(item);
        let again = q.next().await.expect("a again");
        assert!(
            Instant::now() - now < Duration::from_secs(10),
            "not delayed"
        );
        q.done(again);
        // No recheck: no delay left.
        q.add_at(key("b"), Instant::now() + Duration::from_secs(5));
        q.renewed(key("b"), None);
        assert!(q.is_empty());
    }

    /// Keys due at the same instant each keep their own place: moving one moves only that one.
    #[tokio::test(start_paused = true)]
    async fn keys_due_at_the_same_instant_are_each_handed_out_once() {
        let q = WorkQueue::default();
        let at = Instant::now() + Duration::from_secs(5);
        for name in ["a", "b", "c"] {
            q.add_at(key(name), at);
        }
        q.renewed(key("b"), Some(at + Duration::from_secs(5)));
        q.renewed(key("c"), Some(at));
        assert_eq!(q.len(), 3);
        let mut handed = Vec::new();
        while !q.is_empty() {
            let item = q.next().await.expect("a key");
            handed.push((
                item.key.name.clone(),
                Instant::now() >= at + Duration::from_secs(5),
            ));
            q.done(item);
        }
        handed.sort();
        assert_eq!(
            handed,
            [("a".into(), false), ("b".into(), true), ("c".into(), false)]
        );
    }

    /// A renewal wakes no worker unless it makes the earliest deadline sooner; then the sleeping
    /// worker wakes and hands the key out at its deadline, not at the later one it slept until.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_brings_the_earliest_deadline_forward_wakes_a_sleeping_worker() {
        let q = WorkQueue::default();
        let now = Instant::now();
        q.add_at(key("a"), now + Duration::from_secs(10));
        let worker = tokio::spawn({
            let q = q.clone();
            async move {
                let first = q.next().await.expect("first key");
                (first.key.clone(), Instant::now())
            }
        });
        // Let the worker go to sleep until a's deadline.
        tokio::time::sleep(Duration::from_millis(100)).await;
        q.renewed(key("b"), Some(now + Duration::from_secs(2)));
        let (first, at) = worker.await.unwrap();
        assert_eq!(first, key("b"));
        assert!(
            at - now < Duration::from_secs(3),
            "b handed out at its deadline, not a's: {:?}",
            at - now
        );
        // A renewal moving a later: the worker that slept until a's old deadline looks again.
        q.renewed(key("a"), Some(now + Duration::from_secs(20)));
        let item = q.next().await.expect("a");
        assert_eq!(item.key, key("a"));
        assert!(Instant::now() - now >= Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn restarted_triggers_count_from_the_restart() {
        let q = WorkQueue::default();
        q.add(key("a"));
        tokio::time::advance(Duration::from_secs(3600)).await;
        let restarted = Instant::now();
        q.restart_triggers();
        q.add(key("b"));
        tokio::time::advance(Duration::from_secs(1)).await;
        let a = q.next().await.expect("a");
        assert_eq!((&a.key, a.triggered_at), (&key("a"), restarted));
        let b = q.next().await.expect("b");
        assert_eq!(b.triggered_at, restarted, "added after the restart");
        q.done(a);
        q.done(b);
    }

    #[tokio::test(start_paused = true)]
    async fn immediate_add_supersedes_a_delay_and_shutdown_ends_workers() {
        let q = WorkQueue::default();
        q.add_at(key("a"), Instant::now() + Duration::from_secs(60));
        q.add(key("a"));
        let item = q.next().await.expect("a");
        q.done(item);
        assert!(q.is_empty(), "the delayed entry was replaced");
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.next().await.map(|i| i.key) }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.expect("join"), None);
    }
}
