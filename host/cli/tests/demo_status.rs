//! `conclave demo` and `conclave status` against the embedded API server.
//!
//! The demo must complete its rolling upgrade by itself and end with the right leaders; status
//! must show each coordinated Lease's holder and the candidate its strategy would pick now, and
//! redraw when the Lease changes. Waits are on conditions with generous bounds, never on timing.

use conclave_demo::journal::HandoffKind;
use conclave_demo::{DemoConfig, LeaseId, run_demo};
use conclave_emulator::{Emulator, EmulatorConfig};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const CONCLAVE: &str = env!("CARGO_BIN_EXE_conclave");

/// Room for the demo's six restarts even on a busy machine; the steps are spread over it.
const DEMO_DURATION: &str = "45s";

/// A `Write` into a shared buffer, to read the demo's output after it ran.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn demo_config(duration: &str) -> DemoConfig {
    DemoConfig {
        duration: conclave::duration::parse(duration).expect("a duration"),
        ..DemoConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demo_upgrades_the_component_and_ends_with_the_oldest_candidate_leading() {
    let output = Captured::default();
    let report = run_demo(
        demo_config(DEMO_DURATION),
        Box::new(output.clone()),
        CancellationToken::new(),
    )
    .await
    .expect("the demo runs");
    let text = String::from_utf8(output.0.lock().unwrap().clone()).unwrap();
    assert!(report.succeeded(), "{:?}\n{text}", report.problems);
    assert!(report.completed);
    assert!(report.record.overlaps.is_empty(), "{text}");

    // After the upgrade every replica runs 1.37.0/1.37.0, restarted in order 0, 1, 2: replica-0
    // is the oldest candidate, and it leads.
    let main_holder = report
        .final_holders
        .iter()
        .find(|(id, _)| *id == LeaseId::Main)
        .and_then(|(_, h)| h.clone());
    assert_eq!(report.expected_main_leader.as_deref(), Some("replica-0"));
    assert_eq!(main_holder.as_deref(), Some("replica-0"), "{text}");

    // Stopping the leader hands off gracefully: the main Lease changes hands at least once per
    // restart of its leader, every time released before the next leader starts.
    let main: Vec<_> = report
        .record
        .handoffs
        .iter()
        .filter(|h| h.lease == LeaseId::Main)
        .collect();
    assert!(main.len() >= 4, "{text}");
    for handoff in &main {
        assert_ne!(handoff.from, handoff.to);
        assert_eq!(handoff.kind, HandoffKind::Shutdown);
        assert!(
            handoff.asked_to_released.is_some(),
            "{handoff:?} released before the new leader"
        );
    }
    assert!(
        report.record.pings > 0,
        "the controller pinged stale candidates"
    );
    assert!(!report.record.acks.is_empty(), "candidates acked the pings");

    // The demo always has a plugin Lease: conclave.dev/priority, built or embedded.
    assert_eq!(
        report.plugin_strategy.as_deref(),
        Ok("conclave.dev/priority"),
        "{text}"
    );
    // replica-2 has the highest priority: after each of its restarts it pre-empts the interim
    // leader.
    let plugin_holder = report
        .final_holders
        .iter()
        .find(|(id, _)| *id == LeaseId::Plugin)
        .and_then(|(_, h)| h.clone());
    assert_eq!(plugin_holder.as_deref(), Some("replica-2.p"), "{text}");
    assert!(
        report
            .record
            .handoffs
            .iter()
            .any(|h| h.lease == LeaseId::Plugin && h.kind == HandoffKind::Preempted),
        "{text}"
    );
    for expected in [
        "Summary",
        "hand-offs; total latency median",
        "two leaders of one Lease at once: never",
        "final leader of demo-component: replica-0",
        "Rolling upgrade complete",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_command_exits_zero_by_itself_with_a_summary() {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(CONCLAVE)
            .args(["demo", "--duration", DEMO_DURATION])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo stops by itself")
    .expect("conclave runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("── phase 1: binary versions"), "{stdout}");
    assert!(
        stdout.contains("── phase 2: emulation versions"),
        "{stdout}"
    );
    assert!(stdout.contains("ping → "), "{stdout}");
    assert!(stdout.contains("← hand-off from"), "{stdout}");
    assert!(
        stdout.contains("final leader of demo-component: replica-0"),
        "{stdout}"
    );
}

/// The same scenario on a real kube-apiserver (conclave-testkit), whose own election controller
/// becomes active soon after start: Conclave (`--mode auto`) then leaves `OldestEmulationVersion`
/// to it and elects the plugin Lease. Skipped (SKIP line) when the control-plane binaries are not built.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_runs_against_a_real_kube_apiserver() {
    let Some(plane) = conclave_testkit::ControlPlane::start()
        .await
        .expect("control plane")
    else {
        return;
    };
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(CONCLAVE)
            .arg("demo")
            .arg("--kubeconfig")
            .arg(plane.kubeconfig_path())
            .args(["--duration", "60s"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo stops by itself")
    .expect("conclave runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Captured by libtest; shown with --nocapture.
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("final leader of demo-component: replica-0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("two leaders of one Lease at once: never"),
        "{stdout}"
    );
    let namespace = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("namespace   "))
        .expect("the namespace is printed")
        .trim()
        .to_owned();
    assert!(namespace.starts_with("conclave-demo-"), "{namespace}");
    let client = plane.client().await.unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let gone = ns
        .get_opt(&namespace)
        .await
        .unwrap()
        .is_none_or(|n| n.metadata.deletion_timestamp.is_some());
    assert!(gone, "the demo's namespace {namespace} is deleted");
}

async fn emulator() -> (conclave_emulator::RunningEmulator, Client) {
    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("url"));
    (emulator, Client::try_from(config).expect("client"))
}

fn ago(seconds: i64) -> MicroTime {
    MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds))
}

fn candidate(
    name: &str,
    lease: &str,
    binary: &str,
    emulation: &str,
    renewed: i64,
) -> LeaseCandidate {
    LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseCandidateSpec {
            lease_name: lease.into(),
            binary_version: binary.into(),
            emulation_version: Some(emulation.into()),
            strategy: "OldestEmulationVersion".into(),
            renew_time: Some(ago(renewed)),
            ping_time: None,
        }),
    }
}

fn lease(name: &str, holder: Option<&str>, strategy: Option<&str>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(Into::into),
            lease_duration_seconds: Some(60),
            renew_time: Some(ago(0)),
            strategy: strategy.map(Into::into),
            ..LeaseSpec::default()
        }),
    }
}

/// `sched` is held by `b`; `a` has an older emulation version and is fresh, `c` is older still
/// but has not renewed for two hours (expired). `plain` is classic leader election (not
/// coordinated); `orphan` names a strategy but has no candidates.
async fn populate(client: &Client) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    leases
        .create(&pp, &lease("sched", Some("b"), None))
        .await
        .unwrap();
    leases
        .create(&pp, &lease("plain", Some("x"), None))
        .await
        .unwrap();
    leases
        .create(&pp, &lease("orphan", None, Some("example.com/nobody")))
        .await
        .unwrap();
    for object in [
        candidate("a", "sched", "1.31.0", "1.30.0", 1),
        candidate("b", "sched", "1.31.0", "1.31.0", 1),
        candidate("c", "sched", "1.30.0", "1.29.0", 7200),
    ] {
        candidates.create(&pp, &object).await.unwrap();
    }
}

fn kubeconfig(emulator: &conclave_emulator::RunningEmulator) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    emulator.write_kubeconfig(file.path()).unwrap();
    file
}

fn row<'a>(text: &'a str, starts: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(starts))
        .unwrap_or_else(|| panic!("no line starting with {starts:?} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_holder_candidates_and_the_strategys_pick() {
    let (emulator, client) = emulator().await;
    populate(&client).await;
    // `d` renews on its own schedule (a minute ago, longer than the ack window): healthy, and
    // pinged before the next election. `e` did not answer the ping sent 30 s ago.
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "default");
    let mut unanswered = candidate("e", "sched", "1.31.0", "1.31.0", 120);
    if let Some(spec) = unanswered.spec.as_mut() {
        spec.ping_time = Some(ago(30));
    }
    for object in [candidate("d", "sched", "1.31.0", "1.31.0", 60), unanswered] {
        candidates
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let config = kubeconfig(&emulator);
    let output = tokio::process::Command::new(CONCLAVE)
        .arg("status")
        .arg("--kubeconfig")
        .arg(config.path())
        .args(["--namespace", "default"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sched = row(&text, "default/sched");
    assert!(
        sched.contains("OldestEmulationVersion (from candidates)"),
        "{sched}"
    );
    let columns: Vec<&str> = sched.split_whitespace().collect();
    assert!(columns.contains(&"b"), "holder b: {sched}");
    assert!(sched.contains("a (would pre-empt b)"), "{sched}");
    assert!(row(&text, "a ").contains("healthy"), "{text}");
    assert!(
        row(&text, "b *").contains("healthy"),
        "the holder is starred: {text}"
    );
    assert!(row(&text, "c ").contains("expired"), "{text}");
    let d = row(&text, "d ");
    assert!(
        d.contains("healthy"),
        "renewing on schedule is healthy: {d}"
    );
    assert!(d.contains("pinged before its next election"), "{d}");
    let e = row(&text, "e ");
    assert!(e.contains("failed ping"), "{e}");
    assert!(e.contains("no answer to the ping at"), "{e}");
    assert!(e.contains("garbage-collected at"), "{e}");
    let orphan = row(&text, "default/orphan");
    assert!(orphan.contains("example.com/nobody"), "{orphan}");
    assert!(orphan.contains("no live candidates"), "{orphan}");
    assert!(!text.contains("default/plain"), "not coordinated: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn status_watch_redraws_when_the_lease_changes() {
    let (emulator, client) = emulator().await;
    populate(&client).await;
    let config = kubeconfig(&emulator);
    let mut child = tokio::process::Command::new(CONCLAVE)
        .arg("status")
        .arg("--kubeconfig")
        .arg(config.path())
        .args(["--namespace", "default", "--watch"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let mut wait_for = async |needle: &str| {
        tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains("default/sched") && line.contains(needle) {
                    return;
                }
            }
            panic!("status --watch ended");
        })
        .await
        .unwrap_or_else(|_| panic!("no redraw showing {needle:?}; output so far:\n{seen}"));
    };
    wait_for("a (would pre-empt b)").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    leases
        .patch(
            "sched",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "a"}})),
        )
        .await
        .unwrap();
    wait_for("a (holds it)").await;
    child.kill().await.unwrap();
}
