//! HTTP routing: one handler parses Kubernetes API paths and dispatches to discovery, the
//! store, patching and watches.

use crate::discovery;
use crate::faults::{Faults, Verb};
use crate::fields;
use crate::objects::{self, meta_str};
use crate::patch::{self, PatchType};
use crate::resources::{self, NAMESPACES, RESOURCES};
use crate::selector::{FieldSelector, Filter, LabelSelector};
use crate::status::ApiError;
use crate::store::{Commit, Deleted, Store, Writer};
use crate::table::{self, IncludeObject};
use crate::watch::{self, WatchControl, WatchRequest};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use conclave_core::validation::{FieldError, FieldErrorKind};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Shared state of the HTTP handlers.
pub(crate) struct AppState {
    /// The objects.
    pub store: Arc<Store>,
    /// Injected faults.
    pub faults: Faults,
    /// Cancelled on shutdown, ending watches.
    pub shutdown: CancellationToken,
    /// `host:port` the server listens on, for `/api`.
    pub address: String,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Longest watch when the client sets no `timeoutSeconds`.
    pub max_watch_timeout: Duration,
}

type Params = HashMap<String, String>;

fn json_response(code: StatusCode, body: &Value) -> Response {
    json_text_response(code, body.to_string())
}

/// A response with a body already serialised as JSON.
fn json_text_response(code: StatusCode, body: String) -> Response {
    let mut resp = (code, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// The single entry point for every request.
pub(crate) async fn handle(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params: Params = Query::<Params>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let path = uri.path().trim_end_matches('/').to_string();
    tracing::debug!(%method, path, query = uri.query().unwrap_or(""), "request");
    match route(&app, &method, &path, &params, &headers, &body).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(%method, path, code = e.code.as_u16(), reason = e.reason, message = e.message, "request failed");
            error_response(&e)
        }
    }
}

/// 400 for an integer query parameter that does not parse, worded as kube-apiserver's decoder
/// (Go's `strconv.ParseInt`) words it.
fn parse_int_error(value: &str) -> ApiError {
    ApiError::bad_request(format!(
        "strconv.ParseInt: parsing {value:?}: invalid syntax"
    ))
}

/// What a resource path names.
struct Target {
    res: usize,
    namespace: Option<String>,
    name: Option<String>,
    /// Whether the path names the object's status subresource (`.../NAME/status`).
    status: bool,
}

/// The object a write to a resource with a status subresource stores, from the `live` one and
/// the `written` one: a write to the status subresource changes only the status (with the
/// resourceVersion it names as precondition), a write to the object everything but the status,
/// as kube-apiserver's status strategies do.
fn scoped_write(live: &Value, mut written: Value, status: bool) -> Value {
    if status {
        let mut out = live.clone();
        out["status"] = written.get("status").cloned().unwrap_or(Value::Null);
        let rv = meta_str(&written, "resourceVersion").to_string();
        objects::meta_mut(&mut out).insert("resourceVersion".into(), json!(rv));
        out
    } else {
        match live.get("status") {
            Some(kept) => written["status"] = kept.clone(),
            None => {
                if let Some(obj) = written.as_object_mut() {
                    obj.remove("status");
                }
            }
        }
        written
    }
}

/// Parses the part of a path after `/api/v1` or `/apis/g/v`.
fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let find = |plural: &str| resources::find(group, version, plural);
    match rest {
        [plural] => Some(Target {
            res: find(plural)?,
            namespace: None,
            name: None,
            status: false,
        }),
        ["namespaces", ns, plural] if find(plural).is_some_and(|r| RESOURCES[r].namespaced) => {
            Some(Target {
                res: find(plural)?,
                namespace: Some((*ns).to_string()),
                name: None,
                status: false,
            })
        }
        [plural, name] => {
            let res = find(plural)?;
            (!RESOURCES[res].namespaced).then(|| Target {
                res,
                namespace: None,
                name: Some((*name).to_string()),
                status: false,
            })
        }
        ["namespaces", ns, plural, name] => {
            let res = find(plural)?;
            RESOURCES[res].namespaced.then(|| Target {
                res,
                namespace: Some((*ns).to_string()),
                name: Some((*name).to_string()),
                status: false,
            })
        }
        ["namespaces", ns, plural, name, "status"] => {
            let res = find(plural)?;
            (RESOURCES[res].namespaced && RESOURCES[res].status_subresource).then(|| Target {
                res,
                namespace: Some((*ns).to_string()),
                name: Some((*name).to_string()),
                status: true,
            })
        }
        _ => None,
    }
}

async fn route(
    app: &Arc<AppState>,
    method: &Method,
    path: &str,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let ok = |v: Value| Ok(json_response(StatusCode::OK, &v));
    let read_only = method == Method::GET || method == Method::HEAD;
    match segments.as_slice() {
        ["healthz" | "livez" | "readyz", ..] => return Ok((StatusCode::OK, "ok").into_response()),
        ["version"] if read_only => return ok(discovery::version()),
        ["api"] if read_only => return ok(discovery::core_versions(&app.address)),
        ["api", "v1"] if read_only => {
            return ok(discovery::resource_list("", "v1").expect("core v1 is served"));
        }
        ["apis"] if read_only => return ok(discovery::group_list()),
        ["apis", group] if read_only => {
            return discovery::group(group).map_or_else(|| Err(ApiError::path_not_found()), ok);
        }
        ["apis", group, version] if read_only => {
            return discovery::resource_list(group, version)
                .map_or_else(|| Err(ApiError::path_not_found()), ok);
        }
        ["openapi", "v3"] if read_only => return ok(discovery::openapi_index()),
        ["openapi", "v3", rest @ ..] if read_only => {
            return discovery::openapi_group_version(&rest.join("/"))
                .map_or_else(|| Err(ApiError::path_not_found()), ok);
        }
        _ => {}
    }
    let (target, watch_path) = match segments.as_slice() {
        ["api", "v1", "watch", rest @ ..] => (parse_target("", "v1", rest), true),
        ["api", "v1", rest @ ..] => (parse_target("", "v1", rest), false),
        ["apis", group, version, "watch", rest @ ..] => (parse_target(group, version, rest), true),
        ["apis", group, version, rest @ ..] => (parse_target(group, version, rest), false),
        _ => (None, false),
    };
    let target = target.ok_or_else(ApiError::not_served)?;
    let is_watch = watch_path || params.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.clone(), target.name.is_some()) {
        (Method::GET, false) if is_watch => Verb::Watch,
        (Method::GET, false) => Verb::List,
        (Method::GET, true) => Verb::Get,
        (Method::POST, false) => Verb::Create,
        (Method::PUT, true) => Verb::Update,
        (Method::PATCH, true) => Verb::Patch,
        (Method::DELETE, true) => Verb::Delete,
        (Method::DELETE, false) if target.res != NAMESPACES => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    };
    if target.status && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::method_not_allowed());
    }
    // kube-apiserver serves only list and watch on the all-namespaces path of a namespaced
    // resource: a create there has no namespace, and a delete there would empty every one.
    if matches!(verb, Verb::Create | Verb::DeleteCollection)
        && RESOURCES[target.res].namespaced
        && target.namespace.is_none()
    {
        return Err(ApiError::method_not_allowed());
    }
    // The object a request is about, for an injected conflict: the URL's, or a create's body's.
    let object_name = || match &target.name {
        Some(name) => name.clone(),
        None => serde_json::from_slice::<Value>(body)
            .map(|b| meta_str(&b, "name").to_string())
            .unwrap_or_default(),
    };
    app.faults
        .before_request(verb, &RESOURCES[target.res], object_name)
        .await?;
    let handler = Handler {
        app,
        params,
        headers,
        target,
    };
    match verb {
        Verb::Watch => handler.watch(),
        Verb::List => handler.list().await,
        Verb::Get => handler.get().await,
        Verb::Create => handler.create(body),
        Verb::Update => handler.update(body),
        Verb::Patch => handler.patch(body),
        Verb::Delete => handler.delete(body),
        Verb::DeleteCollection => handler.delete_collection(body),
    }
}

struct Handler<'a> {
    app: &'a Arc<AppState>,
    params: &'a Params,
    headers: &'a HeaderMap,
    target: Target,
}

impl Handler<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    fn ns(&self) -> &str {
        self.target.namespace.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or("")
    }

    fn filter(&self) -> Result<Filter, ApiError> {
        Ok(Filter {
            labels: LabelSelector::parse(self.param("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(
                self.param("fieldSelector").unwrap_or(""),
                &RESOURCES[self.target.res],
            )?,
        })
    }

    /// The table format the client asked for, if any.
    fn table(&self) -> Option<IncludeObject> {
        let accept = self
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        accept
            .contains("as=Table")
            .then(|| IncludeObject::parse(self.param("includeObject")))
    }

    /// The field manager of a write: the query parameter, else the User-Agent's program name.
    fn manager(&self) -> Result<String, ApiError> {
        if let Some(m) = self.param("fieldManager").filter(|m| !m.is_empty()) {
            if m.len() > 128 {
                return Err(ApiError::invalid_options(
                    "PatchOptions",
                    &[FieldError {
                        kind: FieldErrorKind::Invalid,
                        path: "fieldManager".into(),
                        value: Some(format!("{m:?}")),
                        detail: "must be less than 128 characters".into(),
                    }],
                ));
            }
            return Ok(m.to_string());
        }
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let prefix = ua.split('/').next().unwrap_or("").trim();
        Ok(if prefix.is_empty() {
            "unknown".into()
        } else {
            prefix.to_string()
        })
    }

    fn parse_body(&self, body: &[u8]) -> Result<Value, ApiError> {
        let content_type = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json");
        if content_type.contains("yaml") {
            return patch::parse_apply(body);
        }
        if content_type.contains("protobuf") || content_type.contains("cbor") {
            return Err(ApiError::unsupported_media_type());
        }
        serde_json::from_slice(body).map_err(|e| {
            let info = &RESOURCES[self.target.res];
            ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {e}",
                kind = info.kind,
                v = info.version
            ))
        })
    }

    /// Normalises a body and applies `fieldValidation` to the unknown fields it had.
    fn normalize(&self, body: Value, warnings: &mut Vec<String>) -> Result<Value, ApiError> {
        let (obj, unknown) = objects::normalize(self.target.res, body)?;
        match self.param("fieldValidation").unwrap_or("Warn") {
            "Strict" if !unknown.is_empty() => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|f| format!("unknown field \"{f}\""))
                    .collect();
                Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )))
            }
            "Ignore" | "Strict" => Ok(obj),
            "Warn" => {
                warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
                Ok(obj)
            }
            other => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got {other:?}"
            ))),
        }
    }

    fn respond(&self, code: StatusCode, obj: &Value, warnings: &[String]) -> Response {
        let body = match self.table() {
            Some(include) => table::object_table(self.target.res, obj, include),
            None => obj.clone(),
        };
        let mut resp = json_response(code, &body);
        for w in warnings {
            let text = format!("299 - {:?}", w);
            if let Ok(v) = HeaderValue::from_str(&text) {
                resp.headers_mut().append(header::WARNING, v);
            }
        }
        resp
    }

    /// `sendInitialEvents`, when given. kube-apiserver decodes it leniently: "false" and "0"
    /// (any case) are false, every other value, even an empty one, is true.
    fn initial_events(&self) -> Option<bool> {
        self.param("sendInitialEvents")
            .map(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"))
    }

    /// Checks `resourceVersionMatch` and `sendInitialEvents` as kube-apiserver's
    /// `ValidateListOptions` does, with the same messages, in the same order.
    fn check_list_options(&self, watch: bool) -> Result<(), ApiError> {
        let rv_match = self.param("resourceVersionMatch").unwrap_or("");
        let rv = self.param("resourceVersion").unwrap_or("");
        let has_continue = self.param("continue").is_some_and(|c| !c.is_empty());
        let initial_events = self.initial_events();
        let forbidden = |path: &str, detail: &str| FieldError {
            kind: FieldErrorKind::Forbidden,
            path: path.into(),
            value: None,
            detail: detail.into(),
        };
        let not_supported = |supported: &str| FieldError {
            kind: FieldErrorKind::NotSupported,
            path: "resourceVersionMatch".into(),
            value: Some(format!("{rv_match:?}")),
            detail: format!("supported values: {supported}"),
        };
        let mut errors = Vec::new();
        if watch {
            if initial_events.is_some() && rv_match != "NotOlderThan" {
                errors.push(forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !rv_match.is_empty() {
                if initial_events.is_none() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if rv_match != "NotOlderThan" {
                    errors.push(not_supported("\"NotOlderThan\""));
                }
                if has_continue {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if !rv_match.is_empty() {
                if rv.is_empty() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if has_continue {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if rv_match != "Exact" && rv_match != "NotOlderThan" {
                    errors.push(not_supported("\"Exact\", \"NotOlderThan\", \"\""));
                }
                if rv_match == "Exact" && rv == "0" {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if initial_events.is_some() {
                errors.push(forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_options("ListOptions", &errors))
        }
    }

    /// For a read from a resourceVersion the store has not reached: waits for it as
    /// kube-apiserver does, then answers 504 if it still has not come.
    async fn wait_until_fresh(&self) -> Result<(), ApiError> {
        let Some(wanted) = self
            .param("resourceVersion")
            .and_then(|rv| rv.parse::<u64>().ok())
        else {
            return Ok(());
        };
        let reached = self.app.store.wait_for(wanted, watch::FRESHNESS_WAIT).await;
        if reached < wanted {
            return Err(ApiError::too_large_resource_version(wanted, reached));
        }
        Ok(())
    }

    fn watch(&self) -> Result<Response, ApiError> {
        self.check_list_options(true)?;
        // As kube-apiserver: no timeout or 0 means the server's default, a negative one ends
        // the watch at once.
        let timeout = match self.param("timeoutSeconds") {
            Some(t) => match t.parse::<i64>().map_err(|_| parse_int_error(t))? {
                0 => self.app.max_watch_timeout,
                secs => Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
            },
            None => self.app.max_watch_timeout,
        };
        let req = WatchRequest {
            res: self.target.res,
            namespace: self.target.namespace.clone(),
            filter: self.filter()?,
            start: watch::parse_start(self.param("resourceVersion"))?,
            initial_events: self.initial_events(),
            bookmarks: self.param("allowWatchBookmarks") == Some("true"),
            timeout: timeout.min(self.app.max_watch_timeout),
            table: self.table(),
        };
        let control = WatchControl {
            dropped: self.app.faults.watch_token(),
            shutdown: self.app.shutdown.clone(),
            bookmark_interval: self.app.bookmark_interval,
            held: self.app.faults.held_watches(),
            faults: self.app.faults.clone(),
        };
        let body = watch::watch_body(self.app.store.clone(), req, control);
        let mut resp = Response::new(body);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }

    async fn list(&self) -> Result<Response, ApiError> {
        self.check_list_options(false)?;
        let limit = match self.param("limit") {
            Some(l) => Some(l.parse::<usize>().map_err(|_| parse_int_error(l))?),
            None => None,
        };
        self.wait_until_fresh().await?;
        if self.param("resourceVersionMatch") == Some("Exact") {
            let requested = self.param("resourceVersion").unwrap_or("");
            let current = self.app.store.resource_version();
            if requested != current.to_string() {
                let r = requested.parse().unwrap_or(0);
                return Err(ApiError::expired(r, current));
            }
        }
        let list = self.app.store.list(
            self.target.res,
            self.target.namespace.as_deref(),
            &self.filter()?,
            limit,
            self.param("continue"),
        )?;
        Ok(match self.table() {
            Some(include) => json_response(
                StatusCode::OK,
                &table::list_table(self.target.res, &list.to_value(), include),
            ),
            None => json_text_response(
                StatusCode::OK,
                serde_json::to_string(&list).unwrap_or_default(),
            ),
        })
    }

    async fn get(&self) -> Result<Response, ApiError> {
        self.wait_until_fresh().await?;
        let obj = self
            .app
            .store
            .get(self.target.res, self.ns(), self.name())?;
        Ok(self.respond(StatusCode::OK, &obj, &[]))
    }

    fn check_namespace_matches(&self, obj: &Value) -> Result<(), ApiError> {
        let body_ns = meta_str(obj, "namespace");
        if RESOURCES[self.target.res].namespaced && !body_ns.is_empty() && body_ns != self.ns() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok(())
    }

    /// The request's `dryRun` option (query parameter, or `dryRun` in a DeleteOptions body):
    /// absent stores the change, `All` only checks it; anything else is refused as kube-apiserver
    /// refuses it, naming the options kind of the verb.
    fn commit(&self, options_kind: &str, from_body: Option<&Value>) -> Result<Commit, ApiError> {
        let mut values: Vec<String> = self
            .param("dryRun")
            .map(str::to_owned)
            .into_iter()
            .collect();
        if let Some(list) = from_body.and_then(Value::as_array) {
            values.extend(
                list.iter()
                    .map(|v| v.as_str().unwrap_or_default().to_owned()),
            );
        }
        if values.is_empty() {
            return Ok(Commit::Persist);
        }
        if values.iter().all(|v| v == "All") {
            return Ok(Commit::DryRun);
        }
        Err(ApiError::invalid_options(
            options_kind,
            &[FieldError {
                kind: FieldErrorKind::NotSupported,
                path: "dryRun".into(),
                value: Some(serde_json::to_string(&values).unwrap_or_default()),
                detail: "supported values: \"All\"".into(),
            }],
        ))
    }

    fn create(&self, body: &[u8]) -> Result<Response, ApiError> {
        let commit = self.commit("CreateOptions", None)?;
        let raw = self.parse_body(body)?;
        let mut warnings = Vec::new();
        let obj = self.normalize(raw, &mut warnings)?;
        self.check_namespace_matches(&obj)?;
        let manager = self.manager()?;
        let created = self
            .app
            .store
            .create(self.target.res, self.ns(), obj, &manager, commit)?;
        Ok(self.respond(StatusCode::CREATED, &created, &warnings))
    }

    fn update(&self, body: &[u8]) -> Result<Response, ApiError> {
        let commit = self.commit("UpdateOptions", None)?;
        let raw = self.parse_body(body)?;
        let mut warnings = Vec::new();
        let obj = self.normalize(raw, &mut warnings)?;
        self.check_namespace_matches(&obj)?;
        let body_name = meta_str(&obj, "name");
        if body_name != self.name() {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({})",
                self.name()
            )));
        }
        let manager = self.manager()?;
        let info = &RESOURCES[self.target.res];
        let (created, obj) = if info.status_subresource {
            // The stored object decides what of the body is kept, so it is read under the
            // store's lock; such resources are not created by PUT.
            let status = self.target.status;
            self.app.store.modify(
                self.target.res,
                self.ns(),
                self.name(),
                |live| {
                    let live = live.ok_or_else(|| ApiError::not_found(info, self.name()))?;
                    Ok((scoped_write(live, obj, status), Writer::Update("")))
                },
                &manager,
                commit,
            )?
        } else {
            self.app.store.replace(
                self.target.res,
                self.ns(),
                self.name(),
                obj,
                &manager,
                commit,
            )?
        };
        let code = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(self.respond(code, &obj, &warnings))
    }

    fn patch(&self, body: &[u8]) -> Result<Response, ApiError> {
        let content_type = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let kind = PatchType::from_content_type(content_type)?;
        let commit = self.commit("PatchOptions", None)?;
        let info = &RESOURCES[self.target.res];
        let name = self.name().to_string();
        let mut warnings = Vec::new();
        let (created, obj) = if kind == PatchType::Apply {
            let manager = match self.param("fieldManager").filter(|m| !m.is_empty()) {
                Some(m) => m.to_string(),
                None => {
                    return Err(ApiError::invalid_options(
                        "PatchOptions",
                        &[FieldError {
                            kind: FieldErrorKind::Required,
                            path: "fieldManager".into(),
                            value: None,
                            detail: "is required for apply patch".into(),
                        }],
                    ));
                }
            };
            let raw = patch::parse_apply(body)?;
            for field in ["apiVersion", "kind"] {
                if raw
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(ApiError::bad_request(format!("{field} must be set")));
                }
            }
            let mut config = self.normalize(raw, &mut warnings)?;
            self.check_namespace_matches(&config)?;
            // An apply configuration may leave the name to the URL, as kube-apiserver allows
            // (clients such as kube-lease-manager send none).
            if meta_str(&config, "name").is_empty()
                && let Some(meta) = config.as_object_mut().and_then(|obj| {
                    obj.entry("metadata")
                        .or_insert_with(|| Value::Object(Default::default()))
                        .as_object_mut()
                })
            {
                meta.insert("name".into(), Value::String(name.to_string()));
            }
            let body_name = meta_str(&config, "name");
            if body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let force = self.param("force") == Some("true");
            let api_version = info.api_version();
            self.app.store.modify(
                self.target.res,
                self.ns(),
                &name,
                |live| {
                    let now = objects::now_rfc3339();
                    fields::apply(live, &config, &manager, force, &api_version, &now)
                        .map(|merged| match live {
                            Some(live) if info.status_subresource => (
                                scoped_write(live, merged, self.target.status),
                                Writer::Apply,
                            ),
                            _ => (merged, Writer::Apply),
                        })
                        .map_err(|c| ApiError::apply_conflict(&c.0))
                },
                &manager,
                commit,
            )?
        } else {
            let manager = self.manager()?;
            let mut unknown_warnings = Vec::new();
            let result = self.app.store.modify(
                self.target.res,
                self.ns(),
                &name,
                |live| {
                    let live = live.ok_or_else(|| ApiError::not_found(info, &name))?;
                    let patched = patch::apply_patch(kind, live, body)?;
                    let obj = self.normalize(patched, &mut unknown_warnings)?;
                    let obj = if info.status_subresource {
                        scoped_write(live, obj, self.target.status)
                    } else {
                        obj
                    };
                    Ok((obj, Writer::Update("")))
                },
                &manager,
                commit,
            )?;
            warnings.extend(unknown_warnings);
            result
        };
        let code = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(self.respond(code, &obj, &warnings))
    }

    /// The DeleteOptions sent as the body of a delete (an empty body is none).
    fn delete_options(body: &[u8]) -> Result<Value, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(json!({}));
        }
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))
    }

    fn delete(&self, body: &[u8]) -> Result<Response, ApiError> {
        if self.target.res == NAMESPACES
            && ["default", "kube-system", "kube-public"].contains(&self.name())
        {
            return Err(ApiError::namespace_may_not_be_deleted(self.name()));
        }
        let options = Self::delete_options(body)?;
        let uid = options
            .pointer("/preconditions/uid")
            .and_then(Value::as_str);
        let rv = options
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str);
        let commit = self.commit("DeleteOptions", options.get("dryRun"))?;
        let info = &RESOURCES[self.target.res];
        match self
            .app
            .store
            .delete(self.target.res, self.ns(), self.name(), uid, rv, commit)?
        {
            Deleted::Marked(obj) => Ok(self.respond(StatusCode::OK, &obj, &[])),
            Deleted::Gone(obj) => {
                let mut details = json!({ "name": self.name(), "kind": info.plural, "uid": meta_str(&obj, "uid") });
                if !info.group.is_empty() {
                    details["group"] = json!(info.group);
                }
                let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details });
                Ok(json_response(StatusCode::OK, &status))
            }
        }
    }

    fn delete_collection(&self, body: &[u8]) -> Result<Response, ApiError> {
        let options = Self::delete_options(body)?;
        let commit = self.commit("DeleteOptions", options.get("dryRun"))?;
        if let Some(ns) = &self.target.namespace
            && !self.app.store.namespace_exists(ns)
        {
            return Err(ApiError::not_found(&RESOURCES[NAMESPACES], ns));
        }
        let list = self.app.store.delete_collection(
            self.target.res,
            self.target.namespace.as_deref(),
            &self.filter()?,
            commit,
        )?;
        Ok(json_response(StatusCode::OK, &list))
    }
}
