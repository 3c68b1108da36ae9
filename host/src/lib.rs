//! Conclave's host: the WebAssembly strategy engine, the election controller and the CLI.
// `deny` rather than `forbid`: the engine's compiled-code cache needs one audited `unsafe` call
// (`engine::compile::load_cached`), allowed there and nowhere else.
#![deny(unsafe_code)]

pub mod cli;
pub mod controller;
pub mod engine;
