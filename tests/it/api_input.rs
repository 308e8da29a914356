//! Malformed, oversized and misrouted requests get a JSON 4xx that says what was wrong.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;
use crate::matrix;

async fn malformed_and_oversized_bodies(s: TestServer) {
    let broken = s
        .req(Method::POST, "/api/repos")
        .bearer(&s.admin_token)
        .raw_body("application/json", b"{\"name\": ".to_vec());
    let msg = broken
        .send()
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
    assert!(msg.to_lowercase().contains("json"), "{msg}");

    let wrong_type = s
        .post(
            "/api/repos",
            json!({ "name": 5, "url": "https://x.invalid/a.git" }),
        )
        .send()
        .await;
    let msg = wrong_type.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert!(msg.contains("name"), "{msg}");

    let unknown = s
        .post(
            "/api/repos",
            json!({ "name": "a", "url": "https://x.invalid/a.git", "colour": "red" }),
        )
        .send()
        .await;
    assert!(
        unknown
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
            .contains("colour")
    );

    let no_type = s
        .req(Method::POST, "/api/repos")
        .bearer(&s.admin_token)
        .untyped_body(b"{}".to_vec())
        .send()
        .await;
    no_type.assert_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");

    // Just over 1 MiB, as valid JSON: refused for its size, not its content.
    let huge = json!({ "name": "big", "url": "https://x.invalid/a.git", "default_branch": "x".repeat(1024 * 1024) });
    let res = s.post("/api/repos", huge).send().await;
    res.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");

    let bad_id = s.get("/api/sessions/not-a-uuid").send().await;
    let msg = bad_id.assert_error(StatusCode::BAD_REQUEST, "bad_request");
    assert!(
        msg.to_lowercase().contains("uuid") || msg.contains("parse"),
        "{msg}"
    );

    let bad_query = s.get("/api/sessions?after=5").send().await;
    bad_query.assert_error(StatusCode::BAD_REQUEST, "bad_request");

    let no_route = s.get("/api/nope").send().await;
    assert!(
        no_route
            .assert_error(StatusCode::NOT_FOUND, "not_found")
            .contains("/api/nope")
    );

    let wrong_method = s
        .req(Method::DELETE, "/api/repos")
        .bearer(&s.admin_token)
        .send()
        .await;
    wrong_method.assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");

    // The server is still fine and stored nothing from the refused requests.
    let repos: Vec<tandem_protocol::Repo> = s.get("/api/repos").send().await.parse();
    assert!(repos.is_empty());
}
matrix!(malformed_and_oversized_bodies);

async fn web_app_paths_are_not_api_errors(s: TestServer) {
    // Without a built web app the server says how to build it, as HTML, at any non-API path.
    let res = s.req(Method::GET, "/sessions/123").send().await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8_lossy(&res.body).contains("cargo xtask up"));
}
matrix!(web_app_paths_are_not_api_errors);
