//! `conclave status`: the Leases under coordination, their candidates, and whom each Lease's
//! election would pick now. Read-only: it never writes to the cluster.
//!
//! A Lease is under coordination when it has LeaseCandidates or names a `spec.strategy`. The
//! prediction is the controller's own step: [`plan_step`](conclave_core::step::plan_step) over
//! the same valid candidates with the same [`StepConfig`](conclave_core::step::StepConfig) (ack
//! window, candidate expiry, `--mode` and whether kube-apiserver's built-in controller is
//! active), then the strategy through the same [`Decide`](crate::decide::Decide) seam and
//! [`Election::apply_answer`](conclave_core::step::Election::apply_answer). So it cannot drift
//! from what the controller does.
//!
//! A candidate's [`Health`] says what an operator needs: a candidate that renews on its own
//! schedule and answers pings is healthy, even when it renewed longer ago than the ack window
//! ("stale" only means the controller will ping it before its next election); one that failed its
//! last ping says when, and when garbage collection deletes it unless it renews.
//!
//! [`render`] lays the statuses out as a table (one Lease row, its candidates beneath it),
//! [`render_wide`] with more columns, and [`document`] as a [`StatusList`], the stable shape of
//! `-o json` and `-o yaml`.
//!
//! One module per job, in the order a `conclave status` run meets them; everything public is
//! re-exported here, so callers name `status::collect`, `status::Health` and so on:
//! - `read`: the cluster, listed once ([`list`]) or watched ([`Watch`]);
//! - `health`: where each candidate stands ([`Health`], [`CandidateStatus`]);
//! - `predict`: whom each Lease's election would pick ([`collect`], [`LeaseStatus`], [`Pick`]);
//! - `table`: the text table ([`render`], [`render_wide`], [`table`]), with `times` for how
//!   ages and countdowns read;
//! - `document`: the `-o json|yaml` shape ([`document`], [`StatusList`]).

mod document;
mod health;
mod predict;
mod read;
mod table;
#[cfg(test)]
mod tests;
mod times;

pub use document::{
    CandidateReport, LeaseReport, PredictionReport, STATUS_LIST_API_VERSION, STATUS_LIST_KIND,
    StatusList, document,
};
pub use health::{CandidateStatus, Health};
pub use predict::{LeaseStatus, Pick, PredictOptions, StrategySource, collect};
pub use read::{ListError, Watch, list};
pub use table::{render, render_wide, table};
