//! `conclave run --log-format json`, as an operator runs it: every line on stdout and stderr is one
//! JSON object, and every line logged while reconciling a Lease names it (`span.lease = "ns/name"`),
//! so a log pipeline can follow one Lease.

use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_emulator::{Emulator, EmulatorConfig};
use conclave_testkit::{CandidateResponder, lease_candidate};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use std::process::{Command, Stdio};
use std::time::Duration;

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_and_name_the_lease() {
    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig = scratch.path().join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let client = Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();

    let log_path = scratch.path().join("controller.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut controller = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["run", "--log-format", "json", "--mode", "all"])
        .args(["--namespace", NS, "--controller-namespace", NS])
        .args(["--metrics-addr", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("conclave run starts");

    let _candidate = CandidateResponder::register(
        client.clone(),
        lease_candidate(
            NS,
            "a",
            "logged",
            "1.33.0",
            Some("1.33.0"),
            OLDEST_EMULATION_VERSION,
        ),
    )
    .await
    .expect("candidate registers");
    let leases: Api<Lease> = Api::namespaced(client, NS);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let holder = leases
            .get_opt("logged")
            .await
            .unwrap()
            .and_then(|lease| lease.spec?.holder_identity);
        if holder.as_deref() == Some("a") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no election; log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // SIGTERM: the controller ends its term gracefully, logging as it goes.
    let pid = controller.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || controller.wait())
        .await
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "exit {status}; log:\n{text}");

    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not a JSON object ({error}): {line}\n{text}"))
        })
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "message"] {
            assert!(line.get(field).is_some(), "no {field}: {line}");
        }
    }
    // Every line logged while reconciling a Lease carries its key, in the `reconcile` span.
    let reconcile_lines: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| {
            line["target"]
                .as_str()
                .is_some_and(|target| target.starts_with("conclave_controller::reconcile"))
        })
        .collect();
    for line in &reconcile_lines {
        assert!(
            line["span"]["lease"]
                .as_str()
                .is_some_and(|key| key.starts_with("default/")),
            "a reconcile line without the Lease key: {line}"
        );
    }
    assert!(
        reconcile_lines
            .iter()
            .any(|line| line["message"] == "Lease written"
                && line["span"]["lease"] == "default/logged"
                && line["winner"] == "a"),
        "no 'Lease written' line for default/logged:\n{text}"
    );
}
