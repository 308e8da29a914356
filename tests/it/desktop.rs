//! The workspace's desktop and the agent's browser tools, on a real workspace with a real
//! Xvfb and headful Chromium: the agent opens a page from the repo, clicks a button (real mouse
//! events) and the page changes; its screenshots are real PNGs of the workspace's browser,
//! kept as artifacts and attached to the turn (plus the turn's own "after" picture).

use axum::http::StatusCode;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;

use crate::agent_runs::wait_events;
use crate::session_workspaces::{add_repo, source_repo};
use crate::snapshots::{git, wait_built};

const PAGE: &str = r#"<!doctype html><title>waiting</title>
<body style="background:#fff"><button id="go" style="font-size:40px" onclick="document.title='clicked';document.body.style.background='#c00'">Go</button></body>"#;

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

#[tokio::test]
async fn the_agent_drives_the_workspace_browser_and_its_screenshots_are_real_pngs_in_the_timeline()
{
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "browser_navigate",
            json!({ "url": "file:///workspace/page.html" }),
        )
        .at_step(0),
        Reply::tool("browser_screenshot", json!({ "name": "before-click.png" })).at_step(1),
        Reply::tool("browser_click", json!({ "selector": "#go" })).at_step(2),
        Reply::tool("browser_screenshot", json!({ "name": "after-click.png" })).at_step(3),
        Reply::tool("browser_click", json!({ "selector": "#missing" })).at_step(4),
        Reply::text("The button works.").at_step(5),
    ])
    .await;
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| c.agents.model_base_url = Some(url)).await
    else {
        return;
    };
    let src = source_repo("[workspace]\nsetup = []\n");
    std::fs::write(src.path().join("page.html"), PAGE).unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "page"]);
    let repo = add_repo(&s, "acme/page", src.path()).await;
    let snap: Snapshot = s
        .post(&format!("/api/repos/{repo}/snapshots"), json!({}))
        .send()
        .await
        .parse();
    assert_eq!(
        wait_built(&s, &snap.id.to_string()).await.state,
        SnapshotState::Ready
    );
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Check the button" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    let summaries: Vec<String> = evs.iter().map(|e| e.kind.summary()).collect();

    let results: Vec<(String, String, bool)> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult {
                name,
                output,
                is_error,
                ..
            } => Some((name.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .collect();
    let nav = &results[0];
    assert_eq!(nav.0, "browser_navigate");
    assert!(
        !nav.2 && nav.1.contains("file:///workspace/page.html") && nav.1.contains("\"waiting\""),
        "{summaries:#?}\n{nav:?}"
    );
    let click = results.iter().find(|r| r.0 == "browser_click").unwrap();
    assert!(
        !click.2 && click.1.contains("\"clicked\""),
        "the page changed: {click:?}"
    );
    let missing = results.iter().rfind(|r| r.0 == "browser_click").unwrap();
    assert!(
        missing.2 && missing.1.contains("no element matches"),
        "{missing:?}"
    );

    let shots: Vec<(String, ArtifactId)> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Attachment {
                name,
                artifact,
                content_type,
                prompt_id,
                ..
            } => {
                assert_eq!(content_type, "image/png");
                assert_eq!(
                    *prompt_id,
                    Some(created.prompts[0].id),
                    "attached to the turn"
                );
                Some((name.clone(), *artifact))
            }
            _ => None,
        })
        .collect();
    let names: Vec<&str> = shots.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        names,
        ["before-click.png", "after-click.png", "after.png"],
        "{summaries:#?}"
    );
    let mut pngs = Vec::new();
    for (_, artifact) in &shots {
        let res = s
            .get(&format!("/api/sessions/{id}/artifacts/{artifact}"))
            .send()
            .await;
        assert_eq!(res.status, StatusCode::OK);
        assert_eq!(res.headers["content-type"], "image/png");
        // The page's viewport: the display's width, its height less the browser's own bar.
        let (w, h) = png_size(&res.body);
        assert!(
            (1200..=1280).contains(&w) && (400..=720).contains(&h),
            "{w}×{h}"
        );
        // Kept for people to look at.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("desktop");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&shots[pngs.len()].0), &res.body).unwrap();
        pngs.push(res.body);
    }
    assert_ne!(pngs[0], pngs[1], "the click changed what the browser shows");
    assert!(pngs[1].len() > 1000);
}
