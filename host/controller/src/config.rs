//! How the controller runs: [`ControllerConfig`], the settings `conclave run` takes from its flags.

use crate::takeover;
use conclave_core::plan::Mode;
use conclave_core::step::StepConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Namespaces to watch; empty means the whole cluster.
    pub namespaces: Vec<String>,
    /// Leases reconciled in parallel.
    pub workers: usize,
    /// A candidate is fresh if it renewed within this window; pings wait this long for an ack.
    pub ack_window: Duration,
    /// Candidates not renewed for this long take no part and are deleted.
    pub candidate_gc_after: Duration,
    /// `leaseDurationSeconds` written when Conclave assigns a holder.
    pub lease_duration_seconds: i32,
    /// Which Leases to handle.
    pub mode: Mode,
    /// This replica's identity (holder of its own Lease, reporting instance of Events).
    pub identity: String,
    /// Namespace of the controller's own Lease.
    pub controller_namespace: String,
    /// Timers of the controller's own Lease.
    pub own_lease_duration: Duration,
    /// How long the active replica keeps trying to renew before it steps down.
    pub own_renew_deadline: Duration,
    /// How often the active replica renews and followers retry.
    pub own_retry_period: Duration,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// How long any one API call of the controller may take (the watches excepted: they are
    /// long-running by design and restart on their own).
    pub api_timeout: Duration,
    /// What to do when the API answers about the controller's own Lease in a way only an
    /// operator can fix (its namespace does not exist, RBAC refuses): `true` ends
    /// [`run`](crate::run()) at once with [`Error::OwnLeaseBlocked`](crate::Error::OwnLeaseBlocked)
    /// (a process started by hand, whose user can fix the flag); `false` keeps trying, unready,
    /// with `/readyz` saying why (a pod, which the fix of a manifest reaches while it runs).
    pub fail_when_blocked: bool,
    /// How the first election of a Lease that does not exist waits for its batch of candidates.
    pub first_election_settle: conclave_core::step::Settle,
    /// Pod liveness ([`pods`](crate::pods)): watch the Pods candidates name, and elect the next
    /// candidate as soon as the kubelet reports that the holder's process stopped, instead of
    /// when its Lease expires. Needs `get`, `list` and `watch` on pods; without them it falls
    /// back to expiry.
    pub pod_liveness: bool,
    /// Take over from kube-apiserver's built-in election controller ([`takeover`]): the active
    /// replica holds that controller's Lease, and `--mode auto` elects its Leases too. Needs
    /// `get`, `create` and `update` on `kube-system/leader-election-controller`; without them
    /// the Leases are left to the built-in controller while it is active.
    pub take_over: bool,
    /// How long after its first list the controller counts a Lease it has not seen as possibly
    /// held (deleted while held just before this process started: nothing it saw tells when
    /// that holder renewed last), and so does not create it. `None`: the longer of
    /// `lease_duration_seconds` and kube-apiserver's default lease duration (15 s), the longest
    /// such a Lease could have had from Conclave or the built-in controller. Zero only where no
    /// Lease can have existed before (an emulator started with the controller).
    pub unseen_lease_hold: Option<Duration>,
}

impl ControllerConfig {
    /// [`ControllerConfig::unseen_lease_hold`] as it applies.
    #[must_use]
    pub fn unseen_lease_hold(&self) -> Duration {
        self.unseen_lease_hold.unwrap_or_else(|| {
            Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0))
                .max(takeover::DEFAULT_BUILTIN_DURATION)
        })
    }

    /// The settings an election step depends on.
    #[must_use]
    pub const fn step_config(&self) -> StepConfig {
        StepConfig {
            ack_window: self.ack_window,
            candidate_gc_after: self.candidate_gc_after,
            lease_duration_seconds: self.lease_duration_seconds,
            mode: self.mode,
            settle: self.first_election_settle,
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            workers: 16,
            ack_window: Duration::from_secs(5),
            candidate_gc_after: Duration::from_secs(30 * 60),
            lease_duration_seconds: 5,
            mode: Mode::Auto,
            identity: "conclave".into(),
            controller_namespace: "kube-system".into(),
            own_lease_duration: Duration::from_secs(15),
            own_renew_deadline: Duration::from_secs(10),
            own_retry_period: Duration::from_secs(2),
            metrics_addr: None,
            api_timeout: Duration::from_secs(10),
            fail_when_blocked: false,
            first_election_settle: conclave_core::step::Settle::DEFAULT,
            pod_liveness: true,
            take_over: true,
            unseen_lease_hold: None,
        }
    }
}
