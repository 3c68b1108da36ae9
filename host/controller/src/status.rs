//! `conclave status`: the Leases under coordination, their candidates, and whom each Lease's
//! election would pick now. Read-only: it never writes to the cluster.
//!
//! A Lease is under coordination when it has LeaseCandidates or names a `spec.strategy`. The
//! prediction is the controller's own step: [`plan_step`] over the same valid candidates with the
//! same [`StepConfig`] (ack window, candidate expiry, `--mode` and whether kube-apiserver's
//! built-in controller is active), then the strategy through the same [`Decide`] seam and
//! [`Election::apply_answer`](conclave_core::step::Election::apply_answer). So it cannot drift
//! from what the controller does.
//!
//! A candidate's [`Health`] says what an operator needs: a candidate that renews on its own
//! schedule and answers pings is healthy, even when it renewed longer ago than the ack window
//! ("stale" only means the controller will ping it before its next election); one that failed its
//! last ping says when, and when garbage collection deletes it unless it renews.
//!
//! [`render`] lays the statuses out as a table (one Lease row, its candidates beneath it),
//! [`render_wide`] with more columns, and [`document`] as a [`StatusList`], the stable shape of
//! `-o json` and `-o yaml`.

use crate::config::ControllerConfig;
use crate::decide::Decide;
use conclave_core::k8s::{candidate_view, lease_record, validate_lease_candidate};
use conclave_core::lease::LeaseRecord;
use conclave_core::plan::{Liveness, Mode, candidate_expired, candidate_expires_at, liveness};
use conclave_core::request::CandidateView;
use conclave_core::step::{Outcome, Plan, SkipReason, StepConfig, StepInput, plan_step};
use conclave_core::time::Timestamp;
use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
#[error("listing {what} in {scope}: {source}")]
pub struct ListError {
    /// What was listed (`Leases`, `LeaseCandidates`).
    pub what: &'static str,
    /// The namespace, or `all namespaces`.
    pub scope: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// Where a candidate stands, as the controller would see it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Renewed within the ack window: electable at once.
    Fresh,
    /// Healthy, renewed longer ago than the ack window and not pinged since: the controller pings
    /// it before electing it (candidates renew every few minutes; this is their normal state).
    Stale,
    /// Pinged less than one ack window ago, no answer yet.
    Pinged {
        /// When it was pinged.
        at: Timestamp,
    },
    /// Did not answer its last ping within the ack window: left out of elections until it
    /// renews, and garbage-collected once it has not renewed for the candidate expiry.
    FailedPing {
        /// When it was pinged.
        pinged_at: Timestamp,
        /// When garbage collection deletes it unless it renews.
        collected_at: Option<Timestamp>,
    },
    /// Not renewed for the candidate expiry: takes no part, and garbage collection deletes it.
    Expired,
    /// Breaks kube-apiserver's validation rules (the first one broken): ignored.
    Invalid(String),
}

impl Health {
    /// A short label for the table's STATE column.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Fresh | Self::Stale => "healthy",
            Self::Pinged { .. } => "pinged",
            Self::FailedPing { .. } => "failed ping",
            Self::Expired => "expired",
            Self::Invalid(_) => "invalid",
        }
    }

    /// The `state` of a [`CandidateReport`]: [`label`](Self::label) with `healthy` told apart
    /// as `fresh` and `stale`.
    #[must_use]
    pub const fn state(&self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Stale => "stale",
            Self::Pinged { .. } => "pinged",
            Self::FailedPing { .. } => "failed-ping",
            Self::Expired => "expired",
            Self::Invalid(_) => "invalid",
        }
    }

    /// Whether the candidate renews and answers pings.
    #[must_use]
    pub const fn is_healthy(&self) -> bool {
        matches!(self, Self::Fresh | Self::Stale)
    }

    /// What the state means now, for the table's NOTE column.
    #[must_use]
    pub fn note(&self, now: Timestamp) -> String {
        match self {
            Self::Fresh => String::new(),
            Self::Stale => "stale: pinged before its next election".into(),
            Self::Pinged { at } => {
                format!("pinged {}, waiting for its answer", ago(Some(*at), now))
            }
            Self::FailedPing {
                pinged_at,
                collected_at,
            } => {
                let mut note = format!(
                    "no answer to the ping at {}; left out until it renews",
                    clock(*pinged_at)
                );
                if let Some(at) = collected_at {
                    let _ = write!(
                        note,
                        "; garbage-collected at {} ({}) unless it renews",
                        clock(*at),
                        until(*at, now)
                    );
                }
                note
            }
            Self::Expired => {
                "not renewed for the candidate expiry; garbage collection deletes it".into()
            }
            Self::Invalid(why) => why.clone(),
        }
    }
}

/// One candidate of a Lease.
#[derive(Debug, Clone)]
pub struct CandidateStatus {
    /// The candidate as the strategy would see it.
    pub view: CandidateView,
    /// Its standing now.
    pub health: Health,
    /// When garbage collection deletes it unless it renews: its last renewal plus the candidate
    /// expiry (`None` if it never renewed).
    pub collected_at: Option<Timestamp>,
}

/// How a Lease's strategy was determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrategySource {
    /// `spec.strategy` of the Lease.
    Lease(String),
    /// The candidates with the highest binary version.
    Candidates(String),
    /// Candidates at the highest binary version disagree.
    Conflict(String),
    /// No strategy and no candidates.
    None,
}

impl StrategySource {
    /// The strategy name, if one was determined.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Lease(s) | Self::Candidates(s) => Some(s),
            Self::Conflict(_) | Self::None => None,
        }
    }
}

/// Whom the election would pick now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// This candidate; `needs_ping` when the controller would ping before writing.
    Candidate {
        /// The candidate's name.
        name: String,
        /// Whether the controller would ping candidates before electing it.
        needs_ping: bool,
    },
    /// The strategy elects nobody.
    Nobody,
    /// No valid, unexpired candidate.
    NoCandidates,
    /// Every candidate was pinged and never answered.
    AllUnresponsive,
    /// `--mode` leaves the strategy to kube-apiserver's built-in controller.
    NotHandled,
    /// The strategy could not be determined or run (conflict, unknown strategy, plugin error).
    Unavailable(String),
}

/// One Lease under coordination.
#[derive(Debug, Clone)]
pub struct LeaseStatus {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// The Lease, or `None` when only candidates exist so far.
    pub record: Option<LeaseRecord>,
    /// The strategy and where it comes from.
    pub strategy: StrategySource,
    /// The candidates, sorted by name.
    pub candidates: Vec<CandidateStatus>,
    /// Whom the election would pick now.
    pub pick: Pick,
}

impl LeaseStatus {
    /// The current holder, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.record.as_ref().and_then(LeaseRecord::holder)
    }

    /// The picked candidate's name, if the election picks one.
    #[must_use]
    pub fn picked(&self) -> Option<&str> {
        match &self.pick {
            Pick::Candidate { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Settings of the prediction, mirroring the controller's flags and state.
#[derive(Debug, Clone, Copy)]
pub struct PredictOptions {
    /// The controller's ack window.
    pub ack_window: Duration,
    /// The controller's candidate expiry.
    pub candidate_gc_after: Duration,
    /// The controller's `--mode`.
    pub mode: Mode,
    /// Whether kube-apiserver's built-in controller is active (see
    /// [`builtin_controller_active`](crate::builtin_controller_active)).
    pub builtin_active: bool,
}

impl Default for PredictOptions {
    fn default() -> Self {
        let config = ControllerConfig::default();
        Self {
            ack_window: config.ack_window,
            candidate_gc_after: config.candidate_gc_after,
            mode: config.mode,
            builtin_active: false,
        }
    }
}

impl PredictOptions {
    fn step_config(self) -> StepConfig {
        StepConfig {
            ack_window: self.ack_window,
            candidate_gc_after: self.candidate_gc_after,
            lease_duration_seconds: ControllerConfig::default().lease_duration_seconds,
            mode: self.mode,
            settle: conclave_core::step::Settle::DEFAULT,
        }
    }
}

/// A Lease (if it exists) and its candidates.
type Objects<'a> = (Option<&'a Lease>, Vec<&'a LeaseCandidate>);

/// Builds the status of every Lease under coordination among `leases` and `candidates`, sorted
/// by namespace and name, deciding through `decider` as the controller would.
#[must_use]
pub fn collect(
    leases: &[Lease],
    candidates: &[LeaseCandidate],
    decider: &dyn Decide,
    now: Timestamp,
    options: PredictOptions,
) -> Vec<LeaseStatus> {
    let mut by_lease: BTreeMap<(String, String), Objects<'_>> = BTreeMap::new();
    for lease in leases {
        let record = lease_record(lease);
        by_lease
            .entry((record.namespace, record.name))
            .or_default()
            .0 = Some(lease);
    }
    for candidate in candidates {
        let (Some(namespace), Some(spec)) = (
            candidate.metadata.namespace.as_ref(),
            candidate.spec.as_ref(),
        ) else {
            continue;
        };
        by_lease
            .entry((namespace.clone(), spec.lease_name.clone()))
            .or_default()
            .1
            .push(candidate);
    }
    by_lease
        .into_iter()
        .filter_map(|((namespace, name), (lease, candidates))| {
            let record = lease.map(lease_record);
            let coordinated =
                !candidates.is_empty() || record.as_ref().and_then(LeaseRecord::strategy).is_some();
            coordinated.then(|| {
                let mut status = LeaseStatus {
                    namespace,
                    name,
                    record,
                    strategy: StrategySource::None,
                    candidates: candidate_statuses(&candidates, now, options),
                    pick: Pick::NoCandidates,
                };
                (status.strategy, status.pick) = predict(&status, decider, now, options);
                status
            })
        })
        .collect()
}

fn candidate_statuses(
    objects: &[&LeaseCandidate],
    now: Timestamp,
    options: PredictOptions,
) -> Vec<CandidateStatus> {
    let mut candidates: Vec<CandidateStatus> = objects
        .iter()
        .map(|object| {
            let view = candidate_view(object);
            let health = if let Some(error) = validate_lease_candidate(object).first() {
                Health::Invalid(error.to_string())
            } else if candidate_expired(&view, now, options.candidate_gc_after) {
                Health::Expired
            } else {
                match liveness(&view, now, options.ack_window) {
                    Liveness::Fresh => Health::Fresh,
                    Liveness::Stale => Health::Stale,
                    Liveness::Pending { .. } => Health::Pinged {
                        at: view.ping_time.unwrap_or(now),
                    },
                    Liveness::Unresponsive => Health::FailedPing {
                        pinged_at: view.ping_time.unwrap_or(now),
                        collected_at: candidate_expires_at(&view, options.candidate_gc_after),
                    },
                }
            };
            let collected_at = candidate_expires_at(&view, options.candidate_gc_after);
            CandidateStatus {
                view,
                health,
                collected_at,
            }
        })
        .collect();
    candidates.sort_by(|a, b| a.view.name.cmp(&b.view.name));
    candidates
}

/// The controller's step for the Lease, stopped before anything would be written.
fn predict(
    status: &LeaseStatus,
    decider: &dyn Decide,
    now: Timestamp,
    options: PredictOptions,
) -> (StrategySource, Pick) {
    let record = status.record.as_ref();
    let valid: Vec<CandidateView> = status
        .candidates
        .iter()
        .filter(|c| !matches!(c.health, Health::Invalid(_)))
        .map(|c| c.view.clone())
        .collect();
    let has_strategy = |strategy: &str| decider.has_strategy(strategy);
    let plan = plan_step(&StepInput {
        namespace: &status.namespace,
        name: &status.name,
        lease: record,
        candidates: &valid,
        now,
        config: options.step_config(),
        builtin_active: options.builtin_active,
        has_strategy: &has_strategy,
        // A prediction shows whom the election picks, not when.
        arrivals: None,
        deleted_while_held_until: None,
        // Sit-outs are the controller's memory, not the cluster's: a missing Lease has none here.
        sitting_out: &[],
    });
    let lease_strategy = record.and_then(LeaseRecord::strategy);
    let source = |strategy: String| {
        if lease_strategy.is_some() {
            StrategySource::Lease(strategy)
        } else {
            StrategySource::Candidates(strategy)
        }
    };
    let election = match plan {
        Plan::Skip(skip) => {
            return match skip.reason {
                SkipReason::NoCandidates => (
                    lease_strategy.map_or(StrategySource::None, |s| {
                        StrategySource::Lease(s.to_owned())
                    }),
                    Pick::NoCandidates,
                ),
                SkipReason::Conflict(conflict) => (
                    StrategySource::Conflict(conflict.to_string()),
                    Pick::Unavailable(conflict.to_string()),
                ),
                SkipReason::NotHandled { strategy } => (source(strategy), Pick::NotHandled),
                SkipReason::UnknownStrategy { strategy } => {
                    let why = format!(
                        "no loaded plugin implements {strategy:?} (pass the controller's \
                         --plugins DIR)"
                    );
                    (source(strategy), Pick::Unavailable(why))
                }
                SkipReason::AllUnresponsive { strategy } => {
                    (source(strategy), Pick::AllUnresponsive)
                }
                SkipReason::Settling { strategy } => (
                    source(strategy),
                    Pick::Unavailable("its candidates are still arriving".into()),
                ),
                SkipReason::DeletedWhileHeld { strategy } => (
                    source(strategy),
                    Pick::Unavailable(
                        "it was deleted while held; its holder may still be leading".into(),
                    ),
                ),
            };
        }
        Plan::Decide(election) => election,
    };
    let pick = match decider.elect(election.strategy(), election.request()) {
        Err(error) => Pick::Unavailable(error.to_string()),
        Ok(answer) => match election.apply_answer(answer.as_deref()) {
            Outcome::NoWinner { .. } => Pick::Nobody,
            Outcome::Unchanged { winner, .. } | Outcome::Write { winner, .. } => Pick::Candidate {
                name: winner,
                needs_ping: false,
            },
            Outcome::Ping { winner, .. }
            | Outcome::Wait { winner, .. }
            | Outcome::AwaitRenewal { winner, .. } => Pick::Candidate {
                name: winner,
                needs_ping: true,
            },
        },
    };
    (source(election.strategy().to_owned()), pick)
}

/// "1.5s", "42s", "2m05s", "2h01m".
fn span(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..10 => format!("{:.1}s", duration.as_secs_f64()),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// "3s ago", "2m05s ago", or "-" when never.
fn ago(at: Option<Timestamp>, now: Timestamp) -> String {
    let Some(at) = at else {
        return "-".into();
    };
    if at > now {
        return "now".into();
    }
    format!("{} ago", span(at.elapsed_at(now)))
}

/// "in 27m03s", or "now" once past.
fn until(at: Timestamp, now: Timestamp) -> String {
    if at <= now {
        return "now".into();
    }
    format!("in {}", span(now.elapsed_at(at)))
}

/// The time of day in UTC, "12:03:04Z".
fn clock(at: Timestamp) -> String {
    jiff::Timestamp::from_microsecond(at.as_micros())
        .map_or_else(|_| "?".into(), |t| t.strftime("%H:%M:%SZ").to_string())
}

/// Lays out rows as left-aligned columns separated by two spaces, each line prefixed by `indent`.
pub fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// What electing `name` would do to the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect<'a> {
    /// It holds the Lease already.
    Holds,
    /// It would replace this live holder (through `preferredHolder`).
    Preempts(&'a str),
    /// The Lease is free: it would be written as the holder.
    Assigned,
}

fn effect<'a>(status: &'a LeaseStatus, name: &str, now: Timestamp) -> Effect<'a> {
    let holder = status.holder();
    let live = status.record.as_ref().is_some_and(|r| !r.is_free(now));
    if holder == Some(name) {
        Effect::Holds
    } else if live {
        Effect::Preempts(holder.unwrap_or_default())
    } else {
        Effect::Assigned
    }
}

fn pick_text(status: &LeaseStatus, now: Timestamp) -> String {
    match &status.pick {
        Pick::Candidate { name, needs_ping } => {
            let mut text = name.clone();
            match effect(status, name, now) {
                Effect::Holds => text.push_str(" (holds it)"),
                Effect::Preempts(holder) => {
                    let _ = write!(text, " (would pre-empt {holder})");
                }
                Effect::Assigned => text.push_str(" (would be assigned)"),
            }
            if *needs_ping {
                text.push_str(", after a ping");
            }
            text
        }
        Pick::Nobody => "nobody (the strategy elects no one)".into(),
        Pick::NoCandidates => "- (no live candidates)".into(),
        Pick::AllUnresponsive => "- (every candidate failed its last ping)".into(),
        Pick::NotHandled => "- (left to kube-apiserver's built-in controller, --mode)".into(),
        Pick::Unavailable(why) => format!("? {why}"),
    }
}

/// Renders the statuses as text: one row per Lease, its candidates indented beneath it.
#[must_use]
pub fn render(statuses: &[LeaseStatus], now: Timestamp) -> String {
    render_table(statuses, now, false)
}

/// [`render`] with more columns (`-o wide`): the Lease's duration, when its holder acquired it
/// and how many times it changed hands; each candidate's age and when garbage collection deletes
/// it unless it renews.
#[must_use]
pub fn render_wide(statuses: &[LeaseStatus], now: Timestamp) -> String {
    render_table(statuses, now, true)
}

fn render_table(statuses: &[LeaseStatus], now: Timestamp, wide: bool) -> String {
    let mut out = String::new();
    if statuses.is_empty() {
        out.push_str(
            "No Leases under coordination (none has LeaseCandidates or a spec.strategy).\n",
        );
        return out;
    }
    for (i, status) in statuses.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let record = status.record.as_ref();
        let strategy = match &status.strategy {
            StrategySource::Lease(s) => s.clone(),
            StrategySource::Candidates(s) => format!("{s} (from candidates)"),
            StrategySource::Conflict(_) => "conflict".into(),
            StrategySource::None => "-".into(),
        };
        let renewed = match record {
            None => "(no Lease yet)".into(),
            Some(r) => {
                let mut text = ago(r.renew_time, now);
                if r.holder().is_some() && r.is_expired(now) {
                    text.push_str(" (expired)");
                }
                text
            }
        };
        let mut header: Vec<String> = ["LEASE", "STRATEGY", "HOLDER", "PREFERRED", "RENEWED"]
            .map(String::from)
            .into();
        let mut row = vec![
            format!("{}/{}", status.namespace, status.name),
            strategy,
            record
                .and_then(LeaseRecord::holder)
                .unwrap_or("-")
                .to_owned(),
            record
                .and_then(LeaseRecord::preferred)
                .unwrap_or("-")
                .to_owned(),
            renewed,
        ];
        if wide {
            header.extend(["DURATION", "ACQUIRED", "TRANSITIONS"].map(String::from));
            row.extend([
                record
                    .and_then(|r| r.lease_duration_seconds)
                    .map_or_else(|| "-".into(), |s| format!("{s}s")),
                ago(record.and_then(|r| r.acquire_time), now),
                record
                    .and_then(|r| r.lease_transitions)
                    .map_or_else(|| "-".into(), |n| n.to_string()),
            ]);
        }
        // The verdict stays last: it is the longest cell.
        header.push("WOULD PICK NOW".into());
        row.push(pick_text(status, now));
        table(&mut out, "", &[header, row]);
        if status.candidates.is_empty() {
            out.push_str("    (no candidates)\n");
            continue;
        }
        let mut header: Vec<String> = [
            "CANDIDATE",
            "BINARY",
            "EMULATION",
            "STRATEGY",
            "RENEWED",
            "PINGED",
            "STATE",
        ]
        .map(String::from)
        .into();
        if wide {
            header.extend(["AGE", "COLLECTED"].map(String::from));
        }
        header.push("NOTE".into());
        let mut rows = vec![header];
        for candidate in &status.candidates {
            let view = &candidate.view;
            let mut name = view.name.clone();
            if status.holder() == Some(view.name.as_str()) {
                name.push_str(" *");
            }
            let mut row = vec![
                name,
                view.binary_version.clone(),
                if view.emulation_version.is_empty() {
                    "-".into()
                } else {
                    view.emulation_version.clone()
                },
                view.strategy.clone(),
                ago(view.renew_time, now),
                ago(view.ping_time, now),
                candidate.health.label().into(),
            ];
            if wide {
                let age = view.creation_time.map(|at| span(at.elapsed_at(now)));
                row.push(age.unwrap_or_else(|| "-".into()));
                row.push(match (&candidate.health, candidate.collected_at) {
                    (Health::Invalid(_), _) => "-".into(),
                    (_, None) => "now".into(),
                    (_, Some(at)) => until(at, now),
                });
            }
            row.push(candidate.health.note(now));
            rows.push(row);
        }
        table(&mut out, "    ", &rows);
        if let StrategySource::Conflict(conflict) = &status.strategy {
            let _ = writeln!(out, "    ! {conflict}");
        }
    }
    out
}

/// `apiVersion` of [`StatusList`]: the version of the output schema, not a resource the
/// cluster serves. A field is only ever added within one version.
pub const STATUS_LIST_API_VERSION: &str = "conclave.dev/v1alpha1";

/// `kind` of [`StatusList`].
pub const STATUS_LIST_KIND: &str = "LeaseStatusList";

/// The machine-readable form of the statuses (`conclave status -o json|yaml`). Every field is
/// always present (`null` when it has no value), times are RFC 3339 in UTC, and names are
/// camelCase as in Kubernetes objects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusList {
    /// [`STATUS_LIST_API_VERSION`].
    pub api_version: &'static str,
    /// [`STATUS_LIST_KIND`].
    pub kind: &'static str,
    /// When the prediction was made: the `now` the freshness and the pick were judged at.
    pub observed_at: Option<String>,
    /// One per Lease under coordination, sorted by namespace and name.
    pub items: Vec<LeaseReport>,
}

/// One Lease in a [`StatusList`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Whether the Lease object exists (candidates can exist before the first election).
    pub lease_exists: bool,
    /// The strategy the election uses; `null` on a conflict or with neither a strategy nor
    /// candidates.
    pub strategy: Option<String>,
    /// Where the strategy comes from: `lease` (`spec.strategy`), `candidates` (those at the
    /// highest binary version), `conflict` (they disagree) or `none`.
    pub strategy_source: &'static str,
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.preferredHolder`.
    pub preferred_holder: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<String>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    pub lease_transitions: Option<i32>,
    /// Whether the holder stopped renewing for longer than the lease duration.
    pub expired: bool,
    /// Whom the election would pick now.
    pub prediction: PredictionReport,
    /// The candidates, sorted by name.
    pub candidates: Vec<CandidateReport>,
}

/// Whom a Lease's election would pick now, in a [`LeaseReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PredictionReport {
    /// `holds` (the winner holds the Lease already), `preempt` (it would replace the live
    /// holder), `assign` (the Lease is free), or, with no winner: `nobody` (the strategy elects
    /// no one), `no-candidates`, `all-unresponsive`, `not-handled` (left to kube-apiserver's
    /// built-in controller by `--mode`), `unavailable` (conflict, unknown strategy, plugin error).
    pub outcome: &'static str,
    /// The candidate the election picks.
    pub winner: Option<String>,
    /// Whether the controller pings the candidates before writing.
    pub after_ping: bool,
    /// Why, in words (the table's WOULD PICK NOW column without the winner's name).
    pub why: String,
}

/// One candidate in a [`LeaseReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateReport {
    /// The LeaseCandidate's name, the identity written into `holderIdentity`.
    pub name: String,
    /// Whether it holds the Lease.
    pub holder: bool,
    /// `spec.binaryVersion`.
    pub binary_version: String,
    /// `spec.emulationVersion`.
    pub emulation_version: Option<String>,
    /// `spec.strategy`.
    pub strategy: String,
    /// `metadata.creationTimestamp`.
    pub creation_time: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<String>,
    /// `spec.pingTime`.
    pub ping_time: Option<String>,
    /// `fresh` (renewed within the ack window), `stale` (healthy, pinged before its next
    /// election), `pinged` (awaiting its answer), `failed-ping`, `expired` or `invalid`.
    pub state: &'static str,
    /// Whether it renews and answers pings (`fresh` or `stale`; the table's `healthy`).
    pub healthy: bool,
    /// What the state means now (the table's NOTE), `null` when there is nothing to say.
    pub note: Option<String>,
    /// When garbage collection deletes it unless it renews.
    pub collected_at: Option<String>,
}

/// RFC 3339 in UTC, as Kubernetes writes times.
fn rfc3339(at: Timestamp) -> Option<String> {
    jiff::Timestamp::from_microsecond(at.as_micros())
        .ok()
        .map(|t| t.to_string())
}

fn prediction(status: &LeaseStatus, now: Timestamp) -> PredictionReport {
    let (outcome, why): (&'static str, String) = match &status.pick {
        Pick::Candidate { name, needs_ping } => {
            let (outcome, mut why) = match effect(status, name, now) {
                Effect::Holds => ("holds", "holds it".to_owned()),
                Effect::Preempts(holder) => ("preempt", format!("would pre-empt {holder}")),
                Effect::Assigned => ("assign", "would be assigned".to_owned()),
            };
            if *needs_ping {
                why.push_str(", after a ping");
            }
            (outcome, why)
        }
        Pick::Nobody => ("nobody", "the strategy elects no one".into()),
        Pick::NoCandidates => ("no-candidates", "no live candidates".into()),
        Pick::AllUnresponsive => (
            "all-unresponsive",
            "every candidate failed its last ping".into(),
        ),
        Pick::NotHandled => (
            "not-handled",
            "left to kube-apiserver's built-in controller (--mode)".into(),
        ),
        Pick::Unavailable(why) => ("unavailable", why.clone()),
    };
    PredictionReport {
        outcome,
        winner: status.picked().map(str::to_owned),
        after_ping: matches!(
            status.pick,
            Pick::Candidate {
                needs_ping: true,
                ..
            }
        ),
        why,
    }
}

/// The statuses as a [`StatusList`], judged at `now`.
#[must_use]
pub fn document(statuses: &[LeaseStatus], now: Timestamp) -> StatusList {
    let items = statuses
        .iter()
        .map(|status| {
            let record = status.record.as_ref();
            let time = |at: Option<Timestamp>| at.and_then(rfc3339);
            LeaseReport {
                namespace: status.namespace.clone(),
                name: status.name.clone(),
                lease_exists: record.is_some(),
                strategy: status.strategy.name().map(str::to_owned),
                strategy_source: match status.strategy {
                    StrategySource::Lease(_) => "lease",
                    StrategySource::Candidates(_) => "candidates",
                    StrategySource::Conflict(_) => "conflict",
                    StrategySource::None => "none",
                },
                holder: status.holder().map(str::to_owned),
                preferred_holder: record.and_then(LeaseRecord::preferred).map(str::to_owned),
                renew_time: time(record.and_then(|r| r.renew_time)),
                acquire_time: time(record.and_then(|r| r.acquire_time)),
                lease_duration_seconds: record.and_then(|r| r.lease_duration_seconds),
                lease_transitions: record.and_then(|r| r.lease_transitions),
                expired: record.is_some_and(|r| r.holder().is_some() && r.is_expired(now)),
                prediction: prediction(status, now),
                candidates: status
                    .candidates
                    .iter()
                    .map(|candidate| {
                        let view = &candidate.view;
                        let note = candidate.health.note(now);
                        CandidateReport {
                            name: view.name.clone(),
                            holder: status.holder() == Some(view.name.as_str()),
                            binary_version: view.binary_version.clone(),
                            emulation_version: Some(view.emulation_version.clone())
                                .filter(|v| !v.is_empty()),
                            strategy: view.strategy.clone(),
                            creation_time: time(view.creation_time),
                            renew_time: time(view.renew_time),
                            ping_time: time(view.ping_time),
                            state: candidate.health.state(),
                            healthy: candidate.health.is_healthy(),
                            note: (!note.is_empty()).then_some(note),
                            collected_at: time(candidate.collected_at),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    StatusList {
        api_version: STATUS_LIST_API_VERSION,
        kind: STATUS_LIST_KIND,
        observed_at: rfc3339(now),
        items,
    }
}

fn scopes(namespaces: &[String]) -> Vec<Option<&str>> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Lists the Leases and LeaseCandidates of the given namespaces (all when empty).
pub async fn list(
    client: &Client,
    namespaces: &[String],
) -> Result<(Vec<Lease>, Vec<LeaseCandidate>), ListError> {
    let mut leases = Vec::new();
    let mut candidates = Vec::new();
    for namespace in scopes(namespaces) {
        let error = |what| {
            let scope = namespace.unwrap_or("all namespaces").to_owned();
            move |source| ListError {
                what,
                scope,
                source,
            }
        };
        leases.extend(
            api::<Lease>(client, namespace)
                .list(&Default::default())
                .await
                .map_err(error("Leases"))?
                .items,
        );
        candidates.extend(
            api::<LeaseCandidate>(client, namespace)
                .list(&Default::default())
                .await
                .map_err(error(
                    "LeaseCandidates (is coordination.k8s.io/v1beta1 enabled?)",
                ))?
                .items,
        );
    }
    Ok((leases, candidates))
}

/// Leases and LeaseCandidates of some namespaces kept current by watches, for `status --watch`.
pub struct Watch {
    leases: Vec<Store<Lease>>,
    candidates: Vec<Store<LeaseCandidate>>,
    changes: SelectAll<BoxStream<'static, Result<(), String>>>,
}

impl Watch {
    /// Starts watching the given namespaces (all when empty). The watches run as
    /// [`changed`](Self::changed) is polled.
    #[must_use]
    pub fn start(client: &Client, namespaces: &[String]) -> Self {
        let mut watch = Self {
            leases: Vec::new(),
            candidates: Vec::new(),
            changes: SelectAll::new(),
        };
        for namespace in scopes(namespaces) {
            let (reader, writer) = reflector::store();
            watch.leases.push(reader);
            watch.changes.push(
                watcher(api::<Lease>(client, namespace), watcher::Config::default())
                    .default_backoff()
                    .reflect(writer)
                    .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
                    .boxed(),
            );
            let (reader, writer) = reflector::store();
            watch.candidates.push(reader);
            watch.changes.push(
                watcher(
                    api::<LeaseCandidate>(client, namespace),
                    watcher::Config::default(),
                )
                .default_backoff()
                .reflect(writer)
                .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
                .boxed(),
            );
        }
        watch
    }

    /// The next change (`Err` for a watch error, retried by the watch); `None` once every watch
    /// ended.
    pub async fn changed(&mut self) -> Option<Result<(), String>> {
        self.changes.next().await
    }

    /// Whether every store holds its initial list.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.leases
            .iter()
            .all(|s| s.wait_until_ready().now_or_never().is_some())
            && self
                .candidates
                .iter()
                .all(|s| s.wait_until_ready().now_or_never().is_some())
    }

    /// Every Lease and LeaseCandidate watched, as they are now.
    #[must_use]
    pub fn objects(&self) -> (Vec<Lease>, Vec<LeaseCandidate>) {
        let leases = self
            .leases
            .iter()
            .flat_map(|s| s.state().into_iter().map(|l| (*l).clone()))
            .collect();
        let candidates = self
            .candidates
            .iter()
            .flat_map(|s| s.state().into_iter().map(|c| (*c).clone()))
            .collect();
        (leases, candidates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_core::k8s::now;
    use conclave_engine::{Engine, EngineConfig};

    #[test]
    fn ages_read_naturally() {
        let now = Timestamp::from_secs(10_000);
        assert_eq!(ago(None, now), "-");
        assert_eq!(
            ago(Some(now - Duration::from_millis(1500)), now),
            "1.5s ago"
        );
        assert_eq!(ago(Some(now - Duration::from_secs(42)), now), "42s ago");
        assert_eq!(ago(Some(now - Duration::from_secs(125)), now), "2m05s ago");
        assert_eq!(ago(Some(now - Duration::from_secs(7300)), now), "2h01m ago");
    }

    fn candidate(
        name: &str,
        lease: &str,
        versions: (&str, &str),
        strategy: &str,
        renewed_ago: i64,
        pinged_ago: Option<i64>,
    ) -> LeaseCandidate {
        let now = jiff::Timestamp::now();
        let at = |secs: i64| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                now - jiff::SignedDuration::from_secs(secs),
            )
        };
        LeaseCandidate {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    now - jiff::SignedDuration::from_secs(3600),
                )),
                ..Default::default()
            },
            spec: Some(
                k8s_openapi::api::coordination::v1beta1::LeaseCandidateSpec {
                    lease_name: lease.into(),
                    binary_version: versions.0.into(),
                    emulation_version: Some(versions.1.into()),
                    strategy: strategy.into(),
                    renew_time: Some(at(renewed_ago)),
                    ping_time: pinged_ago.map(at),
                },
            ),
        }
    }

    fn lease(name: &str, holder: Option<&str>, strategy: Option<&str>) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_duration_seconds: Some(15),
                renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    jiff::Timestamp::now(),
                )),
                strategy: strategy.map(Into::into),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_pick_follows_the_controllers_rules() {
        let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
        let options = PredictOptions::default();
        const OEV: &str = "OldestEmulationVersion";
        let leases = [
            lease("held", Some("b"), None),
            lease("unknown", Some("x"), Some("example.com/none")),
            lease("classic", Some("x"), None),
        ];
        let candidates = [
            // "held": a is best but pinged 10 s ago and never acked (left out); b holds; c is
            // invalid (binary below emulation); d is stale (renewed 60 s ago, not pinged).
            candidate("a", "held", ("1.30.0", "1.29.0"), OEV, 600, Some(10)),
            candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None),
            candidate("c", "held", ("1.29.0", "1.30.0"), OEV, 1, None),
            candidate("d", "held", ("1.31.0", "1.30.0"), OEV, 60, None),
            // "conflict": two candidates at the same binary version disagree.
            candidate("e", "conflict", ("1.31.0", "1.31.0"), OEV, 1, None),
            candidate(
                "f",
                "conflict",
                ("1.31.0", "1.31.0"),
                "example.com/x",
                1,
                None,
            ),
            // "unknown": names a strategy no plugin implements.
            candidate(
                "g",
                "unknown",
                ("1.31.0", "1.31.0"),
                "example.com/none",
                1,
                None,
            ),
        ];
        let now = now();
        let statuses = collect(&leases, &candidates, &engine, now, options);
        let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["conflict", "held", "unknown"],
            "classic is not coordinated"
        );

        let held = &statuses[1];
        let health: Vec<(&str, &str)> = held
            .candidates
            .iter()
            .map(|c| (c.view.name.as_str(), c.health.label()))
            .collect();
        assert_eq!(
            health,
            [
                ("a", "failed ping"),
                ("b", "healthy"),
                ("c", "invalid"),
                ("d", "healthy"),
            ]
        );
        assert_eq!(held.candidates[3].health, Health::Stale);
        assert!(
            held.candidates[0]
                .health
                .note(now)
                .contains("garbage-collected at"),
            "{:?}",
            held.candidates[0].health
        );
        assert_eq!(held.strategy, StrategySource::Candidates(OEV.into()));
        assert_eq!(
            held.pick,
            Pick::Candidate {
                name: "d".into(),
                needs_ping: true
            }
        );
        assert!(pick_text(held, now).contains("d (would pre-empt b), after a ping"));

        assert!(matches!(&statuses[0].strategy, StrategySource::Conflict(c) if c.contains("e")));
        assert!(matches!(&statuses[0].pick, Pick::Unavailable(_)));
        assert!(
            matches!(&statuses[2].pick, Pick::Unavailable(why) if why.contains("example.com/none"))
        );
        let text = render(&statuses, now);
        assert!(text.contains("ns/held"), "{text}");
        assert!(text.contains("b *"), "the holder is marked: {text}");
    }

    #[test]
    fn the_document_has_a_stable_shape() {
        let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
        const OEV: &str = "OldestEmulationVersion";
        let leases = [lease("held", Some("b"), None)];
        let candidates = [
            candidate("a", "held", ("1.31.0", "1.30.0"), OEV, 60, None),
            candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None),
            candidate("c", "held", ("1.29.0", "1.30.0"), OEV, 1, None),
            candidate("e", "conflict", ("1.31.0", "1.31.0"), OEV, 1, None),
            candidate(
                "f",
                "conflict",
                ("1.31.0", "1.31.0"),
                "example.com/x",
                1,
                None,
            ),
        ];
        let now = now();
        let statuses = collect(
            &leases,
            &candidates,
            &engine,
            now,
            PredictOptions::default(),
        );
        let value = serde_json::to_value(document(&statuses, now)).expect("serializes");
        assert_eq!(value["apiVersion"], STATUS_LIST_API_VERSION);
        assert_eq!(value["kind"], STATUS_LIST_KIND);
        assert!(
            value["observedAt"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
            keys.sort();
            keys
        };
        let conflict = &value["items"][0];
        assert_eq!(
            keys(conflict),
            [
                "acquireTime",
                "candidates",
                "expired",
                "holder",
                "leaseDurationSeconds",
                "leaseExists",
                "leaseTransitions",
                "name",
                "namespace",
                "prediction",
                "preferredHolder",
                "renewTime",
                "strategy",
                "strategySource",
            ],
            "every field is always present, null or not: {conflict}"
        );
        assert_eq!(conflict["leaseExists"], false);
        assert_eq!(conflict["strategy"], serde_json::Value::Null);
        assert_eq!(conflict["strategySource"], "conflict");
        assert_eq!(conflict["prediction"]["outcome"], "unavailable");
        assert!(
            conflict["prediction"]["why"]
                .as_str()
                .is_some_and(|why| why.contains("example.com/x")),
            "{conflict}"
        );

        let held = &value["items"][1];
        assert_eq!(held["namespace"], "ns");
        assert_eq!(held["name"], "held");
        assert_eq!(held["strategy"], OEV);
        assert_eq!(held["strategySource"], "candidates");
        assert_eq!(held["holder"], "b");
        assert_eq!(held["leaseDurationSeconds"], 15);
        assert_eq!(held["expired"], false);
        assert_eq!(
            held["prediction"],
            serde_json::json!({
                "outcome": "preempt",
                "winner": "a",
                "afterPing": true,
                "why": "would pre-empt b, after a ping",
            }),
            "a renewed a minute ago, so the controller pings it before writing"
        );
        let candidates = held["candidates"].as_array().expect("a list");
        assert_eq!(
            keys(&candidates[0]),
            [
                "binaryVersion",
                "collectedAt",
                "creationTime",
                "emulationVersion",
                "healthy",
                "holder",
                "name",
                "note",
                "pingTime",
                "renewTime",
                "state",
                "strategy",
            ]
        );
        let field = |i: usize, key: &str| candidates[i][key].clone();
        assert_eq!(field(0, "state"), "stale");
        assert_eq!(field(0, "healthy"), true);
        assert_eq!(field(0, "holder"), false);
        assert_eq!(field(0, "emulationVersion"), "1.30.0");
        assert_eq!(field(1, "state"), "fresh");
        assert_eq!(field(1, "note"), serde_json::Value::Null);
        assert_eq!(field(1, "holder"), true);
        assert_eq!(field(2, "state"), "invalid");
        assert_eq!(field(2, "healthy"), false);
        assert!(field(2, "note").as_str().is_some_and(|n| !n.is_empty()));
        assert!(
            field(0, "collectedAt")
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
    }

    #[test]
    fn wide_adds_columns() {
        let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
        const OEV: &str = "OldestEmulationVersion";
        let leases = [lease("held", Some("b"), None)];
        let candidates = [candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None)];
        let now = now();
        let statuses = collect(
            &leases,
            &candidates,
            &engine,
            now,
            PredictOptions::default(),
        );
        let header = |text: &str, starts: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(starts))
                .unwrap_or_else(|| panic!("no {starts} header in\n{text}"))
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let narrow = render(&statuses, now);
        let wide = render_wide(&statuses, now);
        assert_eq!(
            header(&wide, "LEASE"),
            [
                "LEASE",
                "STRATEGY",
                "HOLDER",
                "PREFERRED",
                "RENEWED",
                "DURATION",
                "ACQUIRED",
                "TRANSITIONS",
                "WOULD PICK NOW",
            ]
        );
        assert_eq!(header(&narrow, "LEASE").len(), 6, "{narrow}");
        assert_eq!(
            header(&wide, "CANDIDATE"),
            [
                "CANDIDATE",
                "BINARY",
                "EMULATION",
                "STRATEGY",
                "RENEWED",
                "PINGED",
                "STATE",
                "AGE",
                "COLLECTED",
                "NOTE",
            ]
        );
        let b = wide
            .lines()
            .find(|l| l.trim_start().starts_with("b *"))
            .expect("b's row");
        assert!(b.contains("1h00m"), "created an hour ago: {b}");
        assert!(
            b.contains("in 29m5"),
            "collected 30 m after its renewal: {b}"
        );
        assert!(wide.contains("15s"), "the lease duration: {wide}");
    }

    #[test]
    fn the_mode_is_part_of_the_prediction() {
        let engine = Engine::new(EngineConfig::default()).expect("built-in plugins load");
        const OEV: &str = "OldestEmulationVersion";
        let leases = [lease("held", Some("b"), None)];
        let candidates = [candidate("b", "held", ("1.31.0", "1.31.0"), OEV, 1, None)];
        let auto_beside_builtin = PredictOptions {
            builtin_active: true,
            ..PredictOptions::default()
        };
        let statuses = collect(&leases, &candidates, &engine, now(), auto_beside_builtin);
        assert_eq!(statuses[0].pick, Pick::NotHandled);
        let all = PredictOptions {
            mode: Mode::All,
            ..auto_beside_builtin
        };
        let statuses = collect(&leases, &candidates, &engine, now(), all);
        assert_eq!(
            statuses[0].pick,
            Pick::Candidate {
                name: "b".into(),
                needs_ping: false
            },
            "b holds it and is fresh: nothing to write, nobody to ping"
        );
    }
}
