//! `conclave strategy`: test a plugin against vectors, inspect it, benchmark it, push it to and
//! pull it from an OCI registry.

mod registry;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use conclave_core::k8s::{candidate_view, lease_record, timestamp};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use conclave_engine::{
    Engine, EngineConfig, LimitOverrides, Limits, PluginInfo, default_cache_dir,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Work with strategy plugins: run test vectors, inspect, benchmark, push and pull.
#[derive(Debug, Args)]
pub struct StrategyArgs {
    #[command(subcommand)]
    command: StrategyCommand,
}

#[derive(Debug, Subcommand)]
enum StrategyCommand {
    /// Scaffold a strategy plugin crate (SDK dependency, export macro, vectors, README) that
    /// builds and passes its vectors at once.
    New(super::scaffold::NewArgs),
    /// Run test vectors through a plugin; prints PASS/FAIL per case and `N passed, M failed`.
    Test {
        /// A `.wasm` file, or the name of a built-in strategy (e.g. OldestEmulationVersion).
        plugin: String,
        /// The vector file (JSON).
        #[arg(long)]
        vectors: PathBuf,
        /// Run every case under this strategy name, including cases that name their own (e.g.
        /// a third-party plugin running the built-in's vectors).
        #[arg(long)]
        strategy: Option<String>,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Print a plugin's names, description, version, imports, size, sha256 and load time.
    Inspect {
        /// A `.wasm` file, the name of a built-in strategy, or an OCI reference
        /// (`registry/repository[:tag][@sha256:...]`), pulled and verified first (its digests are
        /// printed too).
        plugin: String,
        #[command(flatten)]
        engine: EngineArgs,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
    /// Publish a plugin to an OCI registry in the CNCF layout for WebAssembly; prints the
    /// reference pinned by digest (REFERENCE@sha256:...), for a StrategyPlugin's source.
    ///
    /// The file must load in the engine as `inspect` loads it: a broken plugin is not published.
    Push {
        /// The component file (`.wasm`).
        file: PathBuf,
        /// Where to publish it: `registry/repository[:tag]` (default tag `latest`).
        reference: String,
        /// A manifest annotation, KEY=VALUE (repeatable), e.g.
        /// `org.opencontainers.image.source=https://github.com/org/plugin`.
        #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = registry::key_value)]
        annotations: Vec<(String, String)>,
        #[command(flatten)]
        engine: EngineArgs,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
    /// Pull a plugin from an OCI registry, verifying its digests, and write the component.
    Pull {
        /// `registry/repository[:tag][@sha256:...]`; with a digest, nothing else is accepted.
        reference: String,
        /// Where to write the component (`-` for stdout); default: the repository's last path
        /// component with `.wasm`, in the current directory.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
    /// Measure per-decision latency through the engine (and, for built-ins, natively).
    Bench {
        /// `.wasm` files or names of built-in strategies (default: the built-in
        /// OldestEmulationVersion); all are measured in one run.
        plugins: Vec<String>,
        /// Candidates per election; a comma-separated list measures each size, e.g.
        /// `3,100,1000,10000`.
        #[arg(long, value_delimiter = ',', default_value = "100")]
        candidates: Vec<usize>,
        /// Timed decisions per plugin and size (after a warm-up of a tenth as many, and of at least
        /// one second).
        #[arg(long, default_value_t = 2000)]
        iterations: usize,
        /// The strategy name to elect under (default: each plugin's first).
        #[arg(long)]
        strategy: Option<String>,
        /// Settings (JSON) to elect with, for plugins that need them, e.g. `{"zones": ["zone-b"]}`;
        /// default: each plugin's sidecar settings, if any.
        #[arg(long)]
        settings: Option<String>,
        /// Also print where a call's time goes: request conversion, store set-up,
        /// instantiation, the call itself (lowering, the plugin, lifting) and teardown.
        #[arg(long)]
        phases: bool,
        #[command(flatten)]
        engine: EngineArgs,
    },
}

/// Engine options shared by the `strategy` subcommands.
#[derive(Debug, Args)]
pub struct EngineArgs {
    /// Accept plugins that import WASI, giving them a deny-all WASI context.
    #[arg(long, env = "CONCLAVE_ALLOW_WASI")]
    allow_wasi: bool,
    /// Cache compiled plugin code in this directory (keyed by sha256 and wasmtime version);
    /// default: the cache `conclave run` uses, `$XDG_CACHE_HOME/conclave/wasm`, else
    /// `~/.cache/conclave/wasm`.
    #[arg(long, env = "CONCLAVE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
}

impl EngineArgs {
    fn config(&self) -> EngineConfig {
        EngineConfig {
            plugins_dir: None,
            allow_wasi: self.allow_wasi,
            cache_dir: self.cache_dir.clone().or_else(default_cache_dir),
            default_limits: Limits::default(),
            limit_overrides: self.limits.overrides(),
        }
    }
}

/// Per-call plugin limits set on the command line: each replaces the same limit in every
/// plugin's sidecar (with a warning that says so); unset, the sidecar's or the default applies.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// CPU time one call may take, in milliseconds (default: the sidecar's `time_ms`, else 10).
    #[arg(long, env = "CONCLAVE_PLUGIN_TIME_LIMIT_MS", value_name = "MS")]
    time_limit_ms: Option<u64>,
    /// Linear memory one call may grow to, in MiB (default: the sidecar's `memory_bytes`, else 16).
    #[arg(long, env = "CONCLAVE_PLUGIN_MEMORY_LIMIT_MIB", value_name = "MIB")]
    memory_limit_mib: Option<usize>,
    /// Elements a table may grow to (default: the sidecar's `table_elements`, else 10000).
    #[arg(long, env = "CONCLAVE_PLUGIN_TABLE_LIMIT", value_name = "ELEMENTS")]
    table_limit: Option<usize>,
    /// Core instances, tables and memories one instantiation may create (default: the sidecar's
    /// `instances`, else 64; at most 128).
    #[arg(long, env = "CONCLAVE_PLUGIN_INSTANCE_LIMIT", value_name = "COUNT")]
    instance_limit: Option<usize>,
}

impl LimitArgs {
    /// The limits given, as overrides of every sidecar.
    pub fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            time_ms: self.time_limit_ms,
            memory_bytes: self.memory_limit_mib.map(|mib| mib.saturating_mul(1 << 20)),
            table_elements: self.table_limit,
            instances: self.instance_limit,
        }
    }
}

/// Runs `conclave strategy ...`; the exit code is non-zero when a test case failed.
pub fn run(args: StrategyArgs) -> anyhow::Result<ExitCode> {
    super::init_logging("warn", super::LogFormat::Text);
    match args.command {
        StrategyCommand::New(args) => super::scaffold::run(&args).map(|()| ExitCode::SUCCESS),
        StrategyCommand::Test {
            plugin,
            vectors,
            strategy,
            engine,
        } => test(&plugin, &vectors, strategy.as_deref(), &engine),
        StrategyCommand::Inspect {
            plugin,
            engine,
            registry,
        } => inspect(&plugin, &engine, &registry),
        StrategyCommand::Push {
            file,
            reference,
            annotations,
            engine,
            registry,
        } => {
            // Load it as the controller would: a file the engine refuses is not published.
            let target = Target::load_file(&file, &engine).with_context(|| {
                format!(
                    "{} is not a plugin the engine can load; not pushed",
                    file.display()
                )
            })?;
            eprintln!(
                "loaded {}: strategies {}",
                file.display(),
                target.plugin.strategies.join(", ")
            );
            registry::push(&file, &reference, annotations, &registry).map(|()| ExitCode::SUCCESS)
        }
        StrategyCommand::Pull {
            reference,
            output,
            registry,
        } => registry::pull(&reference, output.as_deref(), &registry).map(|()| ExitCode::SUCCESS),
        StrategyCommand::Bench {
            plugins,
            candidates,
            iterations,
            strategy,
            settings,
            phases,
            engine,
        } => bench(
            &plugins,
            &candidates,
            iterations,
            strategy.as_deref(),
            settings.as_deref(),
            phases,
            &engine,
        ),
    }
}

/// A loaded plugin and the strategy name to call it by.
struct Target {
    engine: Engine,
    plugin: Arc<PluginInfo>,
    /// The name given on the command line, if it was a strategy name rather than a file.
    named: Option<String>,
}

impl Target {
    /// `plugin` is a path if it ends in `.wasm` or names an existing file, else a built-in name.
    fn load(plugin: &str, args: &EngineArgs) -> anyhow::Result<Self> {
        let path = Path::new(plugin);
        if plugin.ends_with(".wasm") || path.is_file() {
            return Self::load_file(path, args);
        }
        let engine = Engine::new(args.config())?;
        let Some(info) = engine
            .strategies()
            .into_iter()
            .find(|s| s.name == plugin)
            .map(|s| s.plugin)
        else {
            let known: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
            bail!(
                "{plugin:?} is neither a .wasm file nor a built-in strategy (built-ins: {})",
                known.join(", ")
            );
        };
        Ok(Self {
            engine,
            plugin: info,
            named: Some(plugin.to_owned()),
        })
    }

    /// Loads exactly the plugin file at `path` (and its sidecar, if any).
    fn load_file(path: &Path, args: &EngineArgs) -> anyhow::Result<Self> {
        let engine = Engine::from_file(args.config(), path)?;
        let info = engine
            .plugins()
            .into_iter()
            .next()
            .context("the plugin file loaded no plugin")?;
        Ok(Self {
            engine,
            plugin: info,
            named: None,
        })
    }

    /// The strategy to elect under: `preferred` if given, else the name used on the command line,
    /// else the plugin's first strategy.
    fn strategy(&self, preferred: Option<&str>) -> String {
        preferred
            .map(str::to_owned)
            .or_else(|| self.named.clone())
            .unwrap_or_else(|| self.plugin.strategies[0].clone())
    }
}

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

fn show(leader: Option<&str>) -> String {
    leader.map_or_else(|| "none".to_owned(), |name| format!("{name:?}"))
}

fn test(
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

fn inspect(
    plugin: &str,
    args: &EngineArgs,
    registry: &registry::RegistryArgs,
) -> anyhow::Result<ExitCode> {
    if !registry::is_reference(plugin) {
        let target = Target::load(plugin, args)?;
        println!("source:      {}", target.plugin.source);
        print_info(&target.plugin);
        return Ok(ExitCode::SUCCESS);
    }
    // A reference: pull it (verified) into memory, then load it as a file would be.
    let reference = conclave_oci::Reference::parse(plugin)?;
    let pulled = registry::fetch(&reference, registry)?;
    let (_dir, path) = registry::to_temp_file(&pulled)?;
    let target = Target::load_file(&path, args)
        .with_context(|| format!("{reference} is not a plugin the engine can load"))?;
    println!("source:      {reference}");
    for line in registry::describe(&reference, &pulled)? {
        println!("{line}");
    }
    print_info(&target.plugin);
    Ok(ExitCode::SUCCESS)
}

/// What `inspect` prints about a loaded plugin, after its source.
fn print_info(info: &PluginInfo) {
    println!("strategies:  {}", info.strategies.join(", "));
    println!("description: {}", info.description);
    println!("version:     {}", info.version);
    println!("contract:    conclave:strategy@{}", info.contract);
    println!("reads:       {}", info.reads);
    println!(
        "reads now:   {}",
        if info.reads_now {
            "yes (called at every renewal of a Lease by its holder)"
        } else {
            "no (a renewal of a Lease by its holder that changes nothing else calls nothing)"
        }
    );
    println!(
        "imports:     {}",
        if info.imports.is_empty() {
            "(none)".to_owned()
        } else {
            info.imports.join(", ")
        }
    );
    println!("size:        {} bytes", info.size);
    println!("sha256:      {}", info.sha256);
    println!(
        "limits:      {:?} per call, {} MiB memory, {} table elements, {} instances",
        info.limits.time,
        info.limits.memory_bytes >> 20,
        info.limits.table_elements,
        info.limits.instances
    );
    println!(
        "load:        {} in {:.1} ms",
        if info.load.from_cache {
            "loaded compiled code from cache"
        } else {
            "compiled"
        },
        info.load.elapsed.as_secs_f64() * 1e3
    );
}

/// A deterministic election with `n` candidates of mixed versions and ages, spread over zones
/// `zone-a`..`zone-d` (label `topology.kubernetes.io/zone`), two in three with a priority
/// annotation (`coordination.conclave.dev/priority`), so every rule has real data to rank.
fn bench_request(strategy: &str, n: usize) -> ElectionRequest {
    let now = Timestamp::from_secs(1_800_000_000);
    let candidates = (0..n)
        .map(|i| {
            let minor = 30 + (i * 7) % 5;
            CandidateView {
                name: format!("candidate-{i:05}"),
                binary_version: format!("1.{}.{}", minor + (i % 2), (i * 3) % 11),
                emulation_version: format!("1.{minor}.0"),
                strategy: strategy.to_owned(),
                creation_time: Some(Timestamp::from_secs(
                    1_700_000_000 + ((i * 7919) % 1000) as i64,
                )),
                renew_time: Some(now),
                ping_time: None,
                labels: vec![
                    ("app.kubernetes.io/name".into(), "bench".into()),
                    (
                        "topology.kubernetes.io/zone".into(),
                        format!("zone-{}", ["a", "b", "c", "d"][i % 4]),
                    ),
                ],
                annotations: if i % 3 == 0 {
                    Vec::new()
                } else {
                    vec![(
                        "coordination.conclave.dev/priority".into(),
                        ((i * 37) % 100 + 1).to_string(),
                    )]
                },
            }
        })
        .collect();
    ElectionRequest {
        lease: LeaseView {
            namespace: "default".into(),
            name: "bench".into(),
            holder: None,
            preferred_holder: None,
            strategy: strategy.to_owned(),
            expired: true,
        },
        now,
        settings: String::new(),
        candidates,
    }
}

/// A native rule: a shipped plugin's own `Strategy::elect`, compiled into this binary, fed as the
/// host feeds the component (candidates sorted, versions parsed, only the fields it reads).
type NativeRule = fn(&ElectionRequest) -> Result<Option<String>, String>;

/// The native build of the shipped plugin implementing `strategy`, if there is one. The plugin
/// under test need not be the shipped build: a different answer fails the bench.
fn native_rule(strategy: &str) -> Option<NativeRule> {
    use conclave_strategy::Strategy;
    use conclave_strategy::native::elect_native;
    use least_disruption::LeastDisruption;
    use oldest_emulation_version::OldestEmulationVersion;
    use priority::Priority;
    use zone_affinity::ZoneAffinity;
    let shipped: [(&[&str], NativeRule); 4] = [
        (
            OldestEmulationVersion::STRATEGIES,
            elect_native::<OldestEmulationVersion>,
        ),
        (Priority::STRATEGIES, elect_native::<Priority>),
        (LeastDisruption::STRATEGIES, elect_native::<LeastDisruption>),
        (ZoneAffinity::STRATEGIES, elect_native::<ZoneAffinity>),
    ];
    shipped
        .into_iter()
        .find(|(names, _)| names.contains(&strategy))
        .map(|(_, rule)| rule)
}

/// Latencies of one path (wasm or native), sorted: wall-clock and CPU time of the calling thread
/// (the clock the plugin time limit is judged by).
struct Samples {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

/// Decisions of one row that failed instead of electing, counted so the row still reports the
/// ones that succeeded.
#[derive(Debug, Default)]
struct Failures {
    /// Calls stopped by the time limit.
    over_limit: usize,
    /// Calls that failed otherwise (trap, memory limit, plugin error, invalid answer).
    other: usize,
    /// The first failure's error, to show with the row.
    first: Option<String>,
}

impl Failures {
    fn count(&self) -> usize {
        self.over_limit + self.other
    }

    fn record(&mut self, error: &anyhow::Error) {
        let over_limit = matches!(
            error.downcast_ref::<conclave_engine::CallError>(),
            Some(conclave_engine::CallError::LimitExceeded { .. })
        );
        if over_limit {
            self.over_limit += 1;
        } else {
            self.other += 1;
        }
        self.first.get_or_insert_with(|| format!("{error:#}"));
    }
}

/// The shortest warm-up before timed calls ([`time_calls`]).
const WARM_UP: Duration = Duration::from_secs(1);

/// Times `iterations` calls of `decide` after a warm-up; returns the sorted latencies of the
/// calls that decided, the last answer, and the calls that failed (warm-up included).
///
/// The warm-up lasts a tenth of `iterations` and at least [`WARM_UP`]: at 3 candidates the first
/// half second of calls measured 10 to 11 µs p50 on the 2-core development machine, and every
/// later one 8, so a run of 5,000 calls timed mostly the machine getting up to speed. A failed
/// call ends the timed part of the warm-up.
fn time_calls<F: FnMut() -> anyhow::Result<Option<String>>>(
    iterations: usize,
    mut decide: F,
) -> (Samples, Option<String>, Failures) {
    let mut answer = None;
    let mut failures = Failures::default();
    let warm_up = Instant::now();
    let mut warm_calls = 0;
    // A row whose calls fail has nothing to warm up: its failures are counted, not timed.
    while warm_calls < iterations.div_ceil(10)
        || (warm_up.elapsed() < WARM_UP && failures.count() == 0)
    {
        match decide() {
            Ok(decided) => answer = decided,
            Err(error) => failures.record(&error),
        }
        warm_calls += 1;
    }
    let mut samples = Samples {
        wall: Vec::with_capacity(iterations),
        cpu: Vec::with_capacity(iterations),
    };
    for _ in 0..iterations {
        let cpu = cpu_time::ThreadTime::now();
        let started = Instant::now();
        let result = decide();
        let (wall, cpu) = (started.elapsed(), cpu.elapsed());
        match result {
            Ok(decided) => {
                samples.wall.push(wall);
                samples.cpu.push(cpu);
                answer = decided;
            }
            Err(error) => failures.record(&error),
        }
    }
    samples.wall.sort();
    samples.cpu.sort();
    (samples, answer, failures)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn bench(
    plugins: &[String],
    sizes: &[usize],
    iterations: usize,
    strategy: Option<&str>,
    settings: Option<&str>,
    phases: bool,
    args: &EngineArgs,
) -> anyhow::Result<ExitCode> {
    if iterations == 0 {
        bail!("--iterations must be positive");
    }
    if sizes.is_empty() {
        bail!("--candidates needs at least one size");
    }
    if let Some(settings) = settings {
        serde_json::from_str::<serde_json::Value>(settings)
            .with_context(|| format!("--settings is not valid JSON: {settings}"))?;
    }
    let default = [OLDEST_EMULATION_VERSION.to_owned()];
    let plugins = if plugins.is_empty() {
        &default[..]
    } else {
        plugins
    };
    let mut targets = Vec::new();
    for plugin in plugins {
        let target = Target::load(plugin, args)?;
        println!(
            "plugin {} ({} bytes, {} in {:.1} ms)",
            target.plugin.source,
            target.plugin.size,
            if target.plugin.load.from_cache {
                "loaded from cache"
            } else {
                "compiled"
            },
            target.plugin.load.elapsed.as_secs_f64() * 1e3
        );
        targets.push(target);
    }
    println!(
        "{iterations} decisions per row; times in µs; cpu = CPU time of the calling thread, the \
         clock the time limit uses"
    );
    println!(
        "{:<32} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}  leader",
        "strategy", "cands", "wasm p50", "wasm p99", "wasm cpu", "native", "nat. p99", "ratio"
    );
    let mut breakdowns = Vec::new();
    let mut failed_rows = 0usize;
    for target in &targets {
        let strategy = target.strategy(strategy);
        let native = native_rule(&strategy);
        for &size in sizes {
            let mut request = bench_request(&strategy, size);
            request.settings = settings.unwrap_or_default().to_owned();
            let (wasm, wasm_answer, failures) = time_calls(iterations, || {
                Ok(target.engine.elect(&strategy, &request)?)
            });
            if failures.count() > 0 {
                failed_rows += 1;
            }
            if wasm.wall.is_empty() {
                println!(
                    "{strategy:<32} {size:>6} every decision failed ({} over the time limit, {} \
                     otherwise): {}",
                    failures.over_limit,
                    failures.other,
                    failures.first.as_deref().unwrap_or_default()
                );
                continue;
            }
            let (wasm_p50, wasm_p99) = (percentile(&wasm.wall, 0.5), percentile(&wasm.wall, 0.99));
            let mut row = format!(
                "{strategy:<32} {size:>6} {:>10.1} {:>10.1} {:>10.1}",
                micros(wasm_p50),
                micros(wasm_p99),
                micros(percentile(&wasm.cpu, 0.5))
            );
            if let Some(rule) = native {
                let (native, native_answer, native_failures) = time_calls(iterations, || {
                    rule(&request).map_err(|message| anyhow::anyhow!("native rule: {message}"))
                });
                if let Some(error) = native_failures.first {
                    bail!("{strategy} with {size} candidates: {error}");
                }
                let native_p50 = percentile(&native.wall, 0.5);
                row.push_str(&format!(
                    " {:>10.1} {:>10.1} {:>7.1}x",
                    micros(native_p50),
                    micros(percentile(&native.wall, 0.99)),
                    wasm_p50.as_secs_f64() / native_p50.as_secs_f64().max(1e-9)
                ));
                if wasm_answer != native_answer {
                    bail!(
                        "{strategy} with {size} candidates: the plugin elected {} but the native \
                         rule elected {}",
                        show(wasm_answer.as_deref()),
                        show(native_answer.as_deref())
                    );
                }
            } else {
                row.push_str(&format!(" {:>10} {:>10} {:>8}", "-", "-", "-"));
            }
            println!("{row}  {}", show(wasm_answer.as_deref()));
            if let Some(error) = &failures.first {
                println!(
                    "{:<39} {} of {} decisions failed and are not in the times above ({} over \
                     the time limit, {} otherwise); the first: {error}",
                    "",
                    failures.count(),
                    iterations + iterations.div_ceil(10),
                    failures.over_limit,
                    failures.other
                );
            }
            if phases {
                let mut sum = conclave_engine::CallPhases::default();
                for _ in 0..iterations {
                    // A failed call is counted above; its phases still show where time went.
                    let _ = target
                        .engine
                        .elect_with_phases(&strategy, &request, &mut sum);
                }
                breakdowns.push((strategy.clone(), size, sum));
            }
        }
    }
    if phases {
        println!("\nwhere a call's time goes (mean µs per call, wall clock)");
        println!(
            "{:<32} {:>6} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}",
            "strategy", "cands", "convert", "store", "instantiate", "call", "teardown", "total"
        );
        let per_call = |d: Duration| micros(d) / iterations as f64;
        for (strategy, size, sum) in breakdowns {
            println!(
                "{strategy:<32} {size:>6} {:>9.1} {:>9.1} {:>11.1} {:>9.1} {:>9.1} {:>9.1}",
                per_call(sum.convert),
                per_call(sum.store),
                per_call(sum.instantiate),
                per_call(sum.call),
                per_call(sum.teardown),
                per_call(sum.total())
            );
        }
    }
    if failed_rows > 0 {
        println!("\n{failed_rows} row(s) had failed decisions (see above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A candidate name wider than `u16::MAX` characters is printed, not a formatting panic.
    #[test]
    fn a_failure_table_prints_a_huge_name() {
        let name = "x".repeat(70_000);
        let request = ElectionRequest {
            lease: LeaseView::default(),
            now: Timestamp::from_secs(0),
            settings: String::new(),
            candidates: vec![CandidateView {
                name: name.clone(),
                ..CandidateView::default()
            }],
        };
        let expect = Expect {
            leader: Some("a".into()),
            error: false,
            message: None,
        };
        let table = failure_table(&request, &expect, Some(&name), None);
        assert!(table.contains(&name));
    }
}
