//! Snapshot builds through the API: a real git repo, a real workspace running `setup`, the
//! layer kept; a failing `setup` never replaces the last good snapshot.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::{SessionDetail, Snapshot, SnapshotState};

use crate::harness::{Backend, TestServer, Transport, make_repo};

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn commit_recipe(repo: &Path, setup: &[&str]) -> String {
    let list: Vec<String> = setup.iter().map(|s| format!("{s:?}")).collect();
    std::fs::write(
        repo.join("tandem.toml"),
        format!("[workspace]\nsetup = [{}]\n", list.join(", ")),
    )
    .unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", "recipe"]);
    git(repo, &["rev-parse", "HEAD"])
}

pub async fn wait_built(s: &TestServer, id: &str) -> Snapshot {
    wait_built_within(s, id, Duration::from_secs(180)).await
}

/// [`wait_built`], allowing `limit`.
pub async fn wait_built_within(s: &TestServer, id: &str, limit: Duration) -> Snapshot {
    let deadline = Instant::now() + limit;
    loop {
        let snap: Snapshot = s.get(&format!("/api/snapshots/{id}")).send().await.parse();
        if snap.state != SnapshotState::Building {
            return snap;
        }
        assert!(Instant::now() < deadline, "snapshot {id} still building");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn snapshots_build_from_the_repo_and_a_failed_build_keeps_the_last_good_one() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };

    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(src.path().join("README.md"), "hello\n").unwrap();
    let head = commit_recipe(
        src.path(),
        &[
            "echo built-by-setup > built.txt",
            "mkdir -p /root/.cache && echo cached > /root/.cache/dep",
            "git status --short",
        ],
    );
    let repo = s
        .post(
            "/api/repos",
            json!({ "name": "acme/app", "url": src.path().to_str().unwrap() }),
        )
        .send()
        .await;
    assert_eq!(repo.status, StatusCode::CREATED);
    let repo_id = repo.json()["id"].as_str().unwrap().to_string();

    let started = s
        .req(Method::POST, &format!("/api/repos/{repo_id}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        started.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&started.body)
    );
    let started: Snapshot = started.parse();
    assert_eq!(started.state, SnapshotState::Building);
    let good = wait_built(&s, &started.id.to_string()).await;
    assert_eq!(good.state, SnapshotState::Ready, "{}", good.log);
    assert_eq!(good.commit.as_deref(), Some(head.as_str()));
    assert!(
        good.log.contains("$ echo built-by-setup > built.txt"),
        "{}",
        good.log
    );
    assert!(
        good.log.contains("?? built.txt"),
        "setup ran inside the checkout: {}",
        good.log
    );
    assert!(good.size_bytes.unwrap() > 0 && good.build_ms.is_some() && good.recipe_hash.is_some());
    assert!(
        good.image_digest
            .as_deref()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    let layer = s
        .dir
        .path()
        .join("data/snapshots")
        .join(good.id.to_string())
        .join("layer");
    assert_eq!(
        std::fs::read_to_string(layer.join("workspace/built.txt")).unwrap(),
        "built-by-setup\n"
    );
    assert_eq!(
        std::fs::read_to_string(layer.join("root/.cache/dep")).unwrap(),
        "cached\n",
        "setup writes outside the repo are kept"
    );

    // A recipe whose setup fails: recorded with its log, and the good snapshot stays the newest good one.
    commit_recipe(src.path(), &["echo about to fail", "exit 3"]);
    let started: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo_id}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let bad = wait_built(&s, &started.id.to_string()).await;
    assert_eq!(bad.state, SnapshotState::Failed);
    assert!(
        bad.error.as_deref().unwrap().contains("exited with 3"),
        "{:?}",
        bad.error
    );
    assert!(bad.log.contains("about to fail"), "{}", bad.log);
    assert!(
        !s.dir
            .path()
            .join("data/snapshots")
            .join(bad.id.to_string())
            .exists(),
        "a failed layer is removed"
    );
    let list: Vec<Snapshot> = s
        .get(&format!("/api/repos/{repo_id}/snapshots"))
        .send()
        .await
        .parse();
    assert_eq!(
        list.iter().map(|x| x.state).collect::<Vec<_>>(),
        [SnapshotState::Failed, SnapshotState::Ready]
    );
    let latest = tandem_store::snapshots::latest_ready(&s.state.db, good.repo_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.id, good.id);
    // The CLI builds and lists snapshots too.
    let cli = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        c.args(args)
            .env("TANDEM_URL", &s.url)
            .env("TANDEM_TOKEN", &s.admin_token);
        c
    };
    commit_recipe(src.path(), &["echo third"]);
    let out = cli(&["snapshot", "build", "--repo", "acme/app"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ready"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = cli(&["snapshot", "ls", "--repo", "acme/app", "--json"])
        .output()
        .await
        .unwrap();
    let listed: Vec<Snapshot> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed.iter().map(|x| x.state).collect::<Vec<_>>(),
        [
            SnapshotState::Ready,
            SnapshotState::Failed,
            SnapshotState::Ready
        ]
    );

    // No workspace of the builds is left behind.
    let left: Vec<_> = std::fs::read_dir(s.dir.path().join("data/workspaces"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_server_without_workspaces_says_why() {
    let s = TestServer::start(Backend::Sqlite, Transport::Oneshot)
        .await
        .unwrap();
    let repo = make_repo(&s, "acme/web").await;
    let res = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await;
    let msg = res.assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(msg.contains("cannot run workspaces"), "{msg}");
    let missing = s
        .req(
            Method::POST,
            &format!("/api/repos/{}/snapshots", uuid::Uuid::new_v4()),
        )
        .bearer(&s.admin_token)
        .send()
        .await;
    missing.assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn snapshots_rebuild_only_when_something_changed_and_unused_old_ones_are_collected() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let ws = s.state.workspaces().unwrap().clone();
    let db = &s.state.db;
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    commit_recipe(src.path(), &["true"]);
    let repo_id = make_repo_at(&s, "acme/fresh", src.path()).await;
    let repo = tandem_server::repos::get(db, repo_id.parse().unwrap())
        .await
        .unwrap();
    use tandem_server::snapshots::{collect_garbage, rebuild_if_stale, staleness};

    assert_eq!(
        staleness(db, &ws, &repo).await.unwrap().as_deref(),
        Some("there is no snapshot yet")
    );
    let first = wait_built(
        &s,
        &rebuild_if_stale(db, &ws, &repo)
            .await
            .unwrap()
            .expect("a first build")
            .id
            .to_string(),
    )
    .await;
    assert_eq!(first.state, SnapshotState::Ready, "{}", first.log);
    assert_eq!(staleness(db, &ws, &repo).await.unwrap(), None);
    assert!(
        rebuild_if_stale(db, &ws, &repo).await.unwrap().is_none(),
        "nothing changed: no rebuild"
    );

    std::fs::write(src.path().join("more.txt"), "x\n").unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "more"]);
    assert!(
        staleness(db, &ws, &repo)
            .await
            .unwrap()
            .unwrap()
            .contains("main moved to")
    );
    let second = wait_built(
        &s,
        &rebuild_if_stale(db, &ws, &repo)
            .await
            .unwrap()
            .unwrap()
            .id
            .to_string(),
    )
    .await;
    assert_eq!(second.state, SnapshotState::Ready);

    // A session on the second snapshot keeps it alive through garbage collection.
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo_id, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let deadline = Instant::now() + Duration::from_secs(60);
    while tandem_store::sessions::get(db, created.session.id)
        .await
        .unwrap()
        .unwrap()
        .state
        != tandem_protocol::SessionState::Ready
    {
        assert!(Instant::now() < deadline, "session never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    commit_recipe(src.path(), &["echo new recipe"]);
    assert_eq!(
        staleness(db, &ws, &repo)
            .await
            .unwrap()
            .as_deref()
            .map(|r| r.contains("moved")),
        Some(true)
    );
    let third = wait_built(
        &s,
        &rebuild_if_stale(db, &ws, &repo)
            .await
            .unwrap()
            .unwrap()
            .id
            .to_string(),
    )
    .await;
    assert_eq!(third.state, SnapshotState::Ready);

    let collected = collect_garbage(db, &ws, &repo, 1, &[]).await.unwrap();
    assert_eq!(collected, [first.id], "only the unused old snapshot goes");
    let list: Vec<Snapshot> = s
        .get(&format!("/api/repos/{repo_id}/snapshots"))
        .send()
        .await
        .parse();
    let state_of = |id| list.iter().find(|x| x.id == id).unwrap().state;
    assert_eq!(state_of(first.id), SnapshotState::Collected);
    assert_eq!(state_of(second.id), SnapshotState::Ready);
    assert_eq!(state_of(third.id), SnapshotState::Ready);
    assert!(
        !ws.snapshot_kept(first.id) && ws.snapshot_kept(second.id) && ws.snapshot_kept(third.id)
    );
}

async fn make_repo_at(s: &TestServer, name: &str, path: &Path) -> String {
    let res = s
        .post(
            "/api/repos",
            json!({ "name": name, "url": path.to_str().unwrap() }),
        )
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    res.json()["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_snapshot_build_shows_its_log_while_it_runs() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    commit_recipe(src.path(), &["echo step-one", "sleep 3", "echo step-two"]);
    let repo_id = make_repo_at(&s, "acme/slow", src.path()).await;
    let started: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo_id}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let snap: Snapshot = s
            .get(&format!("/api/snapshots/{}", started.id))
            .send()
            .await
            .parse();
        if snap.log.contains("step-one") {
            assert_eq!(
                snap.state,
                SnapshotState::Building,
                "the first step's output shows before the build ends"
            );
            assert!(!snap.log.contains("step-two"));
            break;
        }
        assert!(
            snap.state == SnapshotState::Building && Instant::now() < deadline,
            "no progress in the log: {snap:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = wait_built(&s, &started.id.to_string()).await;
    assert!(done.log.contains("step-two"));
}
