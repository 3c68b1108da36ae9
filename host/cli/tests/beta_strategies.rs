//! The beta strategy plugins (`conclave.dev/priority`, `conclave.dev/least-disruption`,
//! `conclave.dev/zone-affinity`), built from `strategies/` as separate components and loaded like
//! any third-party plugin: their vectors pass through `conclave strategy test`, a failing vector
//! shows the candidate table, and on a real kube-apiserver the controller elects and pre-empts (or
//! keeps the holder) as each strategy says.

#[path = "../../controller/tests/controller_support/mod.rs"]
mod controller_support;

use conclave_controller as controller;
use conclave_core::plan::Mode;
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::{CandidateResponder, ControlPlane, lease_candidate, wait_for};
use controller_support::{CoordinatedHolder, HolderAudit, WAIT, config, wait_event, wait_lease};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::{Api, Client};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const BETA: [&str; 3] = ["priority", "least-disruption", "zone-affinity"];

use conclave_testkit::wasm_build;

use wasm_build::repo;

/// Builds the beta plugins (once per test binary) as `.ci/test-all.sh` does; returns the
/// directory holding `NAME.wasm`.
fn beta_plugins() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| wasm_build::build_plugins(&BETA))
        .clone()
}

fn wasm(package: &str) -> PathBuf {
    beta_plugins().join(format!("{}.wasm", package.replace('-', "_")))
}

fn conclave(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .output()
        .expect("run conclave")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn vectors(package: &str) -> PathBuf {
    repo().join(format!("tests/vectors/{package}.json"))
}

fn read_vectors(package: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(vectors(package)).unwrap()).unwrap()
}

/// Runs `conclave strategy test` on `package`'s component with a modified copy of its vectors.
fn test_modified(package: &str, modify: impl FnOnce(&mut serde_json::Value)) -> Output {
    let mut file = read_vectors(package);
    modify(&mut file);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modified.json");
    std::fs::write(&path, file.to_string()).unwrap();
    conclave(&[
        "strategy",
        "test",
        wasm(package).to_str().unwrap(),
        "--vectors",
        path.to_str().unwrap(),
    ])
}

#[test]
fn shipped_vectors_pass_for_each_beta_plugin() {
    for package in BETA {
        let cases = read_vectors(package)["cases"].as_array().unwrap().len();
        assert!(cases >= 15, "{package}: {cases} cases");
        let output = conclave(&[
            "strategy",
            "test",
            wasm(package).to_str().unwrap(),
            "--vectors",
            vectors(package).to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{package}: {}", text(&output));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).lines().last(),
            Some(format!("{cases} passed, 0 failed").as_str()),
            "{package}"
        );
        if package == "priority" {
            // An invalid priority counts as 0 and is reported through the host's log import.
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains(
                    r#"candidate "zero": annotation coordination.conclave.dev/priority="0" is not an integer between 1 and 2147483647; counting its priority as 0"#
                ),
                "{stderr}"
            );
        }
    }
}

#[test]
fn beta_plugins_are_not_built_in() {
    let engine = Engine::new(EngineConfig::default()).unwrap();
    for strategy in [
        "conclave.dev/priority",
        "conclave.dev/least-disruption",
        "conclave.dev/zone-affinity",
    ] {
        assert!(!engine.has_strategy(strategy), "{strategy} is built in");
    }
}

#[test]
fn a_failing_case_shows_the_candidates_the_expected_and_the_actual_leader() {
    let output = test_modified("priority", |file| {
        // Case 0: "new" (priority 10) leads; claim "old" should.
        file["cases"][0]["expect"]["leader"] = "old".into();
    });
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failure = r#"FAIL highest priority leads even with a newer version: expected leader "old", got "new""#;
    assert!(stdout.contains(failure), "{stdout}");
    assert!(stdout.contains(r#"    expected: leader "old""#), "{stdout}");
    assert!(stdout.contains(r#"    actual:   leader "new""#), "{stdout}");
    // The table has one row per candidate with its versions and annotations, marked.
    let row = |name: &str| {
        stdout
            .lines()
            .find(|line| line.split_whitespace().any(|cell| cell == name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"))
            .to_owned()
    };
    assert!(row("old").trim_start().starts_with('>'), "{stdout}");
    assert!(row("new").contains("coordination.conclave.dev/priority=10"));
    assert!(row("new").contains("1.33.0"));
    assert!(row("mid").contains("coordination.conclave.dev/priority=5"));
    assert!(
        stdout.lines().last().unwrap().ends_with("passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn error_expectations_are_checked_both_ways() {
    // A case expecting an error that gets a leader fails, and one expecting a leader that gets an
    // error fails, each saying what it got.
    let output = test_modified("zone-affinity", |file| {
        file["cases"][0]["expect"] = serde_json::json!({"error": true});
        file["cases"][1]["settings"] = serde_json::json!({"zones": []});
    });
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            r#"FAIL the earliest listed zone leads over older versions elsewhere: expected an error, got leader "in-a""#
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            r#"FAIL without candidates in the first zone, the second leads: expected leader "in-b", got error (plugin_error)"#
        ),
        "{stdout}"
    );
    assert!(stdout.contains("\"zones\" is empty"), "{stdout}");

    // A wrong expected message fails too.
    let output = test_modified("zone-affinity", |file| {
        let cases = file["cases"].as_array_mut().unwrap();
        let missing = cases
            .iter_mut()
            .find(|c| c["name"] == "missing settings are an error")
            .unwrap();
        missing["expect"]["message"] = "zones[7]".into();
    });
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(
            r#"FAIL missing settings are an error: expected an error containing "zones[7]", got error (plugin_error)"#
        ),
        "{}",
        text(&output)
    );

    // A contradictory expectation is a broken vector file, not a pass.
    let output = test_modified("zone-affinity", |file| {
        file["cases"][0]["expect"] = serde_json::json!({"error": true, "leader": "in-a"});
    });
    assert!(!output.status.success());
    assert!(
        text(&output).contains("has both \\\"error\\\": true and a leader")
            || text(&output).contains(r#"has both "error": true and a leader"#),
        "{}",
        text(&output)
    );
}

#[test]
fn bench_runs_each_beta_plugin_at_100_candidates() {
    for (package, settings, leader) in [
        ("priority", None, "candidate-00008"),
        ("least-disruption", None, "candidate-00000"),
        (
            "zone-affinity",
            Some(r#"{"zones": ["zone-c", "zone-a"]}"#),
            "candidate-00070",
        ),
    ] {
        let wasm = wasm(package);
        let mut args = vec![
            "strategy",
            "bench",
            wasm.to_str().unwrap(),
            "--candidates",
            "100",
            "--iterations",
            "50",
            // This asserts the answer, not the speed: a loaded CI machine must not trip the limit.
            "--time-limit-ms",
            "1000",
        ];
        if let Some(settings) = settings {
            args.extend(["--settings", settings]);
        }
        let output = conclave(&args);
        assert!(output.status.success(), "{package}: {}", text(&output));
        let stdout = String::from_utf8_lossy(&output.stdout);
        // One row for the one size: the component's answer, checked against the same plugin's
        // rule run natively (the ratio column), and the leader.
        let row = stdout
            .lines()
            .find(|line| line.starts_with("conclave.dev/"))
            .unwrap_or_else(|| panic!("{package}: no result row in {stdout}"));
        assert!(
            row.contains("x  "),
            "{package}: no native comparison in {row}"
        );
        assert!(row.ends_with(&format!("\"{leader}\"")), "{package}: {row}");
    }
}

// --- end to end on a real kube-apiserver -------------------------------------------------------

/// The controller, in this process, with the beta plugins loaded from a plugin directory (the
/// zone-affinity sidecar sets its zones), handling this namespace's third-party Leases.
struct Controller {
    shutdown: CancellationToken,
    _plugins: tempfile::TempDir,
}

impl Controller {
    fn start(client: Client, namespace: &str) -> Self {
        let plugins = tempfile::tempdir().unwrap();
        for package in BETA {
            let file = format!("{}.wasm", package.replace('-', "_"));
            std::fs::copy(wasm(package), plugins.path().join(&file)).unwrap();
        }
        std::fs::write(
            plugins.path().join("zone_affinity.json"),
            r#"{"settings": {"zones": ["zone-b", "zone-a"]}}"#,
        )
        .unwrap();
        let engine = Engine::new(EngineConfig {
            plugins_dir: Some(plugins.path().to_path_buf()),
            ..EngineConfig::default()
        })
        .expect("the beta plugins load from the plugin directory");
        let mut config = config(namespace, "conclave-beta-e2e");
        // kube-apiserver's own election controller is active; Conclave takes the prefixed ones.
        config.mode = Mode::ThirdParty;
        config.controller_namespace = namespace.to_owned();
        let shutdown = CancellationToken::new();
        tokio::spawn(controller::run(
            client,
            Arc::new(engine),
            config,
            shutdown.clone(),
        ));
        Self {
            shutdown,
            _plugins: plugins,
        }
    }
}

/// Answers the pings of an existing LeaseCandidate from now on, like a candidate that has just
/// come back; returns the number of acks so far.
fn answer_pings(api: Api<LeaseCandidate>, name: &str) -> Arc<AtomicU32> {
    let acks = Arc::new(AtomicU32::new(0));
    let (count, name) = (acks.clone(), name.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let Ok(mut candidate) = api.get(&name).await else {
                continue;
            };
            let Some(spec) = candidate.spec.as_mut() else {
                continue;
            };
            let pinged = match (&spec.ping_time, &spec.renew_time) {
                (Some(ping), Some(renew)) => ping.0 > renew.0,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if pinged {
                spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
                if api
                    .replace(&name, &PostParams::default(), &candidate)
                    .await
                    .is_ok()
                {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    acks
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Registers a LeaseCandidate with labels and annotations that answers pings.
#[allow(clippy::too_many_arguments)]
async fn register(
    client: &Client,
    namespace: &str,
    lease: &str,
    name: &str,
    version: &str,
    strategy: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> CandidateResponder {
    let mut candidate: LeaseCandidate =
        lease_candidate(namespace, name, lease, version, Some(version), strategy);
    let pairs = |pairs: &[(&str, &str)]| {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        })
    };
    candidate.metadata.labels = pairs(labels);
    candidate.metadata.annotations = pairs(annotations);
    CandidateResponder::register(client.clone(), candidate)
        .await
        .expect("candidate registers")
}

const PRIORITY: &str = "coordination.conclave.dev/priority";
const ZONE: &str = "topology.kubernetes.io/zone";

#[tokio::test(flavor = "multi_thread")]
async fn priority_elects_and_preempts_on_a_real_apiserver() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    beta_plugins();
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("beta-priority").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let audit = HolderAudit::start(leases.clone(), "p");
    let _controller = Controller::start(client.clone(), &ns);
    let s = "conclave.dev/priority";

    // "high" comes first; "low" has the older version, but "high" the higher priority.
    let _high = register(
        &client,
        &ns,
        "p",
        "high",
        "1.37.0",
        s,
        &[],
        &[(PRIORITY, "10")],
    )
    .await;
    let high = CoordinatedHolder::start(leases.clone(), "p", "high");
    let _low = register(&client, &ns, "p", "low", "1.36.0", s, &[], &[]).await;
    let _low_holder = CoordinatedHolder::start(leases.clone(), "p", "low");
    let record = wait_lease(&leases, "p", "high to hold p", |r| {
        r.holder() == Some("high")
    })
    .await;
    assert_eq!(record.strategy(), Some(s));

    // A higher priority arrives: "high" is pre-empted and steps down.
    let _top = register(
        &client,
        &ns,
        "p",
        "top",
        "1.37.0",
        s,
        &[],
        &[(PRIORITY, "20")],
    )
    .await;
    let _top_holder = CoordinatedHolder::start(leases.clone(), "p", "top");
    wait_event(&client, &ns, "p", "Preempted").await;
    wait_lease(&leases, "p", "top to take over", |r| {
        r.holder() == Some("top")
    })
    .await;
    assert!(high.releases() >= 1, "high stepped down through a release");
    assert!(
        !audit.changes().contains(&"low".to_owned()),
        "{:?}",
        audit.changes()
    );
    audit.assert_never_two_holders();
}

#[tokio::test(flavor = "multi_thread")]
async fn least_disruption_keeps_a_tied_holder_and_yields_to_an_older_version() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    beta_plugins();
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("beta-least-disruption").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), &ns);
    let audit = HolderAudit::start(leases.clone(), "d");
    let _controller = Controller::start(client.clone(), &ns);
    let s = "conclave.dev/least-disruption";

    // "aa-tied" exists first (so it is older, and its name sorts first) but does not answer
    // pings yet, so "zz-holder" is elected.
    let mut tied = lease_candidate(&ns, "aa-tied", "d", "1.37.0", Some("1.37.0"), s);
    tied.spec.as_mut().unwrap().renew_time = Some(MicroTime(
        jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
    ));
    candidates
        .create(&PostParams::default(), &tied)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _holder = register(&client, &ns, "d", "zz-holder", "1.37.0", s, &[], &[]).await;
    let holder = CoordinatedHolder::start(leases.clone(), "d", "zz-holder");
    let _tied_holder = CoordinatedHolder::start(leases.clone(), "d", "aa-tied");
    wait_lease(&leases, "d", "zz-holder to hold d", |r| {
        r.holder() == Some("zz-holder")
    })
    .await;

    // Now "aa-tied" answers pings. OldestEmulationVersion would pre-empt the holder for it (same
    // versions, older); least-disruption keeps the holder. Wait until it has acked (so it takes
    // part in elections), then several ack windows more.
    let acks = answer_pings(candidates.clone(), "aa-tied");
    wait_for("aa-tied to answer a ping", WAIT, || async {
        Ok((acks.load(Ordering::SeqCst) > 0).then_some(()))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let record = wait_lease(&leases, "d", "the Lease", |_| true).await;
    assert_eq!(record.holder(), Some("zz-holder"), "{record:?}");
    assert_eq!(
        record.preferred(),
        None,
        "a tied holder must not be pre-empted"
    );
    assert_eq!(holder.releases(), 0);

    // A strictly older version arrives: now the holder is pre-empted.
    let _older = register(&client, &ns, "d", "older", "1.36.0", s, &[], &[]).await;
    let _older_holder = CoordinatedHolder::start(leases.clone(), "d", "older");
    wait_lease(&leases, "d", "older to take over", |r| {
        r.holder() == Some("older")
    })
    .await;
    assert!(holder.releases() >= 1);
    assert!(
        !audit.changes().contains(&"aa-tied".to_owned()),
        "{:?}",
        audit.changes()
    );
    audit.assert_never_two_holders();
}

#[tokio::test(flavor = "multi_thread")]
async fn zone_affinity_prefers_the_configured_zones_on_a_real_apiserver() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    beta_plugins();
    let client = cp.client().await.unwrap();
    let ns = cp.namespace("beta-zone-affinity").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let audit = HolderAudit::start(leases.clone(), "z");
    let _controller = Controller::start(client.clone(), &ns);
    let s = "conclave.dev/zone-affinity";

    // The sidecar lists zone-b, then zone-a. zone-c is not listed, so its older version loses.
    let _a = register(
        &client,
        &ns,
        "z",
        "in-a",
        "1.37.0",
        s,
        &[(ZONE, "zone-a")],
        &[],
    )
    .await;
    let in_a = CoordinatedHolder::start(leases.clone(), "z", "in-a");
    let _c = register(
        &client,
        &ns,
        "z",
        "in-c",
        "1.35.0",
        s,
        &[(ZONE, "zone-c")],
        &[],
    )
    .await;
    let _in_c = CoordinatedHolder::start(leases.clone(), "z", "in-c");
    wait_lease(&leases, "z", "in-a to hold z", |r| {
        r.holder() == Some("in-a")
    })
    .await;

    // A candidate in the most preferred zone arrives: in-a is pre-empted.
    let _b = register(
        &client,
        &ns,
        "z",
        "in-b",
        "1.37.0",
        s,
        &[(ZONE, "zone-b")],
        &[],
    )
    .await;
    let _in_b = CoordinatedHolder::start(leases.clone(), "z", "in-b");
    wait_event(&client, &ns, "z", "Preempted").await;
    wait_lease(&leases, "z", "in-b to take over", |r| {
        r.holder() == Some("in-b")
    })
    .await;
    assert!(in_a.releases() >= 1);
    assert!(
        !audit.changes().contains(&"in-c".to_owned()),
        "{:?}",
        audit.changes()
    );
    audit.assert_never_two_holders();
}
