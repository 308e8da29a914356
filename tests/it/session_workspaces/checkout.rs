//! The session's checkout through its agent: files, terminals, git, and whose the checkout is.

use super::*;

#[tokio::test]
async fn the_file_api_works_inside_the_checkout_and_refuses_to_leave_it() {
    use tandem_protocol::agent::FileView;
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/files", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    assert_eq!(
        wait_state(&s, id, &[SessionState::Ready, SessionState::Failed])
            .await
            .session
            .state,
        SessionState::Ready
    );

    let root: FileView = s
        .get(&format!("/api/sessions/{id}/files?path="))
        .send()
        .await
        .parse();
    let FileView::Dir { entries, .. } = root else {
        panic!("the root is a directory")
    };
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
    assert!(
        names.contains(&"README.md") && names.contains(&"tandem.toml") && names.contains(&".git"),
        "{names:?}"
    );
    let readme: FileView = s
        .get(&format!("/api/sessions/{id}/files?path=README.md"))
        .send()
        .await
        .parse();
    assert!(
        matches!(readme, FileView::File { ref content, binary: false, .. } if content == "hello\n"),
        "{readme:?}"
    );

    let put = s
        .req(
            Method::PUT,
            &format!("/api/sessions/{id}/files?path=docs/new%20file.md"),
        )
        .bearer(&s.admin_token)
        .json(&json!({ "content": "# New\n" }))
        .send()
        .await;
    assert_eq!(
        put.status,
        StatusCode::NO_CONTENT,
        "{}",
        String::from_utf8_lossy(&put.body)
    );
    assert_eq!(
        exec(&s, id, "cat 'docs/new file.md'").await.stdout,
        "# New\n",
        "written into the workspace"
    );

    exec(
        &s,
        id,
        "ln -s /etc escape && ln -s .. up && head -c 9000000 /dev/zero > big.bin",
    )
    .await;
    for bad in [
        "../etc/passwd",
        "/etc/passwd",
        "escape/passwd",
        "up/etc/hostname",
        "docs/../../etc/passwd",
    ] {
        let res = s
            .get(&format!("/api/sessions/{id}/files?path={bad}"))
            .send()
            .await;
        let msg = res.assert_error(StatusCode::BAD_REQUEST, "bad_request");
        assert!(
            msg.contains("workspace") || msg.contains("absolute"),
            "{bad}: {msg}"
        );
    }
    for bad in ["../outside.txt", "escape/evil.conf", "/tmp/x"] {
        let res = s
            .req(Method::PUT, &format!("/api/sessions/{id}/files?path={bad}"))
            .bearer(&s.admin_token)
            .json(&json!({ "content": "x" }))
            .send()
            .await;
        res.assert_error(StatusCode::BAD_REQUEST, "bad_request");
    }
    assert_eq!(
        exec(
            &s,
            id,
            "ls /outside.txt /etc/evil.conf 2>&1 | grep -c 'No such file'"
        )
        .await
        .stdout,
        "2\n",
        "nothing escaped"
    );
    s.get(&format!("/api/sessions/{id}/files?path=nope.txt"))
        .send()
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    s.get(&format!("/api/sessions/{id}/files?path=big.bin"))
        .send()
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");

    s.req(Method::POST, &format!("/api/sessions/{id}/stop"))
        .bearer(&s.admin_token)
        .send()
        .await;
    s.get(&format!("/api/sessions/{id}/files?path=README.md"))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
}

#[tokio::test]
async fn the_agent_serves_shared_terminals() {
    use futures::{SinkExt, StreamExt};
    use tandem_host::workspace_agent::WorkspaceAgent;
    use tandem_protocol::agent::{PtyControl, PtyOpen};
    use tokio_tungstenite::tungstenite::Message;

    let Some(s) = server().await else { return };
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/term", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    wait_state(&s, created.session.id, &[SessionState::Ready]).await;
    let row = tandem_store::sessions::workspace(&s.state.db, created.session.id)
        .await
        .unwrap()
        .unwrap();
    let (wid, pid) = (row.workspace_id.unwrap(), row.workspace_pid.unwrap() as i32);
    let ws = s.state.workspaces().unwrap();

    let agent = WorkspaceAgent::new(&ws, wid.as_str(), pid);

    // A terminal two clients share.
    async fn read_until(
        sock: &mut tokio_tungstenite::WebSocketStream<tandem_host::runtime::AgentStream>,
        needle: &str,
    ) -> String {
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !seen.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, sock.next()).await;
            match next
                .unwrap_or_else(|_| panic!("no {needle:?} from the terminal in time; saw {seen:?}"))
            {
                Some(Ok(Message::Binary(b))) => seen.push_str(&String::from_utf8_lossy(&b)),
                Some(Ok(Message::Text(t))) => seen.push_str(&t),
                other => panic!("terminal ended early: {other:?}; saw {seen:?}"),
            }
        }
        seen
    }
    let info = agent
        .open_pty(&PtyOpen {
            cols: 80,
            rows: 24,
            command: None,
            cwd: None,
        })
        .await
        .unwrap();
    assert_eq!(info.command[0], "/bin/bash");
    let mut a = agent.attach_pty(info.id).await.unwrap();
    a.send(Message::Binary(
        b"echo hello-$((6*7)); pwd\n".to_vec().into(),
    ))
    .await
    .unwrap();
    let out = read_until(&mut a, "hello-42").await;
    if !out.contains("/workspace") {
        read_until(&mut a, "/workspace").await;
    }
    let resize = serde_json::to_string(&PtyControl::Resize {
        cols: 100,
        rows: 30,
    })
    .unwrap();
    a.send(Message::Text(resize.into())).await.unwrap();
    // The agent reports the new size once it has applied it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = agent.ptys().await.unwrap();
        if list
            .iter()
            .any(|p| p.id == info.id && p.cols == 100 && p.rows == 30)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resize never applied: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.send(Message::Binary(b"stty size\n".to_vec().into()))
        .await
        .unwrap();
    read_until(&mut a, "30 100").await;

    // A late joiner gets the screen so far first, then the live output.
    let mut b = agent.attach_pty(info.id).await.unwrap();
    read_until(&mut b, "hello-42").await;
    b.send(Message::Binary(b"echo from-b\n".to_vec().into()))
        .await
        .unwrap();
    read_until(&mut a, "from-b").await;
    b.send(Message::Binary(b"exit 0\n".to_vec().into()))
        .await
        .unwrap();
    for sock in [&mut a, &mut b] {
        let ended = read_until(sock, "\"exit\"").await;
        assert!(ended.contains("\"type\":\"exit\""), "{ended}");
    }
    assert!(matches!(
        agent.attach_pty(info.id).await,
        Err(tandem_host::Error::NotFound(_))
    ));
}

#[tokio::test]
async fn git_status_and_commit_go_through_the_agent() {
    use tandem_protocol::agent::{GitCommitted, GitStatus};
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/git", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    wait_state(&s, id, &[SessionState::Ready]).await;
    let clean: GitStatus = s
        .get(&format!("/api/sessions/{id}/git/status"))
        .send()
        .await
        .parse();
    assert_eq!(clean.branch, "main");
    assert!(clean.changes.is_empty(), "{clean:?}");
    exec(&s, id, "echo more >> README.md && echo x > 'new file.txt'").await;
    let dirty: GitStatus = s
        .get(&format!("/api/sessions/{id}/git/status"))
        .send()
        .await
        .parse();
    let mut got: Vec<(String, String)> = dirty
        .changes
        .iter()
        .map(|c| (c.code.clone(), c.path.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (" M".to_string(), "README.md".to_string()),
            ("??".to_string(), "new file.txt".to_string())
        ]
    );
    let empty = s
        .post(
            &format!("/api/sessions/{id}/git/commit"),
            json!({ "message": " " }),
        )
        .send()
        .await;
    empty.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    let res = s
        .post(
            &format!("/api/sessions/{id}/git/commit"),
            json!({ "message": "Add a file" }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let committed: GitCommitted = res.parse();
    let after: GitStatus = s
        .get(&format!("/api/sessions/{id}/git/status"))
        .send()
        .await
        .parse();
    assert!(after.changes.is_empty());
    assert_eq!(after.head, committed.commit);
    let log = exec(&s, id, "git log -1 --format='%an|%s'").await.stdout;
    assert_eq!(log, "admin|Add a file\n");
    // Nothing to commit is a conflict, said plainly.
    let again = s
        .post(
            &format!("/api/sessions/{id}/git/commit"),
            json!({ "message": "again" }),
        )
        .send()
        .await;
    again.assert_error(StatusCode::CONFLICT, "conflict");
}

/// The checkout a session starts on is owned by the workspace's uid (a user namespace shifts
/// it) and its git index agrees with it: git inside does not see every file as touched (which
/// would re-read the whole tree at each status), with and without a `setup`.
#[tokio::test]
async fn the_checkout_is_the_workspaces_own_and_its_index_is_fresh() {
    let Some(s) = server().await else { return };
    for (name, recipe) in [
        ("acme/fresh-plain", "[workspace]\nsetup = []\n"),
        ("acme/fresh-setup", RECIPE),
    ] {
        let src = source_repo(recipe);
        let repo = add_repo(&s, name, src.path()).await;
        let d = start_session(&s, &repo).await;
        assert_eq!(d.session.state, SessionState::Ready, "{name}");
        let r = exec(
            &s,
            d.session.id,
            "cd /workspace && stat -c %u README.md && git diff-files --name-only | wc -l",
        )
        .await;
        assert_eq!(r.exit_code, Some(0), "{name}: {r:?}");
        assert_eq!(
            r.stdout, "0\n0\n",
            "{name}: owned by root inside, nothing stat-dirty"
        );
    }
}
