//! The example workloads of `deploy/examples/` on a real node, shared by the node tests and the
//! node failover bench: their manifests with a local image, rollout waits, a look at an
//! election, and images copied from podman into the node.

use std::path::Path;
use std::time::{Duration, Instant};

use conclave_testkit::{ControlPlane, KUBERNETES_VERSION, Node, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::image::Image;
use crate::{Error, FULL_NAME, RELEASE_NAMESPACE, chart_path, repo_root, run};

/// The namespace of `deploy/examples/component.yaml`.
pub const COMPONENT_NAMESPACE: &str = "conclave-demo";
/// Its Deployment, and the Lease its replicas elect.
pub const COMPONENT: &str = "example-component";
/// The namespace of `deploy/examples/kube-scheduler.yaml`.
pub const SCHEDULER_NAMESPACE: &str = "kube-system";
/// Its Deployment (and ServiceAccount, ConfigMap, bindings).
pub const SCHEDULER: &str = "conclave-kube-scheduler";
/// The Lease its replicas elect (kube-scheduler's own).
pub const SCHEDULER_LEASE: &str = "kube-scheduler";
/// The scheduling profile it serves (`spec.schedulerName` of the Pods it schedules).
pub const SCHEDULER_PROFILE: &str = "conclave-example-scheduler";

/// One look at an election: its Lease and candidates, when the look was taken.
#[derive(Clone, Debug)]
pub struct ElectionLook {
    /// When the look started, on the monotonic clock.
    pub at: Instant,
    /// The same moment on the wall clock, which the API server's times share (one machine).
    pub wall: jiff::Timestamp,
    /// The holder, if one holds.
    pub holder: Option<String>,
    /// `spec.preferredHolder`, when a controller asked the holder to hand over.
    pub preferred: Option<String>,
    /// `spec.strategy`, when the Lease names one.
    pub strategy: Option<String>,
    /// The holder's last renewal and its Lease duration, when it holds.
    pub renewed: Option<(jiff::Timestamp, i64)>,
    /// Each candidate's name and emulation version.
    pub candidates: Vec<(String, String)>,
}

/// Looks at the election of Lease `namespace/lease`: its holder and its candidates.
pub async fn look_at_election(
    client: &Client,
    namespace: &str,
    lease: &str,
) -> Result<ElectionLook, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), namespace);
    let at = Instant::now();
    let wall = jiff::Timestamp::now();
    let spec = leases
        .get_opt(lease)
        .await?
        .and_then(|l| l.spec)
        .unwrap_or_default();
    let listed = candidates.list(&ListParams::default()).await?;
    let candidates = listed
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| {
            let spec = c.spec?;
            (spec.lease_name == lease).then(|| {
                (
                    c.metadata.name.unwrap_or_default(),
                    spec.emulation_version.unwrap_or_default(),
                )
            })
        })
        .collect();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    Ok(ElectionLook {
        at,
        wall,
        preferred: spec.preferred_holder.filter(|p| !p.is_empty()),
        strategy: spec.strategy,
        renewed: holder.as_ref().and(
            spec.renew_time
                .map(|r| (r.0, i64::from(spec.lease_duration_seconds.unwrap_or(15)))),
        ),
        holder,
        candidates,
    })
}

/// Whether `identity` is one a process in Pod `pod` elects under: the pod's name, possibly with
/// a per-process suffix (`-<hex>`, conclave-candidate) or a UUID (`_<uuid>`, client-go).
pub fn is_identity_of(identity: &str, pod: &str) -> bool {
    identity == pod
        || identity
            .strip_prefix(pod)
            .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('_'))
}

/// The `helm install` flags that run the chart on the test's one node with `image` (a
/// `REPOSITORY:TAG` imported into the node, never pulled). The chart's defaults otherwise: it
/// takes over from kube-apiserver's built-in controller and elects every Lease.
pub fn one_node_chart_flags(image: &str) -> Result<Vec<String>, Error> {
    let (repository, tag) = image
        .rsplit_once(':')
        .ok_or_else(|| Error::Unexpected(format!("the image reference {image} has no tag")))?;
    Ok([
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        "image.pullPolicy=Never".into(),
        // One node: the default (hard) anti-affinity would leave the second replica Pending.
        "podAntiAffinity=soft".into(),
    ]
    .into_iter()
    .flat_map(|value| ["--set".to_owned(), value])
    .collect())
}

/// `helm install` of the chart on the one-node cluster of `plane` (release [`FULL_NAME`] in
/// [`RELEASE_NAMESPACE`]), running `image` with [`one_node_chart_flags`], then `values` (helm's
/// `--set`/`--set-string` arguments as given).
pub fn install_chart_on_one_node(
    helm: &Path,
    plane: &ControlPlane,
    image: &str,
    values: &[&str],
) -> Result<(), Error> {
    let kubeconfig = plane.kubeconfig_path().to_string_lossy().into_owned();
    let chart = chart_path().to_string_lossy().into_owned();
    let on_one_node = one_node_chart_flags(image)?;
    let mut install: Vec<&str> = vec![
        "install",
        FULL_NAME,
        &chart,
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
    ];
    install.extend(on_one_node.iter().map(String::as_str));
    install.extend(values);
    let out = run(helm, &install, None)?;
    if out.success() {
        Ok(())
    } else {
        Err(Error::Unexpected(format!(
            "{} failed: {}",
            out.command, out.stderr
        )))
    }
}

/// `deploy/examples/component.yaml` with `image` (imported into the node, never pulled).
pub fn component_manifest(image: &str) -> Result<String, Error> {
    let upstream = "image: ghcr.io/conclave-dev/conclave:0.1.0";
    local_manifest("deploy/examples/component.yaml", upstream, image)
}

/// `deploy/examples/kube-scheduler.yaml` with `image` (imported into the node, never pulled).
pub fn scheduler_manifest(image: &str) -> Result<String, Error> {
    let upstream = format!("image: registry.k8s.io/kube-scheduler:{KUBERNETES_VERSION}");
    local_manifest("deploy/examples/kube-scheduler.yaml", &upstream, image)
}

/// The example `path` with its `upstream` image line pointing at `image`, never pulled.
fn local_manifest(path: &str, upstream: &str, image: &str) -> Result<String, Error> {
    let manifest = std::fs::read_to_string(repo_root().join(path)).map_err(|source| Error::Io {
        context: format!("reading {path}"),
        source,
    })?;
    if !manifest.contains(upstream) {
        return Err(Error::Unexpected(format!(
            "{path} no longer says `{upstream}`"
        )));
    }
    Ok(manifest
        .replace(upstream, &format!("image: {image}"))
        .replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Never"))
}

/// Waits up to `timeout` until the Deployment `namespace/name` has rolled out: `replicas`
/// replicas, every one updated and Ready, no old one left.
pub async fn rolled_out(
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
) -> Result<(), Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_for(&format!("{namespace}/{name} rolled out"), timeout, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get(name).await?;
            let generation = d.metadata.generation;
            let status = d.status.unwrap_or_default();
            Ok((status.observed_generation == generation
                && status.updated_replicas == Some(replicas)
                && status.ready_replicas == Some(replicas)
                && status.replicas == Some(replicas))
            .then_some(()))
        }
    })
    .await?;
    Ok(())
}

/// Copies `reference` from `image`'s podman store into the node's containerd, as
/// `tests/kube/cluster.sh load` does.
pub fn load_image(image: &Image, node: &Node, reference: &str) -> Result<(), Error> {
    let archive = tempfile::NamedTempFile::new().map_err(|source| Error::Io {
        context: "creating an image archive".into(),
        source,
    })?;
    let archive_path = archive.path().to_string_lossy().into_owned();
    let saved = image.podman.run(&[
        "save",
        "-q",
        "--format",
        "docker-archive",
        "-o",
        &archive_path,
        reference,
    ])?;
    if !saved.success() {
        return Err(Error::Unexpected(format!(
            "podman save {reference}: {}",
            saved.stderr
        )));
    }
    node.import_image(Path::new(&archive_path))?;
    Ok(())
}

/// The field manager of `conclave run`'s writes (`conclave_controller::writer::FIELD_MANAGER`),
/// as `metadata.managedFields` names it.
pub const CONCLAVE_FIELD_MANAGER: &str = "conclave";

/// Who wrote `lease`'s current holder: the manager that owns `spec.holderIdentity` in its
/// `metadata.managedFields`, when a holder is set. A candidate's renewal leaves the field
/// unchanged and so its owner too: the owner is the controller that elected the holder (Conclave
/// or kube-apiserver's built-in controller).
pub fn holder_writer(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty())?;
    lease
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|entry| {
            entry
                .fields_v1
                .as_ref()
                .and_then(|fields| fields.0.pointer("/f:spec/f:holderIdentity"))
                .is_some()
        })
        .map(|entry| entry.manager.clone().unwrap_or_default())
}

/// Every Lease with `spec.strategy: OldestEmulationVersion` (the built-in controller's, when it
/// elects) and who wrote its holder ([`holder_writer`]), as `namespace/name` and manager.
pub async fn oldest_emulation_version_writers(
    client: &Client,
) -> Result<Vec<(String, Option<String>)>, kube::Error> {
    let leases: Api<Lease> = Api::all(client.clone());
    Ok(leases
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|lease| {
            lease.spec.as_ref().and_then(|s| s.strategy.as_deref())
                == Some("OldestEmulationVersion")
        })
        .map(|lease| {
            let name = format!(
                "{}/{}",
                lease.metadata.namespace.as_deref().unwrap_or_default(),
                lease.metadata.name.as_deref().unwrap_or_default()
            );
            (name, holder_writer(&lease))
        })
        .collect())
}

/// The Lease kube-apiservers elect the one that runs the built-in election controller through
/// (`kube-system/leader-election-controller`); the chart's take-over holds it.
pub const BUILTIN_CONTROLLER_LEASE: &str = "leader-election-controller";

/// The holder of [`BUILTIN_CONTROLLER_LEASE`] and when it acquired it, if one holds.
pub async fn builtin_controller_holder(
    client: &Client,
) -> Result<Option<(String, jiff::Timestamp)>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    Ok(leases
        .get_opt(BUILTIN_CONTROLLER_LEASE)
        .await?
        .and_then(|lease| lease.spec)
        .and_then(|spec| {
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            let acquired = spec.acquire_time.map(|t| t.0).unwrap_or_default();
            Some((holder, acquired))
        }))
}

/// Waits until a Conclave replica holds [`BUILTIN_CONTROLLER_LEASE`] (the chart's take-over,
/// identity `conclave/<namespace>/<replica>`) and returns its identity and acquire time.
pub async fn wait_taken_over(
    client: &Client,
    timeout: Duration,
) -> Result<(String, jiff::Timestamp), conclave_testkit::Error> {
    wait_for(
        "a Conclave replica holding the built-in's Lease",
        timeout,
        || async {
            Ok(builtin_controller_holder(client)
                .await?
                .filter(|(holder, _)| holder.starts_with("conclave/")))
        },
    )
    .await
}

/// One change of who holds an `OldestEmulationVersion` Lease or who wrote that holder.
#[derive(Clone, Debug)]
pub struct HolderWrite {
    /// When it was seen, on the wall clock.
    pub seen: jiff::Timestamp,
    /// The Lease, `namespace/name`.
    pub lease: String,
    /// The manager that owns `spec.holderIdentity` ([`holder_writer`]), `None` with no holder.
    pub writer: Option<String>,
}

/// Folds one look at [`oldest_emulation_version_writers`] into `log`: a [`HolderWrite`] for each
/// Lease whose writer changed since the last look (or that is new).
pub fn record_holder_writes(
    log: &mut Vec<HolderWrite>,
    seen: jiff::Timestamp,
    look: Vec<(String, Option<String>)>,
) {
    for (lease, writer) in look {
        let last = log.iter().rev().find(|w| w.lease == lease);
        if last.is_none_or(|w| w.writer != writer) {
            log.push(HolderWrite {
                seen,
                lease,
                writer,
            });
        }
    }
}
