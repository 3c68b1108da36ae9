//! Taking over from kube-apiserver's built-in election controller (`--take-over`, on by default).
//!
//! With the `CoordinatedLeaderElection` feature gate (which a cluster needs for the Lease fields
//! `strategy` and `preferredHolder`), one kube-apiserver runs a built-in election controller. The
//! kube-apiservers choose which by a client-go election on the Lease
//! `kube-system/leader-election-controller` (15 s / 10 s / 2 s; identity `<host>_<uuid>`), and
//! the winner elects every `OldestEmulationVersion` Lease: kube-controller-manager's,
//! kube-scheduler's, and every component's that uses the default strategy. Under `--mode auto`
//! Conclave leaves those Leases to it while it runs, so pod liveness, Conclave's calmer elections
//! and its hand-offs never applied to them in a real cluster.
//!
//! The take-over makes the active Conclave replica the holder of that Lease: every
//! kube-apiserver then stays a follower of it (a client-go elector never overwrites a Lease whose
//! holder renews it), and Conclave elects those Leases. Never two controllers electing one
//! Lease:
//! - **Taking it from a kube-apiserver** (any holder that is not this installation): the active
//!   replica writes itself as holder with the resourceVersion it read. The kube-apiserver that
//!   led sees its next renewal fail and stops its controller once its renew deadline has passed
//!   and its release attempt returned (client-go cancels the controller's context only after
//!   `release()`, which may take another renew deadline). Each of the retry period, the renew
//!   deadline and the release's timeout is shorter than the lease duration (client-go refuses
//!   other timers), so Conclave elects those Leases only [`WAIT_DURATIONS`] lease durations of
//!   the replaced holder after its write.
//! - **Taking it from an earlier active replica of this installation** (identity
//!   `conclave/<controller namespace>/...`): that replica's work ended before this one's term
//!   began (the controller's own Lease), so this one elects at once. So it does when the Lease
//!   is missing or released (no holder): no kube-apiserver leads, as `--mode auto` has always
//!   read it (on `conclave emulator`, which runs no built-in controller, the Lease is missing).
//!   Not covered: a Lease deleted by hand while a kube-apiserver leads; that apiserver's
//!   controller may run on until its renew deadline and release, as without the take-over.
//! - **Holding it**: renewed every retry period with the controller's own Lease timers; a
//!   renewal that fails until the renew deadline, or a Lease found with another holder (a
//!   kube-apiserver's release racing its shutdown can blank it), ends the take-over at once:
//!   the Leases are left to the built-in controller again, and the take-over starts over.
//! - **Giving it back**: when this replica stops leading it stops renewing, without releasing,
//!   so that the next active replica takes it over at once: the Lease is written with
//!   [`HOLD_DURATIONS`] of the controller's own lease durations, so that it is still this
//!   installation's when the next replica becomes active. When none comes (`helm uninstall`,
//!   every replica gone) the Lease expires and a kube-apiserver takes it: within its duration
//!   (30 s with the defaults) plus two of the apiservers' retry periods (each 2 to 4.4 s),
//!   measured from the last renewal. `--take-over=false` gives it back the same way.
//!
//! While this replica holds the Lease no kube-apiserver runs the built-in LeaseCandidate garbage
//! collector either: Conclave's own (`--candidate-gc-after`) covers every candidate it elects for.

use crate::events::{EventReason, Events};
use crate::key::LeaseKey;
use crate::leadership::Leadership;
use crate::own_leases::BUILTIN_LEASE;
use crate::sync::lock;
use conclave_core::k8s::{lease_record, micro_time, now};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::ObjectMeta;
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How many lease durations of a replaced kube-apiserver holder Conclave waits, from its own
/// write, before it elects the built-in's Leases: the apiserver's next renewal attempt (within a
/// retry period), its renew deadline, then its release attempt (bounded by the renew deadline)
/// each take less than one.
pub const WAIT_DURATIONS: u32 = 3;

/// How many of the controller's own lease durations the built-in's Lease is written with. After
/// a fail-over between replicas (the active one killed, cut off or frozen), the next replica
/// becomes active at most one own lease duration plus a retry period after the last renewal: a
/// take-over Lease of the same duration would expire about then, a kube-apiserver polling it
/// would take it first about half the time, and the new active replica would then wait
/// [`WAIT_DURATIONS`] of the apiserver's durations (30 s with the node's timers) with nobody
/// electing; a node soak with controller kills and cut-offs saw every Lease without a holder for
/// minutes when such fail-overs came in a row. Written twice as long, it is still this
/// installation's when the next replica looks, and that replica elects at once. The cost: when
/// every replica is gone, the built-in controller resumes after this longer duration.
pub const HOLD_DURATIONS: u32 = 2;

/// The lease duration assumed for a replaced holder whose Lease does not say (kube-apiserver's
/// default, `--coordinated-leadership-lease-duration`).
pub const DEFAULT_BUILTIN_DURATION: Duration = Duration::from_secs(15);

/// The prefix of the identities this installation writes into the built-in's Lease.
#[must_use]
pub fn identity_prefix(controller_namespace: &str) -> String {
    format!("conclave/{controller_namespace}/")
}

/// Whether `holder` of the built-in's Lease is a Conclave replica (of any installation): then
/// kube-apiserver's built-in controller is not the one electing.
#[must_use]
pub fn is_conclave(holder: &str) -> bool {
    holder.starts_with("conclave/")
}

/// Where the take-over stands on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not attempted: this replica does not lead, or the take-over is off.
    Idle,
    /// This replica holds the built-in's Lease and waits for the kube-apiserver it replaced to
    /// have stopped; the built-in controller may still elect.
    Waiting {
        /// When this replica may elect.
        until: Instant,
    },
    /// This replica elects the built-in's Leases, until the renew deadline of its last renewal.
    Elects {
        /// The renew deadline of the last successful renewal.
        until: Instant,
    },
    /// The API server refuses this replica the built-in's Lease (RBAC): `--mode auto` looks at
    /// whether the built-in controller is active instead.
    Refused,
}

/// The take-over's state, shared by the task that holds the Lease and the steps that ask whether
/// they may elect an `OldestEmulationVersion` Lease.
pub struct TakeOver {
    standing: Mutex<Standing>,
    /// `conclave_builtin_taken_over`: 1 while this replica elects the built-in's Leases.
    gauge: Gauge,
}

impl TakeOver {
    /// A take-over not yet attempted, reporting on `gauge`.
    #[must_use]
    pub fn new(gauge: Gauge) -> Self {
        Self {
            standing: Mutex::new(Standing::Idle),
            gauge,
        }
    }

    /// Where it stands now.
    #[must_use]
    pub fn standing(&self) -> Standing {
        *lock(&self.standing)
    }

    /// Whether this replica may elect the built-in controller's Leases now.
    #[must_use]
    pub fn elects(&self) -> bool {
        matches!(self.standing(), Standing::Elects { until } if until > Instant::now())
    }

    /// Whether the built-in controller may be electing, as far as the take-over knows: `None`
    /// when the take-over has no say (refused by RBAC), and the built-in's own Lease tells.
    #[must_use]
    pub fn builtin_may_elect(&self) -> Option<bool> {
        match self.standing() {
            Standing::Refused => None,
            Standing::Elects { until } if until > Instant::now() => Some(false),
            Standing::Idle | Standing::Waiting { .. } | Standing::Elects { .. } => Some(true),
        }
    }

    fn set(&self, standing: Standing) {
        *lock(&self.standing) = standing;
        self.gauge
            .set(i64::from(matches!(standing, Standing::Elects { .. })));
    }
}

/// What the take-over loop needs.
pub struct Holder<'a> {
    /// The API.
    pub client: &'a Client,
    /// The take-over's shared state.
    pub takeover: &'a TakeOver,
    /// This replica's leadership: every write checks it.
    pub leadership: &'a Leadership,
    /// Events about the built-in's Lease.
    pub events: &'a Events,
    /// This replica's identity in the built-in's Lease.
    pub identity: String,
    /// The prefix of this installation's identities.
    pub prefix: String,
    /// `leaseDurationSeconds` written.
    pub lease_duration: Duration,
    /// How long renewals may fail before the take-over ends.
    pub renew_deadline: Duration,
    /// How often it renews.
    pub retry_period: Duration,
    /// How long one API call may take.
    pub api_timeout: Duration,
    /// Called when the take-over starts or stops electing: the Leases it decides are looked at
    /// again.
    pub changed: &'a (dyn Fn() + Sync),
}

impl Holder<'_> {
    /// Takes the built-in's Lease and holds it until `term` is cancelled (this replica stops
    /// leading); then stops renewing, without releasing (see the module docs).
    pub async fn run(&self, term: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), BUILTIN_LEASE.0);
        let mut renewed_at: Option<Instant> = None;
        let mut elected = false;
        loop {
            if let Err(error) = self.round(&api, &mut renewed_at).await {
                tracing::warn!(%error, "taking over from kube-apiserver's built-in election controller");
            }
            if elected != self.takeover.elects() {
                elected = !elected;
                (self.changed)();
            }
            let wait = match self.takeover.standing() {
                Standing::Refused => self.retry_period * 15,
                _ => self.retry_period,
            };
            tokio::select! {
                () = term.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        let was_electing = self.takeover.elects();
        self.takeover.set(Standing::Idle);
        if was_electing {
            (self.changed)();
        }
    }

    /// One round: read the Lease; take it, or renew it; move the standing.
    async fn round(
        &self,
        api: &Api<Lease>,
        renewed_at: &mut Option<Instant>,
    ) -> Result<(), kube::Error> {
        let read = tokio::time::timeout(self.api_timeout, api.get_opt(BUILTIN_LEASE.1)).await;
        let current = match read {
            Ok(Ok(current)) => current,
            Ok(Err(error)) => return Err(self.failed(error, renewed_at)),
            Err(_) => {
                self.lapse(renewed_at);
                return Ok(());
            }
        };
        let record = current.as_ref().map(lease_record);
        let holder = record.as_ref().and_then(|r| r.holder()).map(str::to_owned);
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if !ours && matches!(self.takeover.standing(), Standing::Waiting { .. }) {
            // Taken from under this replica before it elected anything: start over.
            self.takeover.set(Standing::Idle);
            *renewed_at = None;
        }
        if !ours && matches!(self.takeover.standing(), Standing::Elects { .. }) {
            tracing::warn!(
                holder = holder.as_deref().unwrap_or(""),
                "the built-in election controller's Lease has another holder; its Leases are left to it until this replica takes it again"
            );
            self.events.publish(
                current.as_ref(),
                &LeaseKey::new(BUILTIN_LEASE.0, BUILTIN_LEASE.1),
                EventReason::BuiltinTakeOverLost,
                format!(
                    "{} found {} holding this Lease; OldestEmulationVersion Leases are left to \
                     kube-apiserver's built-in controller until Conclave takes it again",
                    self.identity,
                    holder.as_deref().unwrap_or("nobody")
                ),
            );
            self.takeover.set(Standing::Idle);
            *renewed_at = None;
        }
        // The replaced holder may still elect until then; this installation's own earlier
        // replicas stopped before this term began. A Lease missing or released says no
        // kube-apiserver leads (what `--mode auto` has always taken it to mean).
        let replaced_may_run = match holder.as_deref() {
            None => Duration::ZERO,
            Some(h) if ours || h.starts_with(&self.prefix) => Duration::ZERO,
            Some(_) => {
                let duration = record
                    .as_ref()
                    .and_then(|r| r.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .filter(|s| *s > 0)
                    .map_or(DEFAULT_BUILTIN_DURATION, Duration::from_secs);
                duration * WAIT_DURATIONS
            }
        };
        if !self.leadership.is_leading() {
            return Ok(());
        }
        let sent = Instant::now();
        let at = now();
        let params = crate::writer::post_params();
        let lease = match current {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if !ours {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(micro_time(at));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    spec.preferred_holder = None;
                }
                spec.renew_time = Some(micro_time(at));
                spec.lease_duration_seconds =
                    Some(i32::try_from(self.lease_duration.as_secs()).unwrap_or(15));
                let write = api.replace(BUILTIN_LEASE.1, &params, &lease);
                tokio::time::timeout(self.api_timeout, write).await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(BUILTIN_LEASE.1.into()),
                        namespace: Some(BUILTIN_LEASE.0.into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        acquire_time: Some(micro_time(at)),
                        renew_time: Some(micro_time(at)),
                        lease_duration_seconds: Some(
                            i32::try_from(self.lease_duration.as_secs()).unwrap_or(15),
                        ),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                let write = api.create(&params, &lease);
                tokio::time::timeout(self.api_timeout, write).await
            }
        };
        match lease {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return Err(self.failed(error, renewed_at)),
            Err(_) => {
                self.lapse(renewed_at);
                return Ok(());
            }
        }
        *renewed_at = Some(sent);
        let deadline = sent + self.renew_deadline;
        match self.takeover.standing() {
            Standing::Elects { .. } => self.takeover.set(Standing::Elects { until: deadline }),
            Standing::Waiting { until } if until <= Instant::now() => {
                self.start_electing(deadline);
            }
            Standing::Waiting { .. } => {}
            Standing::Idle | Standing::Refused => {
                let until = sent + replaced_may_run;
                if holder.is_some() && !ours && !replaced_may_run.is_zero() {
                    tracing::info!(replaced = holder.as_deref().unwrap_or(""), wait = ?replaced_may_run, "took the built-in election controller's Lease; electing its Leases once the kube-apiserver that held it has stopped");
                }
                if until <= Instant::now() {
                    self.start_electing(deadline);
                } else {
                    self.takeover.set(Standing::Waiting { until });
                }
            }
        }
        Ok(())
    }

    fn start_electing(&self, until: Instant) {
        tracing::info!(identity = %self.identity, "holding the built-in election controller's Lease: Conclave elects the OldestEmulationVersion Leases");
        self.takeover.set(Standing::Elects { until });
        self.events.publish(
            None,
            &LeaseKey::new(BUILTIN_LEASE.0, BUILTIN_LEASE.1),
            EventReason::BuiltinTakenOver,
            format!(
                "{} holds this Lease: kube-apiserver's built-in election controller stays a \
                 follower, and Conclave elects the OldestEmulationVersion Leases; it is handed \
                 back when Conclave stops (the Lease expires)",
                self.identity
            ),
        );
    }

    /// A write or read failed: a refusal by RBAC turns the take-over off for a while; anything
    /// else counts as a missed renewal.
    fn failed(&self, error: kube::Error, renewed_at: &mut Option<Instant>) -> kube::Error {
        if let kube::Error::Api(status) = &error
            && matches!(status.code, 401 | 403)
        {
            if self.takeover.standing() != Standing::Refused {
                tracing::warn!(%error, "the API server refuses this controller the built-in election controller's Lease (RBAC needs get, create and update on kube-system/leader-election-controller); OldestEmulationVersion Leases are left to the built-in controller while it is active");
            }
            self.takeover.set(Standing::Refused);
            *renewed_at = None;
        } else {
            self.lapse(renewed_at);
        }
        error
    }

    /// No renewal this round: past the renew deadline of the last one, the take-over ends.
    fn lapse(&self, renewed_at: &mut Option<Instant>) {
        let expired = renewed_at.is_none_or(|at| at + self.renew_deadline <= Instant::now());
        match self.takeover.standing() {
            Standing::Elects { .. } if expired => {
                tracing::warn!(
                    "renewing the built-in election controller's Lease failed until the renew deadline; its Leases are left to the built-in controller"
                );
                self.takeover.set(Standing::Idle);
                *renewed_at = None;
            }
            Standing::Waiting { .. } if expired => {
                self.takeover.set(Standing::Idle);
                *renewed_at = None;
            }
            _ => {}
        }
    }
}

/// This replica's identity in the built-in's Lease: the installation (the controller's
/// namespace) and the replica.
#[must_use]
pub fn identity(controller_namespace: &str, replica: &str) -> String {
    format!("{}{replica}", identity_prefix(controller_namespace))
}
