//! The alerting rules: `deploy/prometheus/conclave-rules.yaml` is the one source, the chart's
//! PrometheusRule renders exactly its rules (off by default), every alert is complete, has a
//! runbook section in `docs/runbooks.md`, uses only metrics the controller exports, and has a
//! `promtool test rules` case that fires it and one that keeps it quiet.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use conclave_deploy_tests::{
    documents, helm_template, kind_of, locate_helm, manifests_path, repo_root, run, tools_required,
};
use serde_json::Value;

/// Where every alert's `runbook_url` points by default (the chart's `runbookBaseURL` too).
const RUNBOOKS: &str = "https://github.com/conclave-dev/conclave/blob/main/docs/runbooks.md";

fn rules_path() -> PathBuf {
    repo_root().join("deploy/prometheus/conclave-rules.yaml")
}

fn rules_test_path() -> PathBuf {
    repo_root().join("deploy/prometheus/conclave-rules.test.yaml")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn parse_yaml(text: &str, what: &str) -> Value {
    serde_saphyr::from_str::<Value>(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"))
}

/// The plain rules file, parsed.
fn plain_rules() -> Value {
    parse_yaml(
        &read(&rules_path()),
        "deploy/prometheus/conclave-rules.yaml",
    )
}

/// Every rule of a `groups:` document.
fn rules_of(doc: &Value) -> Vec<&Value> {
    doc["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .collect()
}

fn alert_name(rule: &Value) -> &str {
    rule["alert"].as_str().expect("every rule is an alert")
}

/// The PrometheusRule the chart renders with `extra` values, parsed; `None` when there is none.
fn rendered_prometheus_rule(helm: &Path, extra: &[&str]) -> Option<Value> {
    let out = helm_template(helm, extra).expect("running helm template");
    out.assert_success();
    documents(&out.stdout)
        .into_iter()
        .find(|d| kind_of(d) == Some("PrometheusRule"))
        .map(|d| parse_yaml(&d, "the rendered PrometheusRule"))
}

#[test]
fn chart_copy_of_the_rules_is_the_plain_file() {
    let chart_copy = repo_root().join("deploy/helm/conclave/files/conclave-rules.yaml");
    assert!(
        read(&chart_copy) == read(&rules_path()),
        "deploy/helm/conclave/files/conclave-rules.yaml differs from \
         deploy/prometheus/conclave-rules.yaml: edit the latter and copy it over the former"
    );
}

#[test]
fn prometheus_rule_is_off_by_default() {
    let manifests = read(&manifests_path());
    let docs = documents(&manifests);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| kind_of(d)).collect();
    assert!(!kinds.contains(&"PrometheusRule"), "kinds: {kinds:?}");
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    assert!(rendered_prometheus_rule(&helm, &[]).is_none());
}

#[test]
fn prometheus_rule_renders_the_plain_rules() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let rule = rendered_prometheus_rule(
        &helm,
        &[
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        ],
    )
    .expect("a PrometheusRule when metrics.prometheusRule.enabled=true");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "conclave-system");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        rule["metadata"]["labels"]["app.kubernetes.io/name"],
        "conclave"
    );
    assert!(
        rule["spec"] == plain_rules(),
        "the chart's PrometheusRule spec is not the plain rules file:\n{}",
        serde_json::to_string_pretty(&rule["spec"]).expect("JSON")
    );
}

#[test]
fn prometheus_rule_takes_a_runbook_base_and_additional_labels() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let base = "https://runbooks.example/conclave.html";
    let rule = rendered_prometheus_rule(
        &helm,
        &[
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            &format!("metrics.prometheusRule.runbookBaseURL={base}"),
            "--set",
            "metrics.prometheusRule.additionalLabels.team=platform",
            "--set",
            "metrics.prometheusRule.additionalLabels.severity=info",
        ],
    )
    .expect("a PrometheusRule");
    let plain = plain_rules();
    let plain_rules = rules_of(&plain);
    let rendered = rules_of(&rule["spec"]);
    assert_eq!(rendered.len(), plain_rules.len());
    for (rendered, plain) in rendered.iter().zip(plain_rules) {
        let name = alert_name(plain);
        assert_eq!(
            rendered["annotations"]["runbook_url"],
            format!("{base}#{}", name.to_lowercase()),
            "{name}"
        );
        assert_eq!(rendered["labels"]["team"], "platform", "{name}");
        // An alert's own severity wins over an additional label of the same name.
        assert_eq!(
            rendered["labels"]["severity"], plain["labels"]["severity"],
            "{name}"
        );
        assert_eq!(rendered["expr"], plain["expr"], "{name}");
    }
}

#[test]
fn every_alert_is_complete_and_has_a_runbook_section() {
    let plain = plain_rules();
    let runbooks = read(&repo_root().join("docs/runbooks.md"));
    let sections: BTreeSet<&str> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter(|h| h.starts_with("Conclave"))
        .collect();
    let mut alerts = BTreeSet::new();
    for rule in rules_of(&plain) {
        let name = alert_name(rule);
        assert!(alerts.insert(name), "{name} defined twice");
        assert!(name.starts_with("Conclave"), "{name}");
        assert!(rule["for"].is_string(), "{name} has no `for:`");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation]
                    .as_str()
                    .is_some_and(|s| !s.trim().is_empty()),
                "{name} has no {annotation}"
            );
        }
        assert_eq!(
            rule["annotations"]["runbook_url"],
            format!("{RUNBOOKS}#{}", name.to_lowercase()),
            "{name}"
        );
        assert!(
            sections.contains(name),
            "docs/runbooks.md has no `## {name}` section"
        );
    }
    assert_eq!(
        sections, alerts,
        "docs/runbooks.md has sections for alerts that do not exist"
    );
}

/// The metric families the controller registers (`r.register("NAME", ...)` in
/// `host/controller/src/metrics.rs`), with the `conclave_` prefix.
fn exported_families() -> BTreeSet<String> {
    let source = read(&repo_root().join("host/controller/src/metrics.rs"));
    source
        .split("r.register(")
        .skip(1)
        .filter_map(|call| call.trim_start().strip_prefix('"'))
        .filter_map(|rest| rest.split_once('"'))
        .map(|(name, _)| format!("conclave_{name}"))
        .collect()
}

#[test]
fn every_alert_uses_only_metrics_the_controller_exports() {
    let families = exported_families();
    assert!(families.contains("conclave_active"), "{families:?}");
    let plain = plain_rules();
    for rule in rules_of(&plain) {
        let expr = rule["expr"].as_str().expect("expr");
        let mut rest = expr;
        while let Some(at) = rest.find("conclave_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            assert!(
                families.contains(family),
                "{}: {name} is not a metric the controller exports ({families:?})",
                alert_name(rule)
            );
            rest = &tail[end..];
        }
    }
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_promtool_case() {
    let tests = parse_yaml(
        &read(&rules_test_path()),
        "deploy/prometheus/conclave-rules.test.yaml",
    );
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in tests["tests"].as_array().expect("tests") {
        for check in case["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = check["alertname"].as_str().expect("alertname").to_owned();
            let expected = check["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                fires.insert(name);
            }
        }
    }
    let plain = plain_rules();
    for name in rules_of(&plain).into_iter().map(alert_name) {
        assert!(fires.contains(name), "no promtool case fires {name}");
        assert!(quiet.contains(name), "no promtool case keeps {name} quiet");
    }
}

/// `promtool`: `$PROMTOOL`, else on the PATH (Debian's `prometheus`, installed by
/// `.ci/prepare-prometheus.sh`).
fn locate_promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PROMTOOL")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("promtool"))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        assert!(
            !tools_required(),
            "promtool not found: run .ci/prepare-prometheus.sh (CONCLAVE_REQUIRE_KUBE is set)"
        );
        eprintln!("SKIP: promtool not found (.ci/prepare-prometheus.sh or set PROMTOOL)");
    }
    found
}

#[test]
fn promtool_accepts_the_rules_the_chart_renders_and_their_tests() {
    let Some(promtool) = locate_promtool() else {
        return;
    };
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let rule = rendered_prometheus_rule(&helm, &["--set", "metrics.prometheusRule.enabled=true"])
        .expect("a PrometheusRule");
    let dir = tempfile::tempdir().expect("a temporary directory");
    // JSON is YAML: promtool reads the rendered spec as a rules file.
    let rendered = dir.path().join("rendered-rules.yaml");
    std::fs::write(&rendered, rule["spec"].to_string()).expect("writing the rendered rules");
    run(
        &promtool,
        &["check", "rules", &rendered.to_string_lossy()],
        None,
    )
    .expect("running promtool check rules")
    .assert_success();
    run(
        &promtool,
        &["test", "rules", &rules_test_path().to_string_lossy()],
        None,
    )
    .expect("running promtool test rules")
    .assert_success();
}
