//! VS Code in the session page: the owner's VS Code tab loads code-server through the server's
//! proxy at its base path (HTTP and its WebSockets), and opens a file of the repo.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use serde_json::json;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, WAIT, web_dir};
use crate::harness::{Backend, TestServer, Transport};

#[tokio::test]
async fn vs_code_loads_through_the_proxy_and_opens_a_repo_file() {
    let Some(web) = web_dir() else { return };
    let Some(dir) = std::env::var_os("TANDEM_TEST_CODE_SERVER").map(std::path::PathBuf::from)
    else {
        eprintln!("SKIP VS Code e2e: TANDEM_TEST_CODE_SERVER is not set");
        return;
    };
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let recipe = crate::fixtures::test_recipe();
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
        c.agents.code_server_dir = Some(dir);
    })
    .await
    else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let (_src, repo) = crate::fixtures::repo_with(
        &api,
        "acme/code",
        &[("NOTES.md", "# Notes\nopened-in-vscode-42\n")],
    )
    .await;
    let id: SessionId = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo.id, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse::<SessionDetail>()
        .session
        .id;

    let a = Browser::start("vscode-owner").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    a.open_ready_session(&s.url, id).await;
    a.click("#tab-code").await;
    let frame = a
        .client
        .wait()
        .for_element(Locator::Css("#code-frame"))
        .await
        .unwrap();
    // The session's own origin, a ticket in the path.
    let src_attr = frame.attr("src").await.unwrap().unwrap_or_default();
    let port = s.url.rsplit(':').next().unwrap();
    assert!(
        src_attr.starts_with(&format!("http://{id}.localhost:{port}/_t/"))
            && src_attr.ends_with("/?folder=/workspace"),
        "{src_attr}"
    );
    frame.enter_frame().await.unwrap();
    // The workbench, with the repo's files in its explorer (through the remote connection).
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let explorer = a.client.find(Locator::Css(".explorer-folders-view")).await;
        if let Ok(e) = explorer
            && e.text().await.unwrap_or_default().contains("NOTES.md")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "VS Code's explorer never listed the repo"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Open the file from the explorer.
    a.client
        .find(Locator::XPath(
            "//*[contains(@class,'explorer-folders-view')]//*[text()='NOTES.md']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let text = match a
            .client
            .find(Locator::Css(".monaco-editor .view-lines"))
            .await
        {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains("opened-in-vscode-42") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the editor never showed the file; it shows {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Script in VS Code's frame cannot use Tandem's sign-in: the cookie is not there, and
    // Tandem's API answers it nothing it may read.
    let seen = a
        .client
        .execute(
            "return fetch(arguments[0] + '/api/me', {credentials: 'include'})
                .then(r => r.text().then(t => 'read ' + r.status + ' ' + t))
                .catch(() => 'blocked')
                .then(r => [document.cookie, r]);",
            vec![serde_json::json!(s.url)],
        )
        .await
        .unwrap();
    let seen: (String, String) = serde_json::from_value(seen).unwrap();
    assert!(
        !seen.0.contains("tandem"),
        "cookies in VS Code's frame: {}",
        seen.0
    );
    assert_eq!(seen.1, "blocked", "Tandem's API from VS Code's frame");
    a.client.enter_parent_frame().await.unwrap();
    a.screenshot("vscode-file-open").await;
    a.close().await;
}
