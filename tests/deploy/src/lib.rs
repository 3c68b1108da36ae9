//! conclave-deploy-tests: helpers for checking `deploy/` against the real thing.
//!
//! The tests in `tests/` re-render the Helm chart `deploy/helm/conclave` with a real `helm`
//! (built from the Go module proxy by `.ci/prepare-helm.sh`) and compare it with the committed
//! `deploy/manifests.yaml`; apply the manifests to a real kube-apiserver (from
//! `conclave-testkit`) with a real `kubectl`; and act as the chart's ServiceAccount through a
//! token minted by the TokenRequest API, so RBAC is judged by the API server itself.
//!
//! Missing tools make a test print `SKIP` and return, unless `CONCLAVE_REQUIRE_KUBE=1` (set by
//! CI), which turns a missing tool into a failure.
#![forbid(unsafe_code)]

pub mod image;
pub mod soak;
pub mod workloads;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use conclave_testkit::ControlPlane;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Environment variable naming the helm binary to use (overrides `target/tools/helm`).
pub const HELM_ENV: &str = "HELM";
/// Environment variable naming the kubectl binary to use (overrides the search in [`kubectl`]).
pub const KUBECTL_ENV: &str = "KUBECTL";
/// The namespace `deploy/manifests.yaml` installs into.
pub const RELEASE_NAMESPACE: &str = "conclave-system";
/// The chart's full name for release `conclave`: the name of the ServiceAccount, ClusterRole,
/// Deployment and most other objects in `deploy/manifests.yaml`.
pub const FULL_NAME: &str = "conclave";
/// The controller's own high-availability Lease in [`RELEASE_NAMESPACE`].
pub const HA_LEASE: &str = "conclave-controller";

/// kubectl binaries tried in order when [`KUBECTL_ENV`] is unset. The machine's `/usr/bin/kubectl`
/// is the Cloud SDK dispatcher (v1.32.4-dispatcher), which picks a client by the server's version
/// at run time; both it and the pinned 1.33 client work against the v1.37.2 test server, and the
/// pinned client comes first so every run uses the same, newest installed kubectl. It speaks
/// every API the manifests use (apps/v1, policy/v1, networking.k8s.io/v1, rbac/v1, core/v1).
const KUBECTL_CANDIDATES: &[&str] = &[
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
    "/usr/local/bin/kubectl",
    "/usr/bin/kubectl",
];

/// Everything that can go wrong in these checks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tool is missing while `CONCLAVE_REQUIRE_KUBE` demands it.
    #[error("{tool} not found ({hint}); CONCLAVE_REQUIRE_KUBE is set, so this is a failure")]
    ToolMissing {
        /// The tool.
        tool: &'static str,
        /// How to get it.
        hint: &'static str,
    },
    /// A command could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The control-plane harness failed.
    #[error(transparent)]
    Testkit(#[from] conclave_testkit::Error),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be loaded.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The API server answered something these checks cannot use.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

/// What a finished command printed and how it exited.
#[derive(Debug)]
pub struct CommandOutput {
    /// The command line, for messages.
    pub command: String,
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl CommandOutput {
    /// Whether the command exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Panics with everything the command printed unless it exited 0: for test assertions.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.success(),
            "`{}` exited with {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Whether CI demands every tool (`CONCLAVE_REQUIRE_KUBE=1`): a missing tool fails, not skips.
pub fn tools_required() -> bool {
    std::env::var(conclave_testkit::REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The repository root (this crate lives in `tests/deploy`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The committed rendering of the chart.
pub fn manifests_path() -> PathBuf {
    repo_root().join("deploy/manifests.yaml")
}

/// The chart directory.
pub fn chart_path() -> PathBuf {
    repo_root().join("deploy/helm/conclave")
}

/// Finds helm: `$HELM`, else `target/tools/helm` (from `.ci/prepare-helm.sh`).
///
/// Returns `Ok(None)` after printing a SKIP line when there is none, or an error when
/// [`tools_required`].
pub fn locate_helm() -> Result<Option<PathBuf>, Error> {
    let candidate = match std::env::var_os(HELM_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => repo_root().join("target/tools/helm"),
    };
    if is_executable(&candidate) {
        return Ok(Some(candidate));
    }
    let hint = "build it with .ci/prepare-helm.sh or set HELM";
    if tools_required() {
        return Err(Error::ToolMissing { tool: "helm", hint });
    }
    eprintln!("SKIP: helm not found at {} ({hint})", candidate.display());
    Ok(None)
}

/// The `conclave` binary built by `cargo build -p conclave` (.ci/test-all.sh builds it before
/// the workspace tests), or `$CONCLAVE_BIN`.
pub fn locate_conclave() -> Option<PathBuf> {
    let path = std::env::var_os("CONCLAVE_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/debug/conclave"));
    if path.is_file() {
        return Some(path);
    }
    assert!(
        !tools_required(),
        "{} not found: run `cargo build -p conclave` first (CONCLAVE_REQUIRE_KUBE is set)",
        path.display()
    );
    eprintln!(
        "SKIP: {} not found (cargo build -p conclave)",
        path.display()
    );
    None
}

/// Finds a kubectl that works with the test control plane: `$KUBECTL`, else the first of
/// a fixed list of installed clients (see the crate source for why the dispatcher is last).
///
/// Returns `Ok(None)` after printing a SKIP line when there is none, or an error when
/// [`tools_required`].
pub fn locate_kubectl() -> Result<Option<PathBuf>, Error> {
    if let Some(path) = std::env::var_os(KUBECTL_ENV).filter(|p| !p.is_empty()) {
        return Ok(Some(PathBuf::from(path)));
    }
    if let Some(found) = KUBECTL_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| is_executable(p))
    {
        return Ok(Some(found));
    }
    let hint = "install kubectl or set KUBECTL";
    if tools_required() {
        return Err(Error::ToolMissing {
            tool: "kubectl",
            hint,
        });
    }
    eprintln!("SKIP: no kubectl found ({hint})");
    Ok(None)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program args`, feeding `stdin` if given, and returns what it printed. A non-zero exit
/// is not an error here: callers assert on [`CommandOutput`].
pub fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<CommandOutput, Error> {
    run_with_env(program, args, stdin, &[])
}

/// [`run`] with extra environment variables.
pub fn run_with_env(
    program: &Path,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &Path)],
) -> Result<CommandOutput, Error> {
    let spawn_error = |source| Error::Spawn {
        program: program.to_owned(),
        source,
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(spawn_error)?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin was piped");
        pipe.write_all(input.as_bytes()).map_err(spawn_error)?;
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    Ok(CommandOutput {
        command: format!("{} {}", program.display(), args.join(" ")),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Renders the chart exactly as `deploy/render.sh` writes `deploy/manifests.yaml`.
pub fn render_manifests(helm: &Path) -> Result<CommandOutput, Error> {
    let script = repo_root().join("deploy/render.sh");
    run_with_env(
        Path::new("bash"),
        &[&script.to_string_lossy(), "--stdout"],
        None,
        &[(HELM_ENV, helm)],
    )
}

/// Runs `helm template conclave deploy/helm/conclave --namespace conclave-system
/// --kube-version 1.33.0` with extra
/// arguments (e.g. `--set` flags), for checks of the chart's values handling.
pub fn helm_template(helm: &Path, extra: &[&str]) -> Result<CommandOutput, Error> {
    let chart = chart_path();
    let chart = chart.to_string_lossy();
    let mut args = vec![
        "template",
        FULL_NAME,
        &chart,
        "--namespace",
        RELEASE_NAMESPACE,
        // helm template assumes Kubernetes v1.20 without a cluster; the chart needs 1.33+.
        "--kube-version",
        "1.33.0",
    ];
    args.extend_from_slice(extra);
    run(helm, &args, None)
}

/// Splits a multi-document YAML stream into its non-empty documents.
pub fn documents(yaml: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in yaml.lines() {
        if line.trim_end() == "---" {
            docs.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs.push(current);
    docs.into_iter()
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .collect()
}

/// The top-level `kind:` of a YAML document, if any.
pub fn kind_of(document: &str) -> Option<&str> {
    document
        .lines()
        .find_map(|l| l.strip_prefix("kind:"))
        .map(str::trim)
}

/// Mints a token for ServiceAccount `namespace/name` with the TokenRequest API, valid one hour:
/// what a kubelet projects into a pod at `/var/run/secrets/kubernetes.io/serviceaccount/token`.
pub async fn service_account_token(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
) -> Result<String, Error> {
    let accounts: Api<ServiceAccount> = Api::namespaced(plane.client().await?, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Unexpected(format!("TokenRequest for {namespace}/{name}: no token")))
}

/// Writes a kubeconfig at `path` that authenticates with a [`service_account_token`] alone, so
/// whoever uses the file (kube-rs, kubectl, the controller) has exactly that ServiceAccount's
/// permissions.
pub async fn service_account_kubeconfig(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
    path: &Path,
) -> Result<PathBuf, Error> {
    let token = service_account_token(plane, namespace, name).await?;
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testkit", "cluster": {
            "server": plane.server_url(),
            "certificate-authority": plane.dir().join("ca.crt"),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "testkit", "user": user}}],
        "current-context": "sa",
    });
    let text = serde_json::to_string_pretty(&config).expect("a JSON value serialises");
    std::fs::write(path, text).map_err(|source| Error::Io {
        context: format!("writing {}", path.display()),
        source,
    })?;
    Ok(path.to_owned())
}

/// A kube-rs client that authenticates as the kubeconfig at `path` says (and nothing else).
///
/// Call [`ControlPlane::client`] once before, so the process has a TLS crypto provider.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, Error> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The Grafana dashboard for the controller's metrics.
pub fn dashboard_path() -> PathBuf {
    repo_root().join("deploy/grafana/conclave-dashboard.json")
}

/// The metric families (`conclave_...`, without the `_total`, `_bucket`, `_sum` or `_count`
/// suffixes a Prometheus exposition adds) that the dashboard's queries use.
pub fn dashboard_metric_families(
    dashboard: &serde_json::Value,
) -> std::collections::BTreeSet<String> {
    let mut families = std::collections::BTreeSet::new();
    let mut exprs = Vec::new();
    collect_exprs(dashboard, &mut exprs);
    for expr in exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("conclave_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            families.insert(family.to_owned());
            rest = &tail[end..];
        }
    }
    families
}

fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match v {
                    serde_json::Value::String(s) if key == "expr" => out.push(s.clone()),
                    other => collect_exprs(other, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}
