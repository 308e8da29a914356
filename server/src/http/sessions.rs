//! `/api/sessions`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use tandem_protocol::{
    ArtifactId, ChildSession, CreateChildren, CreatePrompt, CreateSession, Diff, EditPrompt,
    EventsPage, EventsQuery, ExecRequest, ExecResult, ForkRequest, Prompt, PromptId, Session,
    SessionDetail, SessionFilter, SessionId,
};

use tandem_protocol::agent::{FileQuery, FileView, GitCommitted, GitStatus, WriteFile};
use utoipa_axum::routes;

use super::openapi::{
    ApiRouter, BadGateway, BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, TooMany,
    Unauthorized, Unavailable,
};
use crate::auth::CurrentUser;
use crate::sessions::workspace;
use crate::state::AppState;
use crate::{Error, Result, sessions};
use tandem_protocol::live::Role;

/// What the database answers, wherever the session's workspace runs.
pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show))
        .routes(routes!(events))
}

/// What acts on the session (its workspace, its live hub): answered by the server hosting it
/// (`cluster::forward`).
pub fn hosted_router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(diff))
        .routes(routes!(stop))
        .routes(routes!(suspend))
        .routes(routes!(resume))
        .routes(routes!(fork))
        .routes(routes!(read_file, write_file))
        .routes(routes!(git_status))
        .routes(routes!(git_commit))
        .routes(routes!(submit_prompt))
        .routes(routes!(edit_prompt, withdraw_prompt))
        .routes(routes!(stop_turn))
        .routes(routes!(children, spawn_children))
        .routes(routes!(artifact))
        .routes(routes!(desktop_page))
        .routes(routes!(desktop_open))
        .routes(routes!(crate::desktop::vnc::socket))
}

/// Starts a session on a repo with its first prompt.
#[utoipa::path(
    post,
    path = "/sessions",
    tag = "sessions",
    operation_id = "create_session",
    request_body = CreateSession,
    responses(
        (status = 201, description = "Created: it boots next", body = SessionDetail),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
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

/// Runs a shell command in the session's workspace (owner only).
#[utoipa::path(
    post,
    path = "/sessions/{id}/exec",
    tag = "sessions",
    operation_id = "exec",
    params(("id" = SessionId, Path)),
    request_body = ExecRequest,
    responses(
        (status = 200, description = "What the command did", body = ExecResult),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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

/// The session's changes against the commit it started from.
#[utoipa::path(
    get,
    path = "/sessions/{id}/diff",
    tag = "sessions",
    operation_id = "diff",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The diff", body = Diff),
        BadRequest,
        Unauthorized,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
async fn diff(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Diff>> {
    require_viewer(&state, &user, id).await?;
    let host = state.workspaces()?;
    Ok(Json(workspace::diff(&state.db, &host, id).await?))
}

/// Stops the session: its workspace goes, its diff is kept (owner only).
#[utoipa::path(
    post,
    path = "/sessions/{id}/stop",
    tag = "sessions",
    operation_id = "stop_session",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn stop(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_owner(&state, &user, id).await?;
    crate::commands::stop_session(&state, id, format!("stopped by {}", user.0.name)).await?;
    Ok(Json(sessions::get(&state.db, id).await?))
}

/// The sessions the person may see, newest first.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "sessions",
    operation_id = "list_sessions",
    params(SessionFilter),
    responses(
        (status = 200, description = "The sessions", body = Vec<Session>),
        BadRequest,
        Unauthorized,
        Invalid,
    ),
)]
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

/// The session with its prompts and its model budget.
#[utoipa::path(
    get,
    path = "/sessions/{id}",
    tag = "sessions",
    operation_id = "get_session",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
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

/// A page of the session's event log.
#[utoipa::path(
    get,
    path = "/sessions/{id}/events",
    tag = "sessions",
    operation_id = "list_events",
    params(("id" = SessionId, Path), EventsQuery),
    responses(
        (status = 200, description = "Events after `after`, oldest first", body = EventsPage),
        BadRequest,
        Unauthorized,
        NotFound,
        Invalid,
    ),
)]
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

/// Keeps the workspace on disk with no processes (owner only).
#[utoipa::path(
    post,
    path = "/sessions/{id}/suspend",
    tag = "sessions",
    operation_id = "suspend_session",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
async fn suspend(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionDetail>> {
    require_owner(&state, &user, id).await?;
    crate::commands::suspend_session(&state, id).await?;
    Ok(Json(sessions::get(&state.db, id).await?))
}

/// Starts a suspended workspace again (owner only).
#[utoipa::path(
    post,
    path = "/sessions/{id}/resume",
    tag = "sessions",
    operation_id = "resume_session",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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
#[utoipa::path(
    post,
    path = "/sessions/{id}/fork",
    tag = "sessions",
    operation_id = "fork_session",
    params(("id" = SessionId, Path)),
    request_body = ForkRequest,
    responses(
        (status = 201, description = "The new sessions", body = Vec<Session>),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        TooMany,
        BadGateway,
        Unavailable,
    ),
)]
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

/// A directory's entries or a file's content in the workspace.
#[utoipa::path(
    get,
    path = "/sessions/{id}/files",
    tag = "sessions",
    operation_id = "read_file",
    params(("id" = SessionId, Path), FileQuery),
    responses(
        (status = 200, description = "The directory or file", body = FileView),
        BadRequest,
        Unauthorized,
        NotFound,
        Conflict,
        Invalid,
        BadGateway,
        Unavailable,
    ),
)]
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

/// Writes a file in the workspace (owner only).
#[utoipa::path(
    put,
    path = "/sessions/{id}/files",
    tag = "sessions",
    operation_id = "write_file",
    params(("id" = SessionId, Path), FileQuery),
    request_body = WriteFile,
    responses(
        (status = 204, description = "Written"),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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

/// The checkout's branch, head and changed paths.
#[utoipa::path(
    get,
    path = "/sessions/{id}/git/status",
    tag = "sessions",
    operation_id = "git_status",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The status", body = GitStatus),
        BadRequest,
        Unauthorized,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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
#[utoipa::path(
    post,
    path = "/sessions/{id}/git/commit",
    tag = "sessions",
    operation_id = "git_commit",
    params(("id" = SessionId, Path)),
    request_body = tandem_protocol::GitCommitRequest,
    responses(
        (status = 201, description = "Committed", body = GitCommitted),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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
#[utoipa::path(
    post,
    path = "/sessions/{id}/prompts",
    tag = "sessions",
    operation_id = "submit_prompt",
    params(("id" = SessionId, Path)),
    request_body = CreatePrompt,
    responses(
        (status = 201, description = "The prompt", body = Prompt),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        TooMany,
    ),
)]
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

/// Changes a queued prompt's text (its author only).
#[utoipa::path(
    patch,
    path = "/sessions/{id}/prompts/{prompt}",
    tag = "sessions",
    operation_id = "edit_prompt",
    params(("id" = SessionId, Path), ("prompt" = PromptId, Path)),
    request_body = EditPrompt,
    responses(
        (status = 200, description = "The prompt", body = Prompt),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
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

/// Takes back a queued prompt (its author only).
#[utoipa::path(
    delete,
    path = "/sessions/{id}/prompts/{prompt}",
    tag = "sessions",
    operation_id = "withdraw_prompt",
    params(("id" = SessionId, Path), ("prompt" = PromptId, Path)),
    responses(
        (status = 204, description = "Withdrawn"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
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
#[utoipa::path(
    post,
    path = "/sessions/{id}/turn/stop",
    tag = "sessions",
    operation_id = "stop_turn",
    params(("id" = SessionId, Path)),
    responses(
        (status = 202, description = "The turn is stopping"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
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

/// The session's children the person may see.
#[utoipa::path(
    get,
    path = "/sessions/{id}/children",
    tag = "sessions",
    operation_id = "list_children",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The children", body = Vec<ChildSession>),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
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

/// Starts child sessions with a prompt (drivers; a fork, the owner).
#[utoipa::path(
    post,
    path = "/sessions/{id}/children",
    tag = "sessions",
    operation_id = "spawn_children",
    params(("id" = SessionId, Path)),
    request_body = CreateChildren,
    responses(
        (status = 201, description = "The children", body = Vec<Session>),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        Invalid,
        TooMany,
        BadGateway,
        Unavailable,
    ),
)]
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
#[utoipa::path(
    get,
    path = "/sessions/{id}/artifacts/{artifact}",
    tag = "sessions",
    operation_id = "get_artifact",
    params(("id" = SessionId, Path), ("artifact" = ArtifactId, Path)),
    responses(
        (status = 200, description = "The artifact's bytes, with its own content type",
            content_type = "*/*", body = Vec<u8>),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
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
#[utoipa::path(
    get,
    path = "/sessions/{id}/desktop",
    tag = "sessions",
    operation_id = "get_desktop",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The desktop", body = tandem_protocol::agent::DesktopPage),
        BadRequest,
        Unauthorized,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
async fn desktop_page(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<tandem_protocol::agent::DesktopPage>> {
    crate::permissions::require(&state, id, &user.0, tandem_protocol::live::Role::Viewer).await?;
    Ok(Json(crate::desktop::page(&state, id).await?))
}

/// Shows a URL in the desktop's browser (drivers).
#[utoipa::path(
    post,
    path = "/sessions/{id}/desktop/open",
    tag = "sessions",
    operation_id = "open_in_desktop",
    params(("id" = SessionId, Path)),
    request_body = tandem_protocol::agent::DesktopOpen,
    responses(
        (status = 200, description = "The desktop", body = tandem_protocol::agent::DesktopPage),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
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
