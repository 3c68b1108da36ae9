//! The test node runs Pods as a real cluster does: scheduled by kube-scheduler onto the node, the
//! container started by containerd, its readiness probed by the kubelet, its log read through the
//! API server, and a container killed by SIGKILL restarted by the kubelet. These are the behaviours
//! the chart's Deployment relies on (probes gate Ready, a crashed controller comes back).

use std::time::Duration;

use conclave_testkit::{ControlPlane, NODE_NAME, Node, PROBE_IMAGE, wait_for};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Generous: the first pod on a fresh node on a busy 2-core machine imports nothing but still
/// creates its sandbox, network and token volume.
const POD_TIMEOUT: Duration = Duration::from_secs(180);

/// A Pod of the probe image with a readiness and a liveness probe on `GET /healthz`.
fn probe_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "probe",
                "image": PROBE_IMAGE,
                "imagePullPolicy": "Never",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080},
                    "periodSeconds": 1
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080},
                    "periodSeconds": 5
                }
            }]
        }
    }))
    .expect("the pod manifest is a Pod")
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn the_node_runs_a_probed_pod_and_restarts_a_killed_container() {
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(node) = Node::start(&plane).await.expect("node") else {
        return;
    };
    let ns = plane.namespace("node").await.expect("namespace");
    let client = plane.client().await.expect("client");

    // In-cluster clients reach the API server at the `kubernetes` Service's address, which
    // kube-proxy translates (here from the host; pods take the same rules).
    let mut kubeconfig = Kubeconfig::read_from(plane.kubeconfig_path()).expect("kubeconfig");
    for cluster in &mut kubeconfig.clusters {
        if let Some(cluster) = cluster.cluster.as_mut() {
            cluster.server = Some("https://10.0.0.1:443".into());
        }
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("in-cluster config");
    let in_cluster = Client::try_from(config).expect("in-cluster client");
    wait_for("the kubernetes Service to answer", POD_TIMEOUT, || {
        let in_cluster = in_cluster.clone();
        async move {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            Ok(in_cluster
                .request_text(request)
                .await
                .ok()
                .filter(|b| b == "ok"))
        }
    })
    .await
    .expect("the API server through the kubernetes Service");

    // Pods need their namespace's ServiceAccount, which kube-controller-manager creates.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the default ServiceAccount", POD_TIMEOUT, || {
        let accounts = accounts.clone();
        async move { Ok(accounts.get_opt("default").await?.map(drop)) }
    })
    .await
    .expect("ServiceAccount");

    let pods: Api<Pod> = Api::namespaced(client, &ns);
    pods.create(&PostParams::default(), &probe_pod("probe"))
        .await
        .expect("create pod");
    let ready = wait_for("the pod to be Ready", POD_TIMEOUT, || {
        let pods = pods.clone();
        async move { Ok(pods.get("probe").await.ok().filter(is_ready)) }
    })
    .await
    .expect("pod Ready");
    let spec = ready.spec.as_ref().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(NODE_NAME));
    let status = ready.status.as_ref().expect("status");
    let pod_ip = status.pod_ip.as_deref().expect("pod IP");
    assert!(
        pod_ip.starts_with("10.244.0."),
        "pod IP {pod_ip} is on the node's bridge"
    );
    let container = &status.container_statuses.as_ref().expect("statuses")[0];
    assert_eq!(container.restart_count, 0);
    // `kubectl logs`: the API server reaches the kubelet, which authenticates and authorizes it.
    let logs = pods
        .logs("probe", &LogParams::default())
        .await
        .expect("the container's log through the kubelet");
    assert!(logs.contains("probe: serving /healthz on :8080"), "{logs}");
    let container_id = container.container_id.clone().expect("container id");

    node.kill_container(&container_id).expect("SIGKILL");
    let restarted = wait_for("the kubelet to restart the container", POD_TIMEOUT, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("probe").await?;
            let restarted = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c[0].restart_count == 1);
            Ok((restarted && is_ready(&pod)).then_some(pod))
        }
    })
    .await
    .expect("container restarted and Ready again");
    let container = &restarted
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = container
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("the killed container's termination");
    assert_eq!(last.exit_code, 137, "SIGKILL: 128 + 9");
    assert_ne!(container.container_id.as_ref(), Some(&container_id));
}
