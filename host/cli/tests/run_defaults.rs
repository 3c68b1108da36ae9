//! `conclave run` as a new user starts it, outside a pod: with its defaults it keeps its own Lease
//! in `kube-system` and elects; a controller namespace that does not exist ends it at once with
//! exit code 2 and a message naming the namespace and the flag; in a pod the same mistake keeps
//! it running, unready, with `/readyz` saying what to do until the namespace exists; SIGTERM
//! releases its Lease and exits 0.

#[path = "../../controller/tests/controller_support/mod.rs"]
mod controller_support;

use conclave_controller::CONTROLLER_LEASE;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_emulator::RunningEmulator;
use controller_support::{NS, WAIT, candidate, emulator, free_addr, wait_lease};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// `conclave run --kubeconfig K --metrics-addr A` plus `extra`, with the environment of a shell
/// outside any pod plus `env`; killed on drop. Its log is kept in a temporary directory.
struct Run {
    child: Child,
    dir: tempfile::TempDir,
    metrics: SocketAddr,
}

impl Run {
    fn start(emulator: &RunningEmulator, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        emulator
            .write_kubeconfig(&kubeconfig)
            .expect("write kubeconfig");
        let metrics = free_addr();
        let log = std::fs::File::create(dir.path().join("run.log")).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_conclave"));
        command
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", &metrics.to_string()])
            .args(extra)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("conclave run starts");
        Self {
            child,
            dir,
            metrics,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run.log")).unwrap_or_default()
    }

    /// Waits for the process to exit on its own.
    async fn exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "conclave run did not exit; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn terminate(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.expect("kill runs").success(), "SIGTERM sent");
    }

    /// Polls `/readyz` until `wanted(status line, body)`, and returns the body.
    async fn wait_readyz(&self, what: &str, wanted: impl Fn(&str, &str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        let mut last = None;
        loop {
            if let Some((status, body)) = readyz(self.metrics).await {
                if wanted(&status, &body) {
                    return body;
                }
                last = Some((status, body));
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for /readyz: {what}; last answer {last:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/readyz`'s status line and body, or `None` while nothing listens.
async fn readyz(addr: SocketAddr) -> Option<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

async fn create_namespace(client: &Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_its_defaults_it_elects_and_a_sigterm_releases_its_lease_and_exits_0() {
    let (emulator, client) = emulator().await;
    let mut run = Run::start(&emulator, &[], &[]);
    let body = run
        .wait_readyz("ready and active", |status, _| status.contains("200"))
        .await;
    assert_eq!(body.trim(), "ok: active");
    let own: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    wait_lease(
        &own,
        CONTROLLER_LEASE,
        "the controller holds its Lease",
        |r| r.holder().is_some_and(|holder| !holder.is_empty()),
    )
    .await;

    let _newer = candidate(&client, "newer", "app", "1.34.0", "1.34.0", OEV).await;
    let _oldest = candidate(&client, "oldest", "app", "1.34.0", "1.32.0", OEV).await;
    let _middle = candidate(&client, "middle", "app", "1.34.0", "1.33.0", OEV).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    wait_lease(
        &leases,
        "app",
        "the oldest emulation version elected",
        |r| r.holder() == Some("oldest"),
    )
    .await;

    run.terminate();
    let status = run.exit().await;
    assert!(status.success(), "exit {status}; log:\n{}", run.log());
    let released = own
        .get(CONTROLLER_LEASE)
        .await
        .expect("the controller Lease")
        .spec
        .unwrap_or_default();
    assert_eq!(
        released.holder_identity.as_deref(),
        Some(""),
        "released on SIGTERM; log:\n{}",
        run.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn outside_a_pod_a_missing_controller_namespace_exits_2_naming_it_and_the_flag() {
    let (emulator, _client) = emulator().await;
    let mut run = Run::start(&emulator, &["--controller-namespace", "ops"], &[]);
    let status = run.exit().await;
    let log = run.log();
    assert_eq!(status.code(), Some(2), "log:\n{log}");
    assert!(
        log.contains("cannot create Lease ops/conclave-controller")
            && log.contains("create namespace \"ops\"")
            && log.contains("--controller-namespace"),
        "the message names the namespace and the flag:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_pod_a_missing_namespace_keeps_it_unready_saying_why_until_it_exists() {
    let (emulator, client) = emulator().await;
    // A pod's environment (the kubelet's service variable, the chart's POD_NAMESPACE).
    let pod = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("POD_NAMESPACE", "conclave-system"),
    ];
    let run = Run::start(&emulator, &[], &pod);
    let body = run
        .wait_readyz("unready, saying why", |status, body| {
            status.contains("503") && body.contains("create namespace")
        })
        .await;
    assert!(
        body.starts_with("not ready: cannot create Lease conclave-system/conclave-controller")
            && body.contains("create namespace \"conclave-system\""),
        "{body}"
    );
    let log = run.log();
    assert_eq!(
        log.matches("cannot create Lease").count(),
        1,
        "reported once, not at every retry:\n{log}"
    );

    create_namespace(&client, "conclave-system").await;
    let body = run
        .wait_readyz("ready once the namespace exists", |status, _| {
            status.contains("200")
        })
        .await;
    assert_eq!(body.trim(), "ok: active");
}
