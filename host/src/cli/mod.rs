//! Command-line subcommands of the `conclave` binary.

pub mod candidate;
pub mod scaffold;
pub mod strategy;
pub mod run;
