//! VS Code through the server: code-server in a real workspace, reached at
//! `/sessions/{id}/code/` with Tandem's sign-in, the prefix stripped; drivers only.

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::*;

use crate::session_workspaces::{add_repo, source_repo, wait_state};

/// The code-server `cargo xtask` set up, or `None` (SKIP printed) when it is not there.
pub fn code_server_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("TANDEM_TEST_CODE_SERVER").map(std::path::PathBuf::from) {
        Some(d) if d.join("out/node/entry.js").is_file() => Some(d),
        Some(d) => panic!(
            "TANDEM_TEST_CODE_SERVER={} holds no code-server (cargo xtask deps --test sets it up)",
            d.display()
        ),
        None => {
            eprintln!(
                "SKIP VS Code: TANDEM_TEST_CODE_SERVER is not set (cargo xtask test sets up code-server)"
            );
            None
        }
    }
}

#[tokio::test]
async fn vs_code_loads_through_the_proxy_for_drivers_and_not_for_viewers() {
    let Some(dir) = code_server_dir() else { return };
    let Some(s) = crate::workspaces::server(move |c| c.agents.code_server_dir = Some(dir)).await
    else {
        return;
    };
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/code", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    wait_state(&s, id, &[SessionState::Ready]).await;

    // Without the trailing slash: redirected to the base path (which the client follows).
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let bare = no_redirects
        .get(format!("{}/sessions/{id}/code", s.url))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 308);
    assert_eq!(
        bare.headers()["location"],
        format!("/sessions/{id}/code/").as_str()
    );

    // The workbench page, from code-server inside the workspace, with relative asset paths.
    let page = s
        .get(&format!("/sessions/{id}/code/?folder=/workspace"))
        .send()
        .await;
    assert_eq!(
        page.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&page.body)
            .chars()
            .take(500)
            .collect::<String>()
    );
    let html = String::from_utf8_lossy(&page.body).to_string();
    assert!(
        html.contains("vs/code/browser/workbench/workbench") || html.contains("workbench"),
        "{}",
        html.chars().take(800).collect::<String>()
    );
    // An asset under the base path (its static files).
    let manifest = s
        .get(&format!("/sessions/{id}/code/manifest.json"))
        .send()
        .await;
    assert_eq!(manifest.status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&manifest.body).contains("code-server"));

    // Someone who only watches gets none; nor does anyone signed out.
    let (_, viewer) = crate::agent_runs::another_user(&s, "vera").await;
    let refused = s
        .req(Method::GET, &format!("/sessions/{id}/code/"))
        .bearer(&viewer)
        .send()
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let anonymous = s
        .req(Method::GET, &format!("/sessions/{id}/code/"))
        .send()
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}
