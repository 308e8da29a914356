//! Attacks on the trust boundary, made the way a hostile workspace or a hostile person would
//! make them, through the real HTTP boundary and real workspaces. Each test states the attack
//! and asserts it gets nothing.

use axum::http::{Method, StatusCode};

use crate::harness::TestServer;
use crate::session_workspaces::{exec, ready_session};
use tandem_protocol::SessionDetail;

async fn server() -> Option<TestServer> {
    crate::workspaces::server(|_| {}).await
}

/// Workspace → host: a command people run through the runtime's `exec` gets the init's
/// confinement (no new privileges, the seccomp filter), and the filter refuses what container
/// escapes start with.
#[tokio::test]
async fn an_execd_command_is_confined_like_the_init_and_cannot_make_namespaces_or_mount() {
    let Some(s) = server().await else { return };
    let id = ready_session(&s, "hostile/exec").await;
    let status = exec(&s, id, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status").await;
    assert!(
        status.stdout.contains("NoNewPrivs:\t1"),
        "exec'd commands must not gain privileges: {status:?}"
    );
    assert!(
        status.stdout.contains("Seccomp:\t2"),
        "exec'd commands run under the seccomp filter: {status:?}"
    );
    // The init's own tree too (the workspace agent's children: terminals, agents).
    let init = exec(&s, id, "grep -E '^(NoNewPrivs|Seccomp):' /proc/1/status").await;
    assert!(
        init.stdout.contains("NoNewPrivs:\t1") && init.stdout.contains("Seccomp:\t2"),
        "{init:?}"
    );
    for attack in [
        "unshare --user --map-root-user true",
        "unshare --mount true",
        "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x",
    ] {
        let r = exec(&s, id, attack).await;
        assert_ne!(r.exit_code, Some(0), "{attack:?} worked: {r:?}");
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(
            said.contains("not permitted") || said.contains("denied"),
            "{attack:?}: {said}"
        );
    }
    // Ordinary work still works under the filter.
    let ok = exec(&s, id, "cd /workspace && git status --short && echo ok").await;
    assert_eq!(ok.exit_code, Some(0), "{ok:?}");
}

/// Workspace → host: a symlink the workspace plants where the runtime creates a bind target
/// (here, in place of `/run/tandem`) must not make root create anything on the host when the
/// workspace is started again from that layer (resume; forks and snapshot setup alike).
#[tokio::test]
async fn a_symlink_planted_at_a_bind_target_makes_root_create_nothing_on_the_host() {
    let Some(s) = server().await else { return };
    let id = ready_session(&s, "hostile/binds").await;
    let escape = std::env::temp_dir().join(format!("tandem-escape-{}", uuid::Uuid::new_v4()));
    let plant = exec(
        &s,
        id,
        &format!(
            "mv /run/tandem /run/tandem.moved && ln -s {} /run/tandem && ls -l /run/tandem",
            escape.display()
        ),
    )
    .await;
    assert_eq!(plant.exit_code, Some(0), "{plant:?}");
    let res = s
        .req(Method::POST, &format!("/api/sessions/{id}/suspend"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let res = s
        .req(Method::POST, &format!("/api/sessions/{id}/resume"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert!(
        !escape.exists(),
        "root followed the planted link and created {} on the host",
        escape.display()
    );
    // Refused with a reason, not a crash.
    if res.status != StatusCode::OK {
        let msg = res.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains("bind target"), "{msg}");
    }
    let _ = std::fs::remove_dir_all(&escape);
}

/// Person → person: without an origin of its own, VS Code (pages a workspace serves) is not
/// served on Tandem's origin, where its script would act with the viewer's cookie.
#[tokio::test]
async fn vs_code_is_refused_on_tandems_own_origin_unless_the_operator_opts_in() {
    let Some(s) = TestServer::start_with(
        crate::harness::Backend::Sqlite,
        crate::harness::Transport::Oneshot,
        |c| c.public_url = Some("https://tandem.example.com".into()),
    )
    .await
    else {
        return;
    };
    let repo = crate::harness::make_repo(&s, "hostile/code").await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            serde_json::json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let msg = s
        .post(&format!("/api/sessions/{id}/code"), serde_json::json!({}))
        .send()
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(msg.contains("code_url"), "{msg}");
    let page = s.get(&format!("/sessions/{id}/code/")).send().await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8_lossy(&page.body).contains("code_url"));
}

/// Person → person: forking copies the whole writable layer (shell history, credentials
/// outside `/workspace`), so only the owner may; and only admins add repos by URL, local
/// paths only under the directories the operator allows.
#[tokio::test]
async fn a_plain_user_cannot_fork_anothers_session_or_add_a_repo_by_url() {
    let Some(s) = TestServer::start(
        crate::harness::Backend::Sqlite,
        crate::harness::Transport::Oneshot,
    )
    .await
    else {
        return;
    };
    let repo = crate::harness::make_repo(&s, "hostile/fork").await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            serde_json::json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let (_, mallory) = crate::agent_runs::another_user(&s, "mallory").await;
    s.req(Method::POST, &format!("/api/sessions/{id}/fork"))
        .bearer(&mallory)
        .json(&serde_json::json!({ "count": 1 }))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    for url in [
        "file:///root",
        "/etc",
        "ssh://git@internal/x.git",
        "http://169.254.169.254/x",
    ] {
        s.req(Method::POST, "/api/repos")
            .bearer(&mallory)
            .json(&serde_json::json!({ "name": "mallory/x", "url": url }))
            .send()
            .await
            .assert_error(StatusCode::FORBIDDEN, "forbidden");
    }
    // Even an admin reaches local paths only under `local_repo_dirs` (here: the temp dir).
    for url in ["file:///root", "/etc", "/proc/self/cwd"] {
        let msg = s
            .post(
                "/api/repos",
                serde_json::json!({ "name": "admin/local", "url": url }),
            )
            .send()
            .await
            .assert_error(StatusCode::FORBIDDEN, "forbidden");
        assert!(msg.contains("local_repo_dirs"), "{msg}");
    }
}

/// Workspace → host: a recipe's egress allow-list naming something that resolves to an
/// internal address (here `localhost`; a name someone points at 169.254.169.254 alike) opens
/// nothing: the start is refused with the reason, unless the operator listed the address.
#[tokio::test]
async fn an_allow_listed_name_that_resolves_to_an_internal_address_opens_nothing() {
    let Some(s) = server().await else { return };
    let src = crate::session_workspaces::source_repo(
        "[workspace]\nsetup = []\negress = [\"localhost\"]\n",
    );
    let repo = crate::session_workspaces::add_repo(&s, "hostile/egress", src.path()).await;
    let d = crate::session_workspaces::start_session(&s, &repo).await;
    assert_eq!(d.session.state, tandem_protocol::SessionState::Failed);
    let evs = crate::session_workspaces::events(&s, d.session.id).await;
    let said = serde_json::to_string(&evs).unwrap();
    assert!(said.contains("internal addresses"), "{said}");
}

/// Workspace → other people's prompts and the store: the agent's turn frames are untrusted. A
/// `steered` frame naming a queued prompt that was never sent to the turn delivers nothing (it
/// would drop a person's prompt unanswered), and a flood of huge outputs keeps at most the
/// turn's artifact bound.
#[tokio::test]
async fn a_lying_agent_cannot_mark_anothers_prompt_delivered_or_flood_the_artifacts() {
    use std::sync::{Arc, Mutex};
    use tandem_protocol::agent::TurnFrame;
    use tandem_protocol::{AgentSpec, EventKind, PromptState, SessionDetail};
    use tandem_server::turns::record::{MAX_ARTIFACT_BYTES_PER_TURN, Recorder};
    let Some(s) = TestServer::start(
        crate::harness::Backend::Sqlite,
        crate::harness::Transport::Oneshot,
    )
    .await
    else {
        return;
    };
    let repo = crate::harness::make_repo(&s, "hostile/frames").await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            serde_json::json!({ "repo_id": repo, "prompt": "first" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    s.post(
        &format!("/api/sessions/{id}/prompts"),
        serde_json::json!({ "text": "second, from someone else" }),
    )
    .send()
    .await;
    let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    let (first, second) = (d.prompts[0].clone(), d.prompts[1].clone());
    let steered = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let mut rec = Recorder::new(
        s.state.db.clone(),
        id,
        &first,
        &AgentSpec::Builtin,
        "hostile-runner",
        Arc::new(tandem_host::NoCredentials),
        steered.clone(),
    );
    rec.frame(TurnFrame::Steered {
        prompt_id: second.id,
    })
    .await
    .unwrap();
    let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_eq!(
        d.prompts[1].state,
        PromptState::Queued,
        "the other prompt is kept"
    );
    // Sent to the turn as steering, it may be reported delivered (once).
    steered.lock().unwrap().insert(second.id);
    rec.frame(TurnFrame::Steered {
        prompt_id: second.id,
    })
    .await
    .unwrap();
    let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_eq!(d.prompts[1].state, PromptState::Delivered);

    let big = "x".repeat(MAX_ARTIFACT_BYTES_PER_TURN / 4 + 1);
    for i in 0..6 {
        rec.frame(TurnFrame::ToolResult {
            call_id: format!("c{i}"),
            name: "run_command".into(),
            output: big.clone(),
            is_error: false,
            exit_code: Some(0),
            duration_ms: 1,
        })
        .await
        .unwrap();
    }
    let evs = crate::session_workspaces::events(&s, id).await;
    let kept = evs
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::ToolResult {
                    artifact: Some(_),
                    ..
                }
            )
        })
        .count();
    let results = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ToolResult { .. }))
        .count();
    assert_eq!(results, 6, "every result is an event");
    assert_eq!(kept, 3, "artifacts stop at the turn's bound");
}

/// Workspace → the server's model account: a session's agent that keeps asking the model stops
/// at the session's budget; the model sees no request past it.
#[tokio::test]
async fn a_looping_agent_stops_at_the_sessions_model_budget() {
    use scripted_model::{Reply, ScriptedModel};
    use tandem_protocol::{EventKind, SessionDetail};
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::tool(
        "run_command",
        serde_json::json!({ "command": "true" }),
    ));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.max_model_requests_per_session = 3;
    })
    .await
    else {
        return;
    };
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "hostile/budget", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            serde_json::json!({ "repo_id": repo, "prompt": "loop forever" }),
        )
        .send()
        .await
        .parse();
    let evs = crate::agent_runs::wait_events(&s, created.session.id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    assert_eq!(
        model.requests().len(),
        3,
        "no model request past the budget"
    );
    let said = serde_json::to_string(&evs).unwrap();
    assert!(
        said.contains("budget"),
        "the turn says why it stopped: {said}"
    );
    // Its use is shown with the session, and it is kept in the store (a restart does not
    // give the agent a fresh budget).
    let shown: SessionDetail = s
        .get(&format!("/api/sessions/{}", created.session.id))
        .send()
        .await
        .parse();
    assert_eq!(
        (shown.model_requests, shown.model_request_limit),
        (3, Some(3))
    );
    assert_eq!(
        tandem_store::sessions::model_requests(&s.state.db, created.session.id)
            .await
            .unwrap(),
        3
    );
    // Host → gateway: another user of the host cannot reach this workspace's gateway socket
    // (it would act as the workspace: model requests, git, children).
    let socket = std::fs::read_dir(s.dir.path().join("data/workspaces"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("gateway/gateway.sock"))
        .find(|p| p.exists())
        .expect("the session's gateway socket");
    let probe = tokio::process::Command::new("python3")
        .args([
            "-c",
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('connected')",
        ])
        .arg(&socket)
        .uid(65534)
        .gid(65534)
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&probe.stdout),
        String::from_utf8_lossy(&probe.stderr)
    );
    assert!(
        !said.contains("connected") && said.contains("Permission denied"),
        "nobody reached the gateway: {said}"
    );
}

/// Workspace → host: the workspace's own code answers the agent socket (the PID-namespace check
/// passes: it runs inside) and names a "display" that is GStreamer launch syntax reading a
/// file and writing another. The server takes only `:N`: nothing is built from that text.
#[tokio::test]
async fn a_hostile_agents_injected_display_starts_no_pipeline() {
    use tandem_protocol::live::{WsClient, WsServer};
    use tandem_server::client::live::{Credentials, Incoming, LiveClient};
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
    let leak = std::path::Path::new("/tmp/tandem-hostile-leak");
    let _ = std::fs::remove_file(leak);
    let Some(s) = crate::workspaces::server(move |c| c.agent_bin = Some(hostile)).await else {
        return;
    };
    let id = ready_session(&s, "hostile/desktop").await;
    let mut live = LiveClient::connect(
        &s.url,
        id,
        &Credentials {
            token: Some(s.admin_token.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    live.send(&WsClient::DesktopOffer {
        sdp: "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n".into(),
    })
    .await
    .unwrap();
    let refused = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match live.next().await {
                Some(Incoming::Message(m)) => {
                    if let WsServer::Refused { request, reason } = *m
                        && request == "desktop_offer"
                    {
                        return reason;
                    }
                }
                Some(_) => {}
                None => panic!("the channel closed"),
            }
        }
    })
    .await
    .expect("an answer to the offer");
    assert!(refused.contains("not :N"), "{refused}");
    assert!(!leak.exists(), "the injected pipeline ran");
}

/// Workspace → host users: a snapshot's `setup` leaves a set-uid shell in its layer. The layer
/// is on the host's disk, owned by the workspace's uid; no other host user may reach it to run
/// the shell as that uid (which owns every workspace's files).
#[tokio::test]
async fn a_set_uid_shell_a_snapshot_setup_leaves_cannot_be_run_by_another_host_user() {
    use tandem_protocol::{Snapshot, SnapshotState};
    let Some(s) = server().await else { return };
    let src = crate::session_workspaces::source_repo(
        "[workspace]\nsetup = [\"cp /bin/sh rootsh && chmod 4755 rootsh\"]\n",
    );
    let repo = crate::session_workspaces::add_repo(&s, "hostile/setuid", src.path()).await;
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let built = crate::snapshots::wait_built(&s, &snap.id.to_string()).await;
    assert_eq!(built.state, SnapshotState::Ready, "{:?}", built.error);
    let shell = s
        .dir
        .path()
        .join("data/snapshots")
        .join(snap.id.to_string())
        .join("layer/workspace/rootsh");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&shell).expect("the setup's shell is in the layer");
    assert_ne!(meta.mode() & 0o4000, 0, "it is set-uid");
    let run = tokio::process::Command::new(&shell)
        .args(["-c", "id -u"])
        .uid(65534)
        .gid(65534)
        .output()
        .await;
    match run {
        Ok(out) => panic!(
            "nobody ran the setup's set-uid shell: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
}
