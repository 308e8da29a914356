//! Two people in one live session, in two headless Chromiums: the owner with a scripted agent,
//! a guest who joins through a driver link; a viewer link that cannot type.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, WAIT, web_dir};
use crate::harness::{Backend, TestServer, Transport};

/// A server that runs workspaces on the test image, with `model` as its model; `None` (with the
/// reason printed) where this host cannot run workspaces.
pub async fn server(web: std::path::PathBuf, model: &ScriptedModel) -> Option<TestServer> {
    let images = crate::fixtures::test_images().await?;
    let recipe = crate::fixtures::test_recipe();
    let url = model.base_url.clone();
    TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
    })
    .await
}

/// The text of the visible terminal.
async fn terminal_text(b: &Browser) -> String {
    match b
        .client
        .find(Locator::Css(".pane:not(.hidden) .xterm-rows"))
        .await
    {
        Ok(el) => el.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn wait_terminal(b: &Browser, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let t = terminal_text(b).await;
        if t.contains(needle) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "the terminal never showed {needle:?}; it shows {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Types into the visible terminal (xterm.js listens on its hidden textarea).
async fn type_in_terminal(b: &Browser, keys: &str) {
    b.click(".pane:not(.hidden) .xterm").await;
    b.type_into(".pane:not(.hidden) .xterm-helper-textarea", keys)
        .await;
}

async fn share_link(b: &Browser, role: &str) -> String {
    let select = b.client.find(Locator::Css("#share-role")).await.unwrap();
    select.select_by_value(role).await.unwrap();
    let before = b.client.find(Locator::Css("#share-url")).await.ok();
    let old = match before {
        Some(el) => el.prop("value").await.unwrap().unwrap_or_default(),
        None => String::new(),
    };
    b.click("#share-create").await;
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(el) = b.client.find(Locator::Css("#share-url")).await
            && let Some(v) = el.prop("value").await.unwrap()
            && v.contains("/join#token=")
            && v != old
        {
            return v;
        }
        assert!(Instant::now() < deadline, "no share link appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn join_as_guest(b: &Browser, url: &str, name: &str) {
    b.client.goto(url).await.unwrap();
    b.type_into("#guest-name", name).await;
    b.click("#guest-join").await;
    b.wait_path(|p| p.starts_with("/sessions/")).await;
}

#[tokio::test]
async fn two_people_co_drive_a_live_session_and_a_viewer_cannot_type() {
    let Some(web) = web_dir() else { return };
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "run_command",
            json!({ "command": "echo 'written by the agent' > NOTE.md" }),
        )
        .for_prompt("Add a note")
        .at_step(0)
        .saying("Adding the note."),
        Reply::text("I added **NOTE.md**.")
            .for_prompt("Add a note")
            .at_step(1),
        Reply::tool("run_command", json!({ "command": "sleep 300" }))
            .for_last_prompt("Run forever"),
    ])
    .await;
    model.fallback(Reply::text("Noted."));
    let Some(s) = server(web, &model).await else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    api.set_secret("model_api_key", "sk-e2e".into())
        .await
        .unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/live", &[]).await;

    // A: the owner, signed in, starts a session with the agent.
    let a = Browser::start("session-owner").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: "Add a note".into(),
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
    a.wait_text("#timeline", "I added NOTE.md.").await;
    a.wait_text("#timeline", "echo 'written by the agent' > NOTE.md")
        .await;
    wait_terminal(&a, "/workspace#").await;

    // A shares a driver link; B (no account) joins through it as a guest.
    let driver_url = share_link(&a, "driver").await;
    let b = Browser::start("session-guest").await;
    join_as_guest(&b, &driver_url, "Bea").await;
    b.wait_text("#timeline", "I added NOTE.md.").await;
    a.wait_text("#participants", "Bea (guest)").await;
    b.wait_text("#participants", "admin").await;

    // Both see the same terminal; B types and A sees it.
    wait_terminal(&b, "/workspace#").await;
    type_in_terminal(&b, "echo from-bea-$((6*7))\n").await;
    wait_terminal(&a, "from-bea-42").await;
    wait_terminal(&b, "from-bea-42").await;
    a.screenshot("01-owner-session").await;
    b.screenshot("02-guest-driver").await;

    // The diff view shows the agent's change.
    a.click("#tab-diff").await;
    a.wait_text("#diff-files", "NOTE.md").await;
    a.wait_text("#diff", "+written by the agent").await;
    a.screenshot("03-diff").await;

    // B queues a prompt from the prompt box; it runs; A stops it from A's prompt box.
    b.type_into("#prompt-text", "Run forever").await;
    b.click("#prompt-queue").await;
    a.wait_text("#timeline", "$ sleep 300").await;
    // While it runs, B steers it.
    b.type_into("#prompt-text", "Also say hi").await;
    b.click("#prompt-steer").await;
    a.wait_text("#timeline", "Also say hi").await;
    a.click("#turn-stop").await;
    a.wait_text("#timeline", "turn stopped").await;
    let detail = api.session(id).await.unwrap();
    let by_bea: Vec<&Prompt> = detail
        .prompts
        .iter()
        .filter(|p| p.author.name == "Bea (guest)")
        .collect();
    assert_eq!(by_bea.len(), 2, "{:?}", detail.prompts);
    assert_eq!(by_bea[0].state, PromptState::Stopped);
    assert_eq!(by_bea[1].mode, PromptMode::Steer);

    // A viewer link: the page says so, the prompt box is disabled, keys never reach the shell.
    a.click(".tabs button[role=tab]").await;
    let viewer_url = share_link(&a, "viewer").await;
    let v = Browser::start("session-viewer").await;
    join_as_guest(&v, &viewer_url, "Vic").await;
    v.wait_text("#viewer-badge", "viewer").await;
    wait_terminal(&v, "from-bea-42").await;
    let prompt_box = v.client.find(Locator::Css("#prompt-text")).await.unwrap();
    assert!(
        prompt_box.attr("disabled").await.unwrap().is_some(),
        "the viewer's prompt box is disabled"
    );
    assert!(
        v.client.find(Locator::Css("#share")).await.is_err(),
        "only the owner sees the share dialog"
    );
    type_in_terminal(&v, "echo viewer-typed\n").await;
    // The page sends nothing for a viewer; a hand-made frame with the viewer's own link is
    // refused by the server.
    let probe = r#"
        const done = arguments[arguments.length - 1];
        const id = location.pathname.split('/').pop();
        const share = sessionStorage.getItem('tandem.share.' + id);
        const term = Number(document.querySelector('.terminal').dataset.terminal);
        const ws = new WebSocket(`ws://${location.host}/api/sessions/${id}/live?share=${encodeURIComponent(share)}&name=Probe`);
        ws.binaryType = 'arraybuffer';
        ws.onopen = () => {
            const head = new Uint8Array([(term >>> 24) & 255, (term >>> 16) & 255, (term >>> 8) & 255, term & 255]);
            const keys = new TextEncoder().encode('echo probe-typed\r');
            const frame = new Uint8Array(head.length + keys.length);
            frame.set(head); frame.set(keys, head.length);
            ws.send(frame);
        };
        ws.onmessage = (e) => {
            if (typeof e.data !== 'string') return;
            const m = JSON.parse(e.data);
            if (m.type === 'refused') { ws.close(); done(m.request + ': ' + m.reason); }
        };
        setTimeout(() => done('no answer'), 10000);
    "#;
    let refused = v.client.execute_async(probe, vec![]).await.unwrap();
    assert_eq!(refused.as_str(), Some("input: viewers cannot type"));
    type_in_terminal(&a, "echo after-viewer-$((1+1))\n").await;
    wait_terminal(&v, "after-viewer-2").await;
    let screen = terminal_text(&a).await;
    assert!(
        !screen.contains("viewer-typed") && !screen.contains("probe-typed"),
        "the viewer's keys reached the terminal"
    );
    v.screenshot("04-viewer").await;
    a.wait_text("#participants", "Vic (guest)").await;
    a.screenshot("05-owner-with-two-guests").await;
    // A crowd through the viewer link: the first 32 viewers by name (Vic and 31 of them), the
    // rest a count.
    let share = viewer_url
        .split("#token=")
        .nth(1)
        .expect("the link carries its token")
        .to_string();
    let mut crowd = Vec::new();
    for i in 1..=40 {
        let creds = tandem_server::client::live::Credentials {
            share: Some(share.clone()),
            name: Some(format!("Crowd {i}")),
            ..Default::default()
        };
        crowd.push(
            tandem_server::client::live::LiveClient::connect(&s.url, id, &creds)
                .await
                .expect("a viewer joins"),
        );
    }
    a.wait_text("#audience", "9 more are watching.").await;
    // 31 of the crowd listed by name (the viewer above holds the 32nd place), whichever 31:
    // a connection returns before its member joins, so joins need not come in connect order.
    let deadline = Instant::now() + WAIT;
    loop {
        let listed = a
            .client
            .execute(
                "const p = document.querySelector('#participants');
                 return p ? (p.innerText.match(/Crowd \\d+ \\(guest\\)/g) || []) : [];",
                vec![],
            )
            .await
            .unwrap();
        let listed = listed.as_array().cloned().unwrap_or_default();
        if listed.len() == 31 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the People card lists {} of the crowd, not 31: {listed:?}",
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.client
        .execute(
            "document.querySelector('#audience').scrollIntoView({block: 'center'})",
            vec![],
        )
        .await
        .unwrap();
    a.screenshot("05b-owner-with-a-crowd").await;
    drop(crowd);
    a.wait_gone("#audience").await;
    // A phone-sized screen: one column, nothing cut off sideways.
    v.client.set_window_size(390, 844).await.unwrap();
    v.wait_text("#timeline", "I added NOTE.md.").await;
    let overflow = v
        .client
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        overflow.as_i64().unwrap_or(0) <= 0,
        "the page scrolls sideways on a phone: {overflow}"
    );
    v.screenshot("06-viewer-phone").await;

    a.close().await;
    b.close().await;
    v.close().await;
    api.session_action(id, "stop").await.unwrap();
}
