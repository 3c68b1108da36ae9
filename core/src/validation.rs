//! Server-side validation of Lease and LeaseCandidate, reproducing kube-apiserver's rules
//! (`pkg/apis/coordination/validation`, spec §2) with the same field paths and messages.
//!
//! One implementation serves the emulator (which rejects with 422), the candidate library (which
//! refuses bad input before sending it) and the controller (which ignores invalid candidates).

use crate::strategy::OLDEST_EMULATION_VERSION;
use crate::version::Version;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// The kind of a field error, matching Kubernetes' `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required field is missing (`FieldValueRequired`).
    Required,
    /// The value is malformed (`FieldValueInvalid`).
    Invalid,
    /// The value is not one of the supported values (`FieldValueNotSupported`).
    NotSupported,
    /// The field may not be set here (`FieldValueForbidden`).
    Forbidden,
}

impl FieldErrorKind {
    /// The `reason` Kubernetes puts in a `StatusCause` for this kind.
    #[must_use]
    pub const fn cause_reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One problem with one field, as kube-apiserver reports it in a 422 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// What is wrong.
    pub kind: FieldErrorKind,
    /// The JSON path of the field, e.g. `spec.binaryVersion`.
    pub path: String,
    /// The offending value, rendered as Kubernetes renders it (quoted strings), if any.
    pub value: Option<String>,
    /// The explanation.
    pub detail: String,
}

impl FieldError {
    fn required(path: &str, detail: &str) -> Self {
        Self {
            kind: FieldErrorKind::Required,
            path: path.into(),
            value: None,
            detail: detail.into(),
        }
    }

    fn invalid(path: &str, value: String, detail: String) -> Self {
        Self {
            kind: FieldErrorKind::Invalid,
            path: path.into(),
            value: Some(value),
            detail,
        }
    }

    /// The message without the path, as it appears in a `StatusCause`.
    #[must_use]
    pub fn message(&self) -> String {
        let mut message = String::from(match self.kind {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
        });
        if let Some(value) = &self.value {
            message.push_str(": ");
            message.push_str(value);
        }
        if !self.detail.is_empty() {
            message.push_str(": ");
            message.push_str(&self.detail);
        }
        message
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message())
    }
}

/// Joins errors the way kube-apiserver builds an `Invalid` status message:
/// `Kind.group "name" is invalid: <err>` or `...: [<err>, <err>]`.
#[must_use]
pub fn invalid_message(qualified_kind: &str, name: &str, errors: &[FieldError]) -> String {
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let body = match rendered.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    format!("{qualified_kind} {name:?} is invalid: {body}")
}

fn quote(value: &str) -> String {
    format!("{value:?}")
}

fn regex_error(msg: &str, regex: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    out.push_str(" (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{regex}')"));
    out
}

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn matches_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && is_lower_alnum(bytes[0])
        && is_lower_alnum(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-')
}

/// Problems with `value` as an RFC 1123 label (namespace names), as apimachinery words them.
#[must_use]
pub fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !matches_dns1123_label(value) {
        errors.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "123-abc"],
        ));
    }
    errors
}

/// Problems with `value` as an RFC 1123 subdomain (Lease names, strategy prefixes).
#[must_use]
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    subdomain_errors(value, "characters")
}

/// [`dns1123_subdomain_errors`], with the length limit counted in `unit`: kube-apiserver v1.37
/// says "characters" for object names but "bytes" for a label key's prefix.
fn subdomain_errors(value: &str, unit: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} {unit}"
        ));
    }
    if value.is_empty() || !value.split('.').all(matches_dns1123_label) {
        errors.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errors
}

/// Problems with `value` as a ConfigMap key, the rule LeaseCandidate names follow.
#[must_use]
pub fn config_map_key_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if value.is_empty() || !value.bytes().all(allowed) {
        errors.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errors.push("must not be '.'".into());
    } else if value == ".." {
        errors.push("must not be '..'".into());
    } else if value.starts_with("..") {
        errors.push("must not start with '..'".into());
    }
    errors
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

fn matches_qualified_name_part(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|&b| inner(b))
}

/// Problems with `value` as a qualified name (`[prefix/]name`, the label-key rule).
#[must_use]
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".into());
            } else {
                errors.extend(
                    subdomain_errors(prefix, "bytes")
                        .into_iter()
                        .map(|msg| format!("prefix part {msg}")),
                );
            }
            *name
        }
        _ => {
            errors.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_REGEX, &["MyName", "my.name", "123-abc"])
            ));
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".into());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errors.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} bytes"
        ));
    }
    if !matches_qualified_name_part(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_REGEX,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errors
}

/// Validates a coordinated lease strategy (`ValidateCoordinatedLeaseStrategy`).
///
/// `path` is the path of the strategy field itself; like upstream, errors are reported at
/// `<path>.strategy`.
#[must_use]
pub fn validate_strategy(strategy: &str, path: &str) -> Vec<FieldError> {
    let child = format!("{path}.strategy");
    if !strategy.contains('/') {
        if strategy == OLDEST_EMULATION_VERSION {
            return Vec::new();
        }
        return vec![FieldError {
            kind: FieldErrorKind::NotSupported,
            path: child,
            value: Some(quote(strategy)),
            detail: format!("supported values: {}", quote(OLDEST_EMULATION_VERSION)),
        }];
    }
    qualified_name_errors(strategy)
        .into_iter()
        .map(|msg| FieldError::invalid(&child, quote(strategy), msg))
        .collect()
}

/// The metadata fields validation looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaFields<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.labels`.
    pub labels: &'a [(&'a str, &'a str)],
    /// `metadata.annotations` keys.
    pub annotation_keys: &'a [&'a str],
}

fn validate_meta(meta: &MetaFields<'_>, name_rule: fn(&str) -> Vec<String>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if meta.name.is_empty() {
        errors.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        errors.extend(
            name_rule(meta.name)
                .into_iter()
                .map(|msg| FieldError::invalid("metadata.name", quote(meta.name), msg)),
        );
    }
    if meta.namespace.is_empty() {
        errors.push(FieldError::required("metadata.namespace", ""));
    } else {
        errors.extend(
            dns1123_label_errors(meta.namespace)
                .into_iter()
                .map(|msg| FieldError::invalid("metadata.namespace", quote(meta.namespace), msg)),
        );
    }
    for (key, value) in meta.labels {
        errors.extend(
            qualified_name_errors(key)
                .into_iter()
                .map(|msg| FieldError::invalid("metadata.labels", quote(key), msg)),
        );
        errors.extend(
            label_value_errors(value)
                .into_iter()
                .map(|msg| FieldError::invalid("metadata.labels", quote(value), msg)),
        );
    }
    for key in meta.annotation_keys {
        errors.extend(
            qualified_name_errors(&key.to_ascii_lowercase())
                .into_iter()
                .map(|msg| FieldError::invalid("metadata.annotations", quote(key), msg)),
        );
    }
    errors
}

fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errors.push(format!("must be no more than {LABEL_VALUE_MAX} bytes"));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// The LeaseCandidate spec fields validation looks at; absent strings are empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseCandidateFields<'a> {
    /// `spec.leaseName`.
    pub lease_name: &'a str,
    /// `spec.binaryVersion`.
    pub binary_version: &'a str,
    /// `spec.emulationVersion`.
    pub emulation_version: &'a str,
    /// `spec.strategy`.
    pub strategy: &'a str,
}

/// Validates a LeaseCandidate spec (`ValidateLeaseCandidateSpec`).
#[must_use]
pub fn validate_lease_candidate_spec(spec: &LeaseCandidateFields<'_>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.lease_name.is_empty() {
        errors.push(FieldError::required("spec.leaseName", ""));
    }
    let zero = Version::new(0, 0, 0);
    let mut emulation = zero.clone();
    if !spec.emulation_version.is_empty() {
        match Version::parse_strict(spec.emulation_version) {
            Ok(v) => emulation = v,
            Err(_) => errors.push(FieldError::invalid(
                "spec.emulationVersion",
                quote(spec.emulation_version),
                "must be a valid semantic version".into(),
            )),
        }
    }
    let mut binary = zero.clone();
    if spec.binary_version.is_empty() {
        errors.push(FieldError::required("spec.binaryVersion", ""));
    } else {
        match Version::parse_strict(spec.binary_version) {
            Ok(v) => binary = v,
            Err(_) => errors.push(FieldError::invalid(
                "spec.binaryVersion",
                quote(spec.binary_version),
                "must be a valid semantic version".into(),
            )),
        }
    }
    if !spec.binary_version.is_empty() && !spec.emulation_version.is_empty() && binary < emulation {
        errors.push(FieldError::invalid(
            "spec.binaryVersion",
            quote(spec.binary_version),
            "must be greater than or equal to `emulationVersion`".into(),
        ));
    }
    if spec.strategy.is_empty() {
        errors.push(FieldError::required("spec.strategy", ""));
    } else {
        if spec.strategy == OLDEST_EMULATION_VERSION && emulation == zero {
            errors.push(FieldError::required(
                "spec.emulationVersion",
                "must be specified when `strategy` is 'OldestEmulationVersion'",
            ));
        }
        errors.extend(validate_strategy(spec.strategy, "spec.strategy"));
    }
    errors
}

/// Validates a whole LeaseCandidate on create (`ValidateLeaseCandidate`).
#[must_use]
pub fn validate_lease_candidate(
    meta: &MetaFields<'_>,
    spec: &LeaseCandidateFields<'_>,
) -> Vec<FieldError> {
    let mut errors = validate_meta(meta, config_map_key_errors);
    errors.extend(validate_lease_candidate_spec(spec));
    errors
}

/// Validates a LeaseCandidate update: everything a create checks, plus the immutable `leaseName`.
#[must_use]
pub fn validate_lease_candidate_update(
    meta: &MetaFields<'_>,
    old: &LeaseCandidateFields<'_>,
    new: &LeaseCandidateFields<'_>,
) -> Vec<FieldError> {
    let mut errors = validate_lease_candidate(meta, new);
    if old.lease_name != new.lease_name {
        errors.push(FieldError::invalid(
            "spec.leaseName",
            quote(new.lease_name),
            "field is immutable".into(),
        ));
    }
    errors
}

/// The Lease spec fields validation looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseFields<'a> {
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    pub lease_transitions: Option<i32>,
    /// `spec.strategy`.
    pub strategy: Option<&'a str>,
    /// `spec.preferredHolder`.
    pub preferred_holder: Option<&'a str>,
}

/// Validates a Lease spec (`ValidateLeaseSpec`).
#[must_use]
pub fn validate_lease_spec(spec: &LeaseFields<'_>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(duration) = spec.lease_duration_seconds.filter(|d| *d <= 0) {
        errors.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            format!("{duration}"),
            "must be greater than 0".into(),
        ));
    }
    if let Some(transitions) = spec.lease_transitions.filter(|t| *t < 0) {
        errors.push(FieldError::invalid(
            "spec.leaseTransitions",
            format!("{transitions}"),
            "must be greater than or equal to 0".into(),
        ));
    }
    if let Some(strategy) = spec.strategy {
        errors.extend(validate_strategy(strategy, "spec.strategy"));
    }
    let has_strategy = spec.strategy.is_some_and(|s| !s.is_empty());
    if spec.preferred_holder.is_some_and(|p| !p.is_empty()) && !has_strategy {
        errors.push(FieldError {
            kind: FieldErrorKind::Forbidden,
            path: "spec.preferredHolder".into(),
            value: None,
            detail: "may only be specified if `strategy` is defined".into(),
        });
    }
    errors
}

/// Validates a whole Lease (`ValidateLease`; updates run the same rules).
#[must_use]
pub fn validate_lease(meta: &MetaFields<'_>, spec: &LeaseFields<'_>) -> Vec<FieldError> {
    let mut errors = validate_meta(meta, dns1123_subdomain_errors);
    errors.extend(validate_lease_spec(spec));
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate<'a>(
        binary: &'a str,
        emulation: &'a str,
        strategy: &'a str,
    ) -> LeaseCandidateFields<'a> {
        LeaseCandidateFields {
            lease_name: "kube-scheduler",
            binary_version: binary,
            emulation_version: emulation,
            strategy,
        }
    }

    fn paths(errors: &[FieldError]) -> Vec<(&str, FieldErrorKind)> {
        errors.iter().map(|e| (e.path.as_str(), e.kind)).collect()
    }

    #[test]
    fn candidate_spec_rules() {
        use FieldErrorKind::*;
        let oev = OLDEST_EMULATION_VERSION;
        let table: &[(LeaseCandidateFields<'_>, &[(&str, FieldErrorKind)])] = &[
            (candidate("1.31.0", "1.30.0", oev), &[]),
            (candidate("1.31.0", "", "example.com/foo"), &[]),
            (
                candidate("1.30.0", "1.31.0", oev),
                &[("spec.binaryVersion", Invalid)],
            ),
            (
                candidate("", "1.31.0", oev),
                &[("spec.binaryVersion", Required)],
            ),
            (
                candidate("1.30.1.6", "1.30.0", oev),
                &[
                    ("spec.binaryVersion", Invalid),
                    ("spec.binaryVersion", Invalid),
                ],
            ),
            (
                candidate("1.31.0", "", oev),
                &[("spec.emulationVersion", Required)],
            ),
            (
                candidate("1.31.0", "0.0.0", oev),
                &[("spec.emulationVersion", Required)],
            ),
            (
                candidate("1.31.0", "1.31.0", ""),
                &[("spec.strategy", Required)],
            ),
            (
                candidate("1.31.0", "1.31.0", "foobar"),
                &[("spec.strategy.strategy", NotSupported)],
            ),
            (
                candidate("1.31.0", "1.31.0", "example.com/foobar/toomanyslashes"),
                &[("spec.strategy.strategy", Invalid)],
            ),
            (
                LeaseCandidateFields {
                    lease_name: "",
                    ..candidate("1.31.0", "1.31.0", oev)
                },
                &[("spec.leaseName", Required)],
            ),
        ];
        for (spec, want) in table {
            assert_eq!(
                paths(&validate_lease_candidate_spec(spec)),
                *want,
                "{spec:?}"
            );
        }
    }

    #[test]
    fn candidate_names_follow_the_config_map_key_rule() {
        for ok in ["host_1234-ABCD", "a.b", "x"] {
            assert!(config_map_key_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["", ".", "..", "..a", "a/b", "has space"] {
            assert!(!config_map_key_errors(bad).is_empty(), "{bad}");
        }
        let meta = MetaFields {
            name: "bad/name",
            namespace: "kube-system",
            ..Default::default()
        };
        let errors = validate_lease_candidate(
            &meta,
            &candidate("1.31.0", "1.31.0", OLDEST_EMULATION_VERSION),
        );
        assert_eq!(paths(&errors), [("metadata.name", FieldErrorKind::Invalid)]);
    }

    #[test]
    fn lease_name_is_immutable_on_update() {
        let meta = MetaFields {
            name: "c",
            namespace: "default",
            ..Default::default()
        };
        let old = candidate("1.31.0", "1.31.0", OLDEST_EMULATION_VERSION);
        let new = LeaseCandidateFields {
            lease_name: "other",
            ..old
        };
        let errors = validate_lease_candidate_update(&meta, &old, &new);
        assert_eq!(
            errors[0].to_string(),
            "spec.leaseName: Invalid value: \"other\": field is immutable"
        );
    }

    #[test]
    fn lease_spec_rules() {
        use FieldErrorKind::*;
        let table: &[(LeaseFields<'_>, &[(&str, FieldErrorKind)])] = &[
            (LeaseFields::default(), &[]),
            (
                LeaseFields {
                    lease_duration_seconds: Some(0),
                    ..Default::default()
                },
                &[("spec.leaseDurationSeconds", Invalid)],
            ),
            (
                LeaseFields {
                    lease_transitions: Some(-1),
                    ..Default::default()
                },
                &[("spec.leaseTransitions", Invalid)],
            ),
            (
                LeaseFields {
                    preferred_holder: Some("a"),
                    ..Default::default()
                },
                &[("spec.preferredHolder", Forbidden)],
            ),
            (
                LeaseFields {
                    preferred_holder: Some(""),
                    ..Default::default()
                },
                &[],
            ),
            (
                LeaseFields {
                    strategy: Some("example.com/x"),
                    preferred_holder: Some("a"),
                    ..Default::default()
                },
                &[],
            ),
            (
                LeaseFields {
                    strategy: Some(""),
                    ..Default::default()
                },
                &[("spec.strategy.strategy", NotSupported)],
            ),
        ];
        for (spec, want) in table {
            assert_eq!(paths(&validate_lease_spec(spec)), *want, "{spec:?}");
        }
    }

    #[test]
    fn messages_match_kube_apiserver_wording() {
        let errors = validate_strategy("foobar", "spec.strategy");
        assert_eq!(
            errors[0].to_string(),
            "spec.strategy.strategy: Unsupported value: \"foobar\": supported values: \"OldestEmulationVersion\""
        );
        let errors =
            validate_lease_candidate_spec(&candidate("1.30.0", "1.31.0", OLDEST_EMULATION_VERSION));
        assert_eq!(
            invalid_message("LeaseCandidate.coordination.k8s.io", "c1", &errors),
            "LeaseCandidate.coordination.k8s.io \"c1\" is invalid: spec.binaryVersion: Invalid value: \"1.30.0\": must be greater than or equal to `emulationVersion`"
        );
    }
}
