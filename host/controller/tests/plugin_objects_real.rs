//! `StrategyPlugin` objects on a real kube-apiserver (issue 30): the CRD the chart ships is
//! served, a plugin applied as an object elects without a restart, a new version (here new
//! settings) decides the next election, broken plugins get a status and an Event while every
//! other strategy keeps electing, and a broken new version leaves the last good one serving.
//! Skipped (with a SKIP line) when the control-plane binaries are not built.

mod controller_support;

use conclave_api::{
    ConfigMapSource, OciSource, PluginSource, READY, StrategyPlugin, StrategyPluginSpec,
};
use conclave_controller::plugin_objects::PluginObjectsConfig;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_engine::{Engine, EngineConfig};
use conclave_testkit::fixture_plugin::{MEMORY_BOMB, SPIN, TRAP, fixture_component};
use conclave_testkit::{ControlPlane, Registry, wasm_build};
use controller_support::{CoordinatedHolder, WAIT, candidate_in, config, wait_event, wait_lease};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const ZONES: &str = "conclave.dev/zone-affinity";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Creates the StrategyPlugin CRD (as generated, as the chart ships it) unless it exists, and
/// waits until the API server serves it.
async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds
        .create(&PostParams::default(), &StrategyPlugin::crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating the CRD: {error}"),
    }
    let plugins: Api<StrategyPlugin> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    while plugins.list(&Default::default()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the StrategyPlugin CRD is never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the StrategyPlugin's `Ready` condition has `status` and `reason`, returning it.
async fn wait_ready(
    api: &Api<StrategyPlugin>,
    name: &str,
    status: &str,
    reason: &str,
) -> StrategyPlugin {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    loop {
        if let Ok(object) = api.get(name).await {
            let ready = object
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY).cloned());
            if ready
                .as_ref()
                .is_some_and(|c| c.status == status && c.reason == reason)
            {
                return object;
            }
            last = object.status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for StrategyPlugin {name} to be Ready={status} ({reason}); \
             status: {last:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn from_config_map(
    map: &str,
    key: &str,
    settings: Option<serde_json::Value>,
) -> StrategyPluginSpec {
    StrategyPluginSpec {
        source: PluginSource {
            config_map: Some(ConfigMapSource {
                name: map.into(),
                key: key.into(),
                sha256: None,
            }),
            ..PluginSource::default()
        },
        strategies: Vec::new(),
        settings,
        limits: None,
        failure_policy: conclave_api::FailurePolicy::KeepLastGood,
    }
}

async fn apply(api: &Api<StrategyPlugin>, name: &str, spec: StrategyPluginSpec) {
    let object = StrategyPlugin::new(name, spec);
    api.patch(
        name,
        &PatchParams::apply("plugin-objects-test").force(),
        &Patch::Apply(&object),
    )
    .await
    .expect("applying a StrategyPlugin");
}

/// Puts `files` into ConfigMap `name` (binaryData), replacing what it held.
async fn put_config_map(api: &Api<ConfigMap>, name: &str, files: &[(&str, Vec<u8>)]) {
    let map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some(
            files
                .iter()
                .map(|(key, bytes)| ((*key).to_owned(), ByteString(bytes.clone())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    };
    api.patch(
        name,
        &PatchParams::apply("plugin-objects-test").force(),
        &Patch::Apply(&map),
    )
    .await
    .expect("writing the plugins ConfigMap");
}

async fn label_zone(candidates: &Api<LeaseCandidate>, name: &str, zone: &str) {
    let patch = serde_json::json!({ "metadata": { "labels": { ZONE_LABEL: zone } } });
    candidates
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("labelling a candidate");
}

/// The engine's plain-`std` guest (host/engine/tests/fixtures/wasi-guest), which imports WASI.
fn wasi_guest() -> std::path::PathBuf {
    let target_dir = wasm_build::repo().join("target/wasi-guest");
    let fixture = wasm_build::repo().join("host/engine/tests/fixtures/wasi-guest");
    wasm_build::cargo_build_wasm(
        &fixture,
        &["--locked", "--target-dir", target_dir.to_str().unwrap()],
    );
    target_dir.join("wasm32-wasip2/release/wasi_guest.wasm")
}

#[tokio::test(flavor = "multi_thread")]
async fn plugins_applied_as_objects_elect_live_and_a_broken_one_blocks_nothing_else() {
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let Some(registry) = Registry::start().await.expect("registry") else {
        return;
    };
    let _hold = plane
        .hold_builtin_controller_lease()
        .await
        .expect("built-in controller passive");
    let client = plane.client().await.unwrap();
    install_crd(&client).await;
    let ns = plane.namespace("plugin-objects").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let plugins: Api<StrategyPlugin> = Api::all(client.clone());
    // Cluster-scoped: the names carry the namespace, so a shared control plane keeps tests apart.
    let name = |n: &str| format!("{ns}-{n}");

    let built =
        wasm_build::build_plugins(&["zone-affinity", "oldest-emulation-version", "priority"]);
    let zone_affinity = std::fs::read(built.join("zone_affinity.wasm"))
        .or_else(|_| std::fs::read(built.join("zone-affinity.wasm")))
        .expect("zone-affinity built");
    let oldest = std::fs::read(built.join("oldest_emulation_version.wasm"))
        .or_else(|_| std::fs::read(built.join("oldest-emulation-version.wasm")))
        .expect("oldest-emulation-version built");
    let wasi = std::fs::read(wasi_guest()).expect("the WASI guest built");
    put_config_map(
        &maps,
        "plugins",
        &[
            ("zone-affinity.wasm", zone_affinity.clone()),
            ("oldest.wasm", oldest),
            ("garbage.wasm", b"not a component".to_vec()),
            ("wasi.wasm", wasi),
            ("spin.wasm", fixture_component("test/spin", SPIN)),
            (
                "bomb.wasm",
                fixture_component("test/memory-bomb", MEMORY_BOMB),
            ),
            ("trap.wasm", fixture_component("test/trap", TRAP)),
        ],
    )
    .await;

    // The controller with the built-in plugin only; everything else arrives as objects.
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let mut cfg = config(&ns, "conclave-plugin-objects");
    cfg.controller_namespace = ns.clone();
    cfg.namespaces = vec![ns.clone()];
    let objects = PluginObjectsConfig {
        engine: engine.clone(),
        plugins_dir: None,
        namespace: ns.clone(),
        oci: conclave_oci::ClientOptions::default().with_plain_http(registry.host()),
        resync: Duration::from_secs(1),
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let controller_client = client.clone();
    let task = tokio::spawn(async move {
        conclave_controller::run_with_plugin_objects(
            controller_client,
            Arc::new(engine),
            cfg,
            Some(objects),
            token,
        )
        .await
        .expect("controller runs");
    });

    // A plugin applied as an object: Ready, and it elects.
    apply(
        &plugins,
        &name("zones"),
        StrategyPluginSpec {
            strategies: vec![ZONES.into()],
            ..from_config_map(
                "plugins",
                "zone-affinity.wasm",
                Some(serde_json::json!({"zones": ["zone-a"]})),
            )
        },
    )
    .await;
    let loaded = wait_ready(&plugins, &name("zones"), "True", "Loaded").await;
    let status = loaded.status.expect("status");
    assert_eq!(status.strategies, [ZONES]);
    assert!(
        status
            .digest
            .as_deref()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    assert_eq!(status.contract.as_deref(), Some("0.4.0"));
    wait_event(&client, "default", &name("zones"), "Loaded").await;

    let _a = candidate_in(&client, &ns, "in-a", "zoned", "1.37.0", "1.37.0", ZONES).await;
    let _b = candidate_in(&client, &ns, "in-b", "zoned", "1.37.0", "1.36.0", ZONES).await;
    label_zone(&candidates, "in-a", "zone-a").await;
    label_zone(&candidates, "in-b", "zone-b").await;
    let _holder_a = CoordinatedHolder::start(leases.clone(), "zoned", "in-a");
    let _holder_b = CoordinatedHolder::start(leases.clone(), "zoned", "in-b");
    wait_lease(&leases, "zoned", "in-a (zone-a) to hold", |r| {
        r.holder() == Some("in-a") && r.preferred().is_none()
    })
    .await;

    // A new version (new settings): the next election follows it, with no restart.
    apply(
        &plugins,
        &name("zones"),
        StrategyPluginSpec {
            strategies: vec![ZONES.into()],
            ..from_config_map(
                "plugins",
                "zone-affinity.wasm",
                Some(serde_json::json!({"zones": ["zone-b"]})),
            )
        },
    )
    .await;
    wait_lease(&leases, "zoned", "in-b (zone-b) to take over", |r| {
        r.holder() == Some("in-b") && r.preferred().is_none()
    })
    .await;

    // Broken plugins: each gets its reason and a Warning Event on the object.
    apply(
        &plugins,
        &name("shadow"),
        from_config_map("plugins", "oldest.wasm", None),
    )
    .await;
    apply(
        &plugins,
        &name("garbage"),
        from_config_map("plugins", "garbage.wasm", None),
    )
    .await;
    let mut pinned = from_config_map("plugins", "zone-affinity.wasm", None);
    pinned.source.config_map.as_mut().unwrap().sha256 = Some("0".repeat(64));
    apply(&plugins, &name("pinned"), pinned).await;
    apply(
        &plugins,
        &name("unset"),
        from_config_map("plugins", "zone-affinity.wasm", None),
    )
    .await;
    apply(
        &plugins,
        &name("wasi"),
        from_config_map("plugins", "wasi.wasm", None),
    )
    .await;
    apply(
        &plugins,
        &name("missing"),
        from_config_map("absent", "x.wasm", None),
    )
    .await;
    // Hostile plugins: each is refused with a reason that says what the sandbox stopped in the
    // trial election.
    for hostile in ["spin", "bomb", "trap"] {
        apply(
            &plugins,
            &name(hostile),
            from_config_map("plugins", &format!("{hostile}.wasm"), None),
        )
        .await;
    }
    for (object, reason) in [
        ("shadow", "ShadowsBuiltin"),
        ("garbage", "InvalidComponent"),
        ("pinned", "DigestMismatch"),
        ("unset", "SettingsInvalid"),
        ("missing", "PullFailed"),
        ("wasi", "ImportsRefused"),
        ("spin", "TrialTimedOut"),
        ("bomb", "TrialOutOfMemory"),
        ("trap", "TrialTrapped"),
    ] {
        let failed = wait_ready(&plugins, &name(object), "False", reason).await;
        let message = &failed.status.unwrap().conditions[0].message;
        eprintln!("{object}: {reason}: {message}");
        wait_event(&client, "default", &name(object), reason).await;
    }
    // Meanwhile the other strategies elect: the built-in one, and zone-affinity.
    let _c = candidate_in(&client, &ns, "c", "builtin", "1.37.0", "1.37.0", OEV).await;
    wait_lease(&leases, "builtin", "c to hold", |r| r.holder() == Some("c")).await;
    let _z = candidate_in(&client, &ns, "z", "zoned-too", "1.37.0", "1.37.0", ZONES).await;
    wait_lease(&leases, "zoned-too", "z to hold", |r| {
        r.holder() == Some("z")
    })
    .await;
    let zones = wait_ready(&plugins, &name("zones"), "True", "Loaded").await;
    assert!(
        zones.status.unwrap().decided >= 1,
        "the status counts the elections the version in service decided"
    );

    // A broken new version: the last good one keeps serving, and the status says so.
    put_config_map(
        &maps,
        "plugins",
        &[
            ("zone-affinity.wasm", b"broken".to_vec()),
            ("garbage.wasm", b"not a component".to_vec()),
        ],
    )
    .await;
    let broken = wait_ready(&plugins, &name("zones"), "False", "InvalidComponent").await;
    let message = broken.status.as_ref().unwrap().conditions[0]
        .message
        .clone();
    assert!(message.contains("keeps serving"), "{message}");
    let _y = candidate_in(&client, &ns, "y", "zoned-three", "1.37.0", "1.37.0", ZONES).await;
    wait_lease(&leases, "zoned-three", "y to hold", |r| {
        r.holder() == Some("y")
    })
    .await;

    // From an OCI registry: push (as `conclave strategy push` does), apply by digest, elect.
    let priority = std::fs::read(built.join("priority.wasm")).expect("priority built");
    let pushed = conclave_oci::push(
        &priority,
        &conclave_oci::Reference::parse(&format!("{}/strategies/priority:1", registry.host()))
            .unwrap(),
        &conclave_oci::Credentials::Anonymous,
        &conclave_oci::ClientOptions::default().with_plain_http(registry.host()),
        BTreeMap::new(),
    )
    .await
    .expect("pushing the priority plugin");
    let oci = |reference: String| StrategyPluginSpec {
        source: PluginSource {
            oci: Some(OciSource {
                reference,
                pull_secret: None,
            }),
            ..PluginSource::default()
        },
        ..from_config_map("unused", "unused", None)
    };
    apply(
        &plugins,
        &name("priority"),
        oci(pushed.reference_with_digest.to_string()),
    )
    .await;
    let pulled = wait_ready(&plugins, &name("priority"), "True", "Loaded").await;
    assert_eq!(pulled.status.unwrap().strategies, ["conclave.dev/priority"]);
    // A new version (another digest of the same plugin, as a rebuild publishes it): in service
    // with no restart, and the next election is decided by it (its own count starts at 0).
    let mut rebuilt = priority.clone();
    rebuilt.extend_from_slice(&[0, 9, 8]);
    rebuilt.extend_from_slice(b"rebuilt!");
    let pushed_v2 = conclave_oci::push(
        &rebuilt,
        &conclave_oci::Reference::parse(&format!("{}/strategies/priority:2", registry.host()))
            .unwrap(),
        &conclave_oci::Credentials::Anonymous,
        &conclave_oci::ClientOptions::default().with_plain_http(registry.host()),
        BTreeMap::new(),
    )
    .await
    .expect("pushing the rebuilt priority plugin");
    apply(
        &plugins,
        &name("priority"),
        oci(pushed_v2.reference_with_digest.to_string()),
    )
    .await;
    let v2_digest = conclave_oci::sha256_digest(&rebuilt);
    let deadline = tokio::time::Instant::now() + WAIT;
    while plugins
        .get(&name("priority"))
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.digest)
        != Some(v2_digest.clone())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "version 2 never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _p = candidate_in(
        &client,
        &ns,
        "p",
        "prioritised",
        "1.37.0",
        "1.37.0",
        "conclave.dev/priority",
    )
    .await;
    wait_lease(&leases, "prioritised", "p to hold", |r| {
        r.holder() == Some("p")
    })
    .await;
    // A reference whose digest the registry does not hold fails to pull; pinned to nothing, the
    // spec is refused as it stands.
    let absent = format!(
        "{}/strategies/priority@sha256:{}",
        registry.host(),
        "0".repeat(64)
    );
    apply(&plugins, &name("absent"), oci(absent)).await;
    wait_ready(&plugins, &name("absent"), "False", "PullFailed").await;

    // Deleted, its strategy is gone.
    plugins
        .delete(&name("zones"), &Default::default())
        .await
        .expect("deleting the StrategyPlugin");
    let _w = candidate_in(&client, &ns, "w", "zoned-four", "1.37.0", "1.37.0", ZONES).await;
    wait_event(&client, &ns, "zoned-four", "UnknownStrategy").await;

    shutdown.cancel();
    task.await.expect("controller task");
}
