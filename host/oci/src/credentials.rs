//! Registry credentials: anonymous, or a user name and password, e.g. read from the
//! `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret (an imagePullSecret).

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;

use crate::OciError;

/// How to authenticate to a registry.
///
/// `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// No credentials: public registries, or registries that allow anonymous pulls.
    #[default]
    Anonymous,
    /// HTTP basic authentication (also exchanged for a bearer token by registries that use
    /// token authentication).
    Basic {
        /// The user name.
        username: String,
        /// The password or access token.
        password: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// `{"auths": {"<registry>": {...}}}`, the format of `~/.docker/config.json` and of a
/// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson` key.
#[derive(Debug, Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

/// One registry's entry: `auth` (base64 of `user:password`) or `username` and `password`.
#[derive(Debug, Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Credentials {
    /// Basic credentials.
    #[must_use]
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The credentials for `registry` (a host with an optional port, as in a [`Reference`])
    /// in a docker config (`.dockerconfigjson`).
    ///
    /// Entries are matched by host: `registry`, `https://registry`, `http://registry/v1/` and
    /// the like all name the same registry. A config without an entry for `registry` yields
    /// [`Credentials::Anonymous`] (as the kubelet tries an anonymous pull then). An entry's `auth`
    /// (base64 `user:password`) wins over its `username` and `password`. Fails with
    /// [`OciError::InvalidCredentials`] when the JSON or an `auth` value is malformed, or the entry
    /// has neither form; the error never contains the secret.
    ///
    /// [`Reference`]: crate::Reference
    pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Self, OciError> {
        let invalid = |reason: String| OciError::InvalidCredentials {
            registry: registry.to_owned(),
            reason,
        };
        let config: DockerConfig = serde_json::from_slice(json).map_err(|e| {
            // serde_json's message names a line and column, never the content.
            invalid(format!("not a docker config (.dockerconfigjson): {e}"))
        })?;
        let wanted = registry_host(registry);
        let Some(entry) = config
            .auths
            .iter()
            .find(|(key, _)| registry_host(key) == wanted)
            .map(|(_, entry)| entry)
        else {
            tracing::debug!(
                registry,
                "no entry in the docker config; pulling anonymously"
            );
            return Ok(Self::Anonymous);
        };
        if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| invalid("`auth` is not base64".to_owned()))?;
            let decoded = String::from_utf8(decoded)
                .map_err(|_| invalid("`auth` does not decode to UTF-8 text".to_owned()))?;
            let Some((username, password)) = decoded.split_once(':') else {
                return Err(invalid(
                    "`auth` does not decode to user:password".to_owned(),
                ));
            };
            return Ok(Self::basic(username, password));
        }
        match (&entry.username, &entry.password) {
            (Some(username), Some(password)) => Ok(Self::basic(username, password)),
            _ => Err(invalid(
                "the entry has neither `auth` nor both `username` and `password`".to_owned(),
            )),
        }
    }

    /// The credentials as the OCI client takes them.
    pub(crate) fn to_client(&self) -> oci_client::secrets::RegistryAuth {
        match self {
            Self::Anonymous => oci_client::secrets::RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                oci_client::secrets::RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// The host (and port) a docker config key or reference registry names: no scheme, no path,
/// lowercase; Docker Hub's historical names are one.
fn registry_host(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}
