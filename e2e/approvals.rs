//! An approval card in the browser: the agent calls a real MCP server's open-world tool
//! (npm's server-everything, through the gateway), the card shows the tool, its arguments and
//! whose turn it is — on the desktop layout and at 390×844, as on a phone; a viewer sees it
//! without buttons; the owner approves it from the phone-sized page and the card says so.

use fantoccini::Locator;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, web_dir};
use crate::mcp_servers::{Everything, SECRET, servers_dir};

#[tokio::test]
async fn a_driver_answers_an_approval_card_on_a_phone_sized_page_and_a_viewer_only_sees_it() {
    let Some(web) = web_dir() else { return };
    let Some(mcp) = servers_dir() else { return };
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "everything__gzip-file-as-resource",
            json!({ "name": "release-notes.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource" }),
        )
        .for_prompt("Compress the release notes")
        .at_step(0)
        .saying("I will compress them with the company's tool."),
    ])
    .await;
    model.fallback(Reply::text("Compressed."));
    let Some(s) = crate::session::server(web, &model).await else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    api.set_secret("model_api_key", "sk-e2e".into())
        .await
        .unwrap();
    let everything = Everything::start(&mcp).await;
    let put = reqwest::Client::new()
        .put(format!("{}/api/mcp/servers/everything", s.url))
        .bearer_auth(&s.admin_token)
        .json(
            &json!({ "url": everything.url, "secret": "everything_token", "secret_value": SECRET }),
        )
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/release", &[]).await;

    let a = Browser::start("approval-owner").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: "Compress the release notes".into(),
            branch: None,
            agent: None,
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    a.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    let card = a.wait_text(".ev.approval", "gzip-file-as-resource").await;
    assert!(card.contains("release-notes.gz"), "the arguments: {card}");
    assert!(card.contains("admin"), "whose turn: {card}");
    a.wait_text(".ev.approval .approval-approve", "Approve")
        .await;
    a.screenshot("approval-card").await;

    // A viewer sees the card, not its buttons.
    let viewer: live::ShareLink = reqwest::Client::new()
        .post(format!("{}/api/sessions/{id}/links", s.url))
        .bearer_auth(&s.admin_token)
        .json(&json!({ "role": "viewer", "allow_guests": true }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let v = Browser::start("approval-viewer").await;
    crate::session::join_as_guest(&v, viewer.url.as_deref().unwrap(), "Vic").await;
    v.wait_text(".ev.approval", "Waiting for a driver").await;
    assert!(
        v.client
            .find(Locator::Css(".ev.approval .approval-approve"))
            .await
            .is_err(),
        "a viewer gets no buttons"
    );

    // The owner, on a phone-sized page, approves.
    a.client.set_window_size(390, 844).await.unwrap();
    a.wait_text(".ev.approval .approval-approve", "Approve")
        .await;
    a.client
        .execute(
            "document.querySelector('.ev.approval').scrollIntoView({block: 'center'})",
            vec![],
        )
        .await
        .unwrap();
    a.screenshot("approval-card-phone").await;
    a.click(".ev.approval .approval-approve").await;
    a.wait_text(".ev.approval .approval-outcome", "admin approved it")
        .await;
    v.wait_text(".ev.approval .approval-outcome", "admin approved it")
        .await;
    a.wait_text("#timeline", "Compressed.").await;
    a.screenshot("approval-approved-phone").await;
    // Nothing is wider than the phone's screen: no sideways scrolling.
    let wide = |b: &Browser| {
        let c = b.client.clone();
        async move {
            c.execute("return document.documentElement.scrollWidth", vec![])
                .await
                .unwrap()
                .as_i64()
                .unwrap()
        }
    };
    assert!(
        wide(&a).await <= 390,
        "the session page scrolls sideways at 390 px"
    );
    a.client.goto(&format!("{}/", s.url)).await.unwrap();
    a.wait_text("#sessions", "Compress the release notes").await;
    a.screenshot("dashboard-phone").await;
    let w = wide(&a).await;
    assert!(
        w <= 390,
        "the dashboard scrolls sideways at 390 px: {w} px wide"
    );
    assert!(
        everything
            .authorizations()
            .iter()
            .all(|h| h.as_deref() == Some(&format!("Bearer {SECRET}")))
    );
    v.close().await;
    a.close().await;
}
