//! Forking a live session: its writable layer copied, while it is paused, into each child.

use super::*;

/// Forks a live session into `count` new sessions, each on its own copy of the parent's writable
/// layer (taken while the parent is frozen, so all copies are identical), owned by `author`.
/// N new sessions from copies of session `id`'s workspace as it is now, each with `prompt` queued
/// (if any) for the parent's agent.
pub async fn fork(
    db: &Db,
    host: &Host,
    id: SessionId,
    author: &Author,
    count: i64,
    prompt: Option<String>,
) -> Result<Vec<Session>> {
    if !(1..=tandem_protocol::limits::MAX_FORKS).contains(&count) {
        return Err(Error::Invalid(format!(
            "count must be 1–{}",
            tandem_protocol::limits::MAX_FORKS
        )));
    }
    let LiveWorkspace {
        session: parent,
        id: pwid,
        base_commit: base,
        ..
    } = live_workspace(db, id).await?;
    let row = db::sessions::workspace(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let snapshot: SnapshotId = row
        .snapshot_id
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Conflict("the session has no snapshot".into()))?;
    let repo = db::repos::get(db, parent.repo_id)
        .await?
        .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
    let mut children = Vec::new();
    for i in 1..=count {
        let req = CreateSession {
            repo_id: parent.repo_id,
            prompt: prompt.clone().unwrap_or_default(),
            branch: Some(parent.branch.clone()),
            agent: Some(parent.agent.clone()),
            context: None,
        };
        let title = prompt
            .is_none()
            .then(|| format!("Fork {i}/{count} of “{}”", parent.title));
        children.push(
            crate::sessions::create_with_parent(
                db,
                author.clone(),
                req,
                &parent.agent,
                Some(id),
                title,
            )
            .await?
            .session,
        );
        // Claimed at once (queued → starting): the boot loop, which starts queued sessions,
        // must not start a copy of its own while the parent's layer is being copied.
        let child = children.last().map(|c| c.id).unwrap_or(id);
        let mut tx = db.begin().await?;
        db::sessions::transition_from(
            &mut tx,
            child,
            &[SessionState::Queued],
            SessionState::Starting,
            Some(format!("forked from {id}")),
            crate::now_ms(),
        )
        .await?;
        tx.commit().await?;
    }
    let limits = host.limits(&recipe_at(host, &repo, base.as_deref()).await?.limits)?;
    // Freeze the parent so every copy sees the same instant (where the runtime can: a pod's
    // copies are made while it runs).
    let frozen = host.runtime.freezes();
    if frozen {
        host.runtime.pause(&pwid).await?;
    }
    let copies: Result<Vec<()>> = async {
        let mut done = Vec::new();
        for child in &children {
            host.copy_workspace_layer(&pwid, &workspace_id(child.id), limits)
                .await?;
            done.push(());
        }
        Ok(done)
    }
    .await;
    if frozen {
        host.runtime.resume(&pwid).await?;
    }
    copies?;
    for child in &children {
        let t0 = Instant::now();
        let cid = child.id;
        let wid = workspace_id(cid);
        // Recorded before it starts: a copy that does not start is kept, and resumed from here.
        db::sessions::set_workspace(
            db,
            cid,
            &host.host_id,
            Some(&wid),
            Some(snapshot),
            base.as_deref(),
            None,
        )
        .await?;
        let result = async {
            phase(
                db,
                cid,
                t0,
                BootPhase::Starting,
                Some(format!("copy of session {id}")),
            )
            .await?;
            let init_pid =
                start_on(host, &repo, snapshot, base.as_deref(), &wid, Keep::Upper).await?;
            db::sessions::set_workspace(
                db,
                cid,
                &host.host_id,
                Some(&wid),
                Some(snapshot),
                base.as_deref(),
                Some(init_pid.into()),
            )
            .await?;
            run_start_commands(db, host, &repo, &wid, base.as_deref(), cid, t0).await
        }
        .await;
        match result {
            Ok(()) => became_ready(db, cid, t0).await?,
            // The copy stays, suspended, with the reason in its timeline; the others go on.
            Err(e) => {
                start_failed_keeping(db, host, cid, (&wid, snapshot, base.as_deref()), e).await?;
            }
        }
    }
    let mut out = Vec::new();
    for child in children {
        out.push(
            db::sessions::get(db, child.id)
                .await?
                .ok_or_else(|| Error::Internal("fork vanished".into()))?,
        );
    }
    Ok(out)
}
