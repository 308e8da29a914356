//! `GET /api/openapi.json`, the REST API's OpenAPI document: anyone may read it, it parses as
//! OpenAPI 3.1 with every reference resolved, it lists exactly the routes below, and the router
//! agrees with it: every documented operation is routed (never the API's "no API route"
//! fallback, never a 405), every other method on a documented path is a 405, and an operation
//! the document says needs a sign-in refuses a request without one.
//!
//! The API router cannot hold an undocumented route (`http::openapi::ApiRouter` registers routes
//! only from their annotations); this list is what a reviewer sees change when a route does.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};

use crate::harness::{Backend, TestServer, Transport};

/// Every operation the API serves, as `METHOD /api/path`.
const ROUTES: &[&str] = &[
    "DELETE /api/mcp/servers/{name}",
    "GET /api/mcp/actions",
    "GET /api/mcp/servers",
    "GET /api/sessions/{id}/approvals",
    "POST /api/sessions/{id}/approvals/{approval}",
    "PUT /api/mcp/actions",
    "PUT /api/mcp/servers/{name}",
    "GET /api/artifacts/{id}/{sig}",
    "GET /api/audit",
    "GET /api/auth/github",
    "GET /api/auth/github/callback",
    "POST /api/auth/invite",
    "POST /api/auth/login",
    "POST /api/auth/logout",
    "GET /api/auth/oidc/{id}",
    "GET /api/auth/oidc/{id}/callback",
    "GET /api/auth/providers",
    "GET /api/automations",
    "POST /api/automations",
    "POST /api/automations/hooks/{token}",
    "GET /api/automations/{id}",
    "DELETE /api/automations/{id}",
    "GET /api/automations/{id}/runs",
    "GET /api/extension/hello",
    "POST /api/extension/pairings",
    "POST /api/extension/pairings/approve",
    "POST /api/extension/pairings/poll",
    "GET /api/extension/pairings/{id}",
    "GET /api/extension/rules",
    "PUT /api/extension/rules",
    "GET /api/github/repos",
    "POST /api/github/repos",
    "POST /api/github/webhook",
    "GET /api/health",
    "POST /api/links/join",
    "GET /api/me",
    "GET /api/me/github",
    "DELETE /api/me/github",
    "GET /api/openapi.json",
    "GET /api/people",
    "GET /api/people/admins",
    "GET /api/people/invites",
    "POST /api/people/invites",
    "DELETE /api/people/invites/{id}",
    "PATCH /api/people/{id}",
    "GET /api/repos",
    "POST /api/repos",
    "GET /api/repos/{id}",
    "GET /api/repos/{id}/access",
    "PUT /api/repos/{id}/access",
    "GET /api/repos/{id}/snapshots",
    "POST /api/repos/{id}/snapshots",
    "PUT /api/repos/{id}/warm-pool",
    "GET /api/secrets",
    "PUT /api/secrets/{name}",
    "DELETE /api/secrets/{name}",
    "GET /api/sessions",
    "POST /api/sessions",
    "GET /api/sessions/{id}",
    "GET /api/sessions/{id}/artifacts/{artifact}",
    "GET /api/sessions/{id}/children",
    "POST /api/sessions/{id}/children",
    "POST /api/sessions/{id}/code",
    "GET /api/sessions/{id}/desktop",
    "POST /api/sessions/{id}/desktop/open",
    "GET /api/sessions/{id}/diff",
    "GET /api/sessions/{id}/events",
    "POST /api/sessions/{id}/exec",
    "GET /api/sessions/{id}/files",
    "PUT /api/sessions/{id}/files",
    "POST /api/sessions/{id}/fork",
    "POST /api/sessions/{id}/git/commit",
    "GET /api/sessions/{id}/git/status",
    "GET /api/sessions/{id}/links",
    "POST /api/sessions/{id}/links",
    "DELETE /api/sessions/{id}/links/{jti}",
    "GET /api/sessions/{id}/live",
    "GET /api/sessions/{id}/pr",
    "POST /api/sessions/{id}/pr",
    "POST /api/sessions/{id}/prompts",
    "PATCH /api/sessions/{id}/prompts/{prompt}",
    "DELETE /api/sessions/{id}/prompts/{prompt}",
    "POST /api/sessions/{id}/resume",
    "POST /api/sessions/{id}/stop",
    "POST /api/sessions/{id}/suspend",
    "POST /api/sessions/{id}/turn/stop",
    "PUT /api/sessions/{id}/visibility",
    "GET /api/sessions/{id}/vnc",
    "GET /api/settings",
    "PUT /api/settings",
    "POST /api/settings/model/test",
    "PUT /api/slack/channels/{channel}",
    "DELETE /api/slack/channels/{channel}",
    "POST /api/slack/commands",
    "POST /api/slack/events",
    "POST /api/slack/interactivity",
    "GET /api/slack/link",
    "POST /api/slack/link",
    "GET /api/slack/link.js",
    "GET /api/slack/settings",
    "PUT /api/slack/settings",
    "GET /api/snapshots/{id}",
    "GET /api/spend/budgets",
    "PUT /api/spend/budgets",
    "GET /api/spend/prices",
    "PUT /api/spend/prices",
    "GET /api/insights",
    "GET /api/insights/csv",
    "GET /api/sessions/{id}/spend",
    "GET /api/tokens",
    "POST /api/tokens",
    "DELETE /api/tokens/{id}",
];

const METHODS: [Method; 5] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::PATCH,
    Method::DELETE,
];

#[tokio::test]
async fn the_document_describes_every_route_the_api_serves() {
    let s = TestServer::start(Backend::Sqlite, Transport::Socket)
        .await
        .expect("sqlite server");
    // No credential: the document holds no secret.
    let res = s.req(Method::GET, "/api/openapi.json").send().await;
    assert_eq!(res.status, StatusCode::OK);
    let ct = res.headers.get("content-type").unwrap().to_str().unwrap();
    assert!(ct.starts_with("application/json"), "{ct}");
    let doc = res.json();
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "not OpenAPI 3.1: {}",
        doc["openapi"]
    );
    // Another implementation reads it as OpenAPI 3.1 (info, paths, operations, components…).
    let spec = oas3::from_json(String::from_utf8(res.body.clone()).unwrap())
        .expect("an OpenAPI 3.1 document");
    assert_eq!(spec.info.title, "Tandem REST API");
    unresolved_references(&doc, &doc);

    let paths = doc["paths"].as_object().expect("paths");
    let mut documented = BTreeSet::new();
    let mut operation_ids = BTreeSet::new();
    for (path, item) in paths {
        for method in &METHODS {
            let Some(op) = item.get(method.as_str().to_lowercase()) else {
                continue;
            };
            documented.insert(format!("{method} {path}"));
            let id = op["operationId"].as_str().expect("an operation id");
            assert!(operation_ids.insert(id), "operation id {id} is used twice");
            let responses = op["responses"].as_object().expect("responses");
            assert!(
                responses
                    .keys()
                    .any(|k| k.starts_with('1') || k.starts_with('2') || k.starts_with('3')),
                "{method} {path} documents no answer but errors"
            );
            // Every JSON error answer is an `ApiError`.
            for (status, r) in responses {
                let json = &r["content"]["application/json"]["schema"]["$ref"];
                if (status.starts_with('4') || status.starts_with('5')) && !json.is_null() {
                    assert_eq!(
                        json, "#/components/schemas/ApiError",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
    let known: BTreeSet<String> = ROUTES.iter().map(|r| r.to_string()).collect();
    let undocumented: Vec<_> = known.difference(&documented).collect();
    let unlisted: Vec<_> = documented.difference(&known).collect();
    assert!(
        undocumented.is_empty() && unlisted.is_empty(),
        "known routes missing from the document: {undocumented:?}; documented but not in ROUTES: {unlisted:?}"
    );

    // What the router answers, without a credential, for each method on each documented path.
    for (path, item) in paths {
        let concrete = with_params(path);
        for method in METHODS {
            let op = item.get(method.as_str().to_lowercase());
            let res = s.req(method.clone(), &concrete).send().await;
            let body = String::from_utf8_lossy(&res.body);
            match op {
                None => assert_eq!(
                    res.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {concrete} is served but not documented: {body}"
                ),
                Some(op) => {
                    assert_ne!(
                        res.status,
                        StatusCode::METHOD_NOT_ALLOWED,
                        "{method} {path} is documented but not routed"
                    );
                    assert!(
                        !body.contains("no API route"),
                        "{method} {path} is documented but not routed: {body}"
                    );
                    // No `security` of its own: the document's (an API token or the cookie).
                    if op.get("security").is_none() {
                        assert_eq!(
                            res.status,
                            StatusCode::UNAUTHORIZED,
                            "{method} {path} is documented as needing a sign-in: {body}"
                        );
                    }
                }
            }
        }
    }
}

/// `path` with each `{param}` filled with a value every parameter type accepts (a UUID).
fn with_params(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        let (_, after) = after.split_once('}').expect("a closed parameter");
        out.push_str("00000000-0000-4000-8000-000000000000");
        rest = after;
    }
    out + rest
}

/// Panics at a `$ref` that names nothing in `doc`.
fn unresolved_references(doc: &serde_json::Value, at: &serde_json::Value) {
    match at {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    let target = v.as_str().expect("a reference is a string");
                    let pointer = target.strip_prefix('#').expect("a local reference");
                    assert!(
                        doc.pointer(pointer).is_some(),
                        "{target} resolves to nothing"
                    );
                } else {
                    unresolved_references(doc, v);
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                unresolved_references(doc, v);
            }
        }
        _ => {}
    }
}
