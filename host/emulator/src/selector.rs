//! Label and field selectors, parsed and matched as kube-apiserver does.

use crate::resources::ResourceInfo;
use crate::status::ApiError;
use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` (all requirements must hold).
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelSelector(Vec<LabelReq>);

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, term: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '(' in {term:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn check_key(key: &str, term: &str) -> Result<String, ApiError> {
    let key = key.trim();
    let errors = conclave_core::validation::qualified_name_errors(key);
    if key.is_empty() || !errors.is_empty() {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid label key {key:?}: {} (in {term:?})",
            errors.join("; ")
        )));
    }
    Ok(key.to_string())
}

impl LabelSelector {
    /// Parses a selector string; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_terms(s) {
            let t = term.trim();
            if t.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: empty term in {s:?}"
                )));
            }
            let req = if let Some(k) = t.strip_prefix('!') {
                LabelReq::NotExists(check_key(k, t)?)
            } else if let Some((k, v)) = t.split_once("!=") {
                LabelReq::NotEq(check_key(k, t)?, v.trim().to_string())
            } else if let Some((k, v)) = t.split_once("==") {
                LabelReq::Eq(check_key(k, t)?, v.trim().to_string())
            } else if let Some((k, v)) = t.split_once('=') {
                LabelReq::Eq(check_key(k, t)?, v.trim().to_string())
            } else if let Some(idx) = t.find(" notin ") {
                LabelReq::NotIn(check_key(&t[..idx], t)?, parse_set(&t[idx + 7..], t)?)
            } else if let Some(idx) = t.find(" in ") {
                LabelReq::In(check_key(&t[..idx], t)?, parse_set(&t[idx + 4..], t)?)
            } else {
                LabelReq::Exists(check_key(t, t)?)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object with these labels matches.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: (field, wanted value, negated).
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    /// Parses a field selector, rejecting fields the resource does not support.
    pub fn parse(s: &str, res: &ResourceInfo) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in s.split(',') {
            let t = term.trim();
            let (field, value, negated) = if let Some((f, v)) = t.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = t.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = t.split_once('=') {
                (f, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{t}'"
                )));
            };
            let field = field.trim();
            if !res.supports_field(field) {
                return Err(ApiError::bad_request(format!(
                    "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )));
            }
            reqs.push((field.to_string(), value.trim().to_string(), negated));
        }
        Ok(Self(reqs))
    }

    /// Whether an object matches; absent fields compare as the empty string.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, wanted, negated)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match obj.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *wanted) != *negated
        })
    }
}

/// Label and field selectors together.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether an object passes both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Whether neither selector restricts anything.
    pub fn is_empty(&self) -> bool {
        self.labels.0.is_empty() && self.fields.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{LEASE_CANDIDATES, RESOURCES};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({ "metadata": { "name": "a", "namespace": "ns", "labels": labels }, "spec": { "leaseName": "l" } })
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({ "app": "x", "tier": "db" }));
        let cases = [
            ("app=x", true),
            ("app==x", true),
            ("app!=x", false),
            ("app!=y", true),
            ("missing!=y", true),
            ("app in (x, y)", true),
            ("app in (y)", false),
            ("app notin (y)", true),
            ("missing notin (y)", true),
            ("app notin (x)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=x,tier=db", true),
            ("app=x,tier in (web,api)", false),
            ("", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selector_is_bad_request() {
        let err = LabelSelector::parse("app in x").unwrap_err();
        assert_eq!(err.code.as_u16(), 400);
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn field_selectors() {
        let res = &RESOURCES[LEASE_CANDIDATES];
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("spec.leaseName=l", res)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("spec.leaseName!=l", res)
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.name=a,metadata.namespace=ns", res)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name==b", res)
                .unwrap()
                .matches(&o)
        );
        let err = FieldSelector::parse("spec.holderIdentity=x", res).unwrap_err();
        assert_eq!(err.code.as_u16(), 400);
        assert_eq!(
            err.message,
            r#""spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
    }
}
