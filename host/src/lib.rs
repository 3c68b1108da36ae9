//! Conclave's host: the WebAssembly strategy engine, the election controller and the CLI.
#![forbid(unsafe_code)]
