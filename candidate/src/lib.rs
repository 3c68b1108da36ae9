//! conclave-candidate: take part in Kubernetes coordinated leader election (KEP-4355) and hand
//! leadership over gracefully (KEP-5366) without leaving the process.
//!
//! Four pieces, named as in the KEPs:
//! - [`Candidate`]: the component's own LeaseCandidate (create or update, renew every 5 min and
//!   at once when pinged, delete on graceful shutdown);
//! - [`Elector`]: watches the Lease and leads while it names this identity as holder;
//!   [`Elector::coordinated`] never acquires (an election controller assigns the holder, spec
//!   §8.2), [`Elector::classic`] acquires free or expired Leases itself;
//! - [`Term`]: one period of leadership. User code runs inside it; its token is cancelled and
//!   its tasks are drained before the Lease is released;
//! - [`WarmCache`]: a reflector kept running while following, so a term's controller starts on
//!   a warm cache, without a LIST ([`warm`] shows a `kube_runtime::Controller` run this way).
//!   Given to the elector ([`Elector::with_warm_cache`], [`Elector::require_synced_cache`]), a
//!   cache that cannot sync is reported once and, by the author's choice, keeps the candidate
//!   out of the election until it syncs ([`warm`], "A cache that cannot sync").
//!
//! Build the `kube::Client` with [`client()`]: kube's default client leaves Nagle's algorithm on,
//! which can hold each small write (a renewal, a release) for about 40 ms.
//!
//! # In a pod
//!
//! Set these from the pod spec, and the LeaseCandidate names the Pod and the process
//! ([`PodRef`]):
//!
//! ```yaml
//! env:
//!   - name: POD_NAME
//!     valueFrom: {fieldRef: {fieldPath: metadata.name}}
//!   - name: POD_UID
//!     valueFrom: {fieldRef: {fieldPath: metadata.uid}}
//!   - name: POD_NAMESPACE
//!     valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
//!   - name: CONTAINER_NAME
//!     value: app            # this container's name
//! ```
//!
//! - the identity is `$POD_NAME` plus a random suffix drawn once per process
//!   ([`default_identity`]): a container the kubelet restarts comes back as a new candidate;
//! - the LeaseCandidate gets an ownerReference to the Pod (`v1`, `Pod`, name, UID; no
//!   `blockOwnerDeletion`, which would need RBAC on the Pod's finalizers), so Kubernetes' garbage
//!   collector deletes it with the Pod, and annotations `coordination.conclave.dev/container`,
//!   `.../container-id` (read from the process's cgroup) and `.../process-started`;
//! - an election controller that knows them (`conclave run --pod-liveness=on`) fails over as
//!   soon as the kubelet reports that this process's container terminated or was replaced, or
//!   the Pod is deleted, instead of when the Lease expires ([`conclave_core::pod`] has the rule).
//!   The term's own safety does not change: a process that runs never has its container
//!   reported terminated.
//!
//! # Timing assumptions
//!
//! Two instances never lead at once as long as (docs/differences.md, "The timing assumptions
//! safety rests on", has the same list with what happens when one is broken):
//! - clock *skew* does not matter: a term is measured on this process's monotonic clock from when
//!   it sent its last renewal, and the controller measures expiry from when it saw that renewal;
//! - clock *drift* between this process and the controller stays under the abort grace per
//!   lease duration: tasks still running when the Lease is lost are aborted that long before it
//!   could expire (1 s, or half of what was left of the Lease when it was lost if that is less);
//! - `renew_deadline` < `lease_duration` ([`LeaseConfig::validate`]);
//! - every task of a [`Term`] reaches an `.await` within the abort grace of being aborted: they
//!   are aborted after the drain timeout, before the Lease could expire (also when it was
//!   deleted), or at once when the Lease names another holder; tasks that do not stop are reported
//!   ([`Transition::StoppedLeading`] `leaked_tasks`) and the Lease is left to expire unreleased;
//! - the process is not paused (SIGSTOP, a VM stall) for longer than what is left of its Lease
//!   between two checks: Leases do not fence, so work that must never overlap also needs
//!   preconditions on its own writes.
//!
//! ```no_run
//! # async fn demo(kube_config: kube::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use conclave_candidate::{CandidateConfig, Elector, LeaseConfig, Term};
//! use tokio_util::sync::CancellationToken;
//! let client = conclave_candidate::client(kube_config)?;
//! // The client's namespace (the service account's, in a pod) and $POD_NAME plus a per-process
//! // suffix as identity; in a pod, the candidate names its Pod and container (see PodRef).
//! let config = LeaseConfig::for_client(&client, "my-controller");
//! let candidate = CandidateConfig::new("1.33.0", "1.33.0", "OldestEmulationVersion");
//! let elector = Elector::coordinated(client, config, candidate)?
//!     .on_transition(|t| tracing::info!(transition = %serde_json::to_string(t).unwrap_or_default()));
//! let shutdown = CancellationToken::new();
//! elector
//!     .run(
//!         |term: Term| async move {
//!             let worker = term.clone();
//!             term.spawn(async move { worker.cancelled().await });
//!             term.cancelled().await;
//!         },
//!         shutdown,
//!     )
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Versions
//!
//! - kube 5 (`kube-runtime` and `kube-client` 5.0 or later within 5.x) and k8s-openapi 0.29. As a
//!   library this crate enables no k8s-openapi version feature: the component's binary enables
//!   one, `v1_33` or later (LeaseCandidate `coordination.k8s.io/v1beta1`).
//! - An election controller for coordinated mode: kube-apiserver 1.33 or later with the
//!   `CoordinatedLeaderElection` feature gate (and `coordination.k8s.io/v1beta1` served), or
//!   Conclave's `conclave run`. Classic mode needs only Leases.
//! - prometheus-client 0.26, whose [`Registry`] [`ElectorMetrics::register`] takes (re-exported,
//!   as is [`Timestamp`], the type of every time in [`Transition`] and [`TermLease`]).
//! - Rust 1.95 (edition 2024), Tokio 1.
//!
//! # Seeing what happens: logs, metrics, transitions
//!
//! The crate logs with [`tracing`]. Nothing is printed unless the binary installs a subscriber,
//! e.g. with `tracing-subscriber` (`features = ["env-filter"]`):
//! `tracing_subscriber::fmt().with_env_filter("info").init();`. Warnings (failed renewals,
//! failed releases, a Lease no election controller attends to) and errors (leaked term tasks)
//! matter in production.
//!
//! Logs are not the only channel. Every problem is also:
//! - a metric ([`ElectorMetrics::register`]): leaked tasks, failed releases, failed API requests
//!   by operation, and whether the Lease is unattended;
//! - a value: [`Transition::StoppedLeading`] counts leaked tasks and
//!   [`Transition::ReleaseFailed`] says why a Lease was not released, in order with the rest of
//!   the term; [`ElectorHandle::notices`] carries [`Notice::NoElectionController`] and
//!   [`Notice::CacheNotSynced`], and [`ElectorHandle::coordination`] says whether an election
//!   controller acts on the Lease.
//!
//! Every replica numbers its own terms from 1 (`term`); to tell the terms of several replicas
//! apart and in order, each term's transitions and log lines also carry `lease_transitions`, the
//! Lease's `spec.leaseTransitions` as the term's first write left it (that write counts one, so
//! no two terms of a Lease share it, whoever led them).
//!
//! Transitions, notices and states serialize (serde) as flat JSON objects with RFC 3339 times,
//! ready for a log line or an event shipper. Each transition also carries a [`MonotonicTime`]
//! (`CLOCK_MONOTONIC` nanoseconds), so the terms of processes on one machine can be ordered
//! without trusting the wall clock. [`Elector::on_transition`] sees transitions inline,
//! in order with the term's own work; [`ElectorHandle::transitions`] delivers them to other
//! tasks.
//!
//! # Timing guide
//!
//! Three timers of [`LeaseConfig`] and the drain timeout decide how fast leadership moves and how
//! safe that is. With `D` = `lease_duration`, `R` = `renew_deadline`, `P` = `retry_period`:
//!
//! | setting | default | longer means | shorter means |
//! |---|---|---|---|
//! | `lease_duration` `D` | 15 s | slower failover after a crash: the others wait `D` after the last renewal | faster failover; `D - R` must still cover scheduling and clock-rate hiccups |
//! | `renew_deadline` `R` | 10 s | the leader rides out longer API-server trouble before it stops | it gives up sooner; the margin `D - R`, in which a leader that lost contact stops its work before anyone may take over, grows |
//! | `retry_period` `P` | 2 s | fewer writes (the leader renews every `P`: one write each) | more writes; a follower's poll after a crash is sooner |
//! | drain timeout ([`Elector::with_drain_timeout`]) | 10 s | term tasks get longer to finish | a hand-off waits at most this for stubborn tasks, which are then reported as leaked |
//!
//! What they give, measured with `candidate/benches/handoff.rs` against a real kube-apiserver
//! v1.37.2 (docs/benchmarks.md, "Candidate library: hand-off and failover"; p50 / largest):
//! - **Graceful hand-off** (pre-emption, shutdown) does not wait for any timer: followers watch
//!   the Lease, so a release is taken over within one write and one watch event. Coordinated,
//!   `preferredHolder` written → new leader leading: 12.8 / 15.9 ms (release build); classic,
//!   shutdown → new leader: 7.4 / 14.3 ms. Add the time the term's own tasks take to stop (at
//!   most the drain timeout).
//! - **Crash failover** waits for the Lease to expire: up to `D` after the last renewal, plus up
//!   to `P` until a follower's next poll (classic), or until the election controller elects
//!   (coordinated: kube-apiserver's controller checks every 5 s and pings the candidates before
//!   it elects). With `D`/`R`/`P` = 5 s / 3 s / 1 s: crash → new leader 4.6 / 4.6 s coordinated
//!   (with a simulated controller), 4.9 / 5.1 s classic. With the defaults expect about `D + P`
//!   = 15 to 17 s classic; 18.6 s was seen in coordinated mode with kube-apiserver's controller.
//! - **Load**: one Lease write per leader per `P`, a watch per elector, and in coordinated mode
//!   one LeaseCandidate write per 5 minutes and per ping.
//!
//! Client-go's defaults (15 s / 10 s / 2 s) suit most components. For faster failover, scale
//! the three together (5 s / 3 s / 1 s above keeps `R` ≥ 3 `P`, so two failed renewals in a row
//! are survived). Keep `R` well below `D`: [`LeaseConfig::validate`] refuses `R ≥ D`.
#![forbid(unsafe_code)]

mod candidate;
mod client;
mod config;
mod elector;
mod error;
mod identity;
mod lock;
mod metrics;
mod pod;
mod term;
mod time;
pub mod warm;

pub use candidate::{Candidate, CandidateHandle};
pub use client::client;
pub use config::{
    CandidateConfig, DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_CONTROLLER_TIMEOUT, DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_RENEW_INTERVAL, LeaseConfig,
};
pub use elector::{
    Blocked, Coordination, Elector, ElectorHandle, LeaderState, Notice, StopReason, Transition,
};
pub use error::{Error, Result};
pub use identity::{
    POD_NAME_ENV, SERVICE_ACCOUNT_NAMESPACE_FILE, default_identity, service_account_namespace,
};
pub use metrics::{ElectorMetrics, Operation};
pub use pod::{CONTAINER_NAME_ENV, POD_NAMESPACE_ENV, POD_UID_ENV, PodRef};
pub use term::{Term, TermLease};
pub use time::{MonotonicTime, rfc3339};
pub use warm::WarmCache;

/// The time of every [`Transition`], [`Notice`] and [`TermLease`]: microseconds since the Unix
/// epoch (a Kubernetes `MicroTime`); [`rfc3339`] formats it.
pub use conclave_core::time::Timestamp;
/// The registry [`ElectorMetrics::register`] takes (prometheus-client's).
pub use prometheus_client::registry::Registry;
