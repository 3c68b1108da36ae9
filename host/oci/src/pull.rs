//! Pulling a plugin: the manifest by its pinned digest, then its one wasm layer, each verified
//! here.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use sha2::Digest as _;

use crate::client::{self, step};
use crate::{
    ClientOptions, Credentials, DOCKER_MANIFEST_MEDIA_TYPE, LAYER_MEDIA_TYPE,
    LEGACY_LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, OciError, Reference, sha256_digest,
};

/// The largest manifest accepted (the distribution registry's own limit is 4 MiB).
const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The media types of an OCI image index and a Docker manifest list: never a plugin.
const INDEX_MEDIA_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A plugin pulled and verified: its component, and what identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledPlugin {
    /// The component's bytes (the layer), whose sha256 is `layer_digest`.
    pub component: Vec<u8>,
    /// The manifest's digest (`sha256:...`), computed over the bytes received; equal to the
    /// reference's digest when it was pinned.
    pub manifest_digest: String,
    /// The layer's digest (`sha256:...`), computed over the bytes received and equal to the
    /// manifest's.
    pub layer_digest: String,
    /// The layer's media type: [`LAYER_MEDIA_TYPE`] or [`LEGACY_LAYER_MEDIA_TYPE`].
    pub media_type: String,
    /// The manifest's annotations (e.g. `org.opencontainers.image.source`).
    pub annotations: BTreeMap<String, String>,
}

/// Pulls the plugin at `reference` and verifies it.
///
/// With a pinned reference ([`Reference::is_pinned`]) the manifest is fetched by that digest and
/// its sha256 must equal it; without one, by tag (default `latest`) and the digest is reported.
/// The manifest must have exactly one layer of [`LAYER_MEDIA_TYPE`] or
/// [`LEGACY_LAYER_MEDIA_TYPE`] ([`OciError::NotAWasmArtifact`] otherwise), no larger than
/// `options.max_plugin_bytes` ([`OciError::TooLarge`], checked before downloading and while
/// receiving), and the layer's sha256, computed here, must match the manifest
/// ([`OciError::DigestMismatch`]). Every network step is bounded by `options.timeout`.
///
/// The component is not loaded: the caller does that with the engine (a wasm layer may still be
/// a broken or hostile component).
#[tracing::instrument(skip(credentials, options), fields(%reference))]
pub async fn pull(
    reference: &Reference,
    credentials: &Credentials,
    options: &ClientOptions,
) -> Result<PulledPlugin, OciError> {
    let client = client::build(options);
    let image = reference.to_client();
    let auth = credentials.to_client();
    let accepted = [MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE];

    let (body, _) = step(
        reference,
        options,
        "the manifest request",
        client.pull_manifest_raw(&image, &auth, &accepted),
    )
    .await?;
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(not_wasm(
            reference,
            "(unknown)",
            format!(
                "the manifest is {} bytes, more than {MAX_MANIFEST_BYTES}",
                body.len()
            ),
        ));
    }
    // Computed here over what was received: the client's own check is not relied upon.
    let manifest_digest = sha256_digest(&body);
    if let Some(expected) = reference.digest()
        && expected != manifest_digest
    {
        return Err(OciError::DigestMismatch {
            reference: reference.to_string(),
            what: "manifest",
            expected: expected.to_owned(),
            actual: manifest_digest,
        });
    }
    let (manifest, layer) = wasm_layer(reference, &body)?;
    let declared = u64::try_from(layer.size).unwrap_or(0);
    if declared > options.max_plugin_bytes {
        return Err(OciError::TooLarge {
            reference: reference.to_string(),
            size: declared,
            limit: options.max_plugin_bytes,
        });
    }
    tracing::debug!(%manifest_digest, layer = %layer.digest, size = declared, "fetching the layer");

    let component = fetch_layer(&client, reference, &image, &layer, options).await?;
    let layer_digest = sha256_digest(&component);
    if layer_digest != layer.digest {
        return Err(OciError::DigestMismatch {
            reference: reference.to_string(),
            what: "layer",
            expected: layer.digest,
            actual: layer_digest,
        });
    }
    Ok(PulledPlugin {
        component,
        manifest_digest,
        layer_digest,
        media_type: layer.media_type,
        annotations: manifest.annotations.unwrap_or_default(),
    })
}

/// The manifest, and its one layer if the manifest is a WebAssembly artifact.
fn wasm_layer(
    reference: &Reference,
    body: &[u8],
) -> Result<(OciImageManifest, OciDescriptor), OciError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Versioned {
        #[serde(default)]
        media_type: Option<String>,
    }
    let versioned: Versioned = serde_json::from_slice(body).map_err(|e| OciError::Registry {
        registry: reference.registry().to_owned(),
        message: format!("the manifest of {reference} is not JSON: {e}"),
    })?;
    if let Some(media_type) = versioned.media_type.as_deref()
        && INDEX_MEDIA_TYPES.contains(&media_type)
    {
        return Err(not_wasm(
            reference,
            media_type,
            "an image index (a multi-platform image), not a plugin".to_owned(),
        ));
    }
    let manifest: OciImageManifest = serde_json::from_slice(body).map_err(|e| {
        not_wasm(
            reference,
            versioned.media_type.as_deref().unwrap_or("(none)"),
            format!("not an image manifest: {e}"),
        )
    })?;
    let [layer] = manifest.layers.as_slice() else {
        let types: Vec<&str> = manifest
            .layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect();
        return Err(not_wasm(
            reference,
            types.first().copied().unwrap_or("(none)"),
            format!("{} layers ({})", types.len(), types.join(", ")),
        ));
    };
    if layer.media_type != LAYER_MEDIA_TYPE && layer.media_type != LEGACY_LAYER_MEDIA_TYPE {
        return Err(not_wasm(
            reference,
            &layer.media_type,
            "its layer is not WebAssembly".to_owned(),
        ));
    }
    if crate::reference::validate_digest(&layer.digest).is_err() {
        return Err(OciError::Registry {
            registry: reference.registry().to_owned(),
            message: format!(
                "the manifest of {reference} names its layer by {:?}, not a sha256 digest",
                layer.digest
            ),
        });
    }
    let layer = layer.clone();
    Ok((manifest, layer))
}

/// Downloads the layer into memory, stopping as soon as it exceeds the limit; the whole download
/// is one step under the timeout.
async fn fetch_layer(
    client: &oci_client::Client,
    reference: &Reference,
    image: &oci_client::Reference,
    layer: &OciDescriptor,
    options: &ClientOptions,
) -> Result<Vec<u8>, OciError> {
    const WHAT: &str = "the layer download";
    let limit = options.max_plugin_bytes;
    let download = async {
        let mut stream = step(
            reference,
            options,
            WHAT,
            client.pull_blob_stream(image, layer),
        )
        .await?;
        let mut bytes =
            Vec::with_capacity(usize::try_from(layer.size.max(0)).unwrap_or(0).min(1 << 26));
        let mut hasher = sha2::Sha256::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    hasher.update(&chunk);
                    bytes.extend_from_slice(&chunk);
                    if bytes.len() as u64 > limit {
                        return Err(OciError::TooLarge {
                            reference: reference.to_string(),
                            size: bytes.len() as u64,
                            limit,
                        });
                    }
                }
                // The client's verifying stream ends with a digest error; report our own digest.
                Err(e) if e.get_ref().is_some_and(|i| i.is::<DigestError>()) => {
                    return Err(OciError::DigestMismatch {
                        reference: reference.to_string(),
                        what: "layer",
                        expected: layer.digest.clone(),
                        actual: format!("sha256:{}", hex::encode(hasher.finalize())),
                    });
                }
                Err(e) => {
                    return Err(client::map_error(
                        reference,
                        options,
                        WHAT,
                        OciDistributionError::IoError(e),
                    ));
                }
            }
        }
        Ok(bytes)
    };
    tokio::time::timeout(options.timeout, download)
        .await
        .map_err(|_| client::timeout(reference, options, WHAT))?
}

fn not_wasm(reference: &Reference, media_type: &str, detail: String) -> OciError {
    OciError::NotAWasmArtifact {
        reference: reference.to_string(),
        media_type: media_type.to_owned(),
        detail,
    }
}
