//! Hand-off and crash-failover times of conclave-candidate and of the crates.io peers
//! kube-lease-manager and kube-leader-election, in the same run on the same API server, with
//! equivalent settings: Lease duration 5 s; conclave renews every 1 s with a 3 s renew deadline;
//! kube-lease-manager renews 2 s before expiry (grace 2 s); kube-leader-election calls
//! `try_acquire_or_renew()` every 1 s (it has no other setting).
//!
//! conclave-candidate and kube-lease-manager run in this process, each instance on its own Tokio
//! runtime, so a crash (runtime shut down) stops all it does at once and releases nothing, like
//! kill -9. kube-leader-election 0.44 is built on kube 4, which the main workspace does not
//! carry, so its instances are processes of `kle-peer` (`tests/peers/kube-leader-election`, its
//! own workspace, built here with `cargo build --locked` into `target/peers`): the graceful stop
//! is SIGTERM (the peer calls `step_down()`), the crash is SIGKILL, and each event is timed when
//! its JSON line arrives through the peer's stdout pipe, so those rows include one pipe hop.
//! The in-process libraries share one kind of client, [`conclave_candidate::client`] (kube's
//! client with `TCP_NODELAY`); `kle-peer` uses kube 4's default client, as its documentation
//! shows.
//!
//! Scenarios:
//! - coordinated graceful: the (simulated) election controller writes `preferredHolder`; the
//!   leader drains and releases; the controller elects the other candidate as soon as it sees
//!   the release. Measured from the preferredHolder write to the release, and to the new leader
//!   leading. The bench's own watch of the Lease splits that time into shares: the write and its
//!   watch event; the leader (its watch, the drain, the release write); the controller (its watch
//!   and its write, from its watch cache as Conclave's controller writes); the new leader (its
//!   watch and its own first write).
//! - classic graceful: the leader shuts down gracefully (drain + release); measured from the
//!   shutdown request to the other instance leading.
//! - crash: the leader's runtime is killed (the peer process: SIGKILL); measured until the other
//!   instance leads.
//!
//! Run: `cargo bench -p conclave-candidate --bench handoff` (release; `--profile dev` builds
//! faster and hands off about three times slower). Environment:
//! `BENCH_SERVER` (`emulator` or `real`; default `real` when the control-plane binaries exist),
//! `HANDOFFS` (default 50), `PEER_HANDOFFS` (default 20), `CRASHES` (default 5), `BENCH_LIBS`
//! (comma-separated subset of `coordinated`, `classic`, `lease-manager`, `leader-election`),
//! `RUST_LOG` (the electors' logs on stderr, e.g. `conclave_candidate=info`).

use conclave_candidate::{CandidateConfig, Elector, LeaseConfig, Term, Transition};
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use conclave_testkit::{BuiltinControllerHold, ControlPlane};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "default";
const WAIT: Duration = Duration::from_secs(120);
const LEASE_SECONDS: u64 = 5;
/// kube-leader-election's `try_acquire_or_renew()` period: conclave's retry period.
const KLE_RETRY_MS: u64 = 1000;

enum Server {
    Emulator {
        emulator: RunningEmulator,
        /// Written for the `kle-peer` processes.
        kubeconfig: PathBuf,
    },
    Real {
        plane: Box<ControlPlane>,
        /// Keeps kube-apiserver's own election controller passive while the bench runs.
        _hold: BuiltinControllerHold,
    },
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Self::Emulator { .. } => "conclave emulator",
            Self::Real { .. } => "kube-apiserver v1.37.2 + etcd",
        }
    }

    async fn client(&self) -> Client {
        match self {
            Self::Emulator { emulator, .. } => {
                conclave_candidate::client(kube::Config::new(emulator.url().parse().unwrap()))
                    .unwrap()
            }
            Self::Real { plane, .. } => plane.client().await.unwrap(),
        }
    }

    /// A kubeconfig file for the peer processes.
    fn kubeconfig(&self) -> &Path {
        match self {
            Self::Emulator { kubeconfig, .. } => kubeconfig,
            Self::Real { plane, .. } => plane.kubeconfig_path(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Coordinated,
    Classic,
    LeaseManager,
    /// kube-leader-election, in `kle-peer` processes.
    LeaderElection,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Leading,
    Released,
    Following,
}

type Events = mpsc::UnboundedSender<(String, Ev, Instant)>;

/// One instance: in this process on its own runtime, or a peer process.
struct Participant {
    who: String,
    instance: Instance,
}

enum Instance {
    InProcess {
        runtime: tokio::runtime::Runtime,
        stop: CancellationToken,
        done: std::sync::mpsc::Receiver<()>,
    },
    Process(Child),
}

fn lease_config(lease: &str, who: &str) -> LeaseConfig {
    let mut config = LeaseConfig::new(NAMESPACE, lease, who);
    config.lease_duration = Duration::from_secs(LEASE_SECONDS);
    config.renew_deadline = Duration::from_secs(3);
    config.retry_period = Duration::from_secs(1);
    config
}

impl Participant {
    fn start(kind: Kind, server: Arc<Server>, lease: &str, who: &str, events: Events) -> Self {
        if kind == Kind::LeaderElection {
            return Self::start_peer(&server, lease, who, events);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stop = CancellationToken::new();
        let (done_tx, done) = std::sync::mpsc::channel();
        let (token, lease, name) = (stop.clone(), lease.to_owned(), who.to_owned());
        runtime.spawn(async move {
            let client = server.client().await;
            match kind {
                Kind::Coordinated | Kind::Classic => {
                    let config = lease_config(&lease, &name);
                    let elector = if kind == Kind::Coordinated {
                        let candidate =
                            CandidateConfig::new("1.33.0", "1.33.0", "OldestEmulationVersion");
                        Elector::coordinated(client, config, candidate).unwrap()
                    } else {
                        Elector::classic(client, config).unwrap()
                    };
                    let mut transitions = elector.handle().transitions();
                    let (events, who) = (events.clone(), name.clone());
                    let forwarder = tokio::spawn(async move {
                        while let Ok(t) = transitions.recv().await {
                            let ev = match t {
                                Transition::Leading { .. } => Ev::Leading,
                                Transition::Released { .. } => Ev::Released,
                                _ => continue,
                            };
                            let _ = events.send((who.clone(), ev, Instant::now()));
                        }
                    });
                    let lead = |term: Term| async move {
                        let worker = term.clone();
                        term.spawn(async move { worker.cancelled().await });
                    };
                    elector.run(lead, token).await.unwrap();
                    // The last transitions (`Released` at a shutdown) may still be on their way
                    // to the bench: the runtime ends once this task reports done.
                    let _ = tokio::time::timeout(Duration::from_secs(1), forwarder).await;
                }
                Kind::LeaderElection => unreachable!("runs as a process"),
                Kind::LeaseManager => {
                    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, &lease)
                        .with_namespace(NAMESPACE)
                        .with_identity(&name)
                        .with_duration(LEASE_SECONDS)
                        .with_grace(2)
                        .build()
                        .await
                        .unwrap();
                    let (mut state, task) = manager.watch().await;
                    loop {
                        tokio::select! {
                            () = token.cancelled() => break,
                            changed = state.changed() => {
                                if changed.is_err() {
                                    break;
                                }
                                if *state.borrow_and_update() {
                                    let _ = events.send((name.clone(), Ev::Leading, Instant::now()));
                                }
                            }
                        }
                    }
                    let was_leader = *state.borrow();
                    // Closing the channel makes the manager release the Lease and return.
                    drop(state);
                    let _ = task.await;
                    if was_leader {
                        let _ = events.send((name.clone(), Ev::Released, Instant::now()));
                    }
                }
            }
            let _ = done_tx.send(());
        });
        Self {
            who: who.to_owned(),
            instance: Instance::InProcess {
                runtime,
                stop,
                done,
            },
        }
    }

    /// A `kle-peer` process; its stdout lines become events, timed on arrival.
    fn start_peer(server: &Server, lease: &str, who: &str, events: Events) -> Self {
        let mut child = Command::new(peer_binary())
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .args([
                "--namespace",
                NAMESPACE,
                "--lease",
                lease,
                "--identity",
                who,
            ])
            .arg(format!("--lease-duration-seconds={LEASE_SECONDS}"))
            .arg(format!("--retry-period-ms={KLE_RETRY_MS}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting kle-peer");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let name = who.to_owned();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                let line: serde_json::Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("kle-peer {name} printed {line:?}: {e}"));
                let ev = match line["event"].as_str() {
                    Some("leading") => Ev::Leading,
                    Some("released") => Ev::Released,
                    Some("following") => Ev::Following,
                    _ => continue,
                };
                let _ = events.send((name.clone(), ev, at));
            }
        });
        Self {
            who: who.to_owned(),
            instance: Instance::Process(child),
        }
    }

    /// Graceful stop (the peer process: SIGTERM); returns when the instance has finished
    /// (released).
    async fn stop(self) {
        match self.instance {
            Instance::InProcess {
                runtime,
                stop,
                done,
            } => {
                stop.cancel();
                tokio::task::spawn_blocking(move || {
                    done.recv_timeout(WAIT).expect("participant stops");
                    runtime.shutdown_timeout(Duration::from_secs(10))
                })
                .await
                .unwrap();
            }
            Instance::Process(mut child) => {
                terminate(&child);
                let status = tokio::time::timeout(WAIT, child.wait())
                    .await
                    .expect("kle-peer stops after SIGTERM")
                    .unwrap();
                assert!(
                    status.success(),
                    "kle-peer {} exited with {status}",
                    self.who
                );
            }
        }
    }

    /// kill -9.
    async fn crash(self) {
        match self.instance {
            Instance::InProcess { runtime, .. } => {
                tokio::task::spawn_blocking(move || {
                    runtime.shutdown_timeout(Duration::from_secs(10))
                })
                .await
                .unwrap();
            }
            Instance::Process(mut child) => {
                child.kill().await.unwrap();
            }
        }
    }
}

/// Sends SIGTERM to a running child process.
#[allow(unsafe_code)]
fn terminate(child: &Child) {
    let pid = child.id().expect("kle-peer still running") as libc::pid_t;
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child, so
    // it cannot have been recycled for another process.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0, "SIGTERM to kle-peer {pid}");
}

/// The `kle-peer` crate: its own workspace, built on kube 4.
fn peer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/kube-leader-election")
}

/// Where [`build_peer`] puts the binary: the main target dir's `peers/` (the peer crate's own
/// `.cargo/config.toml` names the same directory).
fn peer_binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers/debug/kle-peer")
}

/// Builds `kle-peer` (quick when it is up to date; a cold build compiles a second kube stack).
fn build_peer() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building kle-peer in {}", peer_dir().display());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--locked"])
        .current_dir(peer_dir())
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers"),
        );
    // What cargo set for this bench describes this package, not the peer; build scripts that
    // watch such variables (ring watches CARGO_MANIFEST_DIR) would otherwise rebuild each time
    // a plain `cargo build` in the peer directory ran in between.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || name == "CARGO_TARGET_TMPDIR"
        {
            command.env_remove(&*name);
        }
    }
    let status = command.status().expect("running cargo build for kle-peer");
    assert!(status.success(), "building kle-peer failed: {status}");
}

/// Receives participant events, keeping the ones not asked for yet.
struct Inbox {
    rx: mpsc::UnboundedReceiver<(String, Ev, Instant)>,
    buffer: Vec<(String, Ev, Instant)>,
}

impl Inbox {
    async fn wait(&mut self, who: &str, ev: Ev, after: Instant) -> Instant {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(i) = self
                .buffer
                .iter()
                .position(|(w, e, at)| w == who && *e == ev && *at >= after)
            {
                return self.buffer.remove(i).2;
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(event)) => self.buffer.push(event),
                _ => panic!("timed out waiting for {who} {ev:?}"),
            }
        }
    }

    fn clear(&mut self) {
        while self.rx.try_recv().is_ok() {}
        self.buffer.clear();
    }
}

/// The simulated election controller: elects `target` into a missing, released or expired
/// Lease (as kube-apiserver's and Conclave's controllers do), reacting to watch events. Like
/// Conclave's controller it writes from its watch cache (the Lease as last delivered), with the
/// resourceVersion as the precondition: a conflict waits for the watch's newer version.
fn controller(client: Client, lease: String, target: Arc<Mutex<String>>, stop: CancellationToken) {
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, NAMESPACE);
        let config = watcher::Config::default().fields(&format!("metadata.name={lease}"));
        let mut events = watcher(api.clone(), config).default_backoff().boxed();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut cached: Option<Lease> = None;
        let mut synced = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                        cached = Some(lease);
                    }
                    Some(Ok(watcher::Event::Delete(_))) => cached = None,
                    Some(Ok(watcher::Event::Init)) => cached = None,
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Err(_)) | None => {}
                },
                _ = tick.tick() => {}
            }
            if !synced {
                continue;
            }
            let next = target.lock().unwrap().clone();
            let now = jiff::Timestamp::now();
            let elect = |mut lease: Lease| {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.holder_identity = Some(next.clone());
                spec.lease_duration_seconds = Some(5);
                spec.renew_time = Some(MicroTime(now));
                spec.acquire_time = None;
                spec.preferred_holder = None;
                spec.strategy = Some("OldestEmulationVersion".into());
                lease
            };
            match &cached {
                None => {
                    let new = elect(Lease {
                        metadata: ObjectMeta {
                            name: Some(lease.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    });
                    let _ = api.create(&PostParams::default(), &new).await;
                }
                Some(current) => {
                    let record = conclave_core::k8s::lease_record(current);
                    if record.is_free(conclave_core::k8s::timestamp(now)) {
                        let _ = api
                            .replace(&lease, &PostParams::default(), &elect(current.clone()))
                            .await;
                    }
                }
            }
        }
    });
}

/// What the bench's observer saw of the Lease, and when its watch delivered it.
struct Seen {
    holder: Option<String>,
    preferred: Option<String>,
    at: Instant,
}

/// Watches the Lease beside the participants and records when each version arrived, so a
/// coordinated hand-off splits into the leader's, the controller's and the new leader's shares.
fn observe(client: Client, lease: String, stop: CancellationToken) -> Arc<Mutex<Vec<Seen>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, NAMESPACE);
        let config = watcher::Config::default().fields(&format!("metadata.name={lease}"));
        let mut versions = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        loop {
            let lease = tokio::select! {
                () = stop.cancelled() => return,
                next = versions.next() => match next {
                    Some(Ok(lease)) => lease,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            let spec = lease.spec.unwrap_or_default();
            log.lock().unwrap().push(Seen {
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                preferred: spec.preferred_holder,
                at: Instant::now(),
            });
        }
    });
    seen
}

/// The first version the observer saw at or after `after` that satisfies `wanted`.
async fn seen_at(
    seen: &Mutex<Vec<Seen>>,
    after: Instant,
    wanted: impl Fn(&Seen) -> bool,
) -> Instant {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(version) = seen
            .lock()
            .unwrap()
            .iter()
            .find(|v| v.at >= after && wanted(v))
        {
            return version.at;
        }
        assert!(
            Instant::now() < deadline,
            "the observer saw no such version"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Writes `preferredHolder` (read, then replace with the resourceVersion precondition); returns
/// when the successful write was sent, and when its answer arrived.
async fn set_preferred(client: &Client, lease: &str, preferred: &str) -> (Instant, Instant) {
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    loop {
        let mut current = api.get(lease).await.unwrap();
        let spec = current.spec.get_or_insert_with(LeaseSpec::default);
        spec.preferred_holder = Some(preferred.into());
        let sent = Instant::now();
        match api.replace(lease, &PostParams::default(), &current).await {
            Ok(_) => return (sent, Instant::now()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn quantile(&self, q: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }
}

/// Where a coordinated hand-off's time goes, each share timed by the bench's own watch of the
/// Lease (it sees a version about when the participants' watches do).
#[derive(Default)]
struct Shares {
    /// The `preferredHolder` write: sent → answered.
    write: Samples,
    /// The `preferredHolder` write sent → its version delivered by a watch.
    watch: Samples,
    /// `preferredHolder` seen → the release seen: the leader's watch, its drain and its release
    /// write.
    leader: Samples,
    /// The release seen → the new holder seen: the controller's watch and its write.
    controller: Samples,
    /// The new holder seen → the new leader leading: its watch and its own first write.
    new_leader: Samples,
}

impl Shares {
    fn rows(self, library: &'static str) -> [Row; 5] {
        let row = |scenario, samples| Row {
            library,
            scenario,
            samples,
        };
        [
            row("share: preferredHolder write sent -> answered", self.write),
            row(
                "share: preferredHolder write sent -> seen on a watch",
                self.watch,
            ),
            row(
                "share: leader (seen preferredHolder -> release seen)",
                self.leader,
            ),
            row(
                "share: controller (release seen -> new holder seen)",
                self.controller,
            ),
            row(
                "share: new leader (new holder seen -> leading)",
                self.new_leader,
            ),
        ]
    }
}

struct Row {
    library: &'static str,
    scenario: &'static str,
    samples: Samples,
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Graceful hand-offs and crashes for one library, alternating between two instances.
async fn run_library(
    kind: Kind,
    server: Arc<Server>,
    handoffs: usize,
    crashes: usize,
    rows: &mut Vec<Row>,
) {
    let library = match kind {
        Kind::Coordinated => "conclave-candidate (coordinated)",
        Kind::Classic => "conclave-candidate (classic)",
        Kind::LeaseManager => "kube-lease-manager 0.13",
        Kind::LeaderElection => "kube-leader-election 0.44 (process, +pipe hop)",
    };
    let lease = format!("bench-{kind:?}").to_lowercase();
    let client = server.client().await;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut inbox = Inbox {
        rx,
        buffer: Vec::new(),
    };
    let mut generation = 0;
    let mut spawn = |prefix: &str| {
        generation += 1;
        Participant::start(
            kind,
            server.clone(),
            &lease,
            &format!("{prefix}-{generation}"),
            tx.clone(),
        )
    };
    let first = spawn("a");
    let target = Arc::new(Mutex::new(first.who.clone()));
    let controller_stop = CancellationToken::new();
    if kind == Kind::Coordinated {
        controller(
            client.clone(),
            lease.clone(),
            target.clone(),
            controller_stop.clone(),
        );
    }
    let start = Instant::now() - Duration::from_secs(1);
    inbox.wait(&first.who, Ev::Leading, start).await;
    let mut leader = first;
    let mut follower = spawn("b");
    // Let the follower settle (registered, watching; a peer process has started and polled).
    settle(&mut inbox, kind, &follower.who, start).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    inbox.clear();

    let mut released = Samples::default();
    let mut leading = Samples::default();
    let mut shares = Shares::default();
    // Only the coordinated hand-off is split into shares: the other libraries run without the
    // observer's watch.
    let seen = (kind == Kind::Coordinated)
        .then(|| observe(client.clone(), lease.clone(), controller_stop.clone()));
    for _ in 0..handoffs {
        *target.lock().unwrap() = follower.who.clone();
        if let Some(seen) = &seen {
            let (t0, answered) = set_preferred(&client, &lease, &follower.who).await;
            let released_at = inbox.wait(&leader.who, Ev::Released, t0).await;
            let leading_at = inbox.wait(&follower.who, Ev::Leading, t0).await;
            released.push(released_at - t0);
            leading.push(leading_at - t0);
            let next = follower.who.as_str();
            let preferred_seen = seen_at(seen, t0, |v| v.preferred.as_deref() == Some(next)).await;
            let release_seen = seen_at(seen, preferred_seen, |v| v.holder.is_none()).await;
            let holder_seen =
                seen_at(seen, release_seen, |v| v.holder.as_deref() == Some(next)).await;
            shares.write.push(answered - t0);
            shares.watch.push(preferred_seen - t0);
            shares.leader.push(release_seen - preferred_seen);
            shares.controller.push(holder_seen - release_seen);
            shares
                .new_leader
                .push(leading_at.saturating_duration_since(holder_seen));
            seen.lock().unwrap().clear();
            std::mem::swap(&mut leader, &mut follower);
        } else {
            let t0 = Instant::now();
            let old = std::mem::replace(&mut leader, follower);
            let who = old.who.clone();
            let stopping = tokio::spawn(old.stop());
            released.push(inbox.wait(&who, Ev::Released, t0).await - t0);
            leading.push(inbox.wait(&leader.who, Ev::Leading, t0).await - t0);
            stopping.await.unwrap();
            follower = spawn("r");
        }
        // Let the new follower settle before the next hand-off.
        settle(&mut inbox, kind, &follower.who, start).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        inbox.clear();
    }
    let graceful_release = if kind == Kind::Coordinated {
        "graceful: preferredHolder -> released"
    } else {
        "graceful: shutdown -> released"
    };
    let graceful_leading = if kind == Kind::Coordinated {
        "graceful: preferredHolder -> new leader"
    } else {
        "graceful: shutdown -> new leader"
    };
    rows.push(Row {
        library,
        scenario: graceful_release,
        samples: released,
    });
    rows.push(Row {
        library,
        scenario: graceful_leading,
        samples: leading,
    });
    if kind == Kind::Coordinated {
        rows.extend(shares.rows(library));
    }

    let mut failover = Samples::default();
    for _ in 0..crashes {
        *target.lock().unwrap() = follower.who.clone();
        let old = std::mem::replace(&mut leader, follower);
        let t0 = Instant::now();
        old.crash().await;
        failover.push(inbox.wait(&leader.who, Ev::Leading, t0).await - t0);
        follower = spawn("c");
        settle(&mut inbox, kind, &follower.who, start).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        inbox.clear();
    }
    rows.push(Row {
        library,
        scenario: "crash (kill) -> new leader",
        samples: failover,
    });
    leader.stop().await;
    follower.stop().await;
    controller_stop.cancel();
}

/// Waits until a peer process reports it follows (it has connected and seen the leader); the
/// in-process instances are ready as soon as they exist.
async fn settle(inbox: &mut Inbox, kind: Kind, who: &str, since: Instant) {
    if kind == Kind::LeaderElection {
        inbox.wait(who, Ev::Following, since).await;
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    // The electors' logs, when asked for (`RUST_LOG=conclave_candidate=info`), on stderr.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let handoffs = env_usize("HANDOFFS", 50);
    let peer_handoffs = env_usize("PEER_HANDOFFS", 20);
    let crashes = env_usize("CRASHES", 5);
    let only = std::env::var("BENCH_LIBS").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
    // Before the server starts, so a slow (cold) build does not age it.
    if wanted("leader-election") {
        build_peer();
    }
    let want_real = std::env::var("BENCH_SERVER").map_or(true, |s| s != "emulator");
    let plane = if want_real {
        ControlPlane::start().await.unwrap()
    } else {
        None
    };
    let server = match plane {
        Some(plane) => {
            // Keep kube-apiserver's own election controller passive: the bench elects.
            let hold = plane.hold_builtin_controller_lease().await.unwrap();
            Server::Real {
                plane: Box::new(plane),
                _hold: hold,
            }
        }
        None => {
            let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
            let kubeconfig =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("handoff-emulator.kubeconfig");
            emulator.write_kubeconfig(&kubeconfig).unwrap();
            Server::Emulator {
                emulator,
                kubeconfig,
            }
        }
    };
    let server = Arc::new(server);
    let mut rows = Vec::new();
    for (name, kind, n) in [
        ("coordinated", Kind::Coordinated, handoffs),
        ("classic", Kind::Classic, handoffs),
        ("lease-manager", Kind::LeaseManager, peer_handoffs),
        ("leader-election", Kind::LeaderElection, peer_handoffs),
    ] {
        if wanted(name) {
            run_library(kind, server.clone(), n, crashes, &mut rows).await;
        }
    }
    println!(
        "\nServer: {}; Lease duration {LEASE_SECONDS} s; conclave renew 1 s / deadline 3 s; \
         kube-lease-manager grace 2 s; kube-leader-election try_acquire_or_renew every {KLE_RETRY_MS} ms\n",
        server.name()
    );
    println!("| library | scenario | n | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            row.library,
            row.scenario,
            row.samples.0.len(),
            ms(row.samples.quantile(0.5)),
            ms(row.samples.quantile(0.99)),
            ms(row.samples.quantile(1.0)),
        );
    }
    if rows
        .iter()
        .any(|row| row.library.starts_with("kube-leader-election"))
    {
        println!(
            "\nkube-leader-election runs in kle-peer processes: SIGTERM/SIGKILL, and each event is \
             timed when its stdout line arrives (one pipe hop more than the in-process rows)."
        );
    }
}
