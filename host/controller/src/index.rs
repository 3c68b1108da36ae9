//! From watch events to work: [`leases`] and [`candidates`] take a stream of watch events (already
//! applied to their reflector's store) and apply each to the controller's in-memory state, the
//! own-write record, the candidate index and the ping record, then enqueue the Lease keys the
//! event concerns. They hold no client: a test feeds them a `Vec` of events through
//! [`kube::runtime::reflector::reflector`] and looks at the queue, with no server.
//!
//! The rules, in the order an event meets them:
//! - a relist (at start, or after a 410) enqueues its keys only once the store holds the relisted
//!   objects (`Relist`), and every key the store held before it, so a Lease deleted while the
//!   watch was down is reconciled too;
//! - a Lease event ends read-your-writes for that Lease ([`OwnWrites::observed`]), a relist for
//!   every Lease; a watched renewal is timed by the controller's clock ([`Renewals`]) before its
//!   key is enqueued;
//! - a candidate event updates the index before its key is enqueued, so the step it triggers finds
//!   the candidate; a renewal answering a recorded ping counts an ack ([`Pings::observe`]);
//! - a candidate with a ping outstanding enqueues nothing: its ack will.

use super::key::{CandidateKey, LeaseKey};
use super::lock;
use super::own_writes::OwnWrites;
use super::queue::WorkQueue;
use conclave_core::k8s::{now, timestamp};
use conclave_core::lease::LeaseRecord;
use conclave_core::time::Timestamp;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use prometheus_client::metrics::counter::Counter;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Applies Lease watch events to the own-write record and the renewal times and enqueues their
/// keys, until the stream ends. `store` is the reflector store the events were applied to.
pub async fn leases<S>(
    events: S,
    store: &Store<Lease>,
    own_writes: &OwnWrites,
    renewals: &Renewals,
    queue: &WorkQueue,
) where
    S: Stream<Item = Result<watcher::Event<Lease>, watcher::Error>>,
{
    futures::pin_mut!(events);
    let mut relist = Relist::default();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(lease)) => {
                if let Some(key) = LeaseKey::of_lease(&lease) {
                    renewals.watched(&key, &lease, now());
                    own_writes.observed(&key);
                    queue.add(key);
                }
            }
            Ok(watcher::Event::Delete(lease)) => {
                if let Some(key) = LeaseKey::of_lease(&lease) {
                    renewals.deleted(&key);
                    own_writes.observed(&key);
                    queue.add(key);
                }
            }
            Ok(watcher::Event::Init) => {
                relist.start(store.state().iter().map(|l| LeaseKey::of_lease(l)));
            }
            Ok(watcher::Event::InitApply(lease)) => {
                let key = LeaseKey::of_lease(&lease);
                if let Some(key) = &key {
                    renewals.listed(key, &lease);
                }
                relist.add(key);
            }
            Ok(watcher::Event::InitDone) => {
                own_writes.relisted();
                relist.finish(queue);
            }
            Err(error) => tracing::warn!(%error, "watching Leases"),
        }
    }
}

/// When this controller watched each Lease's current renewal (holder and `renewTime`) arrive, by
/// its own clock, and who released it when that renewal is a release: what
/// `LeaseRecord::observed_renewal`, `LeaseRecord::released_by` and `LeaseRecord::released_for` are
/// filled from. Expiry is judged from the moment of observation as client-go does, not only from
/// the holder's timestamps; a releaser must show it lives before it is elected again
/// (`conclave_core::plan::liveness_since`).
#[derive(Debug, Default)]
pub struct Renewals(Mutex<HashMap<LeaseKey, Renewal>>);

/// One Lease's current renewal: when it was watched arriving (`None`: listed, not watched);
/// whether it is the first of its holder (an acquisition, or listed); how long after the same
/// holder's previous watched renewal (`None`: not both watched, or the previous one was the
/// acquisition, which a controller's take-over writes at any point of the holder's period); its
/// latest `preferredHolder`; the holder whose watched write cleared `holderIdentity` unasked
/// (`None`: held, asked to step down, or release not watched); and the candidate a pre-empted
/// holder released it for (`None`: held, released unasked, or release not watched).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Renewal {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    seen_at: Option<Timestamp>,
    first_of_holder: bool,
    period: Option<Duration>,
    preferred: Option<String>,
    released_by: Option<String>,
    released_for: Option<String>,
}

impl Renewal {
    fn is(&self, holder: Option<&str>, renew_time: Option<Timestamp>) -> bool {
        self.holder.as_deref() == holder && self.renew_time == renew_time
    }

    /// What a next renewal that clears the holder means: who released the Lease unasked (this
    /// renewal's holder, unless a `preferredHolder` named someone else) and for whom (that
    /// `preferredHolder`, who asked the holder to step down). For a Lease already free, what its
    /// release meant before.
    fn release(&self) -> (Option<String>, Option<String>) {
        let Some(holder) = named(self.holder.as_deref()) else {
            return (self.released_by.clone(), self.released_for.clone());
        };
        match named(self.preferred.as_deref()) {
            Some(preferred) if preferred != holder => (None, Some(preferred.to_owned())),
            _ => (Some(holder.to_owned()), None),
        }
    }
}

/// A holder identity, with absent and empty alike.
fn named(holder: Option<&str>) -> Option<&str> {
    holder.filter(|h| !h.is_empty())
}

impl Renewals {
    /// A watch event delivered `lease` at `now`: a new renewal is timed now; any other change
    /// (a `preferredHolder`, a strategy) keeps the time of the renewal it carries. A renewal that
    /// clears the holder records who held the Lease before it, unless a `preferredHolder` had
    /// asked that holder to step down (a pre-empted instance stays a follower, KEP-5366, and the
    /// one it made way for is elected anyway).
    pub fn watched(&self, key: &LeaseKey, lease: &Lease, now: Timestamp) {
        let (holder, renew_time) = Self::renewal_of(lease);
        let preferred = lease.spec.as_ref().and_then(|s| s.preferred_holder.clone());
        let mut renewals = lock(&self.0);
        if let Some(same) = renewals
            .get_mut(key)
            .filter(|r| r.is(holder.as_deref(), renew_time))
        {
            same.preferred = preferred;
            return;
        }
        let previous = renewals.get(key);
        let (released_by, released_for) = match named(holder.as_deref()) {
            Some(_) => (None, None),
            None => previous.map_or((None, None), Renewal::release),
        };
        let same_holder =
            previous.filter(|p| named(p.holder.as_deref()).is_some() && p.holder == holder);
        let period = same_holder
            .filter(|p| !p.first_of_holder)
            .and_then(|p| p.seen_at)
            .map(|seen| seen.elapsed_at(now));
        let first_of_holder = same_holder.is_none();
        renewals.insert(
            key.clone(),
            Renewal {
                holder,
                renew_time,
                seen_at: Some(now),
                first_of_holder,
                period,
                preferred,
                released_by,
                released_for,
            },
        );
    }

    /// A relist delivered `lease`: a renewal already watched keeps its time and releaser, a new one
    /// gets neither (it arrived while the watch was down, at an unknown moment, from an unknown
    /// writer).
    pub fn listed(&self, key: &LeaseKey, lease: &Lease) {
        let (holder, renew_time) = Self::renewal_of(lease);
        let mut renewals = lock(&self.0);
        let preferred = lease.spec.as_ref().and_then(|s| s.preferred_holder.clone());
        match renewals.get_mut(key) {
            Some(renewal) if renewal.is(holder.as_deref(), renew_time) => {
                renewal.preferred = preferred;
            }
            _ => {
                renewals.insert(
                    key.clone(),
                    Renewal {
                        holder,
                        renew_time,
                        seen_at: None,
                        first_of_holder: true,
                        period: None,
                        preferred,
                        released_by: None,
                        released_for: None,
                    },
                );
            }
        }
    }

    /// The Lease was deleted.
    pub fn deleted(&self, key: &LeaseKey) {
        lock(&self.0).remove(key);
    }

    /// Fills in what this controller watched of the renewal `record` carries: when it arrived
    /// (`observed_renewal`), how long after the same holder's previous one (`renew_period`) and,
    /// for a release, who released it unasked (`released_by`) or for whom (`released_for`). None
    /// is known when the record is not the renewal last watched (a newer write of this
    /// controller's own).
    pub fn annotate(&self, key: &LeaseKey, record: &mut LeaseRecord) {
        let renewals = lock(&self.0);
        let Some(renewal) = renewals
            .get(key)
            .filter(|r| r.is(record.holder_identity.as_deref(), record.renew_time))
        else {
            record.observed_renewal = None;
            record.renew_period = None;
            record.released_by = None;
            record.released_for = None;
            return;
        };
        record.observed_renewal = renewal.seen_at;
        record.renew_period = renewal.period;
        record.released_by = renewal.released_by.clone();
        record.released_for = renewal.released_for.clone();
    }

    fn renewal_of(lease: &Lease) -> (Option<String>, Option<Timestamp>) {
        let spec = lease.spec.as_ref();
        (
            spec.and_then(|s| s.holder_identity.clone()),
            spec.and_then(|s| s.renew_time.as_ref())
                .map(|t| timestamp(t.0)),
        )
    }
}

/// Applies LeaseCandidate watch events to the candidate index and the ping record and enqueues
/// the keys of their Leases, until the stream ends. `store` is the reflector store the events
/// were applied to.
pub async fn candidates<S>(
    events: S,
    store: &Store<LeaseCandidate>,
    index: &Mutex<CandidateIndex>,
    pings: &Pings,
    queue: &WorkQueue,
) where
    S: Stream<Item = Result<watcher::Event<LeaseCandidate>, watcher::Error>>,
{
    futures::pin_mut!(events);
    let mut relist = Relist::default();
    while let Some(event) = events.next().await {
        let (candidate, relisted) = match event {
            Ok(watcher::Event::Apply(c)) => {
                lock(index).watched(&c, now());
                (c, false)
            }
            Ok(watcher::Event::Delete(c)) => {
                lock(index).deleted(&c);
                (c, false)
            }
            Ok(watcher::Event::InitApply(c)) => (c, true),
            Ok(watcher::Event::Init) => {
                relist.start(store.state().iter().map(|c| LeaseKey::of_candidate(c)));
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                lock(index).rebuild(&store.state());
                relist.finish(queue);
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "watching LeaseCandidates");
                continue;
            }
        };
        pings.observe(&candidate);
        if ping_outstanding(&candidate) {
            continue;
        }
        let key = LeaseKey::of_candidate(&candidate);
        if relisted {
            relist.add(key);
        } else if let Some(key) = key {
            queue.add(key);
        }
    }
}

/// Whether a ping written to the candidate is still unanswered (the write was our own; its ack
/// will trigger the election again, as upstream).
fn ping_outstanding(candidate: &LeaseCandidate) -> bool {
    let Some(spec) = candidate.spec.as_ref() else {
        return false;
    };
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => renew.0 < ping.0,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The Lease keys of a relist in progress. kube-rs's reflector swaps the relisted objects into the
/// store only at `InitDone`, so a key enqueued at `InitApply` could be reconciled against the old
/// store and the change missed; and an object deleted while the watch was down gets no event at
/// all. So the keys of the old store and of every relisted object are enqueued at `InitDone`.
#[derive(Default)]
struct Relist(HashSet<LeaseKey>);

impl Relist {
    /// A relist begins; `previous` are the keys the store holds until it completes.
    fn start(&mut self, previous: impl Iterator<Item = Option<LeaseKey>>) {
        self.0.clear();
        self.0.extend(previous.flatten());
    }

    fn add(&mut self, key: Option<LeaseKey>) {
        self.0.extend(key);
    }

    /// The store now holds the relisted objects: enqueue every key seen.
    fn finish(&mut self, queue: &WorkQueue) {
        for key in self.0.drain() {
            queue.add(key);
        }
    }
}

/// Which cached candidates belong to which Lease, so a step reads its Lease's candidates without
/// scanning every cached candidate. [`candidates`] updates it after the store and before it
/// enqueues the event's Lease key; a step that runs in between reads one event late and is
/// followed by the step that key triggers.
///
/// It also keeps when each candidate was first watched arriving (by the controller's clock), so
/// that the first election of a Lease can wait for a batch of candidates to finish arriving
/// (`conclave_core::step::Arrivals`).
#[derive(Default)]
pub struct CandidateIndex {
    /// Lease -> names of its candidates (in the Lease's namespace).
    by_lease: HashMap<LeaseKey, HashSet<String>>,
    /// Candidate -> its Lease.
    lease_of: HashMap<CandidateKey, LeaseKey>,
    /// Candidate -> when a watch event first delivered it (not a list: candidates listed at start
    /// arrived at an unknown time, long ago as far as an election is concerned).
    arrived: HashMap<CandidateKey, Timestamp>,
}

impl CandidateIndex {
    /// A watch event delivered the candidate at `now`: recorded, and its arrival too if it is new.
    fn watched(&mut self, candidate: &LeaseCandidate, now: Timestamp) {
        self.apply(candidate);
        if let Some(id) = CandidateKey::of(candidate) {
            self.arrived.entry(id).or_insert(now);
        }
    }

    /// When the first and the last of `lease`'s candidates that were watched arriving arrived;
    /// `None` when none was.
    #[must_use]
    pub fn arrivals(&self, lease: &LeaseKey) -> Option<conclave_core::step::Arrivals> {
        let names = self.by_lease.get(lease)?;
        let times = names.iter().filter_map(|name| {
            self.arrived
                .get(&CandidateKey::new(&lease.namespace, name))
                .copied()
        });
        times.fold(None, |span, at| {
            Some(match span {
                None => conclave_core::step::Arrivals {
                    first: at,
                    last: at,
                },
                Some(span) => conclave_core::step::Arrivals {
                    first: span.first.min(at),
                    last: span.last.max(at),
                },
            })
        })
    }

    /// Records the candidate as it is now (its Lease may have changed).
    fn apply(&mut self, candidate: &LeaseCandidate) {
        self.remove(candidate);
        let (Some(id), Some(lease)) = (
            CandidateKey::of(candidate),
            LeaseKey::of_candidate(candidate),
        ) else {
            return;
        };
        self.by_lease
            .entry(lease.clone())
            .or_default()
            .insert(id.name.clone());
        self.lease_of.insert(id, lease);
    }

    /// Forgets the candidate (a deletion).
    fn deleted(&mut self, candidate: &LeaseCandidate) {
        self.remove(candidate);
        if let Some(id) = CandidateKey::of(candidate) {
            self.arrived.remove(&id);
        }
    }

    /// Takes the candidate out of the Lease it was indexed under.
    fn remove(&mut self, candidate: &LeaseCandidate) {
        let Some(id) = CandidateKey::of(candidate) else {
            return;
        };
        let Some(lease) = self.lease_of.remove(&id) else {
            return;
        };
        if let Some(names) = self.by_lease.get_mut(&lease) {
            names.remove(&id.name);
            if names.is_empty() {
                self.by_lease.remove(&lease);
            }
        }
    }

    /// Rebuilds the index from a whole store (after a relist); arrivals of candidates no longer
    /// there are forgotten.
    fn rebuild(&mut self, candidates: &[Arc<LeaseCandidate>]) {
        self.by_lease.clear();
        self.lease_of.clear();
        for candidate in candidates {
            self.apply(candidate);
        }
        let lease_of = &self.lease_of;
        self.arrived.retain(|id, _| lease_of.contains_key(id));
    }

    /// The names of the candidates of `lease`.
    #[must_use]
    pub fn names(&self, lease: &LeaseKey) -> Vec<String> {
        self.by_lease
            .get(lease)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Pings sent and not answered yet, to count acks (`conclave_pings_acked`).
pub struct Pings {
    /// Candidate -> the ping time written, in µs.
    pending: Mutex<HashMap<CandidateKey, i64>>,
    acked: Counter,
}

impl Pings {
    /// An empty record that counts answered pings on `acked`.
    #[must_use]
    pub fn new(acked: Counter) -> Self {
        Self {
            pending: Mutex::default(),
            acked,
        }
    }

    /// A ping with `pingTime = at` was written to `candidate`.
    pub fn sent(&self, candidate: CandidateKey, at: Timestamp) {
        lock(&self.pending).insert(candidate, at.as_micros());
    }

    /// Counts an ack if `candidate` renewed at or after the ping recorded for it.
    pub fn observe(&self, candidate: &LeaseCandidate) {
        let Some(key) = CandidateKey::of(candidate) else {
            return;
        };
        let Some(renew) = candidate.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else {
            return;
        };
        let renew = timestamp(renew.0).as_micros();
        let mut pending = lock(&self.pending);
        if pending.get(&key).is_some_and(|&ping| renew >= ping) {
            pending.remove(&key);
            self.acked.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_core::k8s::micro_time;
    use futures::stream;
    use k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector;
    use std::collections::BTreeSet;

    fn lease(namespace: &str, name: &str, version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    fn candidate(namespace: &str, name: &str, lease: &str) -> LeaseCandidate {
        LeaseCandidate {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseCandidateSpec {
                lease_name: lease.into(),
                ..LeaseCandidateSpec::default()
            }),
        }
    }

    /// `candidate` with `renewTime` and `pingTime` at these seconds.
    fn timed(mut c: LeaseCandidate, renew: Option<i64>, ping: Option<i64>) -> LeaseCandidate {
        let spec = c.spec.as_mut().expect("spec");
        spec.renew_time = renew.map(|s| micro_time(Timestamp::from_secs(s)));
        spec.ping_time = ping.map(|s| micro_time(Timestamp::from_secs(s)));
        c
    }

    fn key(namespace: &str, name: &str) -> LeaseKey {
        LeaseKey::new(namespace, name)
    }

    /// Every key the queue hands out now, each marked done.
    async fn drain(queue: &WorkQueue) -> BTreeSet<LeaseKey> {
        let mut keys = BTreeSet::new();
        while !queue.is_empty() {
            let item = queue.next().await.expect("queue open");
            keys.insert(item.key.clone());
            queue.done(item);
        }
        keys
    }

    #[tokio::test]
    async fn lease_events_enqueue_their_keys_and_end_read_your_writes() {
        let own = Arc::new(OwnWrites::default());
        own.begin(key("ns", "a")).succeeded(&lease("ns", "a", "5"));
        own.begin(key("ns", "b")).succeeded(&lease("ns", "b", "6"));
        let (store, writer) = reflector::store();
        let queue = WorkQueue::default();
        let events = vec![
            watcher::Event::Apply(lease("ns", "a", "7")),
            watcher::Event::Delete(lease("ns", "c", "8")),
        ];
        leases(
            reflector::reflector(writer, stream::iter(events.into_iter().map(Ok))),
            &store,
            &own,
            &Renewals::default(),
            &queue,
        )
        .await;
        assert_eq!(drain(&queue).await, [key("ns", "a"), key("ns", "c")].into());
        assert!(
            own.get(&key("ns", "a")).is_none(),
            "its watch event arrived"
        );
        assert!(own.get(&key("ns", "b")).is_some(), "no event of b yet");
    }

    #[tokio::test]
    async fn a_relist_enqueues_the_old_and_the_relisted_keys_once_the_store_holds_them() {
        let own = Arc::new(OwnWrites::default());
        let (store, writer) = reflector::store();
        let queue = WorkQueue::default();
        // `gone` was cached, then deleted while the watch was down: the relist does not list it.
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(lease("ns", "gone", "1")),
            watcher::Event::InitDone,
            watcher::Event::Init,
            watcher::Event::InitApply(lease("ns", "a", "2")),
            watcher::Event::InitApply(lease("ns", "b", "3")),
            watcher::Event::InitDone,
        ];
        let mut seen = Vec::new();
        let stream = reflector::reflector(writer, stream::iter(events.into_iter().map(Ok)))
            .inspect(|event| {
                if let Ok(watcher::Event::InitDone) = event {
                    seen.push(queue.len());
                }
            });
        own.begin(key("ns", "a")).succeeded(&lease("ns", "a", "0"));
        leases(stream, &store, &own, &Renewals::default(), &queue).await;
        assert_eq!(seen, [0, 1], "nothing is enqueued before a relist is done");
        assert_eq!(
            drain(&queue).await,
            [key("ns", "a"), key("ns", "b"), key("ns", "gone")].into()
        );
        assert!(
            own.get(&key("ns", "a")).is_none(),
            "a relist ends every kept write"
        );
        assert_eq!(store.state().len(), 2);
    }

    #[tokio::test]
    async fn candidate_events_index_ack_and_enqueue_their_lease() {
        let (store, writer) = reflector::store();
        let queue = WorkQueue::default();
        let index = Mutex::new(CandidateIndex::default());
        let acked = Counter::default();
        let pings = Pings::new(acked.clone());
        pings.sent(CandidateKey::new("ns", "c1"), Timestamp::from_secs(100));
        pings.sent(CandidateKey::new("ns", "c2"), Timestamp::from_secs(100));
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(timed(candidate("ns", "c1", "l"), Some(50), Some(100))),
            watcher::Event::InitDone,
            // c1 answers its ping: an ack, and its Lease is enqueued.
            watcher::Event::Apply(timed(candidate("ns", "c1", "l"), Some(101), Some(100))),
            // c2 is pinged and has not answered: nothing to do until it does.
            watcher::Event::Apply(timed(candidate("ns", "c2", "m"), Some(50), Some(100))),
            // c3 joins Lease l and leaves it.
            watcher::Event::Apply(candidate("ns", "c3", "l")),
            watcher::Event::Delete(candidate("ns", "c3", "l")),
        ];
        candidates(
            reflector::reflector(writer, stream::iter(events.into_iter().map(Ok))),
            &store,
            &index,
            &pings,
            &queue,
        )
        .await;
        assert_eq!(acked.get(), 1, "only c1 acked");
        assert_eq!(drain(&queue).await, [key("ns", "l")].into());
        let index = lock(&index);
        assert_eq!(index.names(&key("ns", "l")), ["c1"]);
        assert_eq!(index.names(&key("ns", "m")), ["c2"]);
    }

    fn names(index: &CandidateIndex, key: &LeaseKey) -> Vec<String> {
        let mut names = index.names(key);
        names.sort();
        names
    }

    #[test]
    fn index_follows_applies_moves_and_deletes() {
        let mut index = CandidateIndex::default();
        index.apply(&candidate("a", "c1", "l"));
        index.apply(&candidate("a", "c2", "l"));
        index.apply(&candidate("b", "c1", "l"));
        assert_eq!(names(&index, &key("a", "l")), ["c1", "c2"]);
        assert_eq!(
            names(&index, &key("b", "l")),
            ["c1"],
            "namespaces are kept apart"
        );

        index.apply(&candidate("a", "c2", "other"));
        assert_eq!(
            names(&index, &key("a", "l")),
            ["c1"],
            "a candidate that moved leaves"
        );
        assert_eq!(names(&index, &key("a", "other")), ["c2"]);

        index.remove(&candidate("a", "c1", "l"));
        assert!(names(&index, &key("a", "l")).is_empty());
        assert!(
            !index.by_lease.contains_key(&key("a", "l")),
            "empty entries are dropped"
        );
        index.remove(&candidate("a", "unknown", "l"));
        assert_eq!(names(&index, &key("b", "l")), ["c1"]);
    }

    #[test]
    fn index_ignores_candidates_without_a_lease_and_rebuilds_from_a_store() {
        let mut index = CandidateIndex::default();
        index.apply(&candidate("a", "c1", ""));
        assert!(index.by_lease.is_empty() && index.lease_of.is_empty());

        index.apply(&candidate("a", "gone", "l"));
        index.rebuild(&[
            Arc::new(candidate("a", "c1", "l")),
            Arc::new(candidate("a", "c3", "m")),
        ]);
        assert_eq!(
            names(&index, &key("a", "l")),
            ["c1"],
            "the relisted store replaces the index"
        );
        assert_eq!(names(&index, &key("a", "m")), ["c3"]);
        assert_eq!(index.lease_of.len(), 2);
    }

    fn renewed(mut lease: Lease, holder: &str, renew: i64) -> Lease {
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(holder.into());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            jiff::Timestamp::from_second(renew).unwrap(),
        ));
        lease
    }

    /// The record of `lease` as this controller's watch annotates it.
    fn annotated_record(renewals: &Renewals, k: &LeaseKey, lease: &Lease) -> LeaseRecord {
        let mut record = conclave_core::k8s::lease_record(lease);
        renewals.annotate(k, &mut record);
        record
    }

    /// `record` as this controller's watch annotates it: (observed renewal, releaser).
    fn annotated(
        renewals: &Renewals,
        k: &LeaseKey,
        lease: &Lease,
    ) -> (Option<Timestamp>, Option<String>) {
        let record = annotated_record(renewals, k, lease);
        (record.observed_renewal, record.released_by)
    }

    /// The candidate `record` was released for, as this controller's watch annotates it.
    fn handed_to(renewals: &Renewals, k: &LeaseKey, lease: &Lease) -> Option<String> {
        annotated_record(renewals, k, lease).released_for
    }

    #[test]
    fn a_watched_renewal_is_timed_when_it_arrives_and_other_changes_keep_that_time() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let first = renewed(lease("ns", "a", "1"), "x", 50);
        renewals.listed(&k, &first);
        assert_eq!(
            annotated(&renewals, &k, &first),
            (None, None),
            "listed, not watched"
        );

        let second = renewed(lease("ns", "a", "2"), "x", 60);
        renewals.watched(&k, &second, Timestamp::from_secs(100));
        let at_100 = (Some(Timestamp::from_secs(100)), None);
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        // The controller sets preferredHolder: same renewal, same time.
        let mut preempted = renewed(lease("ns", "a", "3"), "x", 60);
        preempted.spec.as_mut().unwrap().preferred_holder = Some("y".into());
        renewals.watched(&k, &preempted, Timestamp::from_secs(105));
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        // A relist of the same renewal keeps it; a record of another renewal has no time.
        renewals.listed(&k, &preempted);
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        let other = renewed(lease("ns", "a", "4"), "x", 70);
        assert_eq!(annotated(&renewals, &k, &other), (None, None));
        renewals.deleted(&k);
        assert_eq!(annotated(&renewals, &k, &second), (None, None));
    }

    #[test]
    fn a_holder_s_renewal_period_is_timed_between_its_watched_renewals() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let period = |lease: &Lease| annotated_record(&renewals, &k, lease).renew_period;
        let mut version = 0;
        let mut watch = |holder: &str, renew: i64, seen: i64| {
            version += 1;
            let lease = renewed(lease("ns", "a", &version.to_string()), holder, renew);
            renewals.watched(&k, &lease, Timestamp::from_secs(seen));
            lease
        };
        renewals.listed(&k, &renewed(lease("ns", "a", "0"), "x", 50));
        let first = watch("x", 60, 61);
        assert_eq!(
            period(&first),
            None,
            "the previous renewal was listed, not watched"
        );
        let second = watch("x", 70, 72);
        assert_eq!(
            period(&second),
            Some(Duration::from_secs(11)),
            "timed by this controller's clock, between the two arrivals"
        );
        let mut preempted = second.clone();
        preempted.spec.as_mut().unwrap().preferred_holder = Some("y".into());
        renewals.watched(&k, &preempted, Timestamp::from_secs(75));
        assert_eq!(
            period(&preempted),
            Some(Duration::from_secs(11)),
            "a preferredHolder is no renewal"
        );

        let acquired = watch("y", 80, 80);
        assert_eq!(period(&acquired), None, "another holder");
        let first_renewal = watch("y", 83, 83);
        assert_eq!(
            period(&first_renewal),
            None,
            "timed from the acquisition, which a take-over may have written at any point of \
             the holder's period"
        );
        let renewal = watch("y", 93, 93);
        assert_eq!(period(&renewal), Some(Duration::from_secs(10)));
        let released = watch("", 95, 95);
        assert_eq!(period(&released), None, "a release");
    }

    /// The demo's failure in CI: the leaver's LeaseCandidate deletion arrived after its release,
    /// and without knowing who released, the controller wrote the leaver back as holder.
    #[test]
    fn a_watched_release_names_the_holder_that_let_go_until_someone_holds_the_lease() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        renewals.watched(
            &k,
            &renewed(lease("ns", "a", "1"), "x", 50),
            Timestamp::from_secs(50),
        );
        let released = renewed(lease("ns", "a", "2"), "", 55);
        renewals.watched(&k, &released, Timestamp::from_secs(56));
        assert_eq!(
            annotated(&renewals, &k, &released),
            (Some(Timestamp::from_secs(56)), Some("x".into()))
        );
        assert_eq!(handed_to(&renewals, &k, &released), None, "unasked");
        // Another write that keeps it free (a strategy change, a second release) keeps the name.
        let rewritten = renewed(lease("ns", "a", "3"), "", 57);
        renewals.watched(&k, &rewritten, Timestamp::from_secs(58));
        assert_eq!(annotated(&renewals, &k, &rewritten).1.as_deref(), Some("x"));
        // Held again: nobody released it.
        let taken = renewed(lease("ns", "a", "4"), "y", 59);
        renewals.watched(&k, &taken, Timestamp::from_secs(59));
        assert_eq!(annotated(&renewals, &k, &taken).1, None);
        // Asked to step down for someone else, then released: not a leaver.
        let mut asked = renewed(lease("ns", "a", "5"), "y", 59);
        asked.spec.as_mut().unwrap().preferred_holder = Some("z".into());
        renewals.watched(&k, &asked, Timestamp::from_secs(60));
        let made_way = renewed(lease("ns", "a", "6"), "", 61);
        renewals.watched(&k, &made_way, Timestamp::from_secs(61));
        assert_eq!(
            annotated(&renewals, &k, &made_way),
            (Some(Timestamp::from_secs(61)), None)
        );
        assert_eq!(
            handed_to(&renewals, &k, &made_way).as_deref(),
            Some("z"),
            "released for the candidate that pre-empted it"
        );
        let again = renewed(lease("ns", "a", "7"), "", 62);
        renewals.watched(&k, &again, Timestamp::from_secs(62));
        assert_eq!(
            handed_to(&renewals, &k, &again).as_deref(),
            Some("z"),
            "another write that keeps it free keeps the successor"
        );
        let held = renewed(lease("ns", "a", "8"), "z", 63);
        renewals.watched(&k, &held, Timestamp::from_secs(63));
        assert_eq!(handed_to(&renewals, &k, &held), None, "held again");
        // A release seen only in a relist has no known releaser.
        let fresh = Renewals::default();
        fresh.listed(&k, &released);
        assert_eq!(annotated(&fresh, &k, &released), (None, None));
    }
}
