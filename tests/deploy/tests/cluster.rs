//! `deploy/manifests.yaml` on a real kube-apiserver (v1.37, from conclave-testkit): the server
//! accepts it, and the chart's ServiceAccount may do exactly what the controller needs.

use std::path::{Path, PathBuf};

use conclave_deploy_tests::{
    CommandOutput, FULL_NAME, HA_LEASE, RELEASE_NAMESPACE, client_from_kubeconfig, documents,
    kind_of, locate_kubectl, manifests_path, run, service_account_kubeconfig,
};
use conclave_testkit::{ControlPlane, lease_candidate};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

fn kubectl(kubectl: &Path, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> CommandOutput {
    let config = kubeconfig.to_string_lossy();
    let mut all = vec!["--kubeconfig", &config];
    all.extend_from_slice(args);
    run(kubectl, &all, stdin).expect("running kubectl")
}

fn manifests() -> String {
    std::fs::read_to_string(manifests_path()).expect("reading deploy/manifests.yaml")
}

/// `kubectl apply --dry-run=server` of the rendered manifests succeeds on a fresh server, with no
/// warning (the Namespace enforces and warns on the `restricted` Pod Security level, so a pod
/// template that breaks it would be reported), and creates nothing.
#[tokio::test(flavor = "multi_thread")]
async fn rendered_manifests_pass_kubectl_apply_dry_run_server() {
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let admin = plane.kubeconfig_path();
    let text = manifests();
    let docs = documents(&text);

    // A dry run creates nothing, so objects in a namespace the same run would create fail with
    // NotFound. Create the Namespace first, exactly as the file declares it (users applying the
    // file for real get it first too: it is the first document).
    let namespace = docs
        .iter()
        .find(|d| kind_of(d) == Some("Namespace"))
        .expect("deploy/manifests.yaml declares its Namespace");
    kubectl(&kubectl_bin, admin, &["apply", "-f", "-"], Some(namespace)).assert_success();

    let manifests = manifests_path();
    let dry_run = kubectl(
        &kubectl_bin,
        admin,
        &[
            "apply",
            "--dry-run=server",
            "-f",
            &manifests.to_string_lossy(),
        ],
        None,
    );
    dry_run.assert_success();
    eprintln!("{}", dry_run.stdout);
    assert!(
        !dry_run.stderr.contains("Warning"),
        "the server warned about the manifests:\n{}",
        dry_run.stderr
    );
    // One "(server dry run)" line per object, Namespace included.
    let objects = docs.iter().filter(|d| kind_of(d).is_some()).count();
    let reported = dry_run
        .stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(reported, objects, "kubectl output:\n{}", dry_run.stdout);

    // Nothing but the Namespace exists afterwards.
    let client = plane.client().await.expect("admin client");
    let deployments: Api<Deployment> = Api::namespaced(client, RELEASE_NAMESPACE);
    assert!(
        deployments
            .get_opt(FULL_NAME)
            .await
            .expect("reading the Deployment")
            .is_none(),
        "a dry run created the Deployment"
    );
}

/// One access check: may the ServiceAccount do `verb` on `group/resource` in `namespace`
/// (cluster-wide when empty), on object `name` when given?
struct Access {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    namespace: &'static str,
    name: Option<&'static str>,
}

const fn access(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    namespace: &'static str,
) -> Access {
    Access {
        verb,
        group,
        resource,
        subresource: None,
        namespace,
        name: None,
    }
}

const COORDINATION: &str = "coordination.k8s.io";
/// Any namespace the controller may be asked to manage Leases in.
const TEAM: &str = "team-a";

/// What `conclave run` does: watch all Leases and LeaseCandidates, create and update Leases,
/// ping (update) and garbage-collect (delete) LeaseCandidates, record Events, and keep its own
/// `conclave-controller` Lease.
const ALLOWED: &[Access] = &[
    access("list", COORDINATION, "leases", ""),
    access("watch", COORDINATION, "leases", ""),
    access("get", COORDINATION, "leases", TEAM),
    access("get", COORDINATION, "leases", "kube-system"),
    access("create", COORDINATION, "leases", TEAM),
    access("update", COORDINATION, "leases", TEAM),
    access("list", COORDINATION, "leasecandidates", ""),
    access("watch", COORDINATION, "leasecandidates", ""),
    access("get", COORDINATION, "leasecandidates", TEAM),
    access("update", COORDINATION, "leasecandidates", TEAM),
    access("delete", COORDINATION, "leasecandidates", TEAM),
    access("create", "events.k8s.io", "events", TEAM),
    access("patch", "events.k8s.io", "events", TEAM),
    access("create", "", "events", TEAM),
    access("patch", "", "events", TEAM),
    Access {
        name: Some(HA_LEASE),
        ..access("update", COORDINATION, "leases", RELEASE_NAMESPACE)
    },
    access("create", COORDINATION, "leases", RELEASE_NAMESPACE),
];

/// What it must not do: read Secrets or anything else, delete or patch Leases, create
/// candidates, mint tokens, escalate, impersonate, touch its own Deployment.
const DENIED: &[Access] = &[
    access("get", "", "secrets", RELEASE_NAMESPACE),
    access("list", "", "secrets", ""),
    access("watch", "", "secrets", "kube-system"),
    access("get", "", "configmaps", RELEASE_NAMESPACE),
    access("list", "", "pods", ""),
    access("list", "", "namespaces", ""),
    access("delete", COORDINATION, "leases", TEAM),
    access("deletecollection", COORDINATION, "leases", TEAM),
    access("patch", COORDINATION, "leases", TEAM),
    access("create", COORDINATION, "leasecandidates", TEAM),
    access("deletecollection", COORDINATION, "leasecandidates", TEAM),
    access("list", "events.k8s.io", "events", TEAM),
    access("delete", "events.k8s.io", "events", TEAM),
    Access {
        subresource: Some("token"),
        ..access("create", "", "serviceaccounts", RELEASE_NAMESPACE)
    },
    access("escalate", "rbac.authorization.k8s.io", "clusterroles", ""),
    access("bind", "rbac.authorization.k8s.io", "clusterroles", ""),
    access(
        "update",
        "rbac.authorization.k8s.io",
        "roles",
        RELEASE_NAMESPACE,
    ),
    access("impersonate", "", "users", ""),
    access("update", "apps", "deployments", RELEASE_NAMESPACE),
];

async fn may(client: &Client, check: &Access) -> bool {
    let review = SelfSubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(check.verb.into()),
                group: Some(check.group.into()),
                resource: Some(check.resource.into()),
                subresource: check.subresource.map(Into::into),
                namespace: Some(check.namespace.into()),
                name: check.name.map(Into::into),
                ..Default::default()
            }),
            non_resource_attributes: None,
        },
        status: None,
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("creating a SelfSubjectAccessReview")
        .status
        .expect("the review has a status")
        .allowed
}

fn describe(check: &Access) -> String {
    format!(
        "{} {}/{}{}{} in {:?}{}",
        check.verb,
        if check.group.is_empty() {
            "core"
        } else {
            check.group
        },
        check.resource,
        if check.subresource.is_some() { "/" } else { "" },
        check.subresource.unwrap_or(""),
        check.namespace,
        check.name.map(|n| format!(" name {n}")).unwrap_or_default()
    )
}

/// Applies deploy/manifests.yaml for real (idempotent) and returns a kubeconfig that
/// authenticates as the chart's ServiceAccount with a token from the TokenRequest API.
async fn install_and_log_in(plane: &ControlPlane, kubectl_bin: &Path) -> PathBuf {
    let manifests = manifests_path();
    kubectl(
        kubectl_bin,
        plane.kubeconfig_path(),
        &["apply", "--server-side", "-f", &manifests.to_string_lossy()],
        None,
    )
    .assert_success();
    let path = plane.dir().join("conclave-sa.kubeconfig");
    service_account_kubeconfig(plane, RELEASE_NAMESPACE, FULL_NAME, &path)
        .await
        .expect("minting a ServiceAccount token")
}

fn is_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    match result {
        Err(kube::Error::Api(status)) => status.code == 403,
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

/// The chart's ServiceAccount, judged by the API server's own RBAC: allowed exactly the
/// controller's operations (SelfSubjectAccessReview), and real requests agree: Leases and
/// candidates work, Secrets and ConfigMaps are Forbidden.
#[tokio::test(flavor = "multi_thread")]
async fn chart_service_account_may_do_exactly_what_the_controller_needs() {
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let admin = plane.client().await.expect("admin client");
    let sa_kubeconfig = install_and_log_in(&plane, &kubectl_bin).await;
    let sa = client_from_kubeconfig(&sa_kubeconfig)
        .await
        .expect("ServiceAccount client");

    let mut wrong = Vec::new();
    for check in ALLOWED {
        if !may(&sa, check).await {
            wrong.push(format!("denied but needed: {}", describe(check)));
        }
    }
    for check in DENIED {
        if may(&sa, check).await {
            wrong.push(format!("allowed but must not be: {}", describe(check)));
        }
    }
    assert!(wrong.is_empty(), "RBAC of the chart:\n{}", wrong.join("\n"));

    // Real requests with the token.
    let ns = plane.namespace("team").await.expect("namespace");
    assert!(is_forbidden(
        Api::<Secret>::namespaced(sa.clone(), "kube-system")
            .list(&ListParams::default())
            .await
    ));
    assert!(is_forbidden(
        Api::<Secret>::all(sa.clone())
            .list(&ListParams::default())
            .await
    ));
    assert!(is_forbidden(
        Api::<ConfigMap>::namespaced(sa.clone(), &ns)
            .list(&ListParams::default())
            .await
    ));

    // Leases: list everywhere, create, update with a resourceVersion precondition; never delete.
    Api::<Lease>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect("listing Leases cluster-wide as the ServiceAccount");
    let leases: Api<Lease> = Api::namespaced(sa.clone(), &ns);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("component".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            // preferredHolder is valid only with a strategy.
            strategy: Some("example.com/test".into()),
            ..Default::default()
        }),
    };
    let mut created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("creating a Lease as the ServiceAccount");
    created.spec.as_mut().expect("spec").preferred_holder = Some("b".into());
    leases
        .replace("component", &PostParams::default(), &created)
        .await
        .expect("updating a Lease as the ServiceAccount");
    assert!(is_forbidden(
        leases.delete("component", &DeleteParams::default()).await
    ));

    // Candidates: the admin (a component) registers one; the controller pings it and may delete it.
    let candidates_admin: Api<LeaseCandidate> = Api::namespaced(admin.clone(), &ns);
    let candidate = lease_candidate(
        &ns,
        "a",
        "component",
        "1.37.0",
        Some("1.37.0"),
        "OldestEmulationVersion",
    );
    assert!(is_forbidden(
        Api::<LeaseCandidate>::namespaced(sa.clone(), &ns)
            .create(&PostParams::default(), &candidate)
            .await
    ));
    candidates_admin
        .create(&PostParams::default(), &candidate)
        .await
        .expect("registering a candidate as admin");
    let candidates: Api<LeaseCandidate> = Api::namespaced(sa.clone(), &ns);
    let mut pinged = candidates.get("a").await.expect("reading the candidate");
    pinged.spec.as_mut().expect("spec").ping_time = Some(MicroTime(jiff::Timestamp::now()));
    candidates
        .replace("a", &PostParams::default(), &pinged)
        .await
        .expect("pinging the candidate as the ServiceAccount");
    candidates
        .delete("a", &DeleteParams::default())
        .await
        .expect("garbage-collecting the candidate as the ServiceAccount");

    // Events on a Lease.
    let event = Event {
        metadata: ObjectMeta {
            name: Some("component.elected".into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(jiff::Timestamp::now())),
        reason: Some("Elected".into()),
        action: Some("Elect".into()),
        note: Some("a elected".into()),
        type_: Some("Normal".into()),
        reporting_controller: Some("conclave.dev/controller".into()),
        reporting_instance: Some("test".into()),
        regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some("component".into()),
            namespace: Some(ns.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Event>::namespaced(sa.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
        .expect("recording an Event as the ServiceAccount");

    // Its own HA Lease.
    let own: Api<Lease> = Api::namespaced(sa.clone(), RELEASE_NAMESPACE);
    own.create(
        &PostParams::default(),
        &Lease {
            metadata: ObjectMeta {
                name: Some(HA_LEASE.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("conclave-0".into()),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
        },
    )
    .await
    .expect("creating its own HA Lease as the ServiceAccount");
    own.get(HA_LEASE)
        .await
        .expect("reading its own HA Lease as the ServiceAccount");
}
