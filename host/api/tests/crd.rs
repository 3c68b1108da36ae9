//! The CRD the chart ships is the one the types generate, and the generated schema says what
//! an operator relies on.

use conclave_api::{FailurePolicy, StrategyPlugin, crd_yaml};
use std::path::Path;

const SHIPPED: &str = "../../deploy/helm/conclave/crds/strategyplugins.yaml";

#[test]
fn the_charts_crd_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SHIPPED);
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == crd_yaml(),
        "{} is stale: run `cargo run -p conclave -- crd > deploy/helm/conclave/crds/strategyplugins.yaml`",
        path.display()
    );
}

#[test]
fn a_plugin_object_reads_as_an_operator_writes_it() {
    let yaml = r"
apiVersion: conclave.dev/v1alpha1
kind: StrategyPlugin
metadata:
  name: priority
spec:
  source:
    oci:
      reference: registry.example.com/strategies/priority:1.2.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
      pullSecret: registry-credentials
  strategies: [example.com/priority]
  settings: {weights: {a: 1}}
  limits: {timeMs: 20}
";
    let plugin: StrategyPlugin = serde_saphyr::from_str(yaml).expect("parses");
    let oci = plugin.spec.source.oci.as_ref().expect("an OCI source");
    assert_eq!(oci.pull_secret.as_deref(), Some("registry-credentials"));
    assert_eq!(plugin.spec.strategies, ["example.com/priority"]);
    assert_eq!(plugin.spec.limits.unwrap().time_ms, Some(20));
    assert_eq!(plugin.spec.failure_policy, FailurePolicy::KeepLastGood);
    assert_eq!(plugin.spec.settings.unwrap()["weights"]["a"], 1);
}

#[test]
fn the_schema_requires_a_pinned_reference_and_exactly_one_source() {
    let crd = crd_yaml();
    assert!(crd.contains("@sha256:[0-9a-f]{64}$"), "{crd}");
    assert!(
        crd.contains("exactly one of oci, configMap and file must be set"),
        "{crd}"
    );
    assert!(crd.contains("scope: Cluster"), "{crd}");
    assert!(
        crd.contains("subresources:") && crd.contains("status: {}"),
        "{crd}"
    );
}
