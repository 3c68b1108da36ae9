//! Real kube-scheduler and kube-controller-manager processes as coordinated-leader-election
//! candidates.
//!
//! Both register their LeaseCandidate in `kube-system` for a Lease named after the component
//! (`kube-scheduler`, `kube-controller-manager`; hard-coded upstream), named by the process's
//! leader-election identity `<hostname>_<uuid>`, which is unique per process. Tests that run them
//! therefore need a control plane of their own, or must be the only such test of their binary.
//!
//! The identity is not in the components' logs, so [`KubeComponent::wait_registered`] learns it as
//! the one LeaseCandidate of the component's Lease that appeared after the process started; start
//! the replicas of one kind one after the other for that to be unambiguous.
//!
//! When a coordinated client-go elector first renews the Lease the election controller assigned
//! it, it logs `"Successfully acquired lease" lock="kube-system/<component>"` (klog, `--v=2`):
//! [`KubeComponent::acquired_lease_at`] reads that line's timestamp, the moment the process itself
//! starts leading, as opposed to the moment a controller wrote its name into the Lease.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use crate::control_plane::free_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error};

/// Where both components keep their Lease and LeaseCandidates.
const NAMESPACE: &str = "kube-system";
/// The client-go message a coordinated elector logs once it leads (its first successful renewal
/// of a Lease naming it).
const ACQUIRED: &str = "Successfully acquired lease";
/// How often log files and the API are polled while waiting.
const POLL: Duration = Duration::from_millis(100);
/// client-go's `JitterFactor`: the renew deadline must exceed it times the retry period.
const JITTER_FACTOR: f64 = 1.2;

/// A control-plane component that takes part in coordinated leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentKind {
    /// kube-scheduler.
    Scheduler,
    /// kube-controller-manager.
    ControllerManager,
}

impl ComponentKind {
    /// The binary name, which is also the name of the Lease it leads in `kube-system`.
    pub fn binary(self) -> &'static str {
        match self {
            Self::Scheduler => "kube-scheduler",
            Self::ControllerManager => "kube-controller-manager",
        }
    }

    /// The user it authenticates as; the bootstrap RBAC policy grants each its Lease in
    /// `kube-system` and LeaseCandidates.
    fn user(self) -> &'static str {
        match self {
            Self::Scheduler => "system:kube-scheduler",
            Self::ControllerManager => "system:kube-controller-manager",
        }
    }
}

/// A running kube-scheduler or kube-controller-manager; killed on drop.
pub struct KubeComponent {
    kind: ComponentKind,
    process: ManagedProcess,
    emulated_version: Option<String>,
    identity: Option<String>,
}

impl ControlPlane {
    /// Starts a kube-scheduler as a coordinated candidate; see [`start_component`](Self::start_component).
    pub fn start_scheduler(&self, emulated_version: Option<&str>) -> Result<KubeComponent, Error> {
        self.start_component(ComponentKind::Scheduler, emulated_version)
    }

    /// Starts a kube-controller-manager as a coordinated candidate; see
    /// [`start_component`](Self::start_component).
    pub fn start_controller_manager(
        &self,
        emulated_version: Option<&str>,
    ) -> Result<KubeComponent, Error> {
        self.start_component(ComponentKind::ControllerManager, emulated_version)
    }

    /// Starts `kind` with `--leader-elect`, the `CoordinatedLeaderElection` gate and, if given,
    /// `--emulated-version=<major.minor>` (`"1.34"` to `"1.37"` for v1.37 binaries),
    /// authenticating with its own client certificate as its `system:` user, serving its health
    /// port on a free loopback port. Its leader-election timers are the components' defaults
    /// (15 s Lease, 10 s renew deadline, 2 s retry period).
    pub fn start_component(
        &self,
        kind: ComponentKind,
        emulated_version: Option<&str>,
    ) -> Result<KubeComponent, Error> {
        self.spawn_component(kind, emulated_version, Vec::new())
    }

    /// Like [`start_component`](Self::start_component), with the leader-election timers
    /// `--leader-elect-lease-duration`, `--leader-elect-renew-deadline` and
    /// `--leader-elect-retry-period` set, so that a test sees crash failovers in seconds rather
    /// than the default 15 s.
    ///
    /// The components refuse to start unless `lease_duration > renew_deadline > 1.2 *
    /// retry_period` (client-go's validation); this returns [`Error::InvalidArgument`] up front
    /// instead of a process that exits at once.
    pub fn start_component_with_timers(
        &self,
        kind: ComponentKind,
        emulated_version: Option<&str>,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<KubeComponent, Error> {
        if lease_duration <= renew_deadline
            || renew_deadline.as_secs_f64() <= JITTER_FACTOR * retry_period.as_secs_f64()
            || retry_period.is_zero()
        {
            return Err(Error::InvalidArgument(format!(
                "leader-election timers must satisfy lease duration ({lease_duration:?}) > renew \
                 deadline ({renew_deadline:?}) > {JITTER_FACTOR} x retry period ({retry_period:?}) > 0"
            )));
        }
        let timers = vec![
            format!(
                "--leader-elect-lease-duration={}ms",
                lease_duration.as_millis()
            ),
            format!(
                "--leader-elect-renew-deadline={}ms",
                renew_deadline.as_millis()
            ),
            format!("--leader-elect-retry-period={}ms", retry_period.as_millis()),
        ];
        self.spawn_component(kind, emulated_version, timers)
    }

    fn spawn_component(
        &self,
        kind: ComponentKind,
        emulated_version: Option<&str>,
        extra_args: Vec<String>,
    ) -> Result<KubeComponent, Error> {
        let n = self.next_id();
        let name = format!("{}-{n}", kind.binary());
        let kubeconfig = self.kubeconfig_for_user(kind.user(), None)?;
        let kubeconfig = kubeconfig.display();
        let mut args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=true".into(),
            "--feature-gates=CoordinatedLeaderElection=true".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            format!(
                "--cert-dir={}",
                self.dir().join(format!("{name}-certs")).display()
            ),
            "--v=2".into(),
        ];
        if let Some(version) = emulated_version {
            args.push(format!("--emulated-version={version}"));
        }
        args.extend(extra_args);
        let log = self.dir().join(format!("{name}.log"));
        let process =
            ManagedProcess::spawn(&name, &self.binaries().path(kind.binary()), &args, &log)?;
        self.register_log(&log);
        Ok(KubeComponent {
            kind,
            process,
            emulated_version: emulated_version.map(Into::into),
            identity: None,
        })
    }

    /// The names (leader-election identities) of the LeaseCandidates in `kube-system` for
    /// `kind`'s Lease, dead processes' included: take this before starting a replica and pass it
    /// to [`KubeComponent::wait_registered`].
    pub async fn component_candidates(&self, kind: ComponentKind) -> Result<Vec<String>, Error> {
        let candidates: Api<LeaseCandidate> = Api::namespaced(self.client().await?, NAMESPACE);
        // No field selector on spec.leaseName in v1.37.2: filter here.
        Ok(candidates
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|c| {
                c.spec
                    .as_ref()
                    .is_some_and(|s| s.lease_name == kind.binary())
            })
            .filter_map(|c| c.metadata.name)
            .collect())
    }

    /// The holder of `kind`'s Lease in `kube-system`: `None` while the Lease does not exist or
    /// names nobody (a released Lease names `""`).
    pub async fn component_lease_holder(
        &self,
        kind: ComponentKind,
    ) -> Result<Option<String>, Error> {
        let leases: Api<Lease> = Api::namespaced(self.client().await?, NAMESPACE);
        Ok(leases
            .get_opt(kind.binary())
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// Deletes `kind`'s Lease and every LeaseCandidate for it in `kube-system`, so the next
    /// replicas start an election from scratch instead of beside the LeaseCandidates that dead
    /// processes leave behind (nobody deletes those before candidate GC, 30 min later). Stop the
    /// processes first.
    pub async fn clear_component_election(&self, kind: ComponentKind) -> Result<(), Error> {
        let client = self.client().await?;
        let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NAMESPACE);
        for name in self.component_candidates(kind).await? {
            ignore_not_found(candidates.delete(&name, &DeleteParams::default()).await)?;
        }
        let leases: Api<Lease> = Api::namespaced(client, NAMESPACE);
        ignore_not_found(leases.delete(kind.binary(), &DeleteParams::default()).await)
    }
}

/// `Ok` for a successful or a NotFound delete.
fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl KubeComponent {
    /// Which component this is.
    pub fn kind(&self) -> ComponentKind {
        self.kind
    }

    /// The `--emulated-version` it was started with, if any.
    pub fn emulated_version(&self) -> Option<&str> {
        self.emulated_version.as_deref()
    }

    /// Its leader-election identity (the name of its LeaseCandidate and, while it leads, the
    /// Lease's holder), once [`wait_registered`](Self::wait_registered) has found it.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The last `max_bytes` of its log, for failure messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        self.process.log_tail(max_bytes)
    }

    /// The exit status once it has exited (both components exit when they lose their lease).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.process.exit_status()
    }

    /// Asks it to stop gracefully (SIGTERM). kube-scheduler releases its Lease first
    /// (`ReleaseOnCancel`); kube-controller-manager v1.37 only does with its alpha gate
    /// `ControllerManagerReleaseLeaderElectionLockOnExit`, which these processes do not enable,
    /// and otherwise dies as from SIGKILL.
    pub fn terminate(&mut self) {
        self.process.terminate();
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Waits until the LeaseCandidate this process registers appears: the one LeaseCandidate of
    /// its component's Lease not named in `before` (from
    /// [`ControlPlane::component_candidates`], taken before this process started). Records and
    /// returns its name, the process's identity.
    ///
    /// Fails if the process exits first, if no such candidate appears within `timeout`, or if two
    /// do (another replica of the same kind started meanwhile: start them one at a time).
    pub async fn wait_registered(
        &mut self,
        cp: &ControlPlane,
        before: &[String],
        timeout: Duration,
    ) -> Result<String, Error> {
        let before: HashSet<&str> = before.iter().map(String::as_str).collect();
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running("registering its LeaseCandidate")?;
            let new: Vec<String> = cp
                .component_candidates(self.kind)
                .await?
                .into_iter()
                .filter(|name| !before.contains(name.as_str()))
                .collect();
            match new.as_slice() {
                [identity] => {
                    self.identity = Some(identity.clone());
                    return Ok(identity.clone());
                }
                [] => {}
                several => {
                    return Err(Error::InvalidArgument(format!(
                        "{} new LeaseCandidates for {} ({several:?}) while waiting for {}'s: \
                         start replicas of one kind one at a time",
                        several.len(),
                        self.kind.binary(),
                        self.process.name()
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{} to register its LeaseCandidate", self.process.name()),
                    seconds: timeout.as_secs(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// When this process logged that it acquired its Lease (client-go's `"Successfully acquired
    /// lease"`), the first such line stamped at or after `since`; `None` if it has not (yet).
    ///
    /// The time is the klog header's (local time, microseconds, no year: the year is taken so
    /// that the stamp is not more than a day in the future). Both components log it once per
    /// process, since they exit when they stop leading.
    pub fn acquired_lease_at(
        &self,
        since: jiff::Timestamp,
    ) -> Result<Option<jiff::Timestamp>, Error> {
        let log = std::fs::read(self.log_path()).map_err(|source| Error::Io {
            context: format!("reading {}", self.log_path().display()),
            source,
        })?;
        let now = jiff::Timestamp::now();
        Ok(String::from_utf8_lossy(&log)
            .lines()
            .filter(|line| line.contains(ACQUIRED))
            .filter_map(|line| klog_time(line, now))
            .find(|at| *at >= since))
    }

    /// Waits until [`acquired_lease_at`](Self::acquired_lease_at)`(since)` finds the line;
    /// fails if the process exits first or after `timeout`.
    pub async fn wait_acquired_lease(
        &mut self,
        since: jiff::Timestamp,
        timeout: Duration,
    ) -> Result<jiff::Timestamp, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(at) = self.acquired_lease_at(since)? {
                return Ok(at);
            }
            self.check_running("acquiring its Lease")?;
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{} to log {ACQUIRED:?}", self.process.name()),
                    seconds: timeout.as_secs(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the process to exit (after [`terminate`](Self::terminate), or when it lost its
    /// Lease) and returns its status; fails after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{} to exit", self.process.name()),
                    seconds: timeout.as_secs(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Fails with the log tail if the process has exited, naming what it was expected to do.
    fn check_running(&mut self, doing: &str) -> Result<(), Error> {
        match self.exit_status() {
            None => Ok(()),
            Some(status) => Err(Error::Process {
                name: self.process.name().to_owned(),
                reason: format!("exited with {status} before {doing}"),
                log: self.log_path().to_owned(),
                tail: self.log_tail(4000),
            }),
        }
    }
}

/// The time in a klog text header, `Lmmdd hh:mm:ss.uuuuuu ...` (severity letter first), in the
/// system's time zone, in the year that puts it at most a day after `now`.
fn klog_time(line: &str, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
    let mut chars = line.chars();
    if !matches!(chars.next()?, 'I' | 'W' | 'E' | 'F') {
        return None;
    }
    let header = chars.as_str().get(..20)?;
    let month: i8 = header.get(0..2)?.parse().ok()?;
    let day: i8 = header.get(2..4)?.parse().ok()?;
    let time: jiff::civil::Time = header.get(5..20)?.parse().ok()?;
    let zone = jiff::tz::TimeZone::system();
    let year = now.to_zoned(zone.clone()).year();
    let at = |year: i16| -> Option<jiff::Timestamp> {
        let date = jiff::civil::Date::new(year, month, day).ok()?;
        Some(
            date.to_datetime(time)
                .to_zoned(zone.clone())
                .ok()?
                .timestamp(),
        )
    };
    let this_year = at(year)?;
    if this_year > now + jiff::SignedDuration::from_hours(24) {
        at(year - 1)
    } else {
        Some(this_year)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_klog_header_time() {
        let zone = jiff::tz::TimeZone::system();
        let now: jiff::Timestamp = jiff::civil::date(2026, 12, 1)
            .at(22, 0, 0, 0)
            .to_zoned(zone.clone())
            .unwrap()
            .timestamp();
        let line = r#"I1201 21:40:00.123456   12345 leaderelection.go:272] "Successfully acquired lease" lock="kube-system/kube-scheduler""#;
        let expected = jiff::civil::date(2026, 12, 1)
            .at(21, 40, 0, 123_456_000)
            .to_zoned(zone.clone())
            .unwrap()
            .timestamp();
        assert_eq!(klog_time(line, now), Some(expected));
        // A line from the last day of last year, read on New Year's Day.
        let new_year = jiff::civil::date(2027, 1, 1)
            .at(0, 0, 5, 0)
            .to_zoned(zone.clone())
            .unwrap()
            .timestamp();
        let late = jiff::civil::date(2026, 12, 31)
            .at(23, 59, 59, 0)
            .to_zoned(zone)
            .unwrap()
            .timestamp();
        assert_eq!(
            klog_time("E1231 23:59:59.000000 1 x.go:1] late", new_year),
            Some(late)
        );
        assert_eq!(klog_time("Flag --foo has been deprecated", now), None);
        assert_eq!(klog_time("", now), None);
    }
}
