//! People in real Chromium: signing in with the company's identity provider (npm's
//! `oidc-provider`, its own login page), and an admin inviting a colleague from the People page,
//! who signs up through the link, then is deactivated and signed out on their next request.

use fantoccini::Locator;
use serde_json::json;
use tandem_server::config::oidc::OidcConfig;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};
use crate::oidc_provider::{CLIENT_ID, CLIENT_SECRET, TestIdp};

#[tokio::test]
async fn sign_in_with_the_identity_provider_in_chromium() {
    let Some(web) = web_dir() else { return };
    let Some(mut idp) = TestIdp::bind().await else {
        return;
    };
    let issuer = idp.issuer.clone();
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.oidc = vec![OidcConfig {
            id: "acme".into(),
            label: "Acme SSO".into(),
            issuer,
            client_id: CLIENT_ID.into(),
            client_secret: None,
            scopes: vec!["email".into(), "profile".into(), "groups".into()],
            allowed_domains: vec!["acme.test".into()],
            allowed_groups: vec![],
            open_signup: false,
            admin_groups: vec![],
            trust_email_verified: false,
            groups_claim: "groups".into(),
        }];
    })
    .await
    .unwrap();
    let res = s
        .req(
            axum::http::Method::PUT,
            "/api/secrets/oidc_acme_client_secret",
        )
        .bearer(&s.admin_token)
        .json(&json!({ "value": CLIENT_SECRET }))
        .send()
        .await;
    assert_eq!(res.status, 204);
    idp.launch(&format!("{}/api/auth/oidc/acme/callback", s.url))
        .await;

    let b = Browser::start("oidc").await;
    b.client.goto(&format!("{}/login", s.url)).await.unwrap();
    b.wait_text("#login-oidc-acme", "Sign in with Acme SSO")
        .await;
    b.screenshot("01-login-with-sso").await;
    b.click("#login-oidc-acme").await;
    // The provider's own login page.
    b.type_into("input[name=login]", "alice").await;
    b.type_into("input[name=password]", "anything").await;
    b.screenshot("02-provider-login").await;
    b.client
        .find(Locator::Css("button[type=submit]"))
        .await
        .expect("the provider's sign-in button")
        .click()
        .await
        .unwrap();
    b.wait_path(|p| p == "/").await;
    b.wait_text("#user-name", "Alice Example").await;
    b.screenshot("03-signed-in").await;
    b.close().await;
}

#[tokio::test]
async fn an_admin_invites_a_colleague_from_the_people_page_and_deactivates_them() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with_web(Backend::Sqlite, Transport::Socket, Some(web))
        .await
        .unwrap();
    let admin = Browser::start("people-admin").await;
    admin.sign_in(&s.url, &s.first_login_code).await;
    admin
        .client
        .goto(&format!("{}/people", s.url))
        .await
        .unwrap();
    admin.wait_text("table#people", "admin").await;
    admin.type_into("#invite-name", "bob").await;
    admin.type_into("#invite-email", "bob@acme.test").await;
    admin.click("#invite-submit").await;
    admin.wait_text("#invite-made-note", "shown once").await;
    let url = admin
        .client
        .find(Locator::Css("input#invite-url"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .expect("the link");
    assert!(url.contains("/invite#code=tiv_"), "{url}");
    admin.wait_text("table#invites", "bob").await;
    admin.screenshot("01-invite-made").await;

    // Bob opens the link in his own browser and is in.
    let bob = Browser::start("people-invitee").await;
    bob.client.goto(&url).await.unwrap();
    bob.wait_path(|p| p == "/").await;
    bob.wait_text("#user-name", "bob").await;
    bob.screenshot("02-invitee-signed-in").await;

    // The admin keeps a repo to its members from the settings page: bob, who is not one, is
    // told the session does not exist or is not his to see, and whom to ask.
    let repo = s
        .post(
            "/api/repos",
            json!({ "name": "acme/payments", "url": "https://example.invalid/p.git" }),
        )
        .send()
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let session = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "", "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .json()["session"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    admin
        .client
        .goto(&format!("{}/settings", s.url))
        .await
        .unwrap();
    let section = format!("details.repo-access[data-repo=\"{repo}\"]");
    admin
        .wait_text(&format!("{section} summary"), "Who may use it")
        .await;
    admin.click(&format!("{section} summary")).await;
    admin
        .click(&format!("{section} input.access-mode[value=members]"))
        .await;
    admin.click(&format!("{section} button.save-access")).await;
    admin
        .wait_text(&format!("{section} .access-saved"), "Saved")
        .await;
    admin.screenshot("02-repo-access").await;
    let access = s
        .get(&format!("/api/repos/{repo}/access"))
        .send()
        .await
        .json();
    assert_eq!(access["access"], "members", "the page saved it");
    bob.client
        .goto(&format!("{}/sessions/{session}", s.url))
        .await
        .unwrap();
    bob.wait_text("#no-access", "do not have access").await;
    bob.wait_text("#no-access", "admin").await;
    bob.screenshot("03-no-access").await;

    // The admin sees him and deactivates him.
    admin
        .client
        .goto(&format!("{}/people", s.url))
        .await
        .unwrap();
    let row = "tr.person-row[data-name=bob]";
    admin.wait_text(row, "bob@acme.test").await;
    admin.click(&format!("{row} button.deactivate")).await;
    admin
        .click(&format!("{row} button.confirm-deactivate"))
        .await;
    admin
        .wait_text(
            "tr.person-row[data-name=bob][data-status=deactivated]",
            "bob",
        )
        .await;
    // The audit says what happened, on the same page.
    admin
        .client
        .goto(&format!("{}/people", s.url))
        .await
        .unwrap();
    admin
        .wait_text(
            "#activity tr.activity-row[data-action=\"person.deactivate\"]",
            "deactivated bob",
        )
        .await;
    admin
        .wait_text("#activity", "joined (invited by admin)")
        .await;
    admin.screenshot("03-deactivated").await;

    // Bob's next request is refused: his page goes back to signing in.
    bob.client.goto(&s.url).await.unwrap();
    bob.wait_path(|p| p == "/login").await;
    bob.close().await;
    admin.close().await;
}

#[tokio::test]
async fn a_signed_in_person_approves_the_extensions_pairing_code() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with_web(Backend::Sqlite, Transport::Socket, Some(web))
        .await
        .unwrap();
    let pairing = s
        .req(axum::http::Method::POST, "/api/extension/pairings")
        .json(&json!({ "label": "Chrome on the test machine" }))
        .send()
        .await
        .json();
    let b = Browser::start("pairing").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client
        .goto(pairing["approve_url"].as_str().unwrap())
        .await
        .unwrap();
    // The page shows what asks (label, when, from where) and takes the code typed: the
    // link never fills it in.
    b.wait_text("#pair-label", "Chrome on the test machine")
        .await;
    b.wait_text("#pair-address", "127.0.0.1").await;
    b.wait_text("#pair-when", "ago").await;
    let code = b
        .client
        .find(Locator::Css("#pair-code"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(code.as_deref(), Some(""), "the code field starts empty");
    let url = pairing["approve_url"].as_str().unwrap();
    assert!(
        !url.contains(pairing["user_code"].as_str().unwrap()),
        "{url}"
    );
    b.type_into("#pair-code", pairing["user_code"].as_str().unwrap())
        .await;
    b.screenshot("01-approve").await;
    b.click("#pair-approve").await;
    b.wait_text("#pair-done", "Chrome on the test machine is connected")
        .await;
    b.screenshot("02-approved").await;
    let taken = s
        .req(axum::http::Method::POST, "/api/extension/pairings/poll")
        .json(&json!({ "device_code": pairing["device_code"] }))
        .send()
        .await
        .json();
    assert_eq!(taken["status"], "approved");
    b.close().await;
}
