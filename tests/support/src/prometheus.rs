//! A real Prometheus server (Debian's `prometheus` package, installed by
//! `.ci/prepare-prometheus.sh`) for tests: started on a free loopback port with a generated
//! configuration and a temporary storage directory, scraping the targets a test names and
//! evaluating the rule files it names; queried through its HTTP API; killed and its directory
//! removed on drop.
//!
//! When the binary is missing, [`Prometheus::start`] returns `Ok(None)` after printing a SKIP
//! line, so the calling test can return early; with `CONCLAVE_REQUIRE_PROMETHEUS=1` (set by CI) a
//! missing binary is an error instead.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::control_plane::free_port;
use crate::{Error, ManagedProcess};

/// Set this environment variable (CI does) to turn a missing `prometheus` into an error instead
/// of a skip.
pub const PROMETHEUS_REQUIRE_ENV: &str = "CONCLAVE_REQUIRE_PROMETHEUS";

/// Overrides where the `prometheus` binary is (else it is looked up on the `PATH`).
const BINARY_ENV: &str = "PROMETHEUS";

/// How long the server may take to answer `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a test's Prometheus scrapes and evaluates.
#[derive(Debug, Clone)]
pub struct PrometheusConfig {
    /// The `job` label of the scraped targets.
    pub job: String,
    /// `host:port` of every target serving `/metrics`.
    pub targets: Vec<String>,
    /// Labels added to every scraped series (e.g. `namespace`, as the Kubernetes service
    /// discovery of a real installation adds).
    pub target_labels: Vec<(String, String)>,
    /// How often the targets are scraped.
    pub scrape_interval: Duration,
    /// How often the rules are evaluated.
    pub evaluation_interval: Duration,
    /// Rule files to load (`rule_files:`), copied as they are.
    pub rule_files: Vec<PathBuf>,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        Self {
            job: "conclave".into(),
            targets: Vec::new(),
            target_labels: Vec::new(),
            scrape_interval: Duration::from_secs(1),
            evaluation_interval: Duration::from_secs(1),
            rule_files: Vec::new(),
        }
    }
}

impl PrometheusConfig {
    /// The `prometheus.yml` text. JSON is YAML, so it is written as JSON.
    #[must_use]
    pub fn to_yaml(&self) -> String {
        let labels: serde_json::Map<String, Value> = self
            .target_labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        serde_json::json!({
            "global": {
                "scrape_interval": duration(self.scrape_interval),
                "scrape_timeout": duration(self.scrape_interval),
                "evaluation_interval": duration(self.evaluation_interval),
            },
            "rule_files": self.rule_files,
            "scrape_configs": [{
                "job_name": self.job,
                "static_configs": [{ "targets": self.targets, "labels": labels }],
            }],
        })
        .to_string()
    }
}

/// A Prometheus duration: whole milliseconds.
fn duration(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// A running Prometheus server; killed, and its configuration and storage removed, on drop.
#[derive(Debug)]
pub struct Prometheus {
    process: ManagedProcess,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Prometheus {
    /// Finds `prometheus`: `$PROMETHEUS`, else on the `PATH`. Returns `Ok(None)` after printing a
    /// SKIP line when it is missing and `CONCLAVE_REQUIRE_PROMETHEUS` is unset, and
    /// [`Error::PrometheusMissing`] when it is set.
    pub fn locate() -> Result<Option<PathBuf>, Error> {
        let found = std::env::var_os(BINARY_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::split_paths(&std::env::var_os("PATH")?)
                    .map(|dir| dir.join("prometheus"))
                    .find(|p| p.is_file())
            });
        if found.is_none() {
            if std::env::var_os(PROMETHEUS_REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
                return Err(Error::PrometheusMissing);
            }
            eprintln!(
                "SKIP: prometheus not found; run .ci/prepare-prometheus.sh (Debian's prometheus) \
                 or set {BINARY_ENV} (set {PROMETHEUS_REQUIRE_ENV}=1 to make this a failure)"
            );
        }
        Ok(found)
    }

    /// Starts Prometheus with `config` on a free loopback port and waits until it is ready.
    /// `Ok(None)`: the binary is missing (see [`Prometheus::locate`]).
    pub async fn start(config: &PrometheusConfig) -> Result<Option<Self>, Error> {
        let Some(binary) = Self::locate()? else {
            return Ok(None);
        };
        let dir = std::env::temp_dir().join(format!(
            "conclave-prometheus-{}-{}",
            std::process::id(),
            free_port()?
        ));
        let io = |context: String| move |source| Error::Io { context, source };
        std::fs::create_dir_all(dir.join("data"))
            .map_err(io(format!("creating {}", dir.display())))?;
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config.to_yaml())
            .map_err(io(format!("writing {}", config_path.display())))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let args = vec![
            format!("--config.file={}", config_path.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={addr}"),
            "--log.level=warn".to_owned(),
        ];
        let process =
            ManagedProcess::spawn("prometheus", &binary, &args, &dir.join("prometheus.log"))?;
        let mut prometheus = Self { process, dir, addr };
        prometheus.wait_ready().await?;
        Ok(Some(prometheus))
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.exit_status() {
                return Err(self.failed(format!("exited with {status} before it was ready")));
            }
            if let Ok((200, _)) = http_get(self.addr, "/-/ready").await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.failed(format!("not ready within {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn failed(&self, reason: String) -> Error {
        Error::Process {
            name: "prometheus".into(),
            reason,
            log: self.process.log_path().to_owned(),
            tail: self.process.log_tail(4096),
        }
    }

    /// The server's base URL, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The directory holding `prometheus.yml`, `prometheus.log` and the storage.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The end of the server's log.
    #[must_use]
    pub fn log_tail(&self, max_bytes: usize) -> String {
        self.process.log_tail(max_bytes)
    }

    /// `GET path` of the HTTP API (e.g. `/api/v1/alerts`); returns `data` of a `success`
    /// answer, and [`Error::Prometheus`] with the answer's error otherwise.
    pub async fn api(&self, path: &str) -> Result<Value, Error> {
        let api_error = |message: String| Error::Prometheus {
            request: path.to_owned(),
            message,
        };
        let (status, body) = http_get(self.addr, path)
            .await
            .map_err(|e| api_error(format!("request failed: {e}")))?;
        let answer: Value = serde_json::from_str(&body)
            .map_err(|e| api_error(format!("HTTP {status}, not JSON ({e}): {body}")))?;
        if answer["status"] != "success" {
            return Err(api_error(format!(
                "HTTP {status}: {}: {}",
                answer["errorType"], answer["error"]
            )));
        }
        Ok(answer["data"].clone())
    }

    /// Evaluates `expr` now (`/api/v1/query`); returns its `data`: `resultType` and `result`.
    pub async fn query(&self, expr: &str) -> Result<Value, Error> {
        self.api(&format!("/api/v1/query?query={}", percent_encode(expr)))
            .await
    }

    /// The alerts pending or firing now (`/api/v1/alerts`): each with `labels`, `annotations`
    /// and `state`.
    pub async fn alerts(&self) -> Result<Vec<Value>, Error> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The scrape targets and their health (`/api/v1/targets`, active ones).
    pub async fn targets(&self) -> Result<Vec<Value>, Error> {
        let data = self.api("/api/v1/targets?state=active").await?;
        Ok(data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Percent-encodes `text` for a URL query value (everything but unreserved characters).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One HTTP/1.0 GET (so the answer is neither chunked nor kept alive); returns the status code
/// and the body.
async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| std::io::Error::other("no answer within 30 s"))??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of the HTTP header"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encodes_a_query() {
        assert_eq!(
            percent_encode(r#"sum by (a) (rate(x{k="v"}[1m]))"#),
            "sum%20by%20%28a%29%20%28rate%28x%7Bk%3D%22v%22%7D%5B1m%5D%29%29"
        );
    }

    #[test]
    fn config_names_targets_rules_and_intervals() {
        let config = PrometheusConfig {
            targets: vec!["127.0.0.1:9".into()],
            target_labels: vec![("namespace".into(), "conclave-system".into())],
            rule_files: vec![PathBuf::from("/rules.yaml")],
            scrape_interval: Duration::from_millis(500),
            ..PrometheusConfig::default()
        };
        let parsed: Value = serde_json::from_str(&config.to_yaml()).unwrap();
        assert_eq!(parsed["global"]["scrape_interval"], "500ms");
        assert_eq!(parsed["rule_files"][0], "/rules.yaml");
        let scrape = &parsed["scrape_configs"][0];
        assert_eq!(scrape["job_name"], "conclave");
        assert_eq!(scrape["static_configs"][0]["targets"][0], "127.0.0.1:9");
        assert_eq!(
            scrape["static_configs"][0]["labels"]["namespace"],
            "conclave-system"
        );
    }
}
