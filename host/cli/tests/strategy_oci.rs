//! `conclave strategy push`, `pull` and `inspect REFERENCE` against a real OCI registry (Debian's
//! docker-registry, the CNCF distribution registry, run by the testkit): the author's loop
//! (push, then pull by the printed digest), digests verified on the way back, a broken plugin
//! refused, basic auth, interop with skopeo and with the Kubewarden layout, and a registry that
//! never answers.
//!
//! Each test starts its own registry; without `docker-registry` they skip (fail with
//! `CONCLAVE_REQUIRE_REGISTRY=1`, as CI sets).

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use conclave_oci::{ClientOptions, Credentials, OciError, Reference};
use conclave_testkit::{REGISTRY_REQUIRE_ENV, Registry};

/// A committed plugin (the built-in OldestEmulationVersion, built against
/// conclave:strategy@0.2.0): loads in the engine without building anything.
fn plugin_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/v0.2/oldest_emulation_version.wasm")
}

fn plugin_bytes() -> Vec<u8> {
    std::fs::read(plugin_file()).expect("reading the plugin fixture")
}

/// Runs `conclave args...`, feeding `stdin` if given.
fn conclave(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The compiled-code cache of a developer's machine is not what is tested here.
        .env(
            "CONCLAVE_CACHE_DIR",
            std::env::temp_dir().join("conclave-oci-test-cache"),
        )
        .spawn()
        .expect("run conclave");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().expect("wait for conclave")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success and returns stdout.
fn ok(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        stdout(output),
        stderr(output)
    );
    stdout(output)
}

/// Asserts failure and returns stderr.
fn fails(output: &Output, what: &str) -> String {
    assert!(
        !output.status.success(),
        "{what} succeeded but should have failed:\nstdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
    stderr(output)
}

/// Pushes the fixture to `reference` over plain HTTP; returns the printed pinned reference.
fn push(reference: &str, extra: &[&str], stdin: Option<&str>) -> String {
    let file = plugin_file();
    let mut args = vec![
        "strategy",
        "push",
        file.to_str().unwrap(),
        reference,
        "--plain-http",
    ];
    args.extend_from_slice(extra);
    let out = ok(&conclave(&args, stdin), &format!("push to {reference}"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "push prints one line, the pinned reference: {out:?}"
    );
    lines[0].to_owned()
}

fn options(registry: &Registry) -> ClientOptions {
    ClientOptions::default().with_plain_http(registry.host())
}

#[tokio::test]
async fn push_prints_a_pinned_reference_and_pull_by_it_returns_the_same_bytes() {
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    let reference = format!("{}/conclave/oldest:v1", registry.host());
    let pinned = push(&reference, &[], None);
    let digest = pinned
        .strip_prefix(&format!("{reference}@"))
        .unwrap_or_else(|| panic!("{pinned:?} is not {reference}@sha256:..."));
    assert!(Reference::parse(&pinned).unwrap().is_pinned());

    // The printed digest is the registry's digest of the manifest the tag points to.
    let manifest = registry
        .get(
            "/v2/conclave/oldest/manifests/v1",
            conclave_oci::MANIFEST_MEDIA_TYPE,
        )
        .await
        .unwrap();
    assert_eq!(manifest.status, 200, "{}", manifest.text());
    assert_eq!(manifest.header("docker-content-digest"), Some(digest));
    assert_eq!(conclave_oci::sha256_digest(&manifest.body), digest);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pulled.wasm");
    let pulled = conclave(
        &[
            "strategy",
            "pull",
            &pinned,
            "-o",
            out.to_str().unwrap(),
            "--plain-http",
        ],
        None,
    );
    ok(&pulled, "pull by digest");
    assert_eq!(std::fs::read(&out).unwrap(), plugin_bytes());
    assert!(stderr(&pulled).contains(digest), "{}", stderr(&pulled));

    // By tag too (no digest: the CLI allows it and reports the digest).
    let by_tag = dir.path().join("by-tag.wasm");
    ok(
        &conclave(
            &[
                "strategy",
                "pull",
                &reference,
                "-o",
                by_tag.to_str().unwrap(),
                "--plain-http",
            ],
            None,
        ),
        "pull by tag",
    );
    assert_eq!(std::fs::read(&by_tag).unwrap(), plugin_bytes());

    // inspect REFERENCE: pulled, loaded in the engine, the digests printed.
    let inspected = ok(
        &conclave(&["strategy", "inspect", &pinned, "--plain-http"], None),
        "inspect by reference",
    );
    let layer = conclave_oci::sha256_digest(&plugin_bytes());
    for line in [
        format!("source:      {pinned}"),
        format!("manifest:    {digest}"),
        format!("layer:       {layer} (application/wasm)"),
        "strategies:  OldestEmulationVersion".to_owned(),
        format!("sha256:      {}", layer.strip_prefix("sha256:").unwrap()),
    ] {
        assert!(
            inspected.contains(&line),
            "inspect lacks {line:?}:\n{inspected}"
        );
    }

    // The library the controller calls agrees.
    let plugin = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap();
    assert_eq!(plugin.component, plugin_bytes());
    assert_eq!(plugin.manifest_digest, digest);
    assert_eq!(plugin.layer_digest, layer);
    assert_eq!(plugin.media_type, "application/wasm");
}

#[tokio::test]
async fn annotations_given_to_push_come_back_on_pull() {
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    let pinned = push(
        &format!("{}/conclave/annotated:v1", registry.host()),
        &[
            "--annotation",
            "org.opencontainers.image.source=https://example.com/plugin",
        ],
        None,
    );
    let plugin = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap();
    assert_eq!(
        plugin
            .annotations
            .get("org.opencontainers.image.source")
            .map(String::as_str),
        Some("https://example.com/plugin")
    );
}

#[tokio::test]
async fn a_wrong_digest_is_not_found_and_tampered_content_is_a_digest_mismatch() {
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    let reference = format!("{}/conclave/oldest:v1", registry.host());
    let pinned = push(&reference, &[], None);
    let digest = pinned.rsplit_once('@').unwrap().1.to_owned();

    // A digest the registry does not hold: nothing is served, the pull fails as not found.
    let wrong = format!("{reference}@sha256:{}", "0".repeat(64));
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &wrong,
                "-o",
                "/dev/null",
                "--plain-http",
            ],
            None,
        ),
        "pull of an unknown digest",
    );
    assert!(err.contains("not found"), "{err}");
    let lib = conclave_oci::pull(
        &Reference::parse(&wrong).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap_err();
    assert!(matches!(lib, OciError::NotFound { .. }), "{lib:?}");
    assert_eq!(lib.reason(), "PullFailed");

    // The layer corrupted in the registry's storage (same size, one byte flipped): the
    // manifest still matches its pin, the layer no longer matches the manifest.
    let layer_digest = conclave_oci::sha256_digest(&plugin_bytes());
    let layer_path = registry.blob_path(&layer_digest);
    let mut layer = std::fs::read(&layer_path).expect("the layer blob is on disk");
    let last = layer.len() - 1;
    layer[last] ^= 0xff;
    std::fs::write(&layer_path, &layer).unwrap();
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &pinned,
                "-o",
                "/dev/null",
                "--plain-http",
            ],
            None,
        ),
        "pull of a corrupted layer",
    );
    assert!(
        err.contains(&format!(
            "digest mismatch for the layer of {pinned}: expected {layer_digest}"
        )),
        "{err}"
    );
    let lib = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&lib, OciError::DigestMismatch { what: "layer", actual, .. }
            if *actual == conclave_oci::sha256_digest(&layer)),
        "{lib:?}"
    );
    assert_eq!(lib.reason(), "DigestMismatch");

    // The manifest rewritten behind the pin (still valid JSON, one more space).
    let manifest_path = registry.blob_path(&digest);
    let mut manifest = std::fs::read(&manifest_path).expect("the manifest blob is on disk");
    manifest.push(b' ');
    std::fs::write(&manifest_path, &manifest).unwrap();
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &pinned,
                "-o",
                "/dev/null",
                "--plain-http",
            ],
            None,
        ),
        "pull of a rewritten manifest",
    );
    assert!(
        err.contains(&format!(
            "digest mismatch for the manifest of {pinned}: expected {digest}"
        )),
        "{err}"
    );
    let lib = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &lib,
            OciError::DigestMismatch {
                what: "manifest",
                ..
            }
        ),
        "{lib:?}"
    );
    assert_eq!(lib.reason(), "DigestMismatch");
}

#[tokio::test]
async fn push_refuses_a_file_that_is_not_a_plugin_the_engine_loads() {
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8]); 3] = [
        ("text.wasm", b"this is not webassembly\n"),
        // A core module, not a component.
        ("module.wasm", b"\0asm\x01\0\0\0"),
        // A valid component that exports nothing: not a strategy plugin.
        ("empty-component.wasm", b"\0asm\x0d\0\x01\0"),
    ];
    for (name, bytes) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let repository = name.trim_end_matches(".wasm");
        let reference = format!("{}/broken/{repository}:v1", registry.host());
        let err = fails(
            &conclave(
                &[
                    "strategy",
                    "push",
                    file.to_str().unwrap(),
                    &reference,
                    "--plain-http",
                ],
                None,
            ),
            &format!("push of {name}"),
        );
        assert!(
            err.contains("is not a plugin the engine can load; not pushed"),
            "{name}: {err}"
        );
        // Nothing reached the registry.
        let manifest = registry
            .get(
                &format!("/v2/broken/{repository}/manifests/v1"),
                conclave_oci::MANIFEST_MEDIA_TYPE,
            )
            .await
            .unwrap();
        assert_eq!(manifest.status, 404, "{name}: {}", manifest.text());
    }
}

#[tokio::test]
async fn basic_auth_works_with_the_right_credentials_and_fails_clearly_without() {
    let Some(registry) = Registry::start_with_auth("alice", "s3cret").await.unwrap() else {
        return;
    };
    let reference = format!("{}/private/oldest:v1", registry.host());
    let file = plugin_file();
    let file = file.to_str().unwrap();

    // No credentials, then a wrong password: refused, and the message says what to check.
    let err = fails(
        &conclave(
            &["strategy", "push", file, &reference, "--plain-http"],
            None,
        ),
        "anonymous push",
    );
    assert!(err.contains("refused access"), "{err}");
    assert!(err.contains("check the credentials"), "{err}");
    let err = fails(
        &conclave(
            &[
                "strategy",
                "push",
                file,
                &reference,
                "--plain-http",
                "--username",
                "alice",
                "--password-stdin",
            ],
            Some("wrong\n"),
        ),
        "push with a wrong password",
    );
    assert!(err.contains("refused access"), "{err}");

    let pinned = push(
        &reference,
        &["--username", "alice", "--password-stdin"],
        Some("s3cret\n"),
    );

    // Pull: anonymous is refused; a docker config (an imagePullSecret's content) works.
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &pinned,
                "-o",
                "/dev/null",
                "--plain-http",
            ],
            None,
        ),
        "anonymous pull",
    );
    assert!(err.contains("refused access"), "{err}");
    let lib = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap_err();
    assert!(matches!(lib, OciError::Unauthorized { .. }), "{lib:?}");
    assert_eq!(lib.reason(), "PullFailed");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    let auth = "YWxpY2U6czNjcmV0"; // base64("alice:s3cret")
    std::fs::write(
        &config,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.host()
        ),
    )
    .unwrap();
    let out = dir.path().join("pulled.wasm");
    ok(
        &conclave(
            &[
                "strategy",
                "pull",
                &pinned,
                "-o",
                out.to_str().unwrap(),
                "--plain-http",
                "--docker-config",
                config.to_str().unwrap(),
            ],
            None,
        ),
        "pull with a docker config",
    );
    assert_eq!(std::fs::read(&out).unwrap(), plugin_bytes());

    let json = std::fs::read(&config).unwrap();
    let credentials = Credentials::from_docker_config(&json, &registry.host()).unwrap();
    let plugin = conclave_oci::pull(
        &Reference::parse(&pinned).unwrap(),
        &credentials,
        &options(&registry),
    )
    .await
    .unwrap();
    assert_eq!(plugin.component, plugin_bytes());
}

/// `skopeo`, when present (CI installs it with the registry).
fn skopeo() -> Option<&'static str> {
    let found = Command::new("skopeo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os(REGISTRY_REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            panic!("skopeo not found: run .ci/prepare-registry.sh ({REGISTRY_REQUIRE_ENV} is set)");
        }
        eprintln!("SKIP: skopeo not found; run .ci/prepare-registry.sh");
        return None;
    }
    Some("skopeo")
}

#[tokio::test]
async fn skopeo_reads_the_cncf_media_types_of_a_pushed_plugin() {
    let Some(skopeo) = skopeo() else { return };
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    let reference = format!("{}/conclave/oldest:v1", registry.host());
    let pinned = push(&reference, &[], None);
    let inspect = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["inspect", "--raw", "--tls-verify=false"];
        args.extend_from_slice(extra);
        // skopeo takes a tag or a digest, not both.
        let target = format!("docker://{}", pinned.replace(":v1@", "@"));
        args.push(&target);
        let output = Command::new(skopeo).args(&args).output().unwrap();
        assert!(
            output.status.success(),
            "skopeo {args:?}: {}",
            stderr(&output)
        );
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", stdout(&output)))
    };
    let manifest = inspect(&[]);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    let layer_digest = conclave_oci::sha256_digest(&plugin_bytes());
    assert_eq!(layers[0]["digest"], layer_digest.as_str());
    assert_eq!(layers[0]["size"], plugin_bytes().len());

    // The config, as oci-wasm builds it from the component.
    let config = inspect(&["--config"]);
    assert_eq!(config["architecture"], "wasm", "{config}");
    assert_eq!(config["os"], "wasip2", "{config}");
    assert_eq!(config["layerDigests"][0], layer_digest.as_str(), "{config}");
    // The plugin's world: it exports the contract's `info` and `elect`, imports its log.
    let exports = &config["component"]["exports"];
    assert!(
        exports.as_array().unwrap().iter().any(|e| e == "elect")
            && exports.as_array().unwrap().iter().any(|e| e == "info"),
        "{config}"
    );
    let imports = config["component"]["imports"].to_string();
    assert!(imports.contains("conclave:strategy/log@0.2.0"), "{config}");
}

/// The manifest of an artifact in Kubewarden's layout (config and layer types of the older
/// wasm-to-oci convention), or of a container image.
fn manifest(config_type: &str, config: &[u8], layer_type: &str, layer: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": config_type,
            "digest": conclave_oci::sha256_digest(config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": layer_type,
            "digest": conclave_oci::sha256_digest(layer),
            "size": layer.len(),
        }],
        "annotations": { "io.kubewarden.policy.title": "oldest" },
    }))
    .unwrap()
}

#[tokio::test]
async fn an_artifact_in_the_kubewarden_layout_pulls_and_a_container_image_is_refused() {
    let Some(registry) = Registry::start().await.unwrap() else {
        return;
    };
    // Published through the distribution API directly, as a third-party tool would.
    let layer = plugin_bytes();
    let config = b"{}";
    registry.put_blob("kw/oldest", config).await.unwrap();
    registry.put_blob("kw/oldest", &layer).await.unwrap();
    let body = manifest(
        "application/vnd.wasm.config.v1+json",
        config,
        conclave_oci::LEGACY_LAYER_MEDIA_TYPE,
        &layer,
    );
    let digest = registry
        .put_manifest("kw/oldest", "v1", conclave_oci::MANIFEST_MEDIA_TYPE, &body)
        .await
        .unwrap();
    let pinned = format!("{}/kw/oldest:v1@{digest}", registry.host());

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kw.wasm");
    ok(
        &conclave(
            &[
                "strategy",
                "pull",
                &pinned,
                "-o",
                out.to_str().unwrap(),
                "--plain-http",
            ],
            None,
        ),
        "pull of the Kubewarden layout",
    );
    assert_eq!(std::fs::read(&out).unwrap(), layer);
    let inspected = ok(
        &conclave(&["strategy", "inspect", &pinned, "--plain-http"], None),
        "inspect of the Kubewarden layout",
    );
    assert!(
        inspected.contains(&format!(
            "layer:       {} ({})",
            conclave_oci::sha256_digest(&layer),
            conclave_oci::LEGACY_LAYER_MEDIA_TYPE
        )),
        "{inspected}"
    );
    assert!(
        inspected.contains("annotation:  io.kubewarden.policy.title=oldest"),
        "{inspected}"
    );
    assert!(
        inspected.contains("strategies:  OldestEmulationVersion"),
        "{inspected}"
    );

    // A container image (a tar+gzip layer) is not a plugin: refused before its layer is fetched.
    let tar = b"not really a tarball";
    registry.put_blob("app/image", config).await.unwrap();
    registry.put_blob("app/image", tar).await.unwrap();
    let body = manifest(
        "application/vnd.oci.image.config.v1+json",
        config,
        "application/vnd.oci.image.layer.v1.tar+gzip",
        tar,
    );
    let digest = registry
        .put_manifest("app/image", "v1", conclave_oci::MANIFEST_MEDIA_TYPE, &body)
        .await
        .unwrap();
    let image = format!("{}/app/image@{digest}", registry.host());
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &image,
                "-o",
                "/dev/null",
                "--plain-http",
            ],
            None,
        ),
        "pull of a container image",
    );
    assert!(err.contains("is not a WebAssembly artifact"), "{err}");
    let lib = conclave_oci::pull(
        &Reference::parse(&image).unwrap(),
        &Credentials::Anonymous,
        &options(&registry),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&lib, OciError::NotAWasmArtifact { media_type, .. }
            if media_type == "application/vnd.oci.image.layer.v1.tar+gzip"),
        "{lib:?}"
    );
    assert_eq!(lib.reason(), "InvalidComponent");
}

#[tokio::test]
async fn a_registry_that_never_answers_fails_the_pull_with_a_timeout() {
    // Accepts connections and never writes a byte; needs no registry binary.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let reference =
        Reference::parse(&format!("{host}/conclave/oldest@sha256:{}", "a".repeat(64))).unwrap();
    let timeout = Duration::from_secs(2);
    let options = ClientOptions::default()
        .with_plain_http(host.clone())
        .with_timeout(timeout);
    let started = Instant::now();
    let err = conclave_oci::pull(&reference, &Credentials::Anonymous, &options)
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, OciError::Timeout { .. }), "{err:?}");
    assert_eq!(err.reason(), "PullFailed");
    assert!(
        elapsed >= timeout / 2 && elapsed < Duration::from_secs(15),
        "{elapsed:?}"
    );

    let started = Instant::now();
    let err = fails(
        &conclave(
            &[
                "strategy",
                "pull",
                &reference.to_string(),
                "-o",
                "/dev/null",
                "--plain-http",
                "--registry-timeout",
                "2s",
            ],
            None,
        ),
        "pull from a silent registry",
    );
    assert!(
        err.contains(&format!("registry {host} did not answer")),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
