//! `conclave emulator` as a user runs it: the built binary on a free loopback port prints the
//! kubeconfig path, a kube client works with that kubeconfig, and Ctrl-C (SIGINT) stops it
//! cleanly with exit code 0. Also the warning for a listen address that is not loopback.

use conclave::emulator::exposure_warning;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous bound for the binary to start and to stop (never a timing assertion).
const WAIT: Duration = Duration::from_secs(60);

/// The spawned emulator; killed if a test fails before it exits on its own.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    fn start(kubeconfig: &std::path::Path) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_conclave"));
        command
            .args(["emulator", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        for var in [
            "CONCLAVE_EMULATOR_LISTEN",
            "CONCLAVE_EMULATOR_KUBECONFIG_OUT",
            "CONCLAVE_EMULATOR_HISTORY",
            "CONCLAVE_EMULATOR_BOOKMARK_INTERVAL",
        ] {
            command.env_remove(var);
        }
        let mut child = command.spawn().expect("conclave emulator starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest of it.
    fn line_after(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_string();
                    }
                }
                Err(e) => panic!("no stdout line starting with {prefix:?}: {e}"),
            }
        }
    }

    /// Sends SIGINT, as Ctrl-C in a terminal does, to this child only.
    fn interrupt(&self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -INT failed: {status}");
    }

    fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("child status reads") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "conclave emulator did not exit within {WAIT:?} of SIGINT"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_serves_the_printed_kubeconfig_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("emulator.kubeconfig");
    let mut emulator = Running::start(&kubeconfig);
    let printed = PathBuf::from(emulator.line_after("kubeconfig written to "));
    assert_eq!(printed, std::fs::canonicalize(&kubeconfig).unwrap());

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&printed).expect("kubeconfig reads"),
        &Default::default(),
    )
    .await
    .expect("kubeconfig loads");
    let client = kube::Client::try_from(config).expect("client builds");
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "cli-test" },
        "spec": { "holderIdentity": "me", "leaseDurationSeconds": 15 },
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let read = leases.get("cli-test").await.unwrap();
    assert_eq!(
        read.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("me")
    );

    emulator.interrupt();
    emulator.line_after("shutting down");
    let status = emulator.wait_for_exit();
    assert_eq!(status.code(), Some(0), "exit status after SIGINT: {status}");
}

#[test]
fn only_non_loopback_listen_addresses_are_warned_about() {
    for loopback in ["127.0.0.1:0", "[::1]:6443", "127.0.0.2:8080"] {
        assert_eq!(
            exposure_warning(loopback.parse().unwrap()),
            None,
            "{loopback}"
        );
    }
    for exposed in ["0.0.0.0:6443", "[::]:0", "192.168.1.10:6443"] {
        let warning = exposure_warning(exposed.parse().unwrap()).expect(exposed);
        assert!(
            warning.contains(exposed) && warning.contains("no authentication"),
            "{warning}"
        );
    }
}
