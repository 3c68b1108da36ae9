//! coordination.k8s.io semantics and the pure election core of Conclave.
#![no_std]
#![forbid(unsafe_code)]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;
