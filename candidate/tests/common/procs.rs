//! Driving real processes for the randomized split-brain scenarios (tests/split_brain_processes.rs,
//! tests/soak.rs, benches/soak.rs): `conclave candidate` processes whose whole output (stdout's
//! JSON transition lines and stderr's log lines, in the order written) goes to one file per
//! process, `conclave run` replicas, API faults of either server, and a seeded dice.
//!
//! Every process is killed and reaped when its handle is dropped, so a panicking test or bench
//! leaves nothing running. A SIGKILL appends `{"event":"killed","monotonic_ns":…}` to the
//! process's output once it is reaped: the end of a leadership interval the process itself could
//! not print, for [`super::checker`], which reads only these files.

use super::kubelet::PodEnv;
use super::{Backend, Server};
use conclave_emulator::{Failure, Verb};
use conclave_testkit::checker::monotonic_ns;
use conclave_testkit::{CutProxy, StallTarget};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Timers of every `conclave candidate` process: short, so terms turn over quickly, and long
/// enough for a loaded 2-core machine (the candidate must renew within 2 s).
const CANDIDATE_TIMERS: [&str; 8] = [
    "--work",
    "20ms",
    "--lease-duration",
    "3s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "300ms",
];

/// xorshift64: the scenarios' dice. The seed is printed, so a run's sequence of choices can be
/// replayed (what they meet still depends on timing).
pub struct Dice(u64);

impl Dice {
    /// Dice from `seed` (0 is replaced, xorshift would stay at 0).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// A seed from the clock, for runs not given one.
    pub fn fresh_seed() -> u64 {
        jiff::Timestamp::now().as_nanosecond() as u64 | 1
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 { 0 } else { self.0 % n }
    }

    /// A duration in `from..from + spread` milliseconds.
    pub fn millis(&mut self, from: u64, spread: u64) -> Duration {
        Duration::from_millis(from + self.below(spread))
    }
}

/// A child process writing stdout and stderr to one file (appending, so lines from both keep
/// the order in which they were written). Killed and reaped on drop.
struct Process {
    child: Child,
    output: PathBuf,
}

impl Process {
    fn spawn(command: &mut Command, output: PathBuf) -> Self {
        let file = File::options()
            .create(true)
            .append(true)
            .open(&output)
            .unwrap_or_else(|e| panic!("open {}: {e}", output.display()));
        let child = command
            // The checker reads the candidate's `work stopped` info line; colours would hide it.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone output file"))
            .stderr(file)
            .spawn()
            .expect("conclave starts");
        Self { child, output }
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, without waiting.
    #[allow(unsafe_code)]
    fn terminate(&mut self) {
        if self.exited().is_some() {
            return;
        }
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped
        // child (checked just above), so it cannot name another process.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `conclave candidate` process on one Lease of a [`Server`].
pub struct CandidateProcess {
    lease: String,
    identity: String,
    emulation_minor: u64,
    process: Process,
    /// The proxy it reaches the API server through, when the soak may cut it off.
    proxy: Option<CutProxy>,
}

impl CandidateProcess {
    /// Starts `conclave candidate` for `lease` as `identity`, binary version 1.40.0 and emulation
    /// version `1.<emulation_minor>.0` (at most 40), with the strategy of [`super::STRATEGY`];
    /// its output goes to `<scratch>/<identity>.out`.
    pub fn spawn(
        binary: &Path,
        server: &Server,
        lease: &str,
        identity: &str,
        emulation_minor: u64,
    ) -> Self {
        Self::spawn_in(binary, server, lease, identity, emulation_minor, None)
    }

    /// [`Self::spawn`], in a simulated Pod when `pod` is given: with the downward API's variables,
    /// and started in the container's cgroup (the process writes its own pid into it, then
    /// `exec`s `conclave`, so its first read of `/proc/self/cgroup` names the container).
    pub fn spawn_in(
        binary: &Path,
        server: &Server,
        lease: &str,
        identity: &str,
        emulation_minor: u64,
        pod: Option<&PodEnv>,
    ) -> Self {
        let kubeconfig = server.kubeconfig().to_owned();
        Self::spawn_with(
            binary,
            server,
            &kubeconfig,
            lease,
            identity,
            emulation_minor,
            pod,
        )
    }

    /// [`Self::spawn_in`], reaching the emulator through a [`CutProxy`] of its own, so that
    /// [`Self::proxy`] can cut this one process off the API server while it runs on. On the real
    /// server, as [`Self::spawn_in`].
    pub async fn spawn_behind_proxy(
        binary: &Path,
        server: &Server,
        lease: &str,
        identity: &str,
        emulation_minor: u64,
        pod: Option<&PodEnv>,
    ) -> Self {
        let Backend::Emulator(emulator) = server.backend() else {
            return Self::spawn_in(binary, server, lease, identity, emulation_minor, pod);
        };
        let proxy = CutProxy::start(emulator.addr())
            .await
            .expect("a port for the proxy");
        let kubeconfig = server.scratch().join(format!("{identity}.kubeconfig"));
        let through_proxy = emulator
            .kubeconfig_yaml()
            .replace(&emulator.url(), &format!("http://{}", proxy.addr()));
        std::fs::write(&kubeconfig, through_proxy).expect("writing the process's kubeconfig");
        let mut candidate = Self::spawn_with(
            binary,
            server,
            &kubeconfig,
            lease,
            identity,
            emulation_minor,
            pod,
        );
        candidate.proxy = Some(proxy);
        candidate
    }

    /// The proxy it reaches the API server through ([`Self::spawn_behind_proxy`]).
    pub fn proxy(&self) -> Option<&CutProxy> {
        self.proxy.as_ref()
    }

    fn spawn_with(
        binary: &Path,
        server: &Server,
        kubeconfig: &Path,
        lease: &str,
        identity: &str,
        emulation_minor: u64,
        pod: Option<&PodEnv>,
    ) -> Self {
        let output = server.scratch().join(format!("{identity}.out"));
        let mut command = match pod.and_then(|pod| pod.cgroup_procs.as_ref()) {
            Some(procs) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", "echo $$ > \"$CGROUP_PROCS\" && exec \"$0\" \"$@\""])
                    .arg(binary)
                    .env("CGROUP_PROCS", procs);
                sh
            }
            None => Command::new(binary),
        };
        for (name, value) in pod.map(|pod| pod.vars.as_slice()).unwrap_or_default() {
            command.env(name, value);
        }
        let process = Process::spawn(
            command
                .args(["candidate", "--kubeconfig"])
                .arg(kubeconfig)
                .args(["--namespace", server.namespace()])
                .args(["--lease", lease, "--identity", identity])
                .args(["--binary-version", "1.40.0", "--emulation-version"])
                .arg(format!("1.{emulation_minor}.0"))
                .args(["--strategy", super::STRATEGY])
                .args(CANDIDATE_TIMERS),
            output,
        );
        Self {
            lease: lease.to_owned(),
            identity: identity.to_owned(),
            emulation_minor,
            process,
            proxy: None,
        }
    }

    /// Its Lease.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// Its identity (LeaseCandidate name and holderIdentity).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The minor of its emulation version (lower wins under OldestEmulationVersion).
    pub fn emulation_minor(&self) -> u64 {
        self.emulation_minor
    }

    /// The file holding its output.
    pub fn output(&self) -> &Path {
        &self.process.output
    }

    /// Whether it has printed a transition line: by then its SIGTERM handler is installed, so a
    /// SIGTERM makes it leave gracefully rather than die.
    pub fn started(&self) -> bool {
        std::fs::read_to_string(self.output()).is_ok_and(|text| text.contains("{\"event\":"))
    }

    /// SIGKILL; once it is reaped, notes the time in its output (it cannot act after it): on
    /// `CLOCK_MONOTONIC`, as the process stamped its own transitions, and on the wall clock for
    /// people reading the file. Returns the output file.
    pub fn kill(mut self) -> PathBuf {
        self.process.kill();
        let line = serde_json::json!({
            "event": "killed",
            "at": jiff::Timestamp::now().to_string(),
            "monotonic_ns": monotonic_ns(),
        });
        let mut file = File::options()
            .append(true)
            .open(self.output())
            .expect("open candidate output");
        writeln!(file, "{line}").expect("note the SIGKILL");
        self.process.output.clone()
    }

    /// Sends SIGTERM (it ends its term gracefully, releases, deletes its LeaseCandidate and
    /// exits); see [`Self::exited`]. A cut-off process is reconnected first, so that it can.
    pub fn terminate(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.heal();
        }
        self.process.terminate();
    }

    /// Its exit status once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.exited()
    }

    /// Waits until it has [started](Self::started), then [`Self::terminate`], then waits for a
    /// clean exit; panics if either takes longer than `patience`. Returns the output file.
    pub async fn stop(mut self, patience: Duration) -> PathBuf {
        let deadline = tokio::time::Instant::now() + patience;
        while !self.started() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} printed nothing",
                self.identity
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.terminate();
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not exit after SIGTERM",
                self.identity
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "{} exited with {status}", self.identity);
        self.process.output.clone()
    }
}

/// One `conclave run` replica electing every Lease (`--mode all`) in the server's namespace, its
/// own HA Lease `conclave-controller` there too, with short HA timers so that a crashed active
/// replica is replaced within seconds. Killed on drop. (On the real server the caller holds the
/// built-in election controller passive, as [`super::ConclaveRun`] does.)
pub struct ControllerReplica {
    identity: String,
    process: Process,
}

impl ControllerReplica {
    /// Starts replica `identity`, logging to `<scratch>/<identity>.log`.
    pub fn start(binary: &Path, server: &Server, identity: &str) -> Self {
        let output = server.scratch().join(format!("{identity}.log"));
        let process = Process::spawn(
            Command::new(binary)
                .args(["run", "--kubeconfig"])
                .arg(server.kubeconfig())
                .args(["--namespace", server.namespace()])
                .args(["--controller-namespace", server.namespace()])
                .args(["--identity", identity])
                .args(["--mode", "all", "--metrics-addr", "127.0.0.1:0"])
                .args(["--leader-lease-duration", "4s"])
                .args(["--leader-renew-deadline", "3s"])
                .args(["--leader-retry-period", "500ms"]),
            output,
        );
        Self {
            identity: identity.to_owned(),
            process,
        }
    }

    /// Its identity (holderIdentity of `conclave-controller` while it is active).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// SIGKILL: a crash, in whatever it was doing.
    pub fn kill(mut self) {
        self.process.kill();
    }
}

/// An API fault, by kind. The emulator's are requests failing or slowed ([`Failure`], latency),
/// watches ended and history forgotten; the real server's are stalls (SIGSTOP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Every request slowed by 50–350 ms until [`calm`].
    Latency,
    /// The next 1–3 Lease reads or updates answered 500.
    ServerError,
    /// The next 1–3 Lease updates answered 409 (a stale resourceVersion).
    Conflict,
    /// Every watch stream ended at once.
    DroppedWatches,
    /// The watch history forgotten (re-watches from an old resourceVersion get 410 Gone).
    ExpiredHistory,
    /// Requests hang for 0.5–2.5 s: on the emulator every request waits that long (latency); on
    /// the real server kube-apiserver or etcd is frozen (SIGSTOP, then SIGCONT).
    Stall,
    /// The Lease watches deliver nothing for 1–4 s while renewals and elections go on, then the
    /// history is forgotten and the streams end: every watcher resumes from a version older
    /// than the kept history, gets 410 Gone and relists (issue 47, finding 2's outage).
    WatchOutage,
}

impl Fault {
    /// The faults `server` can inject.
    pub fn kinds(server: &Server) -> &'static [Fault] {
        match server.backend() {
            Backend::Emulator(_) => &[
                Fault::Latency,
                Fault::ServerError,
                Fault::Conflict,
                Fault::DroppedWatches,
                Fault::ExpiredHistory,
                Fault::Stall,
                Fault::WatchOutage,
            ],
            Backend::Real(_) => &[Fault::Stall],
        }
    }

    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Fault::Latency => "latency",
            Fault::ServerError => "5xx",
            Fault::Conflict => "409",
            Fault::DroppedWatches => "dropped watches",
            Fault::ExpiredHistory => "expired history",
            Fault::Stall => "stall",
            Fault::WatchOutage => "watch outage ending in 410",
        }
    }

    /// Injects it (one of [`Self::kinds`]), with details from `dice`. Latency lasts until
    /// [`calm`]; a stall is over when this returns.
    pub async fn inject(self, server: &Server, dice: &mut Dice) {
        match (server.backend(), self) {
            (Backend::Emulator(emulator), fault) => {
                let faults = emulator.faults();
                match fault {
                    Fault::Latency => faults.set_latency(dice.millis(50, 300)),
                    Fault::ServerError => {
                        let verb = if dice.below(2) == 0 {
                            Verb::Update
                        } else {
                            Verb::Get
                        };
                        let count = 1 + dice.below(3) as usize;
                        faults.fail_next(verb, "leases", count, Failure::InternalError);
                    }
                    Fault::Conflict => {
                        let count = 1 + dice.below(3) as usize;
                        faults.fail_next(Verb::Update, "leases", count, Failure::Conflict);
                    }
                    Fault::DroppedWatches => faults.drop_watches(),
                    Fault::ExpiredHistory => faults.expire_history(),
                    Fault::Stall => {
                        let stall = dice.millis(500, 2000);
                        faults.set_latency(stall);
                        tokio::time::sleep(stall).await;
                        faults.set_latency(Duration::ZERO);
                    }
                    Fault::WatchOutage => {
                        faults.hold_watch_events("leases");
                        tokio::time::sleep(dice.millis(1000, 3000)).await;
                        faults.expire_history();
                        faults.drop_watches();
                        faults.release_watch_events("leases");
                    }
                }
            }
            (Backend::Real(plane), Fault::Stall) => {
                let target = if dice.below(2) == 0 {
                    StallTarget::ApiServer
                } else {
                    StallTarget::Etcd
                };
                plane
                    .stall(target, dice.millis(500, 2000))
                    .await
                    .expect("stall the control plane");
            }
            (Backend::Real(_), fault) => panic!("{fault:?} cannot be injected on kube-apiserver"),
        }
    }
}

/// Ends the emulator's lasting faults (pending errors, latency); nothing on the real server.
pub fn calm(server: &Server) {
    if let Backend::Emulator(emulator) = server.backend() {
        emulator.faults().clear();
    }
}
