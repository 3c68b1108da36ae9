//! Host bindings generated from `wit/strategy.wit` (world `conclave:strategy/strategy`).
#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "conclave:strategy/strategy",
});
