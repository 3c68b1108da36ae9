//! A randomized differential against kube-apiserver's built-in election controller.
//!
//! Seeded random candidate sets ([`Case`]: 1 to 9 candidates, random binary and emulation
//! versions with equal versions, pre-releases, build metadata and one or two minors of skew, a
//! random registration order, some registrations one second apart and some in one burst) are
//! registered on a real control plane once while the built-in controller elects and once while
//! Conclave does, every case of a batch at once, each for its own Lease. Every candidate behaves
//! as a client-go coordinated client ([`CoordinatedNamespace`]): it answers pings, renews the
//! Lease while it holds it and releases it when `preferredHolder` names someone else. The
//! holder each controller settles on is compared ([`classify`]); where upstream's answer depends
//! on list order or on the second a candidate was created in, or where Conclave deviates on
//! purpose (docs/differences.md), the case is counted as a documented
//! deviation instead of a difference. [`Report`] prints the table.
//!
//! Which controller elects is the caller's business ([`run_differential`] takes a function that
//! starts Conclave), so the testkit does not depend on the controller crate.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use conclave_core::election::OldestEmulationRank;
use conclave_core::k8s::{candidate_view, lease_record, timestamp};
use conclave_core::lease::LeaseRecord;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::{ControlPlane, Error, SeededSets, lease_candidate};

/// How long a Lease's holder and preferredHolder must stay unchanged (renewals aside), after the
/// last candidate registered, to count as the controller's settled answer: twice upstream's
/// 5 s ack window.
pub const QUIET: Duration = Duration::from_secs(10);

/// The `leaseDurationSeconds` both controllers write when they elect (upstream's
/// `defaultLeaseDurationSeconds`, Conclave's default); a holder's renewal writes another, so a
/// Lease still carrying it has not been renewed by its holder yet.
const ELECTED_DURATION: i32 = 5;

/// The `leaseDurationSeconds` a coordinated client renews with (client-go's default).
const RENEWED_DURATION: i32 = 15;

/// How often a coordinated client renews the Lease it holds (client-go's retry period).
const RENEW_EVERY: Duration = Duration::from_secs(2);

/// The longest a batch may take to settle after its last registration.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);

/// The longest a Lease whose best candidates fully tie may take to settle: upstream's lister
/// order changes between reconciles, so it may never settle (six quiet periods is enough to
/// tell).
const TIE_SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The strategy of the OldestEmulationVersion candidates every case registers.
const OEV: &str = conclave_core::strategy::OLDEST_EMULATION_VERSION;

/// The third-party strategy a [`Case::lease_strategy`] Lease is created with; no plugin serves
/// it, so a controller that keeps it elects nobody.
pub const STICKY_STRATEGY: &str = "example.com/custom";

/// Follows one Lease's reads and says when it is settled: holder and preferredHolder unchanged
/// for [`QUIET`] (counted from a start time at the earliest), nobody preferred, and either no
/// holder or a holder that renewed the Lease itself (its duration is no longer the one a
/// controller writes).
#[derive(Debug, Clone)]
pub struct SettleTracker {
    since: Instant,
    last: Option<(Option<String>, Option<String>)>,
    unchanged_since: Instant,
    changes: usize,
}

impl SettleTracker {
    /// Starts following; changes before `since` do not shorten the quiet period.
    #[must_use]
    pub fn new(since: Instant) -> Self {
        Self {
            since,
            last: None,
            unchanged_since: since,
            changes: 0,
        }
    }

    /// Feeds one read of the Lease (`None`: it does not exist) taken at `now`; returns whether
    /// the Lease is settled.
    pub fn observe(&mut self, record: Option<&LeaseRecord>, now: Instant) -> bool {
        let state = record.map_or((None, None), |r| {
            (
                r.holder().map(str::to_owned),
                r.preferred().map(str::to_owned),
            )
        });
        if self.last.as_ref() != Some(&state) {
            if self.last.is_some() {
                self.changes += 1;
            }
            self.unchanged_since = now.max(self.since);
            self.last = Some(state);
        }
        let renewed = record.is_none_or(|r| {
            r.holder().is_none() || r.lease_duration_seconds != Some(ELECTED_DURATION)
        });
        record.is_none_or(|r| r.preferred().is_none())
            && renewed
            && now.duration_since(self.unchanged_since) >= QUIET
    }

    /// The holder and preferredHolder last seen, for messages.
    #[must_use]
    pub fn last(&self) -> Option<&(Option<String>, Option<String>)> {
        self.last.as_ref()
    }

    /// How often holder or preferredHolder changed since the first read.
    #[must_use]
    pub const fn changes(&self) -> usize {
        self.changes
    }
}

/// Waits until `lease` is settled with a holder ([`SettleTracker`]), counted from `since` at the
/// earliest, for at most 240 s; returns the settled record.
pub async fn settled(
    leases: &Api<Lease>,
    lease: &str,
    since: Instant,
) -> Result<LeaseRecord, Error> {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut tracker = SettleTracker::new(since);
    loop {
        let record = leases.get_opt(lease).await?.map(|l| lease_record(&l));
        if tracker.observe(record.as_ref(), Instant::now())
            && let Some(record) = record.filter(|r| r.holder().is_some())
        {
            return Ok(record);
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!(
                    "Lease {lease} to settle; last holder/preferred {:?}",
                    tracker.last()
                ),
                seconds: 240,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How a candidate's registration follows the previous one of its case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// 1.1 s later, so its creationTimestamp (1 s resolution) is later than the previous one's.
    NextSecond,
    /// At once, so both are usually created in the same second and tie on creationTimestamp
    /// (the timing case).
    Burst,
}

/// One candidate of a [`Case`], in registration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseCandidate {
    /// The LeaseCandidate's name (also the holder identity it is elected as).
    pub name: String,
    /// `spec.binaryVersion`.
    pub binary: String,
    /// `spec.emulationVersion`.
    pub emulation: String,
    /// How its registration follows the previous candidate's (ignored for the first).
    pub gap: Gap,
}

/// One differential case, reproducible from its seed alone ([`Case::generate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The seed it was generated from.
    pub seed: u64,
    /// The Lease its candidates are for (unique per seed, so cases can share a namespace).
    pub lease: String,
    /// The candidates, in registration order.
    pub candidates: Vec<CaseCandidate>,
    /// When set, the Lease is created released (empty holder) with this `spec.strategy` before
    /// the candidates register: upstream overwrites it from the candidates, Conclave keeps it.
    pub lease_strategy: Option<String>,
}

/// The seed's bits spread over the whole state (splitmix64), so consecutive seeds give
/// unrelated cases.
const fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Random binary and emulation versions: binary `1.M.P[-pre][+build]` with M in 35..=37 and P in
/// 0..=1 (a small space, so equal versions are common), emulation equal to the binary version
/// (without build metadata) or one or two minors below it.
fn versions(random: &mut SeededSets) -> (String, String) {
    const PRE: [&str; 4] = ["-alpha.0", "-rc.1", "-rc.2", "-rc.10"];
    let minor = 35 + random.below(3);
    let patch = random.below(2);
    let pre = if random.below(10) < 3 {
        PRE[random.below(PRE.len() as u64) as usize]
    } else {
        ""
    };
    let build = if random.below(10) == 0 { "+g1a2b" } else { "" };
    let emulation = match random.below(10) {
        0..=4 => format!("1.{minor}.{patch}{pre}"),
        5..=7 => format!("1.{}.0", minor - 1),
        _ => format!("1.{}.0", minor - 2),
    };
    (format!("1.{minor}.{patch}{pre}{build}"), emulation)
}

impl Case {
    /// The case of `seed`: 1 to 9 candidates with random versions ([`versions`]; one time in
    /// two those of an earlier candidate), names drawn at random (so name order says nothing
    /// of registration order), each registered one
    /// second after the previous one or, one time in three, in a burst with it; one case in
    /// fifteen starts from a released Lease carrying [`STICKY_STRATEGY`].
    #[must_use]
    pub fn generate(seed: u64) -> Self {
        let mut random = SeededSets::new(mix(seed));
        let lease = format!("c{seed:x}");
        let size = random.size(9);
        let mut letters: Vec<char> = ('a'..='z').collect();
        let mut chosen: Vec<(String, String)> = Vec::new();
        let candidates = (0..size)
            .map(|_| {
                let letter = letters.remove(random.below(letters.len() as u64) as usize);
                // Replicas of one release share their versions: copy the previous candidate's
                // one time in three and an earlier one's one time in six, so ties are common.
                let copy = match random.below(6) {
                    _ if chosen.is_empty() => None,
                    0 | 1 => chosen.last(),
                    2 => chosen.get(random.below(chosen.len() as u64) as usize),
                    _ => None,
                };
                let (binary, emulation) = copy.cloned().unwrap_or_else(|| versions(&mut random));
                chosen.push((binary.clone(), emulation.clone()));
                let gap = if random.below(3) == 0 {
                    Gap::Burst
                } else {
                    Gap::NextSecond
                };
                CaseCandidate {
                    name: format!("{lease}-{letter}"),
                    binary,
                    emulation,
                    gap,
                }
            })
            .collect();
        let lease_strategy = (random.below(15) == 0).then(|| STICKY_STRATEGY.to_owned());
        Self {
            seed,
            lease,
            candidates,
            lease_strategy,
        }
    }

    /// The cases of seeds `seed`, `seed + 1`, ... (`count` of them), so case `i` of a run is
    /// replayed alone with seed `seed + i` and count 1.
    #[must_use]
    pub fn generate_many(seed: u64, count: usize) -> Vec<Self> {
        (0..count as u64)
            .map(|i| Self::generate(seed.wrapping_add(i)))
            .collect()
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} lease {}", self.seed, self.lease)?;
        if let Some(strategy) = &self.lease_strategy {
            write!(f, " (Lease created with strategy {strategy})")?;
        }
        f.write_str(":")?;
        for (i, c) in self.candidates.iter().enumerate() {
            let gap = match (i, c.gap) {
                (0, _) => "",
                (_, Gap::NextSecond) => " +1.1s",
                (_, Gap::Burst) => " +0s",
            };
            write!(f, "{gap} {}({}, emu {})", c.name, c.binary, c.emulation)?;
        }
        Ok(())
    }
}

/// What one controller's run of a [`Case`] ended with.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The LeaseCandidates as created (with their creationTimestamps).
    pub candidates: Vec<LeaseCandidate>,
    /// The settled (or, if it never settled, the last seen) Lease; `None` if it never existed.
    pub lease: Option<LeaseRecord>,
    /// Whether the Lease settled within the batch's timeout.
    pub settled: bool,
    /// How often its holder or preferredHolder changed after the last registration of the batch.
    pub changes: usize,
}

impl Observed {
    /// The holder written, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.lease.as_ref().and_then(LeaseRecord::holder)
    }

    /// The candidates tied for best under upstream's rule (emulation version, binary version,
    /// creationTimestamp; no name tie-break): upstream may elect any of them, depending on the
    /// lister's order. Sorted by name, so the first is Conclave's choice.
    #[must_use]
    pub fn best_tied(&self) -> Vec<String> {
        let views: Vec<_> = self.candidates.iter().map(candidate_view).collect();
        let ranks: Vec<OldestEmulationRank<'_>> = views
            .iter()
            .filter_map(|v| {
                OldestEmulationRank::new(
                    &v.name,
                    &v.binary_version,
                    &v.emulation_version,
                    v.creation_time,
                )
            })
            .collect();
        let Some(best) = ranks.iter().min() else {
            return Vec::new();
        };
        let mut tied: Vec<String> = ranks
            .iter()
            .filter(|r| r.cmp_versions(best).is_eq() && r.created == best.created)
            .map(|r| r.name.to_owned())
            .collect();
        tied.sort();
        tied
    }

    fn describe(&self) -> String {
        let created: Vec<String> = self
            .candidates
            .iter()
            .map(|c| {
                let at = c
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default();
                format!("{} created {at}", c.metadata.name.as_deref().unwrap_or(""))
            })
            .collect();
        format!(
            "holder {:?}, settled {} ({} changes), strategy {:?}, elected by Conclave {}, tied best \
             {:?}; {}",
            self.holder(),
            self.settled,
            self.changes,
            self.lease.as_ref().and_then(LeaseRecord::strategy),
            self.lease.as_ref().is_some_and(|l| l.elected_by_conclave),
            self.best_tied(),
            created.join(", ")
        )
    }
}

/// The coordinated clients of every candidate in one namespace, until dropped: pings answered
/// (`renewTime = now` whenever `pingTime` is newer), and for each Lease held by one of its
/// candidates that holder renewing it
/// every [`RENEW_EVERY`] (at once after a controller elected it) with a 15 s duration, or
/// releasing it (empty holder, 1 s duration, as client-go with release-on-cancel) when
/// `preferredHolder` names someone else. One poller per namespace rather than one per
/// candidate, so hundreds of candidates cost the API server a few requests a second. Every
/// write carries the resourceVersion just listed; a conflict is retried at the next poll.
pub struct CoordinatedNamespace {
    task: tokio::task::JoinHandle<()>,
}

impl CoordinatedNamespace {
    /// Starts the clients of namespace `ns`.
    #[must_use]
    pub fn start(client: &Client, ns: &str) -> Self {
        let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), ns);
        let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
        Self {
            task: tokio::spawn(coordinate(candidates, leases)),
        }
    }
}

impl Drop for CoordinatedNamespace {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Every 250 ms answers the outstanding pings; every other time also renews or releases each
/// Lease held by one of its own candidates (a Lease held by anyone else, such as a
/// controller's own, is left alone).
async fn coordinate(candidates: Api<LeaseCandidate>, leases: Api<Lease>) {
    let mut members = std::collections::HashSet::new();
    for tick in 0u64.. {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Ok(list) = candidates.list(&ListParams::default()).await {
            members.clear();
            for candidate in list.items {
                let name = candidate.metadata.name.clone().unwrap_or_default();
                if let Some(spec) = &candidate.spec {
                    members.insert((spec.lease_name.clone(), name.clone()));
                }
                answer_ping(&candidates, &name, candidate).await;
            }
        }
        if tick % 2 == 1 {
            hold_leases(&leases, &members).await;
        }
    }
}

async fn answer_ping(api: &Api<LeaseCandidate>, name: &str, mut candidate: LeaseCandidate) {
    let Some(spec) = candidate.spec.as_mut() else {
        return;
    };
    let outstanding = spec
        .ping_time
        .as_ref()
        .is_some_and(|ping| spec.renew_time.as_ref().is_none_or(|r| ping.0 > r.0));
    if outstanding {
        spec.renew_time = Some(now());
        let _ = api.replace(name, &PostParams::default(), &candidate).await;
    }
}

/// Renews or releases every Lease of `api` whose holder is one of `members` (Lease name,
/// candidate name).
async fn hold_leases(api: &Api<Lease>, members: &std::collections::HashSet<(String, String)>) {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for mut lease in list.items {
        let record = lease_record(&lease);
        let Some(holder) = record.holder() else {
            continue;
        };
        if !members.contains(&(record.name.clone(), holder.to_owned())) {
            continue;
        }
        let step_down = record.preferred().is_some_and(|p| p != holder);
        let due = record.lease_duration_seconds == Some(ELECTED_DURATION)
            || record.renew_time.is_none_or(|renewed| {
                renewed.elapsed_at(timestamp(jiff::Timestamp::now())) >= RENEW_EVERY
            });
        if !step_down && !due {
            continue;
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if step_down {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.preferred_holder = None;
        } else {
            spec.lease_duration_seconds = Some(RENEWED_DURATION);
        }
        spec.renew_time = Some(now());
        let _ = api
            .replace(&record.name, &PostParams::default(), &lease)
            .await;
    }
}

/// Registers `case` in `ns`: its released Lease first when it has a
/// [`lease_strategy`](Case::lease_strategy), then its candidates in order, 1.1 s apart or in a
/// burst as their [`Gap`]s say. Returns the candidates as created.
async fn register(client: Client, ns: String, case: Case) -> Result<Vec<LeaseCandidate>, Error> {
    if let Some(strategy) = &case.lease_strategy {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(case.lease.clone()),
                ..ObjectMeta::default()
            },
            // Released (empty holder, not absent: upstream's step dereferences a nil holder of
            // an expired Lease, spec §6.6).
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                strategy: Some(strategy.clone()),
                lease_duration_seconds: Some(1),
                renew_time: Some(now()),
                ..LeaseSpec::default()
            }),
        };
        leases.create(&PostParams::default(), &lease).await?;
    }
    let api: Api<LeaseCandidate> = Api::namespaced(client, &ns);
    let mut created = Vec::new();
    for (i, c) in case.candidates.iter().enumerate() {
        if i > 0 && c.gap == Gap::NextSecond {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let candidate = lease_candidate(
            &ns,
            &c.name,
            &case.lease,
            &c.binary,
            Some(&c.emulation),
            OEV,
        );
        created.push(api.create(&PostParams::default(), &candidate).await?);
    }
    Ok(created)
}

/// Runs `cases` at once in namespace `ns` under whichever controller elects there now: starts
/// the namespace's [`CoordinatedNamespace`], registers every case concurrently, waits until
/// every Lease settled (at most 180 s after the last registration, 60 s for a Lease whose best
/// candidates fully tie), and returns what each case
/// ended with, in the order of `cases`. The candidates stay registered (see [`clear`]).
pub async fn run_batch(client: &Client, ns: &str, cases: &[Case]) -> Result<Vec<Observed>, Error> {
    let _clients = CoordinatedNamespace::start(client, ns);
    let registrations: Vec<_> = cases
        .iter()
        .map(|case| tokio::spawn(register(client.clone(), ns.to_owned(), case.clone())))
        .collect();
    let mut created = Vec::new();
    for registration in registrations {
        let candidates = registration
            .await
            .map_err(|e| Error::InvalidArgument(format!("a registration task failed: {e}")))??;
        created.push(candidates);
    }
    let since = Instant::now();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut trackers: Vec<SettleTracker> =
        cases.iter().map(|_| SettleTracker::new(since)).collect();
    let mut last: Vec<Option<LeaseRecord>> = vec![None; cases.len()];
    let mut settled = vec![false; cases.len()];
    let deadlines: Vec<Duration> = created
        .iter()
        .map(|candidates| {
            let observed = Observed {
                candidates: candidates.clone(),
                lease: None,
                settled: false,
                changes: 0,
            };
            if observed.best_tied().len() > 1 {
                TIE_SETTLE_TIMEOUT
            } else {
                SETTLE_TIMEOUT
            }
        })
        .collect();
    while settled
        .iter()
        .zip(&deadlines)
        .any(|(settled, deadline)| !settled && since.elapsed() < *deadline)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Ok(list) = leases.list(&ListParams::default()).await else {
            continue;
        };
        let at = Instant::now();
        let by_name: HashMap<String, LeaseRecord> = list
            .items
            .iter()
            .map(|l| {
                let record = lease_record(l);
                (record.name.clone(), record)
            })
            .collect();
        for (i, case) in cases.iter().enumerate() {
            let record = by_name.get(&case.lease);
            settled[i] = trackers[i].observe(record, at);
            last[i] = record.cloned();
        }
    }
    Ok(created
        .into_iter()
        .zip(last)
        .zip(settled)
        .zip(trackers)
        .map(|(((candidates, lease), settled), tracker)| Observed {
            candidates,
            lease,
            settled,
            changes: tracker.changes(),
        })
        .collect())
}

/// Deletes every LeaseCandidate and Lease of `ns` (a namespace is only emptied by
/// kube-controller-manager, which the control plane does not run), so no controller keeps
/// electing for a finished batch.
pub async fn clear(client: &Client, ns: &str) -> Result<(), Error> {
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), ns);
    candidates
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// A documented reason for the two controllers to settle on different holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Deviation {
    /// Versions and creationTimestamp tie in both runs: upstream takes the lister's order,
    /// Conclave the smallest name (docs/differences.md: "a full tie is broken by candidate name").
    TieBreak,
    /// Versions tie and the candidates registered in one burst, but in one run only they were
    /// created in the same second: the answer depends on the second boundary (timing).
    CreationSecond,
    /// Upstream's answer among tied candidates never settled (its holder kept changing): its
    /// lister's order changes from one reconcile to the next, and with it the best.
    TieNeverSettled,
    /// The Lease was created with a third-party strategy: upstream overwrites it from the
    /// candidates and elects, Conclave keeps it (docs/differences.md: "a Lease's own spec.strategy is kept
    /// once written") and, with no plugin for it, elects nobody.
    StickyStrategy,
}

impl Deviation {
    /// Every kind, in report order.
    pub const ALL: [Self; 4] = [
        Self::TieBreak,
        Self::CreationSecond,
        Self::TieNeverSettled,
        Self::StickyStrategy,
    ];

    /// A short label for the report table.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::TieBreak => "full tie: list order (built-in) vs name (Conclave)",
            Self::CreationSecond => "burst straddled a second in one run (timing)",
            Self::TieNeverSettled => "full tie: built-in kept re-electing (list order)",
            Self::StickyStrategy => "sticky Lease strategy (Conclave keeps it)",
        }
    }
}

/// How one case compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both settled on the same holder.
    Agreement,
    /// Different holders, for a documented reason.
    Deviation(Deviation),
    /// Anything else, with what was seen.
    Unexplained(String),
}

/// Compares the two runs of `case`. Each run is first checked on its own: the built-in's holder
/// must be one of its tied best, Conclave's the first of its tied best by name (and written by
/// Conclave). Then equal holders agree, and different ones are explained by a tie (in both
/// runs, or in one only: timing) or by the sticky Lease strategy, or left unexplained.
#[must_use]
pub fn classify(case: &Case, builtin: &Observed, conclave: &Observed) -> Verdict {
    let unexplained = |why: &str| {
        Verdict::Unexplained(format!(
            "{why}\n    case: {case}\n    built-in: {}\n    Conclave: {}",
            builtin.describe(),
            conclave.describe()
        ))
    };
    let tied_builtin = builtin.best_tied();
    let tied_conclave = conclave.best_tied();
    let has_tie = tied_builtin.len() > 1 || tied_conclave.len() > 1;
    if !builtin.settled {
        return if tied_builtin.len() > 1 && builtin.changes > 0 {
            Verdict::Deviation(Deviation::TieNeverSettled)
        } else {
            unexplained("the built-in controller's Lease never settled")
        };
    }
    if !builtin
        .holder()
        .is_some_and(|h| tied_builtin.iter().any(|t| t == h))
    {
        return unexplained("the built-in controller settled on a candidate that is not the best");
    }
    if builtin
        .lease
        .as_ref()
        .is_some_and(|l| l.elected_by_conclave)
    {
        return unexplained("the built-in controller's run carries Conclave's annotation");
    }
    if case.lease_strategy.is_some() {
        let kept = conclave.lease.as_ref().and_then(LeaseRecord::strategy)
            == case.lease_strategy.as_deref();
        if conclave.settled && conclave.holder().is_none() && kept {
            return Verdict::Deviation(Deviation::StickyStrategy);
        }
    }
    if !conclave.settled {
        return unexplained("Conclave's Lease never settled");
    }
    if conclave.holder() != tied_conclave.first().map(String::as_str) {
        return unexplained("Conclave settled on another candidate than its best by name");
    }
    if !conclave
        .lease
        .as_ref()
        .is_some_and(|l| l.elected_by_conclave)
    {
        return unexplained("Conclave's run carries no Conclave annotation");
    }
    if builtin.holder() == conclave.holder() {
        Verdict::Agreement
    } else if tied_builtin.len() > 1 && tied_conclave.len() > 1 {
        Verdict::Deviation(Deviation::TieBreak)
    } else if has_tie {
        Verdict::Deviation(Deviation::CreationSecond)
    } else {
        unexplained("different holders without a tie")
    }
}

/// The outcome of a differential run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed of the first case (case `i` has seed `seed + i`).
    pub seed: u64,
    /// Cases run.
    pub cases: usize,
    /// Cases where both controllers settled on the same holder.
    pub agreements: usize,
    /// Of the agreements, cases whose best was a full tie in at least one run (the controllers
    /// happened to agree where upstream's answer depends on list order).
    pub agreements_on_ties: usize,
    /// Documented deviations by kind.
    pub deviations: BTreeMap<Deviation, usize>,
    /// Every unexplained case, described so it can be replayed (its seed and set included).
    pub unexplained: Vec<String>,
    /// For each [`Deviation::TieNeverSettled`] case, how often the built-in controller changed
    /// holder or preferredHolder after the last registration.
    pub tie_changes: Vec<usize>,
    /// Cases by size (number of candidates), 1 to 9.
    pub sizes: BTreeMap<usize, usize>,
    /// Cases in which some candidates registered in one burst.
    pub with_bursts: usize,
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

impl Report {
    /// Counts one case's verdict.
    pub fn add(&mut self, case: &Case, builtin: &Observed, conclave: &Observed, verdict: Verdict) {
        self.cases += 1;
        *self.sizes.entry(case.candidates.len()).or_default() += 1;
        if case.candidates.iter().skip(1).any(|c| c.gap == Gap::Burst) {
            self.with_bursts += 1;
        }
        match verdict {
            Verdict::Agreement => {
                self.agreements += 1;
                if builtin.best_tied().len() > 1 || conclave.best_tied().len() > 1 {
                    self.agreements_on_ties += 1;
                }
            }
            Verdict::Deviation(kind) => {
                if kind == Deviation::TieNeverSettled {
                    self.tie_changes.push(builtin.changes);
                }
                *self.deviations.entry(kind).or_default() += 1;
            }
            Verdict::Unexplained(why) => self.unexplained.push(why),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_case = self.elapsed.as_secs_f64() / self.cases.max(1) as f64;
        writeln!(
            f,
            "Randomized differential, seed {} ({} cases, {:.0} s, {per_case:.2} s per case)",
            self.seed,
            self.cases,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(f, "| outcome | cases |")?;
        writeln!(f, "|---|---|")?;
        writeln!(f, "| cases run | {} |", self.cases)?;
        writeln!(
            f,
            "| agreements (same holder) | {} (of which on a full tie: {}) |",
            self.agreements, self.agreements_on_ties
        )?;
        for kind in Deviation::ALL {
            writeln!(
                f,
                "| documented deviation: {} | {} |",
                kind.label(),
                self.deviations.get(&kind).copied().unwrap_or(0)
            )?;
        }
        writeln!(
            f,
            "| unexplained differences | {} |",
            self.unexplained.len()
        )?;
        let sizes: Vec<String> = self
            .sizes
            .iter()
            .map(|(size, n)| format!("{size}:{n}"))
            .collect();
        writeln!(
            f,
            "set sizes (candidates:cases) {}; cases with a burst registration {}",
            sizes.join(" "),
            self.with_bursts
        )?;
        if let (Some(min), Some(max)) =
            (self.tie_changes.iter().min(), self.tie_changes.iter().max())
        {
            writeln!(
                f,
                "built-in runs that never settled on a full tie: holder/preferredHolder changed \
                 {min} to {max} times after the last registration"
            )?;
        }
        for (i, why) in self.unexplained.iter().enumerate() {
            writeln!(f, "unexplained {}: {why}", i + 1)?;
        }
        Ok(())
    }
}

/// Waits (at most 90 s) until kube-apiserver reports that its built-in election controller
/// leads.
pub async fn wait_builtin_leading(cp: &ControlPlane) -> Result<(), Error> {
    crate::wait_for(
        "the built-in election controller to lead",
        Duration::from_secs(90),
        || async { Ok(cp.builtin_controller_leading().await?.then_some(())) },
    )
    .await
}

/// Runs `cases` in batches of `batch` on `cp`: each batch once in a fresh namespace while the
/// built-in controller elects, then, with the built-in controller held passive, in another
/// fresh namespace while the Conclave started by `start_conclave(client, namespace)` elects
/// (it runs until the value it returns is dropped). Each batch's candidates and Leases are
/// deleted afterwards. `progress` is called after each batch with the report so far.
pub async fn run_differential<G>(
    cp: &ControlPlane,
    seed: u64,
    cases: &[Case],
    batch: usize,
    mut start_conclave: impl FnMut(Client, String) -> G,
    mut progress: impl FnMut(&Report),
) -> Result<Report, Error> {
    let started = std::time::Instant::now();
    let client = cp.client().await?;
    let mut report = Report {
        seed,
        ..Report::default()
    };
    for (n, chunk) in cases.chunks(batch.max(1)).enumerate() {
        wait_builtin_leading(cp).await?;
        let ns = cp.namespace(&format!("diff-builtin-{n}")).await?;
        let builtin = run_batch(&client, &ns, chunk).await?;
        clear(&client, &ns).await?;

        let hold = cp.hold_builtin_controller_lease().await?;
        let ns = cp.namespace(&format!("diff-conclave-{n}")).await?;
        let conclave = {
            let _controller = start_conclave(client.clone(), ns.clone());
            run_batch(&client, &ns, chunk).await?
        };
        clear(&client, &ns).await?;
        hold.release().await?;

        for ((case, b), c) in chunk.iter().zip(&builtin).zip(&conclave) {
            report.add(case, b, c, classify(case, b, c));
        }
        report.elapsed = started.elapsed();
        progress(&report);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_replayed_from_its_seed() {
        let many = Case::generate_many(41, 5);
        assert_eq!(many[3], Case::generate(44));
        assert!(many.iter().all(|c| (1..=9).contains(&c.candidates.len())));
    }

    #[test]
    fn generated_versions_are_valid_and_emulation_not_above_binary() {
        use conclave_core::version::Version;
        for case in Case::generate_many(7, 300) {
            for c in &case.candidates {
                let binary = Version::parse_strict(&c.binary).expect("binary");
                let emulation = Version::parse_strict(&c.emulation).expect("emulation");
                assert!(emulation <= binary, "{c:?}");
            }
        }
    }

    fn created(name: &str, binary: &str, emulation: &str, second: i64) -> LeaseCandidate {
        let mut candidate = lease_candidate("ns", name, "l", binary, Some(emulation), OEV);
        candidate.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_800_000_000 + second).unwrap(),
            ));
        candidate
    }

    fn observed(candidates: &[LeaseCandidate], holder: &str, by_conclave: bool) -> Observed {
        let mut lease = Lease::default();
        lease.metadata.name = Some("l".into());
        if by_conclave {
            lease.metadata.annotations = Some(
                [(
                    conclave_core::lease::ELECTED_BY_ANNOTATION.to_owned(),
                    "conclave".into(),
                )]
                .into(),
            );
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            strategy: Some(OEV.into()),
            ..LeaseSpec::default()
        });
        Observed {
            candidates: candidates.to_vec(),
            lease: Some(lease_record(&lease)),
            settled: true,
            changes: 0,
        }
    }

    fn case() -> Case {
        Case {
            seed: 1,
            lease: "l".into(),
            candidates: Vec::new(),
            lease_strategy: None,
        }
    }

    #[test]
    fn a_full_tie_is_a_documented_deviation_and_anything_else_is_not() {
        // z and a tie on versions and creation second; b is worse.
        let set = [
            created("z", "1.37.0", "1.36.0", 0),
            created("a", "1.37.0", "1.36.0", 0),
            created("b", "1.37.0", "1.37.0", 0),
        ];
        let conclave = observed(&set, "a", true);
        assert_eq!(
            classify(&case(), &observed(&set, "z", false), &conclave),
            Verdict::Deviation(Deviation::TieBreak)
        );
        assert_eq!(
            classify(&case(), &observed(&set, "a", false), &conclave),
            Verdict::Agreement
        );
        assert!(matches!(
            classify(&case(), &observed(&set, "b", false), &conclave),
            Verdict::Unexplained(_)
        ));
        // Created a second apart in Conclave's run: z is older there, a tie only upstream.
        let apart = [
            created("z", "1.37.0", "1.36.0", 0),
            created("a", "1.37.0", "1.36.0", 1),
        ];
        assert_eq!(
            classify(
                &case(),
                &observed(&set, "a", false),
                &observed(&apart, "z", true)
            ),
            Verdict::Deviation(Deviation::CreationSecond)
        );
        // No tie at all: a difference is unexplained, and so is Conclave picking by name.
        assert!(matches!(
            classify(
                &case(),
                &observed(&apart, "z", false),
                &observed(&apart, "a", true)
            ),
            Verdict::Unexplained(_)
        ));
    }

    #[test]
    fn a_kept_third_party_strategy_is_the_sticky_deviation() {
        let set = [created("a", "1.37.0", "1.36.0", 0)];
        let mut sticky = case();
        sticky.lease_strategy = Some(STICKY_STRATEGY.into());
        let mut conclave = observed(&set, "", false);
        if let Some(lease) = conclave.lease.as_mut() {
            lease.strategy = Some(STICKY_STRATEGY.into());
        }
        assert_eq!(
            classify(&sticky, &observed(&set, "a", false), &conclave),
            Verdict::Deviation(Deviation::StickyStrategy)
        );
    }
}
