//! Command-line subcommands of the `conclave` binary.

pub mod strategy;
pub mod run;
