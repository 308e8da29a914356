//! `/api/repos`.

use axum::http::StatusCode;
use serde_json::json;
use tandem_protocol::Repo;

use crate::harness::TestServer;
use crate::matrix;

async fn repo_create_get_list_and_conflicts(s: TestServer) {
    let res = s
        .post("/api/repos", json!({ "name": "acme/web", "url": "git@github.com:acme/web.git", "default_branch": "trunk" }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    let repo: Repo = res.parse();
    assert_eq!(repo.name, "acme/web");
    assert_eq!(repo.default_branch, "trunk");

    let got: Repo = s
        .get(&format!("/api/repos/{}", repo.id))
        .send()
        .await
        .parse();
    assert_eq!(got, repo);

    let other: Repo = s
        .post(
            "/api/repos",
            json!({ "name": "acme/api", "url": "https://x.invalid/a.git" }),
        )
        .send()
        .await
        .parse();
    assert_eq!(
        other.default_branch, "main",
        "default branch defaults to main"
    );
    let list: Vec<Repo> = s.get("/api/repos").send().await.parse();
    assert_eq!(
        list.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["acme/api", "acme/web"],
        "sorted by name"
    );

    let dup = s
        .post(
            "/api/repos",
            json!({ "name": "acme/web", "url": "https://x.invalid/b.git" }),
        )
        .send()
        .await;
    let msg = dup.assert_error(StatusCode::CONFLICT, "conflict");
    assert!(msg.contains("acme/web"), "{msg}");

    let missing = s
        .get(&format!("/api/repos/{}", uuid::Uuid::new_v4()))
        .send()
        .await;
    missing.assert_error(StatusCode::NOT_FOUND, "not_found");

    for (body, needle) in [
        (
            json!({ "name": "", "url": "https://x.invalid/a.git" }),
            "name",
        ),
        (
            json!({ "name": "bad name!", "url": "https://x.invalid/a.git" }),
            "may only hold",
        ),
        (
            json!({ "name": "ok", "url": "--upload-pack=evil" }),
            "not a git remote",
        ),
        (
            json!({ "name": "ok", "url": "https://x.invalid/a.git", "default_branch": "a..b" }),
            "branch",
        ),
    ] {
        let msg = s
            .post("/api/repos", body)
            .send()
            .await
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert!(msg.contains(needle), "{msg}");
    }
    // Nothing invalid was stored.
    let list: Vec<Repo> = s.get("/api/repos").send().await.parse();
    assert_eq!(list.len(), 2);
}
matrix!(repo_create_get_list_and_conflicts);
