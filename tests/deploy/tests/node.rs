//! The chart on a real node: `helm install` of deploy/helm/conclave, the image built by
//! deploy/build-image.sh imported into the node's containerd, and Kubernetes itself scheduling,
//! starting, probing, restarting and evicting the replicas. What an operator's first install
//! relies on: both replicas Ready through the chart's own probes, exactly one active, the
//! PodDisruptionBudget counting them, the securityContext in force in the running containers,
//! plugins shipped in the chart's ConfigMap or as an image volume electing a Lease, a plugin
//! pushed to a registry and applied as a StrategyPlugin loading live in the running pods, and the
//! failures a real node brings (a killed container, a deleted pod, evictions). The README's quick
//! start runs here as written.
//!
//! The tests of this file take turns: each needs the machine's one node.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conclave_deploy_tests::image::{NONROOT, locate_image};
use conclave_deploy_tests::soak;
use conclave_deploy_tests::workloads::{
    self, COMPONENT, COMPONENT_NAMESPACE, CONCLAVE_FIELD_MANAGER, ElectionLook, HolderWrite,
    SCHEDULER, SCHEDULER_LEASE, SCHEDULER_NAMESPACE, SCHEDULER_PROFILE, component_manifest,
    is_identity_of, load_image, oldest_emulation_version_writers, record_holder_writes, rolled_out,
    scheduler_manifest, wait_taken_over,
};
use conclave_deploy_tests::{
    FULL_NAME, HA_LEASE, RELEASE_NAMESPACE, chart_path, locate_conclave, locate_helm,
    locate_kubectl, repo_root, run, run_with_env,
};
use conclave_testkit::wasm_build::build_plugins;
use conclave_testkit::{
    CandidateResponder, ControlPlane, KUBERNETES_VERSION, NODE_NAME, Node, Observer, PROBE_IMAGE,
    Registry, lease_candidate, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};

/// The tests here take turns on the machine's one node (`cluster.sh up` refuses to start while
/// another node runs, where the testkit's node would wait).
static NODE_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Generous: two controller pods start, compile their plugins and sync their caches on a busy
/// 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long an election through the plugin may take: at once, or after the first holder's
/// Lease expires (the chart's controller writes 15 s Leases) and the next is pinged.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one look (a `/readyz` or a Lease read) may take before a drill's log looks again.
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a drill looks at the replicas, so that its figure is precise to about this.
const DRILL_POLL: Duration = Duration::from_millis(50);
/// The namespace and name of the Lease elected through the priority plugin.
const ELECTION_NAMESPACE: &str = "default";
const ELECTION_LEASE: &str = "priority-demo";
/// The annotation `conclave.dev/priority` reads.
const PRIORITY_ANNOTATION: &str = "coordination.conclave.dev/priority";
/// The emulation version the example starts with, and the one it is rolled to.
const OLD_EMULATION: &str = "1.36.0";
const NEW_EMULATION: &str = "1.37.0";
/// The README's quick start works in this directory (its lines name it).
const QUICK_START_DIR: &str = "/tmp/conclave-cluster";

/// `GET http://ip:port/path`; the body of a 200 answer, or `None` (also when no answer comes
/// within [`LOOK_TIMEOUT`]: the address of a pod that is gone drops packets).
async fn http_get(ip: IpAddr, port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    };
    let answer = tokio::time::timeout(LOOK_TIMEOUT, exchange).await.ok()??;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")).then(|| body.to_owned())
}

/// The value of `key:` in a `/proc/<pid>/status` text.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// One controller pod as the drills see it.
#[derive(Clone, Debug)]
struct Replica {
    name: String,
    container_id: Option<String>,
    restarts: i32,
    /// `ok: active`, `ok: standby`, or empty when `/readyz` does not answer 200.
    role: String,
}

/// The chart's controller pods now (not being deleted), each with what its `/readyz` says.
async fn replicas(pods: &Api<Pod>) -> Result<Vec<Replica>, conclave_testkit::Error> {
    let listed = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={FULL_NAME}")))
        .await?;
    let mut found = Vec::new();
    for pod in listed.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = pod.status.unwrap_or_default();
        let container = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .next();
        let role = match status.pod_ip.as_deref().map(str::parse::<IpAddr>) {
            Some(Ok(ip)) => http_get(ip, 9090, "/readyz").await.unwrap_or_default(),
            _ => String::new(),
        };
        found.push(Replica {
            name: pod.metadata.name.unwrap_or_default(),
            container_id: container.as_ref().and_then(|c| c.container_id.clone()),
            restarts: container.map_or(0, |c| c.restart_count),
            role: role.trim().to_owned(),
        });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Waits until exactly two replicas answer, one `ok: active` and one `ok: standby`; returns
/// (active, standby).
async fn one_active_one_standby(pods: &Api<Pod>) -> (Replica, Replica) {
    wait_for(
        "one active and one standby replica",
        READY_TIMEOUT,
        || async {
            let now = replicas(pods).await?;
            let active: Vec<_> = now.iter().filter(|r| r.role == "ok: active").collect();
            let standby: Vec<_> = now.iter().filter(|r| r.role == "ok: standby").collect();
            Ok((now.len() == 2 && active.len() == 1 && standby.len() == 1)
                .then(|| (active[0].clone(), standby[0].clone())))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Polls until `replica` reports `ok: active`; the time that took from `since`.
async fn until_active(pods: &Api<Pod>, replica: &str, since: Instant) -> Duration {
    let deadline = since + READY_TIMEOUT;
    loop {
        let now = replicas(pods).await.unwrap_or_default();
        if now
            .iter()
            .any(|r| r.name == replica && r.role == "ok: active")
        {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{replica} did not become active: {now:#?}"
        );
        tokio::time::sleep(DRILL_POLL).await;
    }
}

/// The holders of the controller's own Lease, in the order an [`Observer`] saw them, and the
/// looks that failed.
#[derive(Clone, Debug, Default)]
struct HolderLog {
    seen: Vec<String>,
    failures: usize,
    last_failure: Option<String>,
}

/// Looks at the controller's own Lease every [`DRILL_POLL`] until dropped.
fn holder_log(kubeconfig: &Path) -> Observer<HolderLog> {
    Observer::start(
        kubeconfig.to_owned(),
        DRILL_POLL,
        LOOK_TIMEOUT,
        HolderLog::default(),
        |client| async move {
            let leases: Api<Lease> = Api::namespaced(client, RELEASE_NAMESPACE);
            let lease = leases.get(HA_LEASE).await?;
            Ok(lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default())
        },
        |log: &mut HolderLog, answer| match answer {
            Ok(holder) => {
                if log.seen.last() != Some(&holder) {
                    log.seen.push(holder);
                }
            }
            Err(error) => {
                log.failures += 1;
                log.last_failure = Some(error.to_string());
            }
        },
    )
    .expect("starting the holder log")
}

/// Looks every [`DRILL_POLL`] at who wrote the holder of each `OldestEmulationVersion` Lease in
/// the cluster (`metadata.managedFields`), until dropped: each change, in order.
fn holder_writes_log(kubeconfig: &Path) -> Observer<Vec<HolderWrite>> {
    Observer::start(
        kubeconfig.to_owned(),
        DRILL_POLL,
        LOOK_TIMEOUT,
        Vec::new(),
        |client| async move {
            let seen = jiff::Timestamp::now();
            Ok((seen, oldest_emulation_version_writers(&client).await?))
        },
        |log: &mut Vec<HolderWrite>, answer| {
            if let Ok((seen, look)) = answer {
                record_holder_writes(log, seen, look);
            }
        },
    )
    .expect("starting the holder writers' log")
}

/// Registers two live candidates of `conclave.dev/priority` for one Lease, `low` (priority 10,
/// the older emulation version: `OldestEmulationVersion` would pick it) and `high` (priority
/// 20), and waits until the controller made `high` the holder: only the plugin picks it.
async fn elect_through_the_priority_plugin(client: &Client) -> Vec<CandidateResponder> {
    elect_through_priority(client, ELECTION_LEASE).await
}

/// [`elect_through_the_priority_plugin`] for the Lease `lease`, with candidates named after it
/// (`LEASE-low`, `LEASE-high`) unless it is [`ELECTION_LEASE`].
async fn elect_through_priority(client: &Client, lease: &str) -> Vec<CandidateResponder> {
    let name = |who: &str| {
        if lease == ELECTION_LEASE {
            who.to_owned()
        } else {
            format!("{lease}-{who}")
        }
    };
    let mut responders = Vec::new();
    for (who, priority, emulation) in [("low", "10", "1.36.0"), ("high", "20", "1.37.0")] {
        let mut candidate = lease_candidate(
            ELECTION_NAMESPACE,
            &name(who),
            lease,
            "1.37.0",
            Some(emulation),
            "conclave.dev/priority",
        );
        candidate.metadata.annotations =
            Some([(PRIORITY_ANNOTATION.to_owned(), priority.to_owned())].into());
        responders.push(
            CandidateResponder::register(client.clone(), candidate)
                .await
                .expect("registering a candidate"),
        );
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), ELECTION_NAMESPACE);
    let high = name("high");
    let spec = wait_for(
        "the priority plugin's winner holds the Lease",
        ELECTION_TIMEOUT,
        || {
            let (leases, high) = (leases.clone(), high.clone());
            async move {
                let spec = leases.get_opt(lease).await?.and_then(|l| l.spec);
                Ok(spec.filter(|s| s.holder_identity.as_deref() == Some(high.as_str())))
            }
        },
    )
    .await
    .expect("elected through the plugin");
    assert_eq!(spec.strategy.as_deref(), Some("conclave.dev/priority"));
    responders
}

/// `kubectl conclave status -A` (the binary on PATH as `kubectl-conclave`, as krew installs it)
/// names the Lease, its strategy and its holder, and predicts the same winner with the plugins.
fn assert_status_shows_the_election(kubectl: &Path, kubeconfig: &Path, plugins: &Path) {
    let Some(conclave) = locate_conclave() else {
        return;
    };
    let bin = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(&conclave, bin.path().join("kubectl-conclave")).expect("symlink");
    let path = std::env::join_paths(std::iter::once(bin.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    // The controller's plugin directory holds priority.wasm only (the build directory holds
    // every plugin, the built-in's too, which `status` refuses to load twice).
    let only_priority = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        plugins.join("priority.wasm"),
        only_priority.path().join("priority.wasm"),
    )
    .expect("copying priority.wasm");
    let plugins = only_priority.path().to_string_lossy().into_owned();
    let out = run_with_env(
        kubectl,
        &["conclave", "status", "-A", "--plugins", &plugins],
        None,
        &[("KUBECONFIG", kubeconfig), ("PATH", Path::new(&path))],
    )
    .expect("kubectl conclave status");
    out.assert_success();
    eprintln!("kubectl conclave status -A:\n{}", out.stdout);
    let lease = format!("{ELECTION_NAMESPACE}/{ELECTION_LEASE}");
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&lease))
        .unwrap_or_else(|| panic!("no row for {lease}:\n{}", out.stdout));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[1], "conclave.dev/priority", "{row}");
    assert_eq!(columns[2], "high", "{row}");
    assert!(row.contains("high"), "predicts high: {row}");
}

/// `kubectl logs` of `pod` shows the write that made `high` the holder of the Lease.
fn assert_logs_show_the_election(kubectl: &Path, kubeconfig: &Path, pod: &str) {
    let lease = format!("\"lease\":\"{ELECTION_NAMESPACE}/{ELECTION_LEASE}\"");
    let (written, log) =
        lease_written_in_log(kubectl, kubeconfig, pod, &lease, "\"winner\":\"high\"");
    let written =
        written.unwrap_or_else(|| panic!("no election of {lease} in the log of {pod}:\n{log}"));
    eprintln!("kubectl logs {pod}: {written}");
}

/// The first line of `kubectl logs` of the controller replica `pod` saying it wrote the Lease
/// `lease` (a `"lease":"ns/name"` field) with `winner` (a `"winner":...` field or a prefix of
/// one), and the whole log.
fn lease_written_in_log(
    kubectl: &Path,
    kubeconfig: &Path,
    pod: &str,
    lease: &str,
    winner: &str,
) -> (Option<String>, String) {
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let out = run(
        kubectl,
        &[
            "--kubeconfig",
            &kubeconfig,
            "logs",
            "-n",
            RELEASE_NAMESPACE,
            pod,
        ],
        None,
    )
    .expect("kubectl logs");
    out.assert_success();
    let written = out
        .stdout
        .lines()
        .find(|l| l.contains("\"Lease written\"") && l.contains(winner) && l.contains(lease))
        .map(str::to_owned);
    (written, out.stdout)
}

/// The chart installed from `chart`'s ConfigMap plugins, its replicas Ready, one active.
async fn wait_deployment_ready(client: &Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let ready = wait_for("both replicas Ready", READY_TIMEOUT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get(FULL_NAME).await?;
            let ready = d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2);
            Ok(ready.then_some(()))
        }
    })
    .await;
    if let Err(e) = ready {
        let listed = pods.list(&ListParams::default()).await;
        let statuses = listed.map(|l| l.items.into_iter().map(|p| p.status).collect::<Vec<_>>());
        panic!("{e}\npods: {statuses:#?}");
    }
}

/// One look at the example component's election: the Lease first, then the candidates (a
/// candidate of the old version listed after the Lease was read existed when it was read: none
/// is created once the roll starts).
/// Prints `kubectl get pods -A -o wide`: where every Pod of the cluster ended up.
fn print_pods_wide(kubectl: &Path, kubeconfig: &Path) {
    let kubeconfig = kubeconfig.to_string_lossy();
    let listed = run(
        kubectl,
        &[
            "--kubeconfig",
            &kubeconfig,
            "get",
            "pods",
            "-A",
            "-o",
            "wide",
        ],
        None,
    )
    .expect("kubectl get pods");
    listed.assert_success();
    eprintln!("kubectl get pods -A -o wide:\n{}", listed.stdout);
}

/// A look at the example component's election.
async fn look_at_election(client: &Client) -> Result<ElectionLook, kube::Error> {
    workloads::look_at_election(client, COMPONENT_NAMESPACE, COMPONENT).await
}

/// Looks at the example component's election every [`DRILL_POLL`] until dropped; the looks
/// that answered, in order.
fn election_log(kubeconfig: &Path) -> Observer<Vec<ElectionLook>> {
    Observer::start(
        kubeconfig.to_owned(),
        DRILL_POLL,
        LOOK_TIMEOUT,
        Vec::new(),
        |client| async move { Ok(look_at_election(&client).await?) },
        |looks: &mut Vec<ElectionLook>, answer| looks.extend(answer.ok()),
    )
    .expect("starting the election log")
}

/// Waits until `election` has answered a look, so a drill started after this is seen from its
/// start (an observer's looks time out under load, and are then left out).
async fn first_answered_look(election: &Observer<Vec<ElectionLook>>) {
    let deadline = Instant::now() + ELECTION_TIMEOUT;
    while election.state().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the election log answered none of its {} looks in {ELECTION_TIMEOUT:?}",
            election.looks()
        );
        tokio::time::sleep(DRILL_POLL).await;
    }
}

/// Every change of holder in `looks`: (from, to, the time between the last look at the old
/// holder and the first at the new, whether the new holder was seen before the old one's Lease
/// could have expired).
fn hand_offs(looks: &[ElectionLook]) -> Vec<(String, String, Duration, bool)> {
    let mut found = Vec::new();
    let mut last: Option<&ElectionLook> = None;
    for look in looks {
        let Some(holder) = &look.holder else { continue };
        if let Some(previous) = last
            && previous.holder.as_ref() != Some(holder)
        {
            // Seen holding before the old holder's Lease could have expired: it was handed over,
            // not taken at expiry.
            let graceful = previous.renewed.is_some_and(|(renewed, seconds)| {
                look.wall < renewed + jiff::SignedDuration::from_secs(seconds)
            });
            found.push((
                previous.holder.clone().unwrap_or_default(),
                holder.clone(),
                look.at - previous.at,
                graceful,
            ));
        }
        last = Some(look);
    }
    found
}

/// Counts the replicas answering `ok: active` every [`DRILL_POLL`] until dropped: the most seen
/// at once, and what they said then.
///
/// The replicas are asked one after the other, so a hand-off between two answers would read as
/// two replicas active at once. Each look therefore asks every replica twice, in two rounds, and
/// counts a replica active only when both its answers say so: two replicas counted active were
/// both active when the second of them first answered.
fn active_log(kubeconfig: &Path) -> Observer<(usize, Vec<Replica>)> {
    Observer::start(
        kubeconfig.to_owned(),
        DRILL_POLL,
        LOOK_TIMEOUT,
        (0, Vec::new()),
        |client| async move {
            let pods = Api::namespaced(client, RELEASE_NAMESPACE);
            let first = replicas(&pods).await?;
            let mut second = replicas(&pods).await?;
            for replica in &mut second {
                let before = first.iter().find(|f| f.name == replica.name);
                let said = before.map_or("", |f| f.role.as_str());
                if said != replica.role {
                    replica.role = format!("{} (first {said:?})", replica.role);
                }
            }
            Ok(second)
        },
        |most: &mut (usize, Vec<Replica>), answer| {
            if let Ok(now) = answer {
                let active = now.iter().filter(|r| r.role == "ok: active").count();
                if active > most.0 {
                    *most = (active, now);
                }
            }
        },
    )
    .expect("starting the active replicas' log")
}

/// Registers a new pair of `conclave.dev/priority` candidates for a fresh Lease every second
/// until `stop` is set: Leases that need an election while the controller is being replaced.
/// Returns each Lease's name and when its candidates were registered, and the responders.
async fn elections_while(
    client: Client,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<(String, jiff::Timestamp)>, Vec<CandidateResponder>) {
    let mut leases = Vec::new();
    let mut responders = Vec::new();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let lease = format!("roll-{n}");
        let registered = jiff::Timestamp::now();
        for (name, priority) in [("a", "10"), ("b", "20")] {
            let mut candidate = lease_candidate(
                ELECTION_NAMESPACE,
                &format!("{lease}-{name}"),
                &lease,
                "1.37.0",
                Some("1.37.0"),
                "conclave.dev/priority",
            );
            candidate.metadata.annotations =
                Some([(PRIORITY_ANNOTATION.to_owned(), priority.to_owned())].into());
            responders.push(
                CandidateResponder::register(client.clone(), candidate)
                    .await
                    .expect("registering a candidate"),
            );
        }
        leases.push((lease, registered));
        n += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (leases, responders)
}

/// The chart's PodDisruptionBudget once the disruption controller has counted both replicas
/// healthy for the current pods (its status lags pods that come and go).
async fn healthy_budget(budgets: &Api<PodDisruptionBudget>) -> PodDisruptionBudgetStatus {
    wait_for(
        "the PodDisruptionBudget counting 2 healthy replicas and allowing 1 disruption",
        READY_TIMEOUT,
        || {
            let budgets = budgets.clone();
            async move {
                let budget = budgets.get(FULL_NAME).await?;
                let status = budget.status.clone().unwrap_or_default();
                let current = status.observed_generation == budget.metadata.generation;
                Ok((current
                    && status.current_healthy == 2
                    && status.expected_pods == 2
                    && status.disruptions_allowed == 1
                    && status
                        .disrupted_pods
                        .as_ref()
                        .is_none_or(BTreeMap::is_empty))
                .then_some(status))
            }
        },
    )
    .await
    .expect("the PodDisruptionBudget")
}

/// The candidate of the component's Pod `pod` whose container the kubelet restarted after the
/// process leading as `killed` died: a candidate of that Pod under another identity.
async fn rejoined_candidate(client: &Client, pod: &str, killed: &str) -> String {
    wait_for(
        "the killed component back as a candidate",
        READY_TIMEOUT,
        || async {
            let look = look_at_election(client).await?;
            Ok(look
                .candidates
                .iter()
                .find(|(name, _)| is_identity_of(name, pod) && *name != killed)
                .map(|(name, _)| name.clone()))
        },
    )
    .await
    .expect("the restarted component's candidate")
}

/// The note of the `HolderDead` Event on the component's Lease that names `holder` dead (pod
/// liveness fired for it), once there is one.
async fn holder_dead_note(
    events: &Api<K8sEvent>,
    holder: &str,
) -> Result<String, conclave_testkit::Error> {
    let dead = format!("{holder} is dead");
    wait_for(
        "a HolderDead Event naming the holder",
        ELECTION_TIMEOUT,
        || async {
            let listed = events.list(&ListParams::default()).await?;
            Ok(listed.items.into_iter().find_map(|e| {
                let note = e.note.unwrap_or_default();
                (e.reason.as_deref() == Some("HolderDead")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(COMPONENT)
                    && note.starts_with(&dead))
                .then_some(note)
            }))
        },
    )
    .await
}

/// The component's leader once its election has settled: the same holder, nobody preferred, at
/// two looks 3 s apart, with at least 3 candidates.
async fn settled_component_leader(client: &Client) -> String {
    wait_for("a settled component leader", ELECTION_TIMEOUT, || async {
        let settled = |look: &ElectionLook| {
            look.holder
                .clone()
                .filter(|_| look.preferred.is_none() && look.candidates.len() >= 3)
        };
        let first = settled(&look_at_election(client).await?);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let second = settled(&look_at_election(client).await?);
        Ok(if first == second { first } else { None })
    })
    .await
    .expect("a settled component leader")
}

/// The Pod of the component replica leading as `leader`, and its container's ID as the kubelet
/// reports it (`containerd://…`).
async fn leading_container(pods: &Api<Pod>, leader: &str) -> (String, String) {
    leading_container_of(pods, COMPONENT, leader).await
}

/// The Pod of the replica of the app labelled `app` (`app.kubernetes.io/name`) leading as
/// `leader`, and its container's ID as the kubelet reports it.
async fn leading_container_of(pods: &Api<Pod>, app: &str, leader: &str) -> (String, String) {
    let listed = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={app}")))
        .await
        .expect("the app's pods");
    listed
        .items
        .into_iter()
        .find_map(|pod| {
            let name = pod.metadata.name?;
            let id = pod
                .status?
                .container_statuses?
                .into_iter()
                .next()?
                .container_id?;
            is_identity_of(leader, &name).then_some((name, id))
        })
        .unwrap_or_else(|| panic!("no running pod of the leader {leader}"))
}

/// Prints, for a failed drill, the component's election Events and what each controller
/// replica logged about its Lease and its Events.
async fn print_elections(
    events: &Api<K8sEvent>,
    kubectl: &Path,
    kubeconfig: &Path,
    pods: &Api<Pod>,
) {
    if let Ok(listed) = events.list(&ListParams::default()).await {
        for e in listed.items.iter().filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("HolderDead" | "Elected" | "Preempted")
            )
        }) {
            eprintln!(
                "event {:?} {:?} {:?} related {:?} series {:?}",
                e.event_time.as_ref().map(|t| t.0),
                e.reason,
                e.note,
                e.related.as_ref().and_then(|r| r.name.as_deref()),
                e.series.as_ref().map(|s| s.count)
            );
        }
    }
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    for replica in replicas(pods).await.unwrap_or_default() {
        let Ok(out) = run(
            kubectl,
            &[
                "--kubeconfig",
                &kubeconfig,
                "logs",
                "-n",
                RELEASE_NAMESPACE,
                &replica.name,
            ],
            None,
        ) else {
            continue;
        };
        eprintln!("kubectl logs {} ({}):", replica.name, replica.role);
        for line in out.stdout.lines().filter(|l| {
            l.contains(&format!("{COMPONENT_NAMESPACE}/{COMPONENT}")) || l.contains("Event")
        }) {
            eprintln!("  {line}");
        }
    }
}

/// How many `HolderDead` Events the controller published in the example's namespace.
async fn count_holder_dead(events: &Api<K8sEvent>) -> usize {
    events
        .list(&ListParams::default())
        .await
        .expect("listing Events")
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("HolderDead"))
        .count()
}

/// Base64 and hex SHA-256 of a file, as an operator computes them for the chart's values.
fn base64_and_sha256(file: &Path) -> (String, String) {
    let file = file.to_string_lossy().into_owned();
    let base64 = run(Path::new("base64"), &["-w0", &file], None).expect("base64");
    base64.assert_success();
    let sha256 = run(Path::new("sha256sum"), &[&file], None).expect("sha256sum");
    sha256.assert_success();
    let digest = sha256.stdout.split_whitespace().next().expect("a digest");
    (base64.stdout.trim().to_owned(), digest.to_owned())
}

/// [`workloads::install_chart_on_one_node`], which must succeed.
fn helm_install_on_one_node(helm: &Path, plane: &ControlPlane, image: &str, values: &[&str]) {
    workloads::install_chart_on_one_node(helm, plane, image, values).expect("helm install");
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_on_a_real_node_runs_one_active_and_one_standby_replica() {
    let _turn = NODE_TESTS.lock().await;
    let Some(image) = locate_image().expect("locating the image") else {
        return;
    };
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let Some(kubectl) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(mut node) = Node::start(&plane).await.expect("node") else {
        return;
    };

    // No registry: the image goes from the podman store into containerd, as `cluster.sh load`.
    load_image(&image, &node, &image.reference).expect("loading the image into the node");

    // The beta plugin conclave.dev/priority, shipped in the chart's ConfigMap.
    let plugins = build_plugins(&["priority"]);
    let (wasm_base64, wasm_sha256) = base64_and_sha256(&plugins.join("priority.wasm"));

    let (repository, _tag) = image
        .reference
        .rsplit_once(':')
        .expect("the image reference has a tag");
    let kubeconfig = plane.kubeconfig_path().to_string_lossy().into_owned();
    let chart = chart_path().to_string_lossy().into_owned();
    let wasm = format!("plugins.configMap.items[0].wasm={wasm_base64}");
    let sha256 = format!("plugins.configMap.items[0].sha256={wasm_sha256}");
    let install_values = [
        "--set",
        "plugins.source=configMap",
        "--set",
        "plugins.configMap.items[0].name=priority",
        "--set-string",
        &wasm,
        "--set",
        &sha256,
    ];
    helm_install_on_one_node(&helm, &plane, &image.reference, &install_values);

    // Conclave elects every Lease here, the components' OldestEmulationVersion ones too: the
    // chart's defaults (`controller.mode=auto`, `controller.takeOver=on`) take over from
    // kube-apiserver's built-in controller. Every holder of such a Lease from now on is written
    // by Conclave (its field manager owns `spec.holderIdentity`), through the controller's
    // fail-overs, its rolling update and the components' drills below.
    let installed = Instant::now();
    let writes = holder_writes_log(plane.kubeconfig_path());
    let client = plane.client().await.expect("client");
    let (taken_by, _) = wait_taken_over(&client, READY_TIMEOUT)
        .await
        .expect("the chart's take-over");
    eprintln!(
        "take-over: {taken_by} holds the built-in controller's Lease {:.1} s after helm install",
        installed.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    wait_deployment_ready(&client).await;
    let (active, standby) = one_active_one_standby(&pods).await;
    eprintln!("active: {}, standby: {}", active.name, standby.name);

    // The PodDisruptionBudget counts both replicas and allows one disruption.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let budget = healthy_budget(&budgets).await;
    assert_eq!(budget.disruptions_allowed, 1, "{budget:?}");

    // The securityContext, read from the running containers' processes.
    for replica in [&active, &standby] {
        let id = replica
            .container_id
            .as_deref()
            .expect("a running container");
        let pid = node.container_pid(id).expect("the container's pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let uids: Vec<&str> = status_field(&status, "Uid")
            .expect("Uid")
            .split_whitespace()
            .collect();
        let nonroot = NONROOT.to_string();
        assert_eq!(uids, [nonroot.as_str(); 4], "runs as {NONROOT}");
        assert_eq!(
            status_field(&status, "NoNewPrivs"),
            Some("1"),
            "no privilege escalation"
        );
        assert_eq!(
            status_field(&status, "CapEff"),
            Some("0000000000000000"),
            "no capabilities"
        );
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mounts");
        let root = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(4) == Some(&"/"))
            .expect("the root mount");
        assert!(
            root[5].split(',').any(|o| o == "ro"),
            "read-only root file system: {root:?}"
        );
    }

    // A Lease elected through the plugin from the ConfigMap, seen by the operator's tools.
    let _candidates = elect_through_the_priority_plugin(&client).await;
    assert_status_shows_the_election(&kubectl, plane.kubeconfig_path(), &plugins);
    assert_logs_show_the_election(&kubectl, plane.kubeconfig_path(), &active.name);

    // Drill: SIGKILL of the active replica's container. The kubelet restarts it; the standby
    // takes over once the killed replica's Lease expires, and the Lease never goes back to the
    // killed replica's identity after that.
    let holders = holder_log(plane.kubeconfig_path());
    let killed_at = Instant::now();
    node.kill_container(active.container_id.as_deref().expect("a container"))
        .expect("killing the active container");
    let took_over = until_active(&pods, &standby.name, killed_at).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let held = leases
        .get(HA_LEASE)
        .await
        .expect("the controller's Lease")
        .spec
        .expect("a spec");
    let taken_by = held.holder_identity.clone().unwrap_or_default();
    assert!(
        is_identity_of(&taken_by, &standby.name),
        "{} reports active but the Lease names {taken_by}",
        standby.name
    );
    eprintln!(
        "drill: SIGKILL of the active controller's container -> standby {} active after {:.2} s \
         (holder {taken_by}, leaseTransitions {:?}, seen {:?}, {} looks)",
        standby.name,
        took_over.as_secs_f64(),
        held.lease_transitions,
        holders.state(),
        holders.looks()
    );
    let restarted = wait_for(
        "the killed replica restarted, as a standby",
        READY_TIMEOUT,
        || {
            let pods = pods.clone();
            let name = active.name.clone();
            async move {
                let now = replicas(&pods).await?;
                Ok(now.into_iter().find(|r| {
                    r.name == name && r.restarts > active.restarts && r.role == "ok: standby"
                }))
            }
        },
    )
    .await
    .expect("the killed replica back");
    // The Lease never went back to the killed replica: the same holder, and no change of holder
    // (each one counts in leaseTransitions) since the take-over. Exact, where the holder log
    // only samples (it is kept for the message).
    let now_held = leases
        .get(HA_LEASE)
        .await
        .expect("the controller's Lease")
        .spec
        .expect("a spec");
    let log = holders.state();
    assert_eq!(
        (
            now_held.holder_identity.as_deref(),
            now_held.lease_transitions
        ),
        (Some(taken_by.as_str()), held.lease_transitions),
        "the Lease changed holder after the standby took it (holder log: {log:?}, {} looks)",
        holders.looks()
    );
    assert!(
        log.seen
            .iter()
            .skip_while(|h| !is_identity_of(h, &standby.name))
            .all(|h| !is_identity_of(h, &active.name)),
        "the killed replica held the Lease after the standby took it: {log:?}"
    );
    drop(holders);
    eprintln!(
        "the killed replica {} restarted ({} restarts) as a standby",
        restarted.name, restarted.restarts
    );

    // Drill: `kubectl delete pod` of the active replica. It releases its Lease on SIGTERM, so the
    // standby is active long before that Lease would have expired.
    let (active, standby) = one_active_one_standby(&pods).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let held = leases.get(HA_LEASE).await.expect("the controller's Lease");
    let held = held.spec.expect("a spec");
    let expiry =
        jiff::SignedDuration::from_secs(i64::from(held.lease_duration_seconds.unwrap_or(15)));
    let deleted_at = Instant::now();
    pods.delete(&active.name, &DeleteParams::default())
        .await
        .expect("deleting the active pod");
    let took_over = until_active(&pods, &standby.name, deleted_at).await;
    eprintln!(
        "drill: delete of the active controller's pod -> standby {} active after {:.2} s",
        standby.name,
        took_over.as_secs_f64()
    );
    let now_held = leases.get(HA_LEASE).await.expect("the controller's Lease");
    let now_held = now_held.spec.expect("a spec");
    let acquired = now_held.acquire_time.expect("an acquire time").0;
    let renewed = held.renew_time.expect("a renew time").0;
    assert!(
        acquired < renewed + expiry,
        "the standby acquired at {acquired}, not before the deleted replica's Lease expired \
         ({renewed} + {expiry}): no graceful release"
    );

    // Drill: evictions through the Eviction API, as `kubectl drain` does them: the node is
    // cordoned first, so that an evicted replica's replacement stays Pending. The budget lets one
    // replica go and refuses the second while the first is not replaced; once the node takes pods
    // again and the replacement is Ready, the second may go too.
    wait_deployment_ready(&client).await;
    let (first, second) = one_active_one_standby(&pods).await;
    let settled = healthy_budget(&budgets).await;
    eprintln!("the budget before the evictions: {settled:?}");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let cordon = |unschedulable: bool| {
        let nodes = nodes.clone();
        async move {
            let patch = serde_json::json!({"spec": {"unschedulable": unschedulable}});
            nodes
                .patch(NODE_NAME, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("cordoning the node");
        }
    };
    cordon(true).await;
    // One attempt per eviction, as `kubectl drain` reports a refusal (kube's default client
    // would retry the 429 for minutes).
    let evictions: Api<Pod> = Api::namespaced(
        plane
            .client_without_retries()
            .await
            .expect("a client without retries"),
        RELEASE_NAMESPACE,
    );
    evictions
        .evict(&first.name, &EvictParams::default())
        .await
        .expect("the first eviction is allowed");
    match evictions.evict(&second.name, &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 429, "{status:?}"),
        other => panic!(
            "the second eviction ({}) was not refused by the budget: {other:?}",
            second.name
        ),
    }
    cordon(false).await;
    wait_deployment_ready(&client).await;
    healthy_budget(&budgets).await;
    evictions
        .evict(&second.name, &EvictParams::default())
        .await
        .expect("the second eviction is allowed once the first replica was replaced");
    wait_deployment_ready(&client).await;
    let (active, standby) = one_active_one_standby(&pods).await;
    eprintln!(
        "drill: evictions with the node cordoned -> the budget refused the second until the first \
         was replaced; now active {}, standby {}",
        active.name, standby.name
    );

    // Drill: a rolling update of the controller to a new image tag. Never two replicas active at
    // once, and Leases that need an election while it rolls are elected.
    let rolled = format!("{repository}:roll");
    image
        .podman
        .run(&["tag", &image.reference, &rolled])
        .expect("podman tag")
        .assert_success();
    load_image(&image, &node, &rolled).expect("loading the image into the node");
    let actives = active_log(plane.kubeconfig_path());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = tokio::spawn(elections_while(client.clone(), Arc::clone(&stop)));
    let roll_started = Instant::now();
    run(
        &helm,
        &[
            "upgrade",
            FULL_NAME,
            &chart,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            RELEASE_NAMESPACE,
            "--reuse-values",
            "--set",
            "image.tag=roll",
        ],
        None,
    )
    .expect("running helm upgrade")
    .assert_success();
    rolled_out(&client, RELEASE_NAMESPACE, FULL_NAME, 2, READY_TIMEOUT)
        .await
        .expect("rolled out");
    let (active, _standby) = one_active_one_standby(&pods).await;
    let roll_took = roll_started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (roll_leases, _roll_candidates) = churn.await.expect("the elections during the roll");
    let (most, when) = actives.state();
    let looks = actives.looks();
    drop(actives);
    // A stalled observer would pass the check below without looking.
    assert!(
        looks >= 10,
        "the active replicas were looked at only {looks} times during the roll"
    );
    assert!(
        most <= 1,
        "{most} replicas active at once during the roll: {when:#?}"
    );
    let election_leases: Api<Lease> = Api::namespaced(client.clone(), ELECTION_NAMESPACE);
    let mut waits = Vec::new();
    for (lease, registered) in &roll_leases {
        let acquired = wait_for(&format!("{lease} elected"), ELECTION_TIMEOUT, || {
            let election_leases = election_leases.clone();
            async move {
                let spec = election_leases.get_opt(lease).await?.and_then(|l| l.spec);
                Ok(spec
                    .filter(|s| s.holder_identity.is_some())
                    .and_then(|s| s.acquire_time))
            }
        })
        .await
        .expect("every Lease of the roll elected");
        waits.push(acquired.0.duration_since(*registered).as_secs_f64());
    }
    waits.sort_by(f64::total_cmp);
    eprintln!(
        "drill: rolling the controller to a new tag took {:.1} s; {} Leases elected during it, \
         waiting {:.2} s at most (median {:.2} s); at most {most} replica active at once; now \
         active {}",
        roll_took.as_secs_f64(),
        waits.len(),
        waits.last().copied().unwrap_or_default(),
        waits.get(waits.len() / 2).copied().unwrap_or_default(),
        active.name
    );

    // Components as pods: the example Deployment of `conclave candidate` (3 replicas) elects
    // through the chart's controller.
    let apply = run(
        &kubectl,
        &["--kubeconfig", &kubeconfig, "apply", "-f", "-"],
        Some(&component_manifest(&image.reference).expect("the component's manifest")),
    )
    .expect("kubectl apply");
    apply.assert_success();
    rolled_out(&client, COMPONENT_NAMESPACE, COMPONENT, 3, READY_TIMEOUT)
        .await
        .expect("rolled out");
    let first = wait_for("the component elected", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look.holder.filter(|_| look.candidates.len() == 3))
    })
    .await
    .expect("a component leader");
    eprintln!("component leader: {first}");

    // A rolling upgrade by emulation version (maxUnavailable 0): the oldest emulation version
    // leads at every step, and each hand-off is a graceful release.
    let election = election_log(plane.kubeconfig_path());
    first_answered_look(&election).await;
    let components: Api<Deployment> = Api::namespaced(client.clone(), COMPONENT_NAMESPACE);
    let roll = serde_json::json!({"spec": {"template": {"spec": {"containers": [{
        "name": "component",
        "env": [{"name": "CONCLAVE_CANDIDATE_EMULATION_VERSION", "value": NEW_EMULATION}],
    }]}}}});
    components
        .patch(COMPONENT, &PatchParams::default(), &Patch::Strategic(roll))
        .await
        .expect("rolling the component");
    rolled_out(&client, COMPONENT_NAMESPACE, COMPONENT, 3, READY_TIMEOUT)
        .await
        .expect("rolled out");
    let new_leader = wait_for("a leader of the new version", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        let holder = look.holder.clone();
        Ok(holder.filter(|h| {
            look.candidates.len() == 3
                && look
                    .candidates
                    .iter()
                    .any(|(name, v)| name == h && v == NEW_EMULATION)
        }))
    })
    .await
    .expect("a leader after the roll");
    let looks = election.state();
    let asked = election.looks();
    drop(election);
    for look in &looks {
        let Some(holder) = &look.holder else { continue };
        let Some((_, version)) = look.candidates.iter().find(|(name, _)| name == holder) else {
            continue;
        };
        assert!(
            !(version == NEW_EMULATION && look.candidates.iter().any(|(_, v)| v == OLD_EMULATION)),
            "{holder} ({version}) led while a candidate of {OLD_EMULATION} was there: {look:?}"
        );
    }
    let handed = hand_offs(&looks);
    eprintln!("drill: rolling the component {OLD_EMULATION} -> {NEW_EMULATION}: {handed:?}");
    assert!(
        !handed.is_empty(),
        "no change of holder seen during the roll, though every replica was replaced: \
         {} of {asked} looks answered, holders from {:?} to {:?}",
        looks.len(),
        looks.first().map(|look| &look.holder),
        looks.last().map(|look| &look.holder),
    );
    assert!(
        handed.iter().all(|(_, _, _, graceful)| *graceful),
        "every hand-off of the roll was a release, not an expiry: {handed:?}"
    );
    eprintln!("component leader after the roll: {new_leader}");

    // SIGKILL of the leading component's container: the next leader is written, and the killed
    // replica, restarted by the kubelet, comes back under a new identity (a candidate like any
    // other, elected only by the controller); the old identity never leads again.
    let component_pods: Api<Pod> = Api::namespaced(client.clone(), COMPONENT_NAMESPACE);
    let (leading_name, leading_id) = leading_container(&component_pods, &new_leader).await;
    let election = election_log(plane.kubeconfig_path());
    first_answered_look(&election).await;
    let killed_at = Instant::now();
    node.kill_container(&leading_id)
        .expect("killing the leading component");
    let next = wait_for("the next component leader", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look.holder.filter(|h| *h != new_leader))
    })
    .await
    .expect("a next leader");
    let failover = killed_at.elapsed();
    let back = rejoined_candidate(&client, &leading_name, &new_leader).await;
    let looks: Vec<ElectionLook> = election
        .state()
        .into_iter()
        .filter(|l| l.at >= killed_at)
        .collect();
    drop(election);
    let killed_index = looks
        .iter()
        .position(|l| l.holder.as_deref() != Some(new_leader.as_str()))
        .unwrap_or(looks.len());
    assert!(
        looks[killed_index..]
            .iter()
            .all(|l| l.holder.as_deref() != Some(new_leader.as_str())),
        "the killed leader's identity held the Lease again: {looks:#?}"
    );
    // The kubelet's report that the leader's container terminated is what ended its term, not
    // the Lease's expiry: the controller said so on the Lease.
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), COMPONENT_NAMESPACE);
    let dead = holder_dead_note(&events, &new_leader)
        .await
        .expect("pod liveness fired");
    eprintln!(
        "drill: SIGKILL of the leading component {new_leader} -> next leader {next} after {:.2} s \
         ({}); the restarted container is the candidate {back}",
        failover.as_secs_f64(),
        dead
    );
    // SIGSTOP of the leading component's process: a stall the kubelet does not report (the
    // container still runs), so the controller fails over at the Lease's expiry, never before,
    // and without a HolderDead Event.
    let dead_before = count_holder_dead(&events).await;
    let (_, stalled_id) = leading_container(&component_pods, &next).await;
    let pid = node.container_pid(&stalled_id).expect("the leader's pid");
    let signal = |name: &str| {
        let out = run(
            Path::new("kill"),
            &[&format!("-{name}"), &pid.to_string()],
            None,
        )
        .expect("kill");
        out.assert_success();
    };
    let before = look_at_election(&client).await.expect("a look");
    let (renewed, seconds) = before.renewed.expect("the leader's renewal");
    signal("STOP");
    let after_stall = wait_for("a leader after the stall", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look.holder.clone().filter(|h| *h != next).map(|_| look))
    })
    .await;
    signal("CONT");
    let after_stall = after_stall.expect("the next leader after the stall");
    let expiry = renewed + jiff::SignedDuration::from_secs(seconds);
    assert!(
        after_stall.wall >= expiry,
        "the stalled leader {next} was replaced at {}, before its Lease expired at {expiry}",
        after_stall.wall
    );
    assert_eq!(
        count_holder_dead(&events).await,
        dead_before,
        "a stall is no evidence of death"
    );
    eprintln!(
        "drill: SIGSTOP of the leading component {next} -> next leader {} seen {:.2} s after its \
         Lease expired",
        after_stall.holder.as_deref().unwrap_or_default(),
        after_stall.wall.duration_since(expiry).as_secs_f64()
    );

    // An OOM kill of the leading component: the kernel kills its process when its container's
    // memory cgroup runs out (64Mi, the example's limit), the kubelet reports the container
    // `OOMKilled`, and the controller elects the next leader on that report (a HolderDead Event
    // naming the killed leader); the kubelet restarts the container, which rejoins as a
    // candidate under a new identity.
    // The stalled leader, once resumed, may take the Lease back (a better candidate): kill the
    // leader once the election has settled.
    let leader = settled_component_leader(&client).await;
    let (oom_pod, oom_container) = leading_container(&component_pods, &leader).await;
    let oomed_at = Instant::now();
    node.oom_kill_container(&oom_container)
        .expect("running the leading component out of memory");
    let after_oom = wait_for("a leader after the OOM kill", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look.holder.clone().filter(|h| *h != leader))
    })
    .await
    .expect("the next leader after the OOM kill");
    let oom_failover = oomed_at.elapsed();
    let reported = wait_for(
        "the container reported OOMKilled",
        READY_TIMEOUT,
        || async {
            let pod = component_pods.get(&oom_pod).await?;
            let status = pod
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.into_iter().next());
            Ok(status.and_then(|c| {
                [c.state, c.last_state]
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.terminated)
                    .find(|t| t.container_id.as_deref() == Some(oom_container.as_str()))
                    .map(|t| (t.reason.unwrap_or_default(), t.exit_code))
            }))
        },
    )
    .await
    .expect("the kubelet's report of the OOM kill");
    assert_eq!(
        reported.0, "OOMKilled",
        "the kubelet reported {reported:?} for the leader's container, not an OOM kill"
    );
    let dead = match holder_dead_note(&events, &leader).await {
        Ok(note) => note,
        Err(error) => {
            print_elections(&events, &kubectl, plane.kubeconfig_path(), &pods).await;
            panic!("pod liveness did not fire on the OOM kill of {leader}: {error}");
        }
    };
    let rejoined = rejoined_candidate(&client, &oom_pod, &leader).await;
    eprintln!(
        "drill: OOM kill of the leading component {leader} ({reported:?}) -> next leader {} \
         after {:.2} s ({dead}); the restarted container is the candidate {rejoined}",
        after_oom.as_str(),
        oom_failover.as_secs_f64()
    );

    // An eviction of the leading component's pod through the Eviction API (as `kubectl drain`
    // does): SIGTERM, the leader stops its work and releases, and the next leader is written
    // long before the Lease could have expired. Graceful, so no HolderDead: the kubelet reported
    // nothing dead while it was leading.
    // (The SIGKILLed process's candidate stays until the garbage collector takes it: 4 or more.)
    let leader = wait_for("a component leader", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look
            .holder
            .clone()
            .filter(|_| look.candidates.len() >= 3)
            .map(|_| look))
    })
    .await
    .expect("a component leader before the eviction");
    let leader_name = leader.holder.clone().unwrap_or_default();
    let (renewed, seconds) = leader.renewed.expect("the leader's renewal");
    let leader_pod = component_pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={COMPONENT}")))
        .await
        .expect("the component's pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .find(|name| is_identity_of(&leader_name, name))
        .unwrap_or_else(|| panic!("no pod of the leader {leader_name}"));
    let dead_before = count_holder_dead(&events).await;
    let evicted_at = Instant::now();
    component_pods
        .evict(&leader_pod, &EvictParams::default())
        .await
        .expect("evicting the leading component's pod");
    let after_eviction = wait_for("a leader after the eviction", ELECTION_TIMEOUT, || async {
        let look = look_at_election(&client).await?;
        Ok(look
            .holder
            .clone()
            .filter(|h| *h != leader_name)
            .map(|_| look))
    })
    .await
    .expect("the next leader after the eviction");
    let expiry = renewed + jiff::SignedDuration::from_secs(seconds);
    assert!(
        after_eviction.wall < expiry,
        "the evicted leader {leader_name} was replaced at {}, only once its Lease expired at \
         {expiry}: no graceful release",
        after_eviction.wall
    );
    assert_eq!(
        count_holder_dead(&events).await,
        dead_before,
        "a graceful eviction is no death"
    );
    eprintln!(
        "drill: eviction of the leading component's pod {leader_pod} -> next leader {} after \
         {:.2} s, {:.1} s before the evicted leader's Lease would have expired",
        after_eviction.holder.as_deref().unwrap_or_default(),
        after_eviction.at.duration_since(evicted_at).as_secs_f64(),
        expiry.duration_since(after_eviction.wall).as_secs_f64()
    );

    // kube-scheduler v1.37 as pods (its image FROM scratch, the control plane's own binary) with
    // the CoordinatedLeaderElection gate: its replicas only announce themselves, and the chart's
    // controller (which took over from the built-in one) writes one of them into the Lease. The
    // elected one schedules.
    let scheduler_image = node
        .import_kube_scheduler()
        .expect("importing kube-scheduler's image");
    run(
        &kubectl,
        &["--kubeconfig", &kubeconfig, "apply", "-f", "-"],
        Some(&scheduler_manifest(&scheduler_image).expect("kube-scheduler's manifest")),
    )
    .expect("kubectl apply")
    .assert_success();
    rolled_out(&client, SCHEDULER_NAMESPACE, SCHEDULER, 2, READY_TIMEOUT)
        .await
        .expect("rolled out");
    let scheduler_pods: Api<Pod> = Api::namespaced(client.clone(), SCHEDULER_NAMESPACE);
    let scheduler_names: Vec<String> = scheduler_pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={SCHEDULER}")))
        .await
        .expect("kube-scheduler's pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    let elected = wait_for("kube-scheduler elected", ELECTION_TIMEOUT, || async {
        let look =
            workloads::look_at_election(&client, SCHEDULER_NAMESPACE, SCHEDULER_LEASE).await?;
        Ok(look
            .holder
            .clone()
            .filter(|_| look.candidates.len() == 2)
            .map(|_| look))
    })
    .await
    .expect("kube-scheduler's Lease written");
    let holder = elected.holder.clone().unwrap_or_default();
    let strategy = elected.strategy;
    let candidates: Vec<String> = elected
        .candidates
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    // kube-scheduler's identity is its host name (the pod's name), `_`, a UUID.
    assert!(
        scheduler_names
            .iter()
            .any(|pod| holder.starts_with(&format!("{pod}_"))),
        "the holder {holder} is one of kube-scheduler's pods {scheduler_names:?}"
    );
    assert!(
        candidates.contains(&holder),
        "{holder} among {candidates:?}"
    );
    assert_eq!(strategy.as_deref(), Some("OldestEmulationVersion"));
    let (controller, _) = one_active_one_standby(&pods).await;
    let scheduler_lease = format!("\"lease\":\"{SCHEDULER_NAMESPACE}/{SCHEDULER_LEASE}\"");
    let winner = format!("\"winner\":\"{holder}\"");
    let written = wait_for(
        "the controller's log of kube-scheduler's election",
        ELECTION_TIMEOUT,
        || {
            let (kubectl, kubeconfig) = (kubectl.clone(), plane.kubeconfig_path().to_owned());
            let (name, lease, winner) = (
                controller.name.clone(),
                scheduler_lease.clone(),
                winner.clone(),
            );
            async move { Ok(lease_written_in_log(&kubectl, &kubeconfig, &name, &lease, &winner).0) }
        },
    )
    .await
    .expect("the active controller wrote kube-scheduler's Lease");
    // The elected kube-scheduler schedules a Pod that asks for it.
    let probe_pods: Api<Pod> = Api::namespaced(client.clone(), COMPONENT_NAMESPACE);
    let probe: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "scheduled-by-the-elected-scheduler"},
        "spec": {
            "schedulerName": SCHEDULER_PROFILE,
            "containers": [{
                "name": "probe",
                "image": PROBE_IMAGE,
                "imagePullPolicy": "Never",
            }],
        },
    }))
    .expect("a Pod");
    probe_pods
        .create(&Default::default(), &probe)
        .await
        .expect("creating a Pod for kube-scheduler");
    let bound = wait_for("the Pod scheduled", ELECTION_TIMEOUT, || async {
        let pod = probe_pods.get("scheduled-by-the-elected-scheduler").await?;
        Ok(pod.spec.and_then(|s| s.node_name))
    })
    .await
    .expect("kube-scheduler scheduled the Pod");
    assert_eq!(bound, NODE_NAME);
    eprintln!(
        "kube-scheduler {KUBERNETES_VERSION} as 2 pods: {holder} elected by {} ({written}); it \
         bound a Pod with schedulerName {SCHEDULER_PROFILE} to {}",
        controller.name, bound
    );
    print_pods_wide(&kubectl, plane.kubeconfig_path());

    // Everything above was elected by Conclave alone: since the install, every holder of an
    // OldestEmulationVersion Lease was written by Conclave's field manager.
    let conclave_phase = writes.state();
    let foreign: Vec<&HolderWrite> = conclave_phase
        .iter()
        .filter(|w| {
            w.writer
                .as_deref()
                .is_some_and(|m| m != CONCLAVE_FIELD_MANAGER)
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "holders written by another controller while Conclave had taken over: {foreign:#?}"
    );
    assert!(
        conclave_phase
            .iter()
            .any(|w| w.lease == format!("{SCHEDULER_NAMESPACE}/{SCHEDULER_LEASE}")),
        "the writers' log never saw kube-scheduler's Lease: {conclave_phase:#?}"
    );

    // Every replica killed while nothing restarts them (the kubelet frozen, as when the node the
    // replicas run on is lost): nobody renews the built-in's Lease, it expires and a
    // kube-apiserver's built-in controller leads again; the kubelet back, the replicas restart
    // and take over again. Around it, one controller wrote holders at a time.
    let crash_from = jiff::Timestamp::now();
    let (resumed_after_crash, builtin_duration, crash_taken_by, crash_acquired) =
        every_replica_killed_hands_back(&mut node, &pods, &plane, &client).await;
    eprintln!(
        "every replica killed: the built-in controller led again {:.1} s after the kills; \
         {crash_taken_by} took over again at {crash_acquired}",
        resumed_after_crash.as_secs_f64()
    );
    let uninstall_from = jiff::Timestamp::now();
    assert_one_writer_around_take_over(
        &writes.state(),
        crash_from..uninstall_from,
        crash_acquired,
        builtin_duration,
    );

    // `helm uninstall` hands the control plane's Leases back: no replica renews the built-in's
    // Lease (none releases it either), it expires, a kube-apiserver takes it and its built-in
    // controller elects again: kube-scheduler's next leader, after a SIGKILL of the current one,
    // is written by it.
    let scheduler_pods: Api<Pod> = Api::namespaced(client.clone(), SCHEDULER_NAMESPACE);
    run(
        &helm,
        &[
            "uninstall",
            FULL_NAME,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
        ],
        None,
    )
    .expect("running helm uninstall")
    .assert_success();
    let uninstalled = Instant::now();
    wait_for(
        "the built-in controller leading again",
        READY_TIMEOUT,
        || {
            let plane = &plane;
            async move { Ok(plane.builtin_controller_leading().await?.then_some(())) }
        },
    )
    .await
    .expect("kube-apiserver's built-in controller resumed");
    let resumed = uninstalled.elapsed();
    let builtin_phase_from = jiff::Timestamp::now();
    // kube-scheduler's leader once it is not `killed` and `writer` accepts who wrote it.
    let scheduler_leader = |killed: Option<String>, writer: fn(Option<&str>) -> bool| {
        let client = client.clone();
        async move {
            wait_for("kube-scheduler's next leader", ELECTION_TIMEOUT, || async {
                let leases: Api<Lease> = Api::namespaced(client.clone(), SCHEDULER_NAMESPACE);
                let lease = leases.get(SCHEDULER_LEASE).await?;
                let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
                let written_by = workloads::holder_writer(&lease);
                Ok(holder
                    .filter(|h| {
                        !h.is_empty() && killed.as_ref() != Some(h) && writer(written_by.as_deref())
                    })
                    .map(|h| (h, written_by)))
            })
            .await
        }
    };
    let (holder, _) = scheduler_leader(None, |_| true)
        .await
        .expect("a kube-scheduler leader");
    let killed_at = kill_scheduler_leader(&node, &scheduler_pods, &holder).await;
    let (next, builtin_writer) = scheduler_leader(Some(holder.clone()), |w| {
        w.is_some_and(|m| m != CONCLAVE_FIELD_MANAGER)
    })
    .await
    .expect("kube-scheduler's next leader, written by the built-in controller");
    eprintln!(
        "uninstall: the built-in controller led again {:.1} s after helm uninstall returned; it \
         wrote kube-scheduler's next leader {next} (field manager {builtin_writer:?}) {:.1} s after \
         a SIGKILL of {holder}",
        resumed.as_secs_f64(),
        killed_at.elapsed().as_secs_f64()
    );

    // Installed again, the chart takes over again. The replaced kube-apiserver may run its
    // controller until its renew deadline and release have passed, so Conclave writes a holder
    // only from three of its lease durations after the take-over, and the built-in writes none
    // after that: SIGKILL of kube-scheduler's leader at once, its next leader written by Conclave.
    helm_install_on_one_node(&helm, &plane, &image.reference, &install_values);
    let (taken_by, acquired) = wait_taken_over(&client, READY_TIMEOUT)
        .await
        .expect("the take-over after the re-install");
    let killed_at = kill_scheduler_leader(&node, &scheduler_pods, &next).await;
    let (elected, _) = scheduler_leader(Some(next.clone()), |w| w == Some(CONCLAVE_FIELD_MANAGER))
        .await
        .expect("kube-scheduler's next leader, written by Conclave");
    let all_writes = writes.state();
    drop(writes);
    assert_one_writer_around_take_over(
        &all_writes,
        builtin_phase_from..jiff::Timestamp::MAX,
        acquired,
        builtin_duration,
    );
    eprintln!(
        "re-install: {taken_by} took over at {acquired}; kube-scheduler's next leader {elected} \
         written by Conclave {:.1} s after a SIGKILL of {next}",
        killed_at.elapsed().as_secs_f64()
    );
}

/// SIGKILLs the container of kube-scheduler's leader `holder` through containerd; returns when.
async fn kill_scheduler_leader(node: &Node, scheduler_pods: &Api<Pod>, holder: &str) -> Instant {
    let (_, container) = leading_container_of(scheduler_pods, SCHEDULER, holder).await;
    let killed_at = Instant::now();
    node.kill_container(&container)
        .expect("killing kube-scheduler's leader");
    killed_at
}

/// The lease duration kube-apiserver gives the built-in controller's own Lease, in seconds, read
/// while a kube-apiserver holds it (Conclave's replicas write their own).
async fn builtin_lease_duration(client: &Client) -> i64 {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease = leases
        .get(workloads::BUILTIN_CONTROLLER_LEASE)
        .await
        .expect("the built-in's Lease");
    i64::from(
        lease
            .spec
            .and_then(|s| s.lease_duration_seconds)
            .expect("the apiserver's lease duration"),
    )
}

/// Asserts that among the holder `writes` seen in `window`, around a take-over by Conclave at
/// `acquired`, only one controller wrote at a time: the built-in controller before three of its
/// lease durations (`builtin_duration`, seconds) after `acquired` (the replaced kube-apiserver
/// may run its controller until its renew deadline and release have passed), Conclave from then.
fn assert_one_writer_around_take_over(
    writes: &[HolderWrite],
    window: std::ops::Range<jiff::Timestamp>,
    acquired: jiff::Timestamp,
    builtin_duration: i64,
) {
    let conclave_from = acquired + jiff::SignedDuration::from_secs(3 * builtin_duration);
    for write in writes.iter().filter(|w| window.contains(&w.seen)) {
        match write.writer.as_deref() {
            Some(CONCLAVE_FIELD_MANAGER) => assert!(
                write.seen >= conclave_from,
                "Conclave wrote a holder at {} after taking over at {acquired}, before the \
                 replaced controller had surely stopped ({conclave_from}): {writes:#?}",
                write.seen
            ),
            Some(_) => assert!(
                write.seen < conclave_from,
                "the built-in controller wrote a holder at {}, after Conclave had taken over at \
                 {acquired}: {writes:#?}",
                write.seen
            ),
            None => {}
        }
    }
}

/// Kills every Conclave replica's container through containerd while the kubelet is frozen, so
/// that none restarts: waits until kube-apiserver's built-in controller leads again, then lets
/// the kubelet restart them and waits until one takes over again and the built-in controller
/// has stopped leading. Returns how long after the
/// kills the built-in led, the lease duration its kube-apiserver then wrote (seconds), and who
/// took over when.
async fn every_replica_killed_hands_back(
    node: &mut Node,
    pods: &Api<Pod>,
    plane: &ControlPlane,
    client: &Client,
) -> (Duration, i64, String, jiff::Timestamp) {
    let (active, standby) = one_active_one_standby(pods).await;
    assert!(node.suspend_kubelet(), "the kubelet runs");
    for replica in [&active, &standby] {
        let container = replica
            .container_id
            .as_deref()
            .expect("a running container");
        node.kill_container(container)
            .unwrap_or_else(|e| panic!("killing {}: {e}", replica.name));
    }
    let killed = Instant::now();
    let resumed = wait_for(
        "the built-in controller leading again",
        READY_TIMEOUT,
        || async { Ok(plane.builtin_controller_leading().await?.then_some(())) },
    )
    .await;
    // The kubelet runs again before any assertion, so that a failure leaves a working node.
    assert!(node.resume_kubelet(), "the kubelet still runs");
    resumed.expect("kube-apiserver's built-in controller resumed after every replica was killed");
    let resumed_after = killed.elapsed();
    let builtin_duration = builtin_lease_duration(client).await;
    let (taken_by, acquired) = wait_taken_over(client, READY_TIMEOUT)
        .await
        .expect("the take-over once the replicas restarted");
    wait_for(
        "the built-in controller to stop leading",
        READY_TIMEOUT,
        || async { Ok((!plane.builtin_controller_leading().await?).then_some(())) },
    )
    .await
    .expect("the built-in controller stops leading after the take-over");
    (resumed_after, builtin_duration, taken_by, acquired)
}

/// Guard for the README's quick-start cluster: stops it and removes its directory when dropped.
struct QuickStartCluster;

impl QuickStartCluster {
    fn down() {
        let dir = Path::new(QUICK_START_DIR);
        if dir.join("pids").exists() {
            let script = repo_root().join("tests/kube/cluster.sh");
            let out = run(
                Path::new("bash"),
                &[&script.to_string_lossy(), "down", QUICK_START_DIR],
                None,
            );
            if let Ok(out) = out
                && !out.success()
            {
                eprintln!("cluster.sh down: {}", out.stderr);
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

impl Drop for QuickStartCluster {
    fn drop(&mut self) {
        Self::down();
    }
}

/// The shell block right after the README's "### Try it on one machine" heading.
fn readme_quick_start() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let section = readme
        .split_once("### Try it on one machine")
        .expect("the README's quick start")
        .1;
    let block = section
        .split_once("```sh\n")
        .expect("a shell block")
        .1
        .split_once("```")
        .expect("the end of the block")
        .0;
    block.to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_quick_start_runs_as_written_and_elects_through_an_image_volume_plugin() {
    let _turn = NODE_TESTS.lock().await;
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let Some(kubectl) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    // What the README's lines need on this machine; the same checks as the testkit's node.
    let Some(_image) = locate_image().expect("podman") else {
        return;
    };
    let Some(plane) = ControlPlane::start()
        .await
        .expect("checking the control plane")
    else {
        return;
    };
    drop(plane);

    QuickStartCluster::down();
    let _cluster = QuickStartCluster;
    let block = readme_quick_start();
    // helm and kubectl as the README's reader has them: on PATH.
    let tools = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(&helm, tools.path().join("helm")).expect("symlink helm");
    std::os::unix::fs::symlink(&kubectl, tools.path().join("kubectl")).expect("symlink kubectl");
    let path: PathBuf = std::env::join_paths(std::iter::once(tools.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH")
    .into();
    let started = Instant::now();
    // A fresh shell's environment: nothing of the test build's cargo settings.
    let script = format!(
        "set -euo pipefail\nunset CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTFLAGS \
         CARGO_ENCODED_RUSTFLAGS\ncd {}\n{block}",
        repo_root().display()
    );
    let out = run_with_env(
        Path::new("bash"),
        &["-c", &script],
        None,
        &[("PATH", &path)],
    )
    .expect("running the quick start");
    assert!(
        out.success(),
        "the README's quick start failed:\n{block}\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    eprintln!(
        "the README's quick start ran in {:.0} s:\n{}",
        started.elapsed().as_secs_f64(),
        out.stderr
    );

    let kubeconfig = Path::new(QUICK_START_DIR).join("kubeconfig");
    let client = conclave_deploy_tests::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("the quick start's kubeconfig");
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let (active, _standby) = one_active_one_standby(&pods).await;
    let _candidates = elect_through_the_priority_plugin(&client).await;
    let plugins = repo_root().join("target/wasm/wasm32-wasip2/release");
    assert_status_shows_the_election(&kubectl, &kubeconfig, &plugins);
    assert_logs_show_the_election(&kubectl, &kubeconfig, &active.name);
    print_pods_wide(&kubectl, &kubeconfig);
}

/// `conclave strategy push FILE REFERENCE --plain-http`, as an author publishes a plugin;
/// returns the reference pinned by digest that it prints.
fn push_plugin(conclave: &Path, file: &Path, reference: &str) -> String {
    let file = file.to_string_lossy();
    let out = run(
        conclave,
        &["strategy", "push", &file, reference, "--plain-http"],
        None,
    )
    .expect("running conclave strategy push");
    out.assert_success();
    let pinned = out
        .stdout
        .lines()
        .find(|line| line.contains("@sha256:"))
        .unwrap_or_else(|| panic!("push printed no pinned reference:\n{}", out.stdout))
        .trim()
        .to_owned();
    assert!(pinned.starts_with(reference), "{pinned} is not {reference}");
    pinned
}

/// `kubectl apply` of the StrategyPlugin `name` pulling `reference`, which must provide
/// `strategy`.
fn apply_strategy_plugin(
    kubectl: &Path,
    kubeconfig: &Path,
    name: &str,
    reference: &str,
    strategy: &str,
) {
    let manifest = format!(
        "apiVersion: conclave.dev/v1alpha1\nkind: StrategyPlugin\nmetadata: {{name: {name}}}\n\
         spec:\n  source: {{oci: {{reference: \"{reference}\"}}}}\n  strategies: [{strategy}]\n"
    );
    let kubeconfig = kubeconfig.to_string_lossy();
    run(
        kubectl,
        &["--kubeconfig", &kubeconfig, "apply", "-f", "-"],
        Some(&manifest),
    )
    .expect("running kubectl apply")
    .assert_success();
}

/// `kubectl get strategyplugin NAME -o jsonpath=PATH`, once `check` accepts it (the controller
/// writes the status after each load).
async fn wait_strategy_plugin(
    kubectl: &Path,
    kubeconfig: &Path,
    name: &str,
    jsonpath: &str,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let jsonpath = format!("jsonpath={jsonpath}");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let out = run(
            kubectl,
            &[
                "--kubeconfig",
                &kubeconfig,
                "get",
                "strategyplugin",
                name,
                "-o",
                &jsonpath,
            ],
            None,
        )
        .expect("running kubectl get");
        if out.success() && check(&out.stdout) {
            return out.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for StrategyPlugin {name}: {what}; last: {}{}",
            out.stdout,
            out.stderr
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The Ready condition's reason of StrategyPlugin `name`, once it is `reason`.
async fn wait_plugin_reason(kubectl: &Path, kubeconfig: &Path, name: &str, reason: &str) {
    wait_strategy_plugin(
        kubectl,
        kubeconfig,
        name,
        r#"{.status.conditions[?(@.type=="Ready")].reason}"#,
        &format!("Ready's reason {reason}"),
        |got| got == reason,
    )
    .await;
}

/// The chart's replicas' restart counts, by pod name (see [`replicas`]).
async fn restart_counts(pods: &Api<Pod>) -> BTreeMap<String, i32> {
    replicas(pods)
        .await
        .expect("listing the replicas")
        .into_iter()
        .map(|replica| (replica.name, replica.restarts))
        .collect()
}

/// Issue 30's loop on a real node: an author pushes a plugin with `conclave strategy push` to a
/// registry the node's pods reach (Debian's docker-registry on the node's address, over plain
/// HTTP as the chart's `strategyPlugins.plainHttpRegistries` allows), an operator applies a
/// StrategyPlugin pinned by its digest, and the chart's controller, running as pods, pulls,
/// verifies and loads it with no restart: Ready in `kubectl get strategyplugins`, electing a
/// Lease through its strategy. A new version pushed and applied serves the next election (its
/// own count of decided elections says so). Broken ones (a digest the registry does not hold; a
/// plugin shadowing the built-in `OldestEmulationVersion`) get their reasons, and the plugin in
/// service keeps electing. Neither replica restarts.
#[tokio::test(flavor = "multi_thread")]
async fn a_strategy_plugin_pushed_to_a_registry_loads_live_and_elects_on_a_real_node() {
    let _turn = NODE_TESTS.lock().await;
    let Some(image) = locate_image().expect("locating the image") else {
        return;
    };
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let Some(kubectl) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(conclave) = locate_conclave() else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(node) = Node::start(&plane).await.expect("node") else {
        return;
    };
    let Some(registry) = Registry::start_on(node.ip()).await.expect("registry") else {
        return;
    };
    load_image(&image, &node, &image.reference).expect("loading the image into the node");

    let kubeconfig = plane.kubeconfig_path();
    let kubeconfig_arg = kubeconfig.to_string_lossy().into_owned();
    let plain_http = format!("strategyPlugins.plainHttpRegistries[0]={}", registry.host());
    let registry_port = format!("networkPolicy.registryPorts[0]={}", registry.addr().port());
    helm_install_on_one_node(
        &helm,
        &plane,
        &image.reference,
        &["--set", &plain_http, "--set", &registry_port],
    );
    let client = plane.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    wait_deployment_ready(&client).await;
    let (active, standby) = one_active_one_standby(&pods).await;
    eprintln!("active: {}, standby: {}", active.name, standby.name);
    let restarts_before = restart_counts(&pods).await;

    // The author's loop: build, push; the operator's: apply by digest.
    let built = build_plugins(&["priority", "oldest-emulation-version"]);
    let priority_wasm = built.join("priority.wasm");
    let v1 = push_plugin(
        &conclave,
        &priority_wasm,
        &format!("{}/strategies/priority:1", registry.host()),
    );
    apply_strategy_plugin(
        &kubectl,
        kubeconfig,
        "priority",
        &v1,
        "conclave.dev/priority",
    );
    wait_plugin_reason(&kubectl, kubeconfig, "priority", "Loaded").await;
    let _first = elect_through_priority(&client, "priority-v1").await;

    // A new version (another digest of the same plugin, as a rebuild publishes it): in service
    // with no restart, and the next election is decided by it (its count starts at 0).
    let mut rebuilt = std::fs::read(&priority_wasm).expect("the priority plugin");
    rebuilt.extend_from_slice(&[0, 9, 8]);
    rebuilt.extend_from_slice(b"rebuilt!");
    let dir = tempfile::tempdir().expect("temp dir");
    let rebuilt_wasm = dir.path().join("priority.wasm");
    std::fs::write(&rebuilt_wasm, &rebuilt).expect("writing the rebuilt plugin");
    let v2 = push_plugin(
        &conclave,
        &rebuilt_wasm,
        &format!("{}/strategies/priority:2", registry.host()),
    );
    // The status shows the component's digest (the reference pins the manifest's).
    let v2_digest = format!("sha256:{}", base64_and_sha256(&rebuilt_wasm).1);
    let applied = Instant::now();
    apply_strategy_plugin(
        &kubectl,
        kubeconfig,
        "priority",
        &v2,
        "conclave.dev/priority",
    );
    wait_strategy_plugin(
        &kubectl,
        kubeconfig,
        "priority",
        "{.status.digest}",
        "version 2 in service",
        |digest| digest == v2_digest,
    )
    .await;
    let in_service = applied.elapsed();
    // The standby loads the same versions, so that a take-over compiles nothing.
    let v2_hex = v2_digest.trim_start_matches("sha256:").to_owned();
    wait_for("the standby to load version 2", READY_TIMEOUT, || {
        let (kubectl, kubeconfig, standby, v2_hex) = (
            kubectl.clone(),
            kubeconfig_arg.clone(),
            standby.name.clone(),
            v2_hex.clone(),
        );
        async move {
            let logs = run(
                &kubectl,
                &[
                    "--kubeconfig",
                    &kubeconfig,
                    "logs",
                    "-n",
                    RELEASE_NAMESPACE,
                    &standby,
                ],
                None,
            )
            .expect("running kubectl logs");
            Ok(logs
                .stdout
                .lines()
                .any(|line| {
                    line.contains("loaded strategy plugin")
                        && line.contains(&format!("\"sha256\":\"{v2_hex}\""))
                })
                .then_some(()))
        }
    })
    .await
    .expect("the standby loaded version 2");
    let _second = elect_through_priority(&client, "priority-v2").await;
    eprintln!(
        "version 2: in service {:.2} s after kubectl apply, a Lease elected through it {:.2} s \
         after (kubectl polled every 0.5 s, kube-rs every 0.25 s)",
        in_service.as_secs_f64(),
        (applied.elapsed() - in_service).as_secs_f64()
    );
    wait_strategy_plugin(
        &kubectl,
        kubeconfig,
        "priority",
        "{.status.decided}",
        "an election decided by version 2",
        |decided| decided.parse::<u64>().is_ok_and(|n| n >= 1),
    )
    .await;

    // Broken ones get their reasons; the plugin in service keeps electing.
    let absent = format!(
        "{}/strategies/priority@sha256:{}",
        registry.host(),
        "0".repeat(64)
    );
    apply_strategy_plugin(
        &kubectl,
        kubeconfig,
        "absent",
        &absent,
        "conclave.dev/priority",
    );
    let shadow = push_plugin(
        &conclave,
        &built.join("oldest_emulation_version.wasm"),
        &format!("{}/strategies/oldest:1", registry.host()),
    );
    apply_strategy_plugin(
        &kubectl,
        kubeconfig,
        "shadow",
        &shadow,
        "OldestEmulationVersion",
    );
    wait_plugin_reason(&kubectl, kubeconfig, "absent", "PullFailed").await;
    wait_plugin_reason(&kubectl, kubeconfig, "shadow", "ShadowsBuiltin").await;
    let _third = elect_through_priority(&client, "priority-after-broken").await;
    wait_plugin_reason(&kubectl, kubeconfig, "priority", "Loaded").await;

    let listed = run(
        &kubectl,
        &[
            "--kubeconfig",
            &kubeconfig_arg,
            "get",
            "strategyplugins",
            "-o",
            "wide",
        ],
        None,
    )
    .expect("running kubectl get strategyplugins");
    listed.assert_success();
    eprintln!("kubectl get strategyplugins -o wide:\n{}", listed.stdout);
    assert!(
        listed.stdout.contains(&v2_digest),
        "the table shows version 2's digest:\n{}",
        listed.stdout
    );
    assert_eq!(
        restart_counts(&pods).await,
        restarts_before,
        "no replica restarted or was replaced"
    );
}

/// The soak of `benches/node_soak.rs`, short: candidate Pods on two Leases under the kubelet,
/// containers SIGKILLed through containerd and restarted by the kubelet, Pods deleted, better
/// candidates started and the active controller's container killed, until 20 hand-offs were
/// seen; the checker then reads every process's log and finds no two leaders at once on the
/// monotonic clock, no task outliving its term, every term ended, and no candidate exiting
/// unasked.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_soak_of_kills_and_hand_offs_on_a_real_node_never_has_two_leaders() {
    let _turn = NODE_TESTS.lock().await;
    let Some(image) = locate_image().expect("locating the image") else {
        return;
    };
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(node) = Node::start(&plane).await.expect("node") else {
        return;
    };
    load_image(&image, &node, &image.reference).expect("loading the image into the node");
    helm_install_on_one_node(&helm, &plane, &image.reference, &[]);
    let client = plane.client().await.expect("client");
    wait_deployment_ready(&client).await;

    let seed = std::env::var("CONCLAVE_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as u64
        });
    let config = soak::NodeSoakConfig {
        leases: 2,
        candidates: 3,
        hand_offs: 20,
        max: Duration::from_secs(600),
        seed,
        output_dir: repo_root().join("target/node-soak").join(seed.to_string()),
    };
    let report = soak::run(&client, &node, &image.reference, config)
        .await
        .expect("the soak ran");
    println!("{report}");
    assert!(
        report.clean(),
        "seed {seed} (outputs in target/node-soak/{seed}): overlaps {:?}; leaked {:?}; \
         errors {:?}; exits unasked {:?}; HolderDead for a live process {:?}",
        report.verdict.overlaps,
        report.verdict.leaked,
        report.verdict.errors,
        report.unexpected_exits,
        report.wrongly_dead
    );
    // Every holder change the driver saw is a hand-off the checker read, unless the new holder
    // never led (elected, then killed before its first renewal started its term).
    assert!(
        report.holder_changes >= 20,
        "seed {seed}: the driver saw {} holder changes in {:?}",
        report.holder_changes,
        report.elapsed
    );
    assert!(
        report.verdict.hand_offs.len() + report.never_led.len() >= report.holder_changes,
        "seed {seed}: the checker read {} hand-offs and {} holders never led, the driver saw {} \
         holder changes",
        report.verdict.hand_offs.len(),
        report.never_led.len(),
        report.holder_changes
    );
    let kills = report.leader_kills + report.follower_kills;
    assert!(kills > 0, "seed {seed}: no container was killed");
}
