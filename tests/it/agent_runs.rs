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
    let user = User {
        id: UserId(uuid::Uuid::new_v4()),
        name: name.into(),
        is_admin: false,
        created_at: Timestamp(0),
    };
    tandem_server::db::users::insert(&s.state.db, &user)
        .await
        .unwrap();
    let token = tandem_server::auth::create_api_token(&s.state.db, &user, "tests", None)
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

#[tokio::test]
async fn prompts_from_two_authors_run_in_order_with_attribution_and_only_their_author_edits_or_withdraws_them()
 {
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", gate_command("go")),
        Reply::text("first done"),
        Reply::text("second done"),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/queue").await;
    let (bob, bob_token) = another_user(&s, "bob").await;
    let id = new_session(&s, &repo, "first, from admin").await;
    // Bob drives through a share link; before joining he only watches.
    s.req(Method::POST, &format!("/api/sessions/{id}/prompts"))
        .bearer(&bob_token)
        .json(&json!({ "text": "too early" }))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    let link: tandem_protocol::live::ShareLink = s
        .post(
            &format!("/api/sessions/{id}/links"),
            json!({ "role": "driver" }),
        )
        .send()
        .await
        .parse();
    let joined = s
        .req(Method::POST, "/api/links/join")
        .bearer(&bob_token)
        .json(&json!({ "token": link.token.unwrap() }))
        .send()
        .await;
    assert_eq!(
        joined.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&joined.body)
    );
    wait_events(&s, id, |evs| {
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
    })
    .await;

    // While the first turn runs: bob queues one, admin queues one and withdraws it.
    let bobs: Prompt = s
        .req(Method::POST, &format!("/api/sessions/{id}/prompts"))
        .bearer(&bob_token)
        .json(&json!({ "text": "second, from bob" }))
        .send()
        .await
        .parse();
    let admins: Prompt = s
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "third, withdrawn" }),
        )
        .send()
        .await
        .parse();
    s.req(
        Method::PATCH,
        &format!("/api/sessions/{id}/prompts/{}", bobs.id),
    )
    .bearer(&s.admin_token)
    .json(&json!({ "text": "hijacked" }))
    .send()
    .await
    .assert_error(StatusCode::FORBIDDEN, "forbidden");
    let res = s
        .req(
            Method::DELETE,
            &format!("/api/sessions/{id}/prompts/{}", admins.id),
        )
        .bearer(&bob_token)
        .send()
        .await;
    res.assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(
        s.req(
            Method::DELETE,
            &format!("/api/sessions/{id}/prompts/{}", admins.id)
        )
        .bearer(&s.admin_token)
        .send()
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    let edited: Prompt = s
        .req(
            Method::PATCH,
            &format!("/api/sessions/{id}/prompts/{}", bobs.id),
        )
        .bearer(&bob_token)
        .json(&json!({ "text": "second, from bob (edited)" }))
        .send()
        .await
        .parse();
    assert_eq!(edited.text, "second, from bob (edited)");

    exec(&s, id, "touch /tmp/go").await;
    let evs = wait_events(&s, id, ended(2)).await;
    let started: Vec<(PromptId, String)> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnStarted {
                prompt_id, author, ..
            } => Some((*prompt_id, author.name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 2);
    assert_eq!(started[0].1, "admin");
    assert_eq!(
        started[1],
        (bobs.id, bob.name.clone()),
        "bob's prompt ran second, as bob"
    );
    let reqs = model.requests();
    assert_eq!(
        reqs[2].user_messages().last().map(String::as_str),
        Some("second, from bob (edited)")
    );
    assert!(
        !reqs
            .iter()
            .any(|r| r.transcript().contains("third, withdrawn"))
    );
    // A started prompt can no longer change.
    s.req(
        Method::PATCH,
        &format!("/api/sessions/{id}/prompts/{}", bobs.id),
    )
    .bearer(&bob_token)
    .json(&json!({ "text": "late" }))
    .send()
    .await
    .assert_error(StatusCode::CONFLICT, "conflict");
    let detail: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    let states: Vec<PromptState> = detail.prompts.iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        [PromptState::Done, PromptState::Done, PromptState::Withdrawn]
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_steering_prompt_reaches_the_agent_at_its_next_tool_boundary() {
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", gate_command("steer")),
        Reply::text("Done, and I also updated the README."),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/steer").await;
    let id = new_session(&s, &repo, "Fix the sum").await;
    wait_events(&s, id, |evs| {
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
    })
    .await;
    let steer: Prompt = s
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "Also update the README", "mode": "steer" }),
        )
        .send()
        .await
        .parse();
    assert_eq!(steer.mode, PromptMode::Steer);
    exec(&s, id, "touch /tmp/steer").await;
    let evs = wait_events(&s, id, ended(1)).await;
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2, "one turn, steered; not a second turn");
    assert!(!reqs[0].transcript().contains("Also update the README"));
    let users = reqs[1].user_messages();
    assert_eq!(
        users,
        ["Fix the sum", "Also update the README"],
        "the steer follows the tool result"
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    let order: Vec<&str> = evs
        .iter()
        .map(|e| e.kind.type_name())
        .filter(|k| matches!(*k, "tool_result" | "steer_delivered" | "turn_ended"))
        .collect();
    assert_eq!(order, ["tool_result", "steer_delivered", "turn_ended"]);
    let detail = wait_state(&s, id, &[SessionState::Idle]).await;
    assert_eq!(
        detail
            .prompts
            .iter()
            .find(|p| p.id == steer.id)
            .unwrap()
            .state,
        PromptState::Delivered
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn stop_ends_the_running_turn_within_two_seconds_and_the_queue_goes_on() {
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", json!({ "command": "sleep 300" })),
        Reply::text("next prompt done"),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/stop").await;
    let id = new_session(&s, &repo, "Run forever").await;
    wait_events(&s, id, |evs| {
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
    })
    .await;
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "then this" }),
    )
    .send()
    .await;
    let t0 = Instant::now();
    let res = s
        .post(&format!("/api/sessions/{id}/turn/stop"), json!({}))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let evs = wait_events(&s, id, ended(1)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stopping took {:?}",
        t0.elapsed()
    );
    let (_, outcome, _, error) = turn_ends(&evs)[0].clone();
    assert_eq!(outcome, TurnOutcome::Stopped);
    assert_eq!(error.as_deref(), Some("stopped by admin"));
    // The command's whole process group is gone.
    let ps = exec(&s, id, "ps -eo args | grep -c '^sleep 300' || true").await;
    assert_eq!(ps.stdout.trim(), "0", "sleep survived the stop");
    let evs = wait_events(&s, id, ended(2)).await;
    assert_eq!(turn_ends(&evs)[1].1, TurnOutcome::Completed);
    // Nothing to stop now.
    wait_state(&s, id, &[SessionState::Idle]).await;
    s.post(&format!("/api/sessions/{id}/turn/stop"), json!({}))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn on_postgresql_another_server_process_steers_and_stops_a_turn_and_hears_its_events_at_once()
{
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", gate_command("xsteer")),
        Reply::text("Done, README too."),
        Reply::tool("run_command", json!({ "command": "sleep 300" })),
        Reply::text("never"),
    ])
    .await;
    let Some(a) = server_on(&model, crate::harness::Backend::Postgres).await else {
        return;
    };
    let (_src, repo) = repo(&a, "acme/xproc").await;
    let id = new_session(&a, &repo, "Fix the sum").await;
    wait_events(&a, id, |evs| {
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
    })
    .await;
    // A second process (a second node) on the same database; the turn runs in the first.
    let b = a.beside().await;
    let steer: Prompt = b
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "Also update the README", "mode": "steer" }),
        )
        .send()
        .await
        .parse();
    // What the first process commits wakes the second's subscribers by itself (LISTEN/NOTIFY),
    // not at its next poll: nothing in the second process writes this session's events now.
    let mut watch = b.state.db.subscribe(id);
    exec(&a, id, "touch /tmp/xsteer").await;
    let newest = a
        .get(&format!("/api/sessions/{id}"))
        .send()
        .await
        .parse::<SessionDetail>()
        .session
        .last_seq;
    tokio::time::timeout(Duration::from_secs(30), watch.wait_for(|s| *s >= newest))
        .await
        .expect("the second process heard of the first one's events")
        .unwrap();
    let evs = wait_events(&a, id, ended(1)).await;
    let reqs = model.requests();
    assert_eq!(
        reqs[1].user_messages(),
        ["Fix the sum", "Also update the README"],
        "the steer sent to the second process reached the turn in the first"
    );
    assert!(evs.iter().any(|e| e.kind.type_name() == "steer_delivered"));
    let detail = wait_state(&a, id, &[SessionState::Idle]).await;
    let steered = detail.prompts.iter().find(|p| p.id == steer.id).unwrap();
    assert_eq!(steered.state, PromptState::Delivered);

    // A prompt queued through the second process runs in the first (whose host has the
    // workspace; the second hands the kick over), and a stop sent to the second ends it.
    b.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "Run forever" }),
    )
    .send()
    .await;
    wait_events(&a, id, |evs| {
        evs.iter()
            .filter(|e| matches!(e.kind, EventKind::ToolCall { .. }))
            .count()
            == 2
    })
    .await;
    let res = b
        .post(&format!("/api/sessions/{id}/turn/stop"), json!({}))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let evs = wait_events(&a, id, ended(2)).await;
    let (_, outcome, _, error) = turn_ends(&evs)[1].clone();
    assert_eq!(outcome, TurnOutcome::Stopped);
    assert_eq!(error.as_deref(), Some("stopped by admin"));
    // With no turn running anywhere, the second process says so.
    wait_state(&a, id, &[SessionState::Idle]).await;
    b.post(&format!("/api/sessions/{id}/turn/stop"), json!({}))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    a.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

/// A turn running `sleep 300` (then `then`, if it runs again) on a new server and repo `name`:
/// the model (kept alive), the server, the repo's source, the session and its running prompt.
async fn a_long_turn(
    name: &str,
    then: Vec<Reply>,
) -> Option<(
    ScriptedModel,
    TestServer,
    tempfile::TempDir,
    SessionId,
    Prompt,
)> {
    let mut script = vec![Reply::tool(
        "run_command",
        json!({ "command": "sleep 300" }),
    )];
    script.extend(then);
    let model = ScriptedModel::start(script).await;
    let s = server(&model).await?;
    let (src, repo) = repo(&s, name).await;
    let id = new_session(&s, &repo, "Run forever").await;
    wait_events(&s, id, |evs| {
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
    })
    .await;
    let prompt = tandem_server::db::prompts::running(&s.state.db, id)
        .await
        .unwrap()
        .expect("a running prompt");
    Some((model, s, src, id, prompt))
}

#[tokio::test]
async fn a_stop_asked_elsewhere_is_found_at_the_next_heartbeat_when_its_notification_is_lost() {
    let Some((_model, s, _src, id, prompt)) = a_long_turn("acme/stop-asked", vec![]).await else {
        return;
    };
    // What a stop through another server leaves in the store; its notification never came.
    tandem_server::db::prompts::request_stop(&s.state.db, prompt.id, "Remy")
        .await
        .unwrap();
    let evs = wait_events(&s, id, ended(1)).await;
    let (_, outcome, _, error) = turn_ends(&evs)[0].clone();
    assert_eq!(outcome, TurnOutcome::Stopped);
    assert_eq!(error.as_deref(), Some("stopped by Remy"));
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_turn_whose_prompt_another_process_took_back_stops_and_records_nothing_more() {
    let Some((_model, s, _src, id, prompt)) =
        a_long_turn("acme/lease", vec![Reply::text("second run done")]).await
    else {
        return;
    };
    // What another process's sweep does when this one's heartbeat lapses: the prompt is queued
    // again, no longer this runner's.
    let mut tx = s.state.db.begin().await.unwrap();
    assert!(
        tandem_server::db::prompts::requeue(&mut tx, prompt.id, true, true)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    // At its next heartbeat the first run notices, stops its agent (the command ends) and
    // records no end of its own; the prompt runs again (after an attempt or two that find the
    // agent still ending the first run) and completes.
    let evs = wait_events(&s, id, |evs| {
        turn_ends(evs).iter().any(|e| e.1 == TurnOutcome::Completed)
    })
    .await;
    let ends = turn_ends(&evs);
    let starts = evs
        .iter()
        .filter(|e| e.kind.type_name() == "turn_started")
        .count();
    assert_eq!(
        ends.len(),
        starts - 1,
        "every run but the first has its end, the first none: {ends:?}"
    );
    assert_eq!(ends.last().unwrap().1, TurnOutcome::Completed);
    let ps = exec(&s, id, "ps -eo args | grep -c '^sleep 300' || true").await;
    assert_eq!(ps.stdout.trim(), "0", "the first run's command survived");
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_replaced_workspace_continues_the_same_conversation() {
    let model = ScriptedModel::start(vec![
        Reply::text("Noted: the codeword is PAPAYA."),
        Reply::text("The codeword was PAPAYA."),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/memory").await;
    let id = new_session(&s, &repo, "Remember the codeword PAPAYA").await;
    wait_events(&s, id, ended(1)).await;
    wait_state(&s, id, &[SessionState::Idle]).await;
    // Suspend and resume: every process of the workspace, the agent's included, is new.
    assert_eq!(
        s.post(&format!("/api/sessions/{id}/suspend"), json!({}))
            .send()
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        s.post(&format!("/api/sessions/{id}/resume"), json!({}))
            .send()
            .await
            .status,
        StatusCode::OK
    );
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "What was the codeword?" }),
    )
    .send()
    .await;
    let evs = wait_events(&s, id, ended(2)).await;
    assert_eq!(
        turn_ends(&evs)[1].1,
        TurnOutcome::Completed,
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    let second = &model.requests()[1];
    assert_eq!(
        second.user_messages(),
        ["Remember the codeword PAPAYA", "What was the codeword?"]
    );
    assert!(
        second
            .transcript()
            .contains("Noted: the codeword is PAPAYA."),
        "the agent's own reply is in the conversation"
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn an_agent_spawns_child_sessions_that_run_and_can_be_read_and_cancelled() {
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "spawn_sessions",
            json!({ "prompt": "child: write hello.txt", "variants": 2 }),
        )
        .for_prompt("parent"),
        Reply::text("Spawned two children.").for_prompt("parent"),
        Reply::tool(
            "write_file",
            json!({ "path": "hello.txt", "content": "hello\n" }),
        )
        .for_prompt("child:")
        .at_step(0),
        Reply::tool(
            "write_file",
            json!({ "path": "hello.txt", "content": "hello\n" }),
        )
        .for_prompt("child:")
        .at_step(0),
        Reply::text("wrote it").for_prompt("child:").at_step(1),
        Reply::text("wrote it").for_prompt("child:").at_step(1),
    ])
    .await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/kids").await;
    let id = new_session(&s, &repo, "parent: split the work").await;
    let evs = wait_events(&s, id, ended(1)).await;
    let spawned: Vec<SessionId> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ChildSpawned { child_id, .. } => Some(*child_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        spawned.len(),
        2,
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    assert_eq!(turn_ends(&evs)[0].1, TurnOutcome::Completed);
    for child in &spawned {
        let cevs = wait_events(&s, *child, ended(1)).await;
        assert_eq!(
            turn_ends(&cevs)[0].1,
            TurnOutcome::Completed,
            "{:#?}",
            cevs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
        );
    }
    let children: Vec<ChildSession> = s
        .get(&format!("/api/sessions/{id}/children"))
        .send()
        .await
        .parse();
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(c.session.parent_id, Some(id));
        assert_eq!(c.prompt_state, Some(PromptState::Done));
        let diff: Diff = s
            .get(&format!("/api/sessions/{}/diff", c.session.id))
            .send()
            .await
            .parse();
        assert_eq!(
            c.files_changed,
            1,
            "{diff:?} {:#?}",
            events(&s, c.session.id)
                .await
                .iter()
                .map(|e| e.kind.summary())
                .collect::<Vec<_>>()
        );
        // Owned by the person who prompted the parent.
        assert_eq!(c.session.author.kind, AuthorKind::Automation);
        assert!(c.session.author.user_id.is_some());
    }
    let res = s
        .post(&format!("/api/sessions/{}/stop", spawned[0]), json!({}))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let children: Vec<ChildSession> = s
        .get(&format!("/api/sessions/{id}/children"))
        .send()
        .await
        .parse();
    assert_eq!(
        children
            .iter()
            .filter(|c| c.session.state == SessionState::Stopped)
            .count(),
        1
    );
    // Spawned through the API too, with a command agent.
    let more: Vec<Session> = s
        .post(&format!("/api/sessions/{id}/children"), json!({ "prompt": "api child", "agent": { "kind": "command", "template": "echo child got {prompt}" } }))
        .send()
        .await
        .parse();
    let cevs = wait_events(&s, more[0].id, ended(1)).await;
    assert!(cevs.iter().any(
        |e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text == "child got api child")
    ));
    for c in [spawned[1], more[0].id, id] {
        s.post(&format!("/api/sessions/{c}/stop"), json!({}))
            .send()
            .await;
    }
}

#[tokio::test]
async fn the_command_agent_runs_a_cli_with_the_prompt_and_reports_failures() {
    let model = ScriptedModel::start(vec![]).await;
    let Some(s) = server(&model).await else {
        return;
    };
    let src = source_repo(RECIPE);
    std::fs::write(
        src.path().join("agent.sh"),
        "#!/bin/sh\nprintf '%s\\n' \"$1\" > notes.txt\necho \"noted: $1 via $OPENAI_BASE_URL\"\n[ \"$1\" != fail ] || { echo 'cannot do that' >&2; exit 3; }\n",
    )
    .unwrap();
    crate::snapshots::git(src.path(), &["add", "-A"]);
    crate::snapshots::git(src.path(), &["commit", "-qm", "agent"]);
    let repo = add_repo(&s, "acme/cli", src.path()).await;
    let created: SessionDetail = s
        .post("/api/sessions", json!({ "repo_id": repo, "prompt": "it's a test", "agent": { "kind": "command", "template": "sh agent.sh {prompt}" } }))
        .send()
        .await
        .parse();
    let id = created.session.id;
    assert_eq!(
        created.session.agent,
        AgentSpec::Command {
            template: "sh agent.sh {prompt}".into()
        }
    );
    let evs = wait_events(&s, id, ended(1)).await;
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text == "noted: it's a test via http://127.0.0.1:4100/v1")), "{:#?}", evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>());
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::FileChanged { path, change: FileChange::Created, .. } if path == "notes.txt")));
    assert_eq!(turn_ends(&evs)[0].1, TurnOutcome::Completed);
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "fail" }),
    )
    .send()
    .await;
    let evs = wait_events(&s, id, ended(2)).await;
    let (_, outcome, _, error) = turn_ends(&evs)[1].clone();
    assert_eq!(outcome, TurnOutcome::Failed);
    assert!(
        error
            .as_deref()
            .unwrap_or_default()
            .contains("cannot do that"),
        "{error:?}"
    );
    // Another agent for one prompt only.
    let one_off = json!({ "text": "hi", "agent": { "kind": "command", "template": "echo other agent says {prompt}" } });
    s.post(&format!("/api/sessions/{id}/prompts"), one_off)
        .send()
        .await;
    let evs = wait_events(&s, id, ended(3)).await;
    assert!(evs.iter().any(
        |e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text == "other agent says hi")
    ));
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn bad_prompts_and_secrets_get_clear_errors() {
    let model = ScriptedModel::start(vec![]).await;
    let Some(s) = server(&model).await else {
        return;
    };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/bad", src.path()).await;
    let shared: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = shared.session.id;
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "do it" }),
    )
    .send()
    .await
    .assert_error(StatusCode::CONFLICT, "conflict");
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "  " }),
    )
    .send()
    .await
    .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "x", "mode": "shout" }),
    )
    .send()
    .await
    .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    s.post("/api/sessions", json!({ "repo_id": repo }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    s.post("/api/sessions", json!({ "repo_id": repo, "prompt": "x", "agent": { "kind": "command", "template": "no placeholder" } }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    s.post(&format!("/api/sessions/{id}/turn/stop"), json!({}))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    let (_, bob) = another_user(&s, "bob").await;
    s.req(Method::PUT, "/api/secrets/x")
        .bearer(&bob)
        .json(&json!({ "value": "v" }))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    s.req(Method::GET, "/api/audit")
        .bearer(&bob)
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    s.req(Method::PUT, "/api/secrets/bad%20name")
        .bearer(&s.admin_token)
        .json(&json!({ "value": "v" }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    s.req(Method::PUT, "/api/secrets/ok")
        .bearer(&s.admin_token)
        .json(&json!({ "value": "" }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    // A model that is not configured: the turn waits (not fails), saying what to set.
    let unset = crate::workspaces::server(|_| {}).await.unwrap();
    let src2 = source_repo(RECIPE);
    let repo2 = add_repo(&unset, "acme/nomodel", src2.path()).await;
    let id2 = new_session(&unset, &repo2, "hello").await;
    let evs = wait_events(&unset, id2, |evs| {
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::Waiting { problem } if problem.kind == ProblemKind::Model))
    })
    .await;
    let waiting = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Waiting { problem } => Some(problem.clone()),
            _ => None,
        })
        .unwrap();
    assert!(waiting.fix.contains("model_base_url"), "{waiting:?}");
    assert!(turn_ends(&evs).is_empty(), "the prompt is kept, not failed");
    unset
        .post(&format!("/api/sessions/{id2}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_server_killed_mid_turn_requeues_the_prompt_on_restart_without_losing_or_repeating_events()
 {
    use tandem_server::client::Client;
    let Some(image) = crate::workspaces::image().await else {
        return;
    };
    let images = image.parent().unwrap().parent().unwrap().to_path_buf();
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "run_command",
            json!({ "command": "touch /tmp/started; sleep 300" }),
        )
        .at_step(0),
        Reply::text("Done after the restart.").at_step(0),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("tandem.toml"),
        format!(
            "[agents]\nmodel_base_url = \"{}\"\nmodel = \"scripted-1\"\n",
            model.base_url
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_tandem");
    let (mut server, url) = crate::restart::serve_with_workspaces(&data, &images).await;
    let out = tokio::process::Command::new(bin)
        .args(["token", "create", "--data-dir", data.to_str().unwrap()])
        .env_remove("TANDEM_TOKEN")
        .output()
        .await
        .unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // The key goes in through the CLI, on standard input.
    let mut set = tokio::process::Command::new(bin)
        .args([
            "secret",
            "set",
            "model_api_key",
            "--url",
            &url,
            "--token",
            &token,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(set.stdin.as_mut().unwrap(), format!("{KEY}\n").as_bytes())
        .await
        .unwrap();
    drop(set.stdin.take());
    assert!(set.wait_with_output().await.unwrap().status.success());

    let src = source_repo(RECIPE);
    let c = Client::new(&url, Some(token.clone())).unwrap();
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/crash".into(),
            url: src.path().to_string_lossy().into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    let id = c
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: "Survive a crash".into(),
            branch: None,
            agent: None,
        })
        .await
        .unwrap()
        .session
        .id;
    let started = |c: Client| async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let evs = c.events(id, 0).await.unwrap().events;
            if evs
                .iter()
                .any(|e| matches!(e.kind, EventKind::ToolCall { .. }))
            {
                return;
            }
            assert!(Instant::now() < deadline, "the turn never reached its tool");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    started(c.clone()).await;
    server.kill().await.unwrap();

    let (mut server, url) = crate::restart::serve_with_workspaces(&data, &images).await;
    let c = Client::new(&url, Some(token)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let evs = loop {
        let evs = c.events(id, 0).await.unwrap().events;
        if turn_ends(&evs).len() >= 2 {
            break evs;
        }
        assert!(
            Instant::now() < deadline,
            "{:#?}",
            evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=evs.len() as i64).collect::<Vec<_>>(),
        "no event lost or repeated"
    );
    let turn: Vec<&str> = evs
        .iter()
        .map(|e| e.kind.type_name())
        .filter(|k| {
            k.starts_with("turn")
                || *k == "prompt_requeued"
                || *k == "tool_call"
                || *k == "agent_message"
        })
        .collect();
    assert_eq!(
        turn,
        [
            "turn_started",
            "tool_call",
            "turn_ended",
            "prompt_requeued",
            "turn_started",
            "agent_message",
            "turn_ended"
        ]
    );
    let ends = turn_ends(&evs);
    assert_eq!(ends[0].1, TurnOutcome::Interrupted);
    assert_eq!(ends[1].1, TurnOutcome::Completed);
    assert_eq!(ends[0].0, ends[1].0, "the same prompt ran again");
    let detail = c.session(id).await.unwrap();
    assert_eq!(
        (detail.prompts[0].state, detail.prompts[0].attempts),
        (PromptState::Done, 1)
    );
    // The first run's command died with its turn.
    let ps = c
        .exec(
            id,
            &ExecRequest {
                command: "ps -eo args | grep -c '^sleep 300' || true".into(),
                cwd: None,
                timeout_secs: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(ps.stdout.trim(), "0");
    assert!(
        model
            .requests()
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}")[..]))
    );
    c.session_action(id, "stop").await.unwrap();
    server.kill().await.unwrap();
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(
        log.contains("a turn was interrupted") || log.contains("DEBUG"),
        "the log was captured"
    );
    assert!(!log.contains(KEY), "the API key is in the server log");
}

/// The opencode binary `cargo xtask test` installs, or `None` (with the reason printed).
fn opencode() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("TANDEM_TEST_OPENCODE")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file());
    if path.is_none() {
        let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "TANDEM_TEST_OPENCODE must name the opencode binary (cargo xtask test installs it)"
        );
        eprintln!(
            "SKIP opencode: TANDEM_TEST_OPENCODE is not set (cargo xtask test installs opencode)"
        );
    }
    path
}

#[tokio::test]
async fn the_real_opencode_runs_a_turn_against_the_gateway_and_continues_its_session() {
    let Some(bin) = opencode() else { return };
    let model = ScriptedModel::start(vec![
        Reply::tool("bash", json!({ "command": "echo from opencode > oc.txt && cat oc.txt", "description": "write a file" })).with_tools(true).at_step(0),
        Reply::text("Wrote oc.txt.").with_tools(true).at_step(1),
        Reply::text("Still here.").with_tools(true).for_prompt("first"),
    ])
    .await;
    // Side requests (titles) get a plain answer.
    model.fallback(Reply::text("A title"));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.opencode_bin = Some(bin);
    })
    .await
    else {
        return;
    };
    s.req(Method::PUT, "/api/secrets/model_api_key")
        .bearer(&s.admin_token)
        .json(&json!({ "value": KEY }))
        .send()
        .await;
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/oc", src.path()).await;
    let created: SessionDetail = s.post("/api/sessions", json!({ "repo_id": repo, "prompt": "first: write oc.txt", "agent": { "kind": "opencode" } })).send().await.parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, ended(1)).await;
    let summary = || evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>();
    let (_, outcome, usage, error) = turn_ends(&evs)[0].clone();
    assert_eq!(
        outcome,
        TurnOutcome::Completed,
        "{error:?} {:#?}",
        summary()
    );
    assert!(
        usage.requests >= 2 && usage.prompt_tokens >= 200,
        "{usage:?}"
    );
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::ToolResult { name, output, exit_code: Some(0), .. } if name == "bash" && output.contains("from opencode"))), "{:#?}", summary());
    assert!(
        evs.iter().any(
            |e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text == "Wrote oc.txt.")
        ),
        "{:#?}",
        summary()
    );
    assert!(
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::FileChanged { path, .. } if path == "oc.txt"))
    );
    // Every model request went through the gateway with the key added there.
    assert!(
        model
            .requests()
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}")[..]))
    );

    // The next turn continues opencode's own session.
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        json!({ "text": "second: still there?" }),
    )
    .send()
    .await;
    let evs = wait_events(&s, id, ended(2)).await;
    assert_eq!(
        turn_ends(&evs)[1].1,
        TurnOutcome::Completed,
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    let last = model
        .requests()
        .into_iter()
        .rfind(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .unwrap();
    let users = last.user_messages().join("\n");
    assert!(
        users.contains("first: write oc.txt") && users.contains("second: still there?"),
        "{users}"
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}
