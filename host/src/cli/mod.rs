//! Command-line subcommands of the `conclave` binary.

pub mod candidate;
pub mod demo;
pub mod run;
pub mod scaffold;
pub mod status;
pub mod strategy;
