//! A real Prometheus (Debian's `prometheus`, started by the testkit) scraping `conclave run` on
//! the real kube-apiserver while elections run: every query of
//! `deploy/grafana/conclave-dashboard.json` evaluates without error and returns series, and two
//! alerts of `deploy/prometheus/conclave-rules.yaml` fire in drills and resolve after: every
//! candidate of a Lease killed (ConclaveLeaseWithoutHolder) and a plugin that traps
//! (ConclavePluginErrors).

use conclave_candidate::{CandidateConfig, Elector, LeaseConfig};
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_testkit::fixture_plugin::{self, fixture_component};
use conclave_testkit::{
    CandidateResponder, ControlPlane, Prometheus, PrometheusConfig, lease_candidate,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;
use tokio::time::Instant;

/// Generous bound for every wait (never a timing assertion): a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(120);

/// The labels a Kubernetes scrape adds, which the dashboard's variables select on.
const NAMESPACE: &str = "conclave-system";
const POD: &str = "conclave-0";

/// The strategy the trapping fixture plugin implements.
const TRAP: &str = "test/trap";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    probe.local_addr().expect("addr").port()
}

/// The testkit's hand-written fixture plugin (`conclave_testkit::fixture_plugin`) for
/// strategy [`TRAP`] whose `elect` traps (`unreachable`), as `trap.wasm` in `dir`.
fn write_trapping_plugin(dir: &Path) {
    std::fs::write(
        dir.join("trap.wasm"),
        fixture_component(TRAP, fixture_plugin::TRAP),
    )
    .expect("writing trap.wasm");
}

/// The rules of `deploy/prometheus/conclave-rules.yaml` made fast enough for a test: every
/// `for:` becomes 5 s and every range (`[5m]`, `[15m]`, `[30m]`) 20 s, so an alert fires within
/// seconds of its condition and resolves within seconds of its end. The expressions are
/// otherwise the shipped ones.
fn fast_rules() -> String {
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/conclave-rules.yaml"))
        .expect("reading the rules");
    let mut fast = String::with_capacity(rules.len());
    for line in rules.lines() {
        let line = if let Some(at) = line.find("for: ") {
            format!("{}for: 5s", &line[..at])
        } else {
            ["[5m]", "[15m]", "[30m]"]
                .iter()
                .fold(line.to_owned(), |l, range| l.replace(range, "[20s]"))
        };
        fast.push_str(&line);
        fast.push('\n');
    }
    fast
}

/// Every query of the Grafana dashboard, with its variables as Grafana would fill them for this
/// scrape: `$namespace` the controller's namespace, `$pod` "All" (`.*`), `$__rate_interval` 20 s
/// (Grafana's is at least four scrape intervals).
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("deploy/grafana/conclave-dashboard.json"))
        .expect("reading the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or_default().to_owned();
                let expr = expr
                    .replace("$namespace", NAMESPACE)
                    .replace("$pod", ".*")
                    .replace("$__rate_interval", "20s");
                queries.push((title, expr));
            }
        }
    }
    queries
}

/// `conclave run` against the control plane, serving `/metrics` on `metrics`; killed on drop.
struct ControllerProcess {
    child: Child,
    log: PathBuf,
}

impl ControllerProcess {
    fn start(
        kubeconfig: &Path,
        namespace: &str,
        plugins: &Path,
        metrics: SocketAddr,
        dir: &Path,
    ) -> Self {
        let log = dir.join("controller.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_conclave"))
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--namespace", namespace, "--mode", "all"])
            .arg("--plugins")
            .arg(plugins)
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--identity", POD, "--ack-window", "2s"])
            .args([
                "--leader-lease-duration",
                "4s",
                "--leader-renew-deadline",
                "3s",
            ])
            .args(["--leader-retry-period", "500ms", "--pod-liveness", "off"])
            .env("NO_COLOR", "1")
            .stdout(file.try_clone().expect("clone log"))
            .stderr(file)
            .spawn()
            .expect("conclave run starts");
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An instance of a component: a coordinated elector (`conclave-candidate`) for Lease `lease`,
/// on a runtime of its own, so that [`Component::kill`] stops everything it runs at once, with
/// no release and no goodbye, as SIGKILL would.
struct Component {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Component {
    fn start(
        kubeconfig: &Path,
        namespace: &str,
        lease: &str,
        identity: &str,
        emulation: &str,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let kubeconfig = kubeconfig.to_owned();
        let mut lease = LeaseConfig::new(namespace, lease, identity);
        lease.lease_duration = Duration::from_secs(5);
        lease.renew_deadline = Duration::from_secs(4);
        lease.retry_period = Duration::from_millis(500);
        let candidate = CandidateConfig::new("1.31.0", emulation, OEV).with_pod(None);
        runtime.spawn(async move {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&kubeconfig).expect("reading the kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("a client configuration");
            let client = conclave_candidate::client(config).expect("a client");
            let elector = Elector::coordinated(client, lease, candidate).expect("an elector");
            let _ = elector
                .run(
                    |term: conclave_candidate::Term| async move { term.cancelled().await },
                    tokio_util::sync::CancellationToken::new(),
                )
                .await;
        });
        Self {
            runtime: Some(runtime),
        }
    }

    /// Stops every task of the instance at once: it neither renews the Lease nor answers pings.
    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` every 500 ms until it returns `Some`, for at most [`WAIT`]; panics with `what`
/// and `context()` otherwise.
async fn wait_until<T, F, Fut>(what: &str, context: impl Fn() -> String, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The alert `name`'s state (`pending`, `firing`), `None` if it is inactive.
async fn alert_state(prometheus: &Prometheus, name: &str) -> Option<String> {
    let alerts = prometheus.alerts().await.expect("/api/v1/alerts");
    alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == name)
        .and_then(|a| a["state"].as_str().map(str::to_owned))
}

async fn wait_alert(
    prometheus: &Prometheus,
    name: &str,
    firing: bool,
    context: impl Fn() -> String,
) {
    let started = Instant::now();
    wait_until(
        &format!("{name} {}", if firing { "firing" } else { "resolved" }),
        context,
        || async {
            let state = alert_state(prometheus, name).await;
            (if firing {
                state.as_deref() == Some("firing")
            } else {
                state.is_none()
            })
            .then_some(())
        },
    )
    .await;
    eprintln!(
        "{name} {} after {:.1?}",
        if firing { "fired" } else { "inactive" },
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_queries_and_alert_drills_on_a_real_prometheus() {
    if Prometheus::locate().expect("locating prometheus").is_none() {
        return;
    }
    let Some(plane) = ControlPlane::start().await.expect("control plane") else {
        return;
    };
    let admin = plane.client().await.expect("admin client");
    // kube-apiserver's own election controller would elect OldestEmulationVersion Leases too.
    let _hold = plane
        .hold_builtin_controller_lease()
        .await
        .expect("keeping the built-in election controller passive");
    let ns = plane.namespace("prom").await.expect("namespace");
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins dir");
    write_trapping_plugin(&plugins);
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, fast_rules()).expect("writing the fast rules");

    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let controller =
        ControllerProcess::start(plane.kubeconfig_path(), &ns, &plugins, metrics, dir.path());
    let prometheus = Prometheus::start(&PrometheusConfig {
        targets: vec![metrics.to_string()],
        target_labels: vec![
            ("namespace".into(), NAMESPACE.into()),
            ("pod".into(), POD.into()),
        ],
        scrape_interval: Duration::from_secs(1),
        evaluation_interval: Duration::from_secs(1),
        rule_files: vec![rules],
        ..PrometheusConfig::default()
    })
    .await
    .expect("prometheus starts")
    .expect("prometheus was located above");
    let context = || {
        format!(
            "controller log:\n{}\nprometheus log:\n{}",
            tail(&controller.log(), 4000),
            prometheus.log_tail(2000)
        )
    };
    wait_until("conclave_active 1 scraped", &context, || async {
        let data = prometheus.query("conclave_active == 1").await.ok()?;
        (!data["result"].as_array()?.is_empty()).then_some(())
    })
    .await;

    // The scenario: a component of two instances elected, then a better one joins and the
    // holder is pre-empted (OldestEmulationVersion prefers the older emulation version).
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let kubeconfig = plane.kubeconfig_path();
    let mut instances = vec![
        Component::start(kubeconfig, &ns, "component", "a", "1.31.0"),
        Component::start(kubeconfig, &ns, "component", "b", "1.31.0"),
    ];
    let first = wait_until("a holder of component", &context, || {
        holder(&leases, "component")
    })
    .await;
    instances.push(Component::start(
        kubeconfig,
        &ns,
        "component",
        "c",
        "1.30.0",
    ));
    wait_until("c pre-empts", &context, || async {
        (holder(&leases, "component").await.as_deref() == Some("c")).then_some(())
    })
    .await;
    eprintln!("component: {first} elected, then c by pre-emption");

    // Drill 1: every instance of the component killed. Its LeaseCandidates stay; nobody renews
    // the Lease or answers a ping.
    wait_alert(&prometheus, "ConclaveLeaseWithoutHolder", false, &context).await;
    for instance in &mut instances {
        instance.kill();
    }
    wait_alert(&prometheus, "ConclaveLeaseWithoutHolder", true, &context).await;
    let value = prometheus
        .query("conclave_leases_without_holder")
        .await
        .expect("the gauge");
    eprintln!("conclave_leases_without_holder: {}", value["result"]);
    // A new instance comes up and is elected.
    let _d = Component::start(kubeconfig, &ns, "component", "d", "1.31.0");
    wait_until("d elected", &context, || async {
        (holder(&leases, "component").await.as_deref() == Some("d")).then_some(())
    })
    .await;
    wait_alert(&prometheus, "ConclaveLeaseWithoutHolder", false, &context).await;

    // Drill 2: a Lease whose strategy's plugin traps on every call.
    let trapped = CandidateResponder::register(
        admin.clone(),
        lease_candidate(&ns, "t", "trapped", "1.31.0", Some("1.31.0"), TRAP),
    )
    .await
    .expect("the trapped Lease's candidate");
    wait_alert(&prometheus, "ConclavePluginErrors", true, &context).await;
    // The component goes away with its candidate: nothing calls the plugin any more.
    trapped.stop();
    let candidates: Api<LeaseCandidate> = Api::namespaced(admin.clone(), &ns);
    candidates
        .delete("t", &DeleteParams::default())
        .await
        .expect("deleting the trapped candidate");
    wait_alert(&prometheus, "ConclavePluginErrors", false, &context).await;

    // Every query of the dashboard evaluates, and returns series for this scenario.
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut empty = Vec::new();
    for (title, expr) in &queries {
        let data = prometheus
            .query(expr)
            .await
            .unwrap_or_else(|e| panic!("panel {title:?}: {expr}: {e}"));
        let series = data["result"].as_array().map_or(0, Vec::len);
        if series == 0 {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries without series:\n{}",
        empty.join("\n")
    );
    eprintln!(
        "{} dashboard queries evaluated, each returned series",
        queries.len()
    );
}

/// The last `max` bytes of `text`.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
