//! The `conclave` binary: one subcommand per job.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

/// Kubernetes coordinated leader election, decided by sandboxed WebAssembly strategy plugins.
#[derive(Parser)]
#[command(name = "conclave", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
