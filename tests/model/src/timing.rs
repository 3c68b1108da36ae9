//! The timing assumptions of the safety argument, as code: the settings of the controller and of
//! the candidates, the bounds on clocks and on how fast actors act, and the checks that relate
//! them. Time is discrete, in whole seconds; every actor may act any number of times within one
//! second, in any order.

/// The settings and bounds a model run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The candidates' `lease_duration` (seconds), written as `leaseDurationSeconds` on renewal,
    /// and the controller's `--lease-duration-seconds`, written on a take-over.
    pub lease_duration: i16,
    /// The candidates' `renew_deadline`: a leader that has not renewed for this long stops leading.
    pub renew_deadline: i16,
    /// The candidates' `retry_period`: a leader renews this long after its last renewal.
    pub retry_period: i16,
    /// The elector's `drain_timeout`: how long a term's tasks get after cancellation before they
    /// are aborted.
    pub drain_timeout: i16,
    /// The elector's `ABORT_GRACE`: how long aborted tasks take to unwind, at most.
    pub abort_grace: i16,
    /// Assumption: a term's tasks stop at most this long after their token is cancelled (they
    /// yield to cancellation). Past it they are only stopped by the elector's abort.
    pub task_stop_within: i16,
    /// The controller's `--ack-window`.
    pub ack_window: i16,
    /// Assumption: each candidate's wall clock (which stamps `renewTime`) is at most this far from
    /// the controller's, in either direction. Monotonic clocks (renew deadline, drain) run at the
    /// true rate: a drift rate accumulates less than one second over a lease.
    pub max_clock_skew: i16,
}

impl Timing {
    /// The settings of the bounded check: short enough to keep the state space small, with the
    /// elector's ratios (renew deadline two thirds of the lease, retry a quarter).
    pub const BOUNDED: Self = Self {
        lease_duration: 3,
        renew_deadline: 2,
        retry_period: 1,
        drain_timeout: 2,
        abort_grace: 1,
        task_stop_within: 0,
        ack_window: 1,
        max_clock_skew: 0,
    };

    /// Whether the assumptions the safety argument needs hold, and which one fails if not.
    ///
    /// A leader renews at `t` and stops leading at `t + renew_deadline` at the latest, then its
    /// tasks stop within `task_stop_within`; the controller measures the expiry from when it saw
    /// the renewal (no earlier than `t`), or from `renewTime` (the holder's clock, at most
    /// `max_clock_skew` behind), and elects someone else only after `t + lease_duration -
    /// max_clock_skew` has passed. The work must have stopped by then.
    ///
    /// # Errors
    /// A sentence naming the broken assumption.
    pub fn check(&self) -> Result<(), String> {
        if self.retry_period <= 0 || self.retry_period >= self.renew_deadline {
            return Err("retry_period must be positive and shorter than renew_deadline".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err("renew_deadline must be shorter than lease_duration".into());
        }
        if self.renew_deadline + self.task_stop_within >= self.lease_duration - self.max_clock_skew
        {
            return Err(
                "a lost term's work must stop before anyone else can consider the Lease expired: \
                 renew_deadline + task_stop_within < lease_duration - max_clock_skew"
                    .into(),
            );
        }
        Ok(())
    }

    /// When a draining term's tasks have stopped at the latest, `stop_requested` seconds after
    /// the token was cancelled: within [`Timing::task_stop_within`], or when the elector's abort
    /// (at `abort_at`) has taken effect, `grace` later (the abort grace that abort was timed by:
    /// the stated assumption is that an aborted task unwinds within it).
    #[must_use]
    pub fn tasks_stopped_by(&self, stop_requested: i16, abort_at: i16, grace: i16) -> i16 {
        (stop_requested + self.task_stop_within).min(abort_at + grace)
    }
}

/// What a run explores: how many candidates, for how long, and which faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How many candidates (named `c0`, `c1`, …; `c0` ranks best).
    pub candidates: usize,
    /// Until when faults happen and actors may be slow (global stabilization time): from then on
    /// no crash happens, a watch delivers within the second, and every actor acts on what is due
    /// before time moves on.
    pub faults_until: i16,
    /// How many candidate crashes (each followed by a restart, possibly) a run may contain.
    pub max_crashes: u8,
    /// How many controller restarts (a relist that forgets every watched renewal) a run may
    /// contain; with two or more [`Bounds::replicas`], how many replica crashes (each possibly
    /// followed by a restart that relists).
    pub max_controller_restarts: u8,
    /// How many times a candidate's Lease writes may start failing for a while (its renewals do
    /// not get through, so its Lease expires while it lives).
    pub max_cut_offs: u8,
    /// Whether a cut-off heals (a lease duration plus 2 s after it began) or lasts for good (a
    /// holder that may answer pings but never write its Lease: RBAC, an admission policy).
    pub cut_off_heals: bool,
    /// Whether the controller runs with `--pod-liveness` (and a kubelet reports the candidates'
    /// containers): a holder the kubelet reports dead is pinged and, unanswered, replaced
    /// before its Lease expires.
    pub pod_liveness: bool,
    /// Whether a crashed candidate may start again (during faults).
    pub restarts: bool,
    /// How many LeaseCandidates of crashed candidates may be deleted (garbage collection, an
    /// operator) during faults; with any, the pings sent after faults stop to a candidate that
    /// does not answer are counted (kubernetes#138066, #138067/#138071). 0: neither.
    pub candidate_deletions: u8,
    /// How many times the Lease may be deleted (an operator, a namespace cleanup) during faults.
    pub lease_deletions: u8,
    /// With [`Bounds::pod_liveness`], how many times a candidate's Pod may be deleted during
    /// faults, with no word from the kubelet (a force delete, Pod GC of a deleted Node's Pods:
    /// its process may run on), and recreated under the same name with a new UID (a
    /// StatefulSet's way), in which a restart of the candidate then runs.
    pub pod_deletions: u8,
    /// How many controller replicas run (`r0`, `r1`, …). One: the lone controller always leads
    /// and has no Lease of its own (the checks before replicas were modelled). Two or more: each
    /// replica keeps its own watches and caches, contends for the controller's own Lease as
    /// `conclave-candidate`'s classic elector does, and writes only while its term lasts
    /// (`leadership.rs`), as the chart's two replicas do.
    pub replicas: usize,
}

impl Bounds {
    /// Two candidates, one crash, faults and delays for the first 3 seconds.
    pub const BOUNDED: Self = Self {
        candidates: 2,
        faults_until: 3,
        max_crashes: 1,
        max_controller_restarts: 0,
        max_cut_offs: 0,
        cut_off_heals: true,
        pod_liveness: false,
        restarts: true,
        candidate_deletions: 0,
        lease_deletions: 0,
        pod_deletions: 0,
        replicas: 1,
    };
}
