//! Many starts and stops, the CLI, recipe limits and readiness, and a snapshot set aside after failed starts.

use super::*;

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
        let row = tandem_store::sessions::workspace(&s.state.db, id)
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

/// Stops and suspends that take a while (many at once) outlast a supervisor tick: the
/// workspace's init is gone before the session says stopped, and that is not a death.
#[tokio::test]
async fn sessions_stopped_and_suspended_together_are_not_taken_for_dead() {
    let Some(s) = server().await else { return };
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/together", src.path()).await;
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(start_session(&s, &repo).await.session.id);
    }
    let verbs = ids.iter().enumerate().map(|(i, id)| {
        let s = &s;
        async move {
            let verb = if i % 2 == 0 { "stop" } else { "suspend" };
            let res = s
                .req(Method::POST, &format!("/api/sessions/{id}/{verb}"))
                .bearer(&s.admin_token)
                .send()
                .await;
            assert_eq!(res.status, StatusCode::OK, "{verb}: {:?}", res.body);
        }
    });
    // The supervisor looks again and again while the verbs run (it looks once a second on its
    // own): each look lands inside some verb's stop.
    let host = s.state.workspaces().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let looks = async {
        let mut n = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            tandem_server::supervisor::look_for_deaths(&s.state, &s.state.db, &host).await;
            n += 1;
            tokio::task::yield_now().await;
        }
        n
    };
    let verbs = async {
        futures::future::join_all(verbs).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    let (looked, ()) = tokio::join!(looks, verbs);
    assert!(looked > 1, "the supervisor looked during the verbs");
    for (i, id) in ids.iter().enumerate() {
        let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        let want = if i % 2 == 0 {
            SessionState::Stopped
        } else {
            SessionState::Suspended
        };
        let errors: Vec<String> = events(&s, *id)
            .await
            .into_iter()
            .filter(|e| e.kind.type_name() == "error")
            .map(|e| format!("{:?}", e.kind))
            .collect();
        assert_eq!(d.session.state, want, "{id}: {errors:?}");
        assert!(errors.is_empty(), "{id} was taken for dead: {errors:?}");
    }
}

/// A workspace still running after its session ended on this host (a stop cut short between
/// the two; a boot that failed before it recorded its workspace) is removed by the sweep — on
/// the second look that finds it so, never the first — with its files kept; a live session's
/// stays, and so does one whose session another server hosted (that server sweeps its own).
#[tokio::test]
async fn a_workspace_left_running_after_its_session_ended_is_swept_on_the_second_look() {
    // The server's own sweep stays off: this test sweeps by hand.
    let Some(s) = crate::workspaces::server(|c| c.orphan_sweep_secs = 0).await else {
        return;
    };
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/swept", src.path()).await;
    let db = &s.state.db;
    let host = s.state.workspaces().unwrap();
    let mut ids = vec![];
    for _ in 0..4 {
        ids.push(start_session(&s, &repo).await.session.id);
    }
    let [stopped, unrecorded, elsewhere, live] = ids[..] else {
        unreachable!()
    };
    let mut workspaces = vec![];
    for id in [stopped, unrecorded, elsewhere, live] {
        let row = tandem_store::sessions::workspace(db, id)
            .await
            .unwrap()
            .unwrap();
        workspaces.push(row.workspace_id.unwrap());
    }
    // A boot that failed after starting its workspace and before recording it.
    tandem_store::sessions::set_workspace(db, unrecorded, &host.host_id, None, None, None, None)
        .await
        .unwrap();
    // A session another server's host ran (a replica on the same cluster).
    tandem_store::sessions::set_host(db, elsewhere, "another-server")
        .await
        .unwrap();
    // The sessions end; their workspaces do not (the server went in between).
    for id in [stopped, unrecorded, elsewhere] {
        let mut tx = db.begin().await.unwrap();
        tandem_store::sessions::transition(
            &mut tx,
            id,
            SessionState::Stopped,
            None,
            tandem_server::now_ms(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let sweeper = tandem_server::supervisor::orphans::Sweeper::default();
    let pool = &s.state.pool;
    let first = sweeper.sweep(db, &host, pool).await.unwrap();
    assert!(first.is_empty(), "the first look only suspects: {first:?}");
    let mut second = sweeper.sweep(db, &host, pool).await.unwrap();
    second.sort();
    let mut expected = vec![workspaces[0].clone(), workspaces[1].clone()];
    expected.sort();
    assert_eq!(second, expected);
    let listed = host.runtime.list().await.unwrap();
    for (w, running) in workspaces.iter().zip([false, false, true, true]) {
        assert_eq!(listed.contains(w), running, "{w}: {listed:?}");
    }
    assert!(
        s.dir
            .path()
            .join("data/workspaces")
            .join(&workspaces[0])
            .exists(),
        "its files are kept, as a stop keeps them"
    );
    assert_eq!(
        exec(&s, live, "echo still-here").await.stdout,
        "still-here\n"
    );
    assert!(sweeper.sweep(db, &host, pool).await.unwrap().is_empty());
    host.runtime
        .stop(&workspaces[2], tandem_host::runtime::Keep::Nothing)
        .await
        .unwrap();
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
    let wid = tandem_store::sessions::workspace(&s.state.db, id)
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

/// A test that ends while its server is starting a workspace leaves nothing of it: the harness
/// lets the runtime's start (or the disk's attach) finish before it removes the data dir's
/// workspaces, then detaches what never got mounted (a container made after that sweep ran on,
/// as the shifted root, over a deleted disk image).
#[test]
fn a_server_dropped_while_a_workspace_starts_leaves_nothing_behind() {
    // The test's own runtime, dropped as a test's is when it ends (its tasks go with it).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some((data, wid)) = rt.block_on(abandon_a_starting_workspace()) else {
        return;
    };
    drop(rt);
    let data = data.to_str().unwrap();
    // Nothing of it runs or is mounted, no runtime client of it is left, and its disk's loop
    // device goes (in the background, once its last user has exited; one that was attached
    // and never mounted would stay for good).
    let left = || {
        let mut left: Vec<String> = crate::harness::workspace_processes_of(Path::new(data))
            .iter()
            .map(|p| format!("process {p}"))
            .collect();
        for p in std::fs::read_dir("/proc").unwrap().flatten() {
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&wid) {
                left.push(format!("process {:?}", p.file_name()));
            }
        }
        for d in std::fs::read_dir("/sys/block").unwrap().flatten() {
            let file = std::fs::read_to_string(d.path().join("loop/backing_file"));
            if file.as_deref().is_ok_and(|f| f.starts_with(data)) {
                left.push(format!("loop device {:?}", d.file_name()));
            }
        }
        if std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(data)
        {
            left.push("a mount".into());
        }
        left
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(left(), Vec::<String>::new(), "left behind");
}

/// Starts a session and drops its server as soon as the workspace's start is under way;
/// returns the data dir and the workspace id.
async fn abandon_a_starting_workspace() -> Option<(std::path::PathBuf, String)> {
    let s = server().await?;
    let src = source_repo("[workspace]\n");
    let repo = add_repo(&s, "acme/abandoned", src.path()).await;
    build_snapshot(&s, &repo).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let data = s.dir.path().join("data");
    let wid = tandem_server::sessions::workspace::workspace_id(created.session.id);
    // A tool works on the session's workspace (its disk, its container): its command line
    // names both.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        cmdline.contains(data.to_str().unwrap()) && cmdline.contains(&wid)
    }) {
        assert!(Instant::now() < deadline, "the workspace never started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(s);
    Some((data, wid))
}
