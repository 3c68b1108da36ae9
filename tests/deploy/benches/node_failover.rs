//! Crash failover on a real node, side by side in one run: SIGKILL of the leading container,
//! then the time until the next leader is written into the Lease, for
//!
//! - Conclave (the chart with its defaults: it takes over from kube-apiserver's built-in
//!   controller and elects the component and kube-scheduler v1.37.2) with pod liveness (the
//!   default), and the same with the leader OOM-killed instead (its container's memory cgroup
//!   filled, the kernel's OOM killer ends it, the kubelet reports `OOMKilled`),
//! - Conclave with `controller.podLiveness=off` (failover at the Lease's expiry),
//! - kube-apiserver's built-in controller (the chart uninstalled, its `CoordinatedLeaderElection`
//!   gate on), electing the same component and kube-scheduler pods; and the time from
//!   `helm uninstall` until it leads again (the take-over handed back).
//!
//! The component is `deploy/examples/component.yaml` (`conclave candidate`, 15 s Lease, 10 s renew
//! deadline, 2 s retry period) scaled to 5 replicas, fresh for each setting so that the kubelet's
//! restart back-off starts over; kube-scheduler is `deploy/examples/kube-scheduler.yaml`.
//! Each round waits until every replica is Ready and a candidate again, then kills the leader's
//! container through containerd and looks at the Lease every 50 ms.
//!
//! ```text
//! CONCLAVE_IMAGE=localhost/conclave:dev cargo bench -p conclave-deploy-tests --bench node_failover -- [--rounds N]
//! ```
//! Needs root and the node (`tests/kube/build.sh`), helm (`.ci/prepare-helm.sh`), kubectl and the
//! image (`deploy/build-image.sh`). About 15 minutes at 10 rounds.

use std::time::{Duration, Instant};

use conclave_deploy_tests::image::locate_image;
use conclave_deploy_tests::workloads::{
    BUILTIN_CONTROLLER_LEASE, COMPONENT, COMPONENT_NAMESPACE, SCHEDULER, SCHEDULER_LEASE,
    SCHEDULER_NAMESPACE, component_manifest, install_chart_on_one_node, is_identity_of, load_image,
    look_at_election, rolled_out, scheduler_manifest,
};
use conclave_deploy_tests::{
    FULL_NAME, RELEASE_NAMESPACE, chart_path, locate_helm, locate_kubectl, run,
};
use conclave_testkit::{ControlPlane, Node};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Replicas of the component: kills spread over them, so each container is killed about twice
/// per setting and the kubelet's restart back-off (10 s, doubling) stays short.
const COMPONENT_REPLICAS: i32 = 5;
const SCHEDULER_REPLICAS: i32 = 2;
/// How long a Deployment may take to be Ready again (a killed container waits out its back-off).
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a failover may take before the round counts as failed.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a round looks at the Lease.
const LOOK_EVERY: Duration = Duration::from_millis(50);
/// Pause after the replicas are Ready and candidates, so the restarted one renews once.
const SETTLE: Duration = Duration::from_secs(3);

/// A workload whose leader a round kills.
struct Workload {
    namespace: &'static str,
    deployment: &'static str,
    lease: &'static str,
    replicas: i32,
}

const THE_COMPONENT: Workload = Workload {
    namespace: COMPONENT_NAMESPACE,
    deployment: COMPONENT,
    lease: COMPONENT,
    replicas: COMPONENT_REPLICAS,
};
const KUBE_SCHEDULER: Workload = Workload {
    namespace: SCHEDULER_NAMESPACE,
    deployment: SCHEDULER,
    lease: SCHEDULER_LEASE,
    replicas: SCHEDULER_REPLICAS,
};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> BenchResult<()> {
    let rounds = rounds_from_args()?;
    let image = locate_image()?.ok_or("no image: build it with deploy/build-image.sh")?;
    let helm = locate_helm()?.ok_or("no helm: run .ci/prepare-helm.sh")?;
    let kubectl = locate_kubectl()?.ok_or("no kubectl")?;
    let plane = ControlPlane::start()
        .await?
        .ok_or("no control plane: run tests/kube/build.sh")?;
    let node = Node::start(&plane)
        .await?
        .ok_or("no node: run as root after tests/kube/build.sh")?;
    let client = plane.client().await?;
    let kubeconfig = plane.kubeconfig_path().to_string_lossy().into_owned();
    let kubectl_apply = |manifest: &str| -> BenchResult<()> {
        let out = run(
            &kubectl,
            &["--kubeconfig", &kubeconfig, "apply", "-f", "-"],
            Some(manifest),
        )?;
        ok(&out.command, out.success(), &out.stderr)
    };

    load_image(&image, &node, &image.reference)?;
    let scheduler_image = node.import_kube_scheduler()?;
    let chart = chart_path().to_string_lossy().into_owned();
    let helm_run = |args: &[&str]| -> BenchResult<()> {
        let mut all = args.to_vec();
        all.extend([
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            RELEASE_NAMESPACE,
        ]);
        let out = run(&helm, &all, None)?;
        ok(&out.command, out.success(), &out.stderr)
    };
    install_chart_on_one_node(&helm, &plane, &image.reference, &[])?;
    rolled_out(&client, RELEASE_NAMESPACE, FULL_NAME, 2, READY_TIMEOUT).await?;

    let example = component_manifest(&image.reference)?;
    let component = example.replacen("replicas: 3", &format!("replicas: {COMPONENT_REPLICAS}"), 1);
    if component == example {
        return Err("deploy/examples/component.yaml no longer says `replicas: 3`".into());
    }
    let scheduler = scheduler_manifest(&scheduler_image)?;
    let mut rows = Vec::new();

    fresh(&client, &kubectl_apply, &THE_COMPONENT, &component).await?;
    fresh(&client, &kubectl_apply, &KUBE_SCHEDULER, &scheduler).await?;
    eprintln!("bench: Conclave, pod liveness on");
    let workloads = [&THE_COMPONENT, &KUBE_SCHEDULER];
    let times = kill_rounds(&client, &node, &workloads, rounds, Kill::Signal).await?;
    for (workload, times) in ["component", "kube-scheduler"].into_iter().zip(times) {
        rows.push(("Conclave, pod liveness on", workload, times));
    }
    fresh(&client, &kubectl_apply, &THE_COMPONENT, &component).await?;
    eprintln!("bench: Conclave, pod liveness on, OOM kills");
    for times in kill_rounds(&client, &node, &[&THE_COMPONENT], rounds, Kill::OutOfMemory).await? {
        rows.push(("Conclave, pod liveness on", "component, OOM kill", times));
    }

    helm_run(&[
        "upgrade",
        FULL_NAME,
        &chart,
        "--reuse-values",
        "--set",
        "controller.podLiveness=off",
    ])?;
    rolled_out(&client, RELEASE_NAMESPACE, FULL_NAME, 2, READY_TIMEOUT).await?;
    fresh(&client, &kubectl_apply, &THE_COMPONENT, &component).await?;
    eprintln!("bench: Conclave, pod liveness off");
    for times in kill_rounds(&client, &node, &[&THE_COMPONENT], rounds, Kill::Signal).await? {
        rows.push(("Conclave, pod liveness off", "component", times));
    }

    helm_run(&["uninstall", FULL_NAME, "--wait"])?;
    let uninstalled = Instant::now();
    let deadline = uninstalled + READY_TIMEOUT;
    while !plane.builtin_controller_leading().await? {
        if Instant::now() > deadline {
            return Err("kube-apiserver's built-in controller did not start leading".into());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    let resumed = uninstalled.elapsed();
    fresh(&client, &kubectl_apply, &THE_COMPONENT, &component).await?;
    fresh(&client, &kubectl_apply, &KUBE_SCHEDULER, &scheduler).await?;
    eprintln!("bench: kube-apiserver's built-in controller");
    let workloads = [&THE_COMPONENT, &KUBE_SCHEDULER];
    let times = kill_rounds(&client, &node, &workloads, rounds, Kill::Signal).await?;
    for (workload, times) in ["component", "kube-scheduler"].into_iter().zip(times) {
        rows.push(("built-in controller", workload, times));
    }

    println!();
    println!(
        "helm uninstall returned -> kube-apiserver's built-in controller leading again: {:.2} s \
         (its Lease {} s, as the control plane runs it)",
        resumed.as_secs_f64(),
        builtin_lease_seconds(&client).await?
    );
    println!();
    println!(
        "SIGKILL (or OOM kill) of the leader's container -> next leader written ({rounds} rounds \
         each, one run)"
    );
    println!();
    println!("| controller | workload | median | max | min | rounds |");
    println!("|---|---|---|---|---|---|");
    for (controller, workload, times) in rows {
        let mut sorted = times.clone();
        sorted.sort();
        println!(
            "| {controller} | {workload} | {:.2} s | {:.2} s | {:.2} s | {} |",
            median(&sorted).as_secs_f64(),
            sorted.last().copied().unwrap_or_default().as_secs_f64(),
            sorted.first().copied().unwrap_or_default().as_secs_f64(),
            times
                .iter()
                .map(|t| format!("{:.2}", t.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(())
}

/// The built-in controller's lease duration, as the leading kube-apiserver wrote it.
async fn builtin_lease_seconds(client: &Client) -> BenchResult<i32> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    let lease = leases.get(BUILTIN_CONTROLLER_LEASE).await?;
    Ok(lease
        .spec
        .and_then(|s| s.lease_duration_seconds)
        .ok_or("the built-in's Lease has no duration")?)
}

/// `--rounds N` from the command line (cargo bench adds `--bench`, which is ignored).
fn rounds_from_args() -> BenchResult<usize> {
    let mut args = std::env::args().skip(1);
    let mut rounds = 10;
    while let Some(arg) = args.next() {
        if arg == "--rounds" {
            rounds = args.next().ok_or("--rounds needs a number")?.parse()?;
        } else if let Some(value) = arg.strip_prefix("--rounds=") {
            rounds = value.parse()?;
        }
    }
    if rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    Ok(rounds)
}

fn ok(command: &str, success: bool, stderr: &str) -> BenchResult<()> {
    if success {
        Ok(())
    } else {
        Err(format!("{command} failed: {stderr}").into())
    }
}

fn median(sorted: &[Duration]) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// Deletes `workload`'s Deployment (if there) and applies `manifest` again, with fresh pods: every
/// container starts with no restart back-off (the kubelet's doubles with each kill of a
/// container, up to 5 minutes).
async fn fresh(
    client: &Client,
    apply: &impl Fn(&str) -> BenchResult<()>,
    workload: &Workload,
    manifest: &str,
) -> BenchResult<()> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), workload.namespace);
    if deployments.get_opt(workload.deployment).await?.is_some() {
        deployments
            .delete(workload.deployment, &Default::default())
            .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), workload.namespace);
        let labels = format!("app.kubernetes.io/name={}", workload.deployment);
        let deadline = Instant::now() + READY_TIMEOUT;
        while !pods
            .list(&ListParams::default().labels(&labels))
            .await?
            .items
            .is_empty()
        {
            if Instant::now() > deadline {
                return Err(format!("the old pods of {} did not go", workload.deployment).into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    apply(manifest)?;
    rolled_out(
        client,
        workload.namespace,
        workload.deployment,
        workload.replicas,
        READY_TIMEOUT,
    )
    .await?;
    Ok(())
}

/// How a round ends the leader's process.
#[derive(Clone, Copy)]
enum Kill {
    /// SIGKILL of its container, through containerd.
    Signal,
    /// The kernel's OOM killer, once its container's memory cgroup is full
    /// ([`Node::oom_kill_container`]).
    OutOfMemory,
}

/// `rounds` rounds; in each, every workload's leader is killed (`how`) at the same moment and
/// each failover timed. Returns the times per workload, in `workloads`' order.
async fn kill_rounds(
    client: &Client,
    node: &Node,
    workloads: &[&'static Workload],
    rounds: usize,
    how: Kill,
) -> BenchResult<Vec<Vec<Duration>>> {
    let mut times = vec![Vec::new(); workloads.len()];
    for round in 1..=rounds {
        let leaders = stable_leaders(client, workloads).await?;
        let killed_at = Instant::now();
        for (_, container) in &leaders {
            match how {
                Kill::Signal => node.kill_container(container)?,
                Kill::OutOfMemory => node.oom_kill_container(container)?,
            }
        }
        let waits: Vec<_> = workloads
            .iter()
            .zip(leaders)
            .map(|(workload, (leader, _))| {
                let (client, workload) = (client.clone(), *workload);
                tokio::spawn(
                    async move { next_leader(&client, workload, &leader, killed_at).await },
                )
            })
            .collect();
        for (i, wait) in waits.into_iter().enumerate() {
            let took = wait.await?.map_err(|e| e.to_string())?;
            eprintln!(
                "bench: round {round}: {} -> next leader after {:.2} s",
                workloads[i].lease,
                took.as_secs_f64()
            );
            times[i].push(took);
        }
    }
    Ok(times)
}

/// Each workload's leader and its container, once every workload has settled and its holder
/// stayed the same for [`SETTLE`] with no hand-off asked for (kube-apiserver's built-in
/// controller moves leadership between equal candidates now and then; a kill during such a
/// hand-off would time the hand-off, not the failover).
async fn stable_leaders(
    client: &Client,
    workloads: &[&'static Workload],
) -> BenchResult<Vec<(String, String)>> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut leaders = Vec::new();
        for workload in workloads {
            leaders.push(settled_leader(client, workload).await?);
        }
        tokio::time::sleep(SETTLE).await;
        let mut stable = true;
        for (workload, (leader, _)) in workloads.iter().zip(&leaders) {
            let look = look_at_election(client, workload.namespace, workload.lease).await?;
            stable &= look.holder.as_deref() == Some(leader.as_str()) && look.preferred.is_none();
        }
        if stable {
            return Ok(leaders);
        }
        if Instant::now() > deadline {
            return Err("no stable leaders".into());
        }
        eprintln!("bench: a leader changed while settling; settling again");
    }
}

/// Waits until every replica of `workload` is Ready and a candidate and one holds; returns the
/// holder and its container's id.
async fn settled_leader(client: &Client, workload: &Workload) -> BenchResult<(String, String)> {
    rolled_out(
        client,
        workload.namespace,
        workload.deployment,
        workload.replicas,
        READY_TIMEOUT,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), workload.namespace);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let look = look_at_election(client, workload.namespace, workload.lease).await?;
        let listed = pods
            .list(
                &ListParams::default()
                    .labels(&format!("app.kubernetes.io/name={}", workload.deployment)),
            )
            .await?;
        let live: Vec<&Pod> = listed
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        // One candidate per live pod: a killed process's old candidate is gone or replaced.
        let candidates_of_live = live
            .iter()
            .filter(|p| {
                let name = p.metadata.name.as_deref().unwrap_or("-");
                look.candidates.iter().any(|(c, _)| is_identity_of(c, name))
            })
            .count();
        if let Some(holder) = &look.holder
            && look.preferred.is_none()
            && candidates_of_live == live.len()
            && live.len() == usize::try_from(workload.replicas)?
            && let Some(container) = live
                .iter()
                .find(|p| is_identity_of(holder, p.metadata.name.as_deref().unwrap_or("-")))
                .and_then(|p| p.status.as_ref()?.container_statuses.as_ref()?.first())
                .and_then(|c| c.container_id.clone())
        {
            return Ok((holder.clone(), container));
        }
        if Instant::now() > deadline {
            return Err(format!("{}: no settled leader: {look:?}", workload.lease).into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The time from `killed_at` until a holder other than `leader` is seen.
async fn next_leader(
    client: &Client,
    workload: &Workload,
    leader: &str,
    killed_at: Instant,
) -> BenchResult<Duration> {
    loop {
        let look = look_at_election(client, workload.namespace, workload.lease).await?;
        if look.holder.as_deref().is_some_and(|h| h != leader) {
            return Ok(look.at.duration_since(killed_at));
        }
        if killed_at.elapsed() > FAILOVER_TIMEOUT {
            return Err(format!("{}: no next leader after {leader}", workload.lease).into());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
