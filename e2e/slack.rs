//! Slack on the settings page in Chromium: an admin sets a channel's repo and a keyword rule,
//! and the page shows what the server kept (and its refusal of a keyword too short to mean
//! anything); and a one-time link clicked on another site, which loads itself once and links
//! only after its button waits a second.

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

/// A Slack one-time link clicked on another site (Slack's web client; here a page on
/// `localhost`, another site than `127.0.0.1`): Chromium leaves the SameSite=Strict sign-in
/// cookie behind, the page loads itself once from Tandem, and the confirmation shows. Its button
/// is disabled whenever the window has just been shown or focused (double-clickjacking: a click
/// meant for another window cannot press it), enabled a second later, and then links.
#[tokio::test]
async fn a_slack_link_clicked_on_another_site_links_after_a_pause() {
    let Some(web) = web_dir() else { return };
    let fake = fake_slack::FakeSlack::start("e2e-signing", "xoxb-e2e").await;
    let slack = tandem_server::config::SlackConfig {
        api_url: fake.api_url(),
        files_url: fake.url(),
        signing_secret: "slack_signing_secret".into(),
        bot_token: "slack_bot_token".into(),
        allowed_teams: Vec::new(),
    };
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.slack = Some(slack);
    })
    .await
    .unwrap();
    for (name, value) in [
        ("slack_signing_secret", "e2e-signing"),
        ("slack_bot_token", "xoxb-e2e"),
    ] {
        let res = s
            .req(axum::http::Method::PUT, &format!("/api/secrets/{name}"))
            .bearer(&s.admin_token)
            .json(&serde_json::json!({ "value": value }))
            .send()
            .await;
        assert_eq!(res.status, 204);
    }
    // Mallory, unknown to Tandem, mentions the app and is sent a one-time link.
    fake.add_user("U2MAL", "mallory", None);
    fake.add_channel("C0E2E", "e2e");
    let ask = fake.post_as(
        "U2MAL",
        "C0E2E",
        None,
        &format!("<@{}> hello", fake_slack::BOT_USER_ID),
    );
    fake.send_event(
        &format!("{}/api/slack/events", s.url),
        &fake.event_for("C0E2E", &ask, true),
    )
    .await;
    let told = fake
        .wait_for("the one-time link", |f| {
            f.messages().into_iter().find(|m| {
                m.ephemeral_to.as_deref() == Some("U2MAL") && m.text.contains("one-time link")
            })
        })
        .await;
    let link = told
        .text
        .split('<')
        .nth(1)
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .to_string();
    // "Slack": a page on another site with the link.
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><title>Slack</title><a id=\"open\" href=\"{link}\">this one-time link</a>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(page) }),
    );
    let served = tokio::spawn(async move { axum::serve(other, app).await });

    let b = Browser::start("slack_link").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client
        .goto(&format!("http://localhost:{other_port}/"))
        .await
        .unwrap();
    b.click("#open").await;
    b.wait_text("#slack-handle", "@mallory").await;
    let url = b.client.current_url().await.unwrap();
    assert!(
        url.query().is_some_and(|q| q.contains("again=1")),
        "the cross-site click came without the cookie and the page loaded itself once: {url}"
    );
    let states = b
        .client
        .execute(
            "const b = document.getElementById('link');\
             window.dispatchEvent(new Event('blur')); const blurred = b.disabled;\
             window.dispatchEvent(new Event('focus')); return [blurred, b.disabled];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        states,
        serde_json::json!([true, true]),
        "disabled when the window leaves and just after it comes back"
    );
    // Enabled by the page's own timer: wait for that change of its attribute.
    let enabled = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             const b = document.getElementById('link');\
             if (!b.disabled) { done(true); return; }\
             new MutationObserver((_, o) => { if (!b.disabled) { o.disconnect(); done(true); } })\
               .observe(b, { attributes: true });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(enabled, serde_json::json!(true));
    b.screenshot("slack-link").await;
    b.click("#link").await;
    b.wait_text("#done", "Done").await;
    // Linked: the link is used up, and mallory's next mention is heard as the admin's.
    b.client.goto(&link).await.unwrap();
    b.wait_text("#why", "used already").await;
    b.close().await;
    served.abort();
}
