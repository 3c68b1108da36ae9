//! Conclave's own Kubernetes API: the `StrategyPlugin` custom resource (`conclave.dev/v1alpha1`).
//!
//! A `StrategyPlugin` names a strategy plugin by reference: an OCI artifact pinned by digest, a
//! ConfigMap key, or a file in the controller's plugins directory. The controller fetches,
//! verifies, compiles and checks it off the election path and puts it in service without a
//! restart; it reports what it did in the object's status (a `Ready` condition with a reason,
//! the digest and strategies in service, how many elections the plugin decided and failed) and
//! in Events on the object. One plugin that cannot be loaded affects only the Leases of its own
//! strategies.
//!
//! The CRD is generated from these types ([`crd_yaml`]); the chart ships the generated file,
//! and a test keeps the two equal.
#![forbid(unsafe_code)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of Conclave's own resources.
pub const GROUP: &str = "conclave.dev";

/// The `Ready` condition's type.
pub const READY: &str = "Ready";

/// What a `StrategyPlugin` asks for; [`StrategyPlugin`] is the object.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "conclave.dev",
    version = "v1alpha1",
    kind = "StrategyPlugin",
    plural = "strategyplugins",
    singular = "strategyplugin",
    shortname = "splug",
    category = "conclave",
    doc = "A strategy plugin loaded live by the Conclave controller: where its component comes from, the strategies it must implement, its settings and limits, and what to do when a version cannot be loaded.",
    status = "StrategyPluginStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Strategies","type":"string","jsonPath":".status.strategies"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","priority":1,"jsonPath":".status.digest"}"#,
    printcolumn = r#"{"name":"Decided","type":"integer","priority":1,"jsonPath":".status.decided"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","priority":1,"jsonPath":".status.failed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StrategyPluginSpec {
    /// Where the component comes from: exactly one of `oci`, `configMap`, `file`.
    pub source: PluginSource,
    /// The strategy names the plugin must implement. A plugin whose `info()` lacks one of them
    /// is refused (`StrategiesMissing`); empty accepts whatever it implements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strategies: Vec<String>,
    /// Passed to every `elect` call of the plugin as JSON text (a Lease's own settings win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub settings: Option<serde_json::Value>,
    /// Per-call limits, field by field over the controller's defaults; the operator's
    /// command-line limits win over these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimits>,
    /// What happens when a new version cannot be loaded while an earlier one serves.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

/// Where a plugin's component comes from. Exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    extend("x-kubernetes-validations" = [{
        "rule": "[has(self.oci), has(self.configMap), has(self.file)].filter(x, x).size() == 1",
        "message": "exactly one of oci, configMap and file must be set"
    }])
)]
pub struct PluginSource {
    /// An OCI artifact in the CNCF layout for WebAssembly (`conclave strategy push` publishes
    /// one), pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// A key of a ConfigMap in the controller's namespace (`binaryData`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// A file under the controller's plugins directory (`--plugins DIR`), e.g. from an image
    /// volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSource>,
}

/// An OCI artifact.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// `REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST`. The digest is required: the controller
    /// verifies the manifest and the component against it.
    #[schemars(regex(pattern = r"^[^@\s]+@sha256:[0-9a-f]{64}$"))]
    pub reference: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in the controller's namespace with the
    /// registry's credentials (as a Pod's `imagePullSecrets`); none pulls anonymously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
}

/// A ConfigMap key holding the component (as `binaryData`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// The ConfigMap's name, in the controller's namespace.
    pub name: String,
    /// The key.
    pub key: String,
    /// The component's lowercase hex SHA-256, verified when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A file under the controller's plugins directory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    /// The path relative to the plugins directory (no `..`).
    pub path: String,
    /// The component's lowercase hex SHA-256, verified when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Per-call limits of a plugin.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimits {
    /// CPU time per call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub time_ms: Option<i64>,
    /// Linear memory per call, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<i64>,
}

/// What happens when a new version of a plugin cannot be loaded.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// The last version that loaded keeps serving (the status says so); Leases keep electing.
    #[default]
    KeepLastGood,
    /// The plugin is taken out of service: Leases of its strategies stop electing (an Event and
    /// a metric, as for an unknown strategy) until a version loads.
    Unload,
}

/// What the active controller reports about a `StrategyPlugin`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrategyPluginStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` when the spec's version serves; `False` with the reason otherwise
    /// (`PullFailed`, `DigestMismatch`, `InvalidComponent`, `ImportsRefused`, `ShadowsBuiltin`,
    /// `StrategyConflict`, `StrategiesMissing`, `SettingsInvalid`, `TrialTrapped`,
    /// `TrialTimedOut`, `TrialOutOfMemory`, `SourceInvalid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PluginCondition>,
    /// The lowercase hex SHA-256 of the component in service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The strategies in service from this plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strategies: Vec<String>,
    /// The plugin's own version, from its `info()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The `conclave:strategy` contract version it was built against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// When the version in service was loaded (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<String>,
    /// Elections the version in service decided since it was loaded by the active controller.
    #[serde(default)]
    pub decided: i64,
    /// Elections it failed (trap, limit, error, invalid answer) in the same time.
    #[serde(default)]
    pub failed: i64,
}

/// A status condition, as `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginCondition {
    /// The condition's type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// What happened, for a human.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// The generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Any JSON value (`x-kubernetes-preserve-unknown-fields`).
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// The CRD of [`StrategyPlugin`] as YAML, as the chart ships it and `conclave crd` prints it.
///
/// # Panics
/// Never in practice: the CRD is plain data that always serializes.
#[must_use]
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = StrategyPlugin::crd();
    let body = serde_saphyr::to_string(&crd).expect("a CRD serializes to YAML");
    format!(
        "# Generated from host/api (conclave-api) by `conclave crd`. Do not edit: change the types\n\
         # and run `conclave crd > deploy/helm/conclave/crds/strategyplugins.yaml`.\n{body}"
    )
}
