//! A model of Conclave's coordinated leader election, checked over every interleaving with
//! [Stateright](https://docs.rs/stateright), whose election decisions come from the real
//! [`conclave_core::step::plan_step`] and [`conclave_core::step::Election::apply_answer`].
//!
//! What is modelled ([`model::Election`]):
//! - an API server holding one Lease and the LeaseCandidates, each with a resourceVersion; a write
//!   with a stale resourceVersion is refused;
//! - one controller that reads (possibly stale) cached snapshots, one object at a time, as a
//!   watch delivers them late or coalesces them, times the renewals it watches as the controller's
//!   index does, and writes (Lease writes and pings) through the real step;
//! - with [`timing::Bounds::replicas`] above one, controller replicas, each with its own watches
//!   and caches, that elect one of them through the controller's own Lease (the classic elector)
//!   and write only while their term lasts (`leadership.rs`), crash and relist;
//! - two or three candidates following `conclave-candidate`'s elector: register and renew the
//!   LeaseCandidate, answer pings, lead while holder, renew the Lease, stop at the renew deadline,
//!   step down on a `preferredHolder` naming someone else (stop the work, then release the Lease),
//!   stay a follower; crash and restart;
//! - pod liveness, when enabled: a kubelet that reports a crashed candidate's container
//!   terminated (late or never), and the controller's rule that pings a holder reported dead and,
//!   unanswered after the answer grace, marks it dead so that the step elects the next candidate;
//! - discrete time in seconds, with the timing assumptions stated as code in [`timing::Timing`].
//!
//! The properties are named checks in [`model::properties`]; `tests/model_check.rs` runs a bounded
//! check in CI and a larger one behind `--ignored`. `tests/core_properties.rs` holds the property
//! tests of the core (proptest).
#![forbid(unsafe_code)]

pub mod model;
pub mod strategy;
pub mod timing;
pub mod world;
