//! `conclave strategy bench`: per-decision latency of plugins through the engine, and of the
//! shipped strategies' native builds beside them, over deterministic elections of several sizes.

use super::load::{EngineArgs, Target};
use super::vectors::show;
use anyhow::{Context as _, bail};
use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_core::time::Timestamp;
use std::process::ExitCode;
use std::time::{Duration, Instant};

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

/// The latency at `p` (0 to 1) of `sorted`, which is not empty.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `d` in microseconds.
fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Measures each plugin at each size and prints a row per pair; the exit code is non-zero when a
/// row had failed decisions.
pub(super) fn bench(
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
