//! Bad input and a server killed mid-turn: clear errors, nothing lost or repeated.

use super::*;

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
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    let _clean = crate::harness::RemoveWorkspaces(data.clone());
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
            context: None,
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
