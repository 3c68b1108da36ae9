//! Helpers shared by the controller's integration tests: run the controller in-process, wait on
//! Lease conditions, watch for unsafe holder changes.
#![allow(dead_code)]

use conclave_controller::{self as controller, ControllerConfig};
use conclave_core::k8s::{lease_record, timestamp};
use conclave_core::lease::{ELECTED_BY_ANNOTATION, LeaseRecord};
use conclave_core::plan::Mode;
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::{CandidateResponder, lease_candidate};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Generous bound for waiting on conditions (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(90);

/// The namespace the emulator tests elect in.
pub const NS: &str = "default";

/// An emulator with frequent bookmarks, and a client for it.
pub async fn emulator() -> (RunningEmulator, Client) {
    let emulator = Emulator::start(EmulatorConfig {
        bookmark_interval: Duration::from_millis(500),
        ..EmulatorConfig::default()
    })
    .await
    .expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    (emulator, client)
}

/// A live candidate (it answers pings) for `lease` in [`NS`].
pub async fn candidate(
    client: &Client,
    name: &str,
    lease: &str,
    binary: &str,
    emulation: &str,
    strategy: &str,
) -> CandidateResponder {
    candidate_in(client, NS, name, lease, binary, emulation, strategy).await
}

/// A live candidate (it answers pings) for `lease` in namespace `ns`.
pub async fn candidate_in(
    client: &Client,
    ns: &str,
    name: &str,
    lease: &str,
    binary: &str,
    emulation: &str,
    strategy: &str,
) -> CandidateResponder {
    CandidateResponder::register(
        client.clone(),
        lease_candidate(ns, name, lease, binary, Some(emulation), strategy),
    )
    .await
    .expect("candidate registers")
}

/// Creates candidate `name` (version 1.31.0, OldestEmulationVersion) for `lease` in [`NS`] that
/// last renewed a minute ago, so a controller must ping it before electing it, and waits until a
/// controller has. Nothing answers the ping. `context` says more if the ping never comes.
pub async fn stale_candidate_pinged(
    candidates: &Api<LeaseCandidate>,
    name: &str,
    lease: &str,
    context: impl Fn() -> String,
) {
    let mut stale = lease_candidate(
        NS,
        name,
        lease,
        "1.31.0",
        Some("1.31.0"),
        conclave_core::strategy::OLDEST_EMULATION_VERSION,
    );
    stale.spec.as_mut().expect("spec").renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
        ));
    candidates
        .create(&PostParams::default(), &stale)
        .await
        .expect("create the stale candidate");
    let deadline = tokio::time::Instant::now() + WAIT;
    while candidates
        .get(name)
        .await
        .expect("read the candidate")
        .spec
        .and_then(|spec| spec.ping_time)
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no controller pinged {name}: {}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates the Lease `name` with `spec` through `leases`, as a component or operator would
/// before the controller sees it.
pub async fn create_lease(leases: &Api<Lease>, name: &str, spec: LeaseSpec) -> Lease {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| panic!("creating Lease {name}: {e}"))
}

/// A controller running in this process until dropped or stopped.
pub struct RunningController {
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), controller::Error>>>,
}

impl RunningController {
    /// Cancels the controller and waits for it to finish (graceful: releases its own Lease).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let result = task.await.expect("controller task joins");
            result.expect("controller ends cleanly");
        }
    }

    /// Aborts the controller task at once: no release, no drain. Dropping the elector's future
    /// aborts the current term's tasks (workers, candidate GC) too, so nothing keeps writing;
    /// the controller's Lease is left to expire. controller_ha.rs kills a `conclave run` process
    /// for a whole-process crash.
    pub fn crash(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for RunningController {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A test configuration: namespace `namespace`, mode `all`, short own-Lease timers.
pub fn config(namespace: &str, identity: &str) -> ControllerConfig {
    ControllerConfig {
        namespaces: vec![namespace.to_owned()],
        workers: 4,
        ack_window: Duration::from_secs(2),
        mode: Mode::All,
        identity: identity.to_owned(),
        controller_namespace: "kube-system".into(),
        own_lease_duration: Duration::from_secs(4),
        own_renew_deadline: Duration::from_secs(3),
        own_retry_period: Duration::from_millis(500),
        // Each test's namespace is new: no Lease of it existed before the controller's first
        // list. The tests of that hold set it back to the product's.
        unseen_lease_hold: Some(Duration::ZERO),
        ..ControllerConfig::default()
    }
}

/// The engine with the built-in plugins.
pub fn engine() -> Engine {
    Engine::new(EngineConfig::default()).expect("built-in plugins load")
}

/// Starts the controller with the built-in plugins.
pub fn start(client: Client, config: ControllerConfig) -> RunningController {
    start_deciding(client, Arc::new(engine()), config)
}

/// Starts the controller with `decider` deciding the elections.
pub fn start_deciding(
    client: Client,
    decider: Arc<dyn controller::Decide>,
    config: ControllerConfig,
) -> RunningController {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller::run(client, decider, config, shutdown.clone()));
    RunningController {
        shutdown,
        task: Some(task),
    }
}

/// Waits until the Lease satisfies `check`, returning its record.
pub async fn wait_lease(
    api: &Api<Lease>,
    name: &str,
    what: &str,
    check: impl Fn(&LeaseRecord) -> bool,
) -> LeaseRecord {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some(lease)) = api.get_opt(name).await {
            let record = lease_record(&lease);
            if check(&record) {
                return record;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}; Lease is {record:?}");
            }
        } else if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}; Lease {name} missing");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until an Event with `reason` exists for Lease `name`.
pub async fn wait_event(client: &Client, namespace: &str, name: &str, reason: &str) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(list) = api.list(&Default::default()).await
            && let Some(event) = list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        {
            return event;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for a {reason} Event on Lease {name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Watches one Lease and records every holder change that took the Lease from a live holder
/// (one whose previous record was neither released nor expired at the new renewTime): that
/// would be two leaders at once.
pub struct HolderAudit {
    violations: Arc<Mutex<Vec<String>>>,
    changes: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HolderAudit {
    /// Starts watching `name` through `api`.
    pub fn start(api: Api<Lease>, name: &str) -> Self {
        let violations: Arc<Mutex<Vec<String>>> = Arc::default();
        let changes: Arc<Mutex<Vec<String>>> = Arc::default();
        let (v, c) = (violations.clone(), changes.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff().applied_objects();
            futures::pin_mut!(stream);
            let mut previous: Option<LeaseRecord> = None;
            while let Some(item) = stream.next().await {
                let Ok(lease) = item else { continue };
                let record = lease_record(&lease);
                if let Some(prev) = &previous
                    && prev.holder() != record.holder()
                    && record.holder().is_some()
                {
                    c.lock()
                        .unwrap()
                        .push(record.holder().unwrap_or_default().to_owned());
                    let at = record
                        .renew_time
                        .unwrap_or_else(|| timestamp(jiff::Timestamp::now()));
                    if prev.holder().is_some() && !prev.is_expired(at) {
                        v.lock().unwrap().push(format!(
                            "{:?} replaced live holder {:?} (prev {prev:?}, new {record:?})",
                            record.holder(),
                            prev.holder()
                        ));
                    }
                }
                previous = Some(record);
            }
        });
        Self {
            violations,
            changes,
            task,
        }
    }

    /// Panics if any change replaced a live holder.
    pub fn assert_never_two_holders(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "two holders: {violations:#?}");
    }

    /// The holders the Lease changed to, in order.
    pub fn changes(&self) -> Vec<String> {
        self.changes.lock().unwrap().clone()
    }
}

impl Drop for HolderAudit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a [`CoordinatedHolder`] writes its renewals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderWrites {
    /// A full-object update (PUT) with the resourceVersion read, as client-go's LeaseLock does.
    Replace,
    /// A JSON merge patch carrying the resourceVersion read as precondition: the same guarantee
    /// through another verb, so faults injected on Lease updates reach only the controller.
    MergePatch,
}

/// A coordinated client for one identity: while the Lease names it as holder it renews every
/// 300 ms (3 s duration); when `preferredHolder` names someone else it releases the Lease (empty
/// holder, 1 s duration), as client-go's coordinated elector with release-on-cancel does. Every
/// write carries the resourceVersion just read; the resourceVersions of its successful writes
/// are kept, so a test can tell its writes from anyone else's.
pub struct CoordinatedHolder {
    task: tokio::task::JoinHandle<()>,
    released: Arc<Mutex<u32>>,
    written: Arc<Mutex<Vec<String>>>,
}

impl CoordinatedHolder {
    /// Starts renewing `name` for `identity` with full-object updates.
    pub fn start(api: Api<Lease>, name: &str, identity: &str) -> Self {
        Self::start_writing(api, name, identity, HolderWrites::Replace)
    }

    /// Starts renewing `name` for `identity`, writing as `writes` says.
    pub fn start_writing(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        writes: HolderWrites,
    ) -> Self {
        let released: Arc<Mutex<u32>> = Arc::default();
        let written: Arc<Mutex<Vec<String>>> = Arc::default();
        let (name, identity) = (name.to_owned(), identity.to_owned());
        let (count, rvs) = (released.clone(), written.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let Ok(Some(mut lease)) = api.get_opt(&name).await else {
                    continue;
                };
                let record = lease_record(&lease);
                if record.holder() != Some(identity.as_str()) {
                    continue;
                }
                let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    jiff::Timestamp::now(),
                );
                let step_down = record.preferred().is_some_and(|p| p != identity);
                let result = match writes {
                    HolderWrites::Replace => {
                        let spec = lease.spec.get_or_insert_with(Default::default);
                        if step_down {
                            spec.holder_identity = Some(String::new());
                            spec.lease_duration_seconds = Some(1);
                            spec.preferred_holder = None;
                        } else {
                            spec.lease_duration_seconds = Some(3);
                        }
                        spec.renew_time = Some(now);
                        api.replace(&name, &PostParams::default(), &lease).await
                    }
                    HolderWrites::MergePatch => {
                        let spec = if step_down {
                            serde_json::json!({
                                "holderIdentity": "",
                                "leaseDurationSeconds": 1,
                                "preferredHolder": null,
                                "renewTime": now,
                            })
                        } else {
                            serde_json::json!({"leaseDurationSeconds": 3, "renewTime": now})
                        };
                        let patch = serde_json::json!({
                            "metadata": {"resourceVersion": record.resource_version},
                            "spec": spec,
                        });
                        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                    }
                };
                if let Ok(written) = result {
                    rvs.lock()
                        .unwrap()
                        .push(written.metadata.resource_version.unwrap_or_default());
                    if step_down {
                        *count.lock().unwrap() += 1;
                    }
                }
            }
        });
        Self {
            task,
            released,
            written,
        }
    }

    /// How many times it stepped down.
    pub fn releases(&self) -> u32 {
        *self.released.lock().unwrap()
    }

    /// The resourceVersions of its successful writes (renewals and releases), in order.
    pub fn writes(&self) -> Vec<String> {
        self.written.lock().unwrap().clone()
    }
}

impl Drop for CoordinatedHolder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One observed version of a Lease: a write, as a watch delivered it.
#[derive(Debug, Clone)]
pub struct LeaseWrite {
    /// When the watch delivered it.
    pub seen_at: tokio::time::Instant,
    /// The Lease as written.
    pub record: LeaseRecord,
    /// Whether the Lease carries the `coordination.conclave.dev/elected-by` annotation (any
    /// value).
    pub elected_by_annotation: bool,
}

/// Records every write to the Leases of one namespace, once per resourceVersion, from a watch
/// started before the writes happen.
pub struct LeaseWrites {
    writes: Arc<Mutex<Vec<LeaseWrite>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseWrites {
    /// Starts watching every Lease of `api` (a namespaced Api); waits until the watch has
    /// listed, so later writes are not missed.
    pub async fn start(api: Api<Lease>) -> Self {
        let writes: Arc<Mutex<Vec<LeaseWrite>>> = Arc::default();
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let sink = writes.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            let mut listed = Some(listed_tx);
            let mut seen = std::collections::HashSet::new();
            while let Some(event) = stream.next().await {
                let lease = match event {
                    Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let record = lease_record(&lease);
                if !seen.insert((record.name.clone(), record.resource_version.clone())) {
                    continue;
                }
                let elected_by_annotation = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ELECTED_BY_ANNOTATION));
                sink.lock().unwrap().push(LeaseWrite {
                    seen_at: tokio::time::Instant::now(),
                    record,
                    elected_by_annotation,
                });
            }
        });
        tokio::time::timeout(WAIT, listed_rx)
            .await
            .expect("the Lease watch lists within the wait")
            .expect("the Lease watch runs");
        Self { writes, task }
    }

    /// The writes to Lease `name` seen so far, in the order the watch delivered them.
    pub fn of(&self, name: &str) -> Vec<LeaseWrite> {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.record.name == name)
            .cloned()
            .collect()
    }
}

impl Drop for LeaseWrites {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers pings of the LeaseCandidate `name` (renews it whenever `pingTime` is newer than
/// `renewTime`, with the resourceVersion read as precondition) until dropped: for a candidate
/// that exists already, e.g. one that was silent so far.
pub struct PingAnswerer {
    task: tokio::task::JoinHandle<()>,
}

impl PingAnswerer {
    /// Starts answering for `name` through `api`.
    pub fn start(api: Api<LeaseCandidate>, name: &str) -> Self {
        let name = name.to_owned();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(Some(mut candidate)) = api.get_opt(&name).await
                    && let Some(spec) = candidate.spec.as_mut()
                    && spec.ping_time.as_ref().is_some_and(|ping| {
                        spec.renew_time
                            .as_ref()
                            .is_none_or(|renew| ping.0 > renew.0)
                    })
                {
                    spec.renew_time =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                            jiff::Timestamp::now(),
                        ));
                    let _ = api.replace(&name, &PostParams::default(), &candidate).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { task }
    }
}

impl Drop for PingAnswerer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A free loopback address for a metrics server.
pub fn free_addr() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    probe.local_addr().expect("addr")
}

/// One plain HTTP/1.1 GET; returns the status line and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    try_http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

async fn try_http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    ))
}

/// The sum of every sample in the Prometheus text `body` whose series starts with `series`
/// (e.g. `conclave_api_writes_total{operation="lease_update"` sums over the other labels).
pub fn metric_sum(body: &str, series: &str) -> f64 {
    body.lines()
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit_once(' '))
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// The controller's `/metrics` at `addr`, once it answers 200.
pub async fn scrape(addr: std::net::SocketAddr) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Ok((status, body))) =
            tokio::time::timeout(Duration::from_secs(5), try_http_get(addr, "/metrics")).await
            && status.contains("200")
        {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/metrics at {addr} never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for the LeaseCandidate of Lease `lease` announcing `emulation_version`; returns its name.
pub async fn wait_candidate(
    api: &Api<LeaseCandidate>,
    lease: &str,
    emulation_version: &str,
) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(list) = api.list(&Default::default()).await
            && let Some(name) = list.items.iter().find_map(|c| {
                let spec = c.spec.as_ref()?;
                (spec.lease_name == lease
                    && spec.emulation_version.as_deref() == Some(emulation_version))
                .then(|| c.metadata.name.clone())
                .flatten()
            })
        {
            return name;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no candidate of {lease} with emulation version {emulation_version}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Renews `name` as `identity` every `every` (duration 10 s), as a leading component does, with
/// its clock `behind` the controller's, until stopped; returns the last renewal's wall time on
/// stop.
pub struct Renewer {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<jiff::Timestamp>,
}

impl Renewer {
    pub fn start(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        every: Duration,
        behind: jiff::SignedDuration,
    ) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let (name, identity, token) = (name.to_owned(), identity.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let mut last = jiff::Timestamp::now();
            loop {
                tokio::select! {
                    () = token.cancelled() => return last,
                    () = tokio::time::sleep(every) => {}
                }
                let Ok(Some(mut lease)) = api.get_opt(&name).await else {
                    continue;
                };
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some(identity.as_str()) {
                    continue;
                }
                let now = jiff::Timestamp::now();
                spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    now - behind,
                ));
                spec.lease_duration_seconds = Some(10);
                if api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
                    .is_ok()
                {
                    last = now;
                }
            }
        });
        Self { stop, task }
    }

    pub async fn crash(self) -> jiff::Timestamp {
        self.stop.cancel();
        self.task.await.expect("renewer joins")
    }
}

/// The failover tests' configuration: [`config`] with a 4 s ack window and 10 s Leases, so that
/// upstream's crash failover (lease + ack window, 14 s) and Conclave's (about 10 s) are far apart.
pub fn failover_config(namespace: &str, identity: &str) -> ControllerConfig {
    ControllerConfig {
        ack_window: Duration::from_secs(4),
        lease_duration_seconds: 10,
        ..config(namespace, identity)
    }
}

/// Elects `best` (emulation `older`) over `next` for Lease `crash` in `ns` under a running
/// controller ([`failover_config`]), renews as `best` every second for 3 s, then kills it (no
/// more renewals or ping answers; its LeaseCandidate stays), and returns how long after its last
/// renewal `next` was written as holder.
pub async fn crash_the_best_leader(
    client: &Client,
    ns: &str,
    binary: &str,
    older: &str,
) -> jiff::SignedDuration {
    use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let best = candidate_in(client, ns, "best", "crash", binary, older, OEV).await;
    let _next = candidate_in(client, ns, "next", "crash", binary, binary, OEV).await;
    wait_lease(&leases, "crash", "best elected", |r| {
        r.holder() == Some("best")
    })
    .await;
    let renewer = Renewer::start(
        leases.clone(),
        "crash",
        "best",
        Duration::from_secs(1),
        jiff::SignedDuration::ZERO,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    best.stop();
    let last_renewal = renewer.crash().await;
    wait_lease(&leases, "crash", "next elected", |r| {
        r.holder() == Some("next")
    })
    .await;
    jiff::Timestamp::now().duration_since(last_renewal)
}
