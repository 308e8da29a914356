//! Sessions on real workspaces: boot from the newest snapshot with the branch's newer commits,
//! run commands (owner only), diff, stop keeping the diff, and fail cleanly when the workspace dies.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::*;

use crate::harness::TestServer;
use crate::snapshots::{git, wait_built};

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
    let other = tandem_protocol::User {
        id: UserId(uuid::Uuid::new_v4()),
        name: "bob".into(),
        is_admin: false,
        created_at: Timestamp(0),
    };
    tandem_server::db::users::insert(&s.state.db, &other)
        .await
        .unwrap();
    let bob = tandem_server::auth::create_api_token(&s.state.db, &other, "bob", None)
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
    let row = tandem_server::db::sessions::workspace(&s.state.db, id)
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

async fn wait_warm(s: &TestServer, repo: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: Repo = s.get(&format!("/api/repos/{repo}")).send().await.parse();
        if r.warm_ready == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "warm pool of {repo} stuck at {} (want {want})",
            r.warm_ready
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_warm_pool_keeps_workspaces_started_and_new_sessions_claim_them() {
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/warm", src.path()).await;
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let built = wait_built(&s, &snap.id.to_string()).await;
    assert_eq!(built.state, SnapshotState::Ready, "{:?}", built.error);

    let bad = s
        .req(Method::PUT, &format!("/api/repos/{repo}/warm-pool"))
        .bearer(&s.admin_token)
        .json(&json!({ "size": 99 }))
        .send()
        .await;
    bad.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    let set = s
        .req(Method::PUT, &format!("/api/repos/{repo}/warm-pool"))
        .bearer(&s.admin_token)
        .json(&json!({ "size": 2 }))
        .send()
        .await;
    assert_eq!(set.status, StatusCode::OK);
    wait_warm(&s, &repo, 2).await;

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
    let from_pool = events(&s, id).await.iter().any(|e| {
        matches!(&e.kind, EventKind::BootPhase { phase: BootPhase::Starting, detail: Some(d), .. } if d.contains("warm pool"))
    });
    assert!(from_pool, "{:#?}", events(&s, id).await);
    let row = tandem_server::db::sessions::workspace(&s.state.db, id)
        .await
        .unwrap()
        .unwrap();
    assert!(row.workspace_id.as_deref().unwrap().starts_with("w-"));
    let out = exec(&s, id, "cat setup-output.txt /tmp/service-started").await;
    assert_eq!(
        out.stdout, "from-setup\nservice-up\n",
        "a pooled workspace still runs the start commands"
    );
    wait_warm(&s, &repo, 2).await;

    // Shrinking the pool stops the surplus; the claimed workspace is the session's and stays.
    let set = s
        .req(Method::PUT, &format!("/api/repos/{repo}/warm-pool"))
        .bearer(&s.admin_token)
        .json(&json!({ "size": 0 }))
        .send()
        .await;
    assert_eq!(set.status, StatusCode::OK);
    wait_warm(&s, &repo, 0).await;
    // The drained workspaces stop right after they leave the pool.
    let mounted = || {
        std::fs::read_dir(s.dir.path().join("data/workspaces"))
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name().to_string_lossy().starts_with("w-")
                    && e.path().join("rootfs").exists()
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while mounted() != 1 {
        assert!(
            Instant::now() < deadline,
            "{} pool workspaces still mounted; only the claimed one should be",
            mounted()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(exec(&s, id, "echo still-here").await.stdout, "still-here\n");
}

/// A fingerprint of the checkout (every file's path and content, `.git` aside).
const TREE_HASH: &str =
    "find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum";

#[tokio::test]
async fn forks_start_from_identical_trees_and_suspend_resume_keeps_files() {
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/forky", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let parent = created.session.id;
    assert_eq!(
        wait_state(&s, parent, &[SessionState::Ready, SessionState::Failed])
            .await
            .session
            .state,
        SessionState::Ready
    );
    let out = exec(&s, parent, "echo parent-change >> README.md && mkdir -p notes && echo n1 > notes/a.txt && rm .gitignore").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let parent_hash = exec(&s, parent, TREE_HASH).await.stdout;

    for bad in [0, 9] {
        let res = s
            .post(
                &format!("/api/sessions/{parent}/fork"),
                json!({ "count": bad }),
            )
            .send()
            .await;
        res.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    }
    let res = s
        .post(
            &format!("/api/sessions/{parent}/fork"),
            json!({ "count": 2 }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let forks: Vec<Session> = res.parse();
    assert_eq!(forks.len(), 2);
    for f in &forks {
        assert_eq!(f.parent_id, Some(parent));
        assert_eq!(
            f.state,
            SessionState::Ready,
            "{:#?}",
            events(&s, f.id).await
        );
        assert_eq!(
            exec(&s, f.id, TREE_HASH).await.stdout,
            parent_hash,
            "a fork starts from the parent's exact tree"
        );
        let gone = exec(
            &s,
            f.id,
            "test -e .gitignore && echo present || echo deleted",
        )
        .await;
        assert_eq!(
            gone.stdout, "deleted\n",
            "deletions (whiteouts) are copied too"
        );
        assert_eq!(
            exec(&s, f.id, "cat /tmp/service-started").await.stdout,
            "service-up\n",
            "services started in the fork"
        );
    }
    let parent_diff: Diff = s
        .get(&format!("/api/sessions/{parent}/diff"))
        .send()
        .await
        .parse();
    let fork_diff: Diff = s
        .get(&format!("/api/sessions/{}/diff", forks[0].id))
        .send()
        .await
        .parse();
    assert_eq!(fork_diff.files, parent_diff.files);
    exec(&s, forks[0].id, "echo mine > only-fork-0.txt").await;
    assert!(
        exec(&s, parent, "ls only-fork-0.txt 2>&1 || true")
            .await
            .stdout
            .contains("No such file"),
        "forks are independent"
    );
    assert!(
        exec(&s, forks[1].id, "ls only-fork-0.txt 2>&1 || true")
            .await
            .stdout
            .contains("No such file")
    );

    // Suspend ends the processes and keeps the files; resume brings both back.
    let res = s
        .req(Method::POST, &format!("/api/sessions/{parent}/suspend"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_eq!(
        res.parse::<SessionDetail>().session.state,
        SessionState::Suspended
    );
    let refused = s
        .post(
            &format!("/api/sessions/{parent}/exec"),
            json!({ "command": "true" }),
        )
        .send()
        .await;
    refused.assert_error(StatusCode::CONFLICT, "conflict");
    let res = s
        .req(Method::POST, &format!("/api/sessions/{parent}/resume"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_eq!(
        res.parse::<SessionDetail>().session.state,
        SessionState::Ready
    );
    assert_eq!(
        exec(&s, parent, TREE_HASH).await.stdout,
        parent_hash,
        "resume keeps every file"
    );
    assert_eq!(
        exec(&s, parent, "cat /tmp/service-started").await.stdout,
        "service-up\n",
        "services start again"
    );
    let again = s
        .req(Method::POST, &format!("/api/sessions/{parent}/resume"))
        .bearer(&s.admin_token)
        .send()
        .await;
    again.assert_error(StatusCode::CONFLICT, "conflict");
}

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
async fn fifty_session_start_stop_cycles_leave_no_mount_cgroup_or_process() {
    let Some(s) = server().await else { return };
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/cycles", src.path()).await;
    let data = s.dir.path().join("data");
    for i in 0..50 {
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
            SessionState::Ready,
            "cycle {i}"
        );
        let row = tandem_server::db::sessions::workspace(&s.state.db, id)
            .await
            .unwrap()
            .unwrap();
        let (wid, pid) = (row.workspace_id.unwrap(), row.workspace_pid.unwrap());
        let stopped = s
            .req(Method::POST, &format!("/api/sessions/{id}/stop"))
            .bearer(&s.admin_token)
            .send()
            .await;
        assert_eq!(stopped.status, StatusCode::OK, "cycle {i}");
        let dir = data.join("workspaces").join(&wid);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(dir.to_str().unwrap()),
            "cycle {i}: a mount of {wid} is left"
        );
        let cgroups: Vec<_> = ["memory", "pids", "cpu", "unified"]
            .iter()
            .map(|c| {
                std::path::Path::new("/sys/fs/cgroup")
                    .join(c)
                    .join("tandem")
                    .join(&wid)
            })
            .filter(|p| p.exists())
            .collect();
        assert!(cgroups.is_empty(), "cycle {i}: cgroups left: {cgroups:?}");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "cycle {i}: the workspace's init still runs: {stat}"
        );
        let mut kept: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            ["disk", "disk.img"],
            "cycle {i}: only the archived layer's disk stays (unmounted)"
        );
    }
}

#[tokio::test]
async fn the_cli_runs_commands_shows_diffs_forks_and_stops_sessions() {
    let Some(s) = server().await else { return };
    let src = source_repo(RECIPE);
    let repo = add_repo(&s, "acme/cli", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id.to_string();
    wait_state(&s, created.session.id, &[SessionState::Ready]).await;
    let tandem = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        c.args(args)
            .env("TANDEM_URL", &s.url)
            .env("TANDEM_TOKEN", &s.admin_token);
        c
    };
    let out = tandem(&[
        "exec",
        &id,
        "--",
        "echo out; echo changed >> README.md; echo err >&2; exit 3",
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "the CLI exits with the command's code"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
    let out = tandem(&["session", "diff", &id]).output().await.unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("+changed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = tandem(&["session", "fork", &id, "-n", "1", "--json"])
        .output()
        .await
        .unwrap();
    let forks: Vec<Session> = serde_json::from_slice(&out.stdout).expect("forks as JSON");
    assert_eq!(forks[0].state, SessionState::Ready);
    let out = tandem(&["session", "stop", &id]).output().await.unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("stopped"));
    let out = tandem(&["exec", &id, "--", "true"]).output().await.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no running workspace"));
}

#[tokio::test]
async fn the_agent_serves_shared_terminals() {
    use futures::{SinkExt, StreamExt};
    use tandem_protocol::agent::{PtyControl, PtyOpen};
    use tandem_server::agent::Agent;
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
    let row = tandem_server::db::sessions::workspace(&s.state.db, created.session.id)
        .await
        .unwrap()
        .unwrap();
    let (wid, pid) = (row.workspace_id.unwrap(), row.workspace_pid.unwrap() as i32);
    let ws = s.state.workspaces().unwrap();

    let agent = Agent::new(&ws, wid.as_str(), pid);

    // A terminal two clients share.
    async fn read_until(
        sock: &mut tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>,
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
async fn recipes_set_limits_and_sessions_wait_for_readiness_checks() {
    let Some(s) = server().await else { return };
    // The "service" becomes ready half a second after it starts, in the background.
    let src = source_repo(
        "[workspace]\nstart = [\"(sleep 0.5; touch /tmp/service-ready) > /dev/null 2>&1 &\"]\nready = [\"test -f /tmp/service-ready\"]\n\
         [workspace.limits]\nmemory_mb = 192\npids = 300\n",
    );
    let repo = add_repo(&s, "acme/ready", src.path()).await;
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
    assert_eq!(
        done.session.state,
        SessionState::Ready,
        "{:#?}",
        events(&s, id).await
    );
    assert_eq!(
        exec(&s, id, "test -f /tmp/service-ready && echo ready")
            .await
            .stdout,
        "ready\n",
        "ready only once the check passed"
    );
    let wid = tandem_server::db::sessions::workspace(&s.state.db, id)
        .await
        .unwrap()
        .unwrap()
        .workspace_id
        .unwrap();
    let memory = std::fs::read_to_string(format!(
        "/sys/fs/cgroup/memory/tandem/{wid}/memory.limit_in_bytes"
    ))
    .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/tandem/{wid}/memory.max")))
    .unwrap();
    assert_eq!(
        memory.trim(),
        (192u64 << 20).to_string(),
        "the recipe's memory limit applies"
    );
    let pids = std::fs::read_to_string(format!("/sys/fs/cgroup/pids/tandem/{wid}/pids.max"))
        .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/tandem/{wid}/pids.max")))
        .unwrap();
    assert_eq!(pids.trim(), "300");

    // Out-of-range limits fail the session with a message that names them.
    let bad = source_repo("[workspace]\n[workspace.limits]\nmemory_mb = 1\n");
    let repo = add_repo(&s, "acme/tiny", bad.path()).await;
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
        SessionState::Failed
    );
    assert!(
        events(&s, id).await.iter().any(
            |e| matches!(&e.kind, EventKind::Error { message } if message.contains("memory_mb"))
        )
    );
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

/// A session as the store holds it (created directly, so nothing boots it), moved to `to`
/// with its workspace on `host` (none: a row from before hosts were recorded).
async fn stored_session(
    s: &TestServer,
    repo: RepoId,
    to: &[SessionState],
    host: Option<&str>,
    pid: i64,
) -> SessionId {
    use tandem_server::db;
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
                screen.extend(bytes);
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
    tandem_server::db::servers::register(
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

/// Builds a snapshot of `repo` now; returns it built.
async fn build_snapshot(s: &TestServer, repo: &str) -> Snapshot {
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let snap = wait_built(s, &snap.id.to_string()).await;
    assert_eq!(snap.state, SnapshotState::Ready, "{}", snap.log);
    snap
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

#[tokio::test]
async fn a_snapshot_sessions_keep_failing_to_start_from_is_set_aside_for_the_good_one_before_it() {
    let Some(s) = server().await else { return };
    // The service runs what setup left in the snapshot (ignored by git, so only the snapshot
    // has it): fine in the first snapshot, broken in the second.
    let recipe = |code: u8| {
        format!(
            "[workspace]\nsetup = [\"echo {code} > setup-output.txt\"]\nstart = [\"exit $(cat setup-output.txt)\"]\n"
        )
    };
    let src = source_repo(&recipe(0));
    let repo = add_repo(&s, "acme/breaker", src.path()).await;
    let good = build_snapshot(&s, &repo).await;
    std::fs::write(src.path().join("tandem.toml"), recipe(3)).unwrap();
    git(
        src.path(),
        &["commit", "-qam", "a setup that breaks the service"],
    );
    let bad = build_snapshot(&s, &repo).await;

    let limit = tandem_protocol::limits::SNAPSHOT_BREAKER_FAILURES;
    for n in 1..=limit {
        let d = start_session(&s, &repo).await;
        assert_eq!(d.session.state, SessionState::Failed);
        let snap: Snapshot = s
            .get(&format!("/api/snapshots/{}", bad.id))
            .send()
            .await
            .parse();
        assert_eq!(snap.boot_failures, n);
        assert_eq!(
            snap.quarantined_at.is_some(),
            n == limit,
            "after {n} failed starts"
        );
    }
    // Set aside: the next session starts from the good snapshot before it, synced to the head.
    let d = start_session(&s, &repo).await;
    assert_eq!(d.session.state, SessionState::Ready);
    let evs = events(&s, d.session.id).await;
    let starting = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::BootPhase {
                phase: BootPhase::Starting,
                detail,
                ..
            } => detail.clone(),
            _ => None,
        })
        .unwrap();
    let good_commit = good.commit.clone().unwrap();
    assert!(starting.contains(&good_commit[..12]), "{starting}");
    let head = git(src.path(), &["rev-parse", "HEAD"]);
    let out = exec(&s, d.session.id, "git rev-parse HEAD; cat setup-output.txt").await;
    assert_eq!(out.stdout, format!("{head}\n0\n"));
    // And it is not rebuilt from the same commit, recipe and image: nothing is stale.
    let r: Repo = s.get(&format!("/api/repos/{repo}")).send().await.parse();
    let stale =
        tandem_server::snapshots::staleness(&s.state.db, &s.state.workspaces().unwrap(), &r)
            .await
            .unwrap();
    assert_eq!(stale, None);
    s.post(&format!("/api/sessions/{}/stop", d.session.id), json!({}))
        .send()
        .await;
    // Keeping one snapshot keeps the good one sessions start from (the one set aside does not
    // count), and the set-aside one too (it stops the same build being made again).
    wait_state(&s, d.session.id, &[SessionState::Stopped]).await;
    let collected = tandem_server::snapshots::collect_garbage(
        &s.state.db,
        &s.state.workspaces().unwrap(),
        &r,
        1,
        &[],
    )
    .await
    .unwrap();
    assert!(collected.is_empty(), "collected {collected:?}");
    for snap in [&good, &bad] {
        let now: Snapshot = s
            .get(&format!("/api/snapshots/{}", snap.id))
            .send()
            .await
            .parse();
        assert_eq!(now.state, SnapshotState::Ready);
    }
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
