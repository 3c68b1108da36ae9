//! The `conclave` binary: one subcommand per job.
#![forbid(unsafe_code)]

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use conclave::Invocation;
use std::process::ExitCode;

/// Kubernetes coordinated leader election, decided by sandboxed WebAssembly strategy plugins.
#[derive(Parser)]
#[command(name = "conclave", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take part in coordinated leader election as an example component (JSON line per transition).
    Candidate(conclave::candidate::CandidateArgs),
    /// Run the embedded Kubernetes API server (coordination.k8s.io) without a cluster.
    #[command(after_help = conclave::duration::HELP)]
    Emulator(conclave::emulator::EmulatorArgs),
    /// Run the coordinated leader election controller.
    #[command(after_help = conclave::duration::HELP)]
    Run(conclave::run::RunArgs),
    /// Test, inspect and benchmark strategy plugins.
    Strategy(conclave::strategy::StrategyArgs),
    /// Run the whole system with no cluster: a rolling upgrade with graceful hand-offs, live.
    #[command(after_help = conclave::duration::HELP)]
    Demo(conclave::demo::DemoArgs),
    /// Show the Leases under coordination, their candidates, and whom each strategy would pick.
    ///
    /// Also `kubectl conclave status` with this binary on the PATH as `kubectl-conclave`.
    #[command(
        after_help = conclave::duration::HELP,
        after_long_help = conclave::status::long_help()
    )]
    Status(conclave::status::StatusArgs),
    /// Print the CustomResourceDefinition of StrategyPlugin (conclave.dev/v1alpha1) as YAML,
    /// for `kubectl apply -f -` without the chart.
    Crd,
}

fn main() -> anyhow::Result<ExitCode> {
    // Run as `kubectl-conclave` (kubectl's plugin), help and usage say `kubectl conclave`.
    let invocation = std::env::args_os()
        .next()
        .map_or(Invocation::Conclave, |program| {
            Invocation::from_program(&program)
        });
    let name = invocation.command_name();
    let matches = Cli::command().name(name).bin_name(name).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    match cli.command {
        Command::Candidate(args) => conclave::candidate::run(args).map(|()| ExitCode::SUCCESS),
        Command::Emulator(args) => conclave::emulator::run(args).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => conclave::run::run(args),
        Command::Strategy(args) => conclave::strategy::run(args),
        Command::Demo(args) => conclave::demo::run(args),
        Command::Crd => {
            print!("{}", conclave_api::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Status(args) => {
            conclave::status::run(args, invocation).map(|()| ExitCode::SUCCESS)
        }
    }
}
