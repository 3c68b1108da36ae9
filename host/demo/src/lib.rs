//! `conclave demo` as a library: the whole system in one call, with no cluster needed.
//!
//! [`run_demo`] starts the embedded API server (or uses a cluster the caller connected to), the
//! controller in-process, and a three-replica component simulated with `conclave-candidate`
//! (one coordinated elector per Lease per replica, each doing work while it leads). Then it runs
//! a rolling upgrade 1.36 → 1.37, binary versions first, then emulation versions, and shows live
//! who leads, who is preferred, the pings, and each hand-off with its latency. A second Lease
//! uses a plugin strategy (`conclave.dev/priority`, embedded in the binary, unless another is
//! built or given). It ends with a summary table, within [`DemoConfig::duration`].
//!
//! The `conclave` binary parses the flags into a [`DemoConfig`] and calls [`run_demo`]; the demo's
//! fallback plugin is embedded here (`build.rs`), so the binary carries it through this crate.
#![forbid(unsafe_code)]

pub mod journal;
mod observe;
mod plugins;
mod replica;

use conclave_controller::status::{LeaseStatus, PredictOptions};
use conclave_controller::{self as controller, ControllerConfig};
use conclave_core::election::{OldestEmulationRank, pick_oldest_emulation_version};
use conclave_core::plan::Mode;
use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use journal::{Events, Phase, Record, What};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use observe::Snapshot;
use replica::{Replica, Versions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The demo's Leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseId {
    /// `demo-component`, elected by the built-in `OldestEmulationVersion`.
    Main,
    /// `demo-plugin`, elected by a plugin strategy.
    Plugin,
}

impl LeaseId {
    /// The short name shown in the live lines.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Main => "component",
            Self::Plugin => "plugin",
        }
    }
}

/// A Lease of the demo and the strategy its candidates announce.
#[derive(Debug, Clone)]
pub struct DemoLease {
    /// Which one.
    pub id: LeaseId,
    /// Its name.
    pub name: String,
    /// The strategy its candidates announce.
    pub strategy: String,
}

/// Name of the Lease elected by the built-in strategy.
pub const MAIN_LEASE: &str = "demo-component";
/// Name of the Lease elected by a plugin strategy.
pub const PLUGIN_LEASE: &str = "demo-plugin";

/// Where the demo runs.
pub enum Target {
    /// The embedded API server, started by the demo and stopped at its end.
    Emulator,
    /// A cluster the caller connected to (it needs LeaseCandidates,
    /// coordination.k8s.io/v1beta1, and rights to create a namespace unless one is given).
    Cluster {
        /// The client.
        client: Client,
        /// How to name the cluster in the demo's header (e.g. its kubeconfig).
        description: String,
    },
}

/// How to run the demo (`conclave demo`'s flags).
pub struct DemoConfig {
    /// How long the whole demo may take, start-up and clean-up included; the upgrade's steps are
    /// spread over it.
    pub duration: Duration,
    /// Where to run.
    pub target: Target,
    /// Namespace to use. Default: `conclave-demo` on the emulator; on a cluster a fresh
    /// `conclave-demo-<random>`, deleted at the end (a given namespace is kept, only the demo's
    /// objects are deleted).
    pub namespace: Option<String>,
    /// Directory of strategy plugins for the controller (as `conclave run --plugins`); default:
    /// a plugin found in the plugin workspace's build output, else the one embedded for the demo.
    pub plugins: Option<PathBuf>,
    /// The plugin strategy of the second Lease; default: conclave.dev/priority if available,
    /// else another plugin strategy found.
    pub plugin_strategy: Option<String>,
    /// The controller's ack window (a candidate that renewed longer ago is pinged first).
    pub ack_window: Duration,
    /// Do not start a controller; rely on one already running in the cluster.
    pub no_controller: bool,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(30),
            target: Target::Emulator,
            namespace: None,
            plugins: None,
            plugin_strategy: None,
            ack_window: Duration::from_secs(2),
            no_controller: false,
        }
    }
}

/// Why the demo could not run (a scenario that ran but went wrong is a [`DemoReport`] with
/// problems, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work.
    #[error("{0}")]
    Config(&'static str),
    /// The embedded API server did not start.
    #[error("starting the embedded API server: {0}")]
    Emulator(#[from] conclave_emulator::Error),
    /// A Kubernetes call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the demo was doing.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("the API server did not answer within the demo's duration ({0})")]
    Timeout(String),
    /// The strategy plugins could not be loaded.
    #[error("{action}: {source}")]
    Plugins {
        /// What the demo was loading.
        action: String,
        /// The engine's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file could not be written.
    #[error("{action}: {source}")]
    Io {
        /// What the demo was writing.
        action: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A replica's elector could not be set up.
    #[error("{action}: {source}")]
    Candidate {
        /// What the demo was setting up.
        action: String,
        /// The candidate library's error (boxed: it is large).
        #[source]
        source: Box<conclave_candidate::Error>,
    },
    /// A task of the demo failed.
    #[error("{0}")]
    Task(String),
}

/// How the demo ended.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Everything the journal measured.
    pub record: Record,
    /// Whether every step of the upgrade completed.
    pub completed: bool,
    /// Why it did not complete, or what went wrong.
    pub problems: Vec<String>,
    /// The holder of each Lease at the end.
    pub final_holders: Vec<(LeaseId, Option<String>)>,
    /// The candidate of the main Lease that is oldest after the upgrade (`OldestEmulationVersion`
    /// ranking of the final candidates).
    pub expected_main_leader: Option<String>,
    /// The plugin strategy used, or why there was none.
    pub plugin_strategy: Result<String, String>,
}

impl DemoReport {
    /// Whether the scenario completed and ended as it should, with never two leaders.
    #[must_use]
    pub fn succeeded(&self) -> bool {
        self.completed && self.problems.is_empty() && self.record.overlaps.is_empty()
    }
}

enum Running {
    Emulator(RunningEmulator),
    Cluster,
}

/// A short random suffix for namespaces.
fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut n = (nanos ^ (u128::from(std::process::id()) << 32)) as u64;
    let mut out = String::new();
    for _ in 0..6 {
        let digit = (n % 36) as u8;
        out.push(char::from(if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        }));
        n /= 36;
    }
    out
}

/// Runs the demo, writing live lines and the summary to `out`. Everything, clean-up included,
/// ends within `config.duration` (plus the time to compile plugins on a cold cache); cancelling
/// `interrupted` ends the scenario early and cleans up.
pub async fn run_demo(
    config: DemoConfig,
    out: Box<dyn Write + Send>,
    interrupted: CancellationToken,
) -> Result<DemoReport, Error> {
    let DemoConfig {
        duration,
        target,
        namespace,
        plugins,
        plugin_strategy,
        ack_window,
        no_controller,
    } = config;
    if no_controller && matches!(target, Target::Emulator) {
        return Err(Error::Config(
            "--no-controller needs --kubeconfig: on the embedded API server only the demo's own \
             controller elects",
        ));
    }
    let started = Instant::now();
    let deadline = started + duration;
    let reserve = (duration / 6).clamp(Duration::from_secs(2), Duration::from_secs(5));
    let scenario_deadline = deadline.checked_sub(reserve).unwrap_or(started);
    let (journal, events, receiver) = journal::journal(now(), out);
    let journal_task = tokio::spawn(journal.run(receiver));

    let (target, client, server) = match target {
        Target::Emulator => {
            let emulator = Emulator::start(EmulatorConfig::default()).await?;
            let client = emulator_client(&emulator)?;
            let server = format!(
                "embedded API server at {} (no cluster needed)",
                emulator.url()
            );
            (Running::Emulator(emulator), client, server)
        }
        Target::Cluster {
            client,
            description,
        } => (Running::Cluster, client, description),
    };
    let (namespace, own_namespace) = match (namespace, &target) {
        (Some(ns), _) => (ns, false),
        (None, Running::Emulator(_)) => ("conclave-demo".to_owned(), true),
        (None, Running::Cluster) => (format!("conclave-demo-{}", suffix()), true),
    };
    if own_namespace {
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                labels: Some([("app.kubernetes.io/name".into(), "conclave-demo".into())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let namespaces = Api::<Namespace>::all(client.clone());
        let params = PostParams::default();
        let create = namespaces.create(&params, &object);
        tokio::time::timeout_at(scenario_deadline, create)
            .await
            .map_err(|_| Error::Timeout(format!("creating namespace {namespace}")))?
            .map_err(|source| Error::Kube {
                action: format!("creating namespace {namespace}"),
                source,
            })?;
    }

    let wanted = plugin_strategy;
    let loaded = tokio::task::spawn_blocking(move || plugins::load(plugins, wanted.as_deref()))
        .await
        .map_err(|join| Error::Task(format!("loading strategy plugins: {join}")))??;
    let engine = Arc::new(loaded.engine.clone());
    let mut leases = vec![DemoLease {
        id: LeaseId::Main,
        name: MAIN_LEASE.into(),
        strategy: OLDEST_EMULATION_VERSION.into(),
    }];
    let plugin_line = match &loaded.strategy {
        Ok((strategy, path)) => {
            leases.push(DemoLease {
                id: LeaseId::Plugin,
                name: PLUGIN_LEASE.into(),
                strategy: strategy.clone(),
            });
            format!(
                "plugin    = {PLUGIN_LEASE}, strategy {strategy} (plugin {})",
                path.display()
            )
        }
        Err(why) => format!("plugin    = none: {why}; continuing with the built-in strategy only"),
    };
    let main_line = if controller::builtin_controller_active(&client)
        .await
        .unwrap_or(false)
    {
        format!(
            "component = {MAIN_LEASE}, strategy {OLDEST_EMULATION_VERSION}, elected by \
             kube-apiserver's built-in controller (active in this cluster; Conclave's --mode auto \
             leaves it this strategy)"
        )
    } else {
        format!("component = {MAIN_LEASE}, strategy {OLDEST_EMULATION_VERSION} (built in)")
    };
    let strategies: Vec<String> = engine.strategies().into_iter().map(|s| s.name).collect();
    events.note(format!(
        "Conclave demo: coordinated leader election with graceful hand-off\n  \
         API server  {server}\n  \
         namespace   {namespace}\n  \
         controller  {}\n  \
         component   3 replicas (replica-0..2), a conclave-candidate elector per Lease each, \
         doing work while leading\n  \
         Leases      {main_line}\n              \
         {plugin_line}\n  \
         scenario    rolling upgrade 1.36 → 1.37, binary versions first, then emulation \
         versions, within {:?}\n\n   \
         time  lease      event",
        if no_controller {
            "the one running in the cluster (--no-controller)".to_owned()
        } else {
            format!(
                "in-process, ack window {:?}, strategies {}",
                ack_window,
                strategies.join(", ")
            )
        },
        duration,
    ));

    let controller_stop = CancellationToken::new();
    let controller_task = (!no_controller).then(|| {
        let config = ControllerConfig {
            namespaces: vec![namespace.clone()],
            workers: 2,
            ack_window,
            mode: Mode::Auto,
            identity: "conclave-demo".into(),
            controller_namespace: namespace.clone(),
            metrics_addr: None,
            // The demo elects its own namespace's Leases only; it never takes over a cluster's
            // built-in election controller.
            take_over: false,
            // The embedded emulator starts with the controller: no Lease existed before its
            // first list, so none was deleted while held.
            unseen_lease_hold: Some(std::time::Duration::ZERO),
            ..ControllerConfig::default()
        };
        tokio::spawn(controller::run(
            client.clone(),
            engine.clone(),
            config,
            controller_stop.clone(),
        ))
    });
    let observer_stop = CancellationToken::new();
    let options = PredictOptions {
        ack_window,
        ..PredictOptions::default()
    };
    let (snapshot, observer_task) = observe::start(
        &client,
        &namespace,
        leases.clone(),
        engine.clone(),
        options,
        events.clone(),
        observer_stop.clone(),
    );

    let mut scenario = Scenario {
        client: client.clone(),
        namespace: namespace.clone(),
        leases: leases.clone(),
        events: events.clone(),
        snapshot,
        replicas: vec![None, None, None],
        deadline: scenario_deadline,
        interrupted,
    };
    let outcome = scenario.run().await;
    let final_snapshot = scenario.snapshot.borrow().clone();
    let mut problems = Vec::new();
    if let Err(problem) = &outcome {
        problems.push(problem.clone());
    }

    // Clean-up, bounded by the deadline.
    events.note("\n── clean-up: stopping the replicas and the controller");
    let limit = deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(Duration::from_millis(700))
        .max(Duration::from_millis(300));
    let stops = scenario
        .replicas
        .iter_mut()
        .filter_map(Option::take)
        .map(|replica| replica.stop(limit));
    for result in futures::future::join_all(stops).await {
        if let Err(problem) = result {
            problems.push(problem);
        }
    }
    controller_stop.cancel();
    if let Some(task) = controller_task {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => problems.push(format!("the controller failed: {error}")),
            Ok(Err(join)) => problems.push(format!("the controller task failed: {join}")),
            Err(_) => problems.push("the controller did not stop in time".into()),
        }
    }
    observer_stop.cancel();
    let _ = observer_task.await;
    let cleanup = async {
        if !own_namespace {
            return delete_demo_leases(&client, &namespace, &leases).await;
        }
        match &target {
            Running::Emulator(_) => Ok(()),
            Running::Cluster => Api::<Namespace>::all(client.clone())
                .delete(&namespace, &DeleteParams::default())
                .await
                .map(|_| ())
                .map_err(|source| Error::Kube {
                    action: format!("deleting namespace {namespace}"),
                    source,
                }),
        }
    };
    let cleanup = tokio::time::timeout_at(deadline, cleanup)
        .await
        .unwrap_or_else(|_| Err(Error::Timeout(format!("cleaning up {namespace}"))));
    if let Err(error) = cleanup {
        problems.push(error.to_string());
    }
    drop(scenario);
    drop(events);
    let (record, mut out) = journal_task
        .await
        .map_err(|join| Error::Task(format!("the demo journal failed: {join}")))?;

    let ids: Vec<LeaseId> = leases.iter().map(|l| l.id).collect();
    let mut text = journal::summary(&record, &ids);
    let final_holders: Vec<(LeaseId, Option<String>)> = ids
        .iter()
        .map(|id| {
            (
                *id,
                final_snapshot
                    .get(id)
                    .and_then(LeaseStatus::holder)
                    .map(Into::into),
            )
        })
        .collect();
    let expected_main_leader = final_snapshot.get(&LeaseId::Main).and_then(oldest);
    let main_holder = final_holders
        .iter()
        .find(|(id, _)| *id == LeaseId::Main)
        .and_then(|(_, h)| h.clone());
    let completed = outcome.is_ok();
    if completed {
        if main_holder.is_some() && main_holder == expected_main_leader {
            text.push_str(&format!(
                "  final leader of {MAIN_LEASE}: {} — the oldest candidate after the upgrade\n",
                main_holder.as_deref().unwrap_or_default()
            ));
        } else {
            problems.push(format!(
                "the final leader of {MAIN_LEASE} is {main_holder:?}, but the oldest candidate \
                 is {expected_main_leader:?}"
            ));
        }
    }
    if let Some((_, holder)) = final_holders.iter().find(|(id, _)| *id == LeaseId::Plugin) {
        text.push_str(&format!(
            "  final leader of {PLUGIN_LEASE}: {}\n",
            holder.as_deref().unwrap_or("-")
        ));
    }
    if let Err(why) = &loaded.strategy {
        text.push_str(&format!("  plugin Lease: skipped ({why})\n"));
    }
    if let Running::Emulator(emulator) = target {
        let _ = emulator.shutdown().await;
    } else if own_namespace {
        text.push_str(&format!("  namespace {namespace} deleted\n"));
    }
    let elapsed = started.elapsed();
    if problems.is_empty() && record.overlaps.is_empty() {
        text.push_str(&format!(
            "\nRolling upgrade complete in {:.1}s.\n",
            elapsed.as_secs_f64()
        ));
    } else {
        text.push_str("\nThe demo did not complete:\n");
        for problem in &problems {
            text.push_str(&format!("  - {problem}\n"));
        }
    }
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(DemoReport {
        record,
        completed,
        problems,
        final_holders,
        expected_main_leader,
        plugin_strategy: loaded.strategy.map(|(s, _)| s),
    })
}

/// A client for the embedded API server (with `TCP_NODELAY`, as every client of the demo).
fn emulator_client(emulator: &RunningEmulator) -> Result<Client, Error> {
    let url = emulator
        .url()
        .parse()
        .map_err(|_| Error::Config("the embedded API server's URL does not parse"))?;
    conclave_candidate::client(kube::Config::new(url)).map_err(|source| Error::Kube {
        action: "building a client for the embedded API server".into(),
        source,
    })
}

/// The wall-clock time now; the demo's journal and its Lease writes read this one clock.
#[must_use]
pub fn now() -> conclave_core::time::Timestamp {
    conclave_core::k8s::now()
}

/// The `OldestEmulationVersion` ranking of a Lease's candidates, computed here independently of
/// the plugin, to check the controller's result.
fn oldest(status: &LeaseStatus) -> Option<String> {
    pick_oldest_emulation_version(status.candidates.iter().filter_map(|c| {
        OldestEmulationRank::new(
            &c.view.name,
            &c.view.binary_version,
            &c.view.emulation_version,
            c.view.creation_time,
        )
    }))
    .map(ToOwned::to_owned)
}

/// Deletes the demo's Leases and the controller's own Lease from a namespace the demo did not
/// create (candidates delete themselves on shutdown).
async fn delete_demo_leases(
    client: &Client,
    namespace: &str,
    leases: &[DemoLease],
) -> Result<(), Error> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), namespace);
    let names = leases
        .iter()
        .map(|l| l.name.as_str())
        .chain([controller::CONTROLLER_LEASE]);
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    action: format!("deleting Lease {namespace}/{name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The rolling upgrade, step by step, each step waiting on conditions, paced over the time
/// available.
struct Scenario {
    client: Client,
    namespace: String,
    leases: Vec<DemoLease>,
    events: Events,
    snapshot: watch::Receiver<Snapshot>,
    replicas: Vec<Option<Replica>>,
    deadline: Instant,
    interrupted: CancellationToken,
}

impl Scenario {
    async fn run(&mut self) -> Result<(), String> {
        let old = Versions {
            binary: "1.36.0".into(),
            emulation: "1.36.0".into(),
        };
        self.events.send(What::Phase(
            Phase::Start,
            format!("start: three replicas at {old}, replica-2 first"),
        ));
        // replica-2 starts first, so it is the oldest and leads both Leases; the others start
        // in later seconds, so that creation times (whole seconds) never tie and every
        // controller, kube-apiserver's included, agrees on the oldest candidate.
        for index in [2, 1, 0] {
            self.start_replica(index, &old).await?;
            if index > 0 {
                let into_second = jiff::Timestamp::now().subsec_nanosecond();
                let rest = 1_000_000_000 - i64::from(into_second);
                let wait = Duration::from_nanos(rest.unsigned_abs()) + Duration::from_millis(20);
                self.pause_until(Instant::now() + wait).await?;
            }
        }
        self.settled("the first election").await?;

        let steps = [
            (
                Phase::Binary,
                Versions {
                    binary: "1.37.0".into(),
                    emulation: "1.36.0".into(),
                },
                "phase 1: binary versions, replica by replica → 1.37.0 (emulating 1.36.0)",
            ),
            (
                Phase::Emulation,
                Versions {
                    binary: "1.37.0".into(),
                    emulation: "1.37.0".into(),
                },
                "phase 2: emulation versions, replica by replica → 1.37.0/1.37.0",
            ),
        ];
        // Six restarts; each gets one unit (stop at its middle, restart at its end) after half a
        // unit showing the initial state; the last half unit shows the final state.
        let begin = Instant::now();
        let unit = self.deadline.saturating_duration_since(begin).div_f64(6.5);
        let mut k = 0u32;
        for (phase, versions, title) in steps {
            self.events.send(What::Phase(phase, title.into()));
            for index in 0..3 {
                self.pause_until(begin + unit.mul_f64(f64::from(k) + 0.5))
                    .await?;
                self.stop_replica(index).await?;
                self.settled(&format!("the election after stopping replica-{index}"))
                    .await?;
                self.pause_until(begin + unit * (k + 1)).await?;
                self.start_replica(index, &versions).await?;
                self.settled(&format!("replica-{index} rejoining at {versions}"))
                    .await?;
                k += 1;
            }
        }
        self.pause_until(self.deadline).await?;
        Ok(())
    }

    fn check_time(&self, what: &str) -> Result<(), String> {
        if self.interrupted.is_cancelled() {
            return Err(format!("interrupted while waiting for {what}"));
        }
        if Instant::now() >= self.deadline {
            return Err(format!(
                "--duration ran out while waiting for {what}; try a longer --duration"
            ));
        }
        Ok(())
    }

    async fn pause_until(&self, until: Instant) -> Result<(), String> {
        tokio::select! {
            () = tokio::time::sleep_until(until.min(self.deadline)) => Ok(()),
            () = self.interrupted.cancelled() => Err("interrupted".into()),
        }
    }

    async fn start_replica(&mut self, index: usize, versions: &Versions) -> Result<(), String> {
        let replica = Replica::start(
            &self.client,
            &self.namespace,
            index,
            versions.clone(),
            &self.leases,
            &self.events,
        )
        .await
        .map_err(|e| format!("starting replica-{index}: {e}"))?;
        self.replicas[index] = Some(replica);
        let what = format!("replica-{index} to register");
        loop {
            self.check_time(&what)?;
            if self.replicas[index]
                .as_ref()
                .is_some_and(Replica::is_registered)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop_replica(&mut self, index: usize) -> Result<(), String> {
        let Some(replica) = self.replicas[index].take() else {
            return Ok(());
        };
        self.events.send(What::Stopping {
            replica: replica.name.clone(),
            identities: replica.identities(),
        });
        let limit = self.deadline.saturating_duration_since(Instant::now());
        replica.stop(limit).await
    }

    /// Whether every Lease is held by the candidate its strategy picks, with no hand-off in
    /// flight, and that candidate's elector leads.
    fn is_settled(&self) -> bool {
        let snapshot = self.snapshot.borrow();
        self.leases.iter().all(|lease| {
            let Some(status) = snapshot.get(&lease.id) else {
                return false;
            };
            let running: Vec<(String, &Replica)> = self
                .replicas
                .iter()
                .flatten()
                .flat_map(|r| {
                    r.identities()
                        .into_iter()
                        .filter(|(id, _)| *id == lease.id)
                        .map(move |(_, identity)| (identity, r))
                })
                .collect();
            let all_seen = running
                .iter()
                .all(|(identity, _)| status.candidates.iter().any(|c| c.view.name == *identity));
            let holder = status.holder();
            let preferred = status.record.as_ref().and_then(|r| r.preferred());
            all_seen
                && preferred.is_none()
                && holder.is_some()
                && holder == status.picked()
                && running.iter().any(|(identity, r)| {
                    Some(identity.as_str()) == holder && r.is_leading(lease.id)
                })
        })
    }

    async fn settled(&mut self, what: &str) -> Result<(), String> {
        loop {
            self.check_time(what)?;
            if self.is_settled() {
                return Ok(());
            }
            tokio::select! {
                _ = self.snapshot.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_suffixes_are_valid_dns_labels() {
        let name = format!("conclave-demo-{}", suffix());
        assert!(conclave_core::validation::dns1123_label_errors(&name).is_empty());
        assert_eq!(name.len(), "conclave-demo-".len() + 6);
    }
}
