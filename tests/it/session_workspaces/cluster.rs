//! Several servers on one database: each looks after its own host's workspaces and forwards to the others.

use super::*;

/// A session as the store holds it (created directly, so nothing boots it), moved to `to`
/// with its workspace on `host` (none: a row from before hosts were recorded).
async fn stored_session(
    s: &TestServer,
    repo: RepoId,
    to: &[SessionState],
    host: Option<&str>,
    pid: i64,
) -> SessionId {
    use tandem_store as db;
    let author = Author {
        kind: AuthorKind::Automation,
        user_id: None,
        name: "test".into(),
    };
    let detail = tandem_server::sessions::create(
        &s.state.db,
        author,
        CreateSession {
            repo_id: repo,
            prompt: String::new(),
            branch: None,
            agent: Some(AgentSpec::None),
            context: None,
        },
        &AgentSpec::None,
    )
    .await
    .unwrap();
    let id = detail.session.id;
    for state in to {
        let mut tx = s.state.db.begin().await.unwrap();
        db::sessions::transition(&mut tx, id, *state, None, tandem_server::now_ms())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    if let Some(host) = host {
        db::sessions::set_workspace(
            &s.state.db,
            id,
            host,
            Some(&format!("w-{}", id.0.simple())),
            None,
            None,
            Some(pid),
        )
        .await
        .unwrap();
    }
    id
}

#[tokio::test]
async fn servers_sharing_a_database_look_after_their_own_hosts_workspaces_only() {
    let Some(a) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let repo: RepoId = crate::harness::make_repo(&a, "acme/hosts")
        .await
        .parse()
        .unwrap();
    let mine = a.state.workspaces().unwrap().host_id.clone();
    // A process id nothing runs as any more.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = i64::from(gone.id());
    let live = [SessionState::Starting, SessionState::Ready];

    // The supervisor leaves alone a session another server's host runs (that pid means
    // nothing here)…
    let foreign = stored_session(&a, repo, &live, Some("another-host"), dead).await;
    // …and fails one whose workspace init died on its own host. It looks at sessions oldest
    // first, so once this later one has failed, the other one was looked at too.
    let created = tandem_server::now_ms();
    while tandem_server::now_ms() == created {
        std::hint::spin_loop();
    }
    let own = stored_session(&a, repo, &live, Some(&mine), dead).await;
    wait_state(&a, own, &[SessionState::Failed]).await;
    let d: SessionDetail = a
        .get(&format!("/api/sessions/{foreign}"))
        .send()
        .await
        .parse();
    assert_eq!(d.session.state, SessionState::Ready);

    // A second server starting on the same database (another host) fails the sessions that
    // were starting on no recorded host, as after a restart, and leaves another host's alone.
    let legacy = stored_session(&a, repo, &[SessionState::Starting], None, dead).await;
    let starting = stored_session(
        &a,
        repo,
        &[SessionState::Starting],
        Some("another-host"),
        dead,
    )
    .await;
    let b = a.beside().await;
    assert_ne!(b.state.workspaces().unwrap().host_id, mine);
    wait_state(&b, legacy, &[SessionState::Failed]).await;
    let d: SessionDetail = b
        .get(&format!("/api/sessions/{starting}"))
        .send()
        .await
        .parse();
    assert_eq!(d.session.state, SessionState::Starting);
}

#[tokio::test]
async fn on_postgresql_another_server_answers_for_a_session_by_forwarding_to_its_host() {
    let Some(a) = crate::workspaces::server_on(crate::harness::Backend::Postgres, |_| {}).await
    else {
        return;
    };
    let id = ready_session(&a, "acme/cluster").await;
    // A second server on the database, on another host as far as it knows: the workspace, its
    // agent socket and its PTYs are not there. It forwards.
    let b = a.beside().await;
    assert_eq!(
        exec(&b, id, "echo from-$((40+2))").await.stdout,
        "from-42\n"
    );
    // A client cannot pass its request off as already forwarded (the marker is signed).
    let forged: ExecResult = b
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": "echo still-forwarded" }),
        )
        .header("x-tandem-forwarded", "1")
        .send()
        .await
        .parse();
    assert_eq!(forged.stdout, "still-forwarded\n");
    let diff = b.get(&format!("/api/sessions/{id}/diff")).send().await;
    assert_eq!(diff.status, StatusCode::OK);
    // The terminal, over B's live channel (a WebSocket upgrade, forwarded).
    let creds = tandem_server::client::live::Credentials {
        token: Some(b.admin_token.clone()),
        ..Default::default()
    };
    let mut c = tandem_server::client::live::LiveClient::connect(&b.url, id, &creds)
        .await
        .unwrap();
    let mut screen = Vec::new();
    let mut typed = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(&screen).contains("via-b-2") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, c.next()).await {
            Ok(Some(tandem_server::client::live::Incoming::Message(m))) => {
                if let tandem_protocol::live::WsServer::Refused { request, reason } = *m {
                    panic!("{request} refused: {reason}");
                }
            }
            // Typed once the shell's prompt shows (through the forwarded channel too).
            Ok(Some(tandem_server::client::live::Incoming::Terminal(t, bytes))) => {
                screen.extend_from_slice(&bytes);
                if !typed && String::from_utf8_lossy(&screen).contains("# ") {
                    c.input(t, b"echo via-b-$((1+1))\r").await.unwrap();
                    typed = true;
                }
            }
            other => panic!(
                "no echo through the second server ({other:?}); screen: {}",
                String::from_utf8_lossy(&screen)
            ),
        }
    }
    // A host whose server cannot be reached: a clear 503, not a hang.
    let host = a.state.workspaces().unwrap().host_id.clone();
    tandem_store::servers::register(
        &a.state.db,
        &host,
        "http://127.0.0.1:1",
        tandem_server::now_ms(),
    )
    .await
    .unwrap();
    let res = b
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": "true" }),
        )
        .send()
        .await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        String::from_utf8_lossy(&res.body).contains("unreachable"),
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    a.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}
