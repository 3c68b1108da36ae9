//! Fuzzing the vectors JSON of `conclave strategy test` (issue 32, part 3): a vector file is
//! written by a plugin author by hand or by a generator, and read by the binary as it ships.
//!
//! What is fuzzed: the shipped vector files of the built-in strategies (`tests/vectors/*.json`,
//! in slices of three cases),
//! mutated: a node replaced by arbitrary JSON (a wrong type, a huge or non-ASCII string, a huge
//! or negative number, a time at the ends of the range), a key removed, an unknown key added, the
//! text truncated; and plain garbage. Each is run through the built-in plugin of its strategy.
//!
//! Why: `conclave strategy test` must report a bad file as an error naming it (`invalid vector
//! file ...`) or run it and print PASS/FAIL per case; never panic (exit code 101) and never hang.
//!
//! Cases: [`DEFAULT_CASES`] in `cargo test` (each runs the binary once); `CONCLAVE_FUZZ_CASES=N`
//! for a longer run, e.g. `CONCLAVE_FUZZ_CASES=2000 cargo test -p conclave --test fuzz_vectors`.

use conclave_testkit::fuzz_cases;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::cell::Cell;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Cases in a plain `cargo test`.
const DEFAULT_CASES: u32 = 200;

/// The longest one run of the binary may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The shipped vector files of the built-in strategies (the others need their plugin built),
/// each cut to slices of three cases.
fn shipped() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| serde_json::from_str::<Value>(&std::fs::read_to_string(path).unwrap()).unwrap())
        .filter(|file| {
            ["OldestEmulationVersion", "MinimumCompatibilityVersion"]
                .contains(&file["strategy"].as_str().unwrap_or_default())
        })
        .flat_map(|file| {
            let cases = file["cases"].as_array().cloned().unwrap_or_default();
            cases
                .chunks(3)
                .take(8)
                .map(|slice| {
                    let mut part = file.clone();
                    part["cases"] = Value::from(slice.to_vec());
                    part
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every JSON pointer into `value`, the root included.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,10}".prop_map(Value::from),
        Just(json!("x".repeat(70_000))),
        Just(json!("0001-01-01T00:00:00Z")),
        Just(json!("9999-12-31T23:59:59.999999999Z")),
        Just(json!("-009999-01-01T00:00:00Z")),
        Just(json!("99999999999999999999.0.0")),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One change to a vector file.
#[derive(Debug, Clone)]
enum Mutation {
    /// A string replaced by another string, a number by another number, a bool flipped: the
    /// file still decodes, the values are what is fuzzed.
    SameType(prop::sample::Index, String, i64),
    Replace(prop::sample::Index, Value),
    Remove(prop::sample::Index),
    AddKey(prop::sample::Index, String, Value),
}

fn mutations() -> impl Strategy<Value = Mutation> {
    let strings = prop_oneof![
        2 => "\\PC{0,12}",
        1 => Just(String::new()),
        1 => Just("x".repeat(70_000)),
        1 => Just("0001-01-01T00:00:00Z".to_owned()),
        1 => Just("9999-12-31T23:59:59.999999999Z".to_owned()),
        1 => Just("99999999999999999999.0.0".to_owned()),
        1 => Just("v1.2.3-rc.1+build".to_owned()),
        1 => Just("baz1".to_owned()),
    ];
    let numbers = prop_oneof![
        Just(0i64),
        Just(-1),
        Just(i64::MAX),
        Just(i64::MIN),
        any::<i64>()
    ];
    prop_oneof![
        8 => (any::<prop::sample::Index>(), strings, numbers)
            .prop_map(|(i, s, n)| Mutation::SameType(i, s, n)),
        2 => (any::<prop::sample::Index>(), json_values()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        2 => any::<prop::sample::Index>().prop_map(Mutation::Remove),
        1 => (any::<prop::sample::Index>(), "[a-zA-Z]{1,10}", json_values())
            .prop_map(|(i, k, v)| Mutation::AddKey(i, k, v)),
    ]
}

fn mutate(file: &mut Value, mutation: &Mutation) {
    let mut all = Vec::new();
    pointers(file, String::new(), &mut all);
    match mutation {
        Mutation::SameType(at, text, number) => {
            if let Some(node) = file.pointer_mut(at.get::<String>(&all).as_str()) {
                match node {
                    Value::String(s) => *s = text.clone(),
                    Value::Number(_) => *node = json!(number),
                    Value::Bool(b) => *b = !*b,
                    _ => {}
                }
            }
        }
        Mutation::Replace(at, value) => {
            if let Some(node) = file.pointer_mut(at.get::<String>(&all).as_str()) {
                *node = value.clone();
            }
        }
        Mutation::Remove(at) => {
            let pointer = at.get::<String>(&all).clone();
            if let Some((parent, key)) = pointer.rsplit_once('/')
                && let Some(node) = file.pointer_mut(parent)
            {
                match node {
                    Value::Object(map) => {
                        drop(map.remove(&key.replace("~1", "/").replace("~0", "~")))
                    }
                    Value::Array(items) => {
                        if let Ok(i) = key.parse::<usize>()
                            && i < items.len()
                        {
                            items.remove(i);
                        }
                    }
                    _ => {}
                }
            }
        }
        Mutation::AddKey(at, key, value) => {
            if let Some(Value::Object(map)) = file.pointer_mut(at.get::<String>(&all).as_str()) {
                map.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A vector file's text and the plugin to run it with.
fn files() -> impl Strategy<Value = (String, String)> {
    let shipped = shipped();
    let mutated = (
        proptest::sample::select(shipped),
        proptest::collection::vec(mutations(), 1..6),
        proptest::option::weighted(0.1, any::<prop::sample::Index>()),
    )
        .prop_map(|(mut file, mutations, cut)| {
            let strategy = file["strategy"]
                .as_str()
                .unwrap_or("OldestEmulationVersion")
                .to_owned();
            for mutation in &mutations {
                mutate(&mut file, mutation);
            }
            let mut text = file.to_string();
            if let Some(cut) = cut {
                text = text.chars().take(cut.index(text.len().max(1))).collect();
            }
            (text, strategy)
        });
    prop_oneof![
        8 => mutated,
        1 => json_values().prop_map(|v| (v.to_string(), "OldestEmulationVersion".to_owned())),
        1 => "\\PC{0,40}".prop_map(|t| (t, "OldestEmulationVersion".to_owned())),
    ]
}

/// Runs `conclave strategy test` on `text`, within [`RUN_TIMEOUT`]: it exits 0 (every case
/// passed) or 1 (a case failed, or the file was refused with a message), never otherwise.
fn run(dir: &Path, text: &str, plugin: &str, tally: &Tally) -> Result<(), TestCaseError> {
    let path = dir.join("vectors.json");
    std::fs::write(&path, text).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["strategy", "test", plugin, "--vectors"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Read its output while it runs (a full pipe would stall it), and give up after a while.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let Ok(output) = finished.recv_timeout(RUN_TIMEOUT) else {
        let _ = Command::new("kill").arg(pid.to_string()).status();
        return Err(TestCaseError::fail(format!(
            "no answer within {RUN_TIMEOUT:?} (a hang)"
        )));
    };
    let output = output.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    prop_assert!(!stderr.contains("panicked"), "a panic: {stderr}");
    let code = output.status.code();
    let counter = match code {
        Some(0) => &tally.passed,
        Some(1) if stderr.contains("Error:") => &tally.refused,
        _ => &tally.failed,
    };
    counter.set(counter.get() + 1);
    match code {
        Some(0) => prop_assert!(stdout.contains(" passed, 0 failed"), "{stdout}"),
        Some(1) if stderr.contains("Error:") => prop_assert!(
            stderr.contains("vectors") || stderr.contains("strategy") || stderr.contains("plugin"),
            "an error that names neither the file nor the plugin: {stderr}"
        ),
        Some(1) => prop_assert!(stdout.contains(" failed"), "{stdout}\n{stderr}"),
        other => prop_assert!(false, "exit {other:?}: {stdout}\n{stderr}"),
    }
    Ok(())
}

/// How the runs ended, printed at the end.
#[derive(Debug, Default)]
struct Tally {
    /// Every case passed.
    passed: Cell<u32>,
    /// A case failed.
    failed: Cell<u32>,
    /// The file was refused.
    refused: Cell<u32>,
}

/// Arbitrary and mutated vector files are run or refused with a message, never a panic or a
/// hang.
#[test]
fn arbitrary_vector_files_run_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let tally = Tally::default();
    let result = runner.run(&files(), |(text, plugin)| {
        run(dir.path(), &text, &plugin, &tally)
    });
    eprintln!(
        "arbitrary_vector_files_run_or_are_refused: {} cases in {:.1?}; {tally:?}",
        fuzz_cases(DEFAULT_CASES),
        started.elapsed()
    );
    result.unwrap();
}
