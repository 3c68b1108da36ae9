//! conclave-oci: strategy plugins as OCI artifacts.
//!
//! A plugin is published in the CNCF TAG Runtime layout for WebAssembly: an OCI image manifest
//! whose config is `application/vnd.wasm.config.v0+json` (built by [`oci_wasm`] from the
//! component's imports and exports) and whose one layer is the component, `application/wasm`.
//! [`pull`] also accepts the older layer type Kubewarden still pushes,
//! `application/vnd.wasm.content.layer.v1+wasm`.
//!
//! [`pull`] fetches by the reference's pinned digest and checks what it receives itself: the
//! manifest's sha256 against the pin, the layer's sha256 against the manifest (computed here, not
//! taken from the client), the layer's media type and its size (before and while downloading).
//! Every network step is bounded by [`ClientOptions::timeout`], so a registry that hangs fails
//! the call with [`OciError::Timeout`] instead of stalling the caller.
//!
//! Errors map to the `StrategyPlugin` status condition reasons through [`OciError::reason`].
#![forbid(unsafe_code)]

mod client;
mod credentials;
mod pull;
mod push;
mod reference;

use std::time::Duration;

pub use credentials::Credentials;
pub use pull::{PulledPlugin, pull};
pub use push::{PushedPlugin, push};
pub use reference::Reference;

/// The manifest media type of the CNCF layout (an OCI image manifest).
pub const MANIFEST_MEDIA_TYPE: &str = oci_wasm::WASM_MANIFEST_MEDIA_TYPE;
/// The Docker schema 2 manifest media type, which some tools still push; accepted on pull.
pub const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The config media type of the CNCF layout.
pub const CONFIG_MEDIA_TYPE: &str = oci_wasm::WASM_MANIFEST_CONFIG_MEDIA_TYPE;
/// The layer media type of the CNCF layout: the component itself.
pub const LAYER_MEDIA_TYPE: &str = oci_wasm::WASM_LAYER_MEDIA_TYPE;
/// The layer media type Kubewarden (and wasm-to-oci) push; accepted on pull.
pub const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// The condition reason of a failed pull (transport, authentication, not found, timeout).
pub const REASON_PULL_FAILED: &str = "PullFailed";
/// The condition reason of content that does not match its digest.
pub const REASON_DIGEST_MISMATCH: &str = "DigestMismatch";
/// The condition reason of an artifact that is not a loadable plugin (not wasm, too large).
pub const REASON_INVALID_COMPONENT: &str = "InvalidComponent";
/// The condition reason of a reference that does not parse.
pub const REASON_INVALID_REFERENCE: &str = "InvalidReference";

/// How to reach registries and what to accept from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// The bound on each network step (connect, authenticate, fetch or send the manifest, each
    /// blob). Default 30 s.
    pub timeout: Duration,
    /// Registries (`host:port`, as in the reference) reached over plain HTTP instead of HTTPS,
    /// e.g. `127.0.0.1:5000`. Default none.
    pub plain_http: Vec<String>,
    /// The largest component accepted (pull) or sent (push), in bytes. Default 64 MiB.
    pub max_plugin_bytes: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            plain_http: Vec::new(),
            max_plugin_bytes: 64 << 20,
        }
    }
}

impl ClientOptions {
    /// These options, reaching `registry` over plain HTTP too.
    #[must_use]
    pub fn with_plain_http(mut self, registry: impl Into<String>) -> Self {
        self.plain_http.push(registry.into());
        self
    }

    /// These options with `timeout` on each network step.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Everything that can go wrong pulling or pushing a plugin. Each variant names the reference
/// (or registry) it is about; [`OciError::reason`] gives the status condition reason.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse.
    #[error("invalid OCI reference {reference:?}: {reason}")]
    InvalidReference {
        /// The text given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The credentials (e.g. a docker config Secret) are malformed.
    #[error("invalid credentials for {registry}: {reason}")]
    InvalidCredentials {
        /// The registry they were read for.
        registry: String,
        /// What is wrong (never the secret itself).
        reason: String,
    },
    /// The registry cannot be reached (DNS, connection refused, TLS).
    #[error("cannot reach registry {registry}: {message}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// The transport's error, with its causes.
        message: String,
    },
    /// A network step did not finish within [`ClientOptions::timeout`].
    #[error("registry {registry} did not answer {step} within {after:?}")]
    Timeout {
        /// The registry.
        registry: String,
        /// The step that timed out (e.g. `the manifest request`).
        step: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The registry refused the credentials (or their absence).
    #[error(
        "registry {registry} refused access to {reference}: {message} (check the credentials: \
         the pull Secret, or --username/--docker-config)"
    )]
    Unauthorized {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// The repository, tag or digest does not exist.
    #[error("{reference} not found: {message}")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// Content does not hash to the digest that names it.
    #[error(
        "digest mismatch for the {what} of {reference}: expected {expected}, received content \
         with {actual}"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// What was checked: `manifest` or `layer`.
        what: &'static str,
        /// The digest pinned (by the reference, or by the manifest for the layer).
        expected: String,
        /// The sha256 of what was received.
        actual: String,
    },
    /// The manifest is not a WebAssembly artifact (e.g. a container image or an index).
    #[error(
        "{reference} is not a WebAssembly artifact: {detail} (media type {media_type}); expected \
         one layer of {LAYER_MEDIA_TYPE} (or {LEGACY_LAYER_MEDIA_TYPE})"
    )]
    NotAWasmArtifact {
        /// The reference.
        reference: String,
        /// The offending media type (manifest or layer).
        media_type: String,
        /// What was found instead.
        detail: String,
    },
    /// The component is larger than [`ClientOptions::max_plugin_bytes`].
    #[error("{reference}: the component is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (as declared, or as received so far).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The bytes given to [`push`] are not a WebAssembly component.
    #[error("not a WebAssembly component: {message}")]
    InvalidComponent {
        /// Why it was refused.
        message: String,
    },
    /// The registry answered something the protocol does not allow, or an unexpected error.
    #[error("registry {registry}: {message}")]
    Registry {
        /// The registry.
        registry: String,
        /// The error, with its causes.
        message: String,
    },
}

impl OciError {
    /// The `StrategyPlugin` status condition reason for this error: [`REASON_PULL_FAILED`]
    /// (transport, authentication, not found, timeout, protocol), [`REASON_DIGEST_MISMATCH`],
    /// [`REASON_INVALID_COMPONENT`] (not wasm, too large) or [`REASON_INVALID_REFERENCE`].
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidReference { .. } => REASON_INVALID_REFERENCE,
            Self::DigestMismatch { .. } => REASON_DIGEST_MISMATCH,
            Self::NotAWasmArtifact { .. }
            | Self::TooLarge { .. }
            | Self::InvalidComponent { .. } => REASON_INVALID_COMPONENT,
            Self::InvalidCredentials { .. }
            | Self::Unreachable { .. }
            | Self::Timeout { .. }
            | Self::Unauthorized { .. }
            | Self::NotFound { .. }
            | Self::Registry { .. } => REASON_PULL_FAILED,
        }
    }

    /// Whether retrying the same call later may succeed (the registry was unreachable, slow or
    /// failed), as opposed to a definite answer (bad reference, credentials refused, digest
    /// mismatch, not a plugin). A controller backs off on these and re-queues.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. } | Self::Timeout { .. } | Self::Registry { .. }
        )
    }
}

/// The `sha256:<hex>` digest of `bytes`.
#[must_use]
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests;
