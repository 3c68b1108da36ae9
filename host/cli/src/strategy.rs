//! `conclave strategy`: test a plugin against vectors, inspect it, benchmark it, push it to and
//! pull it from an OCI registry.
//!
//! Here: the subcommands' flags and the dispatch. Each job has its own module: `load` (the engine
//! options every subcommand shares, and loading the plugin a subcommand names), `vectors`
//! (`test`), `inspect`, `bench`, and `registry` (`push`, `pull`, `inspect REFERENCE`); `new` is
//! the crate's `scaffold`.

mod bench;
mod inspect;
mod load;
mod registry;
mod vectors;

pub use load::{EngineArgs, LimitArgs};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use load::Target;
use std::path::PathBuf;
use std::process::ExitCode;

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
        } => vectors::test(&plugin, &vectors, strategy.as_deref(), &engine),
        StrategyCommand::Inspect {
            plugin,
            engine,
            registry,
        } => inspect::inspect(&plugin, &engine, &registry),
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
        } => bench::bench(
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
