//! The demo's journal: every observation arrives here as an [`Event`], is printed as one line,
//! and feeds the hand-off measurements and the summary table.
//!
//! A hand-off is measured from the moment it was asked for (the leader was told to stop, or the
//! controller's `preferredHolder` was first seen, by the demo's Lease watch or by the leader
//! stepping down, whichever came first) to the old leader's release and to the new leader's
//! first term, all wall-clock times taken in this process.

use super::LeaseId;
use conclave_controller::status::table;
use conclave_core::k8s::now;
use conclave_core::time::Timestamp;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;
use tokio::sync::mpsc;

/// The scenario's phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Three replicas at 1.36.0/1.36.0 start and an election happens.
    Start,
    /// Replica by replica, binary version 1.37.0, emulation version still 1.36.0.
    Binary,
    /// Replica by replica, emulation version 1.37.0.
    Emulation,
}

impl Phase {
    /// A short name for tables.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Binary => "binary",
            Self::Emulation => "emulation",
        }
    }
}

/// How a hand-off was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffKind {
    /// The leading replica was stopped gracefully (rolling upgrade).
    Shutdown,
    /// The controller wrote `preferredHolder` naming a better candidate.
    Preempted,
}

impl HandoffKind {
    fn label(self) -> &'static str {
        match self {
            Self::Shutdown => "shutdown",
            Self::Preempted => "pre-empted",
        }
    }
}

/// What happened.
#[derive(Debug, Clone)]
pub enum What {
    /// Free text from the scenario (steps, header).
    Note(String),
    /// A new phase begins.
    Phase(Phase, String),
    /// A replica is being stopped gracefully; `identities` are its candidates per Lease.
    Stopping {
        /// The replica.
        replica: String,
        /// Its identity in each Lease.
        identities: Vec<(LeaseId, String)>,
    },
    /// A LeaseCandidate appeared.
    Registered {
        /// Its Lease.
        lease: LeaseId,
        /// Its name.
        identity: String,
        /// `binaryVersion/emulationVersion`.
        versions: String,
    },
    /// A LeaseCandidate was deleted.
    Removed {
        /// Its Lease.
        lease: LeaseId,
        /// Its name.
        identity: String,
    },
    /// The controller wrote `pingTime`.
    Ping {
        /// Its Lease.
        lease: LeaseId,
        /// The candidate pinged.
        identity: String,
    },
    /// The candidate answered a ping by renewing.
    Ack {
        /// Its Lease.
        lease: LeaseId,
        /// The candidate.
        identity: String,
        /// From `pingTime` to `renewTime`.
        after: Duration,
    },
    /// The Lease's holder, preferred holder or the strategy's pick changed.
    LeaseState {
        /// The Lease.
        lease: LeaseId,
        /// `holderIdentity`.
        holder: Option<String>,
        /// `preferredHolder`.
        preferred: Option<String>,
        /// Whom the strategy picks now (through the engine).
        pick: String,
    },
    /// A replica's elector started a term.
    Leading {
        /// The Lease.
        lease: LeaseId,
        /// The candidate.
        identity: String,
        /// Term number (per elector).
        term: u64,
    },
    /// A replica's term ended and its work drained.
    StoppedLeading {
        /// The Lease.
        lease: LeaseId,
        /// The candidate.
        identity: String,
        /// Term number.
        term: u64,
        /// Why (`preempted`, `shutdown`, `lease-lost`).
        reason: &'static str,
        /// Work items done in the term.
        work: u64,
    },
    /// A replica released the Lease after its term.
    Released {
        /// The Lease.
        lease: LeaseId,
        /// The candidate.
        identity: String,
    },
    /// A replica could not release the Lease after its term: the next leader waits for it to
    /// expire.
    ReleaseFailed {
        /// The Lease.
        lease: LeaseId,
        /// The candidate.
        identity: String,
        /// Why, as the elector said it.
        error: String,
    },
}

/// One observation, with the wall-clock time it happened (or was observed).
#[derive(Debug, Clone)]
pub struct Event {
    /// When.
    pub at: Timestamp,
    /// What.
    pub what: What,
}

/// The sending side, cheap to clone.
#[derive(Debug, Clone)]
pub struct Events(mpsc::UnboundedSender<Event>);

impl Events {
    /// Records `what` as happening now.
    pub fn send(&self, what: What) {
        self.send_at(now(), what);
    }

    /// Records `what` as happening at `at`.
    pub fn send_at(&self, at: Timestamp, what: What) {
        // The journal outlives every sender; a send after it stopped has nobody to tell.
        let _ = self.0.send(Event { at, what });
    }

    /// Records a line of narration.
    pub fn note(&self, text: impl Into<String>) {
        self.send(What::Note(text.into()));
    }
}

/// An event's payload in the reorder buffer: ordered by time and arrival only.
#[derive(Debug)]
struct Slot(What);

impl PartialEq for Slot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Slot {}

impl PartialOrd for Slot {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slot {
    fn cmp(&self, _: &Self) -> Ordering {
        Ordering::Equal
    }
}

/// A completed hand-off.
#[derive(Debug, Clone)]
pub struct Handoff {
    /// The Lease.
    pub lease: LeaseId,
    /// The phase it was asked in.
    pub phase: Phase,
    /// The old leader.
    pub from: String,
    /// The new leader.
    pub to: String,
    /// How it was asked for.
    pub kind: HandoffKind,
    /// Asked for → old leader released the Lease (`None`: no release was seen).
    pub asked_to_released: Option<Duration>,
    /// Old leader released → new leader leading.
    pub released_to_leading: Option<Duration>,
    /// Asked for → new leader leading.
    pub total: Duration,
}

#[derive(Debug)]
struct Pending {
    from: String,
    kind: HandoffKind,
    phase: Phase,
    asked: Timestamp,
    released: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct LeaseTrack {
    leader: Option<String>,
    pending: Option<Pending>,
    last_state: Option<(Option<String>, Option<String>, String)>,
}

/// What the journal saw, for the summary and for tests.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Completed hand-offs in order.
    pub handoffs: Vec<Handoff>,
    /// Successive leaders of each Lease in each phase (the leader at the phase's start first).
    pub leaders: BTreeMap<(Phase, LeaseId), Vec<String>>,
    /// Pings written by the controller.
    pub pings: u64,
    /// Ping round trips (ping → ack).
    pub acks: Vec<Duration>,
    /// Terms and work items per candidate identity.
    pub work: BTreeMap<String, (u64, u64)>,
    /// Two leaders of one Lease at once, as seen by the replicas' electors (must stay empty).
    pub overlaps: Vec<String>,
    /// Releases that failed (the hand-off then waited for the Lease to expire).
    pub release_failures: Vec<String>,
}

/// The receiving side: prints and measures until every sender is gone.
pub struct Journal {
    started: Timestamp,
    out: Box<dyn Write + Send>,
    phase: Phase,
    leases: BTreeMap<LeaseId, LeaseTrack>,
    pings: BTreeMap<(LeaseId, String), Timestamp>,
    record: Record,
}

/// How long events wait before being handled, so that events sent by different tasks are
/// handled in the order they happened, not the order they arrived.
const REORDER_WINDOW: Duration = Duration::from_millis(200);

impl Journal {
    /// Consumes events until all senders are dropped, in the order they happened; returns what it
    /// saw and its output.
    pub async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) -> (Record, Box<dyn Write + Send>) {
        let mut buffer: BinaryHeap<Reverse<(Timestamp, u64, Slot)>> = BinaryHeap::new();
        let mut seq = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => {
                        seq += 1;
                        buffer.push(Reverse((event.at, seq, Slot(event.what))));
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    let horizon = now() - REORDER_WINDOW;
                    while buffer.peek().is_some_and(|Reverse((at, _, _))| *at <= horizon) {
                        if let Some(Reverse((at, _, Slot(what)))) = buffer.pop() {
                            self.handle(Event { at, what });
                        }
                    }
                }
            }
        }
        while let Some(Reverse((at, _, Slot(what)))) = buffer.pop() {
            self.handle(Event { at, what });
        }
        let _ = self.out.flush();
        (self.record, self.out)
    }

    fn line(&mut self, at: Timestamp, lease: Option<LeaseId>, text: &str) {
        let offset = at.as_micros().saturating_sub(self.started.as_micros()) as f64 / 1e6;
        let lease = lease.map_or("", LeaseId::label);
        let _ = writeln!(self.out, "{offset:>7.2}s  {lease:<9}  {text}");
        let _ = self.out.flush();
    }

    fn handle(&mut self, event: Event) {
        let at = event.at;
        match event.what {
            What::Note(text) => {
                let _ = writeln!(self.out, "{text}");
                let _ = self.out.flush();
            }
            What::Phase(phase, title) => {
                self.phase = phase;
                let _ = writeln!(self.out, "\n── {title}");
                let leaders: Vec<(LeaseId, String)> = self
                    .leases
                    .iter()
                    .filter_map(|(id, t)| t.leader.clone().map(|l| (*id, l)))
                    .collect();
                for (lease, leader) in leaders {
                    self.record
                        .leaders
                        .entry((phase, lease))
                        .or_default()
                        .push(leader);
                }
            }
            What::Stopping {
                replica,
                identities,
            } => {
                self.line(at, None, &format!("stopping {replica} gracefully"));
                for (lease, identity) in identities {
                    let phase = self.phase;
                    let track = self.leases.entry(lease).or_default();
                    if track.leader.as_deref() == Some(identity.as_str()) && track.pending.is_none()
                    {
                        track.pending = Some(Pending {
                            from: identity,
                            kind: HandoffKind::Shutdown,
                            phase,
                            asked: at,
                            released: None,
                        });
                    }
                }
            }
            What::Registered {
                lease,
                identity,
                versions,
            } => {
                self.line(
                    at,
                    Some(lease),
                    &format!("candidate {identity} registered ({versions})"),
                );
            }
            What::Removed { lease, identity } => {
                self.line(at, Some(lease), &format!("candidate {identity} removed"));
            }
            What::Ping { lease, identity } => {
                self.record.pings += 1;
                self.pings.insert((lease, identity.clone()), at);
                self.line(at, Some(lease), &format!("ping → {identity}"));
            }
            What::Ack {
                lease,
                identity,
                after,
            } => {
                self.pings.remove(&(lease, identity.clone()));
                self.record.acks.push(after);
                self.line(
                    at,
                    Some(lease),
                    &format!("ack  ← {identity} ({})", millis(after)),
                );
            }
            What::LeaseState {
                lease,
                holder,
                preferred,
                pick,
            } => self.lease_state(at, lease, holder, preferred, pick),
            What::Leading {
                lease,
                identity,
                term,
            } => self.leading(at, lease, identity, term),
            What::StoppedLeading {
                lease,
                identity,
                term,
                reason,
                work,
            } => {
                let phase = self.phase;
                let track = self.leases.entry(lease).or_default();
                if track.leader.as_deref() == Some(identity.as_str()) {
                    track.leader = None;
                    // The leader may see preferredHolder before the demo's own watch does.
                    if reason == "preempted" && track.pending.is_none() {
                        track.pending = Some(Pending {
                            from: identity.clone(),
                            kind: HandoffKind::Preempted,
                            phase,
                            asked: at,
                            released: None,
                        });
                    }
                }
                let entry = self.record.work.entry(identity.clone()).or_default();
                entry.1 += work;
                self.line(
                    at,
                    Some(lease),
                    &format!(
                        "{identity} stopped leading (term {term}, {reason}; {work} work items done)"
                    ),
                );
            }
            What::Released { lease, identity } => {
                let track = self.leases.entry(lease).or_default();
                if let Some(pending) = track.pending.as_mut()
                    && pending.from == identity
                {
                    pending.released = Some(at);
                }
                self.line(at, Some(lease), &format!("{identity} released the Lease"));
            }
            What::ReleaseFailed {
                lease,
                identity,
                error,
            } => {
                let text = format!("{identity} could not release the Lease: {error}");
                self.line(at, Some(lease), &text);
                self.record
                    .release_failures
                    .push(format!("{}: {text}", lease.label()));
            }
        }
    }

    fn lease_state(
        &mut self,
        at: Timestamp,
        lease: LeaseId,
        holder: Option<String>,
        preferred: Option<String>,
        pick: String,
    ) {
        let phase = self.phase;
        let track = self.leases.entry(lease).or_default();
        let state = (holder.clone(), preferred.clone(), pick.clone());
        if track.last_state.as_ref() == Some(&state) {
            return;
        }
        track.last_state = Some(state);
        // A holder that never started leading is re-assigned, not handed off.
        if let (Some(preferred), Some(holder)) = (&preferred, &holder)
            && preferred != holder
            && track.pending.is_none()
            && track.leader.as_ref() == Some(holder)
        {
            track.pending = Some(Pending {
                from: holder.clone(),
                kind: HandoffKind::Preempted,
                phase,
                asked: at,
                released: None,
            });
        }
        let text = format!(
            "holder {} · preferred {} · strategy picks {pick}",
            holder.as_deref().unwrap_or("-"),
            preferred.as_deref().unwrap_or("-"),
        );
        self.line(at, Some(lease), &text);
    }

    fn leading(&mut self, at: Timestamp, lease: LeaseId, identity: String, term: u64) {
        let phase = self.phase;
        let track = self.leases.entry(lease).or_default();
        if let Some(other) = track.leader.as_ref().filter(|l| **l != identity) {
            self.record.overlaps.push(format!(
                "{}: {identity} started leading while {other} still led",
                lease.label()
            ));
        }
        track.leader = Some(identity.clone());
        let handoff = match track.pending.take() {
            Some(pending) if pending.from != identity => {
                let total = between(pending.asked, at);
                Some(Handoff {
                    lease,
                    phase: pending.phase,
                    from: pending.from,
                    to: identity.clone(),
                    kind: pending.kind,
                    asked_to_released: pending.released.map(|r| between(pending.asked, r)),
                    released_to_leading: pending.released.map(|r| between(r, at)),
                    total,
                })
            }
            other => {
                track.pending = other;
                None
            }
        };
        self.record.work.entry(identity.clone()).or_default().0 += 1;
        self.record
            .leaders
            .entry((phase, lease))
            .or_default()
            .push(identity.clone());
        let mut text = format!("{identity} leads (term {term})");
        if let Some(handoff) = handoff {
            let _ = write!(
                text,
                " ← hand-off from {} ({}) in {}",
                handoff.from,
                handoff.kind.label(),
                millis(handoff.total)
            );
            if let (Some(a), Some(b)) = (handoff.asked_to_released, handoff.released_to_leading) {
                let _ = write!(
                    text,
                    ": released after {}, led {} later",
                    millis(a),
                    millis(b)
                );
            }
            self.record.handoffs.push(handoff);
        }
        self.line(at, Some(lease), &text);
    }
}

/// Creates a journal and the receiver it runs on.
pub fn journal(
    started: Timestamp,
    out: Box<dyn Write + Send>,
) -> (Journal, Events, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let journal = Journal {
        started,
        out,
        phase: Phase::Start,
        leases: BTreeMap::new(),
        pings: BTreeMap::new(),
        record: Record::default(),
    };
    (journal, Events(tx), rx)
}

fn between(from: Timestamp, to: Timestamp) -> Duration {
    from.elapsed_at(to)
}

/// `42 ms`, `1.25 s`.
pub fn millis(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.2} s", duration.as_secs_f64())
    }
}

fn opt_millis(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "-".into(), millis)
}

/// Renders the summary tables.
#[must_use]
pub fn summary(record: &Record, leases: &[LeaseId]) -> String {
    let mut out = String::new();
    out.push_str("\nSummary\n\n");
    if record.handoffs.is_empty() {
        out.push_str("  no hand-offs\n");
    } else {
        let mut rows = vec![vec![
            "#".into(),
            "LEASE".into(),
            "PHASE".into(),
            "FROM → TO".into(),
            "ASKED BY".into(),
            "ASKED→RELEASED".into(),
            "RELEASED→LEADING".into(),
            "TOTAL".into(),
        ]];
        for (i, h) in record.handoffs.iter().enumerate() {
            rows.push(vec![
                (i + 1).to_string(),
                h.lease.label().into(),
                h.phase.label().into(),
                format!("{} → {}", h.from, h.to),
                h.kind.label().into(),
                opt_millis(h.asked_to_released),
                opt_millis(h.released_to_leading),
                millis(h.total),
            ]);
        }
        table(&mut out, "  ", &rows);
        let mut totals: Vec<Duration> = record.handoffs.iter().map(|h| h.total).collect();
        totals.sort();
        let _ = writeln!(
            out,
            "  {} hand-offs; total latency median {}, max {}",
            totals.len(),
            millis(totals[totals.len() / 2]),
            millis(*totals.last().unwrap_or(&Duration::ZERO)),
        );
    }
    out.push('\n');
    let mut rows = vec![{
        let mut header = vec!["PHASE".to_owned()];
        header.extend(
            leases
                .iter()
                .map(|l| format!("LEADERS OF {}", l.label().to_uppercase())),
        );
        header
    }];
    for phase in [Phase::Start, Phase::Binary, Phase::Emulation] {
        let mut row = vec![phase.label().to_owned()];
        for lease in leases {
            let mut leaders = record
                .leaders
                .get(&(phase, *lease))
                .cloned()
                .unwrap_or_default();
            leaders.dedup();
            row.push(if leaders.is_empty() {
                "-".into()
            } else {
                leaders.join(" → ")
            });
        }
        rows.push(row);
    }
    table(&mut out, "  ", &rows);
    out.push('\n');
    let mut acks = record.acks.clone();
    acks.sort();
    if acks.is_empty() {
        let _ = writeln!(out, "  pings: {} sent, none acked", record.pings);
    } else {
        let _ = writeln!(
            out,
            "  pings: {} sent, {} acked; ping→ack median {}, max {}",
            record.pings,
            acks.len(),
            millis(acks[acks.len() / 2]),
            millis(*acks.last().unwrap_or(&Duration::ZERO)),
        );
    }
    let work: Vec<String> = record
        .work
        .iter()
        .map(|(identity, (terms, items))| format!("{identity} {terms}/{items}"))
        .collect();
    let _ = writeln!(out, "  terms/work items while leading: {}", work.join(", "));
    if record.overlaps.is_empty() {
        out.push_str("  two leaders of one Lease at once: never\n");
    } else {
        for overlap in &record.overlaps {
            let _ = writeln!(out, "  TWO LEADERS: {overlap}");
        }
    }
    for failure in &record.release_failures {
        let _ = writeln!(out, "  release failed: {failure}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_micros(1_000_000_000_000 + ms * 1000)
    }

    fn feed(journal: &mut Journal, ms: i64, what: What) {
        journal.handle(Event { at: at(ms), what });
    }

    fn leading(identity: &str) -> What {
        What::Leading {
            lease: LeaseId::Main,
            identity: identity.into(),
            term: 1,
        }
    }

    #[test]
    fn shutdown_and_preemption_hand_offs_are_measured_from_the_request() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(&mut j, 0, leading("a"));
        feed(&mut j, 100, What::Phase(Phase::Binary, "binary".into()));
        feed(
            &mut j,
            1000,
            What::Stopping {
                replica: "replica-a".into(),
                identities: vec![(LeaseId::Main, "a".into())],
            },
        );
        feed(
            &mut j,
            1010,
            What::StoppedLeading {
                lease: LeaseId::Main,
                identity: "a".into(),
                term: 1,
                reason: "shutdown",
                work: 3,
            },
        );
        feed(
            &mut j,
            1020,
            What::Released {
                lease: LeaseId::Main,
                identity: "a".into(),
            },
        );
        feed(&mut j, 1100, leading("b"));
        // The controller pre-empts b for c.
        feed(
            &mut j,
            2000,
            What::LeaseState {
                lease: LeaseId::Main,
                holder: Some("b".into()),
                preferred: Some("c".into()),
                pick: "c".into(),
            },
        );
        feed(
            &mut j,
            2040,
            What::StoppedLeading {
                lease: LeaseId::Main,
                identity: "b".into(),
                term: 1,
                reason: "preempted",
                work: 9,
            },
        );
        feed(
            &mut j,
            2050,
            What::Released {
                lease: LeaseId::Main,
                identity: "b".into(),
            },
        );
        feed(&mut j, 2080, leading("c"));
        let record = j.record;
        assert_eq!(record.handoffs.len(), 2);
        let first = &record.handoffs[0];
        assert_eq!((first.from.as_str(), first.to.as_str()), ("a", "b"));
        assert_eq!(first.kind, HandoffKind::Shutdown);
        assert_eq!(first.asked_to_released, Some(Duration::from_millis(20)));
        assert_eq!(first.released_to_leading, Some(Duration::from_millis(80)));
        assert_eq!(first.total, Duration::from_millis(100));
        let second = &record.handoffs[1];
        assert_eq!(second.kind, HandoffKind::Preempted);
        assert_eq!(second.total, Duration::from_millis(80));
        assert_eq!(
            record.leaders.get(&(Phase::Binary, LeaseId::Main)),
            Some(&vec!["a".to_owned(), "b".to_owned(), "c".to_owned()])
        );
        assert!(
            record.overlaps.is_empty(),
            "each leader stopped before the next"
        );
    }

    #[test]
    fn a_leader_stepping_down_before_the_watch_sees_preferred_holder_is_a_preemption() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(&mut j, 0, leading("b"));
        feed(
            &mut j,
            1000,
            What::StoppedLeading {
                lease: LeaseId::Main,
                identity: "b".into(),
                term: 1,
                reason: "preempted",
                work: 1,
            },
        );
        feed(
            &mut j,
            1005,
            What::LeaseState {
                lease: LeaseId::Main,
                holder: Some("b".into()),
                preferred: Some("c".into()),
                pick: "c".into(),
            },
        );
        feed(
            &mut j,
            1010,
            What::Released {
                lease: LeaseId::Main,
                identity: "b".into(),
            },
        );
        feed(&mut j, 1050, leading("c"));
        let handoffs = &j.record.handoffs;
        assert_eq!(handoffs.len(), 1);
        assert_eq!(handoffs[0].kind, HandoffKind::Preempted);
        assert_eq!(handoffs[0].total, Duration::from_millis(50));
        assert_eq!(
            handoffs[0].asked_to_released,
            Some(Duration::from_millis(10))
        );
    }

    #[test]
    fn a_holder_that_never_led_is_reassigned_not_handed_off() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(
            &mut j,
            0,
            What::LeaseState {
                lease: LeaseId::Main,
                holder: Some("a".into()),
                preferred: Some("b".into()),
                pick: "b".into(),
            },
        );
        feed(&mut j, 50, leading("b"));
        assert!(j.record.handoffs.is_empty());
    }

    #[test]
    fn a_failed_release_is_recorded_and_summarized() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(&mut j, 0, leading("a"));
        feed(
            &mut j,
            10,
            What::ReleaseFailed {
                lease: LeaseId::Main,
                identity: "a".into(),
                error: "the API server said no".into(),
            },
        );
        assert_eq!(j.record.release_failures.len(), 1);
        let failure = &j.record.release_failures[0];
        assert!(
            failure.contains("a could not release the Lease: the API server said no"),
            "{failure}"
        );
        let summary = summary(&j.record, &[LeaseId::Main]);
        assert!(summary.contains("  release failed: "), "{summary}");
    }

    #[test]
    fn a_second_leader_before_the_first_stops_is_reported() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(&mut j, 0, leading("a"));
        feed(&mut j, 10, leading("b"));
        assert_eq!(j.record.overlaps.len(), 1);
    }

    #[test]
    fn stopping_a_follower_is_not_a_hand_off() {
        let (mut j, _events, _rx) = journal(at(0), Box::new(std::io::sink()));
        feed(&mut j, 0, leading("a"));
        feed(
            &mut j,
            10,
            What::Stopping {
                replica: "replica-b".into(),
                identities: vec![(LeaseId::Main, "b".into())],
            },
        );
        feed(&mut j, 20, leading("a"));
        assert!(j.record.handoffs.is_empty());
    }
}
