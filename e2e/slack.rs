//! Slack on the settings page in Chromium: an admin sets a channel's repo and a keyword rule,
//! and the page shows what the server kept (and its refusal of a keyword too short to mean
//! anything).

use fantoccini::Locator;
use tandem_protocol::CreateRepo;
use tandem_server::client::Client;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

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
async fn an_admin_sets_slack_channel_repos_and_keywords_on_the_settings_page() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        // The page never calls Slack: nothing listens here.
        c.slack = Some(tandem_server::config::SlackConfig {
            api_url: "http://127.0.0.1:9/api".into(),
            files_url: "http://127.0.0.1:9".into(),
            signing_secret: "slack_signing_secret".into(),
            bot_token: "slack_bot_token".into(),
            allowed_teams: Vec::new(),
        });
    })
    .await
    .unwrap();
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    for name in ["acme/web", "acme/billing"] {
        api.create_repo(&CreateRepo {
            name: name.into(),
            url: "https://example.invalid/r.git".into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    }
    let repos = api.repos().await.unwrap();
    let id = |n: &str| repos.iter().find(|r| r.name == n).unwrap().id.to_string();
    let b = Browser::start("slack_settings").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client.goto(&format!("{}/settings", s.url)).await.unwrap();
    b.wait_text("#slack-channels-empty", "No channel has a repo yet")
        .await;

    b.type_into("#slack-channel-id", "c0web").await;
    pick(&b, "#slack-channel-repo", &id("acme/web")).await;
    b.click("#slack-channel-add").await;
    b.wait_text("#slack-channels", "#C0WEB → acme/web").await;

    // A one-letter keyword would match nearly every message: refused, and said why.
    b.type_into("#slack-keyword", "x").await;
    pick(&b, "#slack-keyword-repo", &id("acme/billing")).await;
    b.click("#slack-keyword-add").await;
    b.wait_text("#slack-settings", "2 to 200 characters").await;
    b.client
        .find(Locator::Css("#slack-keyword"))
        .await
        .unwrap()
        .clear()
        .await
        .unwrap();
    b.type_into("#slack-keyword", "Invoice").await;
    b.click("#slack-keyword-add").await;
    b.wait_text("#slack-rules", "invoice → acme/billing").await;

    // What the page shows is what the server keeps.
    let kept = s.get("/api/slack/settings").send().await.json();
    assert_eq!(kept["rules"][0]["keyword"], "invoice");
    assert_eq!(kept["channels"][0]["channel_id"], "C0WEB");
    b.client
        .execute(
            "document.getElementById('slack-settings').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    b.screenshot("slack-settings").await;
    b.close().await;
}
