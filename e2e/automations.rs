//! The Automations page in Chromium: make a webhook automation and a schedule from the form,
//! see the webhook's URL once, call it, and see its run listed with its session.

use fantoccini::Locator;
use tandem_protocol::CreateRepo;
use tandem_server::client::Client;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

/// Chooses `value` in the select at `css`.
async fn pick(b: &Browser, css: &str, value: &str) {
    b.client
        .wait()
        .for_element(Locator::Css(css))
        .await
        .unwrap()
        .select_by_value(value)
        .await
        .unwrap();
}

#[tokio::test]
async fn automations_are_made_from_the_page_and_their_runs_listed() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with_web(Backend::Sqlite, Transport::Socket, Some(web))
        .await
        .unwrap();
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    api.create_repo(&CreateRepo {
        name: "acme/web".into(),
        url: "https://example.invalid/web.git".into(),
        default_branch: None,
        warm_pool: None,
    })
    .await
    .unwrap();
    let b = Browser::start("automations").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.wait_text("#nav-automations", "Automations").await;
    b.click("#nav-automations").await;
    b.wait_text("#automations-empty", "No automations yet")
        .await;

    // A webhook: its URL shows once.
    b.type_into("#automation-name", "errors").await;
    let repo = api.repos().await.unwrap()[0].id.to_string();
    pick(&b, "#automation-repo", &repo).await;
    pick(&b, "#automation-trigger", "webhook").await;
    b.type_into("#automation-prompt", "Fix this error: {{body.title}}")
        .await;
    b.click("#automation-create").await;
    let url = b
        .wait_text("#automation-webhook-url", "/api/automations/hooks/tah_")
        .await;
    // A schedule.
    b.type_into("#automation-name", "nightly").await;
    pick(&b, "#automation-trigger", "schedule").await;
    b.type_into("#automation-cron", "0 3 * * *").await;
    b.type_into(
        "#automation-prompt",
        "Update dependencies and fix what breaks",
    )
    .await;
    b.click("#automation-create").await;
    b.wait_text("#automations", "nightly").await;
    b.wait_text("#automations", "0 3 * * *").await;

    // Called, its run shows with a link to the session.
    let path = url
        .split_once("/api/")
        .map(|(_, p)| format!("/api/{p}"))
        .unwrap();
    let called = s
        .req(axum::http::Method::POST, path.trim())
        .json(&serde_json::json!({ "title": "TypeError: total is undefined" }))
        .send()
        .await;
    assert_eq!(called.status, axum::http::StatusCode::ACCEPTED);
    b.client.refresh().await.unwrap();
    b.wait_text("#automations", "errors").await;
    b.click("tr.automation[data-name=\"errors\"] button.automation-runs")
        .await;
    b.wait_text("li.automation-run", "").await;
    let link = b
        .client
        .wait()
        .for_element(Locator::Css("a.run-session"))
        .await
        .unwrap();
    let href = link.attr("href").await.unwrap().unwrap_or_default();
    assert!(href.starts_with("/sessions/"), "{href}");
    b.screenshot("automations").await;
    b.close().await;
}
