//! Sign in, see the dashboard, start a session from the form, see it listed.

use fantoccini::Locator;
use tandem_protocol::{CreateRepo, SessionState};
use tandem_server::client::Client;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

#[tokio::test]
async fn sign_in_with_a_login_link_and_start_a_session_from_the_dashboard() {
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

    let b = Browser::start("dashboard").await;
    // Not signed in: the dashboard sends the browser to the login page.
    b.client.goto(&s.url).await.unwrap();
    b.wait_path(|p| p == "/login").await;
    b.wait_text("main.login", "Login code or API token").await;
    b.screenshot("01-login").await;

    // The one-time link signs in and lands on the dashboard.
    b.sign_in(&s.url, &s.first_login_code).await;
    b.wait_text("#user-name", "admin").await;
    b.wait_text("#new-session-repo", "acme/web").await;
    b.screenshot("02-dashboard-empty").await;

    let prompt = "Make the signup button blue and add a test";
    b.type_into("#new-session-prompt", prompt).await;
    b.click("#new-session-submit").await;

    // The new session's page opens and shows its events.
    let path = b.wait_path(|p| p.starts_with("/sessions/")).await;
    b.wait_text("#session-title", prompt).await;
    b.wait_text("#timeline .ev.prompt", prompt).await;
    b.wait_text("#session-state", "queued").await;
    b.screenshot("03-session").await;

    // Back on the dashboard it is listed.
    b.client.goto(&s.url).await.unwrap();
    let row = b.wait_text("#sessions .session-row", prompt).await;
    assert!(
        row.contains("queued") && row.contains("acme/web") && row.contains("admin"),
        "{row}"
    );
    b.screenshot("04-dashboard-with-session").await;

    // And the server agrees.
    let sessions = api.sessions(None).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].title, prompt);
    assert_eq!(sessions[0].state, SessionState::Queued);
    assert_eq!(path, format!("/sessions/{}", sessions[0].id));
    b.close().await;
}

#[tokio::test]
async fn a_wrong_credential_is_refused_and_an_api_token_signs_in() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with_web(Backend::Sqlite, Transport::Socket, Some(web))
        .await
        .unwrap();
    let b = Browser::start("login").await;
    b.client.goto(&format!("{}/login", s.url)).await.unwrap();
    let input = b
        .client
        .wait()
        .for_element(Locator::Css("#login-credential"))
        .await
        .unwrap();
    input.send_keys("tlc_not-a-real-code").await.unwrap();
    b.click("#login-submit").await;
    b.wait_text(".error", "login code unknown").await;
    b.screenshot("01-refused").await;

    let input = b
        .client
        .find(Locator::Css("#login-credential"))
        .await
        .unwrap();
    input.clear().await.unwrap();
    input.send_keys(&s.admin_token).await.unwrap();
    b.click("#login-submit").await;
    b.wait_path(|p| p == "/").await;
    b.wait_text("#user-name", "admin").await;
    b.close().await;
}
