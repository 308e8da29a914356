//! Agent runs on real workspaces with a scripted OpenAI-compatible model over real HTTP: turns
//! and their events, the queue with attribution, steering, stopping, conversations that survive
//! a replaced workspace, child sessions, the command agent, and the API key's confinement.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;
use tandem_protocol::{CreateRepo, CreateSession, ExecRequest};

use crate::harness::TestServer;
use crate::session_workspaces::{add_repo, events, exec, source_repo, wait_state};
use crate::snapshots::wait_built;

pub mod agents;
mod faults;
mod page;
mod queue;
mod remote;

/// The model's API key: it must reach the model and nothing else.
pub const KEY: &str = "sk-test-7f3a9c1e-never-leaks";

const RECIPE: &str = "[workspace]\nsetup = []\n";

/// A workspace server whose model is `model`, with the key stored as a secret.
async fn server(model: &ScriptedModel) -> Option<TestServer> {
    server_on(model, crate::harness::Backend::Sqlite).await
}

/// [`server`] on `backend`.
async fn server_on(model: &ScriptedModel, backend: crate::harness::Backend) -> Option<TestServer> {
    let url = model.base_url.clone();
    let s = crate::workspaces::server_on(backend, move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
    })
    .await?;
    let res = s
        .req(Method::PUT, "/api/secrets/model_api_key")
        .bearer(&s.admin_token)
        .json(&json!({ "value": KEY }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::NO_CONTENT,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    Some(s)
}

/// A repo with a broken sum and a test for it; its snapshot is built.
async fn repo(s: &TestServer, name: &str) -> (tempfile::TempDir, String) {
    let src = source_repo(RECIPE);
    std::fs::write(src.path().join("calc.sh"), "echo $((2 - 2))\n").unwrap();
    std::fs::write(
        src.path().join("test.sh"),
        "[ \"$(sh calc.sh)\" = 4 ] && echo 'tests pass' || { echo 'tests FAIL'; exit 1; }\n",
    )
    .unwrap();
    crate::snapshots::git(src.path(), &["add", "-A"]);
    crate::snapshots::git(src.path(), &["commit", "-qm", "calc"]);
    let repo = add_repo(s, name, src.path()).await;
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    assert_eq!(
        wait_built(s, &snap.id.to_string()).await.state,
        SnapshotState::Ready
    );
    (src, repo)
}

/// Waits until the session's events satisfy `done`; returns them all.
pub async fn wait_events(
    s: &TestServer,
    id: SessionId,
    done: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let evs = events(s, id).await;
        if done(&evs) {
            return evs;
        }
        assert!(
            Instant::now() < deadline,
            "events never got there: {:#?}",
            evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn turn_ends(evs: &[Event]) -> Vec<(PromptId, TurnOutcome, Usage, Option<String>)> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnEnded {
                prompt_id,
                outcome,
                usage,
                error,
                ..
            } => Some((*prompt_id, *outcome, *usage, error.clone())),
            _ => None,
        })
        .collect()
}

fn ended(n: usize) -> impl Fn(&[Event]) -> bool {
    move |evs| turn_ends(evs).len() >= n
}

async fn new_session(s: &TestServer, repo: &str, prompt: &str) -> SessionId {
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": prompt }),
        )
        .send()
        .await
        .parse();
    created.session.id
}

/// A second signed-in user and their API token.
pub async fn another_user(s: &TestServer, name: &str) -> (User, String) {
    let user = User::new(UserId(uuid::Uuid::new_v4()), name, false, Timestamp(0));
    tandem_store::users::insert(&s.state.db, &user)
        .await
        .unwrap();
    let token = tandem_server::identity::auth::create_api_token(&s.state.db, &user, "tests", None)
        .await
        .unwrap()
        .token;
    (user, token)
}

fn gate_command(name: &str) -> serde_json::Value {
    json!({ "command": format!("while [ ! -f /tmp/{name} ]; do sleep 0.05; done; echo released {name}") })
}

#[tokio::test]
async fn a_scripted_turn_edits_a_file_runs_the_tests_and_ends_with_ordered_events_a_diff_and_usage()
{
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "edit_file",
            json!({ "path": "calc.sh", "old_text": "2 - 2", "new_text": "2 + 2" }),
        )
        .saying("Let me fix the sum."),
        Reply::tool("run_command", json!({ "command": "sh test.sh" })),
        Reply::tool("run_command", json!({ "command": "seq 1 30000" })),
        Reply::text("Fixed the sum; the tests pass."),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/calc").await;
    let id = new_session(&s, &repo, "Fix the sum in calc.sh").await;
    let evs = wait_events(&s, id, ended(1)).await;

    let kinds: Vec<&str> = evs
        .iter()
        .map(|e| e.kind.type_name())
        .filter(|k| !matches!(*k, "boot_phase" | "state_changed" | "agent_delta"))
        .collect();
    assert_eq!(
        kinds,
        [
            "session_created",
            "prompt_queued",
            "turn_started",
            "agent_message",
            "tool_call",
            "file_changed",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "agent_message",
            "turn_ended",
        ],
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=evs.len() as i64).collect::<Vec<_>>(),
        "gap-free sequence numbers"
    );
    // Streamed text arrives as deltas before the whole message.
    let deltas: String = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        deltas.contains("Let me fix the sum.") && deltas.contains("the tests pass."),
        "{deltas}"
    );
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::FileChanged { path, change: FileChange::Modified, .. } if path == "calc.sh")));
    let test_run = evs.iter().find_map(|e| match &e.kind {
        EventKind::ToolResult {
            name,
            exit_code,
            output,
            ..
        } if name == "run_command" => Some((*exit_code, output.clone())),
        _ => None,
    });
    assert_eq!(
        test_run.as_ref().map(|t| t.0),
        Some(Some(0)),
        "{test_run:?}"
    );
    assert!(test_run.unwrap().1.contains("tests pass"));
    let (_, outcome, usage, error) = turn_ends(&evs)[0].clone();
    assert_eq!(outcome, TurnOutcome::Completed, "{error:?}");
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.requests),
        (400, 70, 4)
    );
    // A large output is cut in the event and kept whole as an artifact.
    let (cut, artifact) = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult {
                output,
                truncated: true,
                artifact: Some(a),
                ..
            } => Some((output.clone(), *a)),
            _ => None,
        })
        .expect("the long output was cut");
    assert!(cut.len() <= tandem_protocol::limits::MAX_EVENT_OUTPUT_BYTES);
    let whole = s
        .get(&format!("/api/sessions/{id}/artifacts/{artifact}"))
        .send()
        .await;
    assert_eq!(whole.status, StatusCode::OK);
    let whole = String::from_utf8(whole.body).unwrap();
    assert!(
        whole.starts_with("1\n2\n") && whole.ends_with("29999\n30000\n"),
        "{}",
        whole.len()
    );
    assert!(!whole.contains(KEY));
    s.get(&format!(
        "/api/sessions/{id}/artifacts/{}",
        uuid::Uuid::new_v4()
    ))
    .send()
    .await
    .assert_error(StatusCode::NOT_FOUND, "not_found");

    // The change is in the diff; the prompt is done; the session rests.
    let diff: Diff = s
        .get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse();
    assert!(diff.patch.contains("+echo $((2 + 2))"), "{}", diff.patch);
    let detail = wait_state(&s, id, &[SessionState::Idle]).await;
    assert_eq!(detail.prompts[0].state, PromptState::Done);

    // The model saw the tools, the configured model name and the key; the workspace never did.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs.iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}")[..]))
    );
    assert_eq!(reqs[0].body["model"], "scripted-1");
    assert!(
        reqs[0].body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "apply_patch"))
    );
    assert!(
        reqs[2].transcript().contains("tests pass"),
        "the model saw the tool's output"
    );
    assert!(
        reqs[3].transcript().contains("30000"),
        "the model saw the whole long output"
    );
    // The pattern is assembled in a file outside the scanned places, so no command line holds it.
    let scan = "printf 'sk-test-7f3a%s' 9c1e > /run/pattern; grep -rlF -f /run/pattern /proc/[0-9]*/environ /proc/[0-9]*/cmdline /workspace /tmp /root /etc 2>/dev/null; echo scanned";
    let leak = exec(&s, id, scan).await;
    assert_eq!(
        leak.stdout.trim(),
        "scanned",
        "the key is inside the workspace: {}",
        leak.stdout
    );
    assert!(
        !serde_json::to_string(&events(&s, id).await)
            .unwrap()
            .contains(KEY)
    );
    let audit = s.get(&format!("/api/audit?session={id}")).send().await;
    assert_eq!(audit.status, StatusCode::OK);
    let audit_text = String::from_utf8_lossy(&audit.body).to_string();
    assert!(
        audit_text.contains("agent.tool")
            && audit_text.contains("agent.file_change")
            && !audit_text.contains(KEY),
        "{audit_text}"
    );
    let secrets = s.get("/api/secrets").send().await;
    assert!(
        String::from_utf8_lossy(&secrets.body).contains("model_api_key")
            && !String::from_utf8_lossy(&secrets.body).contains(KEY)
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}
