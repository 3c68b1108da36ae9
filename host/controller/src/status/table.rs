//! The statuses as text: one row per Lease with whom its election would pick, its candidates
//! indented beneath it ([`render`]), or with more columns ([`render_wide`], `-o wide`).

use super::health::Health;
use super::predict::{Effect, LeaseStatus, Pick, StrategySource, effect};
use super::times::{ago, span, until};
use conclave_core::lease::LeaseRecord;
use conclave_core::time::Timestamp;
use std::fmt::Write as _;

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

/// The WOULD PICK NOW cell: the winner and what electing it would do, or why nobody.
pub(super) fn pick_text(status: &LeaseStatus, now: Timestamp) -> String {
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
