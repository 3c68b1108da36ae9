//! Real kube-scheduler processes as coordinated-leader-election candidates.
//!
//! kube-scheduler registers its LeaseCandidate in `kube-system` for Lease `kube-scheduler` (both
//! hard-coded upstream), named by its leader-election identity `<hostname>_<uuid>`, which is
//! unique per process. Tests that run schedulers therefore need a control plane of their own, or
//! must be the only scheduler test of their binary.

use std::path::Path;
use std::process::ExitStatus;

use crate::control_plane::free_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error};

/// The user kube-scheduler authenticates as; the bootstrap RBAC policy grants it Leases in
/// `kube-system` and LeaseCandidates.
const SCHEDULER_USER: &str = "system:kube-scheduler";

/// A running kube-scheduler; killed on drop.
pub struct KubeScheduler {
    process: ManagedProcess,
    emulated_version: Option<String>,
}

impl ControlPlane {
    /// Starts a kube-scheduler with `--leader-elect`, the `CoordinatedLeaderElection` gate and,
    /// if given, `--emulated-version=<major.minor>` (e.g. `"1.35"`), authenticating with its own
    /// client certificate as `system:kube-scheduler`.
    pub fn start_scheduler(&self, emulated_version: Option<&str>) -> Result<KubeScheduler, Error> {
        let n = self.next_id();
        let kubeconfig = self.kubeconfig_for_user(SCHEDULER_USER, None)?;
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
                self.dir()
                    .join(format!("kube-scheduler-{n}-certs"))
                    .display()
            ),
            "--v=2".into(),
        ];
        if let Some(version) = emulated_version {
            args.push(format!("--emulated-version={version}"));
        }
        let name = format!("kube-scheduler-{n}");
        let log = self.dir().join(format!("{name}.log"));
        let process =
            ManagedProcess::spawn(&name, &self.binaries().path("kube-scheduler"), &args, &log)?;
        self.register_log(&log);
        Ok(KubeScheduler {
            process,
            emulated_version: emulated_version.map(Into::into),
        })
    }
}

impl KubeScheduler {
    /// The `--emulated-version` it was started with, if any.
    pub fn emulated_version(&self) -> Option<&str> {
        self.emulated_version.as_deref()
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The exit status once it has exited (kube-scheduler exits when it loses its lease).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.process.exit_status()
    }

    /// Asks it to stop gracefully (SIGTERM).
    pub fn terminate(&mut self) {
        self.process.terminate();
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}
