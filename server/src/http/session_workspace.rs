//! `/api/sessions/{id}/…` on what is in a session's workspace: commands, the diff, files, git,
//! artifacts and the desktop (answered by the server hosting the workspace).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use tandem_protocol::agent::{FileQuery, FileView, GitCommitted, GitStatus, WriteFile};
use tandem_protocol::*;
use utoipa_axum::routes;

use super::ApiRouter;
use super::sessions::{require_owner, require_viewer};
use crate::identity::auth::CurrentUser;
use crate::openapi::{
    BadGateway, BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, Unauthorized,
    Unavailable,
};
use crate::sessions::workspace;
use crate::state::AppState;
use crate::{Error, Result};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(diff))
        .routes(routes!(read_file, write_file))
        .routes(routes!(git_status))
        .routes(routes!(git_commit))
        .routes(routes!(artifact))
        .routes(routes!(desktop_page))
        .routes(routes!(desktop_open))
        .routes(routes!(crate::desktop::vnc::socket))
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
