//! The Chrome extension in real Chromium: the package this server serves, loaded unpacked
//! (`--load-extension`, `--headless=new`), its side panel opened as a tab. It pairs, picks an
//! element on a loopback page whose CSP blocks inline script, sends it as a new session's
//! prompt (URL, selector, outer HTML, a screenshot cut to the element's box), shows the scripted
//! agent's reply, queues a follow-up, cuts a 5 MB page's element to its bound, answers an
//! approval card, shows the session's use, asks to pair again once its token is revoked
//! (sending nothing), and says so when an address is not Tandem.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use fantoccini::Locator;
use scripted_model::{Reply, ScriptedModel};
use serde_json::{Value, json};
use sha2::Digest;

use crate::browser::{Browser, WAIT, web_dir};
use crate::harness::{Backend, TestServer, Transport};

const REPLY: &str = "Found it: the buy button's handler is never attached.";

/// The shop page: its CSP allows its own script file and blocks inline script.
const SHOP: &str = r#"<!doctype html><html><head><title>Shop cart</title></head><body>
<h1>Cart</h1>
<div id="cart"><button id="buy" style="position:absolute;left:40px;top:120px;width:160px;height:40px">Buy now</button></div>
<script src="/app.js"></script>
<script>document.title = "inline script ran";</script>
</body></html>"#;

/// What React leaves on a DOM node, and an error in the console.
const APP_JS: &str = r#"
function App() {} function Checkout() {} function BuyButton() {}
document.getElementById("buy")["__reactFiber$t4nd3m"] =
  { type: "button", return: { type: BuyButton, return: { type: Checkout, return: { type: App, return: null } } } };
console.error("TypeError: total is undefined");
"#;

/// A loopback site: `/` (the shop), `/app.js`, `/huge` (a 5 MB DOM).
async fn site() -> String {
    use axum::response::IntoResponse;
    let huge = {
        let mut s = String::from("<!doctype html><title>Huge</title><div id=\"big\">");
        while s.len() < 5 * 1024 * 1024 {
            s.push_str(
                "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.</p>",
            );
        }
        s + "</div>"
    };
    let csp = [("content-security-policy", "script-src 'self'")];
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(
                move || async move { (csp, axum::response::Html(SHOP)).into_response() },
            ),
        )
        .route(
            "/app.js",
            axum::routing::get(|| async { ([("content-type", "text/javascript")], APP_JS) }),
        )
        .route(
            "/huge",
            axum::routing::get(move || {
                let huge = huge.clone();
                async move { axum::response::Html(huge) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// The id Chromium gives an unpacked extension: its absolute path hashed, in letters a–p.
fn unpacked_id(dir: &Path) -> String {
    let hash = sha2::Sha256::digest(dir.as_os_str().as_encoded_bytes());
    hash[..16]
        .iter()
        .flat_map(|b| [b >> 4, b & 15])
        .map(|n| (b'a' + n) as char)
        .collect()
}

/// Unzips the package `url` serves into `dir`.
async fn download_package(s: &TestServer, dir: &Path) {
    let res = s
        .req(Method::GET, "/extension/tandem.zip")
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(res.body)).unwrap();
    zip.extract(dir).unwrap();
}

async fn wait_until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The prompts of the newest session, as JSON.
async fn prompts(s: &TestServer, id: &str) -> Vec<Value> {
    let d = s.get(&format!("/api/sessions/{id}")).send().await.json();
    d["prompts"].as_array().cloned().unwrap_or_default()
}

async fn switch(b: &Browser, w: &fantoccini::wd::WindowHandle) {
    b.client.switch_to_window(w.clone()).await.unwrap();
}

/// Picks `css` on the page window with the panel's `button`, and waits for the panel to show it.
async fn pick(
    b: &Browser,
    panel: &fantoccini::wd::WindowHandle,
    page: &fantoccini::wd::WindowHandle,
    button: &str,
    css: &str,
) {
    b.click(button).await;
    switch(b, page).await;
    // The picker's highlight shows once it listens.
    wait_until("the picker", async || {
        let n = b
            .client
            .execute(
                "return document.querySelectorAll(':root > div').length",
                vec![],
            )
            .await
            .ok()?;
        (n.as_u64()? > 0).then_some(())
    })
    .await;
    b.click(css).await;
    switch(b, panel).await;
    b.wait_text("#picked-selector", css).await;
}

#[tokio::test]
async fn the_extension_pairs_picks_an_element_and_follows_its_session() {
    let Some(web) = web_dir() else { return };
    let model = ScriptedModel::start(vec![
        Reply::text(REPLY),
        Reply::tool("spawn_sessions", json!({ "prompt": "child: the cart" }))
            .for_last_prompt("Split this up"),
    ])
    .await;
    model.fallback(Reply::text("Queued follow-up done."));
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let recipe = crate::fixtures::test_recipe();
    let url = model.base_url.clone();
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        // Headless Chromium has no toolbar button to click for `activeTab`.
        c.extension.all_sites = true;
    })
    .await
    else {
        return;
    };
    let api = tandem_server::client::Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/shop", &[]).await;
    let (_other_src, _other) = crate::fixtures::repo_with(&api, "acme/other", &[]).await;
    let shop = site().await;
    // Pages of the shop default to acme/shop.
    let set = s
        .req(Method::PUT, "/api/extension/rules")
        .bearer(&s.admin_token)
        .json(&json!([{ "pattern": format!("{shop}/*"), "repo_id": repo.id }]))
        .send()
        .await;
    assert_eq!(set.status, StatusCode::OK);

    let unpacked = tempfile::tempdir().unwrap();
    let dir = unpacked.path().canonicalize().unwrap();
    download_package(&s, &dir).await;
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["permissions"],
        json!(["sidePanel", "activeTab", "scripting", "storage"])
    );
    let id = unpacked_id(&dir);
    let b = Browser::start_with_args(
        "extension",
        &[format!("--load-extension={}", dir.display())],
    )
    .await;
    let page = b.client.window().await.unwrap();
    b.client.goto(&shop).await.unwrap();
    assert_eq!(
        b.client.title().await.unwrap(),
        "Shop cart",
        "the page's CSP blocks inline script"
    );
    let panel = b.client.new_window(false).await.unwrap().handle;
    switch(&b, &panel).await;
    b.client.set_window_size(420, 900).await.unwrap();
    b.client
        .goto(&format!("chrome-extension://{id}/panel.html"))
        .await
        .unwrap();

    // Pair: the address is filled in from the package; the person approves the code.
    let filled = b
        .client
        .wait()
        .for_element(Locator::Css("#server-url"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(filled, s.url);
    b.click("#connect").await;
    let code = b.wait_text("#pair-code", "-").await;
    b.screenshot("pairing").await;
    let ok = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&s.admin_token)
        .json(&json!({ "user_code": code.trim() }))
        .send()
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    b.wait_text("#me", "admin").await;
    b.wait_text("#page", "Shop cart").await;
    let chosen = wait_until("the rule's repo chosen", async || {
        let v = b
            .client
            .find(Locator::Css("#repo"))
            .await
            .ok()?
            .prop("value")
            .await
            .ok()??;
        (v == repo.id.to_string()).then_some(v)
    })
    .await;
    assert_eq!(chosen, repo.id.to_string());

    // Pick the buy button and send it as a new session's prompt, console errors included.
    pick(&b, &panel, &page, "#pick", "#buy").await;
    b.wait_text("#picked-components", "BuyButton").await;
    b.click("#console-errors").await;
    b.type_into("#prompt", "The buy button does nothing").await;
    b.click("#send").await;
    b.wait_text("#timeline", REPLY).await;
    b.screenshot("panel").await;
    let sessions = s.get("/api/sessions").send().await.json();
    let sid = sessions[0]["id"].as_str().unwrap().to_string();
    let first = &prompts(&s, &sid).await[0];
    let c = &first["context"];
    assert_eq!(c["url"], format!("{shop}/"));
    assert_eq!(c["title"], "Shop cart");
    assert_eq!(c["element"]["selector"], "#buy");
    assert!(
        c["element"]["outer_html"]
            .as_str()
            .unwrap()
            .starts_with("<button id=\"buy\""),
        "{c}"
    );
    assert_eq!(
        c["element"]["components"],
        json!(["App", "Checkout", "BuyButton"])
    );
    assert!(
        c["console_errors"][0]
            .as_str()
            .unwrap_or_default()
            .contains("total is undefined"),
        "{c}"
    );
    let shot = c["screenshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "element")
        .expect("an element screenshot")
        .clone();
    let png = s
        .get(&format!(
            "/api/sessions/{sid}/artifacts/{}",
            shot["artifact"].as_str().unwrap()
        ))
        .send()
        .await
        .body;
    let (w, h) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    let dpr = c["element"]["device_pixel_ratio"].as_f64().unwrap();
    assert_eq!(
        (w, h),
        ((160.0 * dpr) as u32, (40.0 * dpr) as u32),
        "the screenshot is the element's box"
    );
    // The model saw the page: text and both screenshots.
    let seen = model.requests()[0].clone();
    assert!(seen.user_messages()[0].contains("\"selector\": \"#buy\""));
    assert_eq!(seen.images().len(), 2);

    // A follow-up from the panel queues in the same session.
    b.type_into("#follow-prompt", "Also check the total").await;
    b.click("#follow-send").await;
    wait_until("the follow-up", async || {
        let p = prompts(&s, &sid).await;
        (p.len() == 2 && p[1]["text"] == "Also check the total").then_some(())
    })
    .await;

    // A 5 MB page: the element's outer HTML is cut to its bound, and the prompt says so.
    switch(&b, &page).await;
    b.client.goto(&format!("{shop}/huge")).await.unwrap();
    switch(&b, &panel).await;
    pick(&b, &panel, &page, "#follow-pick", "#big").await;
    b.wait_text("#picked-cut", "cut").await;
    b.type_into("#follow-prompt", "Why is this page so slow?")
        .await;
    b.click("#follow-send").await;
    let third = wait_until("the huge page's prompt", async || {
        prompts(&s, &sid).await.get(2).cloned()
    })
    .await;
    let e = &third["context"]["element"];
    assert_eq!(e["outer_html_cut"], true);
    assert!(e["outer_html"].as_str().unwrap().len() <= 32 * 1024);
    assert!(e["outer_html_bytes"].as_u64().unwrap() > 5_000_000);

    // An approval card in the panel: the agent asks to start child sessions (the admins' policy
    // says ask); the person denies it there with a reason the agent is told. The panel shows
    // what the session used.
    let ask = s
        .req(Method::PUT, "/api/mcp/actions")
        .bearer(&s.admin_token)
        .json(&json!({ "rules": [{ "tool": "spawn_sessions", "action": "ask" }] }))
        .send()
        .await;
    assert_eq!(ask.status, StatusCode::OK);
    b.type_into("#follow-prompt", "Split this up").await;
    b.click("#follow-send").await;
    let deadline = Instant::now() + WAIT;
    loop {
        let asked = s
            .get(&format!("/api/sessions/{sid}/approvals"))
            .send()
            .await
            .json();
        if asked.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        if Instant::now() > deadline {
            let evs = s
                .get(&format!("/api/sessions/{sid}/events?limit=500"))
                .send()
                .await
                .json();
            panic!("the agent never asked: {evs}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.wait_text(".entry.approval .approval-head", "start child sessions")
        .await;
    b.wait_text(".entry.approval .approval-for", "admin's turn")
        .await;
    b.wait_text("#session-spend", "tokens").await;
    b.screenshot("panel-approval").await;
    b.type_into(".entry.approval .approval-reason", "not in this session")
        .await;
    b.click(".entry.approval .approval-deny").await;
    b.wait_text(
        ".entry.approval .approval-outcome",
        "admin denied it: not in this session",
    )
    .await;
    let approvals = s
        .get(&format!("/api/sessions/{sid}/approvals"))
        .send()
        .await
        .json();
    assert_eq!(approvals[0]["state"], "denied", "{approvals}");
    assert_eq!(approvals[0]["answered_by"]["name"], "admin");
    wait_until("the agent told of the denial", async || {
        model
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("not in this session"))
            .then_some(())
    })
    .await;

    // Its token revoked, the panel asks to pair again and sends nothing.
    let tokens = s.get("/api/tokens").send().await.json();
    let ext = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["scope"] == "extension")
        .unwrap()
        .clone();
    let gone = s
        .req(
            Method::DELETE,
            &format!("/api/tokens/{}", ext["id"].as_str().unwrap()),
        )
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    b.type_into("#follow-prompt", "This must not arrive").await;
    b.click("#follow-send").await;
    b.wait_text("#error", "Pair again").await;
    assert_eq!(prompts(&s, &sid).await.len(), 4, "nothing was sent");

    // An address that is not Tandem gets a clear message.
    let input = b
        .client
        .wait()
        .for_element(Locator::Css("#server-url"))
        .await
        .unwrap();
    input.clear().await.unwrap();
    input.send_keys(&shop).await.unwrap();
    b.click("#connect").await;
    b.wait_text("#error", "not a Tandem server").await;

    // In the web app the prompt shows what it was about: the element's screenshot, selector
    // and page; the install page names this server; admins see the page rules.
    switch(&b, &page).await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client
        .goto(&format!("{}/sessions/{sid}", s.url))
        .await
        .unwrap();
    b.wait_text(".prompt-context", "#buy").await;
    b.wait_text(".prompt-context", &shop).await;
    let loaded = wait_until("the thumbnail", async || {
        let w = b
            .client
            .execute(
                "const i = document.querySelector('img.context-thumb'); if (i) i.scrollIntoView(); return i && i.complete ? i.naturalWidth : 0",
                vec![],
            )
            .await
            .ok()?
            .as_u64()?;
        (w > 0).then_some(w)
    })
    .await;
    assert_eq!(loaded, u64::from(w), "the element's screenshot shows");
    b.screenshot("web-timeline").await;
    b.client
        .goto(&format!("{}/extension", s.url))
        .await
        .unwrap();
    b.wait_text("#extension-server", &s.url).await;
    let hello = s.get("/api/extension/hello").send().await.json();
    b.wait_text("#extension-policy", hello["extension_id"].as_str().unwrap())
        .await;
    b.screenshot("install").await;
    b.client.goto(&format!("{}/settings", s.url)).await.unwrap();
    b.wait_text("#page-rules", &shop).await;
    b.client
        .execute(
            "document.getElementById('page-rules').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    b.screenshot("page-rules").await;
    b.close().await;
}
