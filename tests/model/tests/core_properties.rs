//! Property tests of the election core: arbitrary Leases, candidates, settings and times through
//! [`plan_step`] and [`Election::apply_answer`], answered by `OldestEmulationVersion` (or by the
//! first candidate by name). No panic, no write naming someone who is not a candidate, the same
//! decision whatever the order of the candidates, and every write carries the resourceVersion the
//! Lease was read at.

use conclave_core::lease::{LeaseRecord, SitOut};
use conclave_core::plan::{Mode, WriteKind, never_renewed_holder};
use conclave_core::prepared::PreparedRequest;
use conclave_core::request::CandidateView;
use conclave_core::step::{Arrivals, Outcome, Plan, Settle, StepConfig, StepInput, plan_step};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use conclave_core::validation::dns1123_subdomain_errors;
use conclave_model::strategy::oldest_emulation_version;
use core::time::Duration;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Seconds around which the generated times cluster, so that renewals, pings and expiries meet.
const NOW: i64 = 10_000;

const THIRD_PARTY: &str = "example.com/x";

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "c[0-4]",
        1 => Just(String::new()),
        1 => "\\PC{0,6}",
    ]
}

fn versions() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "1\\.3[0-2]\\.[0-1]",
        1 => Just("v1.31".to_owned()),
        1 => Just("1.31.0-rc.1".to_owned()),
        1 => Just(String::new()),
        1 => "\\PC{0,6}",
    ]
}

fn strategies() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => Just(OLDEST_EMULATION_VERSION.to_owned()),
        1 => Just(THIRD_PARTY.to_owned()),
        1 => "\\PC{0,6}",
    ]
}

/// A time near [`NOW`], or anywhere at all (saturating arithmetic must hold at the extremes).
fn times() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        8 => (NOW - 12..NOW + 2).prop_map(Timestamp::from_secs),
        2 => (NOW - 60..NOW + 10).prop_map(Timestamp::from_secs),
        1 => (NOW - 4_000..NOW - 60).prop_map(Timestamp::from_secs),
        1 => any::<i64>().prop_map(Timestamp::from_micros),
    ]
}

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        8 => (0u64..20).prop_map(Duration::from_secs),
        1 => any::<u64>().prop_map(Duration::from_secs),
    ]
}

fn lease_seconds() -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => 1i32..20,
        1 => -2i32..1,
        1 => any::<i32>(),
    ]
}

/// A LeaseCandidate's name: the controller leaves candidates whose name is not a DNS subdomain
/// out before a step (`validate_lease_candidate`), as kube-apiserver refuses to store them.
fn candidate_names() -> impl Strategy<Value = String> {
    names().prop_filter("a LeaseCandidate name is a DNS subdomain", |name| {
        dns1123_subdomain_errors(name).is_empty()
    })
}

/// Candidates with distinct, valid names (a LeaseCandidate's name is unique in its namespace).
fn candidates() -> impl Strategy<Value = Vec<CandidateView>> {
    let fields = (
        versions(),
        versions(),
        strategies(),
        proptest::option::of(times()),
        proptest::option::weighted(0.9, times()),
        proptest::option::of(times()),
    );
    proptest::collection::btree_map(candidate_names(), fields, 0..6).prop_map(
        |by_name: BTreeMap<_, _>| {
            by_name
                .into_iter()
                .map(
                    |(
                        name,
                        (binary_version, emulation_version, strategy, creation, renew, ping),
                    )| {
                        CandidateView {
                            name,
                            binary_version,
                            emulation_version,
                            strategy,
                            creation_time: creation,
                            renew_time: renew,
                            ping_time: ping,
                            ..CandidateView::default()
                        }
                    },
                )
                .collect()
        },
    )
}

/// Leases of every shape, with a renewal period up to an hour.
fn leases() -> impl Strategy<Value = Option<LeaseRecord>> {
    leases_renewing_every((0u64..3_600).prop_map(Duration::from_secs))
}

/// Leases whose holder the controller watched renewing every `periods` (`renew_period`).
#[allow(
    clippy::needless_update,
    reason = "fields added to LeaseRecord later take their default here instead of breaking the build"
)]
fn leases_renewing_every(
    periods: impl Strategy<Value = Duration>,
) -> impl Strategy<Value = Option<LeaseRecord>> {
    let spec = (
        proptest::option::weighted(0.9, names()),
        proptest::option::of(names()),
        proptest::option::of(strategies()),
        proptest::option::weighted(0.9, lease_seconds()),
        proptest::option::weighted(0.9, times()),
        proptest::option::of(times()),
        proptest::option::of(any::<i32>()),
        "[0-9]{0,3}",
    );
    let watched = (
        proptest::option::of(times()),
        proptest::option::of(periods),
        proptest::option::of(names()),
        proptest::option::of(names()),
        any::<bool>(),
    );
    let kept = (
        proptest::option::of(times()),
        proptest::collection::vec((names(), times()), 0..3),
    );
    proptest::option::weighted(
        0.8,
        (spec, watched, kept).prop_map(
            |(
                (holder, preferred, strategy, duration, renew, acquire, transitions, version),
                (observed, period, released_by, released_for, elected_by_conclave),
                (preemption_held_since, sitting_out),
            )| LeaseRecord {
                namespace: "ns".into(),
                name: "lease".into(),
                resource_version: version,
                holder_identity: holder,
                preferred_holder: preferred,
                strategy,
                lease_duration_seconds: duration,
                renew_time: renew,
                acquire_time: acquire,
                lease_transitions: transitions,
                elected_by_conclave,
                observed_renewal: observed,
                renew_period: period,
                released_by,
                released_for,
                preemption_held_since,
                sitting_out: sitting_out
                    .into_iter()
                    .map(|(candidate, until)| SitOut { candidate, until })
                    .collect(),
                ..LeaseRecord::default()
            },
        ),
    )
}

/// The controller's settings, any mode, any window, any written duration (zero and negative
/// included).
#[derive(Debug, Clone)]
struct Settings {
    ack_window: Duration,
    candidate_gc_after: Duration,
    lease_duration_seconds: i32,
    mode: Mode,
    builtin_active: bool,
    arrivals: Option<Arrivals>,
    deleted_while_held_until: Option<Timestamp>,
    /// The sit-outs recorded for the key of a missing Lease.
    sitting_out: Vec<SitOut>,
    now: Timestamp,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        durations(),
        prop_oneof![4 => Just(Duration::from_secs(1_800)), 1 => durations()],
        lease_seconds(),
        prop_oneof![4 => Just(Mode::All), 1 => Just(Mode::Auto), 1 => Just(Mode::ThirdParty)],
        any::<bool>(),
        proptest::option::of((times(), times()).prop_map(|(first, last)| Arrivals { first, last })),
        proptest::option::weighted(0.1, times()),
        proptest::collection::vec((names(), times()), 0..3),
        prop_oneof![4 => Just(Timestamp::from_secs(NOW)), 1 => times()],
    )
        .prop_map(
            |(
                ack_window,
                candidate_gc_after,
                lease_duration_seconds,
                mode,
                builtin_active,
                arrivals,
                deleted_while_held_until,
                sitting_out,
                now,
            )| {
                Settings {
                    ack_window,
                    candidate_gc_after,
                    lease_duration_seconds,
                    mode,
                    builtin_active,
                    arrivals,
                    deleted_while_held_until,
                    sitting_out: sitting_out
                        .into_iter()
                        .map(|(candidate, until)| SitOut { candidate, until })
                        .collect(),
                    now,
                }
            },
        )
}

/// The step configuration of `settings`.
fn config(settings: &Settings) -> StepConfig {
    StepConfig {
        ack_window: settings.ack_window,
        candidate_gc_after: settings.candidate_gc_after,
        lease_duration_seconds: settings.lease_duration_seconds,
        mode: settings.mode,
        settle: Settle::DEFAULT,
    }
}

/// How the strategy answers in a test.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `OldestEmulationVersion`, as the built-in plugin.
    OldestEmulationVersion,
    /// The first candidate offered, by name.
    FirstByName,
}

fn answers() -> impl Strategy<Value = Answer> {
    prop_oneof![
        Just(Answer::OldestEmulationVersion),
        Just(Answer::FirstByName)
    ]
}

/// One whole step: plan, the strategy's answer, and what it means.
fn step(
    lease: Option<&LeaseRecord>,
    candidates: &[CandidateView],
    settings: &Settings,
    answer: Answer,
) -> (Plan, Option<Outcome>) {
    let has_strategy = |s: &str| s == OLDEST_EMULATION_VERSION || s == THIRD_PARTY;
    let plan = plan_step(&StepInput {
        namespace: "ns",
        name: "lease",
        lease,
        candidates,
        now: settings.now,
        config: config(settings),
        builtin_active: settings.builtin_active,
        has_strategy: &has_strategy,
        arrivals: settings.arrivals,
        deleted_while_held_until: settings.deleted_while_held_until,
        sitting_out: &settings.sitting_out,
    });
    let outcome = match &plan {
        Plan::Skip(_) => None,
        Plan::Decide(election) => {
            let request = election.request();
            let chosen = match answer {
                Answer::OldestEmulationVersion => oldest_emulation_version(request),
                Answer::FirstByName => request.candidates.iter().map(|c| c.name.clone()).min(),
            };
            Some(election.apply_answer(chosen.as_deref()))
        }
    };
    (plan, outcome)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A write names as holder or preferred holder only a candidate the strategy was offered, and
    /// a holder it does not change is the one read.
    #[test]
    fn a_write_names_only_candidates(
        lease in leases(),
        candidates in candidates(),
        settings in settings(),
        answer in answers(),
    ) {
        let (plan, outcome) = step(lease.as_ref(), &candidates, &settings, answer);
        if let (Plan::Decide(election), Some(Outcome::Write { winner, write, .. })) = (&plan, &outcome) {
            let offered = |name: &str| election.request().has_candidate(name);
            prop_assert!(offered(winner), "winner {winner:?} was not offered");
            let desired = &write.desired;
            let read_holder = lease.as_ref().and_then(LeaseRecord::holder);
            match write.kind {
                WriteKind::Create | WriteKind::TakeOver => {
                    prop_assert_eq!(desired.holder(), Some(winner.as_str()));
                    prop_assert_eq!(desired.preferred(), None);
                }
                WriteKind::Preempt => {
                    prop_assert_eq!(desired.holder(), read_holder);
                    prop_assert_eq!(desired.preferred(), Some(winner.as_str()));
                    prop_assert_ne!(read_holder, Some(winner.as_str()));
                }
                WriteKind::ClearPreferred => {
                    prop_assert_eq!(desired.holder(), read_holder);
                    prop_assert_eq!(desired.preferred(), None);
                }
            }
            if let Some(holder) = desired.holder().filter(|h| Some(*h) != read_holder) {
                prop_assert!(offered(holder), "holder {holder:?} was not offered");
            }
        }
    }

    /// A candidate that sits out the Lease's elections (its record's sit-outs, or for a missing
    /// Lease those recorded for its key), or the holder that never renewed the expired Lease, is
    /// offered to the strategy only when no one else is: the offer is all of them or none.
    #[test]
    fn a_candidate_that_sits_out_is_offered_only_when_no_one_else_can_lead(
        lease in leases(),
        candidates in candidates(),
        settings in settings(),
    ) {
        let (plan, _) = step(lease.as_ref(), &candidates, &settings, Answer::FirstByName);
        let Plan::Decide(election) = &plan else {
            return Ok(());
        };
        let now = settings.now;
        let sitting_out = lease
            .as_ref()
            .map_or(settings.sitting_out.as_slice(), |l| l.sitting_out.as_slice());
        let never_renewed = lease.as_ref().and_then(|l| never_renewed_holder(l, now));
        let out = |name: &str| {
            never_renewed == Some(name) || sitting_out.iter().any(|s| s.keeps_out(name, now))
        };
        let offered = &election.request().candidates;
        prop_assert!(
            offered.iter().all(|c| out(&c.name)) || !offered.iter().any(|c| out(&c.name)),
            "offered {:?}",
            offered.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
    }

    /// The plan and the outcome are the same whatever the order of the candidates.
    #[test]
    fn the_decision_does_not_depend_on_the_order_of_the_candidates(
        lease in leases(),
        (candidates, shuffled) in candidates().prop_flat_map(|c| (Just(c.clone()), Just(c).prop_shuffle())),
        settings in settings(),
        answer in answers(),
    ) {
        let in_order = step(lease.as_ref(), &candidates, &settings, answer);
        let shuffled = step(lease.as_ref(), &shuffled, &settings, answer);
        prop_assert_eq!(in_order, shuffled);
    }

    /// A write of an existing Lease carries the resourceVersion it was read at, its precondition;
    /// a Lease read missing is created.
    #[test]
    fn a_write_carries_the_resource_version_it_was_read_at(
        lease in leases(),
        candidates in candidates(),
        settings in settings(),
        answer in answers(),
    ) {
        let (_, outcome) = step(lease.as_ref(), &candidates, &settings, answer);
        if let Some(Outcome::Write { write, .. }) = outcome {
            match &lease {
                Some(read) => {
                    prop_assert_ne!(write.kind, WriteKind::Create);
                    prop_assert_eq!(&write.desired.resource_version, &read.resource_version);
                }
                None => prop_assert_eq!(write.kind, WriteKind::Create),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// No step panics, whatever renewal period the controller measured: `next_renewal_awaited`
    /// adds half a period to a period, which overflowed `Duration` (a panic) for a period above
    /// 2^64 / 1.5 seconds at f313c5a.
    #[test]
    fn no_step_panics_on_any_renewal_period(
        lease in leases_renewing_every(any::<u64>().prop_map(Duration::from_secs)),
        candidates in candidates(),
        settings in settings(),
        answer in answers(),
    ) {
        step(lease.as_ref(), &candidates, &settings, answer);
    }
}

/// What a plugin may answer (issue 32, part 3, the WIT answer path): a candidate's name, a name
/// next to one, nobody, the empty name, a huge or non-ASCII string.
fn arbitrary_answers() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => "c[0-4]".prop_map(Some),
        1 => Just(None),
        1 => Just(Some(String::new())),
        1 => "c[0-4] |C[0-4]|c[0-4]\\.".prop_map(Some),
        1 => "\\PC{0,8}".prop_map(Some),
        1 => Just(Some("c".repeat(100_000))),
    ]
}

/// Cases of the arbitrary-answer property: `CONCLAVE_FUZZ_CASES`, else 10,000.
fn fuzz_cases() -> u32 {
    std::env::var("CONCLAVE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: fuzz_cases(),
        // Candidate names are filtered to valid ones: a long run rejects more than the default
        // 65,536 draws in all.
        max_local_rejects: u32::MAX,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever the strategy answers, [`Election::apply_answer`] never panics and never writes a
    /// name that was not offered: the engine refuses such an answer first (`InvalidAnswer`), and
    /// the core holds on its own, for every caller (the controller, `conclave status`, the demo).
    /// A plugin of 0.2 or later answers with a position: [`PreparedRequest::name_at`] maps only a
    /// position inside the request to a name, and that name is offered.
    #[test]
    fn an_arbitrary_answer_writes_only_offered_candidates(
        lease in leases(),
        candidates in candidates(),
        settings in settings(),
        answer in arbitrary_answers(),
        position in prop_oneof![4 => 0u32..8, 1 => any::<u32>()],
    ) {
        let has_strategy = |s: &str| s == OLDEST_EMULATION_VERSION || s == THIRD_PARTY;
        let plan = plan_step(&StepInput {
            namespace: "ns",
            name: "lease",
            lease: lease.as_ref(),
            candidates: &candidates,
            now: settings.now,
            config: config(&settings),
            builtin_active: settings.builtin_active,
            has_strategy: &has_strategy,
            arrivals: settings.arrivals,
            deleted_while_held_until: settings.deleted_while_held_until,
            sitting_out: &settings.sitting_out,
        });
        let Plan::Decide(election) = &plan else {
            return Ok(());
        };
        let request = election.request();
        let offered = |name: &str| request.has_candidate(name);
        if let Ok(prepared) = PreparedRequest::new(request) {
            match prepared.name_at(position) {
                Some(name) => {
                    prop_assert!(offered(name));
                    prop_assert!((position as usize) < request.candidates.len());
                }
                None => prop_assert!(position as usize >= request.candidates.len()),
            }
        }
        let read_holder = lease.as_ref().and_then(LeaseRecord::holder);
        match election.apply_answer(answer.as_deref()) {
            Outcome::Write { winner, write, .. } => {
                prop_assert!(offered(&winner), "winner {winner:?} was not offered");
                if let Some(holder) = write.desired.holder().filter(|h| Some(*h) != read_holder) {
                    prop_assert!(offered(holder), "holder {holder:?} was not offered");
                }
                if let Some(preferred) = write.desired.preferred() {
                    prop_assert!(offered(preferred), "preferredHolder {preferred:?} was not offered");
                }
            }
            // A ping may go to a candidate the strategy was not offered (one sitting out), but
            // only to a candidate of the Lease.
            Outcome::Ping { candidates: pinged, .. } => {
                for name in &pinged {
                    prop_assert!(
                        candidates.iter().any(|c| &c.name == name),
                        "pinged {name:?}, who is not a candidate"
                    );
                }
            }
            _ => {}
        }
    }
}
