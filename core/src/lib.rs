//! coordination.k8s.io semantics and the pure election core of Conclave: version parsing,
//! validation, Lease state, strategy choice and the `OldestEmulationVersion` ranking, over plain
//! data with no I/O and no clock. It builds `no_std` (with `alloc`) so strategy plugins share it.
#![no_std]
#![forbid(unsafe_code)]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod columns;
pub mod election;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod lease;
pub mod memory;
pub mod plan;
pub mod pod;
pub mod prepared;
pub mod request;
pub mod step;
pub mod strategy;
pub mod text;
pub mod time;
pub mod validation;
pub mod version;
