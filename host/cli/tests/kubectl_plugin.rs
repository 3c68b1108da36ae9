//! `kubectl conclave status`, run by the machine's real kubectl: the binary on the PATH as
//! `kubectl-conclave` (a symlink, as krew installs plugins) against the emulator, with kubectl's
//! flags (`-n`, `-A`, `--context`, `--kubeconfig`, `-o wide|json|yaml`) and `$KUBECONFIG`;
//! `kubectl plugin list` lists it.
//!
//! Skips (with a message) when no kubectl is installed, unless `CONCLAVE_REQUIRE_KUBECTL=1`.

use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_emulator::{Emulator, EmulatorConfig};
use conclave_testkit::{CandidateResponder, lease_candidate};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The kubectl to run: `$CONCLAVE_KUBECTL` or `$KUBECTL`, else the pinned 1.33 client, else any
/// `kubectl` (on the PATH or in the Cloud SDK's directory), as the emulator's kubectl test finds it.
fn find_kubectl() -> Option<PathBuf> {
    for var in ["CONCLAVE_KUBECTL", "KUBECTL"] {
        if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(path));
        }
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/lib/google-cloud-sdk/bin"));
    ["kubectl.1.33", "kubectl"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|path| path.is_file())
}

/// Two contexts: `emulator` (namespace `team-a`) and `bogus` (a closed port, namespace `team-b`).
fn kubeconfig(server: &str, current: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: emulator
  cluster:
    server: {server}
- name: bogus
  cluster:
    server: http://127.0.0.1:1
contexts:
- name: emulator
  context:
    cluster: emulator
    user: anonymous
    namespace: team-a
- name: bogus
  context:
    cluster: bogus
    user: anonymous
    namespace: team-b
current-context: {current}
users:
- name: anonymous
  user: {{}}
"
    )
}

/// Runs kubectl with the plugin first on the PATH and `$KUBECONFIG` set.
struct Kubectl {
    bin: PathBuf,
    path: OsString,
    kubeconfig: PathBuf,
}

/// What a run printed and whether it succeeded.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> Run {
        let output = tokio::process::Command::new(&self.bin)
            .args(args)
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("CONCLAVE_KUBECONFIG")
            .env("RUST_BACKTRACE", "0")
            .output()
            .await
            .expect("kubectl runs");
        Run {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl and returns its stdout, failing the test if it fails.
    async fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args).await;
        assert!(
            run.ok,
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        run.stdout
    }

    /// Runs kubectl and returns its stderr, failing the test if it succeeds.
    async fn fails(&self, args: &[&str]) -> String {
        let run = self.run(args).await;
        assert!(
            !run.ok,
            "kubectl {args:?} succeeded:\nstdout: {}",
            run.stdout
        );
        run.stderr
    }
}

/// The Lease names (`namespace/name`) in a table.
fn leases_in(table: &str) -> Vec<&str> {
    table
        .lines()
        .filter(|line| !line.starts_with(' ') && !line.starts_with("LEASE"))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

fn item<'a>(list: &'a serde_json::Value, namespace: &str, name: &str) -> &'a serde_json::Value {
    list["items"]
        .as_array()
        .expect("items is a list")
        .iter()
        .find(|item| item["namespace"] == namespace && item["name"] == name)
        .unwrap_or_else(|| panic!("no {namespace}/{name} in {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_conclave_status_takes_kubectls_flags() {
    let Some(bin) = find_kubectl() else {
        assert!(
            std::env::var("CONCLAVE_REQUIRE_KUBECTL").as_deref() != Ok("1"),
            "no kubectl found and CONCLAVE_REQUIRE_KUBECTL=1 (set CONCLAVE_KUBECTL)"
        );
        eprintln!("SKIP kubectl_conclave_status_takes_kubectls_flags: no kubectl found");
        return;
    };
    eprintln!("using {}", bin.display());

    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let client = Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in ["team-a", "team-b"] {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    // team-a/sched: b holds it, a emulates an older version, so the election would pre-empt b
    // for a. team-b/api: one candidate, no Lease yet.
    let mut candidates = Vec::new();
    for (namespace, name, lease, emulation) in [
        ("team-a", "a", "sched", "1.32.0"),
        ("team-a", "b", "sched", "1.33.0"),
        ("team-b", "c", "api", "1.33.0"),
    ] {
        let candidate = lease_candidate(
            namespace,
            name,
            lease,
            "1.33.0",
            Some(emulation),
            OLDEST_EMULATION_VERSION,
        );
        candidates.push(
            CandidateResponder::register(client.clone(), candidate)
                .await
                .expect("candidate registers"),
        );
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("sched".into()),
            namespace: Some("team-a".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("b".into()),
            lease_duration_seconds: Some(3600),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            acquire_time: Some(MicroTime(jiff::Timestamp::now())),
            lease_transitions: Some(2),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(client, "team-a")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("config");
    std::fs::write(&config, kubeconfig(&emulator.url(), "emulator")).unwrap();
    let bogus_current = scratch.path().join("bogus-current");
    std::fs::write(&bogus_current, kubeconfig(&emulator.url(), "bogus")).unwrap();
    let plugins = scratch.path().join("bin");
    std::fs::create_dir(&plugins).unwrap();
    let plugin = plugins.join("kubectl-conclave");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_conclave"), &plugin).unwrap();
    let path = std::env::join_paths(
        std::iter::once(plugins.clone()).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )
    .unwrap();
    let kubectl = Kubectl {
        bin,
        path,
        kubeconfig: config.clone(),
    };

    // kubectl finds it on the PATH.
    let listed = kubectl.run(&["plugin", "list"]).await;
    assert!(
        listed.stdout.lines().any(|l| Path::new(l.trim()) == plugin),
        "kubectl plugin list does not show {}:\nstdout: {}\nstderr: {}",
        plugin.display(),
        listed.stdout,
        listed.stderr
    );
    let help = kubectl.ok(&["conclave", "status", "--help"]).await;
    assert!(help.contains("Usage: kubectl conclave status"), "{help}");
    assert!(help.contains("--all-namespaces"), "{help}");

    // The context's namespace by default, as `kubectl get`; -A for all; -n for one.
    let table = kubectl.ok(&["conclave", "status"]).await;
    assert_eq!(leases_in(&table), ["team-a/sched"], "{table}");
    assert!(table.contains("a (would pre-empt b)"), "{table}");
    assert!(table.contains("b *"), "the holder is starred: {table}");
    let all = kubectl.ok(&["conclave", "status", "-A"]).await;
    assert_eq!(leases_in(&all), ["team-a/sched", "team-b/api"], "{all}");
    let all = kubectl
        .ok(&["conclave", "status", "--all-namespaces"])
        .await;
    assert_eq!(leases_in(&all), ["team-a/sched", "team-b/api"], "{all}");
    for flag in [
        &["-n", "team-b"][..],
        &["--namespace", "team-b"],
        &["--namespace=team-b"],
    ] {
        let args: Vec<&str> = ["conclave", "status"].iter().chain(flag).copied().collect();
        let table = kubectl.ok(&args).await;
        assert_eq!(leases_in(&table), ["team-b/api"], "{flag:?}: {table}");
        assert!(table.contains("c (would be assigned)"), "{table}");
    }
    let stderr = kubectl
        .fails(&["conclave", "status", "-A", "-n", "team-b"])
        .await;
    assert!(stderr.contains("cannot be used with"), "{stderr}");

    // --context picks the context, its server and its namespace.
    let stderr = kubectl
        .fails(&["conclave", "status", "--context", "bogus"])
        .await;
    assert!(
        stderr.contains("listing Leases in team-b"),
        "the bogus context's namespace and closed port: {stderr}"
    );
    let stderr = kubectl
        .fails(&["conclave", "status", "--context", "nope"])
        .await;
    assert!(
        stderr.contains(r#"context "nope" does not exist"#)
            && stderr.contains("its contexts: emulator, bogus"),
        "names the contexts there are: {stderr}"
    );
    // --kubeconfig wins over $KUBECONFIG; its current context is the bogus one.
    let other = bogus_current.to_str().unwrap();
    let stderr = kubectl
        .fails(&["conclave", "status", "--kubeconfig", other])
        .await;
    assert!(stderr.contains("listing Leases in team-b"), "{stderr}");
    let table = kubectl
        .ok(&[
            "conclave",
            "status",
            "--kubeconfig",
            other,
            "--context",
            "emulator",
        ])
        .await;
    assert_eq!(leases_in(&table), ["team-a/sched"], "{table}");

    // -o wide: more columns.
    let wide = kubectl
        .ok(&["conclave", "status", "-A", "-o", "wide"])
        .await;
    for column in ["DURATION", "ACQUIRED", "TRANSITIONS", "AGE", "COLLECTED"] {
        assert!(wide.contains(column), "no {column} column: {wide}");
        assert!(!all.contains(column), "{column} only in -o wide: {all}");
    }
    let sched = wide
        .lines()
        .find(|l| l.starts_with("team-a/sched"))
        .expect("the sched row");
    assert!(sched.contains("3600s"), "the lease duration: {sched}");

    // -o json: a LeaseStatusList.
    let json = kubectl
        .ok(&["conclave", "status", "-A", "-o", "json"])
        .await;
    let list: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    assert_eq!(list["apiVersion"], "conclave.dev/v1alpha1");
    assert_eq!(list["kind"], "LeaseStatusList");
    assert!(list["observedAt"].is_string(), "{list}");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2), "{list}");
    let sched = item(&list, "team-a", "sched");
    assert_eq!(sched["leaseExists"], true);
    assert_eq!(sched["strategy"], OLDEST_EMULATION_VERSION);
    assert_eq!(sched["strategySource"], "candidates");
    assert_eq!(sched["holder"], "b");
    assert_eq!(sched["preferredHolder"], serde_json::Value::Null);
    assert_eq!(sched["leaseDurationSeconds"], 3600);
    assert_eq!(sched["leaseTransitions"], 2);
    assert_eq!(sched["expired"], false);
    assert_eq!(sched["prediction"]["winner"], "a");
    assert_eq!(sched["prediction"]["outcome"], "preempt");
    assert!(
        sched["prediction"]["why"]
            .as_str()
            .is_some_and(|why| why.starts_with("would pre-empt b")),
        "{sched}"
    );
    let versions: Vec<(&str, &str, &str, bool)> = sched["candidates"]
        .as_array()
        .expect("candidates is a list")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["binaryVersion"].as_str().unwrap(),
                c["emulationVersion"].as_str().unwrap(),
                c["holder"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            ("a", "1.33.0", "1.32.0", false),
            ("b", "1.33.0", "1.33.0", true)
        ]
    );
    for candidate in sched["candidates"].as_array().unwrap() {
        assert_eq!(candidate["healthy"], true, "{candidate}");
        assert!(
            ["fresh", "stale"].contains(&candidate["state"].as_str().unwrap()),
            "{candidate}"
        );
    }
    let api = item(&list, "team-b", "api");
    assert_eq!(api["leaseExists"], false);
    assert_eq!(api["holder"], serde_json::Value::Null);
    assert_eq!(api["prediction"]["outcome"], "assign");
    assert_eq!(api["prediction"]["winner"], "c");

    // -o yaml: the same document.
    let yaml = kubectl
        .ok(&["conclave", "status", "-A", "-o", "yaml"])
        .await;
    let from_yaml: serde_json::Value =
        serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("not YAML ({e}): {yaml}"));
    assert_eq!(from_yaml["apiVersion"], "conclave.dev/v1alpha1");
    assert_eq!(from_yaml["kind"], "LeaseStatusList");
    let summary = |list: &serde_json::Value| -> Vec<(String, String, serde_json::Value)> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    format!("{}/{}", i["namespace"], i["name"]),
                    i["prediction"]["winner"].to_string(),
                    i["candidates"][0]["binaryVersion"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(summary(&from_yaml), summary(&list), "{yaml}");
    let sched = item(&from_yaml, "team-a", "sched");
    assert_eq!(sched["leaseDurationSeconds"], 3600, "numbers stay numbers");
    assert_eq!(sched["preferredHolder"], serde_json::Value::Null, "{yaml}");
    let json_b = kubectl
        .ok(&["conclave", "status", "-n", "team-b", "-o", "json"])
        .await;
    let list_b: serde_json::Value = serde_json::from_str(&json_b).unwrap();
    assert_eq!(
        list_b["items"].as_array().map(Vec::len),
        Some(1),
        "{list_b}"
    );

    // `conclave status` itself keeps its default: every namespace.
    let direct = tokio::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .arg("status")
        .env("KUBECONFIG", &config)
        .env_remove("CONCLAVE_KUBECONFIG")
        .output()
        .await
        .unwrap();
    let direct_table = String::from_utf8_lossy(&direct.stdout);
    assert!(direct.status.success(), "{direct_table}");
    assert_eq!(
        leases_in(&direct_table),
        ["team-a/sched", "team-b/api"],
        "{direct_table}"
    );

    drop(candidates);
    emulator.shutdown().await.expect("clean shutdown");
}
