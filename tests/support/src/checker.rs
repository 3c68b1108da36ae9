//! The split-brain checker: reads what the processes wrote, and nothing else.
//!
//! It shares no code with the elector (it does not use `conclave-candidate` at all): its input
//! is the output of each `conclave candidate` process, stdout and stderr as text (the order of
//! stdout's lines among themselves is kept; stderr's `work stopped` lines are read apart), from
//! the processes the candidate soak spawns on the host or from the container logs of the soak on
//! a real node. It uses these lines:
//! - `{"event":"leading","term":N,"observed_monotonic_ns":T,…}`: term N's leadership interval
//!   starts at T, when the process observed itself as holder (before its term began, so the
//!   interval is, if anything, too long);
//! - the work's log line `… work stopped term=N units=… monotonic_ns=T`, written by the term's one
//!   task as it returns: its tasks stopped at T;
//! - `{"event":"stopped-leading","term":N,"monotonic_ns":T,"reason":R,"leaked_tasks":K,…}`: the
//!   interval ends at T, after the drain;
//! - `{"event":"released","term":N,"monotonic_ns":T,…}`: the Lease was released after term N, at T;
//! - `{"event":"killed","monotonic_ns":T,…}`, appended by the harness once a SIGKILLed process
//!   was reaped: an open interval ends at T.
//!
//! Every T is a reading of `CLOCK_MONOTONIC` in nanoseconds, taken by the process itself (by the
//! harness for `killed`, with [`monotonic_ns`]); all processes are on one machine (containers
//! included: they share the host's monotonic clock), so the readings are comparable, and
//! unlike the wall-clock `at` fields they cannot step. It asserts, per Lease, that no two
//! intervals overlap, and per term that its tasks stopped before its release: its `work stopped`
//! reading, then its `stopped-leading` reading with `leaked_tasks` 0, both no later than its
//! `released` reading.

use std::collections::BTreeMap;
use std::time::Duration;

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds.
type Monotonic = u64;

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock `conclave candidate` stamps its transitions
/// with, read here without the candidate library, for the harness's `killed` lines.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).unwrap_or_default();
    let nanos = u64::try_from(now.tv_nsec).unwrap_or_default();
    seconds * 1_000_000_000 + nanos
}

/// One term's leadership interval, as its process printed it.
#[derive(Debug, Clone)]
struct Interval {
    lease: String,
    identity: String,
    term: u64,
    start: Monotonic,
    end: Monotonic,
    /// How it ended: the `stopped-leading` reason, or `killed`.
    ended: String,
}

/// One change of leader on a Lease: the next term after the previous one ended.
#[derive(Debug, Clone)]
pub struct HandOff {
    /// The Lease.
    pub lease: String,
    /// The previous leader's identity.
    pub from: String,
    /// The next leader's identity.
    pub to: String,
    /// How the previous term ended: `preempted`, `shutdown` (SIGTERM), `lease-lost`, `killed`.
    pub after: String,
    /// From the end of the previous interval to the start of the next: the Lease had no leader.
    pub gap: Duration,
    /// Whether the same identity led again (a new term of the same process).
    pub same_identity: bool,
}

impl HandOff {
    /// A hand-over the previous leader made itself (pre-empted, or stopping on SIGTERM), rather
    /// than one after a crash or a lost Lease.
    pub fn graceful(&self) -> bool {
        self.after == "preempted" || self.after == "shutdown"
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Terms seen (`leading` lines).
    pub terms: usize,
    /// How the terms ended, by reason.
    pub ends: BTreeMap<String, usize>,
    /// Consecutive terms on each Lease.
    pub hand_offs: Vec<HandOff>,
    /// `released` lines.
    pub releases: usize,
    /// Overlapping intervals of one Lease, described (must be empty).
    pub overlaps: Vec<String>,
    /// Terms whose tasks were not shown to stop before the term ended and the Lease was
    /// released, described (must be empty).
    pub leaked: Vec<String>,
    /// Terms that never ended, and lines that could not be read, described (must be empty).
    pub errors: Vec<String>,
}

impl Verdict {
    /// The hand-offs in one line for a soak table: how many, per minute of `elapsed`, by how the
    /// previous term ended, and how many went back to the same process.
    #[must_use]
    pub fn hand_off_summary(&self, elapsed: Duration) -> String {
        let by = |after: &str| self.hand_offs.iter().filter(|h| h.after == after).count();
        let minutes = elapsed.as_secs_f64() / 60.0;
        format!(
            "{} ({:.0}/min; after pre-emption {}, SIGTERM {}, SIGKILL {}, lost Lease {}; same \
             process again {})",
            self.hand_offs.len(),
            self.hand_offs.len() as f64 / minutes.max(f64::EPSILON),
            by("preempted"),
            by("shutdown"),
            by("killed"),
            by("lease-lost"),
            self.hand_offs.iter().filter(|h| h.same_identity).count()
        )
    }

    /// Whether it found neither overlaps, nor leaked tasks, nor unreadable output.
    pub fn clean(&self) -> bool {
        self.overlaps.is_empty() && self.leaked.is_empty() && self.errors.is_empty()
    }

    /// Panics, naming the first problems and `seed`, unless [`Self::clean`].
    pub fn assert_clean(&self, seed: u64) {
        assert!(
            self.clean(),
            "seed {seed}: overlaps {:?}; leaked {:?}; errors {:?}",
            first(&self.overlaps),
            first(&self.leaked),
            first(&self.errors)
        );
    }
}

fn first(items: &[String]) -> &[String] {
    &items[..items.len().min(5)]
}

/// Collects the processes' outputs, then judges them ([`Checker::verdict`]).
#[derive(Debug, Default)]
pub struct Checker {
    intervals: Vec<Interval>,
    verdict: Verdict,
}

/// A term being read from one output.
struct Open {
    term: u64,
    start: Monotonic,
}

impl Checker {
    /// Reads the output of one candidate process of `lease` with `identity`.
    pub fn add(&mut self, lease: &str, identity: &str, output: &str) {
        let who = format!("{lease}/{identity}");
        let mut open: Option<Open> = None;
        // When each term's work logged `work stopped` (stderr, so read apart from stdout's
        // transitions, whose order among themselves is kept), and when each printed
        // `stopped-leading`.
        let work_stopped: BTreeMap<u64, Monotonic> =
            output.lines().filter_map(work_stopped).collect();
        let mut stopped: BTreeMap<u64, Monotonic> = BTreeMap::new();
        for (number, line) in output.lines().enumerate() {
            let place = format!("{who} line {}", number + 1);
            if !line.starts_with('{') {
                continue;
            }
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                self.verdict
                    .errors
                    .push(format!("{place}: not JSON: {line}"));
                continue;
            };
            let term = value["term"].as_u64();
            let time = |key: &str| value[key].as_u64();
            match (value["event"].as_str().unwrap_or_default(), term) {
                ("leading", Some(term)) => {
                    let Some(start) = time("observed_monotonic_ns") else {
                        self.verdict
                            .errors
                            .push(format!("{place}: no observed_monotonic_ns"));
                        continue;
                    };
                    if let Some(previous) = open.replace(Open { term, start }) {
                        self.verdict
                            .errors
                            .push(format!("{who}: term {} never ended", previous.term));
                    }
                    self.verdict.terms += 1;
                }
                ("stopped-leading", Some(term)) => {
                    let (Some(end), Some(current)) = (time("monotonic_ns"), open.take()) else {
                        self.verdict
                            .errors
                            .push(format!("{place}: stopped-leading without a term or time"));
                        continue;
                    };
                    if current.term != term {
                        self.verdict.errors.push(format!(
                            "{place}: term {term} stopped while term {} led",
                            current.term
                        ));
                    }
                    let leaked = value["leaked_tasks"].as_u64().unwrap_or(u64::MAX);
                    if leaked != 0 {
                        self.verdict
                            .leaked
                            .push(format!("{who} term {term}: {leaked} tasks leaked"));
                    } else if work_stopped.get(&term).is_none_or(|&work| work > end) {
                        self.verdict.leaked.push(format!(
                            "{who} term {term}: stopped leading at {end} ns before its work \
                             stopped ({:?} ns)",
                            work_stopped.get(&term)
                        ));
                    }
                    stopped.insert(term, end);
                    let ended = value["reason"].as_str().unwrap_or("?").to_owned();
                    self.interval(lease, identity, &current, end, ended);
                }
                ("released", Some(term)) => {
                    self.verdict.releases += 1;
                    let released = time("monotonic_ns");
                    let before = |at: Option<&Monotonic>| {
                        at.zip(released)
                            .is_some_and(|(at, released)| *at <= released)
                    };
                    if !before(stopped.get(&term)) || !before(work_stopped.get(&term)) {
                        self.verdict.leaked.push(format!(
                            "{who} term {term}: released at {released:?} ns before its tasks \
                             stopped ({:?} ns) and the term ended ({:?} ns)",
                            work_stopped.get(&term),
                            stopped.get(&term)
                        ));
                    }
                }
                ("killed", _) => {
                    let Some(end) = time("monotonic_ns") else {
                        self.verdict
                            .errors
                            .push(format!("{place}: killed without a time"));
                        continue;
                    };
                    if let Some(current) = open.take() {
                        self.interval(lease, identity, &current, end, "killed".into());
                    }
                }
                _ => {}
            }
        }
        if let Some(current) = open {
            self.verdict
                .errors
                .push(format!("{who}: term {} never ended", current.term));
        }
    }

    fn interval(
        &mut self,
        lease: &str,
        identity: &str,
        open: &Open,
        end: Monotonic,
        ended: String,
    ) {
        *self.verdict.ends.entry(ended.clone()).or_default() += 1;
        self.intervals.push(Interval {
            lease: lease.to_owned(),
            identity: identity.to_owned(),
            term: open.term,
            start: open.start,
            end,
            ended,
        });
    }

    /// Judges everything read: overlaps per Lease, and the hand-offs between consecutive terms.
    pub fn verdict(mut self) -> Verdict {
        let mut by_lease: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
        for interval in self.intervals {
            by_lease
                .entry(interval.lease.clone())
                .or_default()
                .push(interval);
        }
        for intervals in by_lease.values_mut() {
            intervals.sort_by_key(|i| (i.start, i.end));
            // The interval reaching furthest so far: any later start before its end overlaps.
            let mut furthest: Option<&Interval> = None;
            for (previous, next) in intervals.iter().zip(intervals.iter().skip(1)) {
                let reach = match furthest {
                    Some(f) if f.end >= previous.end => f,
                    _ => previous,
                };
                furthest = Some(reach);
                if next.start < reach.end {
                    self.verdict.overlaps.push(format!(
                        "{}: {} term {} {}..{} ns and {} term {} {}..{} ns",
                        next.lease,
                        reach.identity,
                        reach.term,
                        reach.start,
                        reach.end,
                        next.identity,
                        next.term,
                        next.start,
                        next.end
                    ));
                    continue;
                }
                let gap = Duration::from_nanos(next.start.saturating_sub(previous.end));
                self.verdict.hand_offs.push(HandOff {
                    lease: next.lease.clone(),
                    from: previous.identity.clone(),
                    to: next.identity.clone(),
                    after: previous.ended.clone(),
                    gap,
                    same_identity: previous.identity == next.identity,
                });
            }
        }
        self.verdict
    }
}

/// The term and the monotonic reading of a `work stopped term=N … monotonic_ns=T` log line.
fn work_stopped(line: &str) -> Option<(u64, Monotonic)> {
    let (_, fields) = line.split_once("work stopped")?;
    let field = |name: &str| {
        fields
            .split_whitespace()
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
    };
    Some((field("term")?, field("monotonic_ns")?))
}

/// The `p`-quantile (nearest rank) of `sorted`.
fn quantile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let rank = ((p * sorted.len() as f64).ceil() as usize).max(1);
    sorted.get(rank - 1).copied()
}

/// `d` in seconds with two decimals, or `-` when there is none: how the soak tables print times.
#[must_use]
pub fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.2} s", d.as_secs_f64()))
}

/// How many `hand_offs` there are, and their leaderless gaps as `p50 / p99 (max …)` (nearest
/// rank), for a soak table.
pub fn gap_summary<'a>(hand_offs: impl Iterator<Item = &'a HandOff>) -> (usize, String) {
    let mut gaps: Vec<Duration> = hand_offs.map(|h| h.gap).collect();
    gaps.sort();
    let text = format!(
        "{} / {} (max {})",
        seconds(quantile(&gaps, 0.5)),
        seconds(quantile(&gaps, 0.99)),
        seconds(gaps.last().copied())
    );
    (gaps.len(), text)
}

/// The `n` longest leaderless gaps of `hand_offs`, described (`lease: from (how) -> to gap`).
#[must_use]
pub fn longest_gaps(hand_offs: &[HandOff], n: usize) -> String {
    let mut sorted: Vec<&HandOff> = hand_offs.iter().collect();
    sorted.sort_by_key(|h| std::cmp::Reverse(h.gap));
    sorted
        .iter()
        .take(n)
        .map(|h| {
            format!(
                "{}: {} ({}) -> {} {:.2} s",
                h.lease,
                h.from,
                h.after,
                h.to,
                h.gap.as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
