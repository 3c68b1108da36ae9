//! `conclave strategy test`: runs a vector file's cases through a plugin, prints PASS or FAIL per
//! case, and for a failure the table of what the case looked like.

use super::load::{EngineArgs, Target};
use anyhow::{Context as _, bail};
use conclave_core::k8s::{candidate_view, lease_record, timestamp};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use serde::Deserialize;
use std::path::Path;
use std::process::ExitCode;

/// A vector file: `{"strategy", "settings"?, "cases": [...]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorFile {
    strategy: String,
    #[serde(default)]
    settings: Option<serde_json::Value>,
    cases: Vec<Case>,
}

/// One case: the Lease (or null), the candidates as `kubectl get -o json` prints them, and the
/// expected leader.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    now: jiff::Timestamp,
    lease: Option<Lease>,
    candidates: Vec<LeaseCandidate>,
    expect: Expect,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    settings: Option<serde_json::Value>,
}

/// What a case expects: `{"leader": NAME}`, `{"leader": null}`, or `{"error": true}` (`elect`
/// must return an error) with an optional `"message"` the error must contain.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    leader: Option<String>,
    #[serde(default)]
    error: bool,
    #[serde(default)]
    message: Option<String>,
}

impl Expect {
    /// Rejects contradictory expectations, so a vector cannot pass by accident.
    fn check(&self, case: &str) -> anyhow::Result<()> {
        if self.error && self.leader.is_some() {
            bail!("case {case:?}: expect has both \"error\": true and a leader");
        }
        if self.message.is_some() && !self.error {
            bail!("case {case:?}: expect.message needs \"error\": true");
        }
        Ok(())
    }

    /// What is expected, for reports.
    fn describe(&self) -> String {
        match (&self.error, &self.message) {
            (true, Some(message)) => format!("an error containing {message:?}"),
            (true, None) => "an error".to_owned(),
            (false, _) => format!("leader {}", show(self.leader.as_deref())),
        }
    }

    /// `Ok(what passed)` or `Err(why it failed)`.
    fn judge(
        &self,
        outcome: &Result<Option<String>, conclave_engine::CallError>,
    ) -> Result<String, String> {
        match (self.error, outcome) {
            (false, Ok(actual)) if actual.as_deref() == self.leader.as_deref() => Ok(format!(
                "expected leader {}, got {}",
                show(self.leader.as_deref()),
                show(actual.as_deref())
            )),
            (false, Ok(actual)) => Err(format!(
                "expected leader {}, got {}",
                show(self.leader.as_deref()),
                show(actual.as_deref())
            )),
            (true, Err(error @ conclave_engine::CallError::PluginError { message, .. }))
                if self
                    .message
                    .as_ref()
                    .is_none_or(|m| message.contains(m.as_str())) =>
            {
                Ok(format!("expected {}, got error: {error}", self.describe()))
            }
            (true, Ok(actual)) => Err(format!(
                "expected {}, got leader {}",
                self.describe(),
                show(actual.as_deref())
            )),
            (_, Err(error)) => Err(format!(
                "expected {}, got error ({}): {error}",
                self.describe(),
                error.label()
            )),
        }
    }
}

/// The request a case describes; every candidate counts as alive.
fn case_request(
    case: &Case,
    strategy: &str,
    settings: Option<&serde_json::Value>,
) -> ElectionRequest {
    let now = timestamp(case.now);
    let candidates: Vec<CandidateView> = case.candidates.iter().map(candidate_view).collect();
    let lease = match &case.lease {
        Some(lease) => {
            let record = lease_record(lease);
            LeaseView {
                holder: record.holder().map(str::to_owned),
                preferred_holder: record.preferred().map(str::to_owned),
                expired: record.is_expired(now),
                strategy: strategy.to_owned(),
                namespace: record.namespace,
                name: record.name,
            }
        }
        None => {
            let first = case.candidates.first();
            LeaseView {
                namespace: first
                    .and_then(|c| c.metadata.namespace.clone())
                    .unwrap_or_else(|| "default".into()),
                name: first
                    .and_then(|c| c.spec.as_ref())
                    .map(|spec| spec.lease_name.clone())
                    .unwrap_or_default(),
                holder: None,
                preferred_holder: None,
                strategy: strategy.to_owned(),
                expired: true,
            }
        }
    };
    ElectionRequest {
        lease,
        now,
        settings: settings
            .map(serde_json::Value::to_string)
            .unwrap_or_default(),
        candidates,
    }
}

/// Rows of the candidate table a failure prints; the expected and actual leaders are always shown.
const FAILURE_TABLE_ROWS: usize = 40;

/// What a failing case looked like: the Lease, the expected and actual outcome, and the
/// candidates (sorted by name) with the fields strategies rank by. `>` marks the expected leader,
/// `<` the actual one.
fn failure_table(
    request: &ElectionRequest,
    expect: &Expect,
    actual: Option<&str>,
    error: Option<&conclave_engine::CallError>,
) -> String {
    use std::fmt::Write as _;
    let lease = &request.lease;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "    lease {}/{}: holder {}, preferred holder {}, {}; settings {}",
        lease.namespace,
        lease.name,
        show(lease.holder.as_deref()),
        show(lease.preferred_holder.as_deref()),
        if lease.expired { "expired" } else { "live" },
        if request.settings.is_empty() {
            "(none)"
        } else {
            &request.settings
        }
    );
    let _ = writeln!(out, "    expected: {}", expect.describe());
    let _ = writeln!(
        out,
        "    actual:   {}",
        match error {
            Some(error) => format!("error ({}): {error}", error.label()),
            None => format!("leader {}", show(actual)),
        }
    );
    let mut candidates: Vec<&CandidateView> = request.candidates.iter().collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let expected = expect.leader.as_deref();
    let mark = |name: &str| match (Some(name) == expected, Some(name) == actual) {
        (true, true) => "><",
        (true, false) => "> ",
        (false, true) => " <",
        (false, false) => "  ",
    };
    let created = |c: &CandidateView| {
        c.creation_time
            .and_then(|t| jiff::Timestamp::from_microsecond(t.as_micros()).ok())
            .map_or_else(|| "-".to_owned(), |t| t.to_string())
    };
    let pairs = |pairs: &[(String, String)]| {
        if pairs.is_empty() {
            "-".to_owned()
        } else {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    let rows: Vec<[String; 7]> = std::iter::once([
        String::new(),
        "candidate".to_owned(),
        "emulation".to_owned(),
        "binary".to_owned(),
        "created".to_owned(),
        "labels".to_owned(),
        "annotations".to_owned(),
    ])
    .chain(candidates.iter().enumerate().filter_map(|(i, c)| {
        let shown = i < FAILURE_TABLE_ROWS || mark(&c.name) != "  ";
        shown.then(|| {
            [
                mark(&c.name).to_owned(),
                c.name.clone(),
                c.emulation_version.clone(),
                c.binary_version.clone(),
                created(c),
                pairs(&c.labels),
                pairs(&c.annotations),
            ]
        })
    }))
    .collect();
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let _ = writeln!(
        out,
        "    candidates ({}; > expected, < actual):",
        candidates.len()
    );
    for row in &rows {
        let mut line = String::from("    ");
        // Padded by hand: `{cell:<width$}` panics for a width above u16::MAX, which a vector's
        // 70,000-byte name reaches (found by tests/fuzz_vectors.rs).
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count()) + 1;
            line.extend(std::iter::repeat_n(' ', pad));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let hidden = candidates.len() + 1 - rows.len();
    if hidden > 0 {
        let _ = writeln!(out, "    ... and {hidden} more");
    }
    out
}

/// How a leader reads in reports: its name quoted, or `none`.
pub(super) fn show(leader: Option<&str>) -> String {
    leader.map_or_else(|| "none".to_owned(), |name| format!("{name:?}"))
}

/// Runs the cases of `vectors` through `plugin`; the exit code is non-zero when one failed.
pub(super) fn test(
    plugin: &str,
    vectors: &Path,
    strategy: Option<&str>,
    args: &EngineArgs,
) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(vectors)
        .with_context(|| format!("cannot read vectors {}", vectors.display()))?;
    let file: VectorFile = serde_json::from_str(&text)
        .with_context(|| format!("invalid vector file {}", vectors.display()))?;
    for case in &file.cases {
        case.expect
            .check(&case.name)
            .with_context(|| format!("invalid vector file {}", vectors.display()))?;
    }
    let target = Target::load(plugin, args)?;
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in &file.cases {
        let name = strategy
            .or(case.strategy.as_deref())
            .unwrap_or(&file.strategy);
        let settings = case.settings.as_ref().or(file.settings.as_ref());
        let request = case_request(case, name, settings);
        if !target.plugin.strategies.iter().any(|s| s == name) {
            failed += 1;
            println!(
                "FAIL {}: plugin {} does not implement strategy {name:?} (it implements {})",
                case.name,
                target.plugin.source,
                target.plugin.strategies.join(", ")
            );
            continue;
        }
        let outcome = target.engine.elect(name, &request);
        match case.expect.judge(&outcome) {
            Ok(what) => {
                passed += 1;
                println!("PASS {}: {what}", case.name);
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {}: {why}", case.name);
                let actual = outcome.as_ref().ok().and_then(Option::as_deref);
                print!(
                    "{}",
                    failure_table(&request, &case.expect, actual, outcome.as_ref().err())
                );
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests;
