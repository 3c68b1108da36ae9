//! Strategy plugins written in Python (componentize-py) and JavaScript (componentize-js), built
//! from the `conclave strategy new --lang` templates by `.ci/prepare-langs.sh` with the pinned
//! registry toolchains: their vectors and the built-in rule's pass through `conclave strategy test`
//! under the limits their sidecars set, and `conclave run --plugins` elects with both on the
//! emulator.
//!
//! The components are found in `target/langs/plugins` (`$CONCLAVE_LANGS_DIR/plugins` when set), the
//! instantiated projects in `target/langs/build`. When they are missing each test prints SKIP,
//! unless `CONCLAVE_REQUIRE_LANGS=1`, which makes that a failure.

use conclave_emulator::{Emulator, EmulatorConfig};
use conclave_testkit::{CandidateResponder, lease_candidate};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The plugins `.ci/prepare-langs.sh` builds: (language, project name, strategy).
const PLUGINS: [(&str, &str, &str); 2] = [
    ("python", "py-rule", "example.com/py-rule"),
    ("javascript", "js-rule", "example.com/js-rule"),
];

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// What `.ci/prepare-langs.sh` prepares: `target/langs`, or `$CONCLAVE_LANGS_DIR`.
fn langs() -> PathBuf {
    std::env::var_os("CONCLAVE_LANGS_DIR")
        .map_or_else(|| repo().join("target/langs"), PathBuf::from)
}

/// The directory of built plugins, or `None` (with a SKIP line) when a plugin is missing, unless
/// `CONCLAVE_REQUIRE_LANGS=1`.
fn plugins_dir(test: &str) -> Option<PathBuf> {
    let dir = langs().join("plugins");
    let missing: Vec<String> = PLUGINS
        .iter()
        .map(|(_, name, _)| dir.join(format!("{}.wasm", name.replace('-', "_"))))
        .filter(|wasm| !wasm.is_file())
        .map(|wasm| wasm.display().to_string())
        .collect();
    if missing.is_empty() {
        return Some(dir);
    }
    assert!(
        std::env::var("CONCLAVE_REQUIRE_LANGS").as_deref() != Ok("1"),
        "{} missing: run .ci/prepare-langs.sh",
        missing.join(", ")
    );
    eprintln!(
        "SKIP {test}: {} missing; run .ci/prepare-langs.sh",
        missing.join(", ")
    );
    None
}

/// Compiling one of these components takes 10 to 25 s: every run shares one code cache.
fn cache_dir() -> PathBuf {
    langs().join("cache")
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

/// Runs `conclave strategy test` on `wasm` (whose sidecar sets its limits) and checks every case
/// of `vectors` passed.
fn assert_vectors_pass(wasm: &Path, vectors: &Path) {
    let cases =
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(vectors).unwrap())
            .unwrap()["cases"]
            .as_array()
            .unwrap()
            .len();
    let output = conclave(&[
        "strategy",
        "test",
        wasm.to_str().unwrap(),
        "--vectors",
        vectors.to_str().unwrap(),
        "--cache-dir",
        cache_dir().to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{} {}: {}",
        wasm.display(),
        vectors.display(),
        text(&output)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).lines().last(),
        Some(format!("{cases} passed, 0 failed").as_str()),
        "{}: {}",
        wasm.display(),
        text(&output)
    );
}

#[test]
fn template_vectors_pass_for_each_language() {
    let Some(dir) = plugins_dir("template_vectors_pass_for_each_language") else {
        return;
    };
    for (lang, name, _) in PLUGINS {
        let wasm = dir.join(format!("{}.wasm", name.replace('-', "_")));
        let vectors = langs().join(format!("build/{lang}/{name}/vectors/{name}.json"));
        assert_vectors_pass(&wasm, &vectors);
    }
}

/// The templates start from `OldestEmulationVersion`: each port passes the built-in rule's own
/// vectors (run under the plugin's strategy name; the alias case is the built-in's alone).
#[test]
fn each_language_passes_the_builtin_rules_vectors() {
    let Some(dir) = plugins_dir("each_language_passes_the_builtin_rules_vectors") else {
        return;
    };
    let builtin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tests/vectors/oldest-emulation-version.json"))
            .unwrap(),
    )
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for (_, name, strategy) in PLUGINS {
        let mut file = builtin.clone();
        file["strategy"] = strategy.into();
        let cases = file["cases"].as_array_mut().unwrap();
        cases.retain(|case| case.get("strategy").is_none());
        assert!(cases.len() >= 30, "{} cases", cases.len());
        for case in cases.iter_mut() {
            for candidate in case["candidates"].as_array_mut().unwrap() {
                candidate["spec"]["strategy"] = strategy.into();
            }
        }
        let vectors = scratch.path().join(format!("{name}.json"));
        std::fs::write(&vectors, file.to_string()).unwrap();
        assert_vectors_pass(
            &dir.join(format!("{}.wasm", name.replace('-', "_"))),
            &vectors,
        );
    }
}

/// `conclave run --plugins` loads both components (limits from their sidecars) and elects with
/// each: one Lease per strategy, the oldest emulation version leads.
#[tokio::test(flavor = "multi_thread")]
async fn conclave_run_elects_with_python_and_javascript_plugins() {
    let Some(dir) = plugins_dir("conclave_run_elects_with_python_and_javascript_plugins") else {
        return;
    };
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
        .args(["run", "--mode", "all"])
        .args(["--namespace", NS, "--controller-namespace", NS])
        .args(["--metrics-addr", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--plugins")
        .arg(&dir)
        .arg("--plugin-cache-dir")
        .arg(cache_dir())
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("conclave run starts");
    let controller_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let mut responders = Vec::new();
    for (_, name, strategy) in PLUGINS {
        // "b" has the oldest emulation version; "a" would win a tie by name.
        for (candidate, emulation) in [("a", "1.37.0"), ("b", "1.36.0"), ("c", "1.37.0")] {
            responders.push(
                CandidateResponder::register(
                    client.clone(),
                    lease_candidate(
                        NS,
                        &format!("{name}-{candidate}"),
                        name,
                        "1.37.2",
                        Some(emulation),
                        strategy,
                    ),
                )
                .await
                .expect("candidate registers"),
            );
        }
    }

    let leases: Api<Lease> = Api::namespaced(client, NS);
    for (_, name, strategy) in PLUGINS {
        let expected = format!("{name}-b");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let holder = leases
                .get_opt(name)
                .await
                .unwrap()
                .and_then(|lease| lease.spec?.holder_identity);
            if holder.as_deref() == Some(expected.as_str()) {
                break;
            }
            if let Ok(Some(status)) = controller.try_wait() {
                panic!("conclave run exited ({status}); log:\n{}", controller_log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{strategy}: Lease {name} not given to {expected} (holder {holder:?}); log:\n{}",
                controller_log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let pid = controller.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::spawn_blocking(move || controller.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "exit {status}; log:\n{}",
        controller_log()
    );
}
