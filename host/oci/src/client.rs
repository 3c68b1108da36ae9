//! The OCI client both directions share: its configuration, the timeout on every step, and the
//! mapping of the client's errors onto [`OciError`].

use std::future::Future;
use std::sync::Once;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};

use crate::{ClientOptions, OciError, Reference};

/// Builds a client: plain HTTP for the registries listed, the connect and read timeouts of the
/// options (each step is also bounded as a whole by [`step`]).
pub(crate) fn build(options: &ClientOptions) -> oci_client::Client {
    install_crypto_provider();
    let protocol = if options.plain_http.is_empty() {
        ClientProtocol::Https
    } else {
        ClientProtocol::HttpsExcept(options.plain_http.clone())
    };
    oci_client::Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(options.timeout),
        read_timeout: Some(options.timeout),
        ..ClientConfig::default()
    })
}

/// reqwest is built with rustls but no crypto provider (so that aws-lc stays out of the build):
/// install `ring`, the provider the rest of the workspace uses, unless the process has one.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Another thread may install one between the check and here: either is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// Runs one network step of a transfer from or to `reference`'s registry under the timeout.
pub(crate) async fn step<T, F>(
    reference: &Reference,
    options: &ClientOptions,
    what: &'static str,
    future: F,
) -> Result<T, OciError>
where
    F: Future<Output = Result<T, OciDistributionError>>,
{
    match tokio::time::timeout(options.timeout, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(map_error(reference, options, what, error)),
        Err(_) => Err(timeout(reference, options, what)),
    }
}

/// The timeout error of `what`.
pub(crate) fn timeout(
    reference: &Reference,
    options: &ClientOptions,
    what: &'static str,
) -> OciError {
    OciError::Timeout {
        registry: reference.registry().to_owned(),
        step: what,
        after: options.timeout,
    }
}

/// The client's error as an [`OciError`] about `reference`, during step `what`.
pub(crate) fn map_error(
    reference: &Reference,
    options: &ClientOptions,
    what: &'static str,
    error: OciDistributionError,
) -> OciError {
    let registry = reference.registry().to_owned();
    let unauthorized = |message: String| OciError::Unauthorized {
        registry: registry.clone(),
        reference: reference.to_string(),
        message,
    };
    let not_found = |message: String| OciError::NotFound {
        reference: reference.to_string(),
        message,
    };
    match error {
        OciDistributionError::RequestError(e) => request_error(reference, options, what, &e),
        OciDistributionError::IoError(e) => {
            if let Some(e) = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<reqwest::Error>())
            {
                return request_error(reference, options, what, e);
            }
            OciError::Registry {
                registry,
                message: format!("{what}: {}", chain(&e)),
            }
        }
        OciDistributionError::UnauthorizedError { url } => {
            unauthorized(format!("HTTP 401 Unauthorized for {url}"))
        }
        OciDistributionError::AuthenticationFailure(message) => {
            unauthorized(format!("authentication failed: {message}"))
        }
        OciDistributionError::RegistryError { envelope, url } => {
            let message = envelope
                .errors
                .iter()
                .map(|e| format!("{:?}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ");
            let message = format!("{message} ({url})");
            let codes = || envelope.errors.iter().map(|e| &e.code);
            if codes().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                unauthorized(message)
            } else if codes().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                not_found(message)
            } else {
                OciError::Registry {
                    registry,
                    message: format!("{what}: {message}"),
                }
            }
        }
        OciDistributionError::ServerError { code, url, message } => {
            let message = format!("HTTP {code} for {url}: {}", message.trim());
            match code {
                401 | 403 => unauthorized(message),
                404 => not_found(message),
                _ => OciError::Registry {
                    registry,
                    message: format!("{what}: {message}"),
                },
            }
        }
        OciDistributionError::ImageManifestNotFoundError(message) => not_found(message),
        // The client checks digests too; when its check fires first, report it the same way.
        OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
            OciError::DigestMismatch {
                reference: reference.to_string(),
                what: if what.contains("layer") {
                    "layer"
                } else {
                    "manifest"
                },
                expected,
                actual,
            }
        }
        other => OciError::Registry {
            registry,
            message: format!("{what}: {}", chain(&other)),
        },
    }
}

/// A transport error: a timeout, an unreachable registry, or something else on the wire.
fn request_error(
    reference: &Reference,
    options: &ClientOptions,
    what: &'static str,
    error: &reqwest::Error,
) -> OciError {
    let registry = reference.registry().to_owned();
    if error.is_timeout() {
        return timeout(reference, options, what);
    }
    if error.is_connect() {
        return OciError::Unreachable {
            registry,
            message: chain(error),
        };
    }
    if let Some(status) = error.status() {
        let message = format!("HTTP {status} on {what}");
        return match status.as_u16() {
            401 | 403 => OciError::Unauthorized {
                registry,
                reference: reference.to_string(),
                message,
            },
            404 => OciError::NotFound {
                reference: reference.to_string(),
                message,
            },
            _ => OciError::Registry { registry, message },
        };
    }
    OciError::Unreachable {
        registry,
        message: format!("{what}: {}", chain(error)),
    }
}

/// `error: cause: cause...`, for messages that tell the whole story.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
