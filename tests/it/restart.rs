//! Restarting the server (even a hard kill) loses nothing: the real binary on a SQLite file.

use std::process::Stdio;

use tandem_protocol::{CreateRepo, CreateSession};
use tandem_server::client::Client;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_tandem");

/// Starts `tandem serve` on a free port; returns the child, its URL and whether it printed a
/// first-start login link.
async fn serve(data: &std::path::Path) -> (Child, String, bool) {
    serve_with(data, &[]).await
}

/// [`serve`] with more flags. The log (debug level) is appended to `<data>.log`.
pub async fn serve_with(
    data: &std::path::Path,
    extra: &[&std::ffi::OsStr],
) -> (Child, String, bool) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))
        .unwrap();
    crate::harness::allow_local_repos(data);
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .args(extra)
        .env_remove("TANDEM_DATABASE_URL")
        .env_remove("TANDEM_WEB_DIR")
        .env("TANDEM_LOG", "debug,sqlx=warn")
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut first = false;
    // The server prints its URL, then either the first-start link or the `login-link` hint.
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.split_once("listening on ") {
            url = Some(rest.1.trim().to_string());
        }
        if line.contains("#code=tlc_") {
            first = true;
            break;
        }
        if line.contains("sign in:") {
            break;
        }
    }
    (child, url.expect("server printed its URL"), first)
}

#[tokio::test]
async fn sessions_and_events_survive_a_hard_kill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut child, url, first) = serve(&data).await;
    assert!(first, "first start prints a login link");
    assert!(
        data.join("tandem.db").is_file(),
        "the embedded default is a SQLite file in the data dir"
    );

    let token = local_token(&data).await;

    let c = Client::new(&url, Some(token.clone())).unwrap();
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/web".into(),
            url: "https://x.invalid/w.git".into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            c.create_session(&CreateSession {
                repo_id: repo.id,
                prompt: format!("task {i}"),
                branch: None,
                agent: None,
                context: None,
            })
            .await
            .unwrap(),
        );
    }
    // This server cannot start them (no image): each says so once, in its log.
    for d in &ids {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !c
            .events(d.session.id, 0)
            .await
            .unwrap()
            .events
            .iter()
            .any(|e| matches!(e.kind, tandem_protocol::EventKind::Waiting { .. }))
        {
            assert!(std::time::Instant::now() < deadline, "no waiting event");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let before: Vec<_> =
        futures::future::join_all(ids.iter().map(|d| c.events(d.session.id, 0))).await;
    let jwt = tandem_server::identity::auth::JwtKeys::load_or_create(&data).unwrap();

    // SIGKILL: no graceful shutdown, no chance to flush anything more.
    child.kill().await.unwrap();

    let (_child, url2, first_again) = serve(&data).await;
    assert!(!first_again, "a restart does not create another admin");
    let c = Client::new(&url2, Some(token)).unwrap();
    for (d, page) in ids.iter().zip(before) {
        let page = page.unwrap();
        let again = c.session(d.session.id).await.unwrap();
        assert_eq!(again.session.title, d.session.title);
        assert_eq!(again.prompts, d.prompts);
        let events = c.events(d.session.id, 0).await.unwrap();
        assert_eq!(events, page, "the event log is identical after the restart");
        assert_eq!(
            events.events.len(),
            3,
            "opening events and one waiting note, not told again"
        );
    }
    assert_eq!(c.sessions(None).await.unwrap().len(), 5);
    // The JWT key persisted too: a browser login from before the restart still works.
    let admin = c.me().await.unwrap();
    let cookie_jwt = jwt.issue(admin.id, 60).unwrap();
    let res = reqwest::Client::new()
        .get(format!("{url2}/api/me"))
        .bearer_auth(cookie_jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// An admin API token minted locally in `data` (`tandem token create`).
pub async fn local_token(data: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .args(["token", "create", "--data-dir", data.to_str().unwrap()])
        .env_remove("TANDEM_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `tandem serve` with workspaces on the test image.
pub async fn serve_with_workspaces(
    data: &std::path::Path,
    images: &std::path::Path,
) -> (Child, String) {
    let recipe = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/test/image.toml");
    let flags = [
        "--images-dir".as_ref(),
        images.as_os_str(),
        "--image-recipe".as_ref(),
        recipe.as_os_str(),
    ];
    let (child, url, _) = serve_with(data, &flags).await;
    (child, url)
}

pub async fn wait_for_state(
    c: &Client,
    id: tandem_protocol::SessionId,
    want: tandem_protocol::SessionState,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if c.session(id).await.is_ok_and(|d| d.session.state == want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session never reached {want:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_session_workspace_survives_a_server_crash_and_is_supervised_again() {
    let Some(image) = crate::workspaces::image().await else {
        return;
    };
    let images = image.parent().unwrap().parent().unwrap().to_path_buf();
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    let _clean = crate::harness::RemoveWorkspaces(data.clone());
    let (mut server, url) = serve_with_workspaces(&data, &images).await;
    let token = local_token(&data).await;
    let src = tempfile::tempdir().unwrap();
    crate::snapshots::git(src.path(), &["init", "-q"]);
    crate::snapshots::commit_recipe(src.path(), &["true"]);

    let c = Client::new(&url, Some(token.clone())).unwrap();
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/durable".into(),
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
            agent: Some(tandem_protocol::AgentSpec::None),
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    wait_for_state(&c, id, tandem_protocol::SessionState::Ready).await;
    let run = |c: Client, cmd: &str| {
        let req = tandem_protocol::ExecRequest {
            command: cmd.into(),
            cwd: None,
            timeout_secs: None,
        };
        async move { c.exec(id, &req).await }
    };
    run(c.clone(), "echo kept > /workspace/note.txt")
        .await
        .unwrap();

    server.kill().await.unwrap();
    let (mut server, url) = serve_with_workspaces(&data, &images).await;
    let c = Client::new(&url, Some(token)).unwrap();
    assert_eq!(
        c.session(id).await.unwrap().session.state,
        tandem_protocol::SessionState::Ready
    );
    assert_eq!(
        run(c.clone(), "cat /workspace/note.txt")
            .await
            .unwrap()
            .stdout,
        "kept\n",
        "the workspace kept running"
    );

    // The new server supervises it: its death is noticed.
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
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(row.workspace_pid.unwrap() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for_state(&c, id, tandem_protocol::SessionState::Failed).await;
    server.kill().await.unwrap();
    let left = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !left.contains(data.to_str().unwrap()),
        "no mount of the data dir is left"
    );
}

/// The warm pool's workspaces a session claimed keep their `w-` id: a restart removes only
/// the unclaimed ones a previous server left, never a live or suspended session's (it deleted
/// their layers, and the person's work with them).
#[tokio::test]
async fn sessions_that_claimed_warm_pool_workspaces_keep_them_across_a_restart() {
    use tandem_protocol::{ExecRequest, SessionState};
    let Some(image) = crate::workspaces::image().await else {
        return;
    };
    let images = image.parent().unwrap().parent().unwrap().to_path_buf();
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    let _clean = crate::harness::RemoveWorkspaces(data.clone());
    let (mut server, url) = serve_with_workspaces(&data, &images).await;
    let token = local_token(&data).await;
    let src = tempfile::tempdir().unwrap();
    crate::snapshots::git(src.path(), &["init", "-q"]);
    crate::snapshots::commit_recipe(src.path(), &["true"]);
    let c = Client::new(&url, Some(token.clone())).unwrap();
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/pooled".into(),
            url: src.path().to_string_lossy().into(),
            default_branch: None,
            warm_pool: Some(1),
        })
        .await
        .unwrap();
    let snap = c.build_snapshot(repo.id).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let warm = |c: &Client| {
        let c = c.clone();
        async move {
            loop {
                let built = c.snapshot(snap.id).await.unwrap();
                assert_ne!(built.state, tandem_protocol::SnapshotState::Failed);
                if c.repo(repo.id).await.unwrap().warm_ready == 1 {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the pool never filled"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    let exec = |c: &Client, id, cmd: &str| {
        let (c, req) = (
            c.clone(),
            ExecRequest {
                command: cmd.into(),
                cwd: None,
                timeout_secs: None,
            },
        );
        async move { c.exec(id, &req).await.unwrap() }
    };
    let db = || async {
        tandem_store::Db::connect(&tandem_server::config::sqlite_url(&data.join("tandem.db")))
            .await
            .unwrap()
    };
    // Two sessions, each from the pool: one stays live, one is suspended.
    let mut ids = Vec::new();
    for _ in 0..2 {
        warm(&c).await;
        let id = c
            .create_session(&CreateSession {
                repo_id: repo.id,
                prompt: String::new(),
                branch: None,
                agent: Some(tandem_protocol::AgentSpec::None),
                context: None,
            })
            .await
            .unwrap()
            .session
            .id;
        wait_for_state(&c, id, SessionState::Ready).await;
        let row = tandem_store::sessions::workspace(&db().await, id)
            .await
            .unwrap()
            .unwrap();
        assert!(
            row.workspace_id.as_deref().unwrap().starts_with("w-"),
            "{row:?} is from the warm pool"
        );
        let wrote = exec(&c, id, "echo \"the person's work\" > /workspace/work.txt").await;
        assert_eq!(wrote.exit_code, Some(0));
        ids.push(id);
    }
    let (live, suspended) = (ids[0], ids[1]);
    c.session_action(suspended, "suspend").await.unwrap();
    warm(&c).await;

    server.kill().await.unwrap();
    let (mut server, url) = serve_with_workspaces(&data, &images).await;
    let c = Client::new(&url, Some(token)).unwrap();
    assert_eq!(
        c.session(live).await.unwrap().session.state,
        SessionState::Ready
    );
    assert_eq!(
        exec(&c, live, "cat /workspace/work.txt").await.stdout,
        "the person's work\n",
        "the live session's workspace kept running"
    );
    let resumed = c.session_action(suspended, "resume").await.unwrap();
    assert_eq!(resumed.session.state, SessionState::Ready);
    assert_eq!(
        exec(&c, suspended, "cat /workspace/work.txt").await.stdout,
        "the person's work\n",
        "the suspended session's layer is still there"
    );
    for id in [live, suspended] {
        c.session_action(id, "stop").await.unwrap();
    }
    server.kill().await.unwrap();
}
