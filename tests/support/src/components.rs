//! Real kube-scheduler and kube-controller-manager processes as coordinated-leader-election
//! candidates.
//!
//! Both register their LeaseCandidate in `kube-system` for a Lease named after the component
//! (`kube-scheduler`, `kube-controller-manager`; hard-coded upstream), named by the process's
//! leader-election identity `<hostname>_<uuid>`, which is unique per process. Tests that run them
//! therefore need a control plane of their own, or must be the only such test of their binary.

use std::path::Path;
use std::process::ExitStatus;

use crate::control_plane::free_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error};

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
    /// port on a free loopback port.
    pub fn start_component(
        &self,
        kind: ComponentKind,
        emulated_version: Option<&str>,
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
        let log = self.dir().join(format!("{name}.log"));
        let process =
            ManagedProcess::spawn(&name, &self.binaries().path(kind.binary()), &args, &log)?;
        self.register_log(&log);
        Ok(KubeComponent {
            kind,
            process,
            emulated_version: emulated_version.map(Into::into),
        })
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

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The exit status once it has exited (both components exit when they lose their lease).
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
