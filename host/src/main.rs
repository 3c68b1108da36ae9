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
    /// Run the coordinated leader election controller.
    Run(conclave::cli::run::RunArgs),
    /// Test, inspect and benchmark strategy plugins.
    Strategy(conclave::cli::strategy::StrategyArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => conclave::cli::run::run(args).map(|()| ExitCode::SUCCESS),
        Command::Strategy(args) => conclave::cli::strategy::run(args),
    }
}
