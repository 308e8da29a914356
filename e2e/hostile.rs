//! What a person or an agent writes is hostile to every other person's browser: a
//! `javascript:` link (or image) in a prompt or a reply runs nothing when clicked, and every
//! page carries a Content-Security-Policy that allows no inline script.

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
