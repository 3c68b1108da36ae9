//! The chart on a real node: `helm install` of deploy/helm/conclave, the image built by
//! deploy/build-image.sh imported into the node's containerd, and Kubernetes itself scheduling,
//! starting and probing the replicas. What an operator's first install relies on: both replicas
//! Ready through the chart's own probes, exactly one active, the PodDisruptionBudget counting
//! them, and the securityContext in force in the running containers.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use conclave_deploy_tests::image::{NONROOT, locate_image};
use conclave_deploy_tests::{FULL_NAME, RELEASE_NAMESPACE, chart_path, locate_helm, run};
use conclave_testkit::{ControlPlane, Node, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::ListParams;

/// Generous: two controller pods start, compile their plugins and sync their caches on a busy
/// 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// `GET http://ip:port/path`; the body of a 200 answer.
async fn http_get(ip: IpAddr, port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
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

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_on_a_real_node_runs_one_active_and_one_standby_replica() {
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

    // No registry: the image goes from the podman store into containerd, as `cluster.sh load`.
    let archive = tempfile::NamedTempFile::new().expect("temp file");
    let archive_path = archive.path().to_string_lossy().into_owned();
    image
        .podman
        .run(&[
            "save",
            "-q",
            "--format",
            "docker-archive",
            "-o",
            &archive_path,
            &image.reference,
        ])
        .expect("podman save")
        .assert_success();
    node.import_image(archive.path())
        .expect("importing the image");

    let (repository, tag) = image
        .reference
        .rsplit_once(':')
        .expect("the image reference has a tag");
    let kubeconfig = plane.kubeconfig_path().to_string_lossy().into_owned();
    let chart = chart_path().to_string_lossy().into_owned();
    run(
        &helm,
        &[
            "install",
            FULL_NAME,
            &chart,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "--set",
            &format!("image.repository={repository}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "image.pullPolicy=Never",
            // One node: the default (hard) anti-affinity would leave the second replica Pending.
            "--set",
            "podAntiAffinity=soft",
        ],
        None,
    )
    .expect("running helm install")
    .assert_success();

    let client = plane.client().await.expect("client");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let describe = || async {
        let pods = Api::<Pod>::namespaced(plane.client().await.unwrap(), RELEASE_NAMESPACE);
        let listed = pods.list(&ListParams::default()).await;
        format!(
            "{:#?}",
            listed.map(|l| l.items.into_iter().map(|p| p.status).collect::<Vec<_>>())
        )
    };
    let ready = wait_for("both replicas Ready", READY_TIMEOUT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get(FULL_NAME).await?;
            let ready = d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2);
            Ok(ready.then_some(d))
        }
    })
    .await;
    if let Err(e) = ready {
        panic!("{e}\npods: {}", describe().await);
    }

    let deployment = deployments.get(FULL_NAME).await.expect("deployment");
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .expect("the chart's selector")
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let replicas = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("the chart's pods")
        .items;
    assert_eq!(replicas.len(), 2, "{replicas:#?}");

    // Exactly one active, the other standby, each as its own /readyz says.
    let roles = wait_for("one active and one standby replica", READY_TIMEOUT, || {
        let replicas = replicas.clone();
        async move {
            let mut roles = BTreeMap::new();
            for pod in &replicas {
                let ip: IpAddr = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .expect("a Ready pod has an IP")
                    .parse()
                    .expect("an IP address");
                let body = http_get(ip, 9090, "/readyz").await.unwrap_or_default();
                roles.insert(pod.metadata.name.clone().unwrap(), body.trim().to_owned());
            }
            let mut values: Vec<&str> = roles.values().map(String::as_str).collect();
            values.sort_unstable();
            Ok((values == ["ok: active", "ok: standby"]).then_some(roles))
        }
    })
    .await
    .expect("one active replica");
    eprintln!("roles: {roles:?}");

    // The PodDisruptionBudget counts both replicas and allows one disruption.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client, RELEASE_NAMESPACE);
    let budget = wait_for("the PodDisruptionBudget's status", READY_TIMEOUT, || {
        let budgets = budgets.clone();
        async move {
            let budget = budgets.get(FULL_NAME).await?;
            let status = budget.status.clone().unwrap_or_default();
            Ok((status.current_healthy == 2).then_some(status))
        }
    })
    .await
    .expect("the PodDisruptionBudget");
    assert_eq!(budget.disruptions_allowed, 1, "{budget:?}");

    // The securityContext, read from the running containers' processes.
    for pod in &replicas {
        let id = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c[0].container_id.clone())
            .expect("a running container");
        let pid = node.container_pid(&id).expect("the container's pid");
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
}
