//! Pod liveness on the emulator: the holder is a `conclave-candidate` LeaseCandidate naming its
//! Pod and container; the test writes the Pod's status as a kubelet would, then asserts exactly
//! when the controller elects the next candidate before the Lease expires (the kubelet reports
//! that the holder's container terminated or was replaced, also when the Pod is deleted right
//! after that report, and in a static pod's mirror) and when it must wait for expiry (a node
//! NotReady, phase Unknown, a deletion whose grace period runs, a force delete, a Pod recreated
//! under the same name, a status that names another container, pod liveness off or forbidden). A
//! holder that answers its ping is never replaced by the rule, and a live candidate is never left
//! out of an election on its own container's report.

mod controller_support;

use conclave_candidate::{Candidate, CandidateConfig, LeaseConfig, PodRef};
use conclave_controller::ControllerConfig;
use conclave_core::k8s::{lease_record, timestamp};
use conclave_core::lease::LeaseRecord;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_core::time::Timestamp;
use conclave_emulator::{Failure, Verb};
use controller_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The Lease duration the holder renews with: long, so a failover before expiry is unmistakable.
const LONG: i32 = 30;
/// The Lease duration of the scenarios where the rule must not fire: they wait for expiry.
const SHORT: i32 = 6;
/// The holder's container, and the one that replaces it.
const OURS: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const NEWER: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// A static pod's UID as its kubelet makes it (the manifest's hash), which its containers see and
/// its mirror Pod carries in `kubernetes.io/config.mirror`.
const MANIFEST_HASH: &str = "5b3f2c0e9d8a7b6c5d4e3f2a1b0c9d8e";

/// How a scenario's holder runs.
#[derive(Default)]
struct Setup {
    /// Its identity (by default a fixed one, not this process's
    /// [`conclave_candidate::default_identity`]).
    identity: Option<String>,
    /// In a static pod: the Pod in the API server is its mirror, and the holder knows the
    /// kubelet's UID ([`MANIFEST_HASH`]).
    static_pod: bool,
}

/// A Lease `lease` held by a `conclave-candidate` (`holder`) in Pod `pod`, container `app`
/// with ID [`OURS`], renewing the Lease every 500 ms with the given duration; and a worse live
/// candidate `next`.
struct Scenario {
    client: Client,
    lease: String,
    pod: String,
    holder: String,
    leases: Api<Lease>,
    pods: Api<Pod>,
    stop_holder: CancellationToken,
    candidate_task: tokio::task::JoinHandle<()>,
    renewer: tokio::task::JoinHandle<()>,
    last_renewal: Arc<Mutex<Option<Timestamp>>>,
    _next: conclave_testkit::CandidateResponder,
    _controller: RunningController,
    _emulator: conclave_emulator::RunningEmulator,
}

fn container_status(id: &str, state: Value, last_state: Value, restarts: i32) -> Value {
    json!({
        "name": "app", "image": "app:1", "imageID": "", "ready": state.get("running").is_some(),
        "restartCount": restarts, "containerID": format!("containerd://{id}"),
        "state": state, "lastState": last_state,
    })
}

/// A time as the kubelet writes it: whole seconds, cut down.
fn rfc3339(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The status the kubelet writes for the holder's container running.
fn running_status(started: jiff::Timestamp) -> Value {
    json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [container_status(
            OURS, json!({"running": {"startedAt": rfc3339(started)}}), json!({}), 0)]}})
}

impl Scenario {
    async fn start(name: &str, duration: i32, config: ControllerConfig) -> Self {
        Self::start_with(name, duration, config, |_| {}, Setup::default()).await
    }

    /// A scenario with `faults` injected from the start and the holder run as `setup` says.
    async fn start_with(
        name: &str,
        duration: i32,
        config: ControllerConfig,
        faults: impl FnOnce(&conclave_emulator::RunningEmulator),
        setup: Setup,
    ) -> Self {
        let (emulator, client) = emulator().await;
        faults(&emulator);
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let pod_name = format!("web-{name}");
        let annotations = setup
            .static_pod
            .then(|| json!({"kubernetes.io/config.mirror": MANIFEST_HASH}));
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod_name, "finalizers": ["test.conclave.dev/hold"],
                "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        }))
        .unwrap();
        let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
        let pod_uid = if setup.static_pod {
            MANIFEST_HASH.to_owned()
        } else {
            pod.metadata.uid.clone().unwrap()
        };
        let process_started = jiff::Timestamp::now();
        pods.patch_status(
            &pod_name,
            &PatchParams::default(),
            &Patch::Merge(running_status(
                process_started - jiff::SignedDuration::from_secs(60),
            )),
        )
        .await
        .unwrap();
        let controller = start(client.clone(), config);

        let holder = setup
            .identity
            .unwrap_or_else(|| format!("{pod_name}-1a2b3c4d"));
        let lease = format!("lease-{name}");
        let lease_config = LeaseConfig::new(NS, &lease, &holder);
        let candidate_config =
            CandidateConfig::new("1.33.0", "1.30.0", OEV).with_pod(Some(PodRef {
                name: pod_name.clone(),
                uid: pod_uid,
                namespace: Some(NS.into()),
                container: Some("app".into()),
                container_id: Some(OURS.into()),
                process_started: process_started.to_string(),
            }));
        let stop_holder = CancellationToken::new();
        let process = Candidate::new(client.clone(), lease_config, candidate_config).unwrap();
        let token = stop_holder.clone();
        let candidate_task = tokio::spawn(async move {
            let _ = process.run(token).await;
        });
        let next = candidate(&client, "next", &lease, "1.33.0", "1.33.0", OEV).await;
        wait_lease(&leases, &lease, "the holder elected", |r| {
            r.holder() == Some(holder.as_str())
        })
        .await;
        let last_renewal: Arc<Mutex<Option<Timestamp>>> = Arc::default();
        let renewer = tokio::spawn(renew(
            leases.clone(),
            lease.clone(),
            holder.clone(),
            duration,
            last_renewal.clone(),
        ));
        wait_lease(&leases, &lease, "the holder's own renewal", |r| {
            r.lease_duration_seconds == Some(duration) && r.holder() == Some(holder.as_str())
        })
        .await;
        // The Lease above may carry the duration the controller wrote (the short scenarios'):
        // wait for the renewer's own write too, which kill_holder reports.
        let deadline = tokio::time::Instant::now() + WAIT;
        while last_renewal.lock().unwrap().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the holder never renewed its Lease"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            client,
            lease,
            pod: pod_name,
            holder,
            leases,
            pods,
            stop_holder,
            candidate_task,
            renewer,
            last_renewal,
            _next: next,
            _controller: controller,
            _emulator: emulator,
        }
    }

    /// The holder's process dies at once (SIGKILL): no more renewals, no answer to pings, its
    /// LeaseCandidate stays. Returns the `renewTime` of its last renewal.
    async fn kill_holder(&self) -> Timestamp {
        self.renewer.abort();
        self.candidate_task.abort();
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.last_renewal.lock().unwrap().expect("renewed once")
    }

    /// Removes the holder's Pod at once, as a force delete does (its finalizer dropped, then
    /// deleted with no grace period).
    async fn remove_pod(&self) {
        self.pods
            .patch(
                &self.pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        let _ = self
            .pods
            .delete(&self.pod, &DeleteParams::default().grace_period(0))
            .await;
        assert!(self.pods.get_opt(&self.pod).await.unwrap().is_none());
    }

    /// Another `conclave-candidate` for the scenario's Lease, as `identity` with emulation
    /// version `emulation`, in a Pod of its own named `pod`: the kubelet reports its container
    /// `app` as `status` (a `container_status`); its record names the container, its ID
    /// `container_id` when given, and `process_started`. Returns its running task.
    async fn candidate_in_own_pod(
        &self,
        pod: &str,
        identity: &str,
        emulation: &str,
        status: Value,
        container_id: Option<&str>,
        process_started: jiff::Timestamp,
    ) -> tokio::task::JoinHandle<()> {
        let object: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        }))
        .unwrap();
        let created = self
            .pods
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        self.pods
            .patch_status(
                pod,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": "Running", "containerStatuses": [status]}}),
                ),
            )
            .await
            .unwrap();
        let lease_config = LeaseConfig::new(NS, &self.lease, identity);
        let candidate_config =
            CandidateConfig::new("1.33.0", emulation, OEV).with_pod(Some(PodRef {
                name: pod.into(),
                uid: created.metadata.uid.clone().unwrap(),
                namespace: Some(NS.into()),
                container: Some("app".into()),
                container_id: container_id.map(Into::into),
                process_started: process_started.to_string(),
            }));
        let process = Candidate::new(self.client.clone(), lease_config, candidate_config).unwrap();
        tokio::spawn(async move {
            let _ = process.run(CancellationToken::new()).await;
        })
    }

    /// Writes the Pod's status as the kubelet would.
    async fn kubelet_writes(&self, status: Value) {
        self.pods
            .patch_status(&self.pod, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    }

    /// Waits for `next` to hold the Lease, and returns the Lease as then.
    async fn next_elected(&self) -> LeaseRecord {
        wait_lease(&self.leases, &self.lease, "next elected", |r| {
            r.holder() == Some("next")
        })
        .await
    }

    /// Asserts that `next` took over well before the Lease (renewed at `last`) expired.
    async fn assert_fires(&self, last: Timestamp, what: &str) {
        let record = self.next_elected().await;
        let acquired = record.acquire_time.expect("acquireTime");
        let expiry = last + Duration::from_secs(LONG as u64);
        assert!(
            acquired < expiry,
            "{what}: next acquired at {acquired}, the Lease expired at {expiry}: the rule did not fire"
        );
        let event = wait_event(&self.client, NS, &self.lease, "HolderDead").await;
        assert!(
            event
                .note
                .as_deref()
                .unwrap_or_default()
                .contains(&self.holder),
            "{what}: {event:?}"
        );
    }

    /// Asserts that `next` took over only once the Lease (renewed at `last`) expired.
    async fn assert_waits_for_expiry(&self, last: Timestamp, what: &str) {
        let record = self.next_elected().await;
        let acquired = record.acquire_time.expect("acquireTime");
        let expiry = last + Duration::from_secs(SHORT as u64);
        // The controller's clock is the wall clock read once and advanced monotonically.
        assert!(
            acquired + Duration::from_millis(100) >= expiry,
            "{what}: next acquired at {acquired}, before the Lease expired at {expiry}"
        );
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        self.stop_holder.cancel();
        self.renewer.abort();
        self.candidate_task.abort();
    }
}

/// Renews the Lease as its holder every 500 ms with `duration`, recording each renewTime written.
async fn renew(
    leases: Api<Lease>,
    name: String,
    holder: String,
    duration: i32,
    last: Arc<Mutex<Option<Timestamp>>>,
) {
    loop {
        if let Ok(mut lease) = leases.get(&name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(holder.as_str())
        {
            let now = jiff::Timestamp::now();
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(duration);
            if leases
                .replace(&name, &PostParams::default(), &lease)
                .await
                .is_ok()
            {
                *last.lock().unwrap() = Some(timestamp(now));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn controller_config() -> ControllerConfig {
    config(NS, "c1")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminated_container_fails_over_before_expiry() {
    let s = Scenario::start("terminated", LONG, controller_config()).await;
    let last = s.kill_holder().await;
    // It dies in a later second than its last renewal: a renewal in the second of the death
    // (`finishedAt` is whole seconds) could be a restarted process's, and keeps the holder.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let now = jiff::Timestamp::now();
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        OURS,
        json!({"terminated": {"exitCode": 137, "reason": "Error",
            "startedAt": rfc3339(now - jiff::SignedDuration::from_secs(60)),
            "finishedAt": rfc3339(now), "containerID": format!("containerd://{OURS}")}}),
        json!({}), 0)]}}),
    )
    .await;
    s.assert_fires(last, "terminated").await;
}

/// An identity drawn by its own process (`conclave-candidate`'s default, which it annotates
/// `per-process`): a last renewal in the very second its container died cannot be a restarted
/// process's, so the kubelet's report fails over before expiry even then.
#[tokio::test(flavor = "multi_thread")]
async fn a_per_process_identity_fails_over_even_when_it_renewed_in_the_second_it_died() {
    let s = Scenario::start_with(
        "same-second",
        LONG,
        controller_config(),
        |_| {},
        Setup {
            identity: Some(conclave_candidate::default_identity()),
            ..Setup::default()
        },
    )
    .await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(s.client.clone(), NS);
    let registered = candidates.get(&s.holder).await.unwrap();
    assert_eq!(
        registered
            .metadata
            .annotations
            .unwrap_or_default()
            .get(conclave_core::pod::IDENTITY_ANNOTATION)
            .map(String::as_str),
        Some(conclave_core::pod::PER_PROCESS),
        "conclave-candidate annotates its default identity"
    );
    let last = s.kill_holder().await;
    // finishedAt in the second of the last renewal: the kubelet's whole seconds put the death
    // at or before that renewal.
    let died = jiff::Timestamp::from_microsecond(last.as_micros()).unwrap();
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        OURS,
        json!({"terminated": {"exitCode": 137, "reason": "Error",
            "startedAt": rfc3339(died - jiff::SignedDuration::from_secs(60)),
            "finishedAt": rfc3339(died), "containerID": format!("containerd://{OURS}")}}),
        json!({}), 0)]}}),
    )
    .await;
    s.assert_fires(last, "terminated in the second of its last renewal")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_container_fails_over_before_expiry() {
    let s = Scenario::start("restarted", LONG, controller_config()).await;
    let last = s.kill_holder().await;
    // Its restart shows in the next second at the earliest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let now = jiff::Timestamp::now();
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        NEWER,
        json!({"running": {"startedAt": rfc3339(now)}}),
        json!({"terminated": {"exitCode": 137, "containerID": format!("containerd://{OURS}")}}),
        1)]}}),
    )
    .await;
    s.assert_fires(last, "restarted").await;
}

/// The graceful path: the Pod's deletion waits (here on a finalizer, as on its grace period)
/// while the kubelet stops the container, writes the terminated status, and the Pod is then
/// removed, before the controller's grace for an answer to its ping is over. The deletion event
/// carries that last report, which still proves the death.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_after_its_kubelet_reported_the_container_terminated_fails_over_before_expiry()
 {
    let s = Scenario::start("deleted", LONG, controller_config()).await;
    let last = s.kill_holder().await;
    s.pods
        .delete(&s.pod, &DeleteParams::default())
        .await
        .unwrap();
    // The finalizer kept it: only its deletionTimestamp is set. Not evidence yet.
    assert!(
        s.pods
            .get(&s.pod)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let record = lease_record(&s.leases.get(&s.lease).await.unwrap());
    assert_eq!(
        record.holder(),
        Some(s.holder.as_str()),
        "a deletion in progress is not evidence"
    );
    let now = jiff::Timestamp::now();
    s.kubelet_writes(
        json!({"status": {"phase": "Failed", "containerStatuses": [container_status(
        OURS,
        json!({"terminated": {"exitCode": 137, "reason": "Error",
            "startedAt": rfc3339(now - jiff::SignedDuration::from_secs(60)),
            "finishedAt": rfc3339(now), "containerID": format!("containerd://{OURS}")}}),
        json!({}), 0)]}}),
    )
    .await;
    s.remove_pod().await;
    s.assert_fires(last, "pod deleted after the kubelet's report")
        .await;
}

/// Finding 1 of the second review: a force delete (`--grace-period=0 --force`, Pod GC of a
/// deleted Node's Pods) removes the Pod without the kubelet's word. The holder here is cut off
/// from the API server while its process runs on (no renewals, no answers to pings reach the
/// server), and may lead until its renew deadline: its Pod's absence proves nothing, and the
/// next candidate waits for the Lease's expiry. The same when a Pod of the same name is created
/// at once (a StatefulSet's way), its container started after the holder's process.
#[tokio::test(flavor = "multi_thread")]
async fn a_force_deleted_or_recreated_pod_waits_for_expiry() {
    for recreate in [false, true] {
        let name = if recreate { "recreated" } else { "force" };
        let s = Scenario::start(name, SHORT, controller_config()).await;
        let last = s.kill_holder().await;
        s.remove_pod().await;
        if recreate {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": s.pod},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            }))
            .unwrap();
            s.pods.create(&PostParams::default(), &pod).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let now = jiff::Timestamp::now();
            s.kubelet_writes(
                json!({"status": {"phase": "Running", "containerStatuses": [container_status(
                NEWER, json!({"running": {"startedAt": rfc3339(now)}}), json!({}), 0)]}}),
            )
            .await;
        }
        s.assert_waits_for_expiry(last, name).await;
    }
}

/// Finding 4 of the second review: in a static pod the downward API's `metadata.uid` is the
/// kubelet's manifest hash, and the Pod in the API server is a mirror with another UID that
/// carries the hash in `kubernetes.io/config.mirror`. The holder, in such a pod, is elected (it
/// used to be taken for a process whose Pod was replaced, and left out of every election), its
/// LeaseCandidate has no ownerReference (the garbage collector would delete it: no object has
/// that UID) but names the Pod in annotations, and the kubelet's report in the mirror Pod that
/// another instance of its container started after it (the rule that needs the same Pod) still
/// fails over before expiry.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_in_a_static_pod_is_elected_and_its_death_seen_through_the_mirror_pod() {
    let s = Scenario::start_with(
        "static",
        LONG,
        controller_config(),
        |_| {},
        Setup {
            static_pod: true,
            ..Setup::default()
        },
    )
    .await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(s.client.clone(), NS);
    let registered = candidates.get(&s.holder).await.unwrap();
    assert_eq!(
        registered.metadata.owner_references, None,
        "no ownerReference to a UID no object has"
    );
    let annotations = registered.metadata.annotations.unwrap_or_default();
    assert_eq!(
        (
            annotations.get(conclave_core::pod::POD_ANNOTATION),
            annotations.get(conclave_core::pod::POD_UID_ANNOTATION)
        ),
        (Some(&s.pod), Some(&MANIFEST_HASH.to_owned()))
    );
    let last = s.kill_holder().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let now = jiff::Timestamp::now();
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        NEWER,
        json!({"running": {"startedAt": rfc3339(now)}}),
        json!({}),
        2)]}}),
    )
    .await;
    s.assert_fires(last, "static pod's container replaced")
        .await;
}

/// Reports that are not evidence: the holder's Lease runs out as without pod liveness.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_not_ready_or_a_pod_in_phase_unknown_waits_for_expiry() {
    for (name, status) in [
        (
            "notready",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                "reason": "NodeNotReady"}]}}),
        ),
        ("unknown", json!({"status": {"phase": "Unknown"}})),
    ] {
        let s = Scenario::start(name, SHORT, controller_config()).await;
        let last = s.kill_holder().await;
        s.kubelet_writes(status).await;
        s.assert_waits_for_expiry(last, name).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deletion_with_its_grace_period_running_waits_for_expiry() {
    let s = Scenario::start("grace", SHORT, controller_config()).await;
    let last = s.kill_holder().await;
    s.pods
        .delete(&s.pod, &DeleteParams::default())
        .await
        .unwrap();
    s.assert_waits_for_expiry(last, "deletionTimestamp set")
        .await;
}

/// Another container of the Pod terminated, and the holder's container shows an earlier
/// instance's termination in `lastState`: neither is about the holder's process.
#[tokio::test(flavor = "multi_thread")]
async fn a_status_naming_another_container_waits_for_expiry() {
    let s = Scenario::start("other", SHORT, controller_config()).await;
    let last = s.kill_holder().await;
    let now = jiff::Timestamp::now();
    let earlier = "0000000000000000000000000000000000000000000000000000000000000000";
    let mut sidecar = container_status(
        "3333333333333333333333333333333333333333333333333333333333333333",
        json!({"terminated": {"exitCode": 1}}),
        json!({}),
        0,
    );
    sidecar["name"] = json!("sidecar");
    s.kubelet_writes(json!({"status": {"containerStatuses": [
        container_status(
            OURS,
            json!({"running": {"startedAt": rfc3339(now - jiff::SignedDuration::from_secs(60))}}),
            json!({"terminated": {"exitCode": 137, "containerID": format!("containerd://{earlier}")}}),
            1),
        sidecar,
    ]}}))
    .await;
    s.assert_waits_for_expiry(last, "another container").await;
}

/// The model's finding B: a component that gives its identity to the next process (a fixed
/// identity). The holder's container is restarted; the new process renews the Lease (and so
/// leads) before this controller sees the kubelet's report, and has not registered its own
/// LeaseCandidate yet: the one stored, and cached, still records the previous container. It is
/// slow to renew again and does not answer the ping. Its renewal is later than the new
/// container's `startedAt` (the node's clock, which also stamps the holder's `renewTime`), so it
/// may be the new process's: the controller must not declare the holder dead.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_holder_of_the_same_identity_is_not_declared_dead() {
    let s = Scenario::start("same-identity", LONG, controller_config()).await;
    s.kill_holder().await;
    // The kubelet restarts the container in the next second; the new process starts, reads the
    // Lease naming its identity and renews it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let restarted = jiff::Timestamp::now();
    let mut lease = s.leases.get(&s.lease).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(s.holder.as_str()));
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    s.leases
        .replace(&s.lease, &PostParams::default(), &lease)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        NEWER,
        json!({"running": {"startedAt": rfc3339(restarted)}}),
        json!({"terminated": {"exitCode": 137, "containerID": format!("containerd://{OURS}"),
            "finishedAt": rfc3339(restarted)}}),
        1)]}}),
    )
    .await;
    // Well past the grace: the restarted process still holds the Lease, and no HolderDead.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let record = lease_record(&s.leases.get(&s.lease).await.unwrap());
    assert_eq!(
        record.holder(),
        Some(s.holder.as_str()),
        "the restarted holder, which renewed after its container started, was declared dead"
    );
    assert_eq!(holder_dead_events(&s.client).await, 0);
}

/// A report that the holder's container terminated while the holder still runs (a wrong
/// report): the controller pings it, it answers, and it keeps its Lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_that_answers_its_ping_is_never_replaced() {
    let s = Scenario::start("answers", LONG, controller_config()).await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(s.client.clone(), NS);
    let reported = jiff::Timestamp::now();
    s.kubelet_writes(json!({"status": {"containerStatuses": [container_status(
        OURS, json!({"terminated": {"exitCode": 0}}), json!({}), 0)]}}))
        .await;
    wait_candidate_answered(&candidates, &s.holder, reported).await;
    // Well past the grace the rule gives an answer: still the holder, and no HolderDead.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let record = lease_record(&s.leases.get(&s.lease).await.unwrap());
    assert_eq!(record.holder(), Some(s.holder.as_str()));
    assert_eq!(holder_dead_events(&s.client).await, 0);
}

/// How many `HolderDead` Events the namespace has.
/// Finding 6 of the second review, first suspicion (confirmed): the holder has a ping
/// outstanding from before the kubelet's (here wrong) report; it was slow to answer, paused,
/// and answers once it resumes. Only an answer to a ping sent since the report counts, so the
/// controller must ping it again although a ping is outstanding: it used to skip the ping, and
/// declared the live holder dead 500 ms later.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_with_a_ping_outstanding_is_asked_again_on_a_report_and_its_answer_counts() {
    let s = Scenario::start("outstanding", LONG, controller_config()).await;
    // Paused: neither renewing its Lease nor answering pings.
    s.kill_holder().await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(s.client.clone(), NS);
    let mut holder = candidates.get(&s.holder).await.unwrap();
    holder.spec.as_mut().unwrap().ping_time = Some(MicroTime(jiff::Timestamp::now()));
    candidates
        .replace(&s.holder, &PostParams::default(), &holder)
        .await
        .unwrap();
    // The report falls in a later second than the last renewal: that renewal is no sign of life.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let now = jiff::Timestamp::now();
    s.kubelet_writes(
        json!({"status": {"phase": "Running", "containerStatuses": [container_status(
        OURS,
        json!({"terminated": {"exitCode": 137, "reason": "Error",
            "startedAt": rfc3339(now - jiff::SignedDuration::from_secs(60)),
            "finishedAt": rfc3339(now), "containerID": format!("containerd://{OURS}")}}),
        json!({}), 0)]}}),
    )
    .await;
    // It resumes 200 ms later and answers whatever ping it finds outstanding, as
    // `conclave-candidate` does.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answerer = tokio::spawn({
        let (candidates, name) = (candidates.clone(), s.holder.clone());
        async move {
            loop {
                if let Ok(mut c) = candidates.get(&name).await {
                    let spec = c.spec.as_mut().unwrap();
                    let pinged = spec
                        .ping_time
                        .as_ref()
                        .is_some_and(|p| spec.renew_time.as_ref().is_none_or(|r| r.0 < p.0));
                    if pinged {
                        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
                        let _ = candidates.replace(&name, &PostParams::default(), &c).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    // Well past the grace the rule gives an answer: still the holder, and no HolderDead.
    tokio::time::sleep(Duration::from_secs(4)).await;
    answerer.abort();
    let record = lease_record(&s.leases.get(&s.lease).await.unwrap());
    assert_eq!(
        record.holder(),
        Some(s.holder.as_str()),
        "the live holder answered the ping sent on the report"
    );
    assert_eq!(holder_dead_events(&s.client).await, 0);
}

async fn holder_dead_events(client: &Client) -> usize {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("HolderDead"))
        .count()
}

/// Waits until the controller has pinged `name` after `since` and the candidate answered.
async fn wait_candidate_answered(
    candidates: &Api<LeaseCandidate>,
    name: &str,
    since: jiff::Timestamp,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let spec = candidates.get(name).await.unwrap().spec.unwrap();
        if let (Some(ping), Some(renew)) = (spec.ping_time, spec.renew_time)
            && ping.0 >= since
            && renew.0 >= ping.0
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the holder was not pinged, or did not answer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_pod_liveness_off_a_terminated_container_waits_for_expiry() {
    let config = ControllerConfig {
        pod_liveness: false,
        ..controller_config()
    };
    let s = Scenario::start("off", SHORT, config).await;
    let last = s.kill_holder().await;
    s.kubelet_writes(json!({"status": {"containerStatuses": [container_status(
        OURS, json!({"terminated": {"exitCode": 137}}), json!({}), 0)]}}))
        .await;
    s.assert_waits_for_expiry(last, "pod liveness off").await;
}

/// RBAC refuses pods to the controller: it keeps electing, and fails over at expiry.
#[tokio::test(flavor = "multi_thread")]
async fn when_pods_are_forbidden_the_controller_falls_back_to_expiry() {
    let s = Scenario::start_with(
        "forbidden",
        SHORT,
        controller_config(),
        |emulator| {
            emulator
                .faults()
                .fail_next(Verb::List, "pods", usize::MAX, Failure::Forbidden);
        },
        Setup::default(),
    )
    .await;
    let last = s.kill_holder().await;
    s.kubelet_writes(json!({"status": {"containerStatuses": [container_status(
        OURS, json!({"terminated": {"exitCode": 137}}), json!({}), 0)]}}))
        .await;
    s.assert_waits_for_expiry(last, "pods forbidden").await;
}

/// A candidate whose container the kubelet reports terminated is never elected, however fresh
/// its last renewal: here it is the best candidate and renewed just before it died, so without
/// pod liveness it would pre-empt the live holder (and then never take the Lease, leaving the
/// component leaderless until the Lease it was given runs out). The next best live candidate is
/// the one preferred.
#[tokio::test(flavor = "multi_thread")]
async fn a_candidate_reported_dead_is_never_elected() {
    let s = Scenario::start("dead-candidate", LONG, controller_config()).await;
    // The dead process's LeaseCandidate, as it left it: fresh, the best version, naming its
    // container.
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    let dead_task = s
        .candidate_in_own_pod(
            "web-dead",
            "web-dead-5e5e5e5e",
            "1.28.0",
            container_status(OURS, json!({"terminated": {"exitCode": 137}}), json!({}), 0),
            Some(OURS),
            started,
        )
        .await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(s.client.clone(), NS);
    conclave_testkit::wait_for(
        "the dead process's candidate",
        Duration::from_secs(30),
        || {
            let candidates = candidates.clone();
            async move { Ok(candidates.get_opt("web-dead-5e5e5e5e").await?) }
        },
    )
    .await
    .expect("registered");
    dead_task.abort();
    let _good = candidate(&s.client, "good", &s.lease, "1.33.0", "1.29.0", OEV).await;
    let record = wait_lease(&s.leases, &s.lease, "a pre-emption", |r| {
        r.preferred_holder.is_some()
    })
    .await;
    assert_eq!(
        record.preferred_holder.as_deref(),
        Some("good"),
        "the live holder was pre-empted for a candidate whose container is dead"
    );
}

/// Finding 5 of the second review: a live candidate with no container ID recorded (cgroup v2
/// under a cgroup namespace) whose own instance the runtime stamped `startedAt` a second or two
/// after the process recorded its start. That instance is not a later one: the better candidate
/// is preferred, not left out of every election for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_candidate_without_a_container_id_stamped_late_by_its_runtime_is_preferred() {
    let s = Scenario::start("late-stamp", LONG, controller_config()).await;
    let started = jiff::Timestamp::now();
    let stamped = rfc3339(started + jiff::SignedDuration::from_secs(2));
    let late_task = s
        .candidate_in_own_pod(
            "web-late",
            "web-late-7f7f7f7f",
            "1.28.0",
            container_status(
                NEWER,
                json!({"running": {"startedAt": stamped}}),
                json!({}),
                0,
            ),
            None,
            started,
        )
        .await;
    let record = wait_lease(&s.leases, &s.lease, "a pre-emption", |r| {
        r.preferred_holder.is_some()
    })
    .await;
    late_task.abort();
    assert_eq!(
        record.preferred_holder.as_deref(),
        Some("web-late-7f7f7f7f"),
        "the live, better candidate was left out"
    );
}

/// Two holders of one Lease found dead one after the other get an Event each, naming its holder
/// in the note and as the Event's related LeaseCandidate. Without the related object kube-rs's
/// `Recorder` took the second for a repeat of the first (same Lease, reason and action) and only
/// counted it in the first Event's series, under the first holder's name: on a real node, an
/// OOM-killed leader a few minutes after a SIGKILLed one had no Event of its own.
#[tokio::test(flavor = "multi_thread")]
async fn each_dead_holder_gets_a_holder_dead_event_of_its_own() {
    use conclave_controller::LeaseKey;
    use conclave_controller::events::{EventReason, Events};
    use k8s_openapi::api::events::v1::Event;

    let (_emulator, client) = emulator().await;
    let events = Events::new(client.clone(), "c1", Duration::from_secs(10));
    let key = LeaseKey::new(NS, "twice-dead");
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let holder_dead = || async {
        let mut found: Vec<(String, String, Option<i32>)> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("HolderDead"))
            .map(|e| {
                let related = e.related.and_then(|r| r.name).unwrap_or_default();
                let count = e.series.map(|s| s.count);
                (e.note.unwrap_or_default(), related, count)
            })
            .collect();
        found.sort();
        found
    };
    for (published, holder) in ["first", "second"].into_iter().enumerate() {
        events.publish_about_candidate(
            None,
            &key,
            EventReason::HolderDead,
            format!("{holder} is dead: the kubelet reports its container terminated"),
            holder,
        );
        // The first is sent before the second is published, so the second meets it in the
        // Recorder's cache.
        let deadline = tokio::time::Instant::now() + WAIT;
        while holder_dead().await.len() <= published
            && holder_dead()
                .await
                .iter()
                .all(|(_, _, count)| count.is_none())
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no HolderDead Event for {holder}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let found = holder_dead().await;
    assert_eq!(
        found,
        [
            (
                "first is dead: the kubelet reports its container terminated".to_owned(),
                "first".to_owned(),
                None
            ),
            (
                "second is dead: the kubelet reports its container terminated".to_owned(),
                "second".to_owned(),
                None
            ),
        ],
        "one HolderDead Event per dead holder"
    );
}
