//! Other agents and their children: a replaced workspace, child sessions, the command agent, the real opencode.

use super::*;

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
        1,
        "{:?}",
        children
            .iter()
            .map(|c| (c.session.id, c.session.state))
            .collect::<Vec<_>>()
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

/// The opencode binary `cargo xtask test` installs, or `None` (with the reason printed).
pub fn opencode() -> Option<std::path::PathBuf> {
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
