//! Kubernetes `Status` errors: every failed request is answered with one, carrying the same
//! reason, code and message text kube-apiserver uses.

use crate::resources::ResourceInfo;
use axum::http::StatusCode;
use conclave_core::validation::FieldError;
use serde_json::{Value, json};

/// A failed API request, rendered as a `metav1.Status` body.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub code: StatusCode,
    /// `Status.reason`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, if any.
    pub details: Option<Value>,
    /// Seconds a client should wait before retrying (`Retry-After`), for 429.
    pub retry_after: Option<u64>,
}

fn details(res: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": res.plural });
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

impl ApiError {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 404 NotFound for an object.
    pub fn not_found(res: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{} \"{name}\" not found", res.group_resource()),
        );
        e.details = Some(details(res, name));
        e
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn path_not_found() -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 404 NotFound for a resource the emulator does not serve (a ConfigMap, a Deployment, a
    /// custom resource): kube-apiserver's answer to an unknown resource, followed by what the
    /// emulator serves, since a component pointed at it for a resource a real control plane
    /// has would otherwise only see "could not find". Its watch retries log this message.
    pub fn not_served() -> Self {
        let mut e = Self::path_not_found();
        e.message = format!(
            "{}: the Conclave emulator serves only {}; for other resources (ConfigMaps, \
             Deployments, custom resources), use a real control plane",
            e.message,
            crate::resources::served_summary()
        );
        e
    }

    /// 409 AlreadyExists.
    pub fn already_exists(res: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.group_resource()),
        );
        e.details = Some(details(res, name));
        e
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(res: &ResourceInfo, name: &str) -> Self {
        Self::conflict_with(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom explanation.
    pub fn conflict_with(res: &ResourceInfo, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.group_resource()
            ),
        );
        e.details = Some(details(res, name));
        e
    }

    /// 409 Conflict for server-side apply field-manager conflicts, worded as kube-apiserver
    /// words them (one API version per resource here, so no "using <version>").
    pub fn apply_conflict(conflicts: &[(String, String)]) -> Self {
        let message = match conflicts {
            [(manager, field)] => {
                format!("Apply failed with 1 conflict: conflict with \"{manager}\": {field}")
            }
            many => {
                let mut by_manager: Vec<(&str, Vec<&str>)> = Vec::new();
                for (manager, field) in many {
                    match by_manager.iter_mut().find(|(m, _)| *m == manager) {
                        Some((_, fields)) => fields.push(field),
                        None => by_manager.push((manager, vec![field])),
                    }
                }
                let parts: Vec<String> = by_manager
                    .iter()
                    .map(|(manager, fields)| {
                        let list: Vec<String> = fields.iter().map(|f| format!("- {f}")).collect();
                        format!("conflicts with \"{manager}\":\n{}", list.join("\n"))
                    })
                    .collect();
                format!(
                    "Apply failed with {} conflicts: {}",
                    many.len(),
                    parts.join("\n")
                )
            }
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(manager, field)| {
                json!({ "reason": "FieldManagerConflict", "message": format!("conflict with \"{manager}\""), "field": field })
            })
            .collect();
        let mut e = Self::new(StatusCode::CONFLICT, "Conflict", message);
        e.details = Some(json!({ "causes": causes }));
        e
    }

    /// 409 Conflict from a failed delete precondition; kube-apiserver names the kind here.
    pub fn precondition_failed(res: &ResourceInfo, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified_kind()
            ),
        );
        let mut d = json!({ "name": name, "kind": res.kind });
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        e.details = Some(d);
        e
    }

    /// 422 Invalid from field errors.
    pub fn invalid(res: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_named(res, name, errors, &res.qualified_kind(), res.kind)
    }

    /// 422 Invalid raised by the generic registry (not the type's validation), which names the
    /// resource (`leases.coordination.k8s.io`) instead of the kind.
    pub fn invalid_by_registry(res: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_named(res, name, errors, &res.group_resource(), res.plural)
    }

    fn invalid_named(
        res: &ResourceInfo,
        name: &str,
        errors: &[FieldError],
        qualified: &str,
        kind: &str,
    ) -> Self {
        let message = conclave_core::validation::invalid_message(qualified, name, errors);
        let causes: Vec<Value> = errors
            .iter()
            .map(|fe| json!({ "reason": fe.kind.cause_reason(), "message": fe.message(), "field": fe.path }))
            .collect();
        let mut d = json!({ "name": name, "kind": kind, "causes": causes });
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        let mut e = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
        e.details = Some(d);
        e
    }

    /// 422 Invalid for request options (`ListOptions`, `PatchOptions`), which have no object.
    pub fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        let qualified = format!("{kind}.meta.k8s.io");
        let message = conclave_core::validation::invalid_message(&qualified, "", errors);
        let causes: Vec<Value> = errors
            .iter()
            .map(|fe| json!({ "reason": fe.kind.cause_reason(), "message": fe.message(), "field": fe.path }))
            .collect();
        let mut e = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
        e.details = Some(json!({ "group": "meta.k8s.io", "kind": kind, "causes": causes }));
        e
    }

    /// 422 for a JSON patch that cannot be applied (kube-apiserver does not say why).
    pub fn patch_rejected() -> Self {
        let mut e = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details = Some(json!({}));
        e
    }

    /// 405 MethodNotAllowed, for a verb a path does not serve (kube-apiserver's text does not
    /// name the method).
    pub fn method_not_allowed() -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 410 Gone: the requested resourceVersion is older than the kept history.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            StatusCode::GONE,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// 504 Timeout: a read asked for a resourceVersion the store did not reach within the
    /// freshness wait, worded as kube-apiserver's watch cache words it.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        );
        e.details = Some(json!({
            "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
            "retryAfterSeconds": 1,
        }));
        e.retry_after = Some(1);
        e
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type() -> Self {
        let mut e = Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "415: Unsupported Media Type",
        );
        e.details = Some(json!({}));
        e
    }

    /// 403 Forbidden for `verb` (as RBAC names it: `get`, `list`, ...) on `res` at cluster
    /// scope, injected by faults (RBAC refusing).
    pub fn forbidden(res: &ResourceInfo, verb: &str) -> Self {
        let mut e = Self::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{resource} is forbidden: User \"system:serviceaccount:test:test\" cannot {verb} \
                 resource \"{plural}\" in API group \"{group}\" at the cluster scope",
                resource = res.group_resource(),
                plural = res.plural,
                group = res.group,
            ),
        );
        e.details = Some(json!({ "group": res.group, "kind": res.plural }));
        e
    }

    /// 403 Forbidden for a delete of `default`, `kube-system` or `kube-public`, as
    /// kube-apiserver's NamespaceLifecycle admission refuses it.
    pub fn namespace_may_not_be_deleted(name: &str) -> Self {
        let mut e = Self::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
        );
        e.details = Some(json!({ "name": name, "kind": "namespaces" }));
        e
    }

    /// 500 InternalError, injected by faults.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = format!("Internal error occurred: {}", message.into());
        let mut e = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            message.clone(),
        );
        e.details = Some(json!({ "causes": [{ "message": message }] }));
        e
    }

    /// 429 TooManyRequests with a Retry-After, injected by faults.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.details = Some(json!({ "retryAfterSeconds": retry_after }));
        e.retry_after = Some(retry_after);
        e
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
