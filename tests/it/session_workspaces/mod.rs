//! Sessions on real workspaces: boot from the newest snapshot with the branch's newer commits,
//! run commands (owner only), diff, stop keeping the diff, and fail cleanly when the workspace dies.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::*;

use crate::harness::TestServer;
use crate::snapshots::{git, wait_built};

mod checkout;
mod cluster;
mod lifecycle;
mod pool_and_forks;
mod resume_failures;

async fn server() -> Option<TestServer> {
    crate::workspaces::server(|_| {}).await
}

/// A git repo with a recipe; returns its directory.
pub fn source_repo(recipe: &str) -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(src.path().join("README.md"), "hello\n").unwrap();
    std::fs::write(src.path().join(".gitignore"), "setup-output.txt\n").unwrap();
    std::fs::write(src.path().join("tandem.toml"), recipe).unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "initial"]);
    src
}

pub async fn add_repo(s: &TestServer, name: &str, src: &Path) -> String {
    let res = s
        .post(
            "/api/repos",
            json!({ "name": name, "url": src.to_str().unwrap() }),
        )
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    res.json()["id"].as_str().unwrap().to_string()
}

pub async fn wait_state(s: &TestServer, id: SessionId, want: &[SessionState]) -> SessionDetail {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        if want.contains(&d.session.state) {
            if d.session.state == SessionState::Failed {
                // Shown when a test expected otherwise.
                for e in events(s, id).await {
                    if e.kind.type_name() == "error" {
                        eprintln!("session {id} failed: {:?}", e.kind);
                    }
                }
            }
            return d;
        }
        if Instant::now() >= deadline {
            let errors: Vec<String> = events(s, id)
                .await
                .into_iter()
                .filter(|e| e.kind.type_name() == "error")
                .map(|e| format!("{:?}", e.kind))
                .collect();
            panic!(
                "session {id} stuck in {:?}; its errors: {errors:?}",
                d.session.state
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn events(s: &TestServer, id: SessionId) -> Vec<Event> {
    let page: EventsPage = s
        .get(&format!("/api/sessions/{id}/events"))
        .send()
        .await
        .parse();
    page.events
}

/// A ready session of a new repo `name` with no agent on `s`.
pub async fn ready_session(s: &TestServer, name: &str) -> SessionId {
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(s, name, src.path()).await;
    let d = start_session(s, &repo).await;
    assert_eq!(d.session.state, SessionState::Ready);
    // The source repo may go: the session fetched what it needs.
    drop(src);
    d.session.id
}

pub async fn exec(s: &TestServer, id: SessionId, command: &str) -> ExecResult {
    let res = s
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": command }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    res.parse()
}

const RECIPE: &str = r#"[workspace]
setup = ["echo from-setup > setup-output.txt"]
start = ["echo service-up > /tmp/service-started"]
"#;

#[tokio::test]
async fn a_session_boots_from_the_snapshot_at_the_branch_head_runs_commands_and_keeps_its_diff_when_stopped()
 {
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/app", src.path()).await;
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let snap = wait_built(&s, &snap.id.to_string()).await;
    assert_eq!(snap.state, SnapshotState::Ready, "{}", snap.log);

    // A commit pushed after the snapshot was built.
    std::fs::write(src.path().join("after.txt"), "pushed after the snapshot\n").unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "after"]);
    let head = git(src.path(), &["rev-parse", "HEAD"]);
    assert_ne!(Some(head.as_str()), snap.commit.as_deref());

    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let ready = wait_state(&s, id, &[SessionState::Ready, SessionState::Failed]).await;
    assert_eq!(
        ready.session.state,
        SessionState::Ready,
        "{:#?}",
        events(&s, id).await
    );

    let phases: Vec<(BootPhase, i64)> = events(&s, id)
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::BootPhase {
                phase, elapsed_ms, ..
            } => Some((phase, elapsed_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        phases.iter().map(|p| p.0).collect::<Vec<_>>(),
        [
            BootPhase::Starting,
            BootPhase::Syncing,
            BootPhase::Services,
            BootPhase::Ready
        ]
    );
    assert!(
        phases.windows(2).all(|w| w[0].1 <= w[1].1),
        "timings grow: {phases:?}"
    );

    let out = exec(&s, id, "cat after.txt setup-output.txt /tmp/service-started && git rev-parse HEAD && git branch --show-current").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout,
        format!("pushed after the snapshot\nfrom-setup\nservice-up\n{head}\nmain\n")
    );

    // Commands are owner-only: another user is refused and nothing runs.
    let other =
        tandem_protocol::User::new(UserId(uuid::Uuid::new_v4()), "bob", false, Timestamp(0));
    tandem_store::users::insert(&s.state.db, &other)
        .await
        .unwrap();
    let bob = tandem_server::identity::auth::create_api_token(&s.state.db, &other, "bob", None)
        .await
        .unwrap()
        .token;
    let refused = s
        .req(Method::POST, &format!("/api/sessions/{id}/exec"))
        .bearer(&bob)
        .json(&json!({ "command": "touch /workspace/bob-was-here" }))
        .send()
        .await;
    refused.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let refused = s
        .req(Method::POST, &format!("/api/sessions/{id}/stop"))
        .bearer(&bob)
        .send()
        .await;
    refused.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let bad = s
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": "true", "timeout_secs": 0 }),
        )
        .send()
        .await;
    bad.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");

    // Changes show in the diff: an edit and a new file, not the ignored setup output.
    let out = exec(
        &s,
        id,
        "echo changed >> README.md && echo new > new.txt && ls bob-was-here 2>&1; true",
    )
    .await;
    assert!(
        out.stdout.contains("No such file"),
        "bob's command never ran: {out:?}"
    );
    let diff: Diff = s
        .get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse();
    assert_eq!(diff.files, ["README.md", "new.txt"], "{diff:?}");
    assert!(
        diff.patch.contains("+changed") && diff.patch.contains("+new"),
        "{}",
        diff.patch
    );
    assert_eq!(diff.base.as_deref(), Some(head.as_str()));
    assert!(events(&s, id).await.iter().any(|e| matches!(&e.kind, EventKind::CommandRun { command, exit_code: Some(0), .. } if command.contains("new.txt"))));

    let stopped: SessionDetail = s
        .req(Method::POST, &format!("/api/sessions/{id}/stop"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    assert_eq!(stopped.session.state, SessionState::Stopped);
    let kept: Diff = s
        .get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse();
    assert_eq!(kept, diff, "the diff is kept after the workspace is gone");
    // Kept in the store, not in this server's data dir: a server with another data dir shows
    // it (on PostgreSQL, whichever server is asked once the workspace's host is gone).
    let legacy =
        |data: &std::path::Path| data.join("sessions").join(id.to_string()).join("diff.json");
    assert!(!legacy(&s.state.config.data_dir).exists());
    let b = s.beside().await;
    let there: Diff = b
        .get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse();
    assert_eq!(there, diff, "another server shows the kept diff");
    // What an older version kept in its data dir moves into the store when a server starts
    // there, and the file goes.
    tandem_store::diffs::forget(&s.state.db, id).await.unwrap();
    let json = serde_json::to_vec(&diff).unwrap();
    let file = std::cell::RefCell::new(None);
    let c = s
        .beside_from(|data| {
            let f = legacy(data);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, &json).unwrap();
            *file.borrow_mut() = Some(f);
        })
        .await;
    assert!(!file.into_inner().unwrap().exists(), "the file moved");
    let adopted: Diff = s
        .get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse();
    assert_eq!(adopted, diff, "the older version's diff is not lost");
    drop((b, c));
    assert!(
        events(&s, id).await.iter().any(
            |e| matches!(e.kind, EventKind::WorkspaceStopped { diff_bytes } if diff_bytes > 0)
        )
    );
    let after = s
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": "true" }),
        )
        .send()
        .await;
    after.assert_error(StatusCode::CONFLICT, "conflict");
    let again = s
        .req(Method::POST, &format!("/api/sessions/{id}/stop"))
        .bearer(&s.admin_token)
        .send()
        .await;
    again.assert_error(StatusCode::CONFLICT, "conflict");
    let rootfs = s
        .dir
        .path()
        .join("data/workspaces")
        .join(tandem_server::sessions::workspace::workspace_id(id))
        .join("rootfs");
    assert!(!rootfs.exists(), "the workspace's mount is gone");
}

#[tokio::test]
async fn a_session_builds_a_missing_snapshot_first_and_a_failing_start_command_fails_it() {
    let Some(s) = server().await else { return };
    let src = source_repo("[workspace]\nstart = [\"echo no database here >&2; exit 4\"]\n");
    let repo = add_repo(&s, "acme/broken", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let done = wait_state(&s, id, &[SessionState::Ready, SessionState::Failed]).await;
    assert_eq!(done.session.state, SessionState::Failed);
    let evs = events(&s, id).await;
    assert!(
        evs.iter().any(|e| matches!(
            e.kind,
            EventKind::BootPhase {
                phase: BootPhase::Snapshot,
                ..
            }
        )),
        "built a snapshot first"
    );
    let err = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Error { message } => Some(message.clone()),
            _ => None,
        })
        .expect("an error event");
    assert!(
        err.contains("exited with 4") && err.contains("no database here"),
        "{err}"
    );
    let left = std::fs::read_dir(s.dir.path().join("data/workspaces"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("rootfs").exists())
        .count();
    assert_eq!(left, 0, "a failed boot leaves no mounted workspace");
}

#[tokio::test]
async fn a_session_whose_workspace_dies_is_marked_failed_and_the_server_carries_on() {
    let Some(s) = server().await else { return };
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/fragile", src.path()).await;
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
    let row = tandem_store::sessions::workspace(&s.state.db, id)
        .await
        .unwrap()
        .unwrap();
    let pid = row.workspace_pid.expect("the init's pid is recorded");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let failed = wait_state(&s, id, &[SessionState::Failed]).await;
    assert_eq!(failed.session.state, SessionState::Failed);
    assert!(events(&s, id).await.iter().any(|e| matches!(&e.kind, EventKind::Error { message } if message.contains("stopped unexpectedly"))));
    assert_eq!(
        s.req(Method::GET, "/api/health").send().await.status,
        StatusCode::OK
    );
}

/// A session of `repo` without an agent, started and waited for until it is ready or failed.
pub async fn start_session(s: &TestServer, repo: &str) -> SessionDetail {
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    wait_state(
        s,
        created.session.id,
        &[SessionState::Ready, SessionState::Failed],
    )
    .await
}
