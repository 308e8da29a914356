//! What a workspace can make the server store is bounded per session and per session tree
//! (`tandem_protocol::limits`): a hostile agent floods its child with prompts and the name
//! server with lookups; turns whose frames reach a session's or a tree's stored bounds. Each
//! test attacks a bound and asserts the stored rows stay under it, the refusal is said once in
//! the timeline, and the server keeps answering.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tandem_protocol::agent::TurnFrame;
use tandem_protocol::limits::*;
use tandem_protocol::{AgentSpec, EventKind, Session, SessionDetail, SessionId, SessionState};
use tandem_server::turns::record::Recorder;

use crate::harness::{Backend, TestServer, Transport};
use crate::session_workspaces::{add_repo, source_repo};

/// One number from the database (a test counts stored rows itself).
async fn count(s: &TestServer, sql: &str, id: SessionId) -> i64 {
    let (n,): (i64,) = sqlx::query_as(sql)
        .bind(id.to_string())
        .fetch_one(s.state.db.raw_pool())
        .await
        .unwrap();
    n
}

/// Sets one of session `id`'s stored counters, as if it had stored that much already.
async fn set_stored(s: &TestServer, id: SessionId, column: &str, n: i64) {
    sqlx::query(&format!("UPDATE sessions SET {column} = $1 WHERE id = $2"))
        .bind(n)
        .bind(id.to_string())
        .execute(s.state.db.raw_pool())
        .await
        .unwrap();
}

/// The `error` events of session `id` that contain `words`.
async fn errors_saying(s: &TestServer, id: SessionId, words: &str) -> Vec<String> {
    crate::session_workspaces::events(s, id)
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Error { message } if message.contains(words) => Some(message),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_workspace_flooding_its_child_and_the_name_server_stays_within_its_bounds_sqlite() {
    flood(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_workspace_flooding_its_child_and_the_name_server_stays_within_its_bounds_postgres() {
    flood(Backend::Postgres).await;
}

/// Workspace → store: a hostile agent (`tests/hostile-agent`, prompt `flood`) spawns a child
/// whose turn never ends, posts it 10,000 prompts (8 at a time) and, egress on with an
/// allow-list they do not match, looks up 100,000 random names straight at its name server.
/// The child keeps at most its queue's bound, the parent's timeline says the refusal once, the
/// refused lookups are one report (not one event each), and the API answers throughout.
async fn flood(backend: Backend) {
    const PROMPTS: i64 = 10_000;
    const LOOKUPS: u64 = 100_000;
    let hostile =
        std::path::Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-hostile-agent");
    if !hostile.is_file() {
        assert!(
            std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_err(),
            "build it: cargo build -p tandem-hostile-agent"
        );
        eprintln!("SKIP: {} is not built", hostile.display());
        return;
    }
    // The agents need a model configured to start a turn; the hostile one never asks it.
    let model = scripted_model::ScriptedModel::start(vec![]).await;
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server_on(backend, move |c| {
        c.agent_bin = Some(hostile);
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
    })
    .await
    else {
        return;
    };
    let src = source_repo("[workspace]\nsetup = []\negress = [\"*.allowed.test\"]\n");
    let repo = add_repo(&s, "bounds/flood", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": format!("flood {PROMPTS} {LOOKUPS}") }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    // The API answers within its usual time all along (a liveness bound, not a benchmark),
    // until the agent reports what it got.
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    let report: Value = loop {
        let asked = Instant::now();
        let res = s.get("/api/sessions").send().await;
        let took = asked.elapsed();
        assert_eq!(res.status, axum::http::StatusCode::OK);
        assert!(
            took < Duration::from_secs(2),
            "GET /api/sessions took {took:?} during the flood"
        );
        slowest = slowest.max(took);
        let said: Option<(String,)> = sqlx::query_as(
            "SELECT payload FROM events WHERE session_id = $1 AND type = 'agent_message'",
        )
        .bind(id.to_string())
        .fetch_optional(s.state.db.raw_pool())
        .await
        .unwrap();
        if let Some((payload,)) = said {
            let kind: EventKind = serde_json::from_str(&payload).unwrap();
            let EventKind::AgentMessage { text, .. } = kind else {
                unreachable!()
            };
            break serde_json::from_str(&text).unwrap();
        }
        let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        assert!(
            t0.elapsed() < Duration::from_secs(240) && d.session.state != SessionState::Failed,
            "the flood never reported ({:?}); the parent's events: {:#?}",
            d.session.state,
            crate::session_workspaces::events(&s, id)
                .await
                .iter()
                .map(|e| e.kind.summary())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "flood on {backend:?} ({:?} from the session's creation, slowest GET /api/sessions {slowest:?}): {report}",
        t0.elapsed()
    );
    let child: SessionId = report["child"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"))
        .parse()
        .unwrap();

    // Prompts: the child's queue stops at its bound (its first prompt, `hold`, runs or waits
    // too), the rest are refused with words the agent can act on.
    let p = &report["prompts"];
    let (taken, refused) = (
        p["created"].as_i64().unwrap(),
        p["refused"].as_i64().unwrap(),
    );
    assert_eq!(p["other"], 0, "{p}");
    assert_eq!(taken + refused, PROMPTS, "{p}");
    assert!(
        (MAX_QUEUED_PROMPTS_PER_SESSION - 1..=MAX_QUEUED_PROMPTS_PER_SESSION).contains(&taken),
        "{p}"
    );
    let refusal = p["first_refusal"].as_str().unwrap();
    assert!(
        refusal.contains("prompts waiting") && refusal.contains("wait until some have run"),
        "{refusal}"
    );
    let stored = count(
        &s,
        "SELECT COUNT(*) FROM prompts WHERE session_id = $1",
        child,
    )
    .await;
    assert!(
        stored <= MAX_QUEUED_PROMPTS_PER_SESSION + 1,
        "the child stores {stored} prompts"
    );
    let child_events = count(&s, "SELECT last_seq FROM sessions WHERE id = $1", child).await;
    assert!(
        child_events <= MAX_QUEUED_PROMPTS_PER_SESSION + 100,
        "the child stores {child_events} events"
    );
    let said = errors_saying(&s, id, "prompts waiting").await;
    assert_eq!(
        said.len(),
        1,
        "said once in the parent's timeline: {said:?}"
    );

    // Lookups: all answered (NXDOMAIN), and one report a period, not one event each.
    let l = &report["lookups"];
    assert_eq!(l["sent"], LOOKUPS, "{l}");
    assert!(
        l["nxdomain"].as_u64().unwrap() >= LOOKUPS * 9 / 10,
        "the name server kept up: {l}"
    );
    let periods = t0.elapsed().as_secs() / EGRESS_REPORT_PERIOD_SECS + 1;
    let reports = count(
        &s,
        "SELECT COUNT(*) FROM events WHERE session_id = $1 AND type = 'egress_blocked'",
        id,
    )
    .await;
    assert!(
        (1..=periods as i64 + 1).contains(&reports),
        "{reports} refused-lookup events in {periods} periods"
    );
    let evs = crate::session_workspaces::events(&s, id).await;
    assert!(
        evs.iter().any(|e| matches!(
            &e.kind,
            EventKind::EgressBlocked { name, .. } if name.ends_with(".flood.test")
        )),
        "the first refused lookup is reported at once"
    );

    for session in [child, id] {
        let res = s
            .req(
                axum::http::Method::POST,
                &format!("/api/sessions/{session}/stop"),
            )
            .bearer(&s.admin_token)
            .send()
            .await;
        assert_eq!(res.status, axum::http::StatusCode::OK);
    }
}

#[tokio::test]
async fn a_sessions_and_its_trees_stored_events_and_artifacts_stop_at_their_bounds_sqlite() {
    stored_bounds(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_sessions_and_its_trees_stored_events_and_artifacts_stop_at_their_bounds_postgres() {
    stored_bounds(Backend::Postgres).await;
}

/// A turn of session `id` (its first prompt) as the server records it.
async fn recorder(s: &TestServer, id: SessionId) -> Recorder {
    let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    Recorder::new(
        s.state.db.clone(),
        id,
        &d.prompts[0],
        &AgentSpec::Builtin,
        "bounds-runner",
        Arc::new(tandem_host::NoCredentials),
        Arc::new(Mutex::new(std::collections::HashSet::new())),
    )
}

/// Workspace → store: a session that has stored nearly all the events (bytes) it may, a tree
/// that has, and a session near its artifact bytes. An agent's frames past a bound are left
/// out (the rows stay under it, with the one event that says so), the bound is said once
/// however many turns run into it, and people's prompts still go in.
async fn stored_bounds(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Oneshot).await else {
        return;
    };
    let repo = crate::harness::make_repo(&s, "bounds/frames").await;
    let root: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "first" }),
        )
        .send()
        .await
        .parse();
    let root = root.session.id;
    let kids: Vec<Session> = s
        .post(
            &format!("/api/sessions/{root}/children"),
            json!({ "prompt": "child", "variants": 2 }),
        )
        .send()
        .await
        .parse();
    let (child, other) = (kids[0].id, kids[1].id);
    let bytes = |id| {
        let s = &s;
        async move { count(s, "SELECT event_bytes FROM sessions WHERE id = $1", id).await }
    };
    let messages = |id| {
        let s = &s;
        async move {
            count(
                s,
                "SELECT COUNT(*) FROM events WHERE session_id = $1 AND type = 'agent_message'",
                id,
            )
            .await
        }
    };
    let text = "m".repeat(4096);

    // The session's own bound: 64 KiB of room, 64 messages of 4 KiB.
    set_stored(
        &s,
        root,
        "event_bytes",
        MAX_EVENT_BYTES_PER_SESSION - 64 * 1024,
    )
    .await;
    for _ in 0..2 {
        // Two turns: the bound is said once, not once per turn.
        let mut rec = recorder(&s, root).await;
        for _ in 0..64 {
            rec.frame(TurnFrame::Message { text: text.clone() })
                .await
                .unwrap();
        }
    }
    let kept = messages(root).await;
    assert!((1..=16).contains(&kept), "{kept} messages kept");
    let said = errors_saying(&s, root, "stored all the events").await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("this session"), "{said:?}");
    let stored = bytes(root).await;
    assert!(
        stored <= MAX_EVENT_BYTES_PER_SESSION + 1024,
        "{} bytes past the bound (the one event that says so is ~600)",
        stored - MAX_EVENT_BYTES_PER_SESSION
    );
    // A person's prompt is not the workspace's: it still goes in.
    let res = s
        .post(
            &format!("/api/sessions/{root}/prompts"),
            json!({ "text": "a person's prompt" }),
        )
        .send()
        .await;
    assert_eq!(res.status, axum::http::StatusCode::CREATED);

    // Artifacts: a child with 1 MiB of room gets one 700 KiB output kept whole, not three.
    set_stored(
        &s,
        other,
        "artifact_bytes",
        MAX_ARTIFACT_BYTES_PER_SESSION - 1024 * 1024,
    )
    .await;
    let mut rec = recorder(&s, other).await;
    let output = "o".repeat(700 * 1024);
    for i in 0..3 {
        rec.frame(TurnFrame::ToolResult {
            call_id: format!("c{i}"),
            name: "run_command".into(),
            output: output.clone(),
            is_error: false,
            exit_code: Some(0),
            duration_ms: 1,
        })
        .await
        .unwrap();
    }
    let artifacts = count(
        &s,
        "SELECT COUNT(*) FROM artifacts WHERE session_id = $1",
        other,
    )
    .await;
    assert_eq!(artifacts, 1, "artifacts stop at the session's bound");
    let said = errors_saying(&s, other, "artifact bytes").await;
    assert_eq!(said.len(), 1, "{said:?}");

    // The tree's bound: the child has stored next to nothing, but its tree is full.
    set_stored(&s, root, "event_bytes", MAX_EVENT_BYTES_PER_TREE).await;
    let before = bytes(child).await;
    let mut rec = recorder(&s, child).await;
    for _ in 0..10 {
        rec.frame(TurnFrame::Message { text: text.clone() })
            .await
            .unwrap();
    }
    assert_eq!(messages(child).await, 0, "nothing past the tree's bound");
    let said = errors_saying(&s, child, "stored all the events").await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("this session's tree"), "{said:?}");
    assert!(bytes(child).await - before < 1024, "only the one event");
}

#[tokio::test]
async fn a_frames_long_path_name_and_call_id_are_cut_and_counted_as_stored_sqlite() {
    long_fields(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_frames_long_path_name_and_call_id_are_cut_and_counted_as_stored_postgres() {
    long_fields(Backend::Postgres).await;
}

/// Workspace → store: an agent's frame line may be 16 MiB, and a changed file's path, a tool's
/// name and a call's id were recorded whole (in the event and again in the audit log) while the
/// frame was counted as at most ~96 KiB. Frames with 1 MiB of each are stored cut to
/// `MAX_FRAME_FIELD_BYTES`, the session's stored-bytes counter grows by exactly what is stored,
/// the audit rows stay small, and events whose JSON is larger than their text (escaped control
/// characters) are counted as stored, so a session stops at its bound.
async fn long_fields(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Oneshot).await else {
        return;
    };
    let repo = crate::harness::make_repo(&s, "bounds/fields").await;
    let start = |prompt: &'static str| {
        let (s, repo) = (&s, &repo);
        async move {
            let d: SessionDetail = s
                .post(
                    "/api/sessions",
                    json!({ "repo_id": repo, "prompt": prompt }),
                )
                .send()
                .await
                .parse();
            d.session.id
        }
    };
    let (id, tight) = (start("long fields").await, start("escaped").await);
    let stored = |id| {
        let s = &s;
        async move { count(s, "SELECT event_bytes FROM sessions WHERE id = $1", id).await }
    };
    let payloads = |id: SessionId| {
        let s = &s;
        async move {
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT type, payload FROM events WHERE session_id = $1")
                    .bind(id.to_string())
                    .fetch_all(s.state.db.raw_pool())
                    .await
                    .unwrap();
            rows
        }
    };
    // The session's own boot may write events meanwhile: a pair of the counter and the
    // stored rows is taken where the counter did not move around the rows' read (each event is
    // counted in the transaction that stores it).
    let settled = |id: SessionId| async move {
        loop {
            let counted = stored(id).await;
            let rows = payloads(id).await;
            if stored(id).await == counted {
                return (counted, rows);
            }
        }
    };
    let (bytes_before, rows) = settled(id).await;
    let before: usize = rows.iter().map(|(_, p)| p.len()).sum();

    let long = "p".repeat(1024 * 1024);
    let mut rec = recorder(&s, id).await;
    for i in 0..10 {
        rec.frame(TurnFrame::FileChanged {
            path: format!("{i}{long}"),
            change: tandem_protocol::FileChange::Modified,
        })
        .await
        .unwrap();
        rec.frame(TurnFrame::ToolCall {
            call_id: format!("{i}{long}"),
            name: long.clone(),
            arguments: json!({}),
        })
        .await
        .unwrap();
        rec.frame(TurnFrame::ToolResult {
            call_id: long.clone(),
            name: long.clone(),
            output: "ok".into(),
            is_error: false,
            exit_code: Some(0),
            duration_ms: 1,
        })
        .await
        .unwrap();
    }
    let (bytes_after, rows) = settled(id).await;
    let kinds = |t: &str| rows.iter().filter(|(k, _)| k == t).count();
    assert_eq!(
        (
            kinds("file_changed"),
            kinds("tool_call"),
            kinds("tool_result")
        ),
        (10, 10, 10),
        "every frame is recorded, cut"
    );
    for (kind, payload) in &rows {
        let v: Value = serde_json::from_str(payload).unwrap();
        for field in ["path", "name", "call_id"] {
            if let Some(f) = v.get(field).and_then(Value::as_str) {
                assert!(
                    f.len() <= MAX_FRAME_FIELD_BYTES,
                    "{kind}.{field} stored with {} bytes",
                    f.len()
                );
            }
        }
    }
    // The counter grows by what is stored, and that is a few KiB a frame, not a MiB.
    let after: usize = rows.iter().map(|(_, p)| p.len()).sum();
    let grown = bytes_after - bytes_before;
    assert_eq!(grown, (after - before) as i64, "counted as stored");
    assert!(
        grown < 30 * (3 * MAX_FRAME_FIELD_BYTES as i64 + 1024),
        "{grown} bytes stored for 30 frames"
    );
    // The audit rows copy the cut strings only.
    let audit: Vec<(String,)> = sqlx::query_as("SELECT detail FROM audit WHERE target = $1")
        .bind(id.to_string())
        .fetch_all(s.state.db.raw_pool())
        .await
        .unwrap();
    assert!(audit.len() >= 20, "{} audit rows", audit.len());
    for (detail,) in &audit {
        assert!(
            detail.len() <= MAX_FRAME_FIELD_BYTES + 1024,
            "an audit row of {} bytes",
            detail.len()
        );
    }

    // A message of control characters is six times larger as JSON: with 1 MiB of room, two
    // such events fit, not the ten a count of ~96 KiB a frame let in.
    set_stored(
        &s,
        tight,
        "event_bytes",
        MAX_EVENT_BYTES_PER_SESSION - 1024 * 1024,
    )
    .await;
    let mut rec = recorder(&s, tight).await;
    for _ in 0..10 {
        rec.frame(TurnFrame::Message {
            text: "\u{1}".repeat(60 * 1024),
        })
        .await
        .unwrap();
    }
    let bytes = stored(tight).await;
    assert!(
        bytes <= MAX_EVENT_BYTES_PER_SESSION + 1024,
        "{} bytes past the bound (the one event that says so is ~600)",
        bytes - MAX_EVENT_BYTES_PER_SESSION
    );
    assert_eq!(
        errors_saying(&s, tight, "stored all the events")
            .await
            .len(),
        1
    );
}
