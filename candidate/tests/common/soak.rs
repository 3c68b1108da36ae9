//! The soak: several Leases at once, several `conclave candidate` processes on each, Conclave's
//! controller as two `conclave run` replicas electing their own active replica, and a seeded
//! stream of events: pre-emptions by new candidates with older emulation versions, graceful
//! releases (SIGTERM of a leader), crashes (SIGKILL of a leader, now and then of a follower),
//! crashes of the active controller replica right after a pre-emption was set off (restarted
//! 0.5–3 s later under a new identity), and API faults of the server's kinds ([`Fault`]). At the
//! end every candidate leaves gracefully, and [`Checker`] reads their output.
//!
//! With [`SoakConfig::kubelet`], every candidate runs in a Pod of a simulated [`Kubelet`] and a
//! crash is a container kill the kubelet reports (terminated, then restarted in the same Pod
//! under a new identity, or the Pod deleted), so the controller's pod liveness fails over on the
//! report; live holders now and then get reports that only look bad (phase `Unknown`, an earlier
//! instance's termination), on which the controller must not fail over. Every `HolderDead` Event
//! must name a process that was killed.
//!
//! On the emulator each candidate reaches the API server through a proxy of its own, which a cut
//! event severs for 1–6 s while the process runs on (a node cut off from the control plane);
//! with the kubelet, half of those cut-off candidates' Pods are then force-deleted, half of
//! these recreated under the same name. Neither is evidence of a death: the faults that found
//! issue 47's findings, with the watch outages that end in 410 Gone ([`Fault::WatchOutage`]).
//!
//! Shared by tests/soak.rs (about 50 events, CI) and benches/soak.rs (`--handoffs 1000`).

use super::checker::{Checker, Verdict, gap_summary, longest_gaps, seconds};
use super::kubelet::{Kubelet, PodSlot};
use super::procs::{CandidateProcess, ControllerReplica, Dice, Fault, calm};
use super::{Backend, Server};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// Emulation versions are `1.<minor>.0` with a minor in this range (binary version 1.40.0).
const OLDEST_MINOR: u64 = 20;
const NEWEST_MINOR: u64 = 40;

/// The controller's own HA Lease (`conclave run --controller-namespace`).
const CONTROLLER_LEASE: &str = "conclave-controller";

/// When a soak run stops.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    /// After this many events (actions of the driver, faults and calm rounds included).
    Events(usize),
    /// Once the driver has seen the holder of a Lease change this many times.
    HandOffs(usize),
}

/// One soak run's shape.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Seeds the dice; printed, so a run's choices can be replayed.
    pub seed: u64,
    /// When to stop.
    pub goal: Goal,
    /// Leases elected at once.
    pub leases: usize,
    /// Candidate processes kept on each Lease (one more while a pre-emption is under way).
    pub candidates: usize,
    /// Stop anyway after this long, reporting what was reached.
    pub time_limit: Option<Duration>,
    /// Run every candidate in a Pod of a simulated [`Kubelet`], which reports its container
    /// kills (the controller's pod liveness then fails over on the report).
    pub kubelet: bool,
}

/// What a soak run did and what the checker found.
#[derive(Debug)]
pub struct Report {
    /// "emulator" or "kube-apiserver".
    pub server: &'static str,
    /// The run's shape.
    pub config: SoakConfig,
    /// How long the events ran (the graceful exit at the end not included).
    pub elapsed: Duration,
    /// Events the driver took.
    pub events: usize,
    /// New candidates started with an emulation version older than the leader's.
    pub preemptions: usize,
    /// Leaders stopped with SIGTERM (they release the Lease).
    pub releases: usize,
    /// SIGKILLs of the holder the driver saw.
    pub leader_kills: usize,
    /// SIGKILLs of a random candidate, when the driver saw no holder on that Lease.
    pub follower_kills: usize,
    /// Controller replicas SIGKILLed and started again.
    pub controller_restarts: usize,
    /// Candidates cut off from the API server while they ran on (the holder when there was one).
    pub cut_offs: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<Fault, usize>,
    /// What the simulated kubelet did, when it ran.
    pub kubelet: Option<KubeletReport>,
    /// Candidates that did not exit cleanly after SIGTERM, with their output file.
    pub unclean_exits: Vec<String>,
    /// Candidates that exited without being told to (failed to start, or died on their own),
    /// with their exit status and output file.
    pub unexpected_exits: Vec<String>,
    /// The checker's verdict.
    pub verdict: Verdict,
}

/// What the simulated kubelet reported, and what the controller made of it.
#[derive(Debug, Default)]
pub struct KubeletReport {
    /// Whether the processes recorded their container IDs (they ran in cgroups named after them).
    pub container_ids: bool,
    /// Containers reported terminated (exit 137), then restarted in the same Pod.
    pub terminated_then_restarted: usize,
    /// Containers reported restarted at once (the termination seen only in `lastState`).
    pub restarted: usize,
    /// Pods deleted after their container was killed.
    pub pods_deleted: usize,
    /// Pods of cut-off live candidates force-deleted (no word from the kubelet).
    pub force_deleted: usize,
    /// Of those, recreated at once under the same name (a new UID, no process of the old one).
    pub recreated: usize,
    /// Of the kills, reported as `OOMKilled`.
    pub oom_killed: usize,
    /// Reports on live holders that only look bad (phase `Unknown`, an earlier instance's
    /// termination).
    pub trouble_reports: usize,
    /// `HolderDead` Events the controller published.
    pub holder_dead_events: usize,
    /// `HolderDead` Events naming a process that was never killed (must stay empty).
    pub wrongly_dead: Vec<String>,
}

/// The candidates of one Lease.
struct Pool {
    lease: String,
    members: Vec<CandidateProcess>,
    /// The last holder the driver saw, for counting hand-offs as they happen.
    last_holder: Option<String>,
}

impl Pool {
    fn position(&self, identity: Option<&str>) -> Option<usize> {
        identity.and_then(|who| self.members.iter().position(|m| m.identity() == who))
    }
}

/// A controller replica slot: running, or waiting to be started again.
struct Slot {
    name: &'static str,
    generation: usize,
    replica: Option<ControllerReplica>,
    restart_at: Option<Instant>,
}

/// The driver's state while the soak runs.
struct Soak<'a> {
    server: &'a Server,
    binary: &'a Path,
    dice: Dice,
    pools: Vec<Pool>,
    slots: Vec<Slot>,
    /// Candidates told to stop, until they exit.
    retiring: Vec<(CandidateProcess, Instant)>,
    /// Output files of every candidate that has ended, with its Lease and identity.
    ended: Vec<(String, String, PathBuf)>,
    spawned: usize,
    hand_offs_seen: usize,
    /// The simulated kubelet, with every Pod by name, and the Pod of each candidate identity.
    kubelet: Option<Kubelet>,
    pods: BTreeMap<String, PodSlot>,
    pod_of: BTreeMap<String, String>,
    /// Identities of every candidate process SIGKILLed.
    killed: BTreeSet<String>,
    /// Cut-off candidates, by identity, and when their cut ends.
    cut: Vec<(String, Instant)>,
    report: Report,
}

/// Runs one soak on `server` with the `conclave` binary, then checks it.
pub async fn run(server: &Server, binary: &Path, config: SoakConfig) -> Report {
    eprintln!(
        "soak seed {} on the {} ({} Leases x {} candidates, 2 controller replicas)",
        config.seed,
        server.kind(),
        config.leases,
        config.candidates
    );
    // On the real server only Conclave elects: the built-in controller is held passive while
    // the replicas run (dropped after them, below).
    let hold = match server.backend() {
        Backend::Emulator(_) => None,
        Backend::Real(plane) => Some(
            plane
                .hold_builtin_controller_lease()
                .await
                .expect("built-in election controller passive"),
        ),
    };
    let kubelet = if config.kubelet {
        Some(Kubelet::new(server).await)
    } else {
        None
    };
    let kubelet_report = kubelet.as_ref().map(|kubelet| KubeletReport {
        container_ids: kubelet.records_container_ids(),
        ..KubeletReport::default()
    });
    let mut soak = Soak {
        server,
        binary,
        dice: Dice::new(config.seed),
        pools: (0..config.leases)
            .map(|n| Pool {
                lease: format!("soak-{n}"),
                members: Vec::new(),
                last_holder: None,
            })
            .collect(),
        slots: ["a", "b"]
            .into_iter()
            .map(|name| Slot {
                name,
                generation: 0,
                replica: None,
                restart_at: Some(Instant::now()),
            })
            .collect(),
        retiring: Vec::new(),
        ended: Vec::new(),
        spawned: 0,
        hand_offs_seen: 0,
        kubelet,
        pods: BTreeMap::new(),
        pod_of: BTreeMap::new(),
        killed: BTreeSet::new(),
        cut: Vec::new(),
        report: Report {
            server: server.kind(),
            config,
            elapsed: Duration::ZERO,
            events: 0,
            preemptions: 0,
            releases: 0,
            leader_kills: 0,
            follower_kills: 0,
            controller_restarts: 0,
            cut_offs: 0,
            faults: BTreeMap::new(),
            kubelet: kubelet_report,
            unclean_exits: Vec::new(),
            unexpected_exits: Vec::new(),
            verdict: Verdict::default(),
        },
    };
    soak.events().await;
    soak.finish().await;
    drop(hold);
    soak.report
}

impl Soak<'_> {
    async fn events(&mut self) {
        let client = self.server.client().await;
        let leases: Api<Lease> = Api::namespaced(client, self.server.namespace());
        self.warm_up(&leases).await;
        let started = Instant::now();
        let mut last_progress = started;
        loop {
            self.restart_replicas();
            self.heal_cuts(false);
            for n in 0..self.pools.len() {
                self.refill(n).await;
            }
            let done = match self.report.config.goal {
                Goal::Events(n) => self.report.events >= n,
                Goal::HandOffs(n) => self.hand_offs_seen >= n,
            };
            let out_of_time = self
                .report
                .config
                .time_limit
                .is_some_and(|limit| started.elapsed() >= limit);
            if done || out_of_time {
                break;
            }
            tokio::time::sleep(self.dice.millis(150, 450)).await;
            let holders = holders(&leases).await;
            self.count_hand_offs(&holders);
            self.reap(false).await;
            self.notice_unexpected_exits();
            self.event(&holders).await;
            self.report.events += 1;
            if last_progress.elapsed() >= Duration::from_secs(30) {
                last_progress = Instant::now();
                eprintln!(
                    "soak: {} s, {} events, {} hand-offs seen",
                    started.elapsed().as_secs(),
                    self.report.events,
                    self.hand_offs_seen
                );
            }
        }
        self.report.elapsed = started.elapsed();
    }

    /// Starts the controller replicas and the first candidates, and waits until every Lease has
    /// a holder: the events churn established elections, as in a running cluster. A controller
    /// process does not create a Lease missing from its first list before a lease duration (at
    /// least 15 s) has passed (it may have been deleted while held just before), so replicas
    /// restarted from the first second would keep the Leases from ever being created.
    async fn warm_up(&mut self, leases: &Api<Lease>) {
        let since = Instant::now();
        self.restart_replicas();
        for n in 0..self.pools.len() {
            self.refill(n).await;
        }
        let deadline = since + Duration::from_secs(120);
        loop {
            let holders = holders(leases).await;
            if self
                .pools
                .iter()
                .all(|pool| holders.contains_key(&pool.lease))
            {
                eprintln!(
                    "soak: every Lease elected {:.1} s after the start",
                    since.elapsed().as_secs_f64()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Leases were not all elected within 120 s of the start: {holders:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One event on a random Lease, chosen by the dice.
    async fn event(&mut self, holders: &BTreeMap<String, String>) {
        let n = self.dice.below(self.pools.len() as u64) as usize;
        let holder = holders.get(&self.pools[n].lease).cloned();
        match self.dice.below(100) {
            0..30 => self.preempt(n, holder.as_deref()).await,
            30..45 => match self.pools[n].position(holder.as_deref()) {
                Some(i) if self.pools[n].members[i].started() => {
                    let mut leader = self.pools[n].members.swap_remove(i);
                    leader.terminate();
                    self.retiring.push((leader, Instant::now()));
                    self.report.releases += 1;
                }
                _ => self.preempt(n, holder.as_deref()).await,
            },
            45..57 => {
                let pool = &mut self.pools[n];
                let (i, leader) = match pool.position(holder.as_deref()) {
                    Some(i) => (i, true),
                    None => (self.dice.below(pool.members.len() as u64) as usize, false),
                };
                if i < pool.members.len() {
                    let victim = pool.members.swap_remove(i);
                    self.crash(n, victim).await;
                    if leader {
                        self.report.leader_kills += 1;
                    } else {
                        self.report.follower_kills += 1;
                    }
                }
            }
            57..64 => {
                // Mid-election: a pre-emption is set off, then the active replica dies.
                self.preempt(n, holder.as_deref()).await;
                tokio::time::sleep(self.dice.millis(0, 300)).await;
                self.crash_controller(holders.get(CONTROLLER_LEASE).map(String::as_str));
            }
            64..84 => {
                let kinds = Fault::kinds(self.server);
                let fault = kinds[self.dice.below(kinds.len() as u64) as usize];
                fault.inject(self.server, &mut self.dice).await;
                *self.report.faults.entry(fault).or_default() += 1;
            }
            84..90 if self.kubelet.is_some() => self.trouble(holder.as_deref()).await,
            90..97 => self.cut_off(n, holder.as_deref()).await,
            _ => calm(self.server),
        }
    }

    /// SIGKILLs `victim` (a candidate of pool `n`, already out of it); with the kubelet, then
    /// reports its container's death after 0–0.8 s, as a kubelet does once the runtime saw the
    /// process exit: terminated and restarted 0–1 s later (half the time), restarted at once (a
    /// quarter), or its Pod deleted. A restarted container's process rejoins pool `n` under a new
    /// identity, with the same versions.
    async fn crash(&mut self, n: usize, victim: CandidateProcess) {
        let identity = victim.identity().to_owned();
        let minor = victim.emulation_minor();
        self.ended
            .push((victim.lease().to_owned(), identity.clone(), victim.kill()));
        self.killed.insert(identity.clone());
        let (Some(kubelet), Some(report)) = (&self.kubelet, &mut self.report.kubelet) else {
            return;
        };
        let Some(pod) = self.pod_of.remove(&identity) else {
            return;
        };
        let mut slot = self
            .pods
            .remove(&pod)
            .expect("every candidate's Pod is known");
        tokio::time::sleep(self.dice.millis(0, 800)).await;
        let oom = self.dice.below(4) == 0;
        report.oom_killed += usize::from(oom);
        let env = match self.dice.below(4) {
            0 | 1 => {
                kubelet.report_terminated(&slot, oom).await;
                tokio::time::sleep(self.dice.millis(0, 1000)).await;
                report.terminated_then_restarted += 1;
                kubelet.report_restarted(&mut slot, oom).await
            }
            2 => {
                report.restarted += 1;
                kubelet.report_restarted(&mut slot, oom).await
            }
            _ => {
                report.pods_deleted += 1;
                kubelet.delete_pod(&slot).await;
                kubelet.remove_old_cgroups(&mut slot);
                return;
            }
        };
        kubelet.remove_old_cgroups(&mut slot);
        let restarted = format!("{pod}-r{}", slot.restarts());
        let candidate = CandidateProcess::spawn_behind_proxy(
            self.binary,
            self.server,
            &self.pools[n].lease,
            &restarted,
            minor,
            Some(&env),
        )
        .await;
        self.pools[n].members.push(candidate);
        self.pod_of.insert(restarted, pod.clone());
        self.pods.insert(pod, slot);
    }

    /// Cuts a candidate of pool `n` (the holder, when there is one) off the API server for 1–6 s
    /// while its process runs on, as a node partitioned from the control plane; with the
    /// kubelet, half the time its Pod is then force-deleted (`kubectl delete pod --force
    /// --grace-period=0`, what people do with a Pod stuck on an unreachable node) and half of
    /// those recreated at once under the same name (a StatefulSet's way). None of it proves the
    /// process stopped: the controller must wait for the Lease to expire.
    async fn cut_off(&mut self, n: usize, holder: Option<&str>) {
        let pool = &self.pools[n];
        let i = match pool.position(holder) {
            Some(i) => i,
            None if !pool.members.is_empty() => self.dice.below(pool.members.len() as u64) as usize,
            None => return,
        };
        let member = &pool.members[i];
        let Some(proxy) = member.proxy().filter(|proxy| !proxy.is_cut()) else {
            return;
        };
        proxy.cut();
        let identity = member.identity().to_owned();
        let until = Instant::now() + self.dice.millis(1000, 5000);
        self.cut.push((identity.clone(), until));
        self.report.cut_offs += 1;
        let (Some(kubelet), Some(report)) = (&self.kubelet, &mut self.report.kubelet) else {
            return;
        };
        if self.dice.below(2) == 0 {
            return;
        }
        let Some(pod) = self.pod_of.remove(&identity) else {
            return;
        };
        let Some(slot) = self.pods.remove(&pod) else {
            return;
        };
        tokio::time::sleep(self.dice.millis(0, 1000)).await;
        kubelet.force_delete_pod(&slot).await;
        report.force_deleted += 1;
        if self.dice.below(2) == 0 {
            let recreated = kubelet.create_pod(&pod).await;
            self.pods.insert(pod, recreated);
            report.recreated += 1;
        }
    }

    /// Reconnects the cut-off candidates whose cut has lasted its length (every one with
    /// `all`); those that ended meanwhile took their proxy with them.
    fn heal_cuts(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cut)
            .into_iter()
            .partition(|(_, until)| all || *until <= now);
        self.cut = later;
        for (identity, _) in due {
            let proxy = self
                .pools
                .iter()
                .flat_map(|pool| &pool.members)
                .find(|member| member.identity() == identity)
                .and_then(CandidateProcess::proxy);
            if let Some(proxy) = proxy {
                proxy.heal();
            }
        }
    }

    /// Reports signs of trouble on the holder's Pod that do not prove it dead.
    async fn trouble(&mut self, holder: Option<&str>) {
        let (Some(kubelet), Some(report)) = (&self.kubelet, &mut self.report.kubelet) else {
            return;
        };
        let Some(slot) = holder
            .and_then(|holder| self.pod_of.get(holder))
            .and_then(|pod| self.pods.get(pod))
        else {
            return;
        };
        kubelet.report_trouble(slot).await;
        report.trouble_reports += 1;
    }

    /// Starts a candidate older than the leader of pool `n`, which the controller then prefers;
    /// a leader already at the oldest version is stopped with SIGTERM instead. One follower
    /// leaves first if the pool is full.
    async fn preempt(&mut self, n: usize, holder: Option<&str>) {
        let Some(i) = self.pools[n].position(holder) else {
            return;
        };
        let minor = self.pools[n].members[i].emulation_minor();
        if minor <= OLDEST_MINOR {
            if self.pools[n].members[i].started() {
                let mut leader = self.pools[n].members.swap_remove(i);
                leader.terminate();
                self.retiring.push((leader, Instant::now()));
                self.report.releases += 1;
            }
            return;
        }
        let cap = self.report.config.candidates + 1;
        let pool = &mut self.pools[n];
        if pool.members.len() >= cap
            && let Some(f) = pool
                .members
                .iter()
                .position(|m| Some(m.identity()) != holder && m.started())
        {
            let mut follower = pool.members.swap_remove(f);
            follower.terminate();
            self.retiring.push((follower, Instant::now()));
        }
        let older = minor - 1 - self.dice.below((minor - OLDEST_MINOR).min(3));
        self.spawn(n, older).await;
        self.report.preemptions += 1;
    }

    /// Starts a new candidate on pool `n` (in a new Pod, with the kubelet).
    async fn spawn(&mut self, n: usize, minor: u64) {
        self.spawned += 1;
        let identity = format!("s{n}-c{}", self.spawned);
        let env = match &self.kubelet {
            Some(kubelet) => {
                let slot = kubelet.create_pod(&identity).await;
                let env = kubelet.env(&slot);
                self.pods.insert(identity.clone(), slot);
                self.pod_of.insert(identity.clone(), identity.clone());
                Some(env)
            }
            None => None,
        };
        let candidate = CandidateProcess::spawn_behind_proxy(
            self.binary,
            self.server,
            &self.pools[n].lease,
            &identity,
            minor,
            env.as_ref(),
        )
        .await;
        self.pools[n].members.push(candidate);
    }

    /// Keeps `candidates` processes on pool `n`, new ones with random versions.
    async fn refill(&mut self, n: usize) {
        while self.pools[n].members.len() < self.report.config.candidates {
            let minor = OLDEST_MINOR + self.dice.below(NEWEST_MINOR - OLDEST_MINOR + 1);
            self.spawn(n, minor).await;
        }
    }

    /// SIGKILLs the active replica (else a random running one) and schedules its restart.
    fn crash_controller(&mut self, active: Option<&str>) {
        let running: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].replica.is_some())
            .collect();
        let Some(&fallback) = running.get(self.dice.below(running.len() as u64) as usize) else {
            return;
        };
        let s = running
            .iter()
            .copied()
            .find(|&s| {
                self.slots[s]
                    .replica
                    .as_ref()
                    .map(ControllerReplica::identity)
                    == active
            })
            .unwrap_or(fallback);
        let delay = self.dice.millis(500, 2500);
        let slot = &mut self.slots[s];
        if let Some(replica) = slot.replica.take() {
            replica.kill();
        }
        slot.restart_at = Some(Instant::now() + delay);
        self.report.controller_restarts += 1;
    }

    fn restart_replicas(&mut self) {
        for slot in &mut self.slots {
            if slot.restart_at.is_some_and(|at| at <= Instant::now()) {
                slot.restart_at = None;
                slot.generation += 1;
                let identity = format!("controller-{}-{}", slot.name, slot.generation);
                slot.replica = Some(ControllerReplica::start(
                    self.binary,
                    self.server,
                    &identity,
                ));
            }
        }
    }

    fn count_hand_offs(&mut self, holders: &BTreeMap<String, String>) {
        for pool in &mut self.pools {
            if let Some(holder) = holders.get(&pool.lease)
                && pool.last_holder.as_ref() != Some(holder)
            {
                if pool.last_holder.is_some() {
                    self.hand_offs_seen += 1;
                }
                pool.last_holder = Some(holder.clone());
            }
        }
    }

    /// Takes every candidate that exited without being told to out of its pool, noting it: the
    /// soak counts on each of them running until the driver ends it.
    fn notice_unexpected_exits(&mut self) {
        for pool in &mut self.pools {
            let mut i = 0;
            while i < pool.members.len() {
                let Some(status) = pool.members[i].exited() else {
                    i += 1;
                    continue;
                };
                let gone = pool.members.swap_remove(i);
                let output = gone.output().to_owned();
                self.report.unexpected_exits.push(format!(
                    "{}: {status}: {}",
                    gone.identity(),
                    output.display()
                ));
                self.ended
                    .push((gone.lease().to_owned(), gone.identity().to_owned(), output));
            }
        }
    }

    /// Collects candidates that exited after SIGTERM; with `all`, waits for every one.
    async fn reap(&mut self, all: bool) {
        let patience = self.server.patience();
        loop {
            let mut i = 0;
            while i < self.retiring.len() {
                let (candidate, since) = &mut self.retiring[i];
                let status = candidate.exited();
                assert!(
                    status.is_some() || since.elapsed() < patience,
                    "{} did not exit within {patience:?} of SIGTERM",
                    candidate.identity()
                );
                let Some(status) = status else {
                    i += 1;
                    continue;
                };
                let (candidate, _) = self.retiring.swap_remove(i);
                let output = candidate.output().to_owned();
                if !status.success() {
                    self.report
                        .unclean_exits
                        .push(format!("{status}: {}", output.display()));
                }
                self.ended.push((
                    candidate.lease().to_owned(),
                    candidate.identity().to_owned(),
                    output,
                ));
            }
            if !all || self.retiring.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Calms the server, lets every candidate leave (SIGTERM; one that has not started yet is
    /// killed), stops the controller, then runs the checker over every output.
    async fn finish(&mut self) {
        calm(self.server);
        self.heal_cuts(true);
        for pool in &mut self.pools {
            for mut candidate in pool.members.drain(..) {
                if candidate.started() {
                    candidate.terminate();
                    self.retiring.push((candidate, Instant::now()));
                } else {
                    let lease = candidate.lease().to_owned();
                    let identity = candidate.identity().to_owned();
                    self.ended.push((lease, identity, candidate.kill()));
                }
            }
        }
        self.reap(true).await;
        for slot in &mut self.slots {
            if let Some(replica) = slot.replica.take() {
                replica.kill();
            }
        }
        self.judge_holder_dead_events().await;
        if let Some(kubelet) = &self.kubelet {
            for slot in self.pods.values_mut() {
                kubelet.remove_old_cgroups(slot);
            }
        }
        let mut checker = Checker::default();
        for (lease, identity, output) in &self.ended {
            let text = std::fs::read_to_string(output)
                .unwrap_or_else(|e| panic!("read {}: {e}", output.display()));
            checker.add(lease, identity, &text);
        }
        self.report.verdict = checker.verdict();
    }
}

impl Soak<'_> {
    /// Counts the controller's `HolderDead` Events, and notes each that names a process that was
    /// never killed.
    async fn judge_holder_dead_events(&mut self) {
        let Some(report) = &mut self.report.kubelet else {
            return;
        };
        let events: Api<Event> =
            Api::namespaced(self.server.client().await, self.server.namespace());
        let list = events
            .list(&kube::api::ListParams::default())
            .await
            .expect("list Events");
        for event in list.items {
            if event.reason.as_deref() != Some("HolderDead") {
                continue;
            }
            report.holder_dead_events += 1;
            let note = event.note.unwrap_or_default();
            let holder = note.split(" is dead").next().unwrap_or_default();
            if !self.killed.contains(holder) {
                report.wrongly_dead.push(note);
            }
        }
    }
}

/// Every Lease's holder, by Lease name (empty when the list fails or times out: the driver reads
/// while it injects faults).
async fn holders(leases: &Api<Lease>) -> BTreeMap<String, String> {
    let params = kube::api::ListParams::default();
    let list = tokio::time::timeout(Duration::from_secs(3), leases.list(&params));
    let Ok(Ok(list)) = list.await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|lease| {
            let holder = lease.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((lease.metadata.name?, holder))
        })
        .collect()
}

impl fmt::Display for Report {
    /// The table, in Markdown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.verdict;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(fault, n)| format!("{} {n}", fault.label()))
            .collect();
        let (graceful, graceful_gaps) = gap_summary(v.hand_offs.iter().filter(|h| h.graceful()));
        let (crashed, crash_gaps) = gap_summary(v.hand_offs.iter().filter(|h| !h.graceful()));
        let longest = v.hand_offs.iter().map(|h| h.gap).max();
        let rows = [
            ("server", self.server.to_owned()),
            ("seed", self.config.seed.to_string()),
            (
                "Leases x candidates",
                format!(
                    "{} x {} (+1 during a pre-emption), 2 controller replicas",
                    self.config.leases, self.config.candidates
                ),
            ),
            (
                "duration",
                format!(
                    "{:.0} s, {} events",
                    self.elapsed.as_secs_f64(),
                    self.events
                ),
            ),
            ("hand-offs", v.hand_off_summary(self.elapsed)),
            ("terms", format!("{} (ends {:?})", v.terms, v.ends)),
            (
                "events",
                format!(
                    "pre-emptions {}, leader SIGTERMs {}",
                    self.preemptions, self.releases
                ),
            ),
            (
                "crashes (SIGKILL)",
                format!(
                    "{} of the holder, {} of a candidate on a Lease without a holder seen",
                    self.leader_kills, self.follower_kills
                ),
            ),
            (
                "controller restarts (SIGKILL mid-election)",
                self.controller_restarts.to_string(),
            ),
            (
                "candidates cut off from the API server, running on",
                self.cut_offs.to_string(),
            ),
            ("faults", faults.join(", ")),
            (
                "simulated kubelet",
                self.kubelet.as_ref().map_or_else(
                    || "off".into(),
                    |k| {
                        format!(
                            "container IDs recorded: {}; container kills reported: terminated then \
                     restarted {}, restarted {}, Pod deleted {} (OOMKilled {}); reports that only \
                     look bad: {}; cut-off candidates' Pods force-deleted {} (recreated under \
                     the name {}); HolderDead Events {} ({} naming a live process)",
                            if k.container_ids { "yes" } else { "no" },
                            k.terminated_then_restarted,
                            k.restarted,
                            k.pods_deleted,
                            k.oom_killed,
                            k.trouble_reports,
                            k.force_deleted,
                            k.recreated,
                            k.holder_dead_events,
                            k.wrongly_dead.len()
                        )
                    },
                ),
            ),
            ("overlaps", v.overlaps.len().to_string()),
            ("leaked tasks", v.leaked.len().to_string()),
            (
                "unended terms, unreadable lines",
                v.errors.len().to_string(),
            ),
            (
                "unclean exits after SIGTERM, exits unasked",
                format!(
                    "{}, {}",
                    self.unclean_exits.len(),
                    self.unexpected_exits.len()
                ),
            ),
            ("longest leaderless gap", seconds(longest)),
            ("the three longest", longest_gaps(&v.hand_offs, 3)),
            (
                "hand-off time p50 / p99, graceful",
                format!("{graceful_gaps}, n = {graceful}"),
            ),
            (
                "hand-off time p50 / p99, after a crash or lost Lease",
                format!("{crash_gaps}, n = {crashed}"),
            ),
        ];
        writeln!(f, "| | |")?;
        writeln!(f, "|---|---|")?;
        for (name, value) in rows {
            writeln!(f, "| {name} | {value} |")?;
        }
        Ok(())
    }
}
