//! The session page survives a server restart: it says it is reconnecting, then picks up where
//! it left off (no reload, no missed or doubled events), with the terminal back.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::Locator;
use tandem_protocol::*;
use tandem_server::client::Client;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::browser::{Browser, web_dir};

/// `tandem serve` on `port`; its login link when it prints one.
async fn serve(
    data: &std::path::Path,
    port: u16,
    web: &std::path::Path,
    images: &std::path::Path,
) -> (Child, Option<String>) {
    let recipe = crate::fixtures::test_recipe();
    crate::harness::allow_local_repos(data);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .arg("--web-dir")
        .arg(web)
        .arg("--images-dir")
        .arg(images)
        .arg("--image-recipe")
        .arg(&recipe)
        .env_remove("TANDEM_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut link = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some((_, code)) = line.split_once("#code=") {
            link = Some(code.trim().to_string());
            break;
        }
        if line.contains("sign in:") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, link)
}

#[tokio::test]
async fn the_session_page_reconnects_after_the_server_restarts() {
    let Some(web) = web_dir() else { return };
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    let _clean = crate::harness::RemoveWorkspaces(data.clone());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (server, code) = serve(&data, port, &web, &images).await;
    let url = format!("http://127.0.0.1:{port}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["token", "create", "--data-dir"])
        .arg(&data)
        .env_remove("TANDEM_TOKEN")
        .output()
        .unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let api = Client::new(&url, Some(token.clone())).unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/restart", &[]).await;
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: String::new(),
            branch: None,
            agent: Some(AgentSpec::None),
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;

    let a = Browser::start("reconnect").await;
    a.client
        .goto(&format!(
            "{url}/login#code={}",
            code.expect("first start prints a login link")
        ))
        .await
        .unwrap();
    a.wait_path(|p| p == "/").await;
    a.client
        .goto(&format!("{url}/sessions/{id}"))
        .await
        .unwrap();
    a.wait_text("#timeline", "boot: ready").await;
    api.exec(
        id,
        &ExecRequest {
            command: "echo before-restart".into(),
            cwd: None,
            timeout_secs: None,
        },
    )
    .await
    .unwrap();
    a.wait_text("#timeline", "echo before-restart").await;

    // The server goes away: the page says so.
    let mut server = server;
    server.kill().await.unwrap();
    a.wait_text("#conn-status", "Reconnecting").await;
    a.screenshot("01-reconnecting").await;

    // It comes back on the same address: the page catches up by itself.
    let (_server, _) = serve(&data, port, &web, &images).await;
    let api = Client::new(&url, Some(token)).unwrap();
    api.exec(
        id,
        &ExecRequest {
            command: "echo after-restart".into(),
            cwd: None,
            timeout_secs: None,
        },
    )
    .await
    .unwrap();
    a.wait_text("#timeline", "echo after-restart").await;
    let deadline = std::time::Instant::now() + crate::browser::WAIT;
    while a.client.find(Locator::Css("#conn-status")).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "still not reconnected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Exactly one of each event: nothing missed, nothing shown twice.
    let seqs: Vec<i64> = a
        .client
        .execute("return Array.from(document.querySelectorAll('#timeline [data-seq]')).map(e => Number(e.dataset.seq))", vec![])
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_i64())
        .collect();
    let mut sorted = seqs.clone();
    sorted.dedup();
    assert_eq!(seqs, sorted, "no event shown twice");
    assert_eq!(
        seqs.last().copied(),
        Some(api.session(id).await.unwrap().session.last_seq)
    );
    a.screenshot("02-reconnected").await;
    a.close().await;
    api.session_action(id, "stop").await.unwrap();
}
