//! `deploy/manifests.yaml` on a real kube-apiserver (v1.37, from conclave-testkit): the server
//! accepts it, and the chart's ServiceAccount may do exactly what the controller needs.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Elections take a ping window (5 s) plus reconcile time; generous for a busy 2-core machine.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(120);

use conclave_deploy_tests::{
    CommandOutput, FULL_NAME, HA_LEASE, RELEASE_NAMESPACE, client_from_kubeconfig, documents,
    kind_of, locate_kubectl, manifests_path, run, service_account_kubeconfig,
};
use conclave_testkit::{
    BuiltinControllerHold, CandidateResponder, ControlPlane, ManagedProcess, lease_candidate,
    wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
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
/// ping (update) and garbage-collect (delete) LeaseCandidates, record Events, read Pods (pod
/// liveness), keep its own `conclave-controller` Lease, and load StrategyPlugin objects (read
/// them, write their status, Events on them in `default`).
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
    access("list", "", "pods", ""),
    access("watch", "", "pods", ""),
    access("get", "", "pods", TEAM),
    Access {
        name: Some(HA_LEASE),
        ..access("update", COORDINATION, "leases", RELEASE_NAMESPACE)
    },
    access("create", COORDINATION, "leases", RELEASE_NAMESPACE),
    access("list", "conclave.dev", "strategyplugins", ""),
    access("watch", "conclave.dev", "strategyplugins", ""),
    access("get", "conclave.dev", "strategyplugins", ""),
    Access {
        subresource: Some("status"),
        ..access("patch", "conclave.dev", "strategyplugins", "")
    },
    access("create", "events.k8s.io", "events", "default"),
];

/// What it must not do: read Secrets or anything else, write Pods, delete or patch Leases, create
/// candidates, mint tokens, escalate, impersonate, touch its own Deployment.
const DENIED: &[Access] = &[
    access("get", "", "secrets", RELEASE_NAMESPACE),
    access("list", "", "secrets", ""),
    access("watch", "", "secrets", "kube-system"),
    // StrategyPlugin sources: only the ConfigMaps and pull Secrets the values name (none here).
    access("get", "", "configmaps", RELEASE_NAMESPACE),
    access("create", "conclave.dev", "strategyplugins", ""),
    access("update", "conclave.dev", "strategyplugins", ""),
    access("delete", "conclave.dev", "strategyplugins", ""),
    access("create", "", "pods", TEAM),
    access("update", "", "pods", TEAM),
    access("patch", "", "pods", TEAM),
    access("delete", "", "pods", TEAM),
    Access {
        subresource: Some("status"),
        ..access("patch", "", "pods", TEAM)
    },
    Access {
        subresource: Some("eviction"),
        ..access("create", "", "pods", TEAM)
    },
    Access {
        subresource: Some("exec"),
        ..access("create", "", "pods", TEAM)
    },
    access("list", "", "namespaces", ""),
    access("delete", COORDINATION, "leases", TEAM),
    access("deletecollection", COORDINATION, "leases", TEAM),
    access("patch", COORDINATION, "leases", TEAM),
    access("create", COORDINATION, "leasecandidates", TEAM),
    access("deletecollection", COORDINATION, "leasecandidates", TEAM),
    access("list", "events.k8s.io", "events", TEAM),
    // Its Recorder writes events.k8s.io/v1 Events only.
    access("create", "", "events", TEAM),
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

/// A dedicated control plane and an admin client, with kube-apiserver's own election controller
/// held passive (it would elect OldestEmulationVersion Leases too, beside Conclave); `None` after
/// a SKIP line.
async fn plane_with_builtin_held() -> Option<(ControlPlane, Client, BuiltinControllerHold)> {
    let plane = ControlPlane::start().await.expect("control plane")?;
    let admin = plane.client().await.expect("admin client");
    let hold = plane
        .hold_builtin_controller_lease()
        .await
        .expect("keeping the built-in election controller passive");
    Some((plane, admin, hold))
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

    // Pods: read everywhere (pod liveness), never written.
    Api::<Pod>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect("listing Pods cluster-wide as the ServiceAccount");
    assert!(is_forbidden(
        Api::<Pod>::namespaced(sa.clone(), &ns)
            .delete("any", &DeleteParams::default())
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

/// GET `path` from `127.0.0.1:port` over plain HTTP/1.0; the body, if the answer is 200.
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One `conclave run` process acting with a ServiceAccount kubeconfig.
struct Replica {
    identity: String,
    process: std::sync::Mutex<ManagedProcess>,
    port: u16,
    log: PathBuf,
}

impl Replica {
    fn start(
        plane: &ControlPlane,
        conclave: &Path,
        kubeconfig: &Path,
        identity: &str,
        extra: &[&str],
    ) -> Self {
        let port = free_port();
        let log = plane.dir().join(format!("{identity}.log"));
        let mut args: Vec<String> = [
            "run",
            "--kubeconfig",
            &kubeconfig.to_string_lossy(),
            "--identity",
            identity,
            "--controller-namespace",
            RELEASE_NAMESPACE,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--log-format=text",
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::spawn(identity, conclave, &args, port, log)
    }

    /// Starts `program args` as the replica `identity` serving its probes on `port`.
    fn spawn(identity: &str, program: &Path, args: &[String], port: u16, log: PathBuf) -> Self {
        let process = ManagedProcess::spawn(identity, program, args, &log)
            .unwrap_or_else(|e| panic!("starting {identity}: {e}"));
        Self {
            identity: identity.to_owned(),
            process: std::sync::Mutex::new(process),
            port,
            log,
        }
    }

    fn tail(&self) -> String {
        format!(
            "--- {} log\n{}",
            self.identity,
            self.process.lock().expect("process lock").log_tail(6000)
        )
    }

    fn assert_running(&self) {
        let exited = self.process.lock().expect("process lock").exit_status();
        if let Some(status) = exited {
            panic!("{} exited with {status}:\n{}", self.identity, self.tail());
        }
    }

    /// Nothing it tried was refused: the RBAC covers everything it does.
    fn assert_never_forbidden(&self) {
        let text = std::fs::read_to_string(&self.log).expect("reading a conclave log");
        assert!(
            !text.to_lowercase().contains("forbidden"),
            "the API server refused {} something:\n{text}",
            self.identity
        );
    }

    fn stop(&self) {
        self.process.lock().expect("process lock").terminate();
    }
}

fn tails(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .map(|r| r.tail())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Registers candidates `(name, emulation version)` for `lease` that answer pings.
async fn register(
    admin: &Client,
    ns: &str,
    lease: &str,
    candidates: &[(&str, &str)],
) -> Vec<CandidateResponder> {
    let mut responders = Vec::new();
    for (name, emulation) in candidates {
        let candidate = lease_candidate(
            ns,
            name,
            lease,
            "1.37.2",
            Some(emulation),
            "OldestEmulationVersion",
        );
        responders.push(
            CandidateResponder::register(admin.clone(), candidate)
                .await
                .expect("registering a candidate"),
        );
    }
    responders
}

/// Waits until the Lease `ns/lease` has a holder, failing early if a replica exits.
async fn elected_holder(admin: &Client, ns: &str, lease: &str, replicas: &[&Replica]) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    let lease = wait_for("conclave to elect a holder", ELECTION_TIMEOUT, || async {
        replicas.iter().for_each(|r| r.assert_running());
        Ok(leases
            .get_opt(lease)
            .await?
            .filter(|l| l.spec.as_ref().is_some_and(|s| s.holder_identity.is_some())))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tails(replicas)));
    let spec = lease.spec.expect("spec");
    assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
    spec.holder_identity.expect("a holder")
}

/// The controller, running as the chart's ServiceAccount with nothing but the chart's RBAC (a
/// TokenRequest token in its kubeconfig), two replicas as the chart deploys it: one takes the HA
/// Lease, it elects the best candidate of a Lease, records an Event, pre-empts the holder when a
/// better candidate arrives, serves its probes and metrics, and is never refused by the API
/// server on the way.
#[tokio::test(flavor = "multi_thread")]
async fn controller_elects_with_only_the_chart_rbac() {
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(conclave) = conclave_deploy_tests::locate_conclave() else {
        return;
    };
    let Some((plane, admin, _hold)) = plane_with_builtin_held().await else {
        return;
    };
    let sa_kubeconfig = install_and_log_in(&plane, &kubectl_bin).await;

    let ns = plane.namespace("elect").await.expect("namespace");
    let lease_name = "component";
    let mut responders =
        register(&admin, &ns, lease_name, &[("a", "1.36.0"), ("b", "1.37.0")]).await;

    let first = Replica::start(
        &plane,
        &conclave,
        &sa_kubeconfig,
        "conclave-0",
        &["--mode=all"],
    );
    let second = Replica::start(
        &plane,
        &conclave,
        &sa_kubeconfig,
        "conclave-1",
        &["--mode=all"],
    );
    let replicas = [&first, &second];
    let holder = elected_holder(&admin, &ns, lease_name, &replicas).await;
    assert_eq!(holder, "a", "the oldest emulation version wins");

    // One replica leads through its own HA Lease in the release namespace.
    let own = Api::<Lease>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(HA_LEASE)
        .await
        .expect("the controller's own Lease");
    let active = own.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(
        replicas.iter().any(|r| r.identity == active),
        "HA Lease holder {active:?}"
    );

    // A better candidate (older emulation version) arrives: the holder is pre-empted.
    responders.extend(register(&admin, &ns, lease_name, &[("c", "1.35.0")]).await);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    wait_for("conclave to pre-empt a for c", ELECTION_TIMEOUT, || async {
        let lease = leases.get(lease_name).await?;
        Ok(lease
            .spec
            .and_then(|s| s.preferred_holder)
            .filter(|p| p == "c"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tails(&replicas)));

    // Its Events reached the API (events.k8s.io create/patch).
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    wait_for("an Event about the election", ELECTION_TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(lease_name)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tails(&replicas)));

    // Both replicas serve probes (the follower's caches are warm, so it is ready too).
    for replica in replicas {
        assert!(
            http_get(replica.port, "/healthz").await.is_some(),
            "{} /healthz",
            replica.identity
        );
        wait_for("the replica to be ready", ELECTION_TIMEOUT, || async {
            Ok(http_get(replica.port, "/readyz").await)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replica.tail()));
    }

    // Metrics of the active replica.
    let leader = replicas
        .iter()
        .find(|r| r.identity == active)
        .expect("the active replica");
    let metrics = http_get(leader.port, "/metrics")
        .await
        .expect("GET /metrics");
    assert!(metrics.contains("conclave_elections_total"), "{metrics}");
    assert!(metrics.contains("conclave_active 1"), "{metrics}");
    // Every metric the Grafana dashboard queries is one the controller exports.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(conclave_deploy_tests::dashboard_path()).expect("dashboard"),
    )
    .expect("dashboard JSON");
    // A labelled family without samples yet (e.g. plugin errors) is not printed at all, so such
    // a name must at least be registered by the controller's metrics module.
    let registered = std::fs::read_to_string(
        conclave_deploy_tests::repo_root().join("host/controller/src/metrics.rs"),
    )
    .expect("reading host/controller/src/metrics.rs");
    for family in conclave_deploy_tests::dashboard_metric_families(&dashboard) {
        let exported = metrics.contains(&format!("# TYPE {family} "));
        let short = family.trim_start_matches("conclave_");
        assert!(
            exported || registered.contains(&format!("\"{short}\"")),
            "the dashboard queries {family}, which the controller does not export:\n{metrics}"
        );
    }

    for replica in replicas {
        replica.assert_never_forbidden();
        replica.stop();
    }
    drop(responders);
}

/// With `controller.watchNamespaces`, the chart grants Roles in those namespaces instead of a
/// ClusterRole; the controller, watching only them, still elects, and may not read Leases
/// anywhere else.
#[tokio::test(flavor = "multi_thread")]
async fn controller_elects_with_namespaced_chart_rbac() {
    let Some(helm) = conclave_deploy_tests::locate_helm().expect("locating helm") else {
        return;
    };
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(conclave) = conclave_deploy_tests::locate_conclave() else {
        return;
    };
    let Some((plane, admin, _hold)) = plane_with_builtin_held().await else {
        return;
    };
    let ns = plane.namespace("team").await.expect("namespace");
    let rendered = conclave_deploy_tests::helm_template(
        &helm,
        &[
            "--set",
            "namespace.create=true",
            "--set",
            "controller.mode=all",
            "--set-string",
            &format!("controller.watchNamespaces[0]={ns}"),
        ],
    )
    .expect("helm template");
    rendered.assert_success();
    kubectl(
        &kubectl_bin,
        plane.kubeconfig_path(),
        &["apply", "-f", "-"],
        Some(&rendered.stdout),
    )
    .assert_success();
    let sa_kubeconfig = plane.dir().join("conclave-sa.kubeconfig");
    service_account_kubeconfig(&plane, RELEASE_NAMESPACE, FULL_NAME, &sa_kubeconfig)
        .await
        .expect("minting a ServiceAccount token");
    let sa = client_from_kubeconfig(&sa_kubeconfig)
        .await
        .expect("ServiceAccount client");
    assert!(!may(&sa, &access("list", COORDINATION, "leases", "")).await);
    assert!(!may(&sa, &access("list", COORDINATION, "leases", "default")).await);

    let _responders = register(
        &admin,
        &ns,
        "component",
        &[("a", "1.37.0"), ("b", "1.36.0")],
    )
    .await;
    let replica = Replica::start(
        &plane,
        &conclave,
        &sa_kubeconfig,
        "conclave-0",
        &["--mode=all", "--namespace", &ns],
    );
    let holder = elected_holder(&admin, &ns, "component", &[&replica]).await;
    assert_eq!(holder, "b", "the oldest emulation version wins");
    replica.assert_never_forbidden();
    replica.stop();
}

/// The chart's other shapes are valid on the server too: plugins from a digest-pinned image
/// volume (`volumes[].image`, which an API server without the ImageVolume feature would drop),
/// plugins from a ConfigMap, and namespaced RBAC (`controller.watchNamespaces`).
#[tokio::test(flavor = "multi_thread")]
async fn chart_variants_pass_kubectl_apply_dry_run_server() {
    let Some(helm) = conclave_deploy_tests::locate_helm().expect("locating helm") else {
        return;
    };
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let admin = plane.kubeconfig_path();
    let team = plane.namespace("team").await.expect("namespace");
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    // A tiny "component" for the ConfigMap and its SHA-256 (`base64 -d | sha256sum`); the chart
    // checks the pin, the server sees only bytes.
    let wasm_b64 = "AGFzbQ0AAQA=";
    let wasm_sha256 = "24eaf3439a60c96764c4f2c92a0a81b52bd4fe5d5b91f090184a0f6486b1bf29";
    let variants: Vec<(&str, Vec<String>)> = vec![
        (
            "image volume",
            vec![
                "plugins.source=image".into(),
                "plugins.image.reference=registry.example/conclave-plugins".into(),
                format!("plugins.image.digest={digest}"),
            ],
        ),
        (
            "ConfigMap",
            vec![
                "plugins.source=configMap".into(),
                "plugins.configMap.items[0].name=sticky".into(),
                format!("plugins.configMap.items[0].wasm={wasm_b64}"),
                format!("plugins.configMap.items[0].sha256={wasm_sha256}"),
            ],
        ),
        (
            "namespaced RBAC",
            vec![format!("controller.watchNamespaces[0]={team}")],
        ),
    ];
    let mut namespace_created = false;
    for (label, sets) in variants {
        let mut args = vec!["--set".to_owned(), "namespace.create=true".to_owned()];
        for set in sets {
            args.push("--set-string".into());
            args.push(set);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let rendered = conclave_deploy_tests::helm_template(&helm, &args).expect("helm template");
        rendered.assert_success();
        if !namespace_created {
            let namespace = documents(&rendered.stdout)
                .into_iter()
                .find(|d| kind_of(d) == Some("Namespace"))
                .expect("the Namespace");
            kubectl(&kubectl_bin, admin, &["apply", "-f", "-"], Some(&namespace)).assert_success();
            namespace_created = true;
        }
        let dry_run = kubectl(
            &kubectl_bin,
            admin,
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(&rendered.stdout),
        );
        dry_run.assert_success();
        assert!(
            !dry_run.stderr.contains("Warning"),
            "{label}: the server warned:\n{}",
            dry_run.stderr
        );
        let answer: serde_json::Value =
            serde_json::from_str(&dry_run.stdout).expect("kubectl -o json prints JSON");
        let items = answer["items"].as_array().expect("a List");
        let deployment = items
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("the Deployment");
        let volumes = deployment["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes");
        let plugins = volumes.iter().find(|v| v["name"] == "plugins");
        match label {
            "image volume" => {
                let plugins = plugins.expect("a plugins volume");
                assert_eq!(
                    plugins["image"]["reference"],
                    format!("registry.example/conclave-plugins@{digest}"),
                    "the server kept the image volume: {plugins}"
                );
            }
            "ConfigMap" => {
                let plugins = plugins.expect("a plugins volume");
                assert_eq!(
                    plugins["configMap"]["name"], "conclave-plugins",
                    "{plugins}"
                );
                assert!(items.iter().any(|o| o["kind"] == "ConfigMap"));
            }
            _ => {
                assert!(plugins.is_none());
                // StrategyPlugins are cluster-scoped: their ClusterRole is the only one.
                assert!(
                    !items.iter().any(|o| o["kind"] == "ClusterRole"
                        && o["metadata"]["name"] != "conclave-strategyplugins"),
                    "namespaced RBAC has no ClusterRole on Leases"
                );
                assert!(
                    items
                        .iter()
                        .any(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == team.as_str()),
                    "a Role in {team}"
                );
            }
        }
    }
}

/// The chart's pod, run from the image the way a kubelet would run it, with podman: the
/// Deployment as the API server stored it from deploy/manifests.yaml supplies the arguments,
/// environment, user, read-only root, capabilities and emptyDirs (tmpfs mounts); the
/// ServiceAccount token, CA and namespace are mounted read-only where in-cluster clients look for
/// them, and `KUBERNETES_SERVICE_HOST`/`_PORT` point at the API server, reached over the host's
/// network. No kubeconfig, no flag added but `--mode=all` (the built-in controller is held
/// passive, as with `controller.mode=all`) and a free metrics port. The container's process runs
/// as uid 65532, takes its HA Lease under its pod name, elects, serves its probes, and is never
/// refused anything.
#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_the_chart_pod_in_cluster() {
    use conclave_deploy_tests::image::{SERVICE_ACCOUNT_DIR, locate_image};
    let Some(image) = locate_image().expect("locating the image") else {
        return;
    };
    let Some(kubectl_bin) = locate_kubectl().expect("locating kubectl") else {
        return;
    };
    let Some((plane, admin, _hold)) = plane_with_builtin_held().await else {
        return;
    };
    install_and_log_in(&plane, &kubectl_bin).await;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(FULL_NAME)
        .await
        .expect("the chart's Deployment");
    let pod = deployment
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec");
    let container = pod.containers.first().expect("a container").clone();
    let pod_name = format!("{FULL_NAME}-6f7c9d4b8-x2k4q");

    // The kubelet's projected ServiceAccount volume, readable by the pod's user.
    let account = tempfile::tempdir().expect("temp dir");
    let token = conclave_deploy_tests::service_account_token(&plane, RELEASE_NAMESPACE, FULL_NAME)
        .await
        .expect("minting a ServiceAccount token");
    for (file, content) in [
        ("token", token),
        (
            "ca.crt",
            std::fs::read_to_string(plane.dir().join("ca.crt")).expect("the cluster CA"),
        ),
        ("namespace", RELEASE_NAMESPACE.to_owned()),
    ] {
        let path = account.path().join(file);
        std::fs::write(&path, content).expect("writing the token volume");
        set_mode(&path, 0o644);
    }
    set_mode(account.path(), 0o755);
    assert_ne!(
        pod.automount_service_account_token,
        Some(false),
        "the controller authenticates with its mounted token"
    );

    let pod_security = pod.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_default();
    let uid = security.run_as_user.or(pod_security.run_as_user);
    let gid = security.run_as_group.or(pod_security.run_as_group);
    let (Some(uid), Some(gid)) = (uid, gid) else {
        panic!("the chart sets runAsUser and runAsGroup: {pod_security:?} {security:?}");
    };
    let server = url_port(plane.server_url());
    let mut options = vec![
        "--network=host".to_owned(),
        format!("--user={uid}:{gid}"),
        "--env=KUBERNETES_SERVICE_HOST=127.0.0.1".to_owned(),
        format!("--env=KUBERNETES_SERVICE_PORT={server}"),
        format!(
            "--volume={}:{SERVICE_ACCOUNT_DIR}:ro",
            account.path().display()
        ),
    ];
    if security.read_only_root_filesystem == Some(true) {
        // Only the pod's volumes are writable, not the tmpfs podman adds by default.
        options.extend([
            "--read-only".to_owned(),
            "--read-only-tmpfs=false".to_owned(),
        ]);
    }
    if security.allow_privilege_escalation == Some(false) {
        options.push("--security-opt=no-new-privileges".to_owned());
    }
    for dropped in security
        .capabilities
        .and_then(|c| c.drop)
        .unwrap_or_default()
    {
        options.push(format!("--cap-drop={}", dropped.to_lowercase()));
    }
    for var in container.env.clone().unwrap_or_default() {
        let value = match (var.value, var.value_from) {
            (Some(value), _) => value,
            (None, Some(source)) => match source.field_ref.map(|f| f.field_path).as_deref() {
                Some("metadata.name") => pod_name.clone(),
                Some("metadata.namespace") => RELEASE_NAMESPACE.to_owned(),
                other => panic!("env {} from an unmodelled source {other:?}", var.name),
            },
            (None, None) => String::new(),
        };
        options.push(format!("--env={}={value}", var.name));
    }
    let volumes = pod.volumes.clone().unwrap_or_default();
    for mount in container.volume_mounts.clone().unwrap_or_default() {
        let volume = volumes
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("volume {} is not declared", mount.name));
        assert!(
            volume.empty_dir.is_some(),
            "volume {} is not an emptyDir; model it here before relying on it",
            mount.name
        );
        // An emptyDir: empty, writable by the pod's user, not noexec.
        options.push(format!(
            "--tmpfs={}:rw,exec,nosuid,nodev,mode=0777",
            mount.mount_path
        ));
    }

    assert_eq!(
        container.command, None,
        "the chart runs the image's ENTRYPOINT"
    );
    let port = free_port();
    let args: Vec<String> = container
        .args
        .clone()
        .expect("the chart passes arguments")
        .into_iter()
        .map(|arg| match arg.as_str() {
            "--mode=auto" => "--mode=all".to_owned(),
            a if a.starts_with("--metrics-addr=") => format!("--metrics-addr=127.0.0.1:{port}"),
            _ => arg,
        })
        .collect();
    assert!(
        args.iter()
            .any(|a| a.starts_with("--metrics-addr=127.0.0.1")),
        "the chart sets --metrics-addr: {args:?}"
    );
    let running = image.container("pod");
    let line = image.run_command_line(&running, &options, &args);
    let replica = Replica::spawn(
        &pod_name,
        Path::new(&line[0]),
        &line[1..],
        port,
        plane.dir().join("image-pod.log"),
    );

    // It runs as the pod's user, not as root.
    let process_uid = wait_for(
        "the pod's process to run as its user",
        ELECTION_TIMEOUT,
        || async {
            replica.assert_running();
            let Some(pid) = running.pid() else {
                return Ok(None);
            };
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                .map(str::to_owned);
            Ok(uid.filter(|_| exe.ends_with("conclave")))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replica.tail()));
    assert_eq!(process_uid, uid.to_string());

    // Its own HA Lease, under its pod name and a per-process suffix, in the pod's namespace.
    let own: Api<Lease> = Api::namespaced(admin.clone(), RELEASE_NAMESPACE);
    wait_for("the pod to take its HA Lease", ELECTION_TIMEOUT, || async {
        replica.assert_running();
        Ok(own
            .get_opt(HA_LEASE)
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|holder| {
                holder
                    .strip_prefix(pod_name.as_str())
                    .is_some_and(|suffix| suffix.starts_with('-') && suffix.len() == 9)
            }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replica.tail()));

    let ns = plane.namespace("image").await.expect("namespace");
    let responders = register(
        &admin,
        &ns,
        "component",
        &[("a", "1.36.0"), ("b", "1.37.0")],
    )
    .await;
    let holder = elected_holder(&admin, &ns, "component", &[&replica]).await;
    assert_eq!(holder, "a", "the oldest emulation version wins");
    wait_for("the pod to be ready", ELECTION_TIMEOUT, || async {
        Ok(http_get(port, "/readyz").await)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replica.tail()));
    replica.assert_never_forbidden();
    replica.stop();
    drop(responders);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// The port of an `https://host:port` URL.
fn url_port(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}
