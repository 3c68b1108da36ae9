//! From watch events to work: [`leases`] and [`candidates`] take a stream of watch events and
//! apply each to the controller's in-memory state (the Lease cache in [`Renewals`]; candidates are
//! already applied to their reflector's store), the own-write record, the candidate index and the
//! ping record, then enqueue the Lease keys the event concerns. They hold no client: a test feeds
//! them a `Vec` of events and looks at the queue, with no server.
//!
//! The rules, in the order an event meets them:
//! - a relist (at start, or after a 410) enqueues its keys only once the store holds the relisted
//!   objects (`Relist`), and every key the store held before it, so a Lease deleted while the
//!   watch was down is reconciled too;
//! - a Lease event ends read-your-writes for that Lease ([`OwnWrites::observed`]), a relist for
//!   every Lease; a watched renewal is timed by the controller's clock ([`Renewals`]) before its
//!   key is enqueued;
//! - a renewal that decides nothing ([`Watched::Renewal`]: the same holder renewed a Lease whose
//!   last step found it settled, and nothing else changed) enqueues nothing: it only re-arms the
//!   Lease's timer, as the step it would trigger would (issue 31);
//! - a candidate event updates the index before its key is enqueued, so the step it triggers finds
//!   the candidate; a renewal answering a recorded ping counts an ack ([`Pings::observe`]);
//! - a candidate with a ping outstanding enqueues nothing: its ack will.

use super::clock::instant_at;
use super::key::{CandidateKey, LeaseKey};
use super::own_writes::OwnWrites;
use super::queue::WorkQueue;
use super::sync::lock;
use super::wire::Cached;
use conclave_core::k8s::{now, timestamp};
use conclave_core::lease::{LeaseRecord, SitOut};
use conclave_core::memory::LeaseMemory;
pub use conclave_core::memory::Watched;
use conclave_core::time::Timestamp;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use prometheus_client::metrics::counter::Counter;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Applies the events of the Lease watch of `namespace` (`None`: every namespace) to the cache
/// and renewal times ([`Renewals`]) and the own-write record and enqueues their keys, until the
/// stream ends. `listed` turns true once the first list is in the cache.
pub async fn leases<S>(
    events: S,
    namespace: Option<&str>,
    own_writes: &OwnWrites,
    renewals: &Renewals,
    queue: &WorkQueue,
    listed: &tokio::sync::watch::Sender<bool>,
) where
    S: Stream<Item = Result<watcher::Event<Cached<Lease>>, watcher::Error>>,
{
    futures::pin_mut!(events);
    let mut relist = Relist::default();
    let mut relisted = HashSet::new();
    let mut first_list = true;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(lease)) => {
                if let Some(key) = LeaseKey::of_lease(&lease) {
                    let watched = renewals.watched(&key, &lease.0, now());
                    own_writes.observed(&key);
                    match watched {
                        Watched::Elect => queue.add(key),
                        Watched::Renewal { recheck_at } => {
                            queue.renewed(key, recheck_at.map(instant_at));
                        }
                    }
                }
            }
            Ok(watcher::Event::Delete(lease)) => {
                if let Some(key) = LeaseKey::of_lease(&lease) {
                    renewals.deleted(&key, &lease, now());
                    own_writes.observed_deletion(&key);
                    queue.add(key);
                }
            }
            Ok(watcher::Event::Init) => {
                relisted.clear();
                relist.start(renewals.keys_in(namespace));
            }
            Ok(watcher::Event::InitApply(lease)) => {
                if let Some(key) = LeaseKey::of_lease(&lease) {
                    renewals.listed(&key, &lease.0, now());
                    relisted.insert(key.clone());
                    relist.add(key);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if first_list {
                    renewals.first_listed(namespace, now());
                    first_list = false;
                }
                renewals.relisted(namespace, &relisted, now());
                own_writes.relisted();
                relist.finish(queue);
                listed.send_replace(true);
            }
            Err(error) => tracing::warn!(%error, "watching Leases"),
        }
    }
}

/// The watched Leases, as last watched or listed (the cache a step reads, [`Renewals::lease`]),
/// each with what this controller remembers of it ([`LeaseMemory`], in `conclave-core`, where the
/// model checks it too): whether its last step found it settled, when this controller watched its
/// current renewal (holder and `renewTime`) arrive, by its own clock, and who released it when
/// that renewal is a release (what `LeaseRecord::observed_renewal`, `LeaseRecord::released_by`
/// and `LeaseRecord::released_for` are filled from), until when its holder may still lead after
/// its deletion, and which candidates sit out its elections. Expiry is judged from the moment of
/// observation as client-go does, not only from the holder's timestamps.
///
/// A thin keyed map: each rule lives in [`LeaseMemory`], and a Kubernetes Lease is read there in
/// place (`conclave_core::memory::SeenLease`), so that a renewal that decides nothing builds no
/// record of it (issue 31).
#[derive(Debug, Default)]
pub struct Renewals(Mutex<RenewalsState>);

#[derive(Debug, Default)]
struct RenewalsState {
    /// Every Lease this controller remembers something of: the cache a step reads, with what this
    /// controller saw of its renewal, in one entry, so that a renewal costs one lookup; and a
    /// Lease deleted while held, or with candidates sitting out, after it left the cache.
    leases: HashMap<LeaseKey, Remembered>,
    /// How long a Lease this controller has not seen since it started counts as possibly held
    /// ([`Renewals::with_start_hold`]).
    start_hold: Duration,
    /// For the scope of each watch (a namespace, `None`: every namespace), until when a Lease of
    /// that scope missing from its first list, and not seen since, counts as possibly held.
    unseen_held_until: Vec<(Option<String>, Timestamp)>,
}

/// One Lease: the object as last watched or listed (`None` while it is not cached: deleted, or
/// missing from a relist) and what this controller remembers of it; the object is cached exactly
/// when [`LeaseMemory::is_cached`].
#[derive(Debug, Default)]
struct Remembered {
    lease: Option<Arc<Lease>>,
    memory: LeaseMemory,
}

impl Remembered {
    /// A watch event delivered `lease` at `now`: cached ([`keep_renewed`]) and remembered.
    fn watched(&mut self, lease: &Arc<Lease>, now: Timestamp) -> Watched {
        match self.lease.as_mut() {
            Some(cached) => keep_renewed(cached, lease),
            None => self.lease = Some(Arc::clone(lease)),
        }
        self.memory.watched(&**lease, now)
    }
}

/// Makes `cached` the `watched` Lease. When the two differ only by a renewal (`renewTime` and
/// `resourceVersion`, [`only_renewed`]) and no step holds `cached`, that renewal is copied into
/// `cached` and the decoded `watched` is left to be freed; otherwise `cached` becomes `watched`.
///
/// Either way the cache holds the same object. At 10,000 Leases renewed every 2 s, freeing the
/// object replaced was about a fifth of the controller's CPU (issue 31: `perf`): its dozen
/// allocations were made 2 s earlier and have left the CPU caches, so each free misses, and the
/// next decoding reuses that cold memory. Kept in place, the old object has two fields written,
/// and the one just decoded is freed while its memory is still in cache, for the next event.
fn keep_renewed(cached: &mut Arc<Lease>, watched: &Arc<Lease>) {
    match Arc::get_mut(cached).filter(|kept| only_renewed(kept, watched)) {
        Some(kept) => {
            if let (Some(kept), Some(spec)) = (kept.spec.as_mut(), watched.spec.as_ref()) {
                kept.renew_time.clone_from(&spec.renew_time);
            }
            kept.metadata
                .resource_version
                .clone_from(&watched.metadata.resource_version);
        }
        None => *cached = Arc::clone(watched),
    }
}

/// Whether `watched` is `cached` but for `renewTime` and `resourceVersion`: every other field
/// compared, named one by one so that a field added to `ObjectMeta` or `LeaseSpec` later does not
/// compile until it is compared here (or said not to matter).
fn only_renewed(cached: &Lease, watched: &Lease) -> bool {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields,
        // Equal: both objects are filed under the key of their namespace and name.
        name: _,
        namespace: _,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = &cached.metadata;
    let meta = &watched.metadata;
    // The fields held in the objects themselves first, then those behind a pointer: the cached
    // object is 2 s old, and each of those is a cache miss.
    let same_meta = *creation_timestamp == meta.creation_timestamp
        && *generation == meta.generation
        && *uid == meta.uid
        && *annotations == meta.annotations
        && *labels == meta.labels
        && *owner_references == meta.owner_references
        && *finalizers == meta.finalizers
        && *deletion_timestamp == meta.deletion_timestamp
        && *deletion_grace_period_seconds == meta.deletion_grace_period_seconds
        && *generate_name == meta.generate_name
        && *managed_fields == meta.managed_fields
        && *self_link == meta.self_link;
    same_meta
        && match (&cached.spec, &watched.spec) {
            (Some(cached), Some(watched)) => {
                let LeaseSpec {
                    acquire_time,
                    holder_identity,
                    lease_duration_seconds,
                    lease_transitions,
                    preferred_holder,
                    renew_time: _,
                    strategy,
                } = cached;
                *lease_duration_seconds == watched.lease_duration_seconds
                    && *acquire_time == watched.acquire_time
                    && *lease_transitions == watched.lease_transitions
                    && *holder_identity == watched.holder_identity
                    && *preferred_holder == watched.preferred_holder
                    && *strategy == watched.strategy
            }
            (None, None) => true,
            _ => false,
        }
}

impl Renewals {
    /// A watch event delivered `lease` at `now`: a new renewal is timed now; any other change
    /// (a `preferredHolder`, a strategy) keeps the time of the renewal it carries
    /// ([`LeaseMemory::watched`]).
    ///
    /// Returns whether the event may change the election's outcome ([`Watched`]).
    pub fn watched(&self, key: &LeaseKey, lease: &Arc<Lease>, now: Timestamp) -> Watched {
        let mut state = lock(&self.0);
        if let Some(remembered) = state.leases.get_mut(key) {
            return remembered.watched(lease, now);
        }
        let mut remembered = Remembered::default();
        let watched = remembered.watched(lease, now);
        state.leases.insert(key.clone(), remembered);
        watched
    }

    /// The step of `key`'s Lease at hand found it settled until `until` (`None`: until an event):
    /// its holder's renewals before then decide nothing ([`Watched::Renewal`]).
    pub fn settle(&self, key: &LeaseKey, until: Option<Timestamp>) {
        if let Some(remembered) = lock(&self.0).leases.get_mut(key) {
            remembered.memory.settle(until);
        }
    }

    /// A step of `key`'s Lease begins, or found it unsettled: its holder's renewals trigger steps
    /// again.
    pub fn unsettle(&self, key: &LeaseKey) {
        if let Some(remembered) = lock(&self.0).leases.get_mut(key) {
            remembered.memory.unsettle();
        }
    }

    /// The Lease as last watched or listed.
    #[must_use]
    pub fn lease(&self, key: &LeaseKey) -> Option<Arc<Lease>> {
        lock(&self.0)
            .leases
            .get(key)
            .and_then(|remembered| remembered.lease.clone())
    }

    /// Whether `key`'s Lease, as last watched or listed, has a holder whose term has not ended at
    /// `now` by this controller's reckoning (`false` for a Lease not cached): the first half of
    /// `conclave_core::plan::leaderless` on the Lease's record as [`Renewals::annotate`] fills
    /// it in, at the cost of one lookup, for counting thousands of Leases.
    #[must_use]
    pub fn has_live_holder(&self, key: &LeaseKey, now: Timestamp) -> bool {
        lock(&self.0)
            .leases
            .get_mut(key)
            .is_some_and(|remembered| remembered.memory.has_live_holder(now))
    }

    /// The keys of the cached Leases in `namespace` (`None`: every namespace).
    fn keys_in(&self, namespace: Option<&str>) -> Vec<LeaseKey> {
        lock(&self.0)
            .leases
            .iter()
            .filter(|(key, remembered)| {
                remembered.lease.is_some() && namespace.is_none_or(|ns| key.namespace == ns)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// A relist at `now` delivered `lease`: a renewal already watched keeps its time and
    /// releaser; a new one counts as renewed when it was listed, by this controller's clock
    /// ([`LeaseMemory::listed`]).
    pub fn listed(&self, key: &LeaseKey, lease: &Arc<Lease>, now: Timestamp) {
        let mut state = lock(&self.0);
        let remembered = state.leases.entry(key.clone()).or_default();
        remembered.lease = Some(Arc::clone(lease));
        remembered.memory.listed(&**lease, now);
    }

    /// A watch event at `now` delivered the deletion of `lease`. If it was held, its holder may
    /// lead until its last renewal, as first seen by this controller, plus its duration: the
    /// Lease is not created again for anyone before then ([`Renewals::held_after_deletion`]).
    pub fn deleted(&self, key: &LeaseKey, lease: &Lease, now: Timestamp) {
        let mut state = lock(&self.0);
        let remembered = state.leases.entry(key.clone()).or_default();
        remembered.lease = None;
        remembered.memory.deleted(lease, now);
        if remembered.memory.is_empty() {
            state.leases.remove(key);
        }
    }

    /// A step at `now` held back a pre-emption of the current holder of `key`'s Lease to wait
    /// for its renewal: the first such time of this holder's tenure bounds the whole wait
    /// (`LeaseRecord::preemption_held_since`).
    pub fn preemption_held_back(&self, key: &LeaseKey, now: Timestamp) {
        if let Some(remembered) = lock(&self.0).leases.get_mut(key) {
            remembered.memory.preemption_held_back(now);
        }
    }

    /// `candidate`, written as holder of `key`'s Lease, let it expire without renewing it: it sits
    /// out the Lease's elections from `now` for
    /// [`conclave_core::plan::never_renewed_backoff`], longer each time in a row
    /// ([`LeaseMemory::sit_out`]). Returns how many times in a row, and until when.
    pub fn sit_out(&self, key: &LeaseKey, candidate: &str, now: Timestamp) -> (u32, Timestamp) {
        let mut state = lock(&self.0);
        let strikes = state
            .leases
            .entry(key.clone())
            .or_default()
            .memory
            .sit_out(candidate, now);
        (strikes.count, strikes.until)
    }

    /// A relist at `now` of the Leases in `namespace` (`None`: every namespace) is complete and
    /// listed the Leases `listed`: a Lease of that namespace this controller knew that is not
    /// among them was deleted while the watch was down (or the server lost it), and counts as
    /// deleted now, held until `now` plus its duration ([`LeaseMemory::missing_from_relist`]), so
    /// that it is not created again for someone else while its holder may still lead. Leases of
    /// other namespaces, watched by other watches, are left as they are.
    pub fn relisted(&self, namespace: Option<&str>, listed: &HashSet<LeaseKey>, now: Timestamp) {
        let mut state = lock(&self.0);
        state.leases.retain(|key, remembered| {
            if remembered.lease.is_some()
                && namespace.is_none_or(|ns| key.namespace == ns)
                && !listed.contains(key)
            {
                remembered.lease = None;
                remembered.memory.missing_from_relist(now);
            }
            !remembered.memory.is_empty()
        });
    }

    /// Renewals that count a Lease this controller has not seen since it started (missing from
    /// its first list, and not watched since) as possibly held for `hold` after that list: it
    /// may have been deleted just before, while its holder led, and nothing this process saw
    /// tells when that holder renewed last (issue 47, finding 2: a controller started after the
    /// deletion of a held Lease created it at once for someone else). `hold` is the longest
    /// lease duration such a Lease could have had.
    #[must_use]
    pub fn with_start_hold(hold: Duration) -> Self {
        Self(Mutex::new(RenewalsState {
            start_hold: hold,
            ..RenewalsState::default()
        }))
    }

    /// The first list at `now` of the Leases in `namespace` (`None`: every namespace) is
    /// complete: a Lease of that scope it did not show counts as possibly held until `now` plus
    /// the start hold ([`Renewals::with_start_hold`]), unless it is seen before then.
    pub fn first_listed(&self, namespace: Option<&str>, now: Timestamp) {
        let mut state = lock(&self.0);
        if !state.start_hold.is_zero() {
            let until = now + state.start_hold;
            state
                .unseen_held_until
                .push((namespace.map(str::to_owned), until));
        }
    }

    /// Until when the holder of `key`'s Lease, deleted while held, may still lead by its own
    /// reckoning; `None` when the Lease was not deleted while held, was seen again, or that time
    /// has passed at `now`. A Lease this controller has not seen since it started counts as
    /// deleted while held just before its first list ([`Renewals::first_listed`]).
    #[must_use]
    pub fn held_after_deletion(&self, key: &LeaseKey, now: Timestamp) -> Option<Timestamp> {
        let mut guard = lock(&self.0);
        let state = &mut *guard;
        let unseen = &mut state.unseen_held_until;
        let mut unseen_held_until = || {
            if unseen.is_empty() {
                return None;
            }
            unseen.retain(|(_, until)| *until > now);
            unseen
                .iter()
                .find(|(scope, _)| scope.as_deref().is_none_or(|ns| ns == key.namespace))
                .map(|(_, until)| *until)
        };
        let Some(remembered) = state.leases.get_mut(key) else {
            return unseen_held_until();
        };
        let held = remembered
            .memory
            .held_after_deletion(now, unseen_held_until);
        if remembered.memory.is_empty() {
            state.leases.remove(key);
        }
        held
    }

    /// The candidates that sit out the elections of `key`'s Lease at `now`
    /// ([`Renewals::sit_out`]). They are kept by key, not with the Lease: a deletion or a relist
    /// does not end them, so the step that creates a deleted Lease again leaves them out too
    /// (`conclave_core::step::StepInput::sitting_out`); only their time does.
    #[must_use]
    pub fn sitting_out(&self, key: &LeaseKey, now: Timestamp) -> Vec<SitOut> {
        lock(&self.0)
            .leases
            .get(key)
            .map(|remembered| remembered.memory.sitting_out(now))
            .unwrap_or_default()
    }

    /// Fills in what this controller saw of the renewal `record` carries
    /// ([`LeaseMemory::annotate`]): when it first saw it (`observed_renewal`), how long after
    /// the same holder's previous one (`renew_period`) and, for a release, who released it
    /// unasked (`released_by`) or for whom (`released_for`). A record newer than the renewal
    /// last seen (a write of this controller's own, or a read after a write conflict) was first
    /// seen `now`: its renewal counts from then, never from the holder's `renewTime` alone, and
    /// nothing else is known of it.
    pub fn annotate(&self, key: &LeaseKey, record: &mut LeaseRecord, now: Timestamp) {
        match lock(&self.0).leases.get(key) {
            Some(remembered) => remembered.memory.annotate(record, now),
            None => LeaseMemory::default().annotate(record, now),
        }
    }
}

/// Applies LeaseCandidate watch events to the candidate index and the ping record and enqueues
/// the keys of their Leases, until the stream ends. `store` is the reflector store the events
/// were applied to.
pub async fn candidates<S>(
    events: S,
    store: &Store<Cached<LeaseCandidate>>,
    index: &Mutex<CandidateIndex>,
    pings: &Pings,
    queue: &WorkQueue,
) where
    S: Stream<Item = Result<watcher::Event<Cached<LeaseCandidate>>, watcher::Error>>,
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
                relist.start(
                    store
                        .state()
                        .iter()
                        .filter_map(|c| LeaseKey::of_candidate(c)),
                );
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
        match key {
            Some(key) if relisted => relist.add(key),
            Some(key) => queue.add(key),
            None => {}
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

/// The Lease keys of a relist in progress. An object deleted while the watch was down gets no
/// event at all, and leaves the cache only once the relist is complete ([`Renewals::relisted`]
/// for Leases; kube-rs's reflector, which swaps the relisted candidates into its store only
/// then, for candidates). So the keys cached before the relist and of every relisted object are
/// enqueued at `InitDone`, when the cache holds exactly the relisted objects.
#[derive(Default)]
struct Relist(HashSet<LeaseKey>);

impl Relist {
    /// A relist begins; `previous` are the keys cached before it.
    fn start(&mut self, previous: impl IntoIterator<Item = LeaseKey>) {
        self.0.clear();
        self.0.extend(previous);
    }

    fn add(&mut self, key: LeaseKey) {
        self.0.insert(key);
    }

    /// The cache now holds the relisted objects: enqueue every key seen.
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
    fn rebuild(&mut self, candidates: &[Arc<Cached<LeaseCandidate>>]) {
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
    use crate::wire::cached_event;
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

    /// `lease` as a watch event carries it.
    fn arc(lease: &Lease) -> Arc<Lease> {
        Arc::new(lease.clone())
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
        let queue = WorkQueue::default();
        let events = vec![
            watcher::Event::Apply(lease("ns", "a", "7")),
            watcher::Event::Delete(lease("ns", "c", "8")),
        ];
        leases(
            stream::iter(events.into_iter().map(|e| Ok(cached_event(e)))),
            None,
            &own,
            &Renewals::default(),
            &queue,
            &tokio::sync::watch::Sender::new(false),
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
        let stream =
            stream::iter(events.into_iter().map(|e| Ok(cached_event(e)))).inspect(|event| {
                if let Ok(watcher::Event::InitDone) = event {
                    seen.push(queue.len());
                }
            });
        own.begin(key("ns", "a")).succeeded(&lease("ns", "a", "0"));
        let renewals = Renewals::default();
        let listed = tokio::sync::watch::Sender::new(false);
        leases(stream, Some("ns"), &own, &renewals, &queue, &listed).await;
        assert_eq!(seen, [0, 1], "nothing is enqueued before a relist is done");
        assert!(*listed.borrow(), "listed once the first relist was done");
        assert_eq!(
            drain(&queue).await,
            [key("ns", "a"), key("ns", "b"), key("ns", "gone")].into()
        );
        assert!(
            own.get(&key("ns", "a")).is_none(),
            "a relist ends every kept write"
        );
        assert_eq!(renewals.keys_in(None).len(), 2);
        assert!(renewals.lease(&key("ns", "gone")).is_none());
        assert_eq!(
            renewals
                .lease(&key("ns", "b"))
                .and_then(|l| l.metadata.resource_version.clone())
                .as_deref(),
            Some("3")
        );
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
            reflector::reflector(
                writer,
                stream::iter(events.into_iter().map(|e| Ok(cached_event(e)))),
            ),
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
            Arc::new(candidate("a", "c1", "l").into()),
            Arc::new(candidate("a", "c3", "m").into()),
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
        renewals.annotate(k, &mut record, READ_AT);
        record
    }

    /// When a step reads a record, in these tests.
    const READ_AT: Timestamp = Timestamp::from_secs(1_000);

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
        renewals.listed(&k, &arc(&first), Timestamp::from_secs(90));
        assert_eq!(
            annotated(&renewals, &k, &first),
            (Some(Timestamp::from_secs(90)), None),
            "listed, not watched: renewed when listed, by this controller's clock"
        );

        let second = renewed(lease("ns", "a", "2"), "x", 60);
        renewals.watched(&k, &arc(&second), Timestamp::from_secs(100));
        let at_100 = (Some(Timestamp::from_secs(100)), None);
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        // The controller sets preferredHolder: same renewal, same time.
        let mut preempted = renewed(lease("ns", "a", "3"), "x", 60);
        preempted.spec.as_mut().unwrap().preferred_holder = Some("y".into());
        renewals.watched(&k, &arc(&preempted), Timestamp::from_secs(105));
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        // A relist of the same renewal keeps it; a record of another renewal has no time.
        renewals.listed(&k, &arc(&preempted), Timestamp::from_secs(110));
        assert_eq!(annotated(&renewals, &k, &second), at_100);
        let other = renewed(lease("ns", "a", "4"), "x", 70);
        assert_eq!(
            annotated(&renewals, &k, &other),
            (Some(READ_AT), None),
            "a renewal not seen before counts from when it is read"
        );
        renewals.deleted(&k, &second, Timestamp::from_secs(120));
        assert_eq!(annotated(&renewals, &k, &second), (Some(READ_AT), None));
    }

    /// Review finding 2 (issue 34): after a controller start or a relist, a holder whose clock
    /// runs 8 s behind (its `renewTime` says 92 when the controller lists it at 100) must not be
    /// replaced before its 10 s Lease expires by the controller's clock: that renewal counts from
    /// the listing, as client-go counts a renewal from when it first observed it.
    #[test]
    fn a_listed_renewal_counts_from_when_it_was_listed_not_from_the_holder_s_clock() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let mut behind = renewed(lease("ns", "a", "1"), "x", 92);
        behind.spec.as_mut().unwrap().lease_duration_seconds = Some(10);
        renewals.listed(&k, &arc(&behind), Timestamp::from_secs(100));
        let record = annotated_record(&renewals, &k, &behind);
        assert!(
            !record.is_expired(Timestamp::from_secs(105)),
            "by its renewTime it expired at 102"
        );
        assert!(record.is_expired(Timestamp::from_secs(111)));
    }

    /// Review finding 1 (issue 34): a Lease deleted while held is not created again for anyone
    /// before its holder's term could have ended: its last renewal as seen, plus its duration.
    #[test]
    fn a_lease_deleted_while_held_is_held_until_its_last_renewal_expires() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let mut held = renewed(lease("ns", "a", "1"), "x", 40);
        held.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        renewals.watched(&k, &arc(&held), Timestamp::from_secs(50));
        renewals.deleted(&k, &held, Timestamp::from_secs(52));
        let until = Some(Timestamp::from_secs(65));
        assert_eq!(
            renewals.held_after_deletion(&k, Timestamp::from_secs(52)),
            until
        );
        assert_eq!(
            renewals.held_after_deletion(&k, Timestamp::from_secs(64)),
            until
        );
        assert_eq!(
            renewals.held_after_deletion(&k, Timestamp::from_secs(65)),
            None
        );
        // A renewal never seen before the deletion counts from the deletion.
        let mut unseen = renewed(lease("ns", "b", "1"), "x", 10);
        unseen.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        renewals.deleted(&key("ns", "b"), &unseen, Timestamp::from_secs(52));
        assert_eq!(
            renewals.held_after_deletion(&key("ns", "b"), Timestamp::from_secs(60)),
            Some(Timestamp::from_secs(67))
        );
        // Created again (by anyone): the deletion no longer holds it.
        renewals.deleted(&k, &held, Timestamp::from_secs(52));
        renewals.watched(
            &k,
            &arc(&renewed(lease("ns", "a", "2"), "y", 53)),
            Timestamp::from_secs(53),
        );
        assert_eq!(
            renewals.held_after_deletion(&k, Timestamp::from_secs(54)),
            None
        );
        // A free Lease deleted holds nothing.
        let free = renewed(lease("ns", "c", "1"), "", 50);
        renewals.deleted(&key("ns", "c"), &free, Timestamp::from_secs(52));
        assert_eq!(
            renewals.held_after_deletion(&key("ns", "c"), Timestamp::from_secs(52)),
            None
        );
    }

    /// Issue 31: the cache holds every Lease as last watched; a renewal and nothing else is
    /// copied into the object already cached, any other change replaces it, and so does a renewal
    /// while a step holds the cached object.
    #[test]
    fn the_cache_holds_each_watched_lease_as_watched_a_renewal_copied_in_place() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let t = Timestamp::from_secs;
        let held = |version: &str, renew: i64| {
            let mut lease = renewed(lease("ns", "a", version), "x", renew);
            lease.metadata.uid = Some("u".into());
            lease.metadata.annotations = Some([("a".into(), "1".into())].into());
            let spec = lease.spec.as_mut().unwrap();
            spec.lease_duration_seconds = Some(10);
            spec.lease_transitions = Some(1);
            lease
        };
        renewals.watched(&k, &arc(&held("1", 50)), t(50));
        // Where the cached object lives; no step holds it during the renewal.
        let first = Arc::as_ptr(&renewals.lease(&k).unwrap());
        let renewal = held("2", 52);
        renewals.watched(&k, &arc(&renewal), t(52));
        let cached = renewals.lease(&k).unwrap();
        assert_eq!(*cached, renewal, "the cache holds the renewal as watched");
        assert_eq!(
            Arc::as_ptr(&cached),
            first,
            "a renewal is copied into the object already cached"
        );
        drop(cached);

        type Change = (&'static str, fn(&mut Lease));
        let changes: [Change; 7] = [
            ("a label", |l| {
                l.metadata.labels = Some([("b".into(), "2".into())].into())
            }),
            ("an annotation", |l| {
                l.metadata.annotations = Some([("a".into(), "2".into())].into());
            }),
            ("the uid (deleted and recreated)", |l| {
                l.metadata.uid = Some("v".into())
            }),
            ("an owner", |l| {
                l.metadata.owner_references = Some(Vec::new())
            }),
            ("acquireTime", |l| {
                l.spec.as_mut().unwrap().acquire_time =
                    renewed(Lease::default(), "x", 1).spec.unwrap().renew_time;
            }),
            ("leaseTransitions", |l| {
                l.spec.as_mut().unwrap().lease_transitions = Some(2);
            }),
            ("no spec", |l| l.spec = None),
        ];
        for (at, (what, change)) in (54..).step_by(2).zip(changes) {
            let before = renewals.lease(&k).unwrap();
            let mut changed = held(&at.to_string(), at);
            change(&mut changed);
            let watched = arc(&changed);
            renewals.watched(&k, &watched, t(at));
            let cached = renewals.lease(&k).unwrap();
            assert_eq!(
                *cached, changed,
                "{what}: the cache holds the Lease as watched"
            );
            assert!(
                Arc::ptr_eq(&cached, &watched),
                "{what}: replaced, not copied into"
            );
            assert_ne!(*before, changed, "{what}");
            drop(cached);
            // Back to the first shape, for the next change.
            renewals.watched(&k, &arc(&held(&format!("{at}b"), at)), t(at));
        }

        let held_by_a_step = renewals.lease(&k).unwrap();
        let renewal = held("99", 99);
        renewals.watched(&k, &arc(&renewal), t(99));
        assert_eq!(*renewals.lease(&k).unwrap(), renewal);
        assert_ne!(
            *held_by_a_step, renewal,
            "a step's object is not changed under it: the cache takes the watched one"
        );
    }

    /// Issue 31: which Lease events decide nothing. Only a renewal of the same holder, before its
    /// Lease expired, that changes nothing else of the Lease, while its last step found it
    /// settled and the clock changed nothing since; it re-arms the timer at the new overdue time.
    #[test]
    fn only_a_renewal_of_a_settled_lease_decides_nothing() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let t = Timestamp::from_secs;
        let held = |version: &str, holder: &str, renew: i64| {
            let mut lease = renewed(lease("ns", "a", version), holder, renew);
            lease.spec.as_mut().unwrap().lease_duration_seconds = Some(10);
            lease
        };
        assert_eq!(
            renewals.watched(&k, &arc(&held("1", "x", 50)), t(50)),
            Watched::Elect
        );
        assert_eq!(
            renewals.watched(&k, &arc(&held("2", "x", 52)), t(52)),
            Watched::Elect,
            "not settled"
        );
        renewals.settle(&k, Some(t(70)));
        assert_eq!(
            renewals.watched(&k, &arc(&held("3", "x", 54)), t(54)),
            Watched::Renewal {
                recheck_at: Some(t(59))
            },
            "the holder is overdue 5 s after its renewal"
        );
        assert_eq!(
            renewals.watched(&k, &arc(&held("4", "x", 56)), t(56)),
            Watched::Renewal {
                recheck_at: Some(t(61))
            },
            "still settled"
        );
        let mut preempted = held("5", "x", 56);
        preempted.spec.as_mut().unwrap().preferred_holder = Some("y".into());
        assert_eq!(
            renewals.watched(&k, &arc(&preempted), t(57)),
            Watched::Elect
        );
        renewals.settle(&k, Some(t(70)));
        let mut renewed_preempted = held("6", "x", 58);
        renewed_preempted.spec.as_mut().unwrap().preferred_holder = Some("y".into());
        assert!(matches!(
            renewals.watched(&k, &arc(&renewed_preempted), t(58)),
            Watched::Renewal { .. }
        ));
        assert_eq!(
            renewals.watched(&k, &arc(&held("7", "x", 59)), t(59)),
            Watched::Elect,
            "preferredHolder cleared"
        );
        renewals.settle(&k, Some(t(70)));
        assert_eq!(
            renewals.watched(&k, &arc(&held("8", "y", 60)), t(60)),
            Watched::Elect,
            "another holder"
        );
        renewals.settle(&k, Some(t(90)));
        assert_eq!(
            renewals.watched(&k, &arc(&held("9", "y", 75)), t(75)),
            Watched::Elect,
            "renewed after its Lease expired (60 + 10)"
        );
        renewals.settle(&k, Some(t(80)));
        assert_eq!(
            renewals.watched(&k, &arc(&held("10", "y", 80)), t(80)),
            Watched::Elect,
            "the clock changed what the last step read"
        );
        renewals.settle(&k, None);
        renewals.unsettle(&k);
        assert_eq!(
            renewals.watched(&k, &arc(&held("11", "y", 82)), t(82)),
            Watched::Elect,
            "a step began since"
        );
    }

    /// Review finding 8 (issue 34): the first held-back pre-emption of a holder is remembered
    /// across its renewals, so the wait it bounds is not re-armed by each one; a new holder
    /// starts afresh.
    #[test]
    fn a_held_back_pre_emption_is_remembered_for_the_holder_s_tenure() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let held_since =
            |lease: &Lease| annotated_record(&renewals, &k, lease).preemption_held_since;
        let first = renewed(lease("ns", "a", "1"), "x", 50);
        renewals.watched(&k, &arc(&first), Timestamp::from_secs(50));
        assert_eq!(held_since(&first), None);
        renewals.preemption_held_back(&k, Timestamp::from_secs(51));
        renewals.preemption_held_back(&k, Timestamp::from_secs(52));
        let next = renewed(lease("ns", "a", "2"), "x", 53);
        renewals.watched(&k, &arc(&next), Timestamp::from_secs(53));
        assert_eq!(held_since(&next), Some(Timestamp::from_secs(51)));
        let other = renewed(lease("ns", "a", "3"), "y", 54);
        renewals.watched(&k, &arc(&other), Timestamp::from_secs(54));
        assert_eq!(held_since(&other), None);
    }

    /// Review finding 6 (issue 34): a holder that never renewed sits out a minute, longer each
    /// time in a row, and the records of the Lease say so until then.
    #[test]
    fn a_holder_that_never_renewed_sits_out_longer_each_time_in_a_row() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let t = Timestamp::from_secs;
        assert_eq!(renewals.sit_out(&k, "x", t(100)), (1, t(160)));
        let held = renewed(lease("ns", "a", "1"), "y", 100);
        let sitting = |at: Timestamp| {
            let mut record = conclave_core::k8s::lease_record(&held);
            renewals.annotate(&k, &mut record, at);
            record.sitting_out
        };
        assert_eq!(
            sitting(t(159)),
            [SitOut {
                candidate: "x".into(),
                until: t(160)
            }]
        );
        assert!(sitting(t(160)).is_empty(), "its time is over");
        assert_eq!(
            renewals.sit_out(&k, "x", t(170)),
            (2, t(290)),
            "again soon after"
        );
        assert_eq!(
            renewals.sit_out(&k, "x", t(2_000)),
            (1, t(2_060)),
            "long after"
        );
        assert!(sitting(t(100)).iter().all(|s| s.candidate == "x"), "only x");
        assert!(
            renewals.sit_out(&key("ns", "b"), "x", t(100)).0 == 1,
            "per Lease"
        );
    }

    /// The model check's trace with Lease deletion: a sit-out outlives the Lease it was recorded
    /// in, through its deletion and a relist that no longer lists it, so the step that creates
    /// the Lease again leaves the candidate out; only its time ends it.
    #[test]
    fn a_sit_out_outlives_the_deletion_of_its_lease() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let t = Timestamp::from_secs;
        let held = renewed(lease("ns", "a", "1"), "x", 100);
        renewals.watched(&k, &arc(&held), t(100));
        renewals.sit_out(&k, "x", t(111));
        renewals.deleted(&k, &held, t(112));
        let sitting = [SitOut {
            candidate: "x".into(),
            until: t(171),
        }];
        assert_eq!(renewals.sitting_out(&k, t(113)), sitting, "deleted");
        renewals.relisted(None, &HashSet::new(), t(114));
        assert_eq!(renewals.sitting_out(&k, t(115)), sitting, "relisted");
        assert!(
            renewals.sitting_out(&k, t(171)).is_empty(),
            "its time is over"
        );
        assert!(renewals.sitting_out(&key("ns", "b"), t(115)).is_empty());
    }

    /// Review finding 1 (issue 34), after a relist: a held Lease the relist no longer shows (deleted
    /// while the watch was down, or lost by the server) is held until a renewal its holder may
    /// have made unseen, up to the relist, expires (issue 47, finding 2): the relist's time plus
    /// its duration, however long ago the last renewal this controller saw.
    #[test]
    fn a_held_lease_missing_from_a_relist_is_held_until_a_renewal_at_the_relist_expires() {
        let renewals = Renewals::default();
        let mut held = renewed(lease("ns", "a", "1"), "x", 40);
        held.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        renewals.watched(&key("ns", "a"), &arc(&held), Timestamp::from_secs(50));
        renewals.watched(
            &key("ns", "kept"),
            &arc(&renewed(lease("ns", "kept", "1"), "y", 50)),
            Timestamp::from_secs(50),
        );
        // The watch was down from 50 s to 71 s; the relist comes at 71 s.
        renewals.relisted(
            Some("ns"),
            &[key("ns", "kept")].into(),
            Timestamp::from_secs(71),
        );
        assert_eq!(
            renewals.held_after_deletion(&key("ns", "a"), Timestamp::from_secs(72)),
            Some(Timestamp::from_secs(86))
        );
        assert!(
            renewals.lease(&key("ns", "a")).is_none(),
            "no longer cached"
        );
        assert_eq!(
            renewals.held_after_deletion(&key("ns", "kept"), Timestamp::from_secs(60)),
            None
        );
    }

    /// With `--namespace` given more than once, each namespace has its own Lease watch: a relist
    /// of one lists none of the others' Leases, which are neither dropped from the cache nor
    /// counted as deleted while held.
    #[test]
    fn a_relist_of_one_namespace_leaves_the_leases_of_the_others_alone() {
        let renewals = Renewals::default();
        let mut held = renewed(lease("other", "a", "1"), "x", 40);
        held.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        renewals.watched(&key("other", "a"), &arc(&held), Timestamp::from_secs(50));
        let now = Timestamp::from_secs(52);
        renewals.relisted(Some("ns"), &HashSet::new(), now);
        assert_eq!(renewals.held_after_deletion(&key("other", "a"), now), None);
        assert!(renewals.has_live_holder(&key("other", "a"), now));
        assert_eq!(renewals.keys_in(Some("other")), [key("other", "a")]);
        // A relist of its own namespace that does not list it: deleted while held.
        renewals.relisted(Some("other"), &HashSet::new(), now);
        assert_eq!(
            renewals.held_after_deletion(&key("other", "a"), now),
            Some(Timestamp::from_secs(67))
        );
    }

    /// Counting Leases without a leader asks the cache in one lookup; its answer is
    /// `conclave_core::plan::without_leader`'s on the record a step reads, renewal observed by
    /// this controller included: a holder whose clock runs behind still leads.
    #[test]
    fn a_live_holder_is_found_in_one_lookup_as_a_step_would_judge_it() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        let judged = |renewals: &Renewals, lease: &Lease, now: Timestamp| {
            let mut record = conclave_core::k8s::lease_record(lease);
            renewals.annotate(&k, &mut record, now);
            !conclave_core::plan::without_leader(Some(&record), now)
        };
        let mut behind = renewed(lease("ns", "a", "1"), "x", 10);
        behind.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        renewals.watched(&k, &arc(&behind), Timestamp::from_secs(50));
        let released = renewed(lease("ns", "a", "2"), "", 60);
        for (lease, now, live) in [
            (&behind, 50, true),
            (&behind, 65, true),
            (&behind, 66, false),
        ] {
            let now = Timestamp::from_secs(now);
            assert_eq!(renewals.has_live_holder(&k, now), live, "at {now}");
            assert_eq!(judged(&renewals, lease, now), live, "at {now}");
        }
        renewals.watched(&k, &arc(&released), Timestamp::from_secs(60));
        assert!(!renewals.has_live_holder(&k, Timestamp::from_secs(60)));
        assert!(!judged(&renewals, &released, Timestamp::from_secs(60)));
        assert!(!renewals.has_live_holder(&key("ns", "missing"), Timestamp::from_secs(60)));
    }

    /// Review finding 7 (issue 34): the preferred candidate disappears while the pre-empted
    /// holder drains, the controller clears `preferredHolder`, the holder releases all the same:
    /// it was asked to step down, so it is no leaver to set aside.
    #[test]
    fn a_release_after_a_cleared_preferred_holder_still_counts_as_asked() {
        let renewals = Renewals::default();
        let k = key("ns", "a");
        renewals.watched(
            &k,
            &arc(&renewed(lease("ns", "a", "1"), "x", 50)),
            Timestamp::from_secs(50),
        );
        let mut asked = renewed(lease("ns", "a", "2"), "x", 50);
        asked.spec.as_mut().unwrap().preferred_holder = Some("z".into());
        renewals.watched(&k, &arc(&asked), Timestamp::from_secs(51));
        // The holder renews while it drains; then the controller clears preferredHolder.
        renewals.watched(
            &k,
            &arc(&renewed(lease("ns", "a", "3"), "x", 52)),
            Timestamp::from_secs(52),
        );
        renewals.watched(
            &k,
            &arc(&renewed(lease("ns", "a", "4"), "x", 52)),
            Timestamp::from_secs(53),
        );
        let released = renewed(lease("ns", "a", "5"), "", 54);
        renewals.watched(&k, &arc(&released), Timestamp::from_secs(54));
        assert_eq!(
            annotated(&renewals, &k, &released),
            (Some(Timestamp::from_secs(54)), None),
            "not released unasked"
        );
        // The next holder's tenure starts with no request.
        renewals.watched(
            &k,
            &arc(&renewed(lease("ns", "a", "6"), "y", 55)),
            Timestamp::from_secs(55),
        );
        let left = renewed(lease("ns", "a", "7"), "", 56);
        renewals.watched(&k, &arc(&left), Timestamp::from_secs(56));
        assert_eq!(annotated(&renewals, &k, &left).1.as_deref(), Some("y"));
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
            renewals.watched(&k, &arc(&lease), Timestamp::from_secs(seen));
            lease
        };
        renewals.listed(
            &k,
            &arc(&renewed(lease("ns", "a", "0"), "x", 50)),
            Timestamp::from_secs(51),
        );
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
        renewals.watched(&k, &arc(&preempted), Timestamp::from_secs(75));
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
            &arc(&renewed(lease("ns", "a", "1"), "x", 50)),
            Timestamp::from_secs(50),
        );
        let released = renewed(lease("ns", "a", "2"), "", 55);
        renewals.watched(&k, &arc(&released), Timestamp::from_secs(56));
        assert_eq!(
            annotated(&renewals, &k, &released),
            (Some(Timestamp::from_secs(56)), Some("x".into()))
        );
        assert_eq!(handed_to(&renewals, &k, &released), None, "unasked");
        // Another write that keeps it free (a strategy change, a second release) keeps the name.
        let rewritten = renewed(lease("ns", "a", "3"), "", 57);
        renewals.watched(&k, &arc(&rewritten), Timestamp::from_secs(58));
        assert_eq!(annotated(&renewals, &k, &rewritten).1.as_deref(), Some("x"));
        // Held again: nobody released it.
        let taken = renewed(lease("ns", "a", "4"), "y", 59);
        renewals.watched(&k, &arc(&taken), Timestamp::from_secs(59));
        assert_eq!(annotated(&renewals, &k, &taken).1, None);
        // Asked to step down for someone else, then released: not a leaver.
        let mut asked = renewed(lease("ns", "a", "5"), "y", 59);
        asked.spec.as_mut().unwrap().preferred_holder = Some("z".into());
        renewals.watched(&k, &arc(&asked), Timestamp::from_secs(60));
        let made_way = renewed(lease("ns", "a", "6"), "", 61);
        renewals.watched(&k, &arc(&made_way), Timestamp::from_secs(61));
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
        renewals.watched(&k, &arc(&again), Timestamp::from_secs(62));
        assert_eq!(
            handed_to(&renewals, &k, &again).as_deref(),
            Some("z"),
            "another write that keeps it free keeps the successor"
        );
        let held = renewed(lease("ns", "a", "8"), "z", 63);
        renewals.watched(&k, &arc(&held), Timestamp::from_secs(63));
        assert_eq!(handed_to(&renewals, &k, &held), None, "held again");
        // A release seen only in a relist has no known releaser.
        let fresh = Renewals::default();
        fresh.listed(&k, &arc(&released), Timestamp::from_secs(70));
        assert_eq!(
            annotated(&fresh, &k, &released),
            (Some(Timestamp::from_secs(70)), None)
        );
    }
}
