//! `conclave strategy push`, `pull`, and `inspect REFERENCE`: plugins in OCI registries, in the
//! CNCF layout for WebAssembly (through conclave-oci).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use conclave_oci::{ClientOptions, Credentials, PulledPlugin, Reference};

/// How to reach a registry: HTTP or HTTPS, credentials, timeout, size limit.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Reach the reference's registry over plain HTTP (a local or test registry, e.g.
    /// 127.0.0.1:5000) instead of HTTPS.
    #[arg(long, env = "CONCLAVE_REGISTRY_PLAIN_HTTP")]
    plain_http: bool,
    /// User name for the registry (basic authentication); the password is read from stdin.
    #[arg(long, requires = "password_stdin", conflicts_with = "docker_config")]
    username: Option<String>,
    /// Read the password (or access token) for --username from stdin.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// Take the credentials for the reference's registry from a docker config file
    /// (`~/.docker/config.json`, or the `.dockerconfigjson` of a pull Secret).
    #[arg(long, value_name = "PATH", env = "CONCLAVE_REGISTRY_DOCKER_CONFIG")]
    docker_config: Option<PathBuf>,
    /// Bound on each network step (connect, manifest, each blob).
    #[arg(long = "registry-timeout", value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse)]
    timeout: Duration,
    /// The largest component accepted or sent, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    max_plugin_mib: u64,
}

impl RegistryArgs {
    fn options(&self, reference: &Reference) -> ClientOptions {
        ClientOptions {
            timeout: self.timeout,
            plain_http: if self.plain_http {
                vec![reference.registry().to_owned()]
            } else {
                Vec::new()
            },
            max_plugin_bytes: self.max_plugin_mib.saturating_mul(1 << 20),
        }
    }

    fn credentials(&self, reference: &Reference) -> anyhow::Result<Credentials> {
        if let Some(username) = &self.username {
            let mut password = String::new();
            std::io::stdin()
                .read_to_string(&mut password)
                .context("reading the password from stdin")?;
            // `echo $TOKEN | ...` appends a newline that is not part of the password.
            let password = password.strip_suffix('\n').unwrap_or(&password);
            let password = password.strip_suffix('\r').unwrap_or(password);
            if password.is_empty() {
                bail!("--password-stdin: stdin held no password");
            }
            return Ok(Credentials::basic(username, password));
        }
        if let Some(path) = &self.docker_config {
            let json = std::fs::read(path)
                .with_context(|| format!("reading the docker config {}", path.display()))?;
            return Credentials::from_docker_config(&json, reference.registry())
                .with_context(|| format!("in {}", path.display()));
        }
        Ok(Credentials::Anonymous)
    }
}

/// Parses `KEY=VALUE` for `--annotation`.
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

fn parse_reference(text: &str) -> anyhow::Result<Reference> {
    Ok(Reference::parse(text)?)
}

/// Whether `plugin` (as `inspect` takes it) names a registry reference rather than a file or a
/// built-in: not an existing file, not ending in `.wasm`, and a valid reference.
pub fn is_reference(plugin: &str) -> bool {
    !Path::new(plugin).exists() && !plugin.ends_with(".wasm") && Reference::parse(plugin).is_ok()
}

/// `conclave strategy push FILE REFERENCE`: refuses a file the engine cannot load (checked by
/// the caller), publishes it, prints the pinned reference.
pub fn push(
    file: &Path,
    reference: &str,
    annotations: Vec<(String, String)>,
    registry: &RegistryArgs,
) -> anyhow::Result<()> {
    let reference = parse_reference(reference)?;
    let component = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let credentials = registry.credentials(&reference)?;
    let options = registry.options(&reference);
    let annotations: BTreeMap<String, String> = annotations.into_iter().collect();
    let pushed = crate::runtime()?.block_on(conclave_oci::push(
        &component,
        &reference,
        &credentials,
        &options,
        annotations,
    ))?;
    eprintln!(
        "pushed {} ({} bytes) as {} in the CNCF layout ({}, layer {})",
        file.display(),
        component.len(),
        reference,
        conclave_oci::CONFIG_MEDIA_TYPE,
        conclave_oci::LAYER_MEDIA_TYPE
    );
    // The one line on stdout: what to paste into a StrategyPlugin's source.
    println!("{}", pushed.reference_with_digest);
    Ok(())
}

/// Pulls `reference` into memory, verified.
pub fn fetch(reference: &Reference, registry: &RegistryArgs) -> anyhow::Result<PulledPlugin> {
    let credentials = registry.credentials(reference)?;
    let options = registry.options(reference);
    Ok(crate::runtime()?.block_on(conclave_oci::pull(reference, &credentials, &options))?)
}

/// `conclave strategy pull REFERENCE [-o FILE]`: writes the verified component to FILE (`-` for
/// stdout; default: the repository's last path component, `.wasm`).
pub fn pull(reference: &str, output: Option<&Path>, registry: &RegistryArgs) -> anyhow::Result<()> {
    let reference = parse_reference(reference)?;
    let pulled = fetch(&reference, registry)?;
    let default_name;
    let output = match output {
        Some(path) => path,
        None => {
            let name = reference
                .repository()
                .rsplit('/')
                .next()
                .unwrap_or("plugin");
            default_name = PathBuf::from(format!("{name}.wasm"));
            &default_name
        }
    };
    if output == Path::new("-") {
        std::io::stdout()
            .write_all(&pulled.component)
            .context("writing the component to stdout")?;
    } else {
        std::fs::write(output, &pulled.component)
            .with_context(|| format!("writing {}", output.display()))?;
    }
    eprintln!(
        "pulled {} ({} bytes, {}) to {}",
        reference.with_digest(&pulled.manifest_digest)?,
        pulled.component.len(),
        pulled.media_type,
        output.display()
    );
    eprintln!("layer {}", pulled.layer_digest);
    Ok(())
}

/// The lines `inspect` prints about where a pulled plugin came from.
pub fn describe(reference: &Reference, pulled: &PulledPlugin) -> anyhow::Result<Vec<String>> {
    let mut lines = vec![
        format!(
            "reference:   {}",
            reference.with_digest(&pulled.manifest_digest)?
        ),
        format!("manifest:    {}", pulled.manifest_digest),
        format!(
            "layer:       {} ({})",
            pulled.layer_digest, pulled.media_type
        ),
    ];
    for (key, value) in &pulled.annotations {
        lines.push(format!("annotation:  {key}={value}"));
    }
    Ok(lines)
}

/// Writes a pulled component where the engine can load it: a file in a fresh temporary
/// directory (removed when the guard drops).
pub fn to_temp_file(pulled: &PulledPlugin) -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("plugin.wasm");
    std::fs::write(&path, &pulled.component)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((dir, path))
}
