//! The workspace's desktop and the agent's browser tools, on a real workspace with a real
//! Xvfb and headful Chromium: the agent opens a page from the repo, clicks a button (real mouse
//! events) and the page changes; its screenshots are real PNGs of the workspace's browser,
//! kept as artifacts and attached to the turn (plus the turn's own "after" picture).

use axum::http::StatusCode;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;

use std::sync::atomic::Ordering;

use tandem_protocol::agent::DesktopPage;
use tandem_protocol::live::{DesktopInput, WsClient, WsServer};
use tandem_server::client::desktop::DesktopViewer;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use crate::agent_runs::wait_events;
use crate::session_workspaces::{add_repo, source_repo};
use crate::snapshots::{git, wait_built};

const PAGE: &str = r#"<!doctype html><title>waiting</title>
<body style="background:#fff"><button id="go" style="font-size:40px" onclick="document.title='clicked';document.body.style.background='#c00'">Go</button></body>"#;

/// What the host's `/tmp` holds of the desktop encoder's (`nobody`'s files, its X socket
/// directory).
fn encoder_files_in_host_tmp() -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name() == ".X11-unix"
                || e.metadata()
                    .is_ok_and(|m| m.uid() == tandem_server::desktop::encode::ENCODER_UID)
        })
        .map(|e| e.path())
        .collect()
}

/// The encoder (it parses what the workspace's X server sends) has mount and PID namespaces of
/// its own, a `/tmp` of its own, and left nothing in the host's.
fn encoder_is_confined(pid: u32, host_tmp_before: &[std::path::PathBuf]) {
    use std::os::unix::fs::MetadataExt;
    let ns = |who: &str, kind: &str| std::fs::read_link(format!("/proc/{who}/ns/{kind}")).unwrap();
    for kind in ["mnt", "pid"] {
        assert_ne!(
            ns(&pid.to_string(), kind),
            ns("self", kind),
            "the encoder shares the server's {kind} namespace"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.trim_end().ends_with("\t1")),
        "the encoder is the first process of its own PID namespace: {status}"
    );
    let its_tmp = std::fs::metadata(format!("/proc/{pid}/root/tmp")).unwrap();
    let host_tmp = std::fs::metadata("/tmp").unwrap();
    assert_ne!(
        (its_tmp.dev(), its_tmp.ino()),
        (host_tmp.dev(), host_tmp.ino()),
        "the encoder's /tmp is the host's"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        String::from_utf8_lossy(&environ).contains("GST_REGISTRY=/tmp/"),
        "GStreamer's registry is in its private /tmp"
    );
    assert_eq!(
        encoder_files_in_host_tmp(),
        host_tmp_before,
        "the encoder wrote into the host's /tmp"
    );
}

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

/// Waits for a live message that `pick` accepts.
async fn next_matching<T>(
    c: &mut LiveClient,
    what: &str,
    pick: impl Fn(&WsServer) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let m = tokio::time::timeout_at(deadline, c.next())
            .await
            .unwrap_or_else(|_| panic!("no {what}"));
        match m {
            Some(Incoming::Message(m)) => {
                if let Some(v) = pick(&m) {
                    return v;
                }
            }
            Some(Incoming::Terminal(..)) => {}
            other => panic!("the channel ended before {what}: {other:?}"),
        }
    }
}

const BIG_BUTTON: &str = r#"<!doctype html><title>waiting</title>
<button id="go" style="position:fixed;inset:0;width:100vw;height:100vh;font-size:80px" onclick="document.title='clicked'">Go</button>"#;

/// A text field filling the page; the title shows what it holds.
const BIG_FIELD: &str = r#"<!doctype html><title>v:</title>
<input id="t" style="position:fixed;inset:0;width:100vw;height:100vh;font-size:80px" oninput="document.title='v:'+this.value">"#;

#[tokio::test]
async fn the_desktop_streams_over_webrtc_takes_the_controllers_clicks_and_refuses_a_viewers() {
    // Keyframes only when asked for (a viewer joining, or a PLI), so the count says who asked.
    let Some(s) = crate::workspaces::server(|c| c.desktop.keyframe_secs = 600).await else {
        return;
    };
    let host_tmp_before = encoder_files_in_host_tmp();
    let src = source_repo("[workspace]\nsetup = []\n");
    std::fs::write(src.path().join("page.html"), BIG_BUTTON).unwrap();
    std::fs::write(src.path().join("field.html"), BIG_FIELD).unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "page"]);
    let repo = add_repo(&s, "acme/desk", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    crate::session_workspaces::wait_state(&s, id, &[SessionState::Ready]).await;
    let before: DesktopPage = s
        .get(&format!("/api/sessions/{id}/desktop"))
        .send()
        .await
        .parse();
    assert!(!before.running, "the desktop starts on first use");

    // The owner watches: offer → answer → frames arrive.
    let creds = Credentials {
        token: Some(s.admin_token.clone()),
        ..Default::default()
    };
    let mut owner = LiveClient::connect(&s.url, id, &creds).await.unwrap();
    let (viewer, offer) = DesktopViewer::offer("127.0.0.1:0").await.unwrap();
    owner
        .send(&WsClient::DesktopOffer { sdp: offer })
        .await
        .unwrap();
    let answer = next_matching(&mut owner, "the answer", |m| match m {
        WsServer::DesktopAnswer { sdp } => Some(sdp.clone()),
        WsServer::Refused { request, reason } => panic!("{request} refused: {reason}"),
        _ => None,
    })
    .await;
    viewer.accept(answer).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while viewer.received.frames.load(Ordering::Relaxed) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "frames: {}",
            viewer.received.frames.load(Ordering::Relaxed)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let page: DesktopPage = s
        .get(&format!("/api/sessions/{id}/desktop"))
        .send()
        .await
        .parse();
    let stream = page
        .stream
        .expect("the stream's numbers while someone watches");
    assert!(
        stream.viewers >= 1 && stream.frames >= 10 && stream.encoder_pid.is_some(),
        "{stream:?}"
    );
    encoder_is_confined(stream.encoder_pid.unwrap_or_default(), &host_tmp_before);
    // A picture loss indication from the viewer reaches the encoder: one more keyframe.
    let before = stream.keyframes;
    assert!(before >= 1, "the stream starts with a keyframe");
    viewer.request_keyframe().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let page: DesktopPage = s
            .get(&format!("/api/sessions/{id}/desktop"))
            .send()
            .await
            .parse();
        if page.stream.as_ref().is_some_and(|st| st.keyframes > before) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the keyframe request never reached the encoder: {:?}",
            page.stream
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Open the page in the shared browser, then click it through the stream's input path.
    let url = "file:///workspace/page.html";
    let opened = s
        .req(
            axum::http::Method::POST,
            &format!("/api/sessions/{id}/desktop/open"),
        )
        .bearer(&s.admin_token)
        .json(&json!({ "url": url }))
        .send()
        .await;
    assert_eq!(
        opened.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&opened.body)
    );
    for input in [
        DesktopInput::Move { x: 0.5, y: 0.6 },
        DesktopInput::Down {
            x: 0.5,
            y: 0.6,
            button: 1,
        },
        DesktopInput::Up {
            x: 0.5,
            y: 0.6,
            button: 1,
        },
    ] {
        owner.send(&WsClient::DesktopInput { input }).await.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let page: DesktopPage = s
            .get(&format!("/api/sessions/{id}/desktop"))
            .send()
            .await
            .parse();
        if page.title.as_deref() == Some("clicked") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the click never reached the page: {page:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Keys with modifiers: typed text, then Ctrl+A selects it all and the next text replaces it.
    let opened = s
        .req(
            axum::http::Method::POST,
            &format!("/api/sessions/{id}/desktop/open"),
        )
        .bearer(&s.admin_token)
        .json(&json!({ "url": "file:///workspace/field.html" }))
        .send()
        .await;
    assert_eq!(opened.status, StatusCode::OK);
    // The field's page has loaded (its title says its empty value) before anything is typed:
    // on a busy machine a click sent sooner lands on the page before it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let page: DesktopPage = s
            .get(&format!("/api/sessions/{id}/desktop"))
            .send()
            .await
            .parse();
        if page.title.as_deref() == Some("v:") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the field's page never loaded: {page:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let key = |key: &str, ctrl: bool| DesktopInput::Key {
        key: key.into(),
        ctrl,
        alt: false,
        shift: false,
        meta: false,
    };
    for input in [
        DesktopInput::Down {
            x: 0.5,
            y: 0.5,
            button: 1,
        },
        DesktopInput::Up {
            x: 0.5,
            y: 0.5,
            button: 1,
        },
        DesktopInput::Text {
            text: "hello".into(),
        },
        key("a", true),
        DesktopInput::Text { text: "X".into() },
    ] {
        owner.send(&WsClient::DesktopInput { input }).await.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let page: DesktopPage = s
            .get(&format!("/api/sessions/{id}/desktop"))
            .send()
            .await
            .parse();
        if page.title.as_deref() == Some("v:X") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Ctrl+A did not select the typed text: {page:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // A viewer (through a share link) watches but cannot click.
    let link: tandem_protocol::live::ShareLink = s
        .post(
            &format!("/api/sessions/{id}/links"),
            json!({ "role": "viewer", "allow_guests": true }),
        )
        .send()
        .await
        .parse();
    let guest = Credentials {
        share: link.token.clone(),
        name: Some("watcher".into()),
        ..Default::default()
    };
    let mut watcher = LiveClient::connect(&s.url, id, &guest).await.unwrap();
    watcher
        .send(&WsClient::DesktopInput {
            input: DesktopInput::Key {
                key: "Enter".into(),
                ctrl: false,
                alt: false,
                shift: false,
                meta: false,
            },
        })
        .await
        .unwrap();
    let reason = next_matching(&mut watcher, "the refusal", |m| match m {
        WsServer::Refused { request, reason } if request == "desktop_input" => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(reason, "viewers cannot type");
    let frames = viewer.received.frames.load(Ordering::Relaxed);
    viewer.close().await;
    assert!(frames >= 10);
}

/// A session's stream numbers while someone watches.
async fn stream_stats(
    s: &crate::harness::TestServer,
    id: SessionId,
) -> tandem_protocol::agent::DesktopStreamStats {
    let page: DesktopPage = s
        .get(&format!("/api/sessions/{id}/desktop"))
        .send()
        .await
        .parse();
    page.stream
        .expect("the stream's numbers while someone watches")
}

/// `[desktop] codec = "h264"`: the server answers an offer of both codecs with H.264 alone, its
/// frames reach the viewer, and a picture loss indication still brings a keyframe (OpenH264's
/// IDR frames are told from the rest).
#[tokio::test]
async fn a_desktop_set_to_h264_is_answered_with_h264_and_streams_keyframes_on_request() {
    let Some(s) = crate::workspaces::server(|c| {
        c.desktop.codec = tandem_server::config::DesktopCodec::H264;
        c.desktop.keyframe_secs = 600;
    })
    .await
    else {
        return;
    };
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/h264", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    crate::session_workspaces::wait_state(&s, id, &[SessionState::Ready]).await;
    let creds = Credentials {
        token: Some(s.admin_token.clone()),
        ..Default::default()
    };
    let mut owner = LiveClient::connect(&s.url, id, &creds).await.unwrap();
    let (viewer, offer) = DesktopViewer::offer("127.0.0.1:0").await.unwrap();
    assert!(
        offer.contains("VP8/90000") && offer.contains("H264/90000"),
        "the viewer offers both"
    );
    owner
        .send(&WsClient::DesktopOffer { sdp: offer })
        .await
        .unwrap();
    let answer = next_matching(&mut owner, "the answer", |m| match m {
        WsServer::DesktopAnswer { sdp } => Some(sdp.clone()),
        WsServer::Refused { request, reason } => panic!("{request} refused: {reason}"),
        _ => None,
    })
    .await;
    assert!(
        answer.contains("H264/90000") && !answer.contains("VP8/90000"),
        "the answer is H.264 alone: {answer}"
    );
    assert!(answer.contains("packetization-mode=1"), "{answer}");
    viewer.accept(answer).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while viewer.received.frames.load(Ordering::Relaxed) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "H.264 frames: {}",
            viewer.received.frames.load(Ordering::Relaxed)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let first = stream_stats(&s, id).await;
    assert!(
        first.keyframes >= 1 && first.keyframes < first.frames,
        "keyframes are told from the other frames: {first:?}"
    );
    viewer.request_keyframe().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let now = stream_stats(&s, id).await;
        if now.keyframes > first.keyframes {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the keyframe request never reached the H.264 encoder: {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    viewer.close().await;
}

#[tokio::test]
async fn the_desktop_over_vnc_speaks_rfb_through_the_websocket_and_viewers_get_the_view_only_server()
 {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/vnc", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    crate::session_workspaces::wait_state(&s, id, &[SessionState::Ready]).await;
    let connect = |token: String, path: &'static str| {
        let url = format!(
            "{}{}",
            s.url.replacen("http://", "ws://", 1),
            path.replace("{id}", &id.to_string())
        );
        async move {
            let mut req = url.into_client_request().unwrap();
            req.headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            req.headers_mut()
                .insert("sec-websocket-protocol", "binary".parse().unwrap());
            let (mut ws, res) = tokio_tungstenite::connect_async(req)
                .await
                .expect("the VNC socket opens");
            assert_eq!(res.headers()["sec-websocket-protocol"], "binary");
            let first = tokio::time::timeout(std::time::Duration::from_secs(30), ws.next())
                .await
                .expect("the server speaks first")
                .unwrap()
                .unwrap();
            first.into_data().to_vec()
        }
    };
    // Watching starts nothing: before a driver starts the desktop, a viewer is refused and
    // no display comes up.
    let (_, viewer) = crate::agent_runs::another_user(&s, "vic").await;
    {
        let url = format!(
            "{}/api/sessions/{id}/vnc",
            s.url.replacen("http://", "ws://", 1)
        );
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {viewer}").parse().unwrap());
        req.headers_mut()
            .insert("sec-websocket-protocol", "binary".parse().unwrap());
        match tokio_tungstenite::connect_async(req).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
                assert_eq!(res.status(), 403)
            }
            other => panic!(
                "a viewer's VNC before the desktop runs: {:?}",
                other.map(|_| ())
            ),
        }
        let procs =
            crate::session_workspaces::exec(&s, id, "ps -eo args | grep -c '^Xvfb' || true")
                .await
                .stdout;
        assert_eq!(procs.trim(), "0", "a viewer started the display");
    }
    // The owner: x11vnc's greeting, through the tunnel.
    let hello = connect(s.admin_token.clone(), "/api/sessions/{id}/vnc").await;
    assert!(
        hello.starts_with(b"RFB 003.00"),
        "{:?}",
        String::from_utf8_lossy(&hello)
    );
    // The same beside VS Code, outside /api.
    let hello = connect(s.admin_token.clone(), "/sessions/{id}/vnc").await;
    assert!(hello.starts_with(b"RFB 003.00"));
    // Someone who only watches gets the view-only server (the desktop runs now).
    let hello = connect(viewer, "/api/sessions/{id}/vnc").await;
    assert!(hello.starts_with(b"RFB 003.00"));
    let procs = crate::session_workspaces::exec(&s, id, "ps -eo args | grep '^x11vnc' || true")
        .await
        .stdout;
    assert!(
        procs
            .lines()
            .any(|l| l.contains("-rfbport 5901") && l.contains("-viewonly")),
        "{procs}"
    );
    assert!(
        procs
            .lines()
            .any(|l| l.contains("-rfbport 5900") && !l.contains("-viewonly")),
        "{procs}"
    );
}

#[tokio::test]
async fn a_vnc_connection_that_takes_input_is_closed_when_control_moves_away() {
    use futures::StreamExt;
    use tandem_protocol::live::{WsClient, WsServer};
    use tandem_server::client::live::{Credentials, Incoming, LiveClient};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = crate::session_workspaces::ready_session(&s, "acme/vnc-control").await;
    // Bob drives (a link's role); no one holds control, so his VNC connection takes input.
    let (_, bob) = crate::agent_runs::another_user(&s, "bob").await;
    let link: tandem_protocol::live::ShareLink = s
        .post(
            &format!("/api/sessions/{id}/links"),
            json!({ "role": "driver" }),
        )
        .send()
        .await
        .parse();
    let joined = s
        .req(axum::http::Method::POST, "/api/links/join")
        .bearer(&bob)
        .json(&json!({ "token": link.token.unwrap() }))
        .send()
        .await;
    assert_eq!(
        joined.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&joined.body)
    );
    let jti = link.jti.clone();
    let connect = || async {
        let mut req = format!(
            "{}/api/sessions/{id}/vnc",
            s.url.replacen("http://", "ws://", 1)
        )
        .into_client_request()
        .unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {bob}").parse().unwrap());
        req.headers_mut()
            .insert("sec-websocket-protocol", "binary".parse().unwrap());
        let (mut vnc, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let greeting = vnc.next().await.unwrap().unwrap().into_data();
        assert!(greeting.starts_with(b"RFB 003.00"));
        vnc
    };
    let closed = |mut vnc: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >| async move {
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(10), vnc.next()).await {
                Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Close(f)))) => {
                    break f.map(|f| u16::from(f.code));
                }
                Ok(Some(Ok(_))) => {}
                other => panic!("Bob's VNC connection was not closed: {other:?}"),
            }
        }
    };
    let vnc = connect().await;

    // The owner takes control.
    let creds = Credentials {
        token: Some(s.admin_token.clone()),
        ..Default::default()
    };
    let mut owner = LiveClient::connect(&s.url, id, &creds).await.unwrap();
    owner.send(&WsClient::TakeControl).await.unwrap();
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(30), owner.next()).await {
            Ok(Some(Incoming::Message(m)))
                if matches!(
                    *m,
                    WsServer::Control {
                        controller: Some(_)
                    }
                ) =>
            {
                break;
            }
            Ok(Some(_)) => {}
            other => panic!("control never moved: {other:?}"),
        }
    }
    // Bob's input-taking connection ends, saying why.
    assert_eq!(
        closed(vnc).await,
        Some(tandem_protocol::live::close::FORBIDDEN)
    );

    // Control free again, Bob takes input again — until the owner revokes his link.
    owner.send(&WsClient::ReleaseControl).await.unwrap();
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(30), owner.next()).await {
            Ok(Some(Incoming::Message(m)))
                if matches!(*m, WsServer::Control { controller: None }) =>
            {
                break;
            }
            Ok(Some(_)) => {}
            other => panic!("control was never released: {other:?}"),
        }
    }
    let vnc = connect().await;
    let revoked = s
        .req(
            axum::http::Method::DELETE,
            &format!("/api/sessions/{id}/links/{jti}"),
        )
        .bearer(&s.admin_token)
        .send()
        .await;
    assert!(revoked.status.is_success());
    assert_eq!(
        closed(vnc).await,
        Some(tandem_protocol::live::close::FORBIDDEN)
    );
}
