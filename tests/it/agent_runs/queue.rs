//! The prompt queue as people drive it: authors and order, steering, stopping, and the same across two server processes.

use super::*;

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

    // Bob's prompt over the live channel is recorded as his REST prompt is: one command
    // submits for every surface.
    model.fallback(Reply::text("more done"));
    let mut live = crate::live::Peer::connect(&s, id, crate::live::token(&bob_token)).await;
    live.c
        .send(&tandem_protocol::live::WsClient::Prompt {
            text: "fourth, from bob live".into(),
            mode: PromptMode::Queue,
        })
        .await
        .unwrap();
    s.req(Method::POST, &format!("/api/sessions/{id}/prompts"))
        .bearer(&bob_token)
        .json(&json!({ "text": "fifth, from bob by REST" }))
        .send()
        .await
        .parse::<Prompt>();
    wait_events(&s, id, |evs| {
        evs.iter().any(|e| {
            matches!(&e.kind, EventKind::PromptQueued { text, .. } if text == "fourth, from bob live")
        })
    })
    .await;
    let session = id.to_string();
    let said = crate::surfaces::assert_submits_as_rest_does(
        &s,
        &session,
        "fourth, from bob live",
        "fifth, from bob by REST",
        "user",
    )
    .await;
    assert_eq!(said.person, json!(bob.id), "{said:?}");
    assert_eq!(
        said,
        crate::surfaces::submitted(&s, &session, "fifth, from bob by REST").await
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
    let prompt = tandem_store::prompts::running(&s.state.db, id)
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
    tandem_store::prompts::request_stop(&s.state.db, prompt.id, "Remy")
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
        tandem_store::prompts::requeue(&mut tx, prompt.id, true, true)
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
