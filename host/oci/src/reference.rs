//! `registry/repository[:tag][@sha256:hex]`: where a plugin lives, and the digest that pins it.

use std::fmt;
use std::str::FromStr;

use crate::OciError;

/// The only digest algorithm a reference may pin (the CNCF layout and every registry use it).
const SHA256: &str = "sha256:";

/// A distribution-spec name and tag allow up to 255 and 128 characters.
const MAX_NAME: usize = 255;
const MAX_TAG: usize = 128;

/// Where a plugin artifact lives: `registry/repository[:tag][@sha256:hex]`.
///
/// The registry is always explicit (`ghcr.io/...`, `127.0.0.1:5000/...`, `localhost/...`): there
/// is no implicit `docker.io`, so a `StrategyPlugin` reads the same to everyone. A reference
/// with a digest is *pinned*: pulls fetch the manifest by that digest and refuse any other
/// content; the tag, if also given, is informative only. The controller requires a pinned
/// reference ([`Reference::is_pinned`]); the CLI accepts either.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl Reference {
    /// Parses and validates `text`; see the type's documentation for the grammar.
    ///
    /// Fails with [`OciError::InvalidReference`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, OciError> {
        let invalid = |reason: &str| OciError::InvalidReference {
            reference: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (name_tag, digest) = match text.split_once('@') {
            Some((name_tag, digest)) => (name_tag, Some(digest)),
            None => (text, None),
        };
        if let Some(digest) = digest {
            validate_digest(digest).map_err(|reason| invalid(&reason))?;
        }
        // A tag follows the last ':' only when no '/' comes after it (else it is a port).
        let (name, tag) = match name_tag.rfind(':') {
            Some(colon) if !name_tag[colon..].contains('/') => {
                (&name_tag[..colon], Some(&name_tag[colon + 1..]))
            }
            _ => (name_tag, None),
        };
        if let Some(tag) = tag {
            validate_tag(tag).map_err(|reason| invalid(&reason))?;
        }
        let Some((registry, repository)) = name.split_once('/') else {
            return Err(invalid(
                "no registry: write registry/repository, e.g. ghcr.io/org/plugin",
            ));
        };
        validate_registry(registry).map_err(|reason| invalid(&reason))?;
        validate_repository(repository).map_err(|reason| invalid(&reason))?;
        if name.len() > MAX_NAME {
            return Err(invalid(&format!(
                "the name is {} characters long, at most {MAX_NAME} are allowed",
                name.len()
            )));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        })
    }

    /// The registry host, with its port if any (`ghcr.io`, `127.0.0.1:5000`).
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository inside the registry (`org/plugin`).
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if the reference names one.
    #[must_use]
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned manifest digest (`sha256:` and 64 lowercase hex digits), if any.
    #[must_use]
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Whether the reference pins a manifest digest (the controller accepts only these).
    #[must_use]
    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The same reference pinned to `digest` (replacing any digest it had), e.g. after a push.
    ///
    /// `digest` must be a valid `sha256:` digest; an invalid one is refused.
    pub fn with_digest(&self, digest: &str) -> Result<Self, OciError> {
        validate_digest(digest).map_err(|reason| OciError::InvalidReference {
            reference: format!("{self}@{digest}"),
            reason,
        })?;
        Ok(Self {
            digest: Some(digest.to_owned()),
            ..self.clone()
        })
    }

    /// The reference as the OCI client takes it.
    pub(crate) fn to_client(&self) -> oci_client::Reference {
        let (registry, repository) = (self.registry.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => oci_client::Reference::with_tag_and_digest(
                registry,
                repository,
                tag.clone(),
                digest.clone(),
            ),
            (None, Some(digest)) => {
                oci_client::Reference::with_digest(registry, repository, digest.clone())
            }
            (tag, None) => oci_client::Reference::with_tag(
                registry,
                repository,
                tag.clone().unwrap_or_else(|| "latest".to_owned()),
            ),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for Reference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// `sha256:` followed by 64 lowercase hex digits.
pub(crate) fn validate_digest(digest: &str) -> Result<(), String> {
    let Some(hex) = digest.strip_prefix(SHA256) else {
        return Err(format!(
            "digest {digest:?} is not a sha256 digest (sha256:<64 hex digits>)"
        ));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "digest {digest:?} must be sha256: followed by 64 lowercase hex digits"
        ));
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn validate_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG
        && tag
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be 1 to {MAX_TAG} of letters, digits, '_', '.', '-' (not starting \
             with '.' or '-')"
        ))
    }
}

/// A host name or IPv4 address (or `[IPv6]`) with an optional port. It must look like a host
/// (a '.', a port, or `localhost`), so `org/plugin` is not read as registry `org`.
fn validate_registry(registry: &str) -> Result<(), String> {
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, tail)) if !ip.is_empty() => (ip, tail.strip_prefix(':')),
            _ => {
                return Err(format!(
                    "registry {registry:?}: unterminated [IPv6] address"
                ));
            }
        }
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        }
    };
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("registry {registry:?}: the port must be a number"));
    }
    let host_ok = !host.is_empty()
        && if registry.starts_with('[') {
            host.bytes().all(|b| b.is_ascii_hexdigit() || b == b':')
        } else {
            host.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
        };
    if !host_ok {
        return Err(format!(
            "registry {registry:?} is not a host name or address"
        ));
    }
    if !(host.contains('.') || port.is_some() || host == "localhost" || registry.starts_with('[')) {
        return Err(format!(
            "{registry:?} does not look like a registry (no '.', no port, not localhost): write \
             the registry explicitly, e.g. docker.io/{registry}/..."
        ));
    }
    Ok(())
}

/// Path components of `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`, separated by `/`.
fn validate_repository(repository: &str) -> Result<(), String> {
    let component_ok = |c: &str| {
        let bytes = c.as_bytes();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return false;
        };
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !alnum(first) || !alnum(last) {
            return false;
        }
        // Separators between alphanumerics: one '.', one or two '_', or any number of '-'.
        let mut run = String::new();
        for &b in bytes {
            if alnum(&b) {
                if !(run.is_empty()
                    || run == "."
                    || run == "_"
                    || run == "__"
                    || run.bytes().all(|r| r == b'-'))
                {
                    return false;
                }
                run.clear();
            } else if matches!(b, b'.' | b'_' | b'-') {
                run.push(char::from(b));
            } else {
                return false;
            }
        }
        true
    };
    if repository.is_empty() || !repository.split('/').all(component_ok) {
        return Err(format!(
            "repository {repository:?} must be lowercase path components of letters and digits, \
             joined by '.', '_', '__' or '-', separated by '/'"
        ));
    }
    Ok(())
}
