use super::*;
use alloc::string::ToString;
use alloc::vec;

/// Model time `secs` as a timestamp.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_secs(secs)
}

/// A Lease held by `holder` (`""`: released), renewed at `renew`, lasting 10 s.
fn lease(holder: &str, renew: i64) -> LeaseRecord {
    LeaseRecord {
        namespace: "ns".into(),
        name: "lease".into(),
        resource_version: renew.to_string(),
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(10),
        renew_time: Some(at(renew)),
        ..LeaseRecord::default()
    }
}

fn preferring(mut record: LeaseRecord, preferred: &str) -> LeaseRecord {
    record.preferred_holder = Some(preferred.into());
    record
}

/// What a step reading `record` at `now` is told of its renewal.
fn annotated(memory: &LeaseMemory, record: &LeaseRecord, now: i64) -> LeaseRecord {
    let mut record = record.clone();
    memory.annotate(&mut record, at(now));
    record
}

/// One event a Lease's memory meets, at a second.
enum Event {
    Watched(LeaseRecord),
    Listed(LeaseRecord),
    Deleted(LeaseRecord),
    MissingFromRelist,
    Settled(Option<i64>),
}

/// Events at their seconds, in order.
type Events = Vec<(i64, Event)>;

fn feed(events: &[(i64, Event)]) -> LeaseMemory {
    let mut memory = LeaseMemory::default();
    for (now, event) in events {
        match event {
            Event::Watched(record) => {
                memory.watched(record, at(*now));
            }
            Event::Listed(record) => memory.listed(record, at(*now)),
            Event::Deleted(record) => memory.deleted(record, at(*now)),
            Event::MissingFromRelist => memory.missing_from_relist(at(*now)),
            Event::Settled(until) => memory.settle(until.map(at)),
        }
    }
    memory
}

#[test]
fn a_renewal_is_timed_by_this_controller_s_clock_and_its_period_between_watched_renewals() {
    use Event::{Listed, Watched};
    // (events, the Lease read at, (observed_renewal, renew_period in seconds))
    type Timed = (i64, Option<u64>);
    let cases: [(&str, Events, i64, Timed); 5] = [
        (
            "an acquisition watched: seen when it arrived, no period",
            vec![(5, Watched(lease("a", 2)))],
            6,
            (5, None),
        ),
        (
            "the acquisition then a renewal: no period (a take-over lands anywhere)",
            vec![(5, Watched(lease("a", 2))), (7, Watched(lease("a", 4)))],
            8,
            (7, None),
        ),
        (
            "two renewals after the acquisition: the period between them",
            vec![
                (5, Watched(lease("a", 2))),
                (7, Watched(lease("a", 4))),
                (10, Watched(lease("a", 6))),
            ],
            11,
            (10, Some(3)),
        ),
        (
            "a listed renewal: seen when listed, never by the holder's clock",
            vec![(9, Listed(lease("a", 2)))],
            9,
            (9, None),
        ),
        (
            "another change carrying the same renewal keeps its time",
            vec![
                (5, Watched(lease("a", 2))),
                (8, Watched(preferring(lease("a", 2), "b"))),
            ],
            9,
            (5, None),
        ),
    ];
    for (case, events, now, (observed, period)) in cases {
        let memory = feed(&events);
        let read = match &events.last().expect("an event").1 {
            Watched(record) | Listed(record) => record.clone(),
            _ => unreachable!("cases end on a Lease"),
        };
        let record = annotated(&memory, &read, now);
        assert_eq!(record.observed_renewal, Some(at(observed)), "{case}");
        assert_eq!(
            record.renew_period,
            period.map(Duration::from_secs),
            "{case}"
        );
    }
}

#[test]
fn a_record_newer_than_the_renewal_seen_counts_from_now() {
    let memory = feed(&[(5, Event::Watched(lease("a", 2)))]);
    let record = annotated(&memory, &lease("a", 4), 6);
    assert_eq!(record.observed_renewal, Some(at(6)));
    assert_eq!(record.renew_period, None);
}

#[test]
fn a_watched_release_names_who_let_go_or_for_whom() {
    use Event::Watched;
    // (events before the release, released_by, released_for)
    let cases: [(&str, Events, Option<&str>, Option<&str>); 3] = [
        (
            "unasked",
            vec![(1, Watched(lease("a", 1)))],
            Some("a"),
            None,
        ),
        (
            "asked by a preferredHolder",
            vec![(1, Watched(preferring(lease("a", 1), "b")))],
            None,
            Some("b"),
        ),
        (
            "asked, then the preferredHolder cleared: still asked (issue 34, finding 7)",
            vec![
                (1, Watched(preferring(lease("a", 1), "b"))),
                (2, Watched(lease("a", 1))),
            ],
            None,
            Some("b"),
        ),
    ];
    for (case, mut events, by, for_) in cases {
        events.push((3, Watched(lease("", 3))));
        let memory = feed(&events);
        let record = annotated(&memory, &lease("", 3), 4);
        assert_eq!(record.released_by.as_deref(), by, "{case}");
        assert_eq!(record.released_for.as_deref(), for_, "{case}");
    }
}

#[test]
fn a_lease_deleted_while_held_is_held_until_its_holder_may_have_stopped() {
    use Event::{Deleted, Listed, MissingFromRelist, Watched};
    let none = || None;
    // (events, asked at, held until)
    let cases: [(&str, Events, i64, Option<i64>); 6] = [
        (
            "deleted at its last renewal seen: until that renewal's expiry",
            vec![(5, Watched(lease("a", 4))), (8, Deleted(lease("a", 4)))],
            9,
            Some(15),
        ),
        (
            "deleted carrying a renewal not seen: from the deletion",
            vec![(5, Watched(lease("a", 4))), (8, Deleted(lease("a", 7)))],
            9,
            Some(18),
        ),
        (
            "deleted free: not held",
            vec![(5, Watched(lease("", 4))), (8, Deleted(lease("", 4)))],
            9,
            None,
        ),
        (
            "the hold has passed",
            vec![(5, Watched(lease("a", 4))), (8, Deleted(lease("a", 4)))],
            15,
            None,
        ),
        (
            "seen again: not held",
            vec![
                (5, Watched(lease("a", 4))),
                (8, Deleted(lease("a", 4))),
                (9, Listed(lease("b", 9))),
            ],
            10,
            None,
        ),
        (
            "missing from a relist: until a renewal at the relist expires (issue 47, finding 2)",
            vec![(5, Watched(lease("a", 4))), (30, MissingFromRelist)],
            31,
            Some(40),
        ),
    ];
    for (case, events, now, until) in cases {
        let mut memory = feed(&events);
        assert_eq!(
            memory.held_after_deletion(at(now), none),
            until.map(at),
            "{case}"
        );
    }
}

#[test]
fn a_lease_not_cached_is_held_by_the_start_hold_a_cached_one_is_not() {
    let start_hold = || Some(at(20));
    let mut unseen = LeaseMemory::default();
    assert_eq!(unseen.held_after_deletion(at(10), start_hold), Some(at(20)));
    assert_eq!(unseen.held_after_deletion(at(20), start_hold), None);
    let mut seen = feed(&[(5, Event::Listed(lease("a", 4)))]);
    assert_eq!(seen.held_after_deletion(at(10), start_hold), None);
}

#[test]
fn only_a_renewal_of_a_settled_lease_decides_nothing() {
    use Event::{Settled, Watched};
    // (events before, the event at 8, whether it decides nothing)
    let cases: [(&str, Events, LeaseRecord, bool); 5] = [
        (
            "settled until an event, renewed by its holder",
            vec![(5, Watched(lease("a", 5))), (5, Settled(None))],
            lease("a", 8),
            true,
        ),
        (
            "not settled",
            vec![(5, Watched(lease("a", 5)))],
            lease("a", 8),
            false,
        ),
        (
            "settled until before the renewal",
            vec![(5, Watched(lease("a", 5))), (5, Settled(Some(7)))],
            lease("a", 8),
            false,
        ),
        (
            "settled, but the renewal brings a preferredHolder",
            vec![(5, Watched(lease("a", 5))), (5, Settled(None))],
            preferring(lease("a", 8), "b"),
            false,
        ),
        (
            "settled, but another holder",
            vec![(5, Watched(lease("a", 5))), (5, Settled(None))],
            lease("b", 8),
            false,
        ),
    ];
    for (case, events, next, decides_nothing) in cases {
        let mut memory = feed(&events);
        let watched = memory.watched(&next, at(8));
        let expected = if decides_nothing {
            // Looked at again when a step on the renewed Lease would look again.
            let record = annotated(&memory, &next, 8);
            super::Watched::Renewal {
                recheck_at: crate::plan::recheck_at(Some(&record), at(8)),
            }
        } else {
            super::Watched::Elect
        };
        assert_eq!(watched, expected, "{case}");
    }
}

#[test]
fn a_settled_lease_stays_settled_only_through_renewals_that_decide_nothing() {
    let mut memory = feed(&[
        (5, Event::Watched(lease("a", 5))),
        (5, Event::Settled(None)),
    ]);
    assert!(matches!(
        memory.watched(&lease("a", 7), at(7)),
        Watched::Renewal { .. }
    ));
    assert!(matches!(
        memory.watched(&lease("a", 9), at(9)),
        Watched::Renewal { .. }
    ));
    memory.unsettle();
    assert_eq!(memory.watched(&lease("a", 11), at(11)), Watched::Elect);
    let mut not_cached = LeaseMemory::default();
    not_cached.settle(None);
    assert_eq!(not_cached.watched(&lease("a", 1), at(1)), Watched::Elect);
}

#[test]
fn a_held_back_pre_emption_is_remembered_for_the_holder_s_tenure() {
    let mut memory = feed(&[(1, Event::Watched(lease("a", 1)))]);
    memory.preemption_held_back(at(2));
    memory.preemption_held_back(at(3));
    memory.watched(&lease("a", 4), at(4));
    let read = |memory: &LeaseMemory, record| annotated(memory, &record, 5).preemption_held_since;
    assert_eq!(read(&memory, lease("a", 4)), Some(at(2)));
    memory.watched(&lease("b", 5), at(5));
    assert_eq!(read(&memory, lease("b", 5)), None);
}

#[test]
fn a_holder_that_never_renewed_sits_out_longer_each_time_in_a_row() {
    let backoff = crate::plan::never_renewed_backoff;
    let mut memory = LeaseMemory::default();
    let first = memory.sit_out("a", at(100));
    assert_eq!(first.count, 1);
    assert_eq!(first.until, at(100) + backoff(1));
    // Failing again within a sit-out's length of its end: one more strike, longer.
    let again = first.until + backoff(1) - Duration::from_secs(1);
    let second = memory.sit_out("a", again);
    assert_eq!(second.count, 2);
    assert_eq!(second.until, again + backoff(2));
    // Long after: it starts over.
    let later = second.until + backoff(2) + Duration::from_secs(1);
    assert_eq!(memory.sit_out("a", later).count, 1);
    // Sitting out until its time, through a deletion of the Lease.
    memory.deleted(&lease("a", 1), later);
    let sitting = memory.sitting_out(later);
    assert_eq!(sitting.len(), 1);
    assert_eq!(sitting[0].candidate, "a");
    assert!(memory.sitting_out(later + backoff(1)).is_empty());
    assert_eq!(memory.strikes().count(), 1);
}

#[test]
fn a_live_holder_is_judged_as_a_step_would() {
    let mut memory = feed(&[(5, Event::Watched(lease("a", 5)))]);
    assert!(memory.has_live_holder(at(14)));
    assert!(!memory.has_live_holder(at(16)));
    let mut released = feed(&[(5, Event::Watched(lease("", 5)))]);
    assert!(!released.has_live_holder(at(6)));
    assert!(!LeaseMemory::default().has_live_holder(at(6)));
}

#[test]
fn a_memory_is_empty_once_nothing_is_left_to_remember() {
    let mut memory = feed(&[(5, Event::Watched(lease("", 5)))]);
    assert!(!memory.is_empty());
    memory.deleted(&lease("", 5), at(6));
    assert!(memory.is_empty());
}
