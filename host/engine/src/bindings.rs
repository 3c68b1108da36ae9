//! Host bindings generated from the plugin contract, one module per published version.
#![allow(missing_docs, clippy::all)]

/// `conclave:strategy@0.4.0` (`wit/strategy.wit`), the current contract.
pub(super) mod v0_4 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "conclave:strategy/strategy@0.4.0",
    });
}

/// `conclave:strategy@0.3.0` (`wit/v0.3/strategy.wit`), still loaded unchanged.
pub(super) mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.3",
        world: "conclave:strategy/strategy@0.3.0",
    });
}

/// `conclave:strategy@0.2.0` (`wit/v0.2/strategy.wit`), still loaded unchanged.
pub(super) mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "conclave:strategy/strategy@0.2.0",
    });
}

/// `conclave:strategy@0.1.0` (`wit/v0.1/strategy.wit`), still loaded unchanged.
pub(super) mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1",
        world: "conclave:strategy/strategy@0.1.0",
    });
}
