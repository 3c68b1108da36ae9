//! Drives the machine's real kubectl against the emulator: apply, get (tables, -A, -o yaml),
//! get -w showing an update, delete, and a server-side validation error.
//!
//! Skips (with a message) when no kubectl is installed, unless CONCLAVE_REQUIRE_KUBECTL=1.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn find_kubectl() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("CONCLAVE_KUBECTL") {
        return Some(PathBuf::from(p));
    }
    let candidates = ["kubectl.1.33", "kubectl"];
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/lib/google-cloud-sdk/bin"));
    for name in candidates {
        for dir in &dirs {
            let path = dir.join(name);
            if path.is_file() {
                return Some(path);
            }
        }
    }
    None
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args);
        c
    }

    /// Runs kubectl and returns (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command(args).output().expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args);
        assert!(
            ok,
            "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}"
        );
        stdout
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write manifest");
    path.to_string_lossy().into_owned()
}

const CANDIDATE: &str = "apiVersion: coordination.k8s.io/v1beta1
kind: LeaseCandidate
metadata:
  name: scheduler-node_A
  namespace: kube-system
  labels:
    app: demo
spec:
  leaseName: demo-lease
  binaryVersion: 1.33.0
  emulationVersion: 1.33.0
  strategy: OldestEmulationVersion
";

const LEASE: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: demo-lease
  namespace: kube-system
spec:
  holderIdentity: scheduler-node_A
  leaseDurationSeconds: 15
  strategy: OldestEmulationVersion
";

const BAD_CANDIDATE: &str = "apiVersion: coordination.k8s.io/v1beta1
kind: LeaseCandidate
metadata:
  name: broken
  namespace: default
spec:
  leaseName: demo-lease
  binaryVersion: 1.30.0
  emulationVersion: 1.31.0
  strategy: OldestEmulationVersion
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_watch_delete() {
    let Some(bin) = find_kubectl() else {
        assert!(
            std::env::var("CONCLAVE_REQUIRE_KUBECTL").as_deref() != Ok("1"),
            "no kubectl found and CONCLAVE_REQUIRE_KUBECTL=1"
        );
        eprintln!(
            "SKIP kubectl_apply_get_watch_delete: no kubectl binary found (set CONCLAVE_KUBECTL)"
        );
        return;
    };
    eprintln!("using {}", bin.display());
    let (emulator, _client) = common::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl {
        bin,
        kubeconfig,
        cache: dir.path().join("cache"),
    };
    let dir_path = dir.path().to_path_buf();
    // kubectl is blocking; run it off the runtime's worker threads.
    tokio::task::spawn_blocking(move || scenario(&k, &dir_path))
        .await
        .expect("scenario completes");
    emulator.shutdown().await.expect("clean shutdown");
}

fn scenario(k: &Kubectl, dir: &Path) {
    let version = k.ok(&["version", "-o", "json"]);
    assert!(version.contains("\"serverVersion\""), "{version}");

    let candidate = write(dir, "candidate.yaml", CANDIDATE);
    let out = k.ok(&["apply", "-f", &candidate]);
    assert!(
        out.contains("leasecandidate.coordination.k8s.io/scheduler-node_A created"),
        "{out}"
    );
    let changed = write(
        dir,
        "candidate2.yaml",
        &CANDIDATE.replace("binaryVersion: 1.33.0", "binaryVersion: 1.33.1"),
    );
    // A server-side dry run is answered but stores nothing: the next real apply still changes it.
    let out = k.ok(&["apply", "--dry-run=server", "-f", &changed]);
    assert!(out.contains("configured (server dry run)"), "{out}");
    let out = k.ok(&["apply", "-f", &changed]);
    assert!(out.contains("configured"), "{out}");
    let out = k.ok(&["apply", "-f", &changed]);
    assert!(out.contains("unchanged"), "{out}");
    let lease = write(dir, "lease.yaml", LEASE);
    let out = k.ok(&["apply", "-f", &lease]);
    assert!(
        out.contains("lease.coordination.k8s.io/demo-lease created"),
        "{out}"
    );

    let out = k.ok(&["get", "leases", "-A"]);
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.contains("NAMESPACE")
            && header.contains("NAME")
            && header.contains("HOLDER")
            && header.contains("AGE"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("kube-system")
            && l.contains("demo-lease")
            && l.contains("scheduler-node_A")),
        "{out}"
    );

    let yaml = k.ok(&["get", "leasecandidates", "-n", "kube-system", "-o", "yaml"]);
    for want in [
        "kind: LeaseCandidate",
        "name: scheduler-node_A",
        "leaseName: demo-lease",
        "binaryVersion: 1.33.1",
        "resourceVersion:",
        "uid:",
    ] {
        assert!(yaml.contains(want), "missing {want:?} in:\n{yaml}");
    }
    let out = k.ok(&[
        "get",
        "leasecandidates",
        "-n",
        "kube-system",
        "-l",
        "app=demo",
    ]);
    assert!(
        out.contains("scheduler-node_A") && out.contains("demo-lease") && out.contains("1.33.1"),
        "{out}"
    );

    // get -w prints the current row, then a row for every change.
    let mut child = k
        .command(&["get", "lease", "demo-lease", "-n", "kube-system", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl get -w starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |pred: &dyn Fn(&str) -> bool, what: &str| {
        let deadline = std::time::Instant::now() + common::WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) => {
                    seen.push(line.clone());
                    if pred(&line) {
                        return;
                    }
                }
                Err(_) => panic!("kubectl get -w never showed {what}; saw {seen:?}"),
            }
        }
    };
    wait_for(
        &|l| l.contains("demo-lease") && l.contains("scheduler-node_A"),
        "the current lease",
    );
    k.ok(&[
        "patch",
        "lease",
        "demo-lease",
        "-n",
        "kube-system",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"holderIdentity":"scheduler-node_B"}}"#,
    ]);
    wait_for(
        &|l| l.contains("demo-lease") && l.contains("scheduler-node_B"),
        "the update",
    );
    // The watch child is ours: stop it by its own handle.
    child.kill().expect("stop kubectl get -w");
    child.wait().expect("reap kubectl get -w");

    let bad = write(dir, "bad.yaml", BAD_CANDIDATE);
    let (ok, _, stderr) = k.run(&["apply", "-f", &bad]);
    assert!(!ok, "an invalid LeaseCandidate must be rejected");
    assert!(
        stderr.contains("is invalid") && stderr.contains("spec.binaryVersion"),
        "{stderr}"
    );

    let out = k.ok(&[
        "delete",
        "leasecandidate",
        "scheduler-node_A",
        "-n",
        "kube-system",
        "--dry-run=server",
    ]);
    assert!(out.contains("deleted (server dry run)"), "{out}");
    k.ok(&[
        "get",
        "leasecandidate",
        "scheduler-node_A",
        "-n",
        "kube-system",
    ]);
    let out = k.ok(&[
        "delete",
        "leasecandidate",
        "scheduler-node_A",
        "-n",
        "kube-system",
    ]);
    assert!(out.contains("deleted"), "{out}");
    let (_, out, err) = k.run(&["get", "leasecandidates", "-n", "kube-system"]);
    assert!(
        err.contains("No resources found") || out.contains("No resources found"),
        "{out}{err}"
    );
    let (ok, _, err) = k.run(&[
        "get",
        "leasecandidate",
        "scheduler-node_A",
        "-n",
        "kube-system",
    ]);
    assert!(!ok && err.contains("NotFound"), "{err}");

    // Resources the emulator does not serve: kubectl's discovery says so by name, and a request
    // that reaches the server is told what the emulator serves.
    let (ok, _, err) = k.run(&["get", "configmaps"]);
    assert!(
        !ok && err.contains(r#"the server doesn't have a resource type "configmaps""#),
        "{err}"
    );
    let (ok, _, err) = k.run(&["get", "--raw", "/api/v1/namespaces/default/configmaps"]);
    assert!(
        !ok && err.contains("the Conclave emulator serves only")
            && err.contains("use a real control plane"),
        "{err}"
    );
}
