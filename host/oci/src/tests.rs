//! Unit tests: reference parsing, docker config parsing, error reasons.

use std::time::Duration;

use base64::Engine as _;

use crate::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// (text, registry, repository, tag, digest)
type ParseCase<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

#[test]
fn references_parse_into_their_parts() {
    let cases: &[ParseCase] = &[
        ("ghcr.io/org/plugin", "ghcr.io", "org/plugin", None, None),
        (
            "ghcr.io/org/plugin:v1.2.0",
            "ghcr.io",
            "org/plugin",
            Some("v1.2.0"),
            None,
        ),
        (
            "127.0.0.1:5000/plugin:dev",
            "127.0.0.1:5000",
            "plugin",
            Some("dev"),
            None,
        ),
        ("localhost/a/b/c", "localhost", "a/b/c", None, None),
        (
            "registry.example.com:443/x-y/z__w.v",
            "registry.example.com:443",
            "x-y/z__w.v",
            None,
            None,
        ),
    ];
    for &(text, registry, repository, tag, digest) in cases {
        let r = Reference::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            (registry, repository, tag, digest),
            "{text}"
        );
        assert!(!r.is_pinned(), "{text}");
        assert_eq!(r.to_string(), text, "round trip");
    }
    let pinned = Reference::parse(&format!("127.0.0.1:5000/plugin:dev@{DIGEST}")).unwrap();
    assert_eq!(pinned.registry(), "127.0.0.1:5000");
    assert_eq!(pinned.tag(), Some("dev"));
    assert_eq!(pinned.digest(), Some(DIGEST));
    assert!(pinned.is_pinned());
    let digest_only = Reference::parse(&format!("ghcr.io/org/plugin@{DIGEST}")).unwrap();
    assert_eq!(
        (digest_only.tag(), digest_only.digest()),
        (None, Some(DIGEST))
    );
    assert_eq!(
        digest_only.to_string(),
        format!("ghcr.io/org/plugin@{DIGEST}")
    );
}

#[test]
fn invalid_references_are_refused_with_the_reason() {
    let short = "sha256:0123";
    let cases: &[(String, &str)] = &[
        ("plugin".into(), "no registry"),
        ("org/plugin".into(), "does not look like a registry"),
        ("ghcr.io/Org/plugin".into(), "lowercase"),
        ("ghcr.io/org//plugin".into(), "repository"),
        ("ghcr.io/org/plugin-".into(), "repository"),
        ("ghcr.io/".into(), "repository"),
        ("ghcr.io/org/plugin:".into(), "tag"),
        ("ghcr.io/org/plugin:-x".into(), "tag"),
        ("ghcr.io/org/plugin:a b".into(), "tag"),
        (format!("ghcr.io/org/plugin@{short}"), "64 lowercase hex"),
        (
            format!(
                "ghcr.io/org/plugin@{}",
                DIGEST.to_uppercase().replace("SHA256", "sha256")
            ),
            "64 lowercase hex",
        ),
        ("ghcr.io/org/plugin@sha512:00".into(), "not a sha256 digest"),
        ("ghcr.io:port/plugin".into(), "port must be a number"),
        ("bad_host.io/plugin".into(), "not a host name"),
        (format!("ghcr.io/{}", "a".repeat(300)), "at most 255"),
    ];
    for (text, needle) in cases {
        let err = Reference::parse(text).expect_err(text);
        assert!(
            matches!(err, OciError::InvalidReference { .. }),
            "{text}: {err:?}"
        );
        assert_eq!(err.reason(), REASON_INVALID_REFERENCE);
        let message = err.to_string();
        assert!(
            message.contains(needle),
            "{text}: {message:?} lacks {needle:?}"
        );
    }
}

#[test]
fn with_digest_pins_and_replaces() {
    let r = Reference::parse("ghcr.io/org/plugin:v1").unwrap();
    let pinned = r.with_digest(DIGEST).unwrap();
    assert_eq!(
        pinned.to_string(),
        format!("ghcr.io/org/plugin:v1@{DIGEST}")
    );
    let other = format!("sha256:{}", "f".repeat(64));
    assert_eq!(
        pinned.with_digest(&other).unwrap().digest(),
        Some(other.as_str())
    );
    assert!(r.with_digest("sha256:nothex").is_err());
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[test]
fn docker_config_auth_field_gives_basic_credentials() {
    let json = format!(
        r#"{{"auths": {{"other.io": {{"auth": "{}"}}, "127.0.0.1:5000": {{"auth": "{}"}}}}}}"#,
        b64("someone:else"),
        b64("alice:pa:ss")
    );
    // The password keeps its own colons: only the first separates.
    assert_eq!(
        Credentials::from_docker_config(json.as_bytes(), "127.0.0.1:5000").unwrap(),
        Credentials::basic("alice", "pa:ss")
    );
}

#[test]
fn docker_config_keys_match_by_host_and_username_password_works() {
    let json = r#"{"auths": {"https://ghcr.io/v1/": {"username": "bob", "password": "tok"}}}"#;
    assert_eq!(
        Credentials::from_docker_config(json.as_bytes(), "ghcr.io").unwrap(),
        Credentials::basic("bob", "tok")
    );
    let hub = format!(
        r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{}"}}}}}}"#,
        b64("u:p")
    );
    assert_eq!(
        Credentials::from_docker_config(hub.as_bytes(), "docker.io").unwrap(),
        Credentials::basic("u", "p")
    );
}

#[test]
fn docker_config_without_the_registry_is_anonymous() {
    let json = format!(
        r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
        b64("u:p")
    );
    assert_eq!(
        Credentials::from_docker_config(json.as_bytes(), "quay.io").unwrap(),
        Credentials::Anonymous
    );
    assert_eq!(
        Credentials::from_docker_config(b"{}", "quay.io").unwrap(),
        Credentials::Anonymous
    );
}

#[test]
fn malformed_docker_configs_are_refused_without_leaking_the_secret() {
    let cases: &[(String, &str)] = &[
        ("not json".into(), "not a docker config"),
        (
            r#"{"auths": {"r.io": {"auth": "%%%"}}}"#.into(),
            "not base64",
        ),
        (
            format!(
                r#"{{"auths": {{"r.io": {{"auth": "{}"}}}}}}"#,
                b64("nocolonsecret")
            ),
            "user:password",
        ),
        (
            r#"{"auths": {"r.io": {"username": "u"}}}"#.into(),
            "neither",
        ),
    ];
    for (json, needle) in cases {
        let err = Credentials::from_docker_config(json.as_bytes(), "r.io").expect_err(json);
        let message = err.to_string();
        assert!(
            matches!(err, OciError::InvalidCredentials { .. }),
            "{json}: {err:?}"
        );
        assert!(
            message.contains(needle),
            "{json}: {message:?} lacks {needle:?}"
        );
        assert!(
            !message.contains("nocolonsecret"),
            "{message:?} leaks the secret"
        );
        assert_eq!(err.reason(), REASON_PULL_FAILED);
    }
}

#[test]
fn credentials_debug_redacts_the_password() {
    let text = format!("{:?}", Credentials::basic("alice", "hunter2"));
    assert!(
        text.contains("alice") && !text.contains("hunter2"),
        "{text}"
    );
}

#[test]
fn errors_map_to_condition_reasons() {
    let r = || "ghcr.io/org/plugin".to_owned();
    let reg = || "ghcr.io".to_owned();
    let cases: Vec<(OciError, &str, bool)> = vec![
        (
            OciError::InvalidReference {
                reference: r(),
                reason: "x".into(),
            },
            "InvalidReference",
            false,
        ),
        (
            OciError::Unreachable {
                registry: reg(),
                message: "refused".into(),
            },
            "PullFailed",
            true,
        ),
        (
            OciError::Timeout {
                registry: reg(),
                step: "the manifest request",
                after: Duration::from_secs(2),
            },
            "PullFailed",
            true,
        ),
        (
            OciError::Unauthorized {
                registry: reg(),
                reference: r(),
                message: "401".into(),
            },
            "PullFailed",
            false,
        ),
        (
            OciError::NotFound {
                reference: r(),
                message: "404".into(),
            },
            "PullFailed",
            false,
        ),
        (
            OciError::Registry {
                registry: reg(),
                message: "500".into(),
            },
            "PullFailed",
            true,
        ),
        (
            OciError::InvalidCredentials {
                registry: reg(),
                reason: "x".into(),
            },
            "PullFailed",
            false,
        ),
        (
            OciError::DigestMismatch {
                reference: r(),
                what: "manifest",
                expected: "a".into(),
                actual: "b".into(),
            },
            "DigestMismatch",
            false,
        ),
        (
            OciError::NotAWasmArtifact {
                reference: r(),
                media_type: "x".into(),
                detail: "y".into(),
            },
            "InvalidComponent",
            false,
        ),
        (
            OciError::TooLarge {
                reference: r(),
                size: 2,
                limit: 1,
            },
            "InvalidComponent",
            false,
        ),
        (
            OciError::InvalidComponent {
                message: "x".into(),
            },
            "InvalidComponent",
            false,
        ),
    ];
    for (error, reason, transient) in cases {
        assert_eq!(error.reason(), reason, "{error:?}");
        assert_eq!(error.is_transient(), transient, "{error:?}");
    }
}

#[test]
fn default_options_are_bounded() {
    let options = ClientOptions::default();
    assert_eq!(options.timeout, Duration::from_secs(30));
    assert!(options.plain_http.is_empty());
    assert_eq!(options.max_plugin_bytes, 64 << 20);
}

/// Refusals that need no registry: they happen before any connection (port 9 is never dialled).
#[tokio::test]
async fn push_refuses_a_digest_reference_a_non_component_and_an_oversized_one() {
    let options = ClientOptions::default().with_plain_http("127.0.0.1:9");
    let tagged = Reference::parse("127.0.0.1:9/plugin:v1").unwrap();
    let pinned = tagged.with_digest(DIGEST).unwrap();
    let component = wat_component();

    let err = push(
        &component,
        &pinned,
        &Credentials::Anonymous,
        &options,
        Default::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, OciError::InvalidReference { .. }), "{err:?}");

    let err = push(
        b"\0asm\x01\0\0\0",
        &tagged,
        &Credentials::Anonymous,
        &options,
        Default::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, OciError::InvalidComponent { .. }), "{err:?}");
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    let err = push(
        b"#!/bin/sh\n",
        &tagged,
        &Credentials::Anonymous,
        &options,
        Default::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not WebAssembly"), "{err}");

    let small = ClientOptions {
        max_plugin_bytes: 4,
        ..options.clone()
    };
    let err = push(
        &component,
        &tagged,
        &Credentials::Anonymous,
        &small,
        Default::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, OciError::TooLarge { limit: 4, .. }),
        "{err:?}"
    );
}

/// An empty component: the smallest valid one (`(component)` in the binary format).
fn wat_component() -> Vec<u8> {
    b"\0asm\x0d\0\x01\0".to_vec()
}
