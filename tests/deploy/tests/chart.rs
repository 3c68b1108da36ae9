//! The chart renders, lints, and `deploy/manifests.yaml` is its current rendering.

use conclave_deploy_tests::{
    chart_path, documents, helm_template, kind_of, locate_helm, manifests_path, render_manifests,
    run,
};

/// A user without Helm applies `deploy/manifests.yaml`; it must be what the chart renders now.
#[test]
fn manifests_yaml_is_the_current_rendering_of_the_chart() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let rendered = render_manifests(&helm).expect("running deploy/render.sh");
    rendered.assert_success();
    let committed =
        std::fs::read_to_string(manifests_path()).expect("reading deploy/manifests.yaml");
    if committed != rendered.stdout {
        let first_difference = committed
            .lines()
            .zip(rendered.stdout.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| format!("line {}: committed {a:?}, chart renders {b:?}", i + 1))
            .unwrap_or_else(|| {
                format!(
                    "one is a prefix of the other ({} vs {} lines)",
                    committed.lines().count(),
                    rendered.stdout.lines().count()
                )
            });
        panic!(
            "deploy/manifests.yaml is stale: re-run deploy/render.sh and commit it\n{first_difference}"
        );
    }
}

#[test]
fn chart_passes_helm_lint_strict() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let chart = chart_path();
    run(&helm, &["lint", "--strict", &chart.to_string_lossy()], None)
        .expect("running helm lint")
        .assert_success();
}

/// Every object the issue names is in the rendering users apply.
#[test]
fn manifests_contain_every_deployment_object() {
    let text = std::fs::read_to_string(manifests_path()).expect("reading deploy/manifests.yaml");
    let docs = documents(&text);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| kind_of(d)).collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "NetworkPolicy",
        "CustomResourceDefinition",
    ] {
        assert!(
            kinds.contains(&kind),
            "no {kind} in deploy/manifests.yaml (kinds: {kinds:?})"
        );
    }
    // The Namespace comes before its contents so a plain `kubectl apply -f` creates it first;
    // only the cluster-scoped CRD (Helm puts crds/ first) may precede it.
    assert!(
        kinds
            .iter()
            .take_while(|kind| **kind != "Namespace")
            .all(|kind| *kind == "CustomResourceDefinition"),
        "kinds in order: {kinds:?}"
    );
    // Off by default: the ServiceMonitor CRD is not on every cluster.
    assert!(!kinds.contains(&"ServiceMonitor"), "kinds: {kinds:?}");
}

#[test]
fn service_monitor_is_rendered_only_when_enabled() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let on = helm_template(&helm, &["--set", "metrics.serviceMonitor.enabled=true"])
        .expect("running helm template");
    on.assert_success();
    let monitor = documents(&on.stdout)
        .into_iter()
        .find(|d| kind_of(d) == Some("ServiceMonitor"))
        .expect("a ServiceMonitor when metrics.serviceMonitor.enabled=true");
    assert!(monitor.contains("port: metrics"), "{monitor}");
    assert!(monitor.contains("path: /metrics"), "{monitor}");
}

/// Pod liveness is on by default (also when the value is unset), with read access to pods; off,
/// the flag says so and the controller is granted nothing on pods (least privilege); any other
/// value is refused.
#[test]
fn pod_liveness_is_a_value_and_pods_are_granted_only_while_it_is_on() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let grants_pods = |text: &str| text.contains("resources: [\"pods\"]");
    let default = helm_template(&helm, &[]).expect("running helm template");
    default.assert_success();
    assert!(default.stdout.contains("- --pod-liveness=on"));
    assert!(grants_pods(&default.stdout), "pods readable by default");
    let off = helm_template(&helm, &["--set", "controller.podLiveness=off"])
        .expect("running helm template");
    off.assert_success();
    assert!(off.stdout.contains("- --pod-liveness=off"));
    assert!(!grants_pods(&off.stdout), "no access to pods while off");
    // Unset, as after `helm upgrade --reuse-values` from a chart without the value (seen on the
    // real node: the flag went out empty and the controller crash-looped): on.
    let unset = helm_template(&helm, &["--set", "controller.podLiveness=null"])
        .expect("running helm template");
    unset.assert_success();
    assert!(
        unset.stdout.contains("- --pod-liveness=on"),
        "{}",
        unset.stdout
    );
    assert!(grants_pods(&unset.stdout), "pods readable when unset");
    let wrong = helm_template(&helm, &["--set", "controller.podLiveness=maybe"])
        .expect("running helm template");
    assert!(!wrong.success(), "podLiveness=maybe was accepted");
    assert!(wrong.stderr.contains("podLiveness"), "{}", wrong.stderr);
}

/// StrategyPlugin objects are on by default, with the CRD and read access to the objects; the
/// ConfigMaps and pull Secrets they may name are granted by name only, none by default; off,
/// the flag says so and nothing on StrategyPlugins is granted.
#[test]
fn strategy_plugin_sources_are_granted_by_name_only() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let default = helm_template(&helm, &["--include-crds"]).expect("running helm template");
    default.assert_success();
    assert!(default.stdout.contains("- --strategy-plugins=on"));
    assert!(
        default
            .stdout
            .contains("name: strategyplugins.conclave.dev")
    );
    assert!(
        default
            .stdout
            .contains("resources: [\"strategyplugins/status\"]")
    );
    assert!(
        !default.stdout.contains("resources: [\"secrets\"]"),
        "no Secret by default"
    );
    assert!(
        !default.stdout.contains("resources: [\"configmaps\"]"),
        "no ConfigMap by default"
    );

    let named = helm_template(
        &helm,
        &[
            "--set",
            "strategyPlugins.pullSecrets={registry-credentials}",
            "--set",
            "strategyPlugins.configMaps={team-plugins}",
            "--set",
            "strategyPlugins.plainHttpRegistries={registry.local:5000}",
        ],
    )
    .expect("running helm template");
    named.assert_success();
    let role = documents(&named.stdout)
        .into_iter()
        .find(|d| d.contains("name: conclave-strategyplugin-sources") && kind_of(d) == Some("Role"))
        .expect("a Role for the named sources");
    assert!(
        role.contains("resourceNames: [\"registry-credentials\"]"),
        "{role}"
    );
    assert!(role.contains("resourceNames: [\"team-plugins\"]"), "{role}");
    assert!(
        !role.contains("list") && !role.contains("watch"),
        "get by name only: {role}"
    );
    assert!(
        named
            .stdout
            .contains("- --plain-http-registry=registry.local:5000")
    );

    let off = helm_template(&helm, &["--set", "strategyPlugins.enabled=false"])
        .expect("running helm template");
    off.assert_success();
    assert!(off.stdout.contains("- --strategy-plugins=off"));
    assert!(
        !off.stdout.contains("strategyplugins"),
        "nothing granted while off"
    );
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Plugins from an image volume are pinned by digest; an unpinned image is refused at render.
#[test]
fn plugin_image_volume_must_be_pinned_by_digest() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    let reference = "registry.example/conclave-plugins";
    let unpinned = helm_template(
        &helm,
        &[
            "--set",
            "plugins.source=image",
            "--set",
            &format!("plugins.image.reference={reference}"),
        ],
    )
    .expect("running helm template");
    assert!(
        !unpinned.success(),
        "an unpinned plugin image rendered:\n{}",
        unpinned.stdout
    );
    assert!(
        unpinned.stderr.contains("plugins.image.digest"),
        "{}",
        unpinned.stderr
    );

    let bad = helm_template(
        &helm,
        &[
            "--set",
            "plugins.source=image",
            "--set",
            &format!("plugins.image.reference={reference}"),
            "--set",
            "plugins.image.digest=latest",
        ],
    )
    .expect("running helm template");
    assert!(
        !bad.success(),
        "digest `latest` was accepted:\n{}",
        bad.stdout
    );

    let pinned = helm_template(
        &helm,
        &[
            "--set",
            "plugins.source=image",
            "--set",
            &format!("plugins.image.reference={reference}"),
            "--set",
            &format!("plugins.image.digest={DIGEST}"),
        ],
    )
    .expect("running helm template");
    pinned.assert_success();
    let deployment = documents(&pinned.stdout)
        .into_iter()
        .find(|d| kind_of(d) == Some("Deployment"))
        .expect("a Deployment");
    assert!(
        deployment.contains(&format!("reference: {reference}@{DIGEST}")),
        "{deployment}"
    );
    assert!(
        deployment.contains("- --plugins=/etc/conclave/plugins"),
        "{deployment}"
    );
    assert!(
        deployment.contains("mountPath: /etc/conclave/plugins"),
        "{deployment}"
    );
}

/// Plugins from a chart-made ConfigMap carry a sidecar pinning their sha256, and a pin that does
/// not match the given component is refused at render time.
#[test]
fn plugin_config_map_pins_each_component_sha256() {
    let Some(helm) = locate_helm().expect("locating helm") else {
        return;
    };
    // "\0asm\x0d\0\x01\0": a component preamble (content does not matter to the chart).
    let wasm_b64 = "AGFzbQ0AAQA=";
    let sha256 = "d1e2b0b3e77ecf7e5be4e1d5d5f4d0cbdd0f3d3bb5ee0fcaa4b1b0a1e1d1b0b3";
    let wrong = helm_template(
        &helm,
        &[
            "--set",
            "plugins.source=configMap",
            "--set",
            "plugins.configMap.items[0].name=sticky",
            "--set-string",
            &format!("plugins.configMap.items[0].wasm={wasm_b64}"),
            "--set",
            &format!("plugins.configMap.items[0].sha256={sha256}"),
        ],
    )
    .expect("running helm template");
    assert!(
        !wrong.success(),
        "a wrong sha256 pin rendered:\n{}",
        wrong.stdout
    );
    assert!(
        wrong.stderr.contains("plugin sticky: sha256"),
        "{}",
        wrong.stderr
    );
    // The digest helm computed is in the message; it must be the real SHA-256 of the bytes.
    let actual = real_sha256_of(wasm_b64);
    assert!(wrong.stderr.contains(&actual), "{}", wrong.stderr);

    let right = helm_template(
        &helm,
        &[
            "--set",
            "plugins.source=configMap",
            "--set",
            "plugins.configMap.items[0].name=sticky",
            "--set-string",
            &format!("plugins.configMap.items[0].wasm={wasm_b64}"),
            "--set",
            &format!("plugins.configMap.items[0].sha256={actual}"),
        ],
    )
    .expect("running helm template");
    right.assert_success();
    let config_map = documents(&right.stdout)
        .into_iter()
        .find(|d| kind_of(d) == Some("ConfigMap"))
        .expect("a plugins ConfigMap");
    assert!(
        config_map.contains(&format!("sticky.wasm: {wasm_b64}")),
        "{config_map}"
    );
    assert!(
        config_map.contains(&format!(r#"sticky.json: "{{\"sha256\":\"{actual}\"}}""#)),
        "{config_map}"
    );
}

/// SHA-256 of base64 `data`, computed by coreutils, independent of helm.
fn real_sha256_of(data: &str) -> String {
    let out = run(
        std::path::Path::new("sh"),
        &["-c", "base64 -d | sha256sum"],
        Some(data),
    )
    .expect("running base64 | sha256sum");
    out.assert_success();
    out.stdout
        .split_whitespace()
        .next()
        .expect("sha256sum prints a digest")
        .to_owned()
}

/// The Grafana dashboard is valid JSON, and every panel queries the controller's metrics.
#[test]
fn grafana_dashboard_queries_conclave_metrics_in_every_panel() {
    let text = std::fs::read_to_string(conclave_deploy_tests::dashboard_path())
        .expect("reading deploy/grafana/conclave-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "conclave-controller");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = std::collections::BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_i64().expect("panel id")),
            "duplicate id: {panel}"
        );
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(
            !targets.is_empty(),
            "panel without queries: {}",
            panel["title"]
        );
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            assert!(expr.contains("conclave_"), "{}: {expr}", panel["title"]);
        }
    }
    let families = conclave_deploy_tests::dashboard_metric_families(&dashboard);
    // The issue's list: elections, latency, pre-emptions, pings, plugin latency and errors,
    // managed Leases and candidates, GC deletions, conflicts.
    for family in [
        "conclave_elections",
        "conclave_election_latency_seconds",
        "conclave_preemptions",
        "conclave_pings_sent",
        "conclave_pings_acked",
        "conclave_plugin_call_seconds",
        "conclave_plugin_errors",
        "conclave_managed_leases",
        "conclave_candidates",
        "conclave_gc_deletions",
        "conclave_strategy_conflicts",
        "conclave_strategy_conflicted_leases",
    ] {
        assert!(
            families.contains(family),
            "no panel for {family}: {families:?}"
        );
    }
}
