//! The `conclave` binary: one subcommand per job.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
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
    #[command(after_help = conclave::duration::HELP)]
    Status(conclave::status::StatusArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Candidate(args) => conclave::candidate::run(args).map(|()| ExitCode::SUCCESS),
        Command::Emulator(args) => conclave::emulator::run(args).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => conclave::run::run(args),
        Command::Strategy(args) => conclave::strategy::run(args),
        Command::Demo(args) => conclave::demo::run(args),
        Command::Status(args) => conclave::status::run(args).map(|()| ExitCode::SUCCESS),
    }
}
