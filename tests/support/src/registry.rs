//! A real OCI registry (Debian's `docker-registry` package: the CNCF distribution registry 2.8,
//! installed by `.ci/prepare-registry.sh`) for tests: started on a free loopback port over plain
//! HTTP with a temporary storage directory, optionally behind htpasswd basic authentication;
//! killed and its directory removed on drop.
//!
//! Besides its address, it offers what tests need to act as a third party: raw requests to the
//! distribution API ([`Registry::put_blob`], [`Registry::put_manifest`], [`Registry::get`]) to
//! publish artifacts in layouts Conclave's client does not write, and the path of a stored blob
//! ([`Registry::blob_path`]) to corrupt content behind the registry's back.
//!
//! When the binary is missing, [`Registry::start`] returns `Ok(None)` after printing a SKIP
//! line, so the calling test can return early; with `CONCLAVE_REQUIRE_REGISTRY=1` (set by CI) a
//! missing binary is an error instead.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::control_plane::free_port;
use crate::{Error, ManagedProcess};

/// Set this environment variable (CI does) to turn a missing `docker-registry` into an error
/// instead of a skip.
pub const REGISTRY_REQUIRE_ENV: &str = "CONCLAVE_REQUIRE_REGISTRY";

/// Overrides where the registry binary is (else `docker-registry` on the `PATH`).
const BINARY_ENV: &str = "CONCLAVE_REGISTRY_BINARY";

/// How long the registry may take to answer `/v2/`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// bcrypt's lowest cost: the hash only guards a throw-away test registry.
const BCRYPT_COST: u32 = 4;

/// A raw answer of the registry: status, headers (names lowercase) and body.
#[derive(Debug, Clone)]
pub struct RegistryResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The headers, names in lowercase, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl RegistryResponse {
    /// The first header named `name` (lowercase).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy UTF-8).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A running distribution registry; killed, and its storage removed, on drop.
#[derive(Debug)]
pub struct Registry {
    process: ManagedProcess,
    dir: PathBuf,
    addr: SocketAddr,
    credentials: Option<(String, String)>,
}

impl Registry {
    /// Finds the registry binary: `$CONCLAVE_REGISTRY_BINARY`, else `docker-registry` on the
    /// `PATH` (Debian installs it as `/usr/bin/docker-registry`). Returns `Ok(None)` after
    /// printing a SKIP line when it is missing and `CONCLAVE_REQUIRE_REGISTRY` is unset, and
    /// [`Error::RegistryMissing`] when it is set.
    pub fn locate() -> Result<Option<PathBuf>, Error> {
        let found = match std::env::var_os(BINARY_ENV).filter(|p| !p.is_empty()) {
            // An override that names no file is missing, not a reason to look elsewhere.
            Some(path) => Some(PathBuf::from(path)).filter(|p| p.is_file()),
            None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|dir| dir.join("docker-registry"))
                .find(|p| p.is_file()),
        };
        if found.is_none() {
            if std::env::var_os(REGISTRY_REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
                return Err(Error::RegistryMissing);
            }
            eprintln!(
                "SKIP: docker-registry not found; run .ci/prepare-registry.sh (Debian's \
                 docker-registry) or set {BINARY_ENV} (set {REGISTRY_REQUIRE_ENV}=1 to make this a \
                 failure)"
            );
        }
        Ok(found)
    }

    /// Starts an anonymous registry (anyone may pull and push) on a free loopback port and waits
    /// until `/v2/` answers. `Ok(None)`: the binary is missing (see [`Registry::locate`]).
    pub async fn start() -> Result<Option<Self>, Error> {
        Self::start_inner(IpAddr::from([127, 0, 0, 1]), None).await
    }

    /// Starts an anonymous registry on a free port of `ip`: a node's address (see
    /// [`crate::Node::ip`]), so that pods on the node reach it, as they would a registry of the
    /// cluster's network.
    pub async fn start_on(ip: IpAddr) -> Result<Option<Self>, Error> {
        Self::start_inner(ip, None).await
    }

    /// Starts a registry that requires HTTP basic authentication as `username`/`password`
    /// (htpasswd, bcrypt) for every request, pull and push.
    pub async fn start_with_auth(username: &str, password: &str) -> Result<Option<Self>, Error> {
        if username.is_empty() || username.contains(':') {
            return Err(Error::InvalidArgument(format!(
                "registry user name {username:?} must be non-empty and without ':'"
            )));
        }
        Self::start_inner(
            IpAddr::from([127, 0, 0, 1]),
            Some((username.to_owned(), password.to_owned())),
        )
        .await
    }

    async fn start_inner(
        ip: IpAddr,
        credentials: Option<(String, String)>,
    ) -> Result<Option<Self>, Error> {
        let Some(binary) = Self::locate()? else {
            return Ok(None);
        };
        let addr = SocketAddr::from((ip, free_port()?));
        let dir = std::env::temp_dir().join(format!(
            "conclave-registry-{}-{}",
            std::process::id(),
            addr.port()
        ));
        let io = |context: String| move |source| Error::Io { context, source };
        std::fs::create_dir_all(dir.join("data"))
            .map_err(io(format!("creating {}", dir.display())))?;
        let mut config = serde_json::json!({
            "version": "0.1",
            "log": { "level": "warn", "accesslog": { "disabled": true } },
            "storage": {
                "filesystem": { "rootdirectory": dir.join("data") },
                "delete": { "enabled": true },
            },
            "http": { "addr": addr.to_string() },
        });
        if let Some((username, password)) = &credentials {
            let hash = bcrypt::hash(password, BCRYPT_COST)
                .map_err(|e| Error::InvalidArgument(format!("bcrypt: {e}")))?;
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, format!("{username}:{hash}\n"))
                .map_err(io(format!("writing {}", htpasswd.display())))?;
            config["auth"] = serde_json::json!({
                "htpasswd": { "realm": "conclave-test", "path": htpasswd },
            });
        }
        // JSON is YAML.
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config.to_string())
            .map_err(io(format!("writing {}", config_path.display())))?;
        let args = vec!["serve".to_owned(), config_path.display().to_string()];
        let process =
            ManagedProcess::spawn("docker-registry", &binary, &args, &dir.join("registry.log"))?;
        let mut registry = Self {
            process,
            dir,
            addr,
            credentials,
        };
        registry.wait_ready().await?;
        Ok(Some(registry))
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.exit_status() {
                return Err(self.failed(format!("exited with {status} before it was ready")));
            }
            // 401 is an answer too: the registry with auth is ready when it refuses us.
            if let Ok(response) = self.request_as(None, "GET", "/v2/", &[], &[]).await
                && matches!(response.status, 200 | 401)
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.failed(format!("/v2/ did not answer within {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn failed(&self, reason: String) -> Error {
        Error::Process {
            name: "docker-registry".into(),
            reason,
            log: self.process.log_path().to_owned(),
            tail: self.process.log_tail(4096),
        }
    }

    /// The address it listens on (loopback, plain HTTP).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `IP:PORT` (`127.0.0.1:PORT` unless started with [`Registry::start_on`]): the registry
    /// part of a reference to it.
    #[must_use]
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The end of the registry's log.
    #[must_use]
    pub fn log_tail(&self, max_bytes: usize) -> String {
        self.process.log_tail(max_bytes)
    }

    /// Where the registry stores the blob `digest` (`sha256:<hex>`): rewrite it to serve
    /// corrupted content under that digest.
    #[must_use]
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir
            .join("data/docker/registry/v2/blobs/sha256")
            .join(hex.get(..2).unwrap_or(hex))
            .join(hex)
            .join("data")
    }

    /// The directory holding the configuration, log and storage.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `GET path` with the registry's credentials (if it has any).
    pub async fn get(&self, path: &str, accept: &str) -> Result<RegistryResponse, Error> {
        self.request("GET", path, &[("Accept", accept)], &[]).await
    }

    /// Uploads `data` as a blob of `repository` (a POST opening the upload, then one PUT with
    /// the content, as the distribution API allows); returns its digest.
    pub async fn put_blob(&self, repository: &str, data: &[u8]) -> Result<String, Error> {
        let digest = sha256(data);
        let path = format!("/v2/{repository}/blobs/uploads/");
        let opened = self.request("POST", &path, &[], &[]).await?;
        self.expect(&opened, 202, &format!("POST {path}"))?;
        let location = opened.header("location").ok_or_else(|| {
            Error::InvalidArgument(format!("POST {path}: no Location in the answer"))
        })?;
        // The location may be absolute (http://host:port/v2/...): keep the path and query.
        let location = match location.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => location,
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{separator}digest={digest}");
        let response = self
            .request(
                "PUT",
                &put,
                &[("Content-Type", "application/octet-stream")],
                data,
            )
            .await?;
        self.expect(&response, 201, &format!("PUT {put}"))?;
        Ok(digest)
    }

    /// Puts `manifest` (of `media_type`) as `repository:reference` (a tag or digest); returns
    /// its digest.
    pub async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        manifest: &[u8],
    ) -> Result<String, Error> {
        let path = format!("/v2/{repository}/manifests/{reference}");
        let response = self
            .request("PUT", &path, &[("Content-Type", media_type)], manifest)
            .await?;
        self.expect(&response, 201, &format!("PUT {path}"))?;
        Ok(sha256(manifest))
    }

    fn expect(&self, response: &RegistryResponse, status: u16, what: &str) -> Result<(), Error> {
        if response.status == status {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{what}: HTTP {} (expected {status}): {}",
            response.status,
            response.text()
        )))
    }

    /// One request with the registry's credentials (if any).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<RegistryResponse, Error> {
        self.request_as(self.credentials.as_ref(), method, path, headers, body)
            .await
    }

    /// One HTTP/1.0 exchange (neither chunked nor kept alive), bounded to 30 s.
    async fn request_as(
        &self,
        credentials: Option<&(String, String)>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<RegistryResponse, Error> {
        let io = |source| Error::Io {
            context: format!("{method} {path} on the registry at {}", self.addr),
            source,
        };
        let mut head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some((username, password)) = credentials {
            head.push_str(&format!(
                "Authorization: Basic {}\r\n",
                base64(format!("{username}:{password}").as_bytes())
            ));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body).await?;
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        let raw = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| io(std::io::Error::other("no answer within 30 s")))?
            .map_err(io)?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| io(std::io::Error::other("no end of the HTTP header")))?;
        let head = String::from_utf8_lossy(&raw[..split]);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| io(std::io::Error::other(format!("bad status line: {head}"))))?;
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Ok(RegistryResponse {
            status,
            headers,
            body: raw[split + 4..].to_vec(),
        })
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sha256:<hex>` of `data`.
fn sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(data);
    let mut text = String::with_capacity(71);
    text.push_str("sha256:");
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Standard base64 with padding (for the Authorization header).
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (input, output) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), output, "{input:?}");
        }
    }

    #[test]
    fn sha256_of_nothing() {
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
