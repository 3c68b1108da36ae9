//! The fault-injection handle: failing requests (500, 429 with Retry-After, 409 Conflict) and latency.

mod common;

use common::api_code;
use conclave_emulator::{Failure, Verb};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn lease(name: &str) -> Lease {
    serde_json::from_value(
        serde_json::json!({ "metadata": { "name": name }, "spec": { "holderIdentity": "h" } }),
    )
    .unwrap()
}

/// A raw HTTP/1.1 GET, to see status line and headers exactly.
async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn fail_next_n_requests_of_one_verb_and_resource() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &lease("f"))
        .await
        .unwrap();
    emulator
        .faults()
        .fail_next(Verb::Get, "leases", 2, Failure::InternalError);
    // Other verbs and resources are untouched.
    api.list(&Default::default()).await.unwrap();
    for _ in 0..2 {
        let (code, reason, _) = api_code(api.get("f").await);
        assert_eq!((code, reason.as_str()), (500, "InternalError"));
    }
    api.get("f").await.unwrap();

    // kube-rs retries a 429 after its Retry-After: the create succeeds on the second attempt,
    // which cannot happen before the advertised second has passed.
    emulator.faults().fail_next(
        Verb::Create,
        "leases",
        1,
        Failure::TooManyRequests {
            retry_after_seconds: 1,
        },
    );
    let started = Instant::now();
    api.create(&PostParams::default(), &lease("g"))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    api.get("g").await.unwrap();
}

#[tokio::test]
async fn too_many_requests_carries_retry_after() {
    let (emulator, _client) = common::start().await;
    emulator.faults().fail_next(
        Verb::List,
        "leases",
        1,
        Failure::TooManyRequests {
            retry_after_seconds: 7,
        },
    );
    let response = raw_get(
        emulator.addr(),
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("retry-after: 7"),
        "{response}"
    );
    assert!(response.contains("\"retryAfterSeconds\":7"), "{response}");
    let response = raw_get(
        emulator.addr(),
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[tokio::test]
async fn latency_delays_requests_until_cleared() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let latency = Duration::from_millis(300);
    emulator.faults().set_latency(latency);
    let started = Instant::now();
    api.list(&Default::default()).await.unwrap();
    // A lower bound only: the request cannot be answered before the injected delay.
    assert!(started.elapsed() >= latency);
    emulator.faults().clear();
    api.list(&Default::default()).await.unwrap();
}

#[tokio::test]
async fn discovery_and_unknown_paths() {
    let (emulator, _client) = common::start().await;
    let addr = emulator.addr();
    let apis = raw_get(addr, "/apis").await;
    assert!(
        apis.contains("\"coordination.k8s.io\"") && apis.contains("\"events.k8s.io\""),
        "{apis}"
    );
    let v1beta1 = raw_get(addr, "/apis/coordination.k8s.io/v1beta1").await;
    assert!(v1beta1.contains("\"leasecandidates\""), "{v1beta1}");
    let openapi = raw_get(addr, "/openapi/v3").await;
    assert!(openapi.contains("apis/coordination.k8s.io/v1"), "{openapi}");
    let missing = raw_get(
        addr,
        "/apis/coordination.k8s.io/v1/namespaces/default/widgets",
    )
    .await;
    assert!(
        missing.starts_with("HTTP/1.1 404") && missing.contains("\"reason\":\"NotFound\""),
        "{missing}"
    );
    let version = raw_get(addr, "/version").await;
    assert!(version.contains("\"gitVersion\":\"v1.33.0\""), "{version}");
}

#[tokio::test]
async fn conflict_answers_like_a_stale_resource_version() {
    let (emulator, client) = common::start().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &lease("c"))
        .await
        .unwrap();
    emulator
        .faults()
        .fail_next(Verb::Update, "leases", 2, Failure::Conflict);
    // Reads and other verbs are untouched.
    api.get("c").await.unwrap();
    for _ in 0..2 {
        let (code, reason, message) =
            api_code(api.replace("c", &PostParams::default(), &created).await);
        assert_eq!((code, reason.as_str()), (409, "Conflict"));
        assert_eq!(
            message,
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"c\": the object has \
             been modified; please apply your changes to the latest version and try again"
        );
    }
    // The injected conflicts stored nothing: an update from the original resourceVersion
    // still goes through.
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().holder_identity = Some("other".into());
    let replaced = api
        .replace("c", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.unwrap().holder_identity.as_deref(),
        Some("other")
    );

    // A create names the object of its body, and the Status carries the same details as a
    // real conflict.
    emulator
        .faults()
        .fail_next(Verb::Create, "leases", 1, Failure::Conflict);
    let mut stream = tokio::net::TcpStream::connect(emulator.addr())
        .await
        .unwrap();
    let body = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"d"}}"#;
    let request = format!(
        "POST /apis/coordination.k8s.io/v1/namespaces/default/leases HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 409"), "{response}");
    let status: serde_json::Value =
        serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(status["code"], 409);
    assert_eq!(
        status["details"],
        serde_json::json!({ "name": "d", "group": "coordination.k8s.io", "kind": "leases" })
    );
    let (code, _, _) = api_code(api.get("d").await);
    assert_eq!(code, 404);
    api.create(&PostParams::default(), &lease("d"))
        .await
        .unwrap();
}
