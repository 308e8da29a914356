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
    let _down = TakingDown::new(id);
    let row = db::sessions::workspace(db, id).await?;
    if let Some(wid) = row.as_ref().and_then(|r| r.workspace_id.clone()) {
        let base = row.and_then(|r| r.base_commit);
        // A suspended session's diff was kept when it was suspended (nothing runs to compute
        // it now).
        let kept = match session.state {
            SessionState::Suspended => stored_diff(db, id).await?,
            _ => None,
        };
        let diff = match kept {
            Some(kept) => kept,
            None => keep_diff(db, host, id, &wid, base.as_deref()).await?,
        };
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

/// A pod the cluster took away (evicted, its node lost): the session is queued to boot again —
/// from its last kept files if it has them (a suspend, a fork), else its snapshot — and the
/// prompt the loss interrupted (queued again first by its turn) runs again on the new one.
async fn workspace_lost(db: &Db, host: &Host, id: SessionId, wid: &str) -> Result<()> {
    let message = "the workspace's pod went (evicted, or its node was lost): a new one starts from the session's last kept files or its snapshot, and the interrupted prompt runs again; changes since then are lost".to_string();
    // Starting first: no turn claims the session (its prompt waits for the new pod) and the
    // boot loop leaves it alone until what is left of the old pod is gone.
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
        SessionState::Starting,
        Some(message),
        now_ms(),
    )
    .await?;
    if was.is_none() {
        return Ok(());
    }
    tx.commit().await?;
    let _ = host.runtime.stop(wid, Keep::Upper).await;
    let mut tx = db.begin().await?;
    db::sessions::transition_from(
        &mut tx,
        id,
        &[SessionState::Starting],
        SessionState::Queued,
        None,
        now_ms(),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Marks a session whose workspace died `failed`, and cleans up what is left of it — only if
/// it is still live: the supervisor read its state before looking at the process, and a session
/// stopped (or suspended) in between lost its workspace on purpose.
pub async fn workspace_died(db: &Db, host: &Host, id: SessionId, wid: &str) -> Result<()> {
    let message =
        "the workspace stopped unexpectedly (its init process exited); start a new session"
            .to_string();
    // Not live any more (stopped or suspended since the supervisor read it), or being taken
    // down by its own verb: nothing died.
    if taking_down(id) {
        return Ok(());
    }
    let live = db::sessions::get(db, id)
        .await?
        .is_some_and(|s| s.state.is_live());
    if !live {
        return Ok(());
    }
    tracing::warn!(session = %id, "workspace died");
    if host.runtime.taken_away(wid).await {
        return workspace_lost(db, host, id, wid).await;
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

/// A start this server's restart cut short (`wid`: its workspace, if it had one). A resume
/// (the diff kept when it was suspended is still there) is suspended again with its layer, so
/// the person can resume it once more; any other start fails.
pub async fn start_interrupted(
    db: &Db,
    host: &Host,
    id: SessionId,
    wid: Option<&str>,
) -> Result<()> {
    if let Some(wid) = wid {
        let _ = host.runtime.stop(wid, Keep::Upper).await;
    }
    let row = db::sessions::workspace(db, id).await?;
    let snapshot = row
        .as_ref()
        .and_then(|r| r.snapshot_id.as_deref())
        .and_then(|s| s.parse().ok());
    let kept = db::diffs::has(db, id).await?;
    if let (Some(wid), Some(snapshot), true) = (wid, snapshot, kept) {
        let base = row.and_then(|r| r.base_commit);
        db::sessions::set_workspace(
            db,
            id,
            &host.host_id,
            Some(wid),
            Some(snapshot),
            base.as_deref(),
            None,
        )
        .await?;
        transition(
            db,
            id,
            SessionState::Suspended,
            Some("the server restarted while the session was resuming; its files are kept: resume it again".into()),
        )
        .await?;
        return Ok(());
    }
    transition(
        db,
        id,
        SessionState::Failed,
        Some("the server restarted while the workspace was starting; start a new session".into()),
    )
    .await?;
    Ok(())
}

/// Suspends a live session: its processes end, its writable layer stays for [`resume`], and its
/// diff is kept (computed in the workspace, as at a stop) so a suspended session shows its work.
pub async fn suspend(db: &Db, host: &Host, id: SessionId) -> Result<()> {
    let live = live_workspace(db, id).await?;
    let wid = live.id;
    let _down = TakingDown::new(id);
    keep_diff(db, host, id, &wid, live.base_commit.as_deref()).await?;
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
/// tree, the recipe's `start` commands again. A start that fails loses nothing: the session is
/// suspended again with its layer and diff, the timeline says why, and the error (503) says
/// what to do ([`start_failed_keeping`]).
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
    // The claim: of two resumes at once, one starts it.
    let claimed = {
        let mut tx = db.begin().await?;
        let from = db::sessions::transition_from(
            &mut tx,
            id,
            &[SessionState::Suspended],
            SessionState::Starting,
            Some("resuming".into()),
            now_ms(),
        )
        .await?;
        tx.commit().await?;
        from
    };
    if claimed != Some(SessionState::Suspended) {
        return Err(Error::Conflict(format!("session {id} is being resumed")));
    }
    let base = row.base_commit.as_deref();
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
        let init_pid = start_on(host, &repo, snapshot, base, &wid, Keep::Upper).await?;
        db::sessions::set_workspace(
            db,
            id,
            &host.host_id,
            Some(&wid),
            Some(snapshot),
            base,
            Some(init_pid.into()),
        )
        .await?;
        run_start_commands(db, host, &repo, &wid, base, id, t0).await
    }
    .await;
    match result {
        Ok(()) => {
            became_ready(db, id, t0).await?;
            // Live again: its diff is the workspace's own from now on.
            if let Err(e) = db::diffs::forget(db, id).await {
                tracing::warn!(session = %id, error = %e, "a resumed session's kept diff stays");
            }
            Ok(())
        }
        Err(e) => Err(start_failed_keeping(db, host, id, (&wid, snapshot, base), e).await?),
    }
}
