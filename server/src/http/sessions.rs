//! `/api/sessions`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::{
    ArtifactId, ChildSession, CreateChildren, CreatePrompt, CreateSession, Diff, EditPrompt,
    EventsPage, EventsQuery, ExecRequest, ExecResult, ForkRequest, Prompt, PromptId, Session,
    SessionDetail, SessionFilter, SessionId,
};

use tandem_protocol::agent::{FileQuery, FileView, GitCommitted, GitStatus, WriteFile};

use crate::auth::CurrentUser;
use crate::sessions::workspace;
use crate::state::AppState;
use crate::{Error, Result, sessions};
use tandem_protocol::live::Role;

/// What the database answers, wherever the session's workspace runs.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/{id}", get(show))
        .route("/sessions/{id}/events", get(events))
}

/// What acts on the session (its workspace, its live hub): answered by the server hosting it
/// (`cluster::forward`).
pub fn hosted_router() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/exec", post(exec))
        .route("/sessions/{id}/diff", get(diff))
        .route("/sessions/{id}/stop", post(stop))
        .route("/sessions/{id}/suspend", post(suspend))
        .route("/sessions/{id}/resume", post(resume))
        .route("/sessions/{id}/fork", post(fork))
        .route("/sessions/{id}/files", get(read_file).put(write_file))
        .route("/sessions/{id}/git/status", get(git_status))
        .route("/sessions/{id}/git/commit", post(git_commit))
        .route("/sessions/{id}/prompts", post(submit_prompt))
        .route(
            "/sessions/{id}/prompts/{prompt}",
            axum::routing::patch(edit_prompt).delete(withdraw_prompt),
        )
        .route("/sessions/{id}/turn/stop", post(stop_turn))
        .route(
            "/sessions/{id}/children",
            get(children).post(spawn_children),
        )
        .route("/sessions/{id}/artifacts/{artifact}", get(artifact))
        .route("/sessions/{id}/desktop", get(desktop_page))
        .route("/sessions/{id}/desktop/open", post(desktop_open))
        .route("/sessions/{id}/vnc", get(crate::desktop::vnc::socket))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateSession>,
) -> Result<(StatusCode, Json<SessionDetail>)> {
    let new = crate::commands::NewSession::new(req, user.author().kind);
    let detail = crate::commands::create_session(&state, &user.0, new).await?;
    Ok((StatusCode::CREATED, Json(detail)))
}

/// Only the session's author (its owner) or an admin may run commands in its workspace.
async fn require_owner(state: &AppState, user: &CurrentUser, id: SessionId) -> Result<()> {
    match crate::permissions::require(state, id, &user.0, Role::Owner)
        .await
        .map_err(Error::from)
    {
        Ok(_) => Ok(()),
        Err(Error::Forbidden(_)) => Err(Error::Forbidden(
            "only the session's owner may do this".into(),
        )),
        Err(e) => Err(e),
    }
}

/// A person who sees the session (404 for anyone else).
async fn require_viewer(state: &AppState, user: &CurrentUser, id: SessionId) -> Result<()> {
    crate::permissions::require(state, id, &user.0, Role::Viewer)
        .await
        .map(|_| ())
        .map_err(Error::from)
}

async fn exec(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<ExecRequest>,
) -> Result<Json<ExecResult>> {
    require_owner(&state, &user, id).await?;
    let host = state.workspaces()?;
    Ok(Json(
        workspace::exec(&state.db, &host, id, &user.author(), req).await?,
    ))
}

async fn diff(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Diff>> {
    require_viewer(&state, &user, id).await?;
    let host = state.workspaces()?;
    Ok(Json(workspace::diff(&state.db, &host, id).await?))
}

async fn stop(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_owner(&state, &user, id).await?;
    crate::commands::stop_session(&state, id, format!("stopped by {}", user.0.name)).await?;
    Ok(Json(sessions::get(&state.db, id).await?))
}

async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(filter): Query<SessionFilter>,
) -> Result<Json<Vec<Session>>> {
    let scope = crate::permissions::scope(&state, &user.0).await?;
    let mut list = sessions::list(&state.db, filter, scope.as_ref()).await?;
    for s in &mut list {
        s.participants = state.hubs.participants(s.id) as i64;
    }
    Ok(Json(list))
}

async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_viewer(&state, &user, id).await?;
    let mut detail = sessions::get(&state.db, id).await?;
    let budget = sessions::budget::model_budget(
        &state.db,
        state.config.agents.max_model_requests_per_session,
        id,
    )
    .await?;
    (detail.model_requests, detail.model_request_limit) = (budget.used, Some(budget.limit));
    Ok(Json(detail))
}

async fn events(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<EventsPage>> {
    sessions::events_query(&q)?;
    require_viewer(&state, &user, id).await?;
    Ok(Json(sessions::events(&state.db, id, q).await?))
}

async fn suspend(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_owner(&state, &user, id).await?;
    crate::commands::suspend_session(&state, id).await?;
    Ok(Json(sessions::get(&state.db, id).await?))
}

async fn resume(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_owner(&state, &user, id).await?;
    crate::commands::resume_session(&state, id).await?;
    Ok(Json(sessions::get(&state.db, id).await?))
}

/// Only the owner (or an admin) may fork: a fork copies the whole writable layer — shell
/// history, credentials outside `/workspace` — to the forker.
async fn fork(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<ForkRequest>,
) -> Result<(StatusCode, Json<Vec<Session>>)> {
    require_owner(&state, &user, id).await?;
    let forks = crate::commands::fork_session(&state, id, &user.author(), req.count).await?;
    Ok((StatusCode::CREATED, Json(forks)))
}

async fn read_file(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Query(q): Query<FileQuery>,
) -> Result<Json<FileView>> {
    require_viewer(&state, &user, id).await?;
    Ok(Json(
        workspace::read_file(&state.db, &*state.workspaces()?, id, &q.path).await?,
    ))
}

async fn write_file(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Query(q): Query<FileQuery>,
    Json(body): Json<WriteFile>,
) -> Result<StatusCode> {
    require_owner(&state, &user, id).await?;
    workspace::write_file(
        &state.db,
        &*state.workspaces()?,
        id,
        &user.author(),
        &q.path,
        body.content,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn git_status(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<GitStatus>> {
    require_viewer(&state, &user, id).await?;
    Ok(Json(
        workspace::git_status(&state.db, &*state.workspaces()?, id).await?,
    ))
}

/// `{message}` → `{commit}`; owner only.
async fn git_commit(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<tandem_protocol::GitCommitRequest>,
) -> Result<(StatusCode, Json<GitCommitted>)> {
    require_owner(&state, &user, id).await?;
    let author = user.author();
    let identity = crate::github::commit_identity(&state.db, &author).await?;
    let commit = workspace::git_commit(
        &state.db,
        &*state.workspaces()?,
        id,
        &author,
        identity,
        &req.message,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(GitCommitted { commit })))
}

/// Queues a prompt (`queue`) or hands it to the running turn (`steer`).
async fn submit_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    body: axum::extract::Request,
) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    // Who may drive is known before a body of up to 8 MiB (a page's context) is read.
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    let req: CreatePrompt =
        match <Json<CreatePrompt> as axum::extract::FromRequest<AppState>>::from_request(
            body, &state,
        )
        .await
        {
            Ok(Json(req)) => req,
            // Its rejection (malformed, unknown fields, too large) as the JSON error layer words it.
            Err(rejection) => return Ok(rejection.into_response()),
        };
    let prompt = crate::commands::submit_prompt(&state, id, user.author(), req).await?;
    Ok((StatusCode::CREATED, Json(prompt)).into_response())
}

async fn edit_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, prompt)): Path<(SessionId, PromptId)>,
    Json(req): Json<EditPrompt>,
) -> Result<Json<Prompt>> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    Ok(Json(
        sessions::prompts::edit(&state.db, id, prompt, &user.author(), &req.text).await?,
    ))
}

async fn withdraw_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, prompt)): Path<(SessionId, PromptId)>,
) -> Result<StatusCode> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    sessions::prompts::withdraw(&state.db, id, prompt, &user.author()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Stops the running turn: 202 while it ends, 409 when none runs.
async fn stop_turn(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<StatusCode> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    if crate::commands::stop_turn(&state, id, &user.author()).await? {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(Error::Conflict("no turn of this session is running".into()))
    }
}

async fn children(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<ChildSession>>> {
    require_viewer(&state, &user, id).await?;
    // Only the children the person sees (private ones, other repos').
    let mut out = Vec::new();
    for child in sessions::children::list(&state, id).await? {
        if crate::permissions::in_session(&state, &child.session, &user.0)
            .await?
            .is_some()
        {
            out.push(child);
        }
    }
    Ok(Json(out))
}

async fn spawn_children(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<CreateChildren>,
) -> Result<(StatusCode, Json<Vec<Session>>)> {
    // A fork copies the whole writable layer (shell history, credentials): the owner's, as for
    // `/fork`; children on another repo need the person's own right to start sessions there.
    let need = if req.fork { Role::Owner } else { Role::Driver };
    crate::permissions::require(&state, id, &user.0, need).await?;
    if let Some(repo) = req.repo_id {
        match crate::permissions::repo_for_work(&state, &user.0, repo)
            .await
            .map_err(Error::from)
        {
            Err(Error::NotFound(_)) => {
                return Err(Error::Invalid(format!("unknown repo {repo}")));
            }
            other => other?,
        };
    }
    Ok((
        StatusCode::CREATED,
        Json(
            crate::commands::spawn_children(
                &state,
                id,
                user.author(),
                req,
                sessions::children::Asker::Person,
            )
            .await?,
        ),
    ))
}

/// An artifact's whole content, with its content type.
async fn artifact(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, artifact)): Path<(SessionId, ArtifactId)>,
) -> Result<axum::response::Response> {
    require_viewer(&state, &user, id).await?;
    let (info, body) = crate::db::artifacts::get(&state.db, id, artifact)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no artifact {artifact} in this session")))?;
    Ok(super::github::artifact_response(info, body))
}

/// The desktop: whether it runs and what its browser shows.
async fn desktop_page(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<tandem_protocol::agent::DesktopPage>> {
    crate::permissions::require(&state, id, &user.0, tandem_protocol::live::Role::Viewer).await?;
    Ok(Json(crate::desktop::page(&state, id).await?))
}

/// Shows a URL in the desktop's browser (drivers).
async fn desktop_open(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<tandem_protocol::agent::DesktopOpen>,
) -> Result<Json<tandem_protocol::agent::DesktopPage>> {
    crate::permissions::require(&state, id, &user.0, tandem_protocol::live::Role::Driver).await?;
    crate::desktop::open(&state, id, &req.url).await?;
    Ok(Json(crate::desktop::page(&state, id).await?))
}
