//! Discovery documents (`/version`, `/api`, `/apis`, group and version resource lists) and a
//! minimal OpenAPI v3, enough for kubectl to find resources and to use server-side field
//! validation on `apply`.

use crate::resources::{GROUPS, RESOURCES, version_served};
use serde_json::{Value, json};

/// The Kubernetes version the emulator presents itself as.
pub(crate) const GIT_VERSION: &str = "v1.33.0";

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }],
    })
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{name}/{v}"), "version": v }))
        .collect();
    json!({ "name": name, "versions": vs, "preferredVersion": vs[0].clone() })
}

/// `/apis`.
pub(crate) fn group_list() -> Value {
    let groups: Vec<Value> = GROUPS
        .iter()
        .map(|(name, versions)| group_json(name, versions))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `/apis/{group}`.
pub(crate) fn group(name: &str) -> Option<Value> {
    GROUPS
        .iter()
        .find(|(g, _)| *g == name)
        .map(|(g, versions)| {
            let mut v = group_json(g, versions);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        })
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub(crate) fn resource_list(group: &str, version: &str) -> Option<Value> {
    if !version_served(group, version) {
        return None;
    }
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| {
            let mut v = json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs(),
            });
            if !r.short_names.is_empty() {
                v["shortNames"] = json!(r.short_names);
            }
            let mut entries = vec![v];
            if r.status_subresource {
                entries.push(json!({
                    "name": format!("{}/status", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            entries
        })
        .collect();
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources }),
    )
}

/// Every served group/version, as OpenAPI v3 paths name them (`api/v1`, `apis/g/v`).
fn group_versions() -> Vec<(String, &'static str, &'static str)> {
    let mut out: Vec<(String, &str, &str)> = Vec::new();
    for r in RESOURCES {
        let path = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        if !out.iter().any(|(p, _, _)| *p == path) {
            out.push((path, r.group, r.version));
        }
    }
    out
}

/// `/openapi/v3`: the index of per-group-version documents.
pub(crate) fn openapi_index() -> Value {
    let mut paths = serde_json::Map::new();
    for (path, _, _) in group_versions() {
        paths.insert(
            path.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash=conclave-emulator-1") }),
        );
    }
    json!({ "paths": paths })
}

fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let g = match group {
        "" => "core".to_string(),
        g => g.trim_end_matches(".k8s.io").to_string(),
    };
    format!("io.k8s.api.{g}.{version}.{kind}")
}

fn query_param(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "query", "description": description, "schema": { "type": "string", "uniqueItems": true } })
}

/// `/openapi/v3/{api/v1|apis/g/v}`: paths with the parameters kubectl checks for, and object
/// schemas that accept any fields (the server validates).
pub(crate) fn openapi_group_version(gv_path: &str) -> Option<Value> {
    let (_, group, version) = group_versions()
        .into_iter()
        .find(|(p, _, _)| p == gv_path)?;
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let gvk = json!([{ "group": group, "version": version, "kind": r.kind }]);
        let schema = schema_name(group, version, r.kind);
        let reference = json!({ "$ref": format!("#/components/schemas/{schema}") });
        let write_params = vec![
            query_param(
                "dryRun",
                "When present, indicates that modifications should not be persisted.",
            ),
            query_param(
                "fieldManager",
                "fieldManager is a name associated with the actor or entity that is making these changes.",
            ),
            query_param(
                "fieldValidation",
                "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
            ),
        ];
        let mut patch_params = write_params.clone();
        patch_params.push(json!({ "name": "force", "in": "query", "schema": { "type": "boolean", "uniqueItems": true } }));
        let body = |types: &[&str]| {
            let content: serde_json::Map<String, Value> = types
                .iter()
                .map(|t| (t.to_string(), json!({ "schema": reference.clone() })))
                .collect();
            json!({ "content": content, "required": true })
        };
        let ok = json!({ "200": { "description": "OK", "content": { "application/json": { "schema": reference.clone() } } } });
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let (collection, item, mut path_params) = if r.namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
                vec![
                    json!({ "name": "namespace", "in": "path", "required": true, "schema": { "type": "string" } }),
                ],
            )
        } else {
            (
                format!("{prefix}/{}", r.plural),
                format!("{prefix}/{}/{{name}}", r.plural),
                Vec::new(),
            )
        };
        paths.insert(
            collection,
            json!({
                "get": { "operationId": format!("list{}", r.kind), "responses": ok.clone(), "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk[0].clone() },
                "post": { "operationId": format!("create{}", r.kind), "parameters": write_params.clone(), "requestBody": body(&["*/*"]), "responses": ok.clone(), "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk[0].clone() },
                "parameters": path_params.clone(),
            }),
        );
        path_params.insert(0, json!({ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }));
        let mut item_path_params = path_params.clone();
        item_path_params.extend(patch_params.iter().cloned());
        paths.insert(
            item,
            json!({
                "get": { "operationId": format!("read{}", r.kind), "responses": ok.clone(), "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk[0].clone() },
                "put": { "operationId": format!("replace{}", r.kind), "parameters": write_params.clone(), "requestBody": body(&["*/*"]), "responses": ok.clone(), "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk[0].clone() },
                "patch": {
                    "operationId": format!("patch{}", r.kind),
                    "parameters": patch_params.clone(),
                    "requestBody": body(&["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"]),
                    "responses": ok.clone(),
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk[0].clone(),
                },
                "delete": { "operationId": format!("delete{}", r.kind), "responses": ok.clone(), "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk[0].clone() },
                "parameters": item_path_params,
            }),
        );
        schemas.insert(
            schema,
            json!({
                "type": "object",
                "description": format!("{} ({}).", r.kind, r.api_version()),
                "properties": {
                    "apiVersion": { "type": "string" },
                    "kind": { "type": "string" },
                    "metadata": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                },
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": GIT_VERSION },
        "paths": paths,
        "components": { "schemas": schemas },
    }))
}
