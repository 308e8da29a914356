//! The gateway's tools for the agent: child sessions (spawn, status, prompt, cancel), the
//! session's pull request, and attachments (screenshots and files the agent shows people).

use super::*;

pub(super) async fn spawn_children(
    State(g): State<Gw>,
    Json(req): Json<CreateChildren>,
) -> Result<(StatusCode, Json<Vec<Session>>)> {
    let session = g.session().await?;
    let author = g.author(session).await?;
    g.gate(
        session,
        "spawn_sessions",
        serde_json::json!({ "prompt": req.prompt, "variants": req.variants, "fork": req.fork }),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(
            crate::commands::spawn_children(
                &g.app,
                session,
                author,
                req,
                sessions::children::Asker::Workspace,
            )
            .await?,
        ),
    ))
}

pub(super) async fn child_status(
    State(g): State<Gw>,
    Path(id): Path<SessionId>,
) -> Result<Json<ChildSession>> {
    let session = g.session().await?;
    sessions::children::child_of(&g.app, session, id).await?;
    let all = sessions::children::list(&g.app, session).await?;
    all.into_iter()
        .find(|c| c.session.id == id)
        .map(Json)
        .ok_or_else(|| Error::NotFound("no such child".into()))
}

pub(super) async fn child_prompt(
    State(g): State<Gw>,
    Path(id): Path<SessionId>,
    Json(req): Json<CreatePrompt>,
) -> Result<(StatusCode, Json<Prompt>)> {
    let session = g.session().await?;
    let child = sessions::children::child_of(&g.app, session, id).await?;
    // The child's own agent only: a workspace must not pick a command template.
    if req.agent.as_ref().is_some_and(|a| *a != child.agent) {
        return Err(Error::Forbidden(
            "a session's agent prompts its children with their own agent only".into(),
        ));
    }
    let author = g.author(session).await?;
    // Bounded: a workspace must not fill the store with prompts no one can delete.
    let prompt = crate::commands::submit_child_prompt(&g.app, session, id, author, req).await?;
    Ok((StatusCode::CREATED, Json(prompt)))
}

pub(super) async fn child_cancel(
    State(g): State<Gw>,
    Path(id): Path<SessionId>,
) -> Result<Json<Session>> {
    let session = g.session().await?;
    sessions::children::child_of(&g.app, session, id).await?;
    let author = g.author(session).await?;
    crate::commands::stop_session(
        &g.app,
        id,
        format!("cancelled by its parent's {}", author.name),
    )
    .await?;
    Ok(Json(sessions::get(&g.app.db, id).await?.session))
}

/// The agent's `open_pull_request` tool: as the running prompt's author.
pub(super) async fn pull_request(
    State(g): State<Gw>,
    Json(req): Json<tandem_protocol::github::CreatePr>,
) -> Result<Json<tandem_protocol::github::PullRequest>> {
    let session = g.session().await?;
    // Only while the agent works for someone: the pull request is theirs.
    let author = db::prompts::running(&g.app.db, session)
        .await?
        .map(|p| p.author)
        .ok_or_else(|| {
            Error::Forbidden("a pull request can be opened by the agent only during a turn".into())
        })?;
    g.gate(
        session,
        "open_pull_request",
        serde_json::json!({ "title": req.title, "draft": req.draft }),
    )
    .await?;
    Ok(Json(
        crate::github::pr::open(&g.app, session, &author, req).await?,
    ))
}

/// The agent's `attach_image` tool: the image becomes an artifact of the session (shown in the
/// timeline, linked from the pull request).
pub(super) async fn attachment(
    State(g): State<Gw>,
    Json(req): Json<agent::Attachment>,
) -> Result<(StatusCode, Json<ArtifactInfo>)> {
    use base64::Engine;
    let session = g.session().await?;
    if !matches!(
        req.content_type.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return Err(Error::Invalid(
            "only PNG, JPEG, GIF and WebP images can be attached".into(),
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(req.data.as_bytes())
        .map_err(|_| Error::Invalid("data is not base64".into()))?;
    if bytes.len() > agent::MAX_ATTACHMENT_BYTES {
        return Err(Error::TooLarge(format!(
            "an attachment is at most {} bytes",
            agent::MAX_ATTACHMENT_BYTES
        )));
    }
    // Within what the session and its tree may store (counted in the store: it holds across
    // restarts and a cluster's servers).
    sessions::bounds::check_artifact(&g.app.db, session, req.data.len() as i64).await?;
    {
        let mut all = g
            .app
            .gateways
            .attachments
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (n, total) = all.entry(session).or_default();
        if *n >= MAX_ATTACHMENTS_PER_SESSION
            || *total + bytes.len() > MAX_ATTACHMENT_BYTES_PER_SESSION
        {
            return Err(Error::TooMany(format!(
                "this session stored all the attachments it may ({MAX_ATTACHMENTS_PER_SESSION}, {} MiB)",
                MAX_ATTACHMENT_BYTES_PER_SESSION >> 20
            )));
        }
        *n += 1;
        *total += bytes.len();
    }
    let name: String = req
        .name
        .chars()
        .filter(|c| !c.is_control() && !matches!(c, '/' | '\\'))
        .take(200)
        .collect();
    let name = if name.trim().is_empty() {
        "image".to_string()
    } else {
        name
    };
    let running = db::prompts::running(&g.app.db, session)
        .await?
        .map(|p| p.id);
    let now = crate::now_ms();
    let info = ArtifactInfo {
        id: ArtifactId(uuid::Uuid::new_v4()),
        session_id: session,
        name: name.clone(),
        content_type: req.content_type.clone(),
        size: bytes.len() as i64,
        created_at: Timestamp(now),
    };
    let mut tx = g.app.db.begin().await?;
    db::artifacts::insert(&mut tx, &info, &req.data).await?;
    let kind = EventKind::Attachment {
        prompt_id: running,
        artifact: info.id,
        name,
        content_type: req.content_type,
        size: info.size,
    };
    db::events::append(&mut tx, session, now, kind).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(info)))
}
