//! Semantic versions parsed the way Kubernetes parses them.
//!
//! Kubernetes uses `github.com/blang/semver/v4`: API validation uses the strict `Parse`
//! (exactly `MAJOR.MINOR.PATCH[-pre][+build]`, no `v`), while the election controller uses the
//! tolerant `ParseTolerant` (surrounding spaces, a `v` prefix, leading zeros and short forms such as
//! `1.30` are accepted). Both are reproduced here so that every crate, including `no_std` plugins,
//! agrees with kube-apiserver on what a version means.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;

/// A parsed semantic version.
///
/// Equality and ordering follow semver precedence: build metadata is ignored, a pre-release sorts
/// below its release, numeric pre-release identifiers compare numerically and below alphanumeric ones.
#[derive(Debug, Clone, Eq)]
pub struct Version {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version.
    pub patch: u64,
    /// Pre-release identifiers (`1.2.3-alpha.1` has `alpha` and `1`).
    pub pre: Vec<PreRelease>,
    /// Build metadata identifiers; kept for display, ignored by comparisons.
    pub build: Vec<String>,
}

/// One dot-separated pre-release identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreRelease {
    /// A purely numeric identifier, compared numerically.
    Numeric(u64),
    /// An identifier with at least one non-digit, compared as ASCII text.
    Alphanumeric(String),
}

/// Why a string is not a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    /// The string is empty.
    Empty,
    /// The string does not have exactly three numeric parts.
    WrongPartCount,
    /// A numeric part is not a number or has a leading zero.
    InvalidNumber(String),
    /// A pre-release identifier is empty, has a leading zero or a character outside `[0-9A-Za-z-]`.
    InvalidPreRelease(String),
    /// A build identifier is empty or has a character outside `[0-9A-Za-z-]`.
    InvalidBuild(String),
    /// A short form such as `1.2-rc.1` carries pre-release or build metadata, which blang refuses.
    ShortWithMetadata,
}

impl fmt::Display for VersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("version string empty"),
            Self::WrongPartCount => f.write_str("no major.minor.patch elements found"),
            Self::InvalidNumber(part) => write!(f, "invalid numeric part {part:?}"),
            Self::InvalidPreRelease(part) => write!(f, "invalid pre-release identifier {part:?}"),
            Self::InvalidBuild(part) => write!(f, "invalid build metadata identifier {part:?}"),
            Self::ShortWithMetadata => {
                f.write_str("short version cannot contain pre-release or build metadata")
            }
        }
    }
}

impl core::error::Error for VersionError {}

impl Version {
    /// Creates a release version with no pre-release or build metadata.
    #[must_use]
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
            pre: Vec::new(),
            build: Vec::new(),
        }
    }

    /// Parses like blang `semver.Parse`, the rule kube-apiserver validates LeaseCandidate versions with.
    pub fn parse_strict(input: &str) -> Result<Self, VersionError> {
        if input.is_empty() {
            return Err(VersionError::Empty);
        }
        let (rest, build) = match input.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (input, None),
        };
        let (core_part, pre) = match rest.split_once('-') {
            Some((core_part, pre)) => (core_part, Some(pre)),
            None => (rest, None),
        };
        let mut numbers = core_part.split('.');
        let (Some(major), Some(minor), Some(patch), None) = (
            numbers.next(),
            numbers.next(),
            numbers.next(),
            numbers.next(),
        ) else {
            return Err(VersionError::WrongPartCount);
        };
        Ok(Self {
            major: parse_number(major)?,
            minor: parse_number(minor)?,
            patch: parse_number(patch)?,
            pre: match pre {
                Some(pre) => pre
                    .split('.')
                    .map(parse_pre_release)
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            },
            build: match build {
                Some(build) => build
                    .split('.')
                    .map(parse_build)
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            },
        })
    }

    /// Parses like blang `semver.ParseTolerant`, the rule the election controller compares with:
    /// trims spaces, drops one `v` prefix, strips leading zeros and fills `1` or `1.2` with zeros.
    pub fn parse_tolerant(input: &str) -> Result<Self, VersionError> {
        let trimmed = input.trim();
        let trimmed = trimmed.strip_prefix('v').unwrap_or(trimmed);
        // Nearly every version a cluster reports is a plain `MAJOR.MINOR.PATCH` that the tolerant
        // rewriting below would leave unchanged: parse it without allocating.
        match plain_release(trimmed) {
            Some(version) => Ok(version),
            None => Self::parse_tolerant_rewritten(trimmed),
        }
    }

    /// blang's tolerant rewriting (leading zeros stripped, short forms padded), then the strict
    /// parse; `trimmed` has no surrounding spaces or `v` prefix.
    fn parse_tolerant_rewritten(trimmed: &str) -> Result<Self, VersionError> {
        let mut parts: Vec<String> = trimmed.splitn(3, '.').map(strip_leading_zeros).collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|last| last.contains(['+', '-'])) {
                return Err(VersionError::ShortWithMetadata);
            }
            parts.resize(3, "0".to_string());
        }
        Self::parse_strict(&parts.join("."))
    }

    /// The version without pre-release or build metadata, as Kubernetes components publish it.
    #[must_use]
    pub fn finalized(&self) -> Self {
        Self::new(self.major, self.minor, self.patch)
    }
}

/// `MAJOR.MINOR.PATCH` with no pre-release, build metadata or leading zeros, which both of blang's
/// parsers read the same way; `None` for anything else (including numbers past `u64`), which the
/// caller then parses in full.
fn plain_release(input: &str) -> Option<Version> {
    // One pass over the bytes: this runs for every version of every candidate of every election.
    let mut parts = [0u64; 3];
    let mut part = 0;
    let mut digits = 0;
    let mut leading_zero = false;
    for byte in input.bytes() {
        match byte {
            b'0'..=b'9' => {
                if leading_zero {
                    return None;
                }
                leading_zero = digits == 0 && byte == b'0';
                digits += 1;
                parts[part] = parts[part]
                    .checked_mul(10)?
                    .checked_add(u64::from(byte - b'0'))?;
            }
            b'.' if digits > 0 && part < 2 => {
                part += 1;
                digits = 0;
                leading_zero = false;
            }
            _ => return None,
        }
    }
    (part == 2 && digits > 0).then(|| Version::new(parts[0], parts[1], parts[2]))
}

/// blang's leading-zero trimming for one dot-separated part of a tolerant version.
fn strip_leading_zeros(part: &str) -> String {
    if part.len() <= 1 {
        return part.to_string();
    }
    let stripped = part.trim_start_matches('0');
    if stripped.starts_with(|c: char| c.is_ascii_digit()) {
        stripped.to_string()
    } else {
        let mut padded = String::from("0");
        padded.push_str(stripped);
        padded
    }
}

fn parse_number(part: &str) -> Result<u64, VersionError> {
    let invalid = || VersionError::InvalidNumber(part.to_string());
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    if part.len() > 1 && part.starts_with('0') {
        return Err(invalid());
    }
    part.parse().map_err(|_| invalid())
}

fn is_identifier(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn parse_pre_release(part: &str) -> Result<PreRelease, VersionError> {
    if !is_identifier(part) {
        return Err(VersionError::InvalidPreRelease(part.to_string()));
    }
    if part.bytes().all(|b| b.is_ascii_digit()) {
        if part.len() > 1 && part.starts_with('0') {
            return Err(VersionError::InvalidPreRelease(part.to_string()));
        }
        let number = part
            .parse()
            .map_err(|_| VersionError::InvalidPreRelease(part.to_string()))?;
        Ok(PreRelease::Numeric(number))
    } else {
        Ok(PreRelease::Alphanumeric(part.to_string()))
    }
}

fn parse_build(part: &str) -> Result<String, VersionError> {
    if is_identifier(part) {
        Ok(part.to_string())
    } else {
        Err(VersionError::InvalidBuild(part.to_string()))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PreRelease {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Numeric(a), Self::Numeric(b)) => a.cmp(b),
            (Self::Numeric(_), Self::Alphanumeric(_)) => Ordering::Less,
            (Self::Alphanumeric(_), Self::Numeric(_)) => Ordering::Greater,
            (Self::Alphanumeric(a), Self::Alphanumeric(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for PreRelease {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for PreRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Numeric(n) => write!(f, "{n}"),
            Self::Alphanumeric(s) => f.write_str(s),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, pre) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            write!(f, "{pre}")?;
        }
        for (i, build) in self.build.iter().enumerate() {
            f.write_str(if i == 0 { "+" } else { "." })?;
            f.write_str(build)?;
        }
        Ok(())
    }
}

impl core::str::FromStr for Version {
    type Err = VersionError;

    /// Parses strictly, as API validation does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_strict(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(s: &str) -> Version {
        Version::parse_strict(s).unwrap()
    }

    #[test]
    fn strict_accepts_what_kube_apiserver_accepts() {
        for ok in [
            "1.30.0",
            "0.0.0",
            "1.31.0-alpha.1",
            "1.31.0+build.7",
            "1.31.0-rc.0+sha.abc",
            "10.200.3000",
            "1.0.0-0A-.x",
        ] {
            assert!(Version::parse_strict(ok).is_ok(), "{ok} should parse");
        }
    }

    #[test]
    fn strict_rejects_what_kube_apiserver_rejects() {
        for bad in [
            "",
            "v1.30.0",
            "1.30",
            "1.30.1.6",
            "01.30.0",
            "1.030.0",
            "1.30.0-",
            "1.30.0-01",
            "1.30.0-a..b",
            "1.30.0+",
            "1.30.0+a_b",
            " 1.30.0",
            "1.x.0",
        ] {
            assert!(
                Version::parse_strict(bad).is_err(),
                "{bad} should not parse"
            );
        }
    }

    #[test]
    fn the_allocation_free_path_agrees_with_the_full_tolerant_parse() {
        for input in [
            "1.31.5",
            "0.0.0",
            "1.0.10",
            "10.200.3000",
            "01.2.3",
            "1.02.3",
            "1.2",
            "1",
            "1.2.3.4",
            "1..3",
            "1.2.3-rc.1",
            "1.2.3+build",
            "a.b.c",
            "18446744073709551615.0.0",
            "18446744073709551616.0.0",
            "",
        ] {
            let trimmed = input.trim().strip_prefix('v').unwrap_or(input.trim());
            assert_eq!(
                Version::parse_tolerant(input),
                Version::parse_tolerant_rewritten(trimmed),
                "{input:?}"
            );
        }
    }

    #[test]
    fn tolerant_accepts_v_prefix_spaces_short_forms_and_leading_zeros() {
        assert_eq!(
            Version::parse_tolerant(" v1.30 ").unwrap(),
            Version::new(1, 30, 0)
        );
        assert_eq!(Version::parse_tolerant("2").unwrap(), Version::new(2, 0, 0));
        assert_eq!(
            Version::parse_tolerant("01.002.0003").unwrap(),
            Version::new(1, 2, 3)
        );
        assert_eq!(
            Version::parse_tolerant("1.2.3-beta.1").unwrap().pre,
            alloc::vec![
                PreRelease::Alphanumeric("beta".into()),
                PreRelease::Numeric(1)
            ]
        );
        assert_eq!(
            Version::parse_tolerant("1.2-rc"),
            Err(VersionError::ShortWithMetadata)
        );
        assert!(Version::parse_tolerant("").is_err());
        assert!(Version::parse_tolerant("banana").is_err());
    }

    #[test]
    fn precedence_follows_semver() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.2.0",
            "1.10.0",
            "2.0.0",
        ];
        for pair in ordered.windows(2) {
            assert!(
                strict(pair[0]) < strict(pair[1]),
                "{} < {}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn build_metadata_is_ignored_by_comparison_but_kept_for_display() {
        assert_eq!(strict("1.31.0+a"), strict("1.31.0+b"));
        assert_eq!(strict("1.31.0-rc.1+x.y").to_string(), "1.31.0-rc.1+x.y");
        assert_eq!(strict("1.31.0-rc.1+x").finalized().to_string(), "1.31.0");
    }
}
