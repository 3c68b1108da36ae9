//! Stalling the control plane: an API fault on the real server.
//!
//! [`ControlPlane::freeze`] stops kube-apiserver and/or etcd with SIGSTOP: the kernel still
//! accepts connections and buffers requests, but nothing is answered and no watch event is sent
//! until the returned [`Stall`] is dropped, which sends SIGCONT. That is what a client sees from
//! an overloaded or paused control plane (a long GC pause, a VM migration, a saturated etcd):
//! requests hang rather than fail, so a leader's renewals miss their deadline.
//! [`ControlPlane::stall`] freezes for a given duration.
//!
//! SIGCONT is sent from `Drop`, so the control plane resumes however the stall ends: the duration
//! elapses, the future awaiting [`ControlPlane::stall`] is dropped (a timeout, a cancelled task, a
//! runtime shutting down), or the test panics and unwinds. If the test binary dies outright, the
//! processes die with it (see [`crate::process`]), so nothing stays frozen.
//!
//! A stall affects every test using the control plane; a test that stalls it should start its own
//! with [`ControlPlane::start`] rather than use [`ControlPlane::shared`].

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::process::ManagedProcess;
use crate::{ControlPlane, Error};

/// The control-plane process(es) a stall freezes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallTarget {
    /// kube-apiserver: no request is answered, watches go silent.
    ApiServer,
    /// etcd: kube-apiserver keeps running, but every request that needs storage (writes, and
    /// reads it cannot serve from its cache) waits.
    Etcd,
    /// kube-apiserver and etcd.
    Both,
}

impl StallTarget {
    fn apiserver(self) -> bool {
        matches!(self, Self::ApiServer | Self::Both)
    }

    fn etcd(self) -> bool {
        matches!(self, Self::Etcd | Self::Both)
    }
}

/// Control-plane processes frozen by [`ControlPlane::freeze`]. Dropping it resumes them
/// (SIGCONT), also when the test panics.
#[must_use = "the control plane resumes as soon as the Stall is dropped"]
pub struct Stall<'a> {
    plane: &'a ControlPlane,
    target: StallTarget,
}

impl ControlPlane {
    /// Freezes `target` with SIGSTOP until the returned [`Stall`] is dropped.
    ///
    /// Fails, leaving everything running, if a process to freeze has already exited.
    pub fn freeze(&self, target: StallTarget) -> Result<Stall<'_>, Error> {
        self.check_running()?;
        let stall = Stall {
            plane: self,
            target,
        };
        // The apiserver first, so it does not see a frozen etcd for a moment before it stops.
        if target.apiserver() {
            suspend(self.apiserver_process())?;
        }
        if target.etcd() {
            // On failure `stall` is dropped, which resumes the apiserver.
            suspend(self.etcd_process())?;
        }
        tracing::debug!(?target, "control plane frozen");
        Ok(stall)
    }

    /// Freezes `target` for `duration`, then resumes it. If this future is dropped before the
    /// duration has elapsed, the processes are resumed at once.
    pub async fn stall(&self, target: StallTarget, duration: Duration) -> Result<(), Error> {
        let stall = self.freeze(target)?;
        tokio::time::sleep(duration).await;
        drop(stall);
        Ok(())
    }
}

impl Drop for Stall<'_> {
    fn drop(&mut self) {
        // etcd first, so the apiserver resumes to a working storage.
        if self.target.etcd() {
            lock(self.plane.etcd_process()).resume();
        }
        if self.target.apiserver() {
            lock(self.plane.apiserver_process()).resume();
        }
        tracing::debug!(target = ?self.target, "control plane resumed");
    }
}

/// Locks a process handle; a lock poisoned by a panicking test still yields it, so a stall is
/// always ended.
fn lock(process: &Mutex<ManagedProcess>) -> MutexGuard<'_, ManagedProcess> {
    process
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn suspend(process: &Mutex<ManagedProcess>) -> Result<(), Error> {
    let mut process = lock(process);
    if process.suspend() {
        return Ok(());
    }
    Err(Error::Process {
        name: process.name().to_owned(),
        reason: "exited before it could be frozen".into(),
        log: process.log_path().to_owned(),
        tail: process.log_tail(4000),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;

    /// Whether `pid` is stopped by a signal (state `T` in /proc).
    fn is_stopped(pid: u32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // `pid (comm) S ...`: the state follows the last `)`; comm may contain anything.
        stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .starts_with('T')
    }

    /// Waits until `pid` is (or is no longer) stopped. Signals are delivered asynchronously, so
    /// the state can lag the `kill` a little.
    fn wait_stopped(pid: u32, stopped: bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while is_stopped(pid) != stopped {
            assert!(
                std::time::Instant::now() < deadline,
                "process {pid}: wanted stopped={stopped}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pids(cp: &ControlPlane) -> (u32, u32) {
        (
            lock(cp.apiserver_process()).pid(),
            lock(cp.etcd_process()).pid(),
        )
    }

    #[tokio::test]
    async fn a_frozen_control_plane_answers_nothing_and_always_resumes() {
        let Some(cp) = ControlPlane::start().await.expect("control plane") else {
            return;
        };
        let namespaces: Api<Namespace> = Api::all(cp.client().await.unwrap());
        let (apiserver, etcd) = pids(&cp);

        let stall = cp.freeze(StallTarget::ApiServer).unwrap();
        wait_stopped(apiserver, true);
        wait_stopped(etcd, false);
        let frozen = tokio::time::timeout(Duration::from_secs(2), namespaces.get("default")).await;
        assert!(frozen.is_err(), "a frozen apiserver answered: {frozen:?}");
        drop(stall);
        wait_stopped(apiserver, false);
        tokio::time::timeout(Duration::from_secs(60), namespaces.get("default"))
            .await
            .expect("the apiserver answers again")
            .unwrap();

        // A stall whose future is dropped early (here by a timeout) resumes at once.
        let cut_short = tokio::time::timeout(
            Duration::from_millis(500),
            cp.stall(StallTarget::Both, Duration::from_secs(3600)),
        )
        .await;
        assert!(cut_short.is_err());
        wait_stopped(apiserver, false);
        wait_stopped(etcd, false);

        // A test that panics while the control plane is frozen leaves it running.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _stall = cp.freeze(StallTarget::Etcd).unwrap();
            wait_stopped(etcd, true);
            panic!("deliberate panic while frozen");
        }));
        assert!(panicked.is_err());
        wait_stopped(etcd, false);
        tokio::time::timeout(Duration::from_secs(60), namespaces.get("default"))
            .await
            .expect("the apiserver answers after the panic")
            .unwrap();
        cp.check_running().unwrap();
    }
}
