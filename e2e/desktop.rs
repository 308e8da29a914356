//! The desktop in the browser: the session page plays the workspace's screen over WebRTC
//! (decoded frames counted with `getStats`), the person in control clicks a button on the
//! workspace's page through the video and the page changes; a viewer's click is refused.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use serde_json::json;
use tandem_protocol::agent::DesktopPage;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, WAIT, web_dir};
use crate::harness::{Backend, TestServer, Transport};

const PAGE: &str = r#"<!doctype html><title>waiting</title>
<button id="go" style="position:fixed;inset:0;width:100vw;height:100vh;font-size:80px;background:#2a6"
 onclick="document.title='clicked';this.style.background='#c00';this.textContent='Clicked!'">Click me</button>"#;

/// Frames the page's desktop video has decoded (its peer connection's `getStats`).
async fn frames_decoded(b: &Browser) -> u64 {
    let v = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const pc = window.tandemDesktopPc;
             if (!pc) { done(0); return; }
             pc.getStats().then(r => { let n = 0; r.forEach(s => { if (s.type === 'inbound-rtp' && s.kind === 'video') n = s.framesDecoded || 0; }); done(n); });",
            vec![],
        )
        .await
        .unwrap();
    v.as_u64().unwrap_or(0)
}

/// The decoded picture: the centre pixel's colour and the frame as a PNG data URL (drawn from
/// the video into a canvas: what the person sees, whatever the screenshot path does with video).
async fn video_frame(b: &Browser) -> ([u8; 3], String) {
    let v = b
        .client
        .execute(
            "const v = document.querySelector('#desktop-video');
             if (!v || !v.videoWidth) return null;
             const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
             const g = c.getContext('2d'); g.drawImage(v, 0, 0);
             const p = g.getImageData(c.width >> 1, Math.round(c.height * 0.6), 1, 1).data;
             return [p[0], p[1], p[2], c.toDataURL('image/png')];",
            vec![],
        )
        .await
        .unwrap();
    let a = v.as_array().cloned().unwrap_or_default();
    let px = |i: usize| a.get(i).and_then(|x| x.as_u64()).unwrap_or(0) as u8;
    (
        [px(0), px(1), px(2)],
        a.get(3)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string(),
    )
}

/// Waits until the video's centre is `want` (close enough for a lossy codec); saves the frame.
async fn wait_colour(b: &Browser, want: [u8; 3], name: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (px, png) = video_frame(b).await;
        if px.iter().zip(want).all(|(a, b)| a.abs_diff(b) < 40) {
            let bytes = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                png.trim_start_matches("data:image/png;base64,"),
            )
            .unwrap();
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e/desktop-owner");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
            return;
        }
        if Instant::now() > deadline {
            let diag = b.client.execute("const v = document.querySelector('#desktop-video'); return [v.videoWidth, v.videoHeight, v.readyState, v.paused, v.currentTime, String(v.srcObject)];", vec![]).await.unwrap();
            let frames = frames_decoded(b).await;
            panic!(
                "the desktop video's centre is {px:?}, not {want:?}; video: {diag}, {frames} frames decoded"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_frames(b: &Browser, at_least: u64) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let n = frames_decoded(b).await;
        if n >= at_least {
            return n;
        }
        assert!(Instant::now() < deadline, "the desktop decoded {n} frames");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_session_page_plays_the_desktop_the_controller_clicks_it_and_a_viewer_cannot() {
    let Some(web) = web_dir() else { return };
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let recipe = crate::fixtures::test_recipe();
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
    })
    .await
    else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let (_src, repo) =
        crate::fixtures::repo_with(&api, "acme/desktop", &[("page.html", PAGE)]).await;
    let res = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo.id, "agent": { "kind": "none" } }),
        )
        .send()
        .await;
    let id: SessionId = res.parse::<SessionDetail>().session.id;

    // The owner opens the desktop tab: the workspace's screen plays.
    let a = Browser::start("desktop-owner").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    a.open_ready_session(&s.url, id).await;
    a.click("#tab-desktop").await;
    let first = wait_frames(&a, 5).await;
    // Each frame is shown as soon as it is decoded: the page asks for no jitter buffer (what
    // keeps glass-to-glass low; `cargo xtask bench desktop` measures it).
    let target = a
        .client
        .execute(
            "const r = window.tandemDesktopPc.getReceivers().find(r => r.track && r.track.kind === 'video');
             return r ? r.jitterBufferTarget : 'no video receiver';",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(target, json!(0), "the desktop video's jitter buffer target");

    // The workspace's browser shows the page (opened through the pane's URL box).
    let url_box = a
        .client
        .wait()
        .for_element(Locator::Css("#desktop-url"))
        .await
        .unwrap();
    url_box
        .send_keys("file:///workspace/page.html")
        .await
        .unwrap();
    a.click("#desktop form button[type=submit]").await;
    a.wait_text("#desktop-page", "waiting — file:///workspace/page.html")
        .await;
    let later = wait_frames(&a, first + 10).await;
    // The picture is the workspace's page: its green button fills the screen.
    wait_colour(&a, [0x22, 0xaa, 0x66], "desktop-video-before-click").await;
    a.screenshot("desktop-before-click").await;

    // A viewer (share link) watches; its click is refused and the page stays as it is.
    let link: live::ShareLink = s
        .post(
            &format!("/api/sessions/{id}/links"),
            json!({ "role": "viewer", "allow_guests": true }),
        )
        .send()
        .await
        .parse();
    let b = Browser::start("desktop-viewer").await;
    b.client.goto(link.url.as_deref().unwrap()).await.unwrap();
    b.type_into("#guest-name", "Vic").await;
    b.click("#guest-join").await;
    b.wait_path(|p| p.starts_with("/sessions/")).await;
    b.client
        .wait()
        .for_element(Locator::Css("#tab-desktop"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_frames(&b, 5).await;
    b.click("#desktop-video").await;
    b.wait_text("#refused", "desktop_input: viewers cannot type")
        .await;
    let page: DesktopPage = s
        .get(&format!("/api/sessions/{id}/desktop"))
        .send()
        .await
        .parse();
    assert_eq!(
        page.title.as_deref(),
        Some("waiting"),
        "the viewer's click did nothing"
    );

    // The owner (in control: no one else holds it) clicks the button through the video.
    a.click("#desktop-video").await;
    let deadline = Instant::now() + WAIT;
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
            Instant::now() < deadline,
            "the click never reached the page: {page:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The picture follows: the button turned red on the video too (frames decoded after the
    // click, not ones counted while the viewer joined).
    let clicked = frames_decoded(&a).await;
    wait_frames(&a, clicked.max(later) + 10).await;
    wait_colour(&a, [0xcc, 0x00, 0x00], "desktop-video-after-click").await;
    a.screenshot("desktop-after-click").await;

    // Where UDP cannot reach: the same desktop over VNC (noVNC through the server's WebSocket).
    a.click("#desktop-use-vnc").await;
    let deadline = Instant::now() + WAIT;
    loop {
        let px = a
            .client
            .execute(
                "const c = document.querySelector('#desktop-vnc canvas');
                 if (!c || c.width < 1000) return null;
                 const p = c.getContext('2d').getImageData(c.width >> 1, Math.round(c.height * 0.6), 1, 1).data;
                 return [c.width, p[0], p[1], p[2]];",
                vec![],
            )
            .await
            .unwrap();
        let v: Vec<u64> = px
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default();
        if v.len() == 4 && v[0] == 1280 && v[1] > 150 && v[2] < 60 && v[3] < 60 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the VNC view never showed the clicked page: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.screenshot("desktop-over-vnc").await;
    b.close().await;
    a.close().await;
}

/// The agent's screenshot tool: a real PNG of the workspace's Chromium, shown in the timeline.
#[tokio::test]
async fn the_agents_screenshot_shows_in_the_timeline() {
    use scripted_model::{Reply, ScriptedModel};
    let Some(web) = web_dir() else { return };
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let recipe = crate::fixtures::test_recipe();
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "browser_navigate",
            json!({ "url": "file:///workspace/page.html" }),
        )
        .at_step(0),
        Reply::tool("browser_screenshot", json!({ "name": "the-page.png" })).at_step(1),
        Reply::text("Here is the page.").at_step(2),
    ])
    .await;
    let url = model.base_url.clone();
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
        c.agents.model_base_url = Some(url);
    })
    .await
    else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/shot", &[("page.html", PAGE)]).await;
    let id: SessionId = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo.id, "prompt": "Show me the page" }),
        )
        .send()
        .await
        .parse::<SessionDetail>()
        .session
        .id;
    let a = Browser::start("timeline-screenshot").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    a.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    a.wait_text("#timeline", "Here is the page.").await;
    // The image element has loaded the PNG (its natural size is the browser's viewport).
    let deadline = Instant::now() + WAIT;
    loop {
        let v = a
            .client
            .execute(
                "const i = [...document.querySelectorAll('#timeline .attachment img')].find(i => i.alt === 'the-page.png');
                 return i && i.complete ? [i.naturalWidth, i.naturalHeight] : null;",
                vec![],
            )
            .await
            .unwrap();
        let size: Vec<u64> = v
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default();
        if size.len() == 2 && size[0] >= 1200 && size[1] >= 400 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the screenshot never showed in the timeline: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.screenshot("timeline-with-screenshot").await;
    a.close().await;
}
