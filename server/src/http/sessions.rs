//! `/api/sessions`: the sessions themselves — listing, starting, reading, their event log,
//! stopping, suspending, resuming, forking and their children. What is in a session's workspace
//! is `session_workspace.rs`; its prompt queue, `prompts.rs`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use tandem_protocol::{
    ChildSession, CreateChildren, CreateSession, EventsPage, EventsQuery, ForkRequest, Session,
    SessionDetail, SessionFilter, SessionId,
};

use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{
    BadGateway, BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, TooMany,
    Unauthorized, Unavailable,
};
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
        .routes(routes!(stop))
        .routes(routes!(suspend))
        .routes(routes!(resume))
        .routes(routes!(fork))
        .routes(routes!(children, spawn_children))
        .merge(super::session_workspace::router())
        .merge(super::prompts::router())
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
pub(super) async fn require_owner(
    state: &AppState,
    user: &CurrentUser,
    id: SessionId,
) -> Result<()> {
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
pub(super) async fn require_viewer(
    state: &AppState,
    user: &CurrentUser,
    id: SessionId,
) -> Result<()> {
    crate::permissions::require(state, id, &user.0, Role::Viewer)
        .await
        .map(|_| ())
        .map_err(Error::from)
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
