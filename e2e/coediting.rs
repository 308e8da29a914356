//! Live co-editing in headless Chromium: two people in one file of the Files pane type into
//! the same line at once and converge, each sees the other's cursor by name, the agent's change
//! lands in both editors without losing theirs, the workspace's file equals the editors' text,
//! and a viewer cannot type.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::browser::{Browser, WAIT, web_dir};
use crate::session::{join_as_guest, server};

const FILE: &str = "greet.rs";
const START: &str = "pub fn greet() {\n    let who = 1;\n}\n";

/// The editor's text as its lines show it (without the other people's cursors in them).
async fn editor_text(b: &Browser) -> String {
    let v = b
        .client
        .execute(
            "return Array.from(document.querySelectorAll('#editor .cm-line')).map(l => { const c = l.cloneNode(true); c.querySelectorAll('.cm-ySelectionCaret, .cm-widgetBuffer').forEach(w => w.remove()); return c.textContent.replace(/\\u2060/g, ''); }).join('\\n');",
            vec![],
        )
        .await
        .unwrap();
    v.as_str().unwrap_or_default().to_string()
}

async fn wait_editor(b: &Browser, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let t = editor_text(b).await;
        if done(&t) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "the editor never showed {what}; it shows {t:?}"
        );
        // Between WebDriver round trips; each look is itself an event from the page.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The names on the other people's cursors in this editor.
async fn cursor_names(b: &Browser) -> String {
    let v = b
        .client
        .execute(
            "return Array.from(document.querySelectorAll('#editor .cm-ySelectionInfo')).map(e => e.textContent).join('|');",
            vec![],
        )
        .await
        .unwrap();
    v.as_str().unwrap_or_default().to_string()
}

async fn wait_cursor(b: &Browser, name: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let names = cursor_names(b).await;
        if names.contains(name) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no cursor named {name:?}; cursors: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens the Files pane and the file in it.
async fn open_file(b: &Browser) {
    b.click("#tab-files").await;
    let entry = format!("#files-list button[data-path='{FILE}']");
    b.client
        .wait()
        .for_element(Locator::Css(&entry))
        .await
        .unwrap();
    b.click(&entry).await;
    b.wait_text("#file-path", FILE).await;
    wait_editor(b, "the file", |t| t.contains("pub fn")).await;
}

async fn workspace_file(api: &Client, id: SessionId) -> String {
    api.exec(
        id,
        &ExecRequest {
            command: format!("cat {FILE}"),
            cwd: None,
            timeout_secs: Some(30),
        },
    )
    .await
    .unwrap()
    .stdout
}

#[tokio::test]
async fn two_people_and_the_agent_edit_one_file_and_a_viewer_only_watches() {
    let Some(web) = web_dir() else { return };
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "run_command",
            json!({ "command": format!("sed -i 's/greet/hello/' {FILE}") }),
        )
        .for_last_prompt("Rename greet"),
        Reply::text("Renamed it.").for_last_prompt("Rename greet"),
    ])
    .await;
    model.fallback(Reply::text("Ready."));
    let Some(s) = server(web, &model).await else {
        return;
    };
    let api = Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    api.set_secret("model_api_key", "sk-e2e".into())
        .await
        .unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "acme/coedit", &[(FILE, START)]).await;
    let id = api
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: "Wait for us".into(),
            branch: None,
            agent: None,
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    let link = |role: &'static str| {
        let s = &s;
        async move {
            let l: live::ShareLink = s
                .post(
                    &format!("/api/sessions/{id}/links"),
                    json!({ "role": role, "allow_guests": true }),
                )
                .send()
                .await
                .parse();
            l.url.unwrap()
        }
    };

    // Ada (the owner) and Bea (a guest driver) open the same file.
    let a = Browser::start("coedit-owner").await;
    a.sign_in(&s.url, &s.first_login_code).await;
    a.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    a.wait_text("#timeline", "Ready.").await;
    let b = Browser::start("coedit-driver").await;
    join_as_guest(&b, &link("driver").await, "Bea").await;
    b.wait_text("#timeline", "Ready.").await;
    open_file(&a).await;
    open_file(&b).await;

    // Both click into the second line and type at once.
    let line = "#editor .cm-line:nth-child(2)";
    a.click(line).await;
    b.click(line).await;
    tokio::join!(
        a.type_into("#editor .cm-content", " // ada"),
        b.type_into("#editor .cm-content", " // bea"),
    );
    let both = |t: &str| t.contains("// ada") && t.contains("// bea");
    wait_editor(&a, "both people's typing", both).await;
    let tb = wait_editor(&b, "both people's typing", both).await;
    let ta = wait_editor(&a, "the same text as Bea's", |t| t == tb).await;
    assert_eq!(
        ta.lines()
            .nth(1)
            .map(|l| l.contains("// ada") && l.contains("// bea")),
        Some(true),
        "both typed into the second line: {ta:?}"
    );
    // Each sees the other's cursor under the other's name.
    wait_cursor(&a, "Bea (guest)").await;
    wait_cursor(&b, "admin").await;
    a.screenshot("coediting-owner").await;
    b.screenshot("coediting-driver").await;

    // The agent renames the function while Bea types on.
    api.submit_prompt(
        id,
        &CreatePrompt {
            text: "Rename greet".into(),
            mode: PromptMode::Queue,
            agent: None,
            context: None,
        },
    )
    .await
    .unwrap();
    b.type_into("#editor .cm-content", " and more").await;
    let all = |t: &str| {
        t.contains("pub fn hello()")
            && t.contains("// ada")
            && t.contains("// bea")
            && t.contains("and more")
    };
    let ta = wait_editor(&a, "the agent's rename and everyone's typing", all).await;
    let tb = wait_editor(&b, "the agent's rename and everyone's typing", |t| t == ta).await;
    assert_eq!(ta, tb);
    a.wait_text("#timeline", "Renamed it.").await;

    // The workspace's file is the editors' text (the last line's newline is an empty line).
    let deadline = Instant::now() + WAIT;
    loop {
        let file = workspace_file(&api, id).await;
        if file.trim_end_matches('\n') == ta.trim_end_matches('\n') {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the workspace's file is {file:?}, the editors show {ta:?}"
        );
    }
    a.wait_text("#participants", "file greet.rs").await;
    a.screenshot("coediting-after-agent").await;

    // A viewer sees the same text, read-only; keys change nothing.
    let v = Browser::start("coedit-viewer").await;
    join_as_guest(&v, &link("viewer").await, "Vic").await;
    v.wait_text("#timeline", "Renamed it.").await;
    open_file(&v).await;
    v.wait_text("#file-read-only", "read-only").await;
    assert_eq!(editor_text(&v).await, ta);
    let content = v
        .client
        .find(Locator::Css("#editor .cm-content"))
        .await
        .unwrap();
    assert_eq!(
        content.attr("contenteditable").await.unwrap().as_deref(),
        Some("false")
    );
    let _ = content.send_keys("VIEWER").await;
    // Ada types after the viewer tried: once Bea sees Ada's mark, the viewer's keys (had they
    // gone anywhere) would have arrived before it.
    // The timeline names the file the agent changed; "open" opens it in the Files pane again.
    a.click(&format!("#timeline button[data-open='{FILE}']"))
        .await;
    wait_editor(&a, "the file opened from the timeline", |t| t == ta).await;
    a.click("#editor .cm-line:nth-child(1)").await;
    a.type_into("#editor .cm-content", "!").await;
    let after = wait_editor(&b, "Ada's mark", |t| t.contains('!')).await;
    assert!(!after.contains("VIEWER"), "{after}");
    assert!(!editor_text(&v).await.contains("VIEWER"));
    v.screenshot("coediting-viewer").await;
    for x in [a, b, v] {
        x.close().await;
    }
}
