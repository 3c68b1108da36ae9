//! Command-line subcommands of the `conclave` binary.

pub mod candidate;
pub mod demo;
pub mod emulator;
pub mod run;
pub mod scaffold;
pub mod status;
pub mod strategy;
