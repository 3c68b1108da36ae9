//! `conclave status`: the Leases under coordination, their candidates, and whom each Lease's
//! strategy would pick now.
//!
//! A Lease is under coordination when it has LeaseCandidates or names a `spec.strategy`. The
//! prediction follows the controller's own steps (valid, unexpired candidates; the strategy from
//! the Lease or from the candidates with the highest binary version; unresponsive candidates left
//! out) and asks the same strategy engine, built-ins plus `--plugins DIR`. It reads only; it never
//! writes to the cluster.

use anyhow::Context as _;
use conclave_core::k8s::{candidate_view, lease_record, timestamp, validate_lease_candidate};
use conclave_core::lease::LeaseRecord;
use conclave_core::plan::{Liveness, candidate_expired, liveness};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::{StrategyChoice, StrategyVote, resolve_strategy};
use conclave_core::time::Timestamp;
use conclave_engine::{Engine, EngineConfig, Limits, default_cache_dir};
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `conclave status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, then ~/.kube/config, then in-cluster config.
    #[arg(long, env = "CONCLAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Show only this namespace (repeatable); default: every namespace.
    #[arg(long = "namespace", short = 'n', value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Keep watching and redraw the table whenever a Lease or LeaseCandidate changes.
    #[arg(long, short = 'w')]
    pub watch: bool,
    /// Directory of extra strategy plugins, as given to `conclave run --plugins`.
    #[arg(long, env = "CONCLAVE_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Accept plugins that import WASI, as `conclave run --allow-wasi`.
    #[arg(long, env = "CONCLAVE_ALLOW_WASI")]
    pub allow_wasi: bool,
    /// The controller's ack window: a candidate is fresh if it renewed within it.
    #[arg(long, env = "CONCLAVE_ACK_WINDOW", default_value = "5s", value_parser = parse_duration)]
    pub ack_window: Duration,
    /// The controller's candidate expiry: candidates not renewed for this long take no part.
    #[arg(long, env = "CONCLAVE_CANDIDATE_GC_AFTER", default_value = "30m", value_parser = parse_duration)]
    pub candidate_gc_after: Duration,
}

/// Parses a duration such as `500ms`, `5s`, `2m` or `1h 30m`.
pub(crate) fn parse_duration(input: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = input
        .trim()
        .parse()
        .map_err(|e| format!("{input:?} is not a duration (try 500ms, 5s, 2m): {e}"))?;
    Duration::try_from(signed).map_err(|_| format!("{input:?} must not be negative"))
}

/// Where a candidate stands, as the controller would see it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Renewed within the ack window: electable at once.
    Fresh,
    /// Pinged less than one ack window ago, no ack yet.
    Pinged,
    /// Pinged at least one ack window ago and never acked: left out until it renews.
    Unresponsive,
    /// Not renewed within the ack window: the controller pings it before electing it.
    Stale,
    /// Not renewed for the candidate expiry: takes no part, garbage-collected.
    Expired,
    /// Breaks kube-apiserver's validation rules: ignored by the controller.
    Invalid,
}

impl Freshness {
    /// A short label for the table.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Pinged => "pinged",
            Self::Unresponsive => "unresponsive",
            Self::Stale => "stale",
            Self::Expired => "expired",
            Self::Invalid => "invalid",
        }
    }
}

/// One candidate of a Lease.
#[derive(Debug, Clone)]
pub struct CandidateStatus {
    /// The candidate as the strategy would see it.
    pub view: CandidateView,
    /// Its standing now.
    pub freshness: Freshness,
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

/// Whom the strategy would pick now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// This candidate; `needs_ping` when it is not fresh (the controller pings it first).
    Candidate {
        /// The candidate's name.
        name: String,
        /// Whether the controller would ping it before electing it.
        needs_ping: bool,
    },
    /// The strategy elects nobody.
    Nobody,
    /// No valid, unexpired candidate.
    NoCandidates,
    /// Every candidate was pinged and never acked.
    AllUnresponsive,
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
    /// Whom the strategy would pick now.
    pub pick: Pick,
}

impl LeaseStatus {
    /// The current holder, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.record.as_ref().and_then(LeaseRecord::holder)
    }

    /// The picked candidate's name, if the strategy picks one.
    #[must_use]
    pub fn picked(&self) -> Option<&str> {
        match &self.pick {
            Pick::Candidate { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Settings of the prediction, mirroring the controller's flags.
#[derive(Debug, Clone, Copy)]
pub struct PredictOptions {
    /// The controller's ack window.
    pub ack_window: Duration,
    /// The controller's candidate expiry.
    pub candidate_gc_after: Duration,
}

impl Default for PredictOptions {
    fn default() -> Self {
        Self {
            ack_window: Duration::from_secs(5),
            candidate_gc_after: Duration::from_secs(30 * 60),
        }
    }
}

/// A Lease (if it exists) and its candidates.
type Objects<'a> = (Option<&'a Lease>, Vec<&'a LeaseCandidate>);

/// Builds the status of every Lease under coordination among `leases` and `candidates`, sorted
/// by namespace and name.
#[must_use]
pub fn collect(
    leases: &[Lease],
    candidates: &[LeaseCandidate],
    engine: &Engine,
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
            coordinated
                .then(|| lease_status(namespace, name, record, &candidates, engine, now, options))
        })
        .collect()
}

fn lease_status(
    namespace: String,
    name: String,
    record: Option<LeaseRecord>,
    objects: &[&LeaseCandidate],
    engine: &Engine,
    now: Timestamp,
    options: PredictOptions,
) -> LeaseStatus {
    let mut candidates: Vec<CandidateStatus> = objects
        .iter()
        .map(|object| {
            let view = candidate_view(object);
            let freshness = if !validate_lease_candidate(object).is_empty() {
                Freshness::Invalid
            } else if candidate_expired(&view, now, options.candidate_gc_after) {
                Freshness::Expired
            } else {
                match liveness(&view, now, options.ack_window) {
                    Liveness::Fresh => Freshness::Fresh,
                    Liveness::Pending { .. } => Freshness::Pinged,
                    Liveness::Unresponsive => Freshness::Unresponsive,
                    Liveness::Stale => Freshness::Stale,
                }
            };
            CandidateStatus { view, freshness }
        })
        .collect();
    candidates.sort_by(|a, b| a.view.name.cmp(&b.view.name));
    let live: Vec<&CandidateStatus> = candidates
        .iter()
        .filter(|c| !matches!(c.freshness, Freshness::Invalid | Freshness::Expired))
        .collect();
    let votes: Vec<StrategyVote<'_>> = live
        .iter()
        .map(|c| StrategyVote {
            candidate: &c.view.name,
            strategy: &c.view.strategy,
            binary_version: &c.view.binary_version,
        })
        .collect();
    let strategy = match resolve_strategy(record.as_ref().and_then(LeaseRecord::strategy), &votes) {
        StrategyChoice::FromLease(s) => StrategySource::Lease(s),
        StrategyChoice::FromCandidates(s) => StrategySource::Candidates(s),
        StrategyChoice::Conflict(conflict) => StrategySource::Conflict(conflict.to_string()),
        StrategyChoice::NoCandidates => StrategySource::None,
    };
    let pick = predict(record.as_ref(), &strategy, &live, engine, now);
    LeaseStatus {
        namespace,
        name,
        record,
        strategy,
        candidates,
        pick,
    }
}

fn predict(
    record: Option<&LeaseRecord>,
    strategy: &StrategySource,
    live: &[&CandidateStatus],
    engine: &Engine,
    now: Timestamp,
) -> Pick {
    let name = match strategy {
        StrategySource::Conflict(conflict) => return Pick::Unavailable(conflict.clone()),
        StrategySource::None => return Pick::NoCandidates,
        StrategySource::Lease(s) | StrategySource::Candidates(s) => s,
    };
    if live.is_empty() {
        return Pick::NoCandidates;
    }
    if !engine.has_strategy(name) {
        return Pick::Unavailable(format!(
            "no loaded plugin implements {name:?} (pass the controller's --plugins DIR)"
        ));
    }
    let pool: Vec<&CandidateStatus> = live
        .iter()
        .copied()
        .filter(|c| c.freshness != Freshness::Unresponsive)
        .collect();
    if pool.is_empty() {
        return Pick::AllUnresponsive;
    }
    let request = ElectionRequest {
        lease: LeaseView {
            namespace: record.map(|r| r.namespace.clone()).unwrap_or_default(),
            name: record.map(|r| r.name.clone()).unwrap_or_default(),
            holder: record.and_then(LeaseRecord::holder).map(Into::into),
            preferred_holder: record.and_then(LeaseRecord::preferred).map(Into::into),
            strategy: name.clone(),
            expired: record.is_none_or(|r| r.is_expired(now)),
        },
        now,
        settings: String::new(),
        candidates: pool.iter().map(|c| c.view.clone()).collect(),
    };
    match engine.elect(name, &request) {
        Ok(Some(winner)) => {
            let needs_ping = pool
                .iter()
                .find(|c| c.view.name == winner)
                .is_none_or(|c| c.freshness != Freshness::Fresh);
            Pick::Candidate {
                name: winner,
                needs_ping,
            }
        }
        Ok(None) => Pick::Nobody,
        Err(error) => Pick::Unavailable(error.to_string()),
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
    let elapsed = at.elapsed_at(now);
    let secs = elapsed.as_secs();
    match secs {
        0..10 => format!("{:.1}s ago", elapsed.as_secs_f64()),
        10..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m{:02}s ago", secs / 60, secs % 60),
        _ => format!("{}h{:02}m ago", secs / 3600, (secs % 3600) / 60),
    }
}

/// Lays out rows as left-aligned columns separated by two spaces, each line prefixed by `indent`.
pub(crate) fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
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

fn pick_text(status: &LeaseStatus, now: Timestamp) -> String {
    match &status.pick {
        Pick::Candidate { name, needs_ping } => {
            let mut text = name.clone();
            let holder = status.holder();
            let live = status.record.as_ref().is_some_and(|r| !r.is_free(now));
            if holder == Some(name.as_str()) {
                text.push_str(" (holds it)");
            } else if live {
                let _ = write!(text, " (would pre-empt {})", holder.unwrap_or_default());
            } else {
                text.push_str(" (would be assigned)");
            }
            if *needs_ping {
                text.push_str(", after a ping");
            }
            text
        }
        Pick::Nobody => "nobody (the strategy elects no one)".into(),
        Pick::NoCandidates => "- (no live candidates)".into(),
        Pick::AllUnresponsive => "- (every candidate is unresponsive)".into(),
        Pick::Unavailable(why) => format!("? {why}"),
    }
}

/// Renders the statuses as text: one row per Lease, its candidates indented beneath it.
#[must_use]
pub fn render(statuses: &[LeaseStatus], now: Timestamp) -> String {
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
        let rows = vec![
            vec![
                "LEASE".into(),
                "STRATEGY".into(),
                "HOLDER".into(),
                "PREFERRED".into(),
                "RENEWED".into(),
                "WOULD PICK NOW".into(),
            ],
            vec![
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
                pick_text(status, now),
            ],
        ];
        table(&mut out, "", &rows);
        if status.candidates.is_empty() {
            out.push_str("    (no candidates)\n");
            continue;
        }
        let mut rows = vec![vec![
            "CANDIDATE".into(),
            "BINARY".into(),
            "EMULATION".into(),
            "STRATEGY".into(),
            "RENEWED".into(),
            "PINGED".into(),
            "FRESHNESS".into(),
        ]];
        for candidate in &status.candidates {
            let view = &candidate.view;
            let mut name = view.name.clone();
            if status.holder() == Some(view.name.as_str()) {
                name.push_str(" *");
            }
            rows.push(vec![
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
                candidate.freshness.label().into(),
            ]);
        }
        table(&mut out, "    ", &rows);
        if let StrategySource::Conflict(conflict) = &status.strategy {
            let _ = writeln!(out, "    ! {conflict}");
        }
    }
    out
}

/// Loads the strategy engine as the controller would (built-ins plus `plugins`).
pub(crate) fn engine(plugins: Option<PathBuf>, allow_wasi: bool) -> anyhow::Result<Engine> {
    Engine::new(EngineConfig {
        plugins_dir: plugins,
        allow_wasi,
        cache_dir: default_cache_dir(),
        default_limits: Limits::default(),
    })
    .context("loading strategy plugins")
}

fn wall_now() -> Timestamp {
    timestamp(jiff::Timestamp::now())
}

/// Runs `conclave status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    super::init_logging("warn", super::LogFormat::Text);
    let runtime = super::runtime()?;
    runtime.block_on(status(args))
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let engine = engine(args.plugins.clone(), args.allow_wasi)?;
    let client = super::kube_client(args.kubeconfig.as_deref()).await?;
    let options = PredictOptions {
        ack_window: args.ack_window,
        candidate_gc_after: args.candidate_gc_after,
    };
    if !args.watch {
        let (leases, candidates) = list(&client, &args.namespaces).await?;
        let now = wall_now();
        print!(
            "{}",
            render(&collect(&leases, &candidates, &engine, now, options), now)
        );
        return Ok(());
    }
    watch(client, &args.namespaces, &engine, options).await
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
pub(crate) async fn list(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<(Vec<Lease>, Vec<LeaseCandidate>)> {
    let mut leases = Vec::new();
    let mut candidates = Vec::new();
    for namespace in scopes(namespaces) {
        let where_ = namespace.unwrap_or("all namespaces");
        leases.extend(
            api::<Lease>(client, namespace)
                .list(&Default::default())
                .await
                .with_context(|| format!("listing Leases in {where_}"))?
                .items,
        );
        candidates.extend(
            api::<LeaseCandidate>(client, namespace)
                .list(&Default::default())
                .await
                .with_context(|| {
                    format!(
                        "listing LeaseCandidates in {where_} (is coordination.k8s.io/v1beta1 \
                         enabled?)"
                    )
                })?
                .items,
        );
    }
    Ok((leases, candidates))
}

async fn watch(
    client: Client,
    namespaces: &[String],
    engine: &Engine,
    options: PredictOptions,
) -> anyhow::Result<()> {
    let mut lease_stores: Vec<Store<Lease>> = Vec::new();
    let mut candidate_stores: Vec<Store<LeaseCandidate>> = Vec::new();
    let mut changes = futures::stream::SelectAll::new();
    for namespace in scopes(namespaces) {
        let (reader, writer) = reflector::store();
        lease_stores.push(reader);
        changes.push(
            watcher(api::<Lease>(&client, namespace), watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
                .boxed(),
        );
        let (reader, writer) = reflector::store();
        candidate_stores.push(reader);
        changes.push(
            watcher(
                api::<LeaseCandidate>(&client, namespace),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(writer)
            .map(|event| event.map(|_| ()).map_err(|e| e.to_string()))
            .boxed(),
        );
    }
    let terminal = std::io::stdout().is_terminal();
    // On a terminal the ages tick every second; in a pipe only changes redraw.
    let tick = if terminal {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3600)
    };
    let mut synced = false;
    let mut last_error: Option<String> = None;
    loop {
        if synced {
            let leases: Vec<Lease> = lease_stores
                .iter()
                .flat_map(|s| s.state().into_iter().map(|l| (*l).clone()))
                .collect();
            let candidates: Vec<LeaseCandidate> = candidate_stores
                .iter()
                .flat_map(|s| s.state().into_iter().map(|c| (*c).clone()))
                .collect();
            let now = wall_now();
            let text = render(&collect(&leases, &candidates, engine, now, options), now);
            let stamp = jiff::Timestamp::now().strftime("%H:%M:%S");
            let mut stdout = std::io::stdout().lock();
            if terminal {
                // Clear the screen and home the cursor, then draw.
                let _ = write!(stdout, "\x1b[H\x1b[2J");
            }
            let _ = writeln!(
                stdout,
                "conclave status at {stamp} (watching; Ctrl-C to stop)"
            );
            if let Some(error) = &last_error {
                let _ = writeln!(stdout, "watch error (retrying): {error}");
            }
            let _ = writeln!(stdout, "\n{text}");
            let _ = stdout.flush();
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            () = tokio::time::sleep(tick) => {}
            event = changes.next() => match event {
                Some(Ok(())) => {
                    last_error = None;
                    // Let a burst of events settle before drawing once.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(Err(error)) => {
                    last_error = Some(error);
                }
                None => anyhow::bail!("the watches ended"),
            },
        }
        if !synced {
            // The stores fill as the streams are polled; draw once every initial list is in.
            synced = lease_stores
                .iter()
                .all(|s| s.wait_until_ready().now_or_never().is_some())
                && candidate_stores
                    .iter()
                    .all(|s| s.wait_until_ready().now_or_never().is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let now = wall_now();
        let statuses = collect(
            &leases,
            &candidates,
            &engine,
            now,
            PredictOptions::default(),
        );
        let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["conflict", "held", "unknown"],
            "classic is not coordinated"
        );

        let held = &statuses[1];
        let freshness: Vec<(&str, Freshness)> = held
            .candidates
            .iter()
            .map(|c| (c.view.name.as_str(), c.freshness))
            .collect();
        assert_eq!(
            freshness,
            [
                ("a", Freshness::Unresponsive),
                ("b", Freshness::Fresh),
                ("c", Freshness::Invalid),
                ("d", Freshness::Stale),
            ]
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
    fn durations_parse() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
