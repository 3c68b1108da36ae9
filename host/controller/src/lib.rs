//! The coordinated leader election controller (`conclave run`) and `conclave status`, which
//! predicts through the same rules.
//!
//! Shape: one election step is a pure function over plain data (`conclave_core::step`: a Lease
//! snapshot, candidate snapshots and now in, the writes to make out); this crate does the I/O
//! around it, one concern per module, in the order a watch event meets them:
//! - [`cache`]: kube-rs reflectors on Leases and LeaseCandidates (cluster-wide or per namespace),
//!   decoded without their managedFields ([`wire`]); followers keep these caches warm;
//! - [`index`]: what each watch event does besides updating its store: the candidate index, acks,
//!   read-your-writes ([`own_writes`]) and enqueueing its [`LeaseKey`] (testable without a server);
//! - [`queue`]: Lease keys, deduplicated, delayed re-adds (ping windows, expiry timers), one worker
//!   per key at a time;
//! - [`reconcile`]: one election step: `conclave_core::step` + the strategy ([`Decide`]) + the
//!   [`writer`], which carries a resourceVersion precondition on every write and sends only while
//!   this replica leads ([`leadership`]);
//! - [`events`] and [`metrics`]: what an operator sees; `/metrics` `/healthz` `/readyz` in `http`;
//! - [`pods`]: pod liveness: a cache of the Pods candidates name, and the rule that declares a
//!   holder dead as soon as the kubelet reports that its process stopped (`--pod-liveness`);
//! - [`status`]: `conclave status`, the same step predicted for every Lease, read-only.
//!
//! [`run()`] wires them together from a [`ControllerConfig`], its tasks sharing one [`Context`];
//! it also runs candidate garbage collection and the detection of kube-apiserver's built-in
//! controller (`--mode auto`). Only the replica holding the plain Lease `conclave-controller`
//! (taken through `conclave-candidate`'s classic elector) runs workers and writes.
#![forbid(unsafe_code)]

pub mod cache;
mod clock;
mod config;
mod context;
pub mod decide;
mod error;
pub mod events;
mod http;
pub mod index;
pub mod key;
mod latency;
pub mod leadership;
pub mod metrics;
mod own_leases;
pub mod own_writes;
pub mod plugin_objects;
pub mod pods;
pub mod queue;
pub mod reconcile;
mod run;
pub mod status;
mod sync;
pub mod takeover;
pub mod wire;
pub mod writer;

pub use config::ControllerConfig;
pub use context::Context;
pub use decide::{Decide, DecideError, DecideErrorKind};
pub use error::Error;
pub use key::{CandidateKey, LeaseKey};
pub use own_leases::{BUILTIN_LEASE, CONTROLLER_LEASE};
pub use run::{LEADERLESS_TICK, builtin_controller_active, run, run_with_plugin_objects};
