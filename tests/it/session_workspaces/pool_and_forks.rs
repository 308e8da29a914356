//! Warm pools, forks and suspend/resume.

use super::*;

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
    let row = tandem_store::sessions::workspace(&s.state.db, id)
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
