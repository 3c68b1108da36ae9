//! coordination.k8s.io semantics and the pure election core of Conclave.
#![no_std]
#![forbid(unsafe_code)]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod election;
pub mod request;
pub mod strategy;
pub mod time;
pub mod validation;
pub mod version;
