//! Publishing a plugin in the CNCF layout.

use std::collections::BTreeMap;

use oci_client::manifest::OciImageManifest;
use oci_wasm::{ToConfig as _, WasmConfig};
use reqwest::header::HeaderValue;

use crate::client::{self, step};
use crate::{ClientOptions, Credentials, MANIFEST_MEDIA_TYPE, OciError, Reference, sha256_digest};

/// A plugin pushed: the digest that pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedPlugin {
    /// The manifest's digest (`sha256:...`): the sha256 of the manifest bytes sent.
    pub manifest_digest: String,
    /// The reference pushed to, pinned to `manifest_digest`, ready for a `StrategyPlugin`.
    pub reference_with_digest: Reference,
}

/// Pushes `component` to `reference` (a tag, default `latest`) in the CNCF layout: the layer is
/// the component as given (`application/wasm`), the config is `application/vnd.wasm.config.v0+json`
/// as [`oci_wasm`] builds it from the component's world (its imports and exports), and the
/// manifest carries `annotations`.
///
/// Refuses bytes that are not a WebAssembly component ([`OciError::InvalidComponent`]; the
/// caller should also load it with the engine, which checks the plugin contract), a component
/// larger than `options.max_plugin_bytes` ([`OciError::TooLarge`]) and a reference that already
/// has a digest ([`OciError::InvalidReference`]: the digest is the result of a push). Every
/// network step is bounded by `options.timeout`.
#[tracing::instrument(skip(component, credentials, options, annotations), fields(%reference, size = component.len()))]
pub async fn push(
    component: &[u8],
    reference: &Reference,
    credentials: &Credentials,
    options: &ClientOptions,
    annotations: BTreeMap<String, String>,
) -> Result<PushedPlugin, OciError> {
    if reference.is_pinned() {
        return Err(OciError::InvalidReference {
            reference: reference.to_string(),
            reason: "a push takes a tag, not a digest: the digest is computed from what is pushed"
                .to_owned(),
        });
    }
    let size = component.len() as u64;
    if size > options.max_plugin_bytes {
        return Err(OciError::TooLarge {
            reference: reference.to_string(),
            size,
            limit: options.max_plugin_bytes,
        });
    }
    check_component_header(component)?;
    let invalid = |e: anyhow::Error| OciError::InvalidComponent {
        message: format!("{e:#}"),
    };
    let (wasm_config, layer) =
        WasmConfig::from_raw_component(component.to_vec(), None).map_err(invalid)?;
    let config = wasm_config.to_config().map_err(invalid)?;
    let mut manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        (!annotations.is_empty()).then_some(annotations),
    );
    manifest.media_type = Some(MANIFEST_MEDIA_TYPE.to_owned());
    let body = serde_json::to_vec(&manifest).map_err(|e| OciError::Registry {
        registry: reference.registry().to_owned(),
        message: format!("cannot serialize the manifest: {e}"),
    })?;
    let manifest_digest = sha256_digest(&body);

    let client = client::build(options);
    let image = reference.to_client();
    client
        .store_auth_if_needed(reference.registry(), &credentials.to_client())
        .await;
    let layer_digest = &manifest.layers[0].digest;
    step(
        reference,
        options,
        "the layer upload",
        client.push_blob(&image, layer.data.clone(), layer_digest),
    )
    .await?;
    step(
        reference,
        options,
        "the config upload",
        client.push_blob(&image, config.data.clone(), &manifest.config.digest),
    )
    .await?;
    step(
        reference,
        options,
        "the manifest upload",
        client.push_manifest_raw(&image, body, HeaderValue::from_static(MANIFEST_MEDIA_TYPE)),
    )
    .await?;
    tracing::info!(%manifest_digest, "pushed");
    Ok(PushedPlugin {
        reference_with_digest: reference.with_digest(&manifest_digest)?,
        manifest_digest,
    })
}

/// The preamble of a component (`\0asm`, version 0x0d, layer 1); a core module has version 1,
/// layer 0, and oci-wasm would publish it with an empty world.
fn check_component_header(bytes: &[u8]) -> Result<(), OciError> {
    const MAGIC: &[u8] = b"\0asm";
    const COMPONENT_LAYER: [u8; 2] = [1, 0];
    let refuse = |message: &str| {
        Err(OciError::InvalidComponent {
            message: message.to_owned(),
        })
    };
    match bytes.get(..8) {
        Some(preamble) if preamble.starts_with(MAGIC) && preamble[6..8] == COMPONENT_LAYER => {
            Ok(())
        }
        Some(preamble) if preamble.starts_with(MAGIC) => refuse(
            "a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it with \
             `wasm-tools component new`)",
        ),
        _ => refuse("not WebAssembly (no \\0asm preamble)"),
    }
}
