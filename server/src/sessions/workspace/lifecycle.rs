//! Ending and pausing a session's workspace: stop (the diff kept), a workspace that died,
//! suspend (its writable layer kept) and resume.

use super::*;

/// Stops the session: keeps its diff (and its writable layer on disk), removes the workspace.
pub async fn stop(db: &Db, host: &Host, id: SessionId, reason: Option<String>) -> Result<()> {
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    match session.state {
        SessionState::Stopped | SessionState::Failed => {
            return Err(Error::Conflict(format!(
                "session {id} is already {}",
                session.state.as_str()
            )));
        }
        SessionState::Starting => {
            return Err(Error::Conflict(format!(
                "session {id} is starting; stop it once it is ready"
            )));
        }
        _ => {}
    }
    let row = db::sessions::workspace(db, id).await?;
    if let Some(wid) = row.as_ref().and_then(|r| r.workspace_id.clone()) {
        let base = row.and_then(|r| r.base_commit);
        let diff = compute_diff(host, &wid, base.as_deref())
            .await
            .unwrap_or_else(|e| Diff {
                base: base.clone(),
                patch: format!("(the diff could not be computed: {e})"),
                files: vec![],
                truncated: false,
            });
        let file = diff_file(host, id);
        std::fs::create_dir_all(file.parent().unwrap_or(&host.data_dir))?;
        std::fs::write(
            &file,
            serde_json::to_vec(&diff).map_err(|e| Error::Internal(e.to_string()))?,
        )?;
        host.runtime.stop(&wid, Keep::Upper).await?;
        event(
            db,
            id,
            EventKind::WorkspaceStopped {
                diff_bytes: diff.patch.len() as i64,
            },
        )
        .await?;
    }
    transition(db, id, SessionState::Stopped, reason).await?;
    revoke_credential(host, id).await;
    Ok(())
}

/// Revokes an ended session's code-host credential; a failure is retried by a sweep.
pub(super) async fn revoke_credential(host: &Host, id: SessionId) {
    host.credentials.revoke(id).await;
}

/// Marks a session whose workspace died `failed`, and cleans up what is left of it — only if
/// it is still live: the supervisor read its state before looking at the process, and a session
/// stopped (or suspended) in between lost its workspace on purpose.
pub async fn workspace_died(db: &Db, host: &Host, id: SessionId, wid: &str) -> Result<()> {
    let message =
        "the workspace stopped unexpectedly (its init process exited); start a new session"
            .to_string();
    // Not live any more (stopped or suspended since the supervisor read it): nothing died.
    let live = db::sessions::get(db, id)
        .await?
        .is_some_and(|s| s.state.is_live());
    if !live {
        return Ok(());
    }
    // What is left of it goes before the session says it failed.
    let _ = host.runtime.stop(wid, Keep::Upper).await;
    let mut tx = db.begin().await?;
    db::events::append(
        &mut tx,
        id,
        now_ms(),
        EventKind::Error {
            message: message.clone(),
        },
    )
    .await?;
    let was = db::sessions::transition_from(
        &mut tx,
        id,
        &SessionState::LIVE,
        SessionState::Failed,
        Some(message),
        now_ms(),
    )
    .await?;
    if was.is_none() {
        // Not live any more: the transaction (the error with it) is rolled back.
        return Ok(());
    }
    tx.commit().await?;
    revoke_credential(host, id).await;
    Ok(())
}

/// Suspends a live session: its processes end, its writable layer stays for [`resume`].
pub async fn suspend(db: &Db, host: &Host, id: SessionId) -> Result<()> {
    let wid = live_workspace(db, id).await?.id;
    host.runtime.stop(&wid, Keep::Upper).await?;
    let row = db::sessions::workspace(db, id).await?;
    let snapshot = row
        .as_ref()
        .and_then(|r| r.snapshot_id.as_deref())
        .and_then(|s| s.parse().ok());
    let base = row.and_then(|r| r.base_commit);
    db::sessions::set_workspace(
        db,
        id,
        &host.host_id,
        Some(&wid),
        snapshot,
        base.as_deref(),
        None,
    )
    .await?;
    transition(
        db,
        id,
        SessionState::Suspended,
        Some("suspended: processes stopped, files kept".into()),
    )
    .await?;
    Ok(())
}

/// Resumes a suspended session: the same writable layer on the same snapshot, a new process
/// tree, the recipe's `start` commands again.
pub async fn resume(db: &Db, host: &Host, id: SessionId) -> Result<()> {
    let t0 = Instant::now();
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    if session.state != SessionState::Suspended {
        return Err(Error::Conflict(format!(
            "session {id} is {}, not suspended",
            session.state.as_str()
        )));
    }
    let row = db::sessions::workspace(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let (Some(wid), Some(snapshot)) = (
        row.workspace_id.clone(),
        row.snapshot_id.as_deref().and_then(|s| s.parse().ok()),
    ) else {
        return Err(Error::Conflict(format!(
            "session {id} has no kept workspace to resume"
        )));
    };
    transition(db, id, SessionState::Starting, Some("resuming".into())).await?;
    let result = async {
        let repo = db::repos::get(db, session.repo_id)
            .await?
            .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
        phase(
            db,
            id,
            t0,
            BootPhase::Starting,
            Some("resuming the kept workspace".into()),
        )
        .await?;
        let init_pid = start_on(
            host,
            &repo,
            snapshot,
            row.base_commit.as_deref(),
            &wid,
            None,
        )
        .await?;
        db::sessions::set_workspace(
            db,
            id,
            &host.host_id,
            Some(&wid),
            Some(snapshot),
            row.base_commit.as_deref(),
            Some(init_pid.into()),
        )
        .await?;
        run_start_commands(db, host, &repo, &wid, row.base_commit.as_deref(), id, t0).await
    }
    .await;
    finish_start(db, host, id, &wid, t0, result).await
}
