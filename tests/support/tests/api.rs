//! LeaseCandidate API behaviour of the real kube-apiserver, through kube-rs, on the shared
//! control plane of this test binary.

use std::time::Duration;

use conclave_testkit::{ControlPlane, Error, lease_candidate, wait_for};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};

const TIMEOUT: Duration = Duration::from_secs(60);

fn status(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn create_list_and_watch_lease_candidates() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    let ns = cp.namespace("crud").await.unwrap();
    let api: Api<LeaseCandidate> = Api::namespaced(cp.client().await.unwrap(), &ns);

    let mut watch = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();

    // Names follow the ConfigMap-key rule, so client-go style `host_uuid` identities are valid.
    for (name, emulation) in [("node-a_1234", "1.36.0"), ("node-b_5678", "1.37.0")] {
        let c = lease_candidate(
            &ns,
            name,
            "my-lease",
            "1.37.2",
            Some(emulation),
            "OldestEmulationVersion",
        );
        api.create(&PostParams::default(), &c).await.unwrap();
    }

    let listed = api.list(&ListParams::default()).await.unwrap();
    let mut names: Vec<String> = listed.items.iter().map(|c| c.name_any()).collect();
    names.sort();
    assert_eq!(names, ["node-a_1234", "node-b_5678"]);
    let a = listed
        .items
        .iter()
        .find(|c| c.name_any() == "node-a_1234")
        .unwrap();
    let spec = a.spec.as_ref().unwrap();
    assert_eq!(spec.lease_name, "my-lease");
    assert_eq!(spec.binary_version, "1.37.2");
    assert_eq!(spec.emulation_version.as_deref(), Some("1.36.0"));
    assert_eq!(spec.strategy, "OldestEmulationVersion");
    assert!(spec.renew_time.is_some());

    // kube-apiserver v1.37.2 does not accept `spec.leaseName` as a field selector (the registry
    // computes the field, but no field-label conversion is registered for the API versions), so
    // controllers must list all candidates and filter by leaseName themselves.
    let other = lease_candidate(
        &ns,
        "other",
        "other-lease",
        "1.37.2",
        Some("1.37.0"),
        "OldestEmulationVersion",
    );
    api.create(&PostParams::default(), &other).await.unwrap();
    let err = api
        .list(&ListParams::default().fields("spec.leaseName=my-lease"))
        .await
        .expect_err("spec.leaseName field selector");
    assert_eq!(status(&err), Some(400), "{err}");
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=other"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert_eq!(
        by_name.items[0].spec.as_ref().unwrap().lease_name,
        "other-lease"
    );

    let mut added = Vec::new();
    while added.len() < 3 {
        let event = tokio::time::timeout(TIMEOUT, watch.try_next())
            .await
            .expect("watch event in time")
            .unwrap()
            .expect("watch stream open");
        if let WatchEvent::Added(c) = event {
            added.push(c.name_any());
        }
    }
    added.sort();
    assert_eq!(added, ["node-a_1234", "node-b_5678", "other"]);
}

#[tokio::test]
async fn invalid_lease_candidates_are_rejected_with_422() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    let ns = cp.namespace("invalid").await.unwrap();
    let api: Api<LeaseCandidate> = Api::namespaced(cp.client().await.unwrap(), &ns);
    let pp = PostParams::default();

    let cases = [
        (
            "binary-below-emulation",
            "1.36.0",
            Some("1.37.0"),
            "OldestEmulationVersion",
        ),
        ("unqualified-unknown", "1.37.2", Some("1.37.0"), "foobar"),
        (
            "too-many-slashes",
            "1.37.2",
            Some("1.37.0"),
            "example.com/foo/bar",
        ),
        (
            "missing-emulation",
            "1.37.2",
            None,
            "OldestEmulationVersion",
        ),
        (
            "v-prefixed-version",
            "v1.37.2",
            Some("1.37.0"),
            "OldestEmulationVersion",
        ),
    ];
    for (name, binary, emulation, strategy) in cases {
        let c = lease_candidate(&ns, name, "l", binary, emulation, strategy);
        let err = api.create(&pp, &c).await.expect_err(name);
        assert_eq!(status(&err), Some(422), "{name}: {err}");
    }

    // A qualified third-party strategy is accepted; so is binary == emulation.
    for (name, strategy) in [
        ("third-party", "example.com/foo"),
        ("builtin", "OldestEmulationVersion"),
    ] {
        let c = lease_candidate(&ns, name, "l", "1.37.0", Some("1.37.0"), strategy);
        api.create(&pp, &c)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }

    // spec.leaseName is immutable.
    let mut c = api.get("builtin").await.unwrap();
    c.spec.as_mut().unwrap().lease_name = "other".into();
    let err = api
        .replace("builtin", &pp, &c)
        .await
        .expect_err("leaseName change");
    assert_eq!(status(&err), Some(422), "{err}");
}

#[tokio::test]
async fn rbac_applies_to_impersonated_users() {
    let Some(cp) = ControlPlane::shared().await.expect("control plane") else {
        return;
    };
    let ns = cp.namespace("rbac").await.unwrap();
    let user = cp
        .client_for_user("alice", &["conclave-testers"])
        .await
        .unwrap();
    let as_alice: Api<LeaseCandidate> = Api::namespaced(user, &ns);

    let err = as_alice
        .list(&ListParams::default())
        .await
        .expect_err("no grant yet");
    assert_eq!(status(&err), Some(403), "{err}");

    let admin = cp.client().await.unwrap();
    let role = Role {
        metadata: ObjectMeta {
            name: Some("read-candidates".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leasecandidates".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    // Bound to the group, so this also proves the impersonated group reaches the authorizer.
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("testers-read".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "read-candidates".into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            name: "conclave-testers".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // RBAC caches update asynchronously; wait for the grant to apply.
    wait_for("alice to be allowed to list", TIMEOUT, || async {
        match as_alice.list(&ListParams::default()).await {
            Ok(_) => Ok(Some(())),
            Err(e) if status(&e) == Some(403) => Ok(None),
            Err(e) => Err(Error::from(e)),
        }
    })
    .await
    .unwrap();

    // Reading is granted, writing is not.
    let c = lease_candidate(
        &ns,
        "x",
        "l",
        "1.37.0",
        Some("1.37.0"),
        "OldestEmulationVersion",
    );
    let err = as_alice
        .create(&PostParams::default(), &c)
        .await
        .expect_err("no create grant");
    assert_eq!(status(&err), Some(403), "{err}");
}
