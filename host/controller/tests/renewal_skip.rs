//! Issue 31: a renewal that changes nothing a decision reads decides nothing. Random event
//! sequences (holder renewals and releases, candidate renewals, acks, version changes, crashes,
//! the clock) are fed to the index ([`Renewals`]) and to the step (`plan_step`, a strategy,
//! `apply_answer`, the writes), once with every Lease event stepped and once with the renewals
//! that decide nothing skipped ([`Watched::Renewal`]); both must make the same writes and pings,
//! at the same times, in the same order.
//!
//! The step is the controller's (`reconcile::elect`) without its I/O: the writes land in the
//! model's world at once and their watch events follow, and the queue of one Lease is its
//! timer (an event's step replaces it, a due timer runs a step, as `WorkQueue` does).

use conclave_controller::index::{Renewals, Watched};
use conclave_controller::key::LeaseKey;
use conclave_controller::writer::lease_object;
use conclave_core::k8s::{lease_record, micro_time};
use conclave_core::plan::{Mode, recheck_at};
use conclave_core::request::{CandidateView, ElectionRequest};
use conclave_core::step::{Outcome, Plan, Settle, StepConfig, StepInput, plan_step, settled_until};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

const NAMES: [&str; 3] = ["a", "b", "c"];
/// Seconds since the epoch when a run starts.
const START: i64 = 1_000_000;

fn config() -> StepConfig {
    StepConfig {
        ack_window: Duration::from_secs(5),
        // Short, so that candidates that stop renewing stop taking part within a run.
        candidate_gc_after: Duration::from_secs(60),
        lease_duration_seconds: 10,
        mode: Mode::All,
        settle: Settle::DEFAULT,
    }
}

fn key() -> LeaseKey {
    LeaseKey::new("ns", "l")
}

fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_micros(ms * 1_000)
}

/// What happens next in the world, drawn at random.
#[derive(Debug, Clone)]
enum Action {
    /// The clock moves this many milliseconds (due timers fire on the way).
    Advance(i64),
    /// The holder renews the Lease, if it lives.
    HolderRenews,
    /// The holder releases the Lease, if it lives (asked to by a `preferredHolder`, or not).
    HolderReleases,
    /// Candidate `i` renews its LeaseCandidate (answering any ping), if it lives.
    CandidateRenews(usize),
    /// Candidate `i` restarts at another emulation version (1.`v`).
    CandidateUpgrades(usize, u32),
    /// Candidate `i` dies: it renews and answers nothing any more.
    Crash(usize),
}

fn rule() -> impl Strategy<Value = Rule> {
    prop_oneof![
        Just(Rule::Oldest),
        Just(Rule::KeepHolder),
        Just(Rule::WholeSet)
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (100i64..3_000).prop_map(Action::Advance),
        4 => Just(Action::HolderRenews),
        1 => Just(Action::HolderReleases),
        3 => (0..NAMES.len()).prop_map(Action::CandidateRenews),
        1 => (0..NAMES.len(), 30u32..34).prop_map(|(i, v)| Action::CandidateUpgrades(i, v)),
        1 => (0..NAMES.len()).prop_map(Action::Crash),
    ]
}

/// The strategies of the runs: each answers from the request alone, never from its `now`.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// `OldestEmulationVersion`'s rule: the lowest emulation version, then the name.
    Oldest,
    /// `conclave.dev/least-disruption`'s: [`Self::Oldest`], but a live holder (the Lease not
    /// expired) whose emulation version ties the best's stays. It reads `lease.expired`, the
    /// host's reading of the clock, and declares that it does not read `now`.
    KeepHolder,
    /// An answer that depends on the whole set of candidates, so that any change of the set
    /// shows: the candidate at (sum of the bytes of their versions) modulo their number, by name.
    WholeSet,
}

impl Rule {
    fn elect(self, request: &ElectionRequest) -> Option<String> {
        let mut candidates: Vec<&CandidateView> = request.candidates.iter().collect();
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        match self {
            Self::Oldest => candidates
                .iter()
                .min_by(|a, b| {
                    (&a.emulation_version, &a.name).cmp(&(&b.emulation_version, &b.name))
                })
                .map(|c| c.name.clone()),
            Self::KeepHolder => {
                let best = Self::Oldest.elect(request)?;
                let version_of = |name: &str| {
                    candidates
                        .iter()
                        .find(|c| c.name == name)
                        .map(|c| &c.emulation_version)
                };
                let holder = request
                    .lease
                    .holder
                    .as_deref()
                    .filter(|_| !request.lease.expired)
                    .filter(|holder| {
                        version_of(holder).is_some_and(|v| Some(v) == version_of(&best))
                    });
                Some(holder.map_or(best, str::to_owned))
            }
            Self::WholeSet => {
                let sum: u32 = candidates
                    .iter()
                    .map(|c| c.emulation_version.bytes().map(u32::from).sum::<u32>())
                    .sum();
                let len = u32::try_from(candidates.len()).ok().filter(|n| *n > 0)?;
                Some(candidates[(sum % len) as usize].name.clone())
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Candidate {
    view: CandidateView,
    alive: bool,
}

/// One controller and the world it elects in.
struct Run {
    skip: bool,
    rule: Rule,
    now: i64,
    lease: Option<Lease>,
    version: u64,
    candidates: Vec<Candidate>,
    renewals: Renewals,
    /// The Lease's timer (the queue's delay for its key).
    timer: Option<Timestamp>,
    /// Every write and ping, with its time.
    log: Vec<String>,
    steps: usize,
    skipped: usize,
}

impl Run {
    fn new(skip: bool, rule: Rule, versions: &[u32]) -> Self {
        let now = START * 1_000;
        let candidates = NAMES
            .iter()
            .zip(versions)
            .map(|(name, v)| Candidate {
                view: CandidateView {
                    name: (*name).into(),
                    binary_version: "1.40.0".into(),
                    emulation_version: format!("1.{v}.0"),
                    strategy: OLDEST_EMULATION_VERSION.into(),
                    creation_time: Some(at_ms(now - 60_000)),
                    renew_time: Some(at_ms(now)),
                    ..CandidateView::default()
                },
                alive: true,
            })
            .collect();
        Self {
            skip,
            rule,
            now,
            lease: None,
            version: 0,
            candidates,
            renewals: Renewals::default(),
            timer: None,
            log: Vec::new(),
            steps: 0,
            skipped: 0,
        }
    }

    fn time(&self) -> Timestamp {
        at_ms(self.now)
    }

    fn act(&mut self, action: &Action) {
        match *action {
            Action::Advance(ms) => {
                let until = self.now + ms;
                while let Some(due) = self.timer.filter(|t| t.as_micros() <= until * 1_000) {
                    self.now = self.now.max((due.as_micros() + 999) / 1_000);
                    self.timer = None;
                    self.step();
                }
                self.now = until;
            }
            Action::HolderRenews | Action::HolderReleases => {
                let now = self.time();
                let Some(spec) = self.lease.as_ref().and_then(|l| l.spec.clone()) else {
                    return;
                };
                let Some(holder) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else {
                    return;
                };
                if !self.candidate(&holder).is_some_and(|c| c.alive) {
                    return;
                }
                let mut spec = spec;
                spec.renew_time = Some(micro_time(now));
                if matches!(action, Action::HolderReleases) {
                    spec.holder_identity = Some(String::new());
                }
                let mut lease = self.lease.clone().expect("held");
                lease.spec = Some(spec);
                self.write_lease(lease);
                self.lease_event();
            }
            Action::CandidateRenews(i) => {
                if self.candidates[i].alive {
                    self.candidates[i].view.renew_time = Some(self.time());
                    self.candidate_event(i);
                }
            }
            Action::CandidateUpgrades(i, v) => {
                self.candidates[i].alive = true;
                self.candidates[i].view.emulation_version = format!("1.{v}.0");
                self.candidates[i].view.renew_time = Some(self.time());
                self.candidate_event(i);
            }
            Action::Crash(i) => self.candidates[i].alive = false,
        }
    }

    fn candidate(&self, name: &str) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.view.name == name)
    }

    fn write_lease(&mut self, mut lease: Lease) {
        self.version += 1;
        lease.metadata.resource_version = Some(self.version.to_string());
        self.lease = Some(lease);
    }

    /// The Lease's watch event: a step, unless the index says it decides nothing.
    fn lease_event(&mut self) {
        let lease = self
            .lease
            .clone()
            .expect("a Lease event of an existing Lease");
        match self.renewals.watched(&key(), &Arc::new(lease), self.time()) {
            Watched::Renewal { recheck_at } if self.skip => {
                self.skipped += 1;
                self.timer = recheck_at;
                if recheck_at.is_some_and(|at| at <= self.time()) {
                    self.timer = None;
                    self.step();
                }
            }
            _ => self.step(),
        }
    }

    /// A LeaseCandidate's watch event: a step, unless a ping to it is outstanding (its ack will
    /// step), as `index::candidates` does.
    fn candidate_event(&mut self, i: usize) {
        let view = &self.candidates[i].view;
        let outstanding = match (view.ping_time, view.renew_time) {
            (Some(ping), Some(renew)) => renew < ping,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !outstanding {
            self.step();
        }
    }

    fn ping(&mut self, names: &[String]) {
        let now = self.time();
        for name in names {
            if let Some(c) = self.candidates.iter_mut().find(|c| &c.view.name == name) {
                c.view.ping_time = Some(now);
            }
        }
        self.log.push(format!("{} ping {names:?}", self.now));
    }

    /// One step of the Lease, as `reconcile::elect` takes it, then its timer.
    fn step(&mut self) {
        self.steps += 1;
        assert!(self.steps < 100_000, "a step loop");
        let now = self.time();
        let k = key();
        self.renewals.unsettle(&k);
        let record = self.lease.as_ref().map(|lease| {
            let mut record = lease_record(lease);
            self.renewals.annotate(&k, &mut record, now);
            record
        });
        let sitting_out = self.renewals.sitting_out(&k, now);
        let views: Vec<CandidateView> = self.candidates.iter().map(|c| c.view.clone()).collect();
        let has_strategy = |_: &str| true;
        let input = StepInput {
            namespace: "ns",
            name: "l",
            lease: record.as_ref(),
            candidates: &views,
            now,
            config: config(),
            builtin_active: false,
            has_strategy: &has_strategy,
            arrivals: None,
            deleted_while_held_until: self.renewals.held_after_deletion(&k, now),
            sitting_out: &sitting_out,
        };
        let (plan, until) = (plan_step(&input), settled_until(&input));
        let next = match plan {
            Plan::Skip(skip) => skip.recheck_at,
            Plan::Decide(election) => {
                let answer = self.rule.elect(election.request());
                let outcome = election.apply_answer(answer.as_deref());
                if outcome.settles() {
                    self.renewals.settle(&k, until);
                }
                match outcome {
                    Outcome::NoWinner { recheck_at } => recheck_at,
                    Outcome::Unchanged {
                        recheck_at, probe, ..
                    } => {
                        if let Some(holder) = probe {
                            self.ping(&[holder]);
                        }
                        recheck_at
                    }
                    Outcome::Ping {
                        candidates,
                        recheck_at,
                        ..
                    } => {
                        self.ping(&candidates);
                        Some(recheck_at)
                    }
                    Outcome::Wait { recheck_at, .. } => Some(recheck_at),
                    Outcome::AwaitRenewal { recheck_at, .. } => {
                        self.renewals.preemption_held_back(&k, now);
                        Some(recheck_at)
                    }
                    Outcome::Write {
                        winner,
                        write,
                        also_ping,
                        sit_out,
                    } => {
                        if let Some(leaver) = also_ping {
                            self.ping(&[leaver]);
                        }
                        let written = lease_object(self.lease.as_ref(), &write.desired);
                        self.log.push(format!(
                            "{} {:?} {winner} holder={:?} preferred={:?}",
                            self.now,
                            write.kind,
                            write.desired.holder_identity,
                            write.desired.preferred_holder
                        ));
                        if let Some(holder) = sit_out {
                            self.renewals.sit_out(&k, &holder, now);
                        }
                        let next = recheck_at(Some(&lease_record(&written)), now);
                        self.write_lease(written);
                        self.timer = next;
                        // The write's own watch event.
                        self.lease_event();
                        return;
                    }
                }
            }
        };
        self.timer = next;
        if next.is_some_and(|at| at <= now) {
            self.timer = None;
            self.step();
        }
    }
}

fn run(skip: bool, rule: Rule, versions: &[u32], actions: &[Action]) -> Run {
    let mut run = Run::new(skip, rule, versions);
    run.step();
    for action in actions {
        run.act(action);
    }
    run.act(&Action::Advance(30_000));
    run
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    ))]

    /// The property of issue 31: skipping the renewals that decide nothing changes no write,
    /// no ping and no time of either.
    #[test]
    fn skipping_renewals_that_decide_nothing_makes_the_same_writes(
        versions in proptest::collection::vec(30u32..34, 3),
        rule in rule(),
        actions in proptest::collection::vec(action(), 1..200),
    ) {
        let every = run(false, rule, &versions, &actions);
        let skipping = run(true, rule, &versions, &actions);
        prop_assert_eq!(&every.log, &skipping.log);
        prop_assert_eq!(&every.lease, &skipping.lease);
        prop_assert_eq!(every.skipped, 0);
        prop_assert!(skipping.steps <= every.steps);
    }
}

/// The steady state the skip is for: a holder renewing every 2 s of a 10 s Lease, nothing else
/// happening. Every renewal is skipped until the candidates stop taking part for not renewing
/// their LeaseCandidates (60 s here), and no timer fires meanwhile.
#[test]
fn a_steady_holder_s_renewals_decide_nothing() {
    let mut actions = Vec::new();
    for _ in 0..25 {
        actions.push(Action::Advance(2_000));
        actions.push(Action::HolderRenews);
    }
    let every = run(false, Rule::Oldest, &[31, 32, 33], &actions);
    let skipping = run(true, Rule::Oldest, &[31, 32, 33], &actions);
    assert_eq!(every.log, skipping.log);
    assert_eq!(skipping.skipped, 25, "{:?}", skipping.log);
    assert!(
        skipping.steps + 25 <= every.steps,
        "{} steps skipping, {} stepping every event",
        skipping.steps,
        every.steps
    );
}
