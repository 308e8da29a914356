//! The first run: a server that cannot start sessions says why (health, the session's events)
//! and starts them by itself once the cause is fixed; the settings page's API sets the model,
//! tests the connection and lets a waiting turn run, and allows the directories local repos may
//! come from; a server whose image is gone still stops the workspaces it runs.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::*;
use tandem_server::client::Client;

use crate::agent_runs::wait_events;
use crate::harness::{Backend, TestServer, Transport};
use crate::session_workspaces::{add_repo, source_repo, wait_state};

const KEY: &str = "sk-first-run-4b1d-never-shown";

fn waiting_for(evs: &[Event], kind: ProblemKind) -> Option<Problem> {
    evs.iter().find_map(|e| match &e.kind {
        EventKind::Waiting { problem } if problem.kind == kind => Some(problem.clone()),
        _ => None,
    })
}

async fn health(s: &TestServer) -> Health {
    s.get("/api/health").send().await.parse()
}

#[tokio::test]
async fn a_session_waits_with_the_reason_while_the_agent_binary_is_missing_and_starts_once_it_is_back()
 {
    let bin_dir = tempfile::tempdir().unwrap();
    let agent = bin_dir.path().join("tandem-workspace-agent");
    let agent_for_config = agent.clone();
    let Some(s) = crate::workspaces::server(move |c| c.agent_bin = Some(agent_for_config)).await
    else {
        return;
    };
    // Health names the missing binary and the fix, before any session exists.
    let h = health(&s).await;
    assert!(!h.workspaces.ready);
    let p = h
        .workspaces
        .problems
        .iter()
        .find(|p| p.kind == ProblemKind::AgentBinary)
        .unwrap_or_else(|| panic!("no agent-binary problem in {h:?}"));
    assert!(p.message.contains(agent.to_str().unwrap()), "{p:?}");
    assert!(p.fix.contains("cargo build"), "{p:?}");

    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/first", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    // The session says why it waits, in its events; it stays queued, not failed.
    let evs = wait_events(&s, id, |e| {
        waiting_for(e, ProblemKind::AgentBinary).is_some()
    })
    .await;
    assert!(
        waiting_for(&evs, ProblemKind::AgentBinary)
            .unwrap()
            .message
            .contains("agent binary")
    );
    let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_eq!(d.session.state, SessionState::Queued);

    // Putting the binary back starts it, with no restart of the server.
    let built =
        std::path::Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-workspace-agent");
    std::fs::copy(&built, &agent).unwrap();
    let waited = Instant::now();
    let d = wait_state(&s, id, &[SessionState::Ready, SessionState::Failed]).await;
    assert_eq!(d.session.state, SessionState::Ready);
    // Told once, however many times the supervisor tried again meanwhile.
    let evs = crate::session_workspaces::events(&s, id).await;
    let told = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Waiting { .. }))
        .count();
    assert_eq!(told, 1, "one waiting event per cause");
    assert!(waited.elapsed() < Duration::from_secs(60));
    let h = health(&s).await;
    assert!(
        !h.workspaces
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::AgentBinary),
        "{h:?}"
    );
    // No model is configured: the default (builtin) agent's problem stays listed.
    assert!(
        h.workspaces
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Model),
        "{h:?}"
    );
}

#[tokio::test]
async fn the_settings_page_sets_the_model_tests_the_connection_and_a_waiting_turn_runs() {
    let model = ScriptedModel::start(vec![Reply::text("Hello from the configured model.")]).await;
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let settings: Settings = s.get("/api/settings").send().await.parse();
    assert_eq!(settings.model_base_url.value, None);
    assert_eq!(settings.model_base_url.source, SettingSource::Default);
    assert!(!settings.model_api_key_set);
    assert!(
        settings
            .workspaces
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Model)
    );

    // A turn of the builtin agent waits for a model instead of failing.
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/model", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Say hello" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, |e| waiting_for(e, ProblemKind::Model).is_some()).await;
    assert!(
        !evs.iter()
            .any(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
    );

    // The connection test makes one real request, with the key typed into the form.
    let t: ModelTest = s
        .post(
            "/api/settings/model/test",
            json!({ "model_base_url": model.base_url, "model": "scripted-1", "model_api_key": KEY }),
        )
        .send()
        .await
        .parse();
    assert!(t.ok, "{t:?}");
    assert!(!t.models.is_empty(), "{t:?}");
    assert_eq!(
        model.model_lists(),
        vec![Some(format!("Bearer {KEY}"))],
        "one request, with the key"
    );
    // A dead endpoint is reported, not an error page.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let t: ModelTest = s
        .post(
            "/api/settings/model/test",
            json!({ "model_base_url": dead_url }),
        )
        .send()
        .await
        .parse();
    assert!(!t.ok && t.message.contains("not reachable"), "{t:?}");
    // Not a URL, or a key in the URL: refused before anything is stored.
    s.req(Method::PUT, "/api/settings")
        .bearer(&s.admin_token)
        .json(&json!({ "model_base_url": "file:///etc/passwd" }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");

    // Saving applies at once: the waiting turn runs against the model, with the key.
    let saved: Settings = s
        .req(Method::PUT, "/api/settings")
        .bearer(&s.admin_token)
        .json(&json!({ "model_base_url": model.base_url, "model": "scripted-1", "model_api_key": KEY }))
        .send()
        .await
        .parse();
    assert_eq!(saved.model_base_url.source, SettingSource::Settings);
    assert_eq!(saved.model.value, "scripted-1");
    assert!(saved.model_api_key_set);
    assert!(saved.workspaces.ready, "{:?}", saved.workspaces);
    let evs = wait_events(&s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    assert!(
        evs.iter().any(|e| matches!(&e.kind, EventKind::AgentMessage { text, .. } if text.contains("Hello from the configured model."))),
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    let chat = model
        .requests()
        .into_iter()
        .next()
        .expect("the turn asked the model");
    assert_eq!(
        chat.authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    // The key is in no event and not in the settings' answer.
    let all = serde_json::to_string(&evs).unwrap();
    assert!(!all.contains(KEY));
    let shown = String::from_utf8(s.get("/api/settings").send().await.body).unwrap();
    assert!(!shown.contains(KEY));
    // And the change is audited by name only.
    let audit = String::from_utf8(s.get("/api/audit").send().await.body).unwrap();
    assert!(audit.contains("settings.update") && !audit.contains(KEY));
}

#[tokio::test]
async fn a_value_the_config_file_sets_is_shown_as_such_and_cannot_be_changed_on_the_page() {
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Oneshot, |c| {
        c.agents.model_base_url = Some("http://model.internal/v1".into());
        c.file_sets.model_base_url = true;
    })
    .await
    else {
        return;
    };
    let settings: Settings = s.get("/api/settings").send().await.parse();
    assert_eq!(
        settings.model_base_url.value.as_deref(),
        Some("http://model.internal/v1")
    );
    assert_eq!(settings.model_base_url.source, SettingSource::File);
    let msg = s
        .req(Method::PUT, "/api/settings")
        .bearer(&s.admin_token)
        .json(&json!({ "model_base_url": "http://elsewhere/v1" }))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    assert!(msg.contains("tandem.toml"), "{msg}");
    // The model name is not in the file: the page may set it.
    let saved: Settings = s
        .req(Method::PUT, "/api/settings")
        .bearer(&s.admin_token)
        .json(&json!({ "model": "big-model" }))
        .send()
        .await
        .parse();
    assert_eq!(saved.model.value, "big-model");
    assert_eq!(saved.model.source, SettingSource::Settings);
    assert_eq!(
        saved.model_base_url.value.as_deref(),
        Some("http://model.internal/v1")
    );
    // Only admins see or change settings.
    let (_, token) = crate::agent_runs::another_user(&s, "pat").await;
    s.req(Method::GET, "/api/settings")
        .bearer(&token)
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    s.req(Method::PUT, "/api/settings")
        .bearer(&token)
        .json(&json!({ "model": "x" }))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
}

#[tokio::test]
async fn a_server_whose_image_is_gone_still_stops_the_workspaces_it_runs() {
    let Some(image) = crate::workspaces::image().await else {
        return;
    };
    let images = image.parent().unwrap().parent().unwrap().to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut server, url) = crate::restart::serve_with_workspaces(&data, &images).await;
    let token = crate::restart::local_token(&data).await;
    let src = source_repo("[workspace]\nsetup = []\n");
    let c = Client::new(&url, Some(token.clone())).unwrap();
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/imageless".into(),
            url: src.path().to_string_lossy().into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    let id = c
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: String::new(),
            branch: None,
            agent: Some(AgentSpec::None),
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    crate::restart::wait_for_state(&c, id, SessionState::Ready).await;

    // Restarted with an image recipe that is not built: nothing can start, the running
    // workspace is still this server's to stop.
    server.kill().await.unwrap();
    let recipe = dir.path().join("changed.toml");
    std::fs::write(
        &recipe,
        format!("{}\n# changed\n", crate::workspaces::TEST_RECIPE),
    )
    .unwrap();
    let flags = [
        "--images-dir".as_ref(),
        images.as_os_str(),
        "--image-recipe".as_ref(),
        recipe.as_os_str(),
    ];
    let (_server, url, _) = crate::restart::serve_with(&data, &flags).await;
    let c = Client::new(&url, Some(token)).unwrap();
    let h = c.health().await.unwrap();
    assert!(
        h.workspaces
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Image),
        "{h:?}"
    );
    let row = {
        let db =
            tandem_store::Db::connect(&tandem_server::config::sqlite_url(&data.join("tandem.db")))
                .await
                .unwrap();
        tandem_store::sessions::workspace(&db, id)
            .await
            .unwrap()
            .unwrap()
    };
    let pid = row.workspace_pid.unwrap() as i32;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let stopped = c.session_action(id, "stop").await.unwrap();
    assert_eq!(stopped.session.state, SessionState::Stopped);
    // The workspace's init is gone (reaped by the runtime).
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.contains("(dumb-init)"))
    {
        assert!(Instant::now() < deadline, "the workspace kept running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With no `local_repo_dirs` in tandem.toml an admin allows a directory on the settings page:
/// a local repo under it is then accepted, one outside still refused; a bad directory is refused
/// with what to do; tandem.toml's list wins and cannot be changed on the page.
#[tokio::test]
async fn an_admin_allows_a_local_repo_directory_on_the_page_unless_tandem_toml_sets_one() {
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Oneshot, |c| {
        c.local_repo_dirs = Vec::new();
    })
    .await
    else {
        return;
    };
    let allowed = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let add = |name: &str, dir: &std::path::Path| {
        s.post(
            "/api/repos",
            json!({ "name": name, "url": dir.display().to_string() }),
        )
    };
    let settings: Settings = s.get("/api/settings").send().await.parse();
    assert_eq!(settings.local_repo_dirs.source, SettingSource::Default);
    assert!(settings.local_repo_dirs.value.is_empty());
    let msg = add("demo/early", allowed.path())
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert!(msg.contains("Settings → Local repos"), "{msg}");
    for bad in ["relative/dir", "/", "/nonexistent/tandem-dir"] {
        let msg = s
            .req(Method::PUT, "/api/settings")
            .bearer(&s.admin_token)
            .json(&json!({ "local_repo_dirs": [bad] }))
            .send()
            .await
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert!(msg.contains(bad), "{msg}");
    }
    let saved: Settings = s
        .req(Method::PUT, "/api/settings")
        .bearer(&s.admin_token)
        .json(&json!({ "local_repo_dirs": [allowed.path()] }))
        .send()
        .await
        .parse();
    assert_eq!(saved.local_repo_dirs.source, SettingSource::Settings);
    assert_eq!(saved.local_repo_dirs.value.len(), 1);
    let made = add("demo/local", allowed.path()).send().await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    add("demo/outside", outside.path())
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");

    // tandem.toml's list (here: the harness's) wins and is read-only on the page.
    let Some(fixed) = TestServer::start(Backend::Sqlite, Transport::Oneshot).await else {
        return;
    };
    let settings: Settings = fixed.get("/api/settings").send().await.parse();
    assert_eq!(settings.local_repo_dirs.source, SettingSource::File);
    let msg = fixed
        .req(Method::PUT, "/api/settings")
        .bearer(&fixed.admin_token)
        .json(&json!({ "local_repo_dirs": [allowed.path()] }))
        .send()
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    assert!(msg.contains("local_repo_dirs"), "{msg}");
}
