//! `/api/repos/{id}/snapshots` and `/api/snapshots/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::{RepoId, Snapshot, SnapshotId};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Forbidden, NotFound, Unauthorized, Unavailable};
use crate::state::AppState;
use crate::{Error, Result, db, snapshots};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, build))
        .routes(routes!(show))
}

/// Starts a build on demand; 202 with the snapshot in state `building`.
#[utoipa::path(
    post,
    path = "/repos/{id}/snapshots",
    tag = "repos",
    operation_id = "build_snapshot",
    params(("id" = RepoId, Path)),
    responses(
        (status = 202, description = "The build started", body = Snapshot),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Unavailable,
    ),
)]
async fn build(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<(StatusCode, Json<Snapshot>)> {
    let repo = crate::permissions::repo_for_work(&state, &user.0, id).await?;
    let host = state.workspaces()?;
    Ok((
        StatusCode::ACCEPTED,
        Json(snapshots::start_build(&state.db, &host, &repo).await?),
    ))
}

/// The repo's snapshots, newest first.
#[utoipa::path(
    get,
    path = "/repos/{id}/snapshots",
    tag = "repos",
    operation_id = "list_snapshots",
    params(("id" = RepoId, Path)),
    responses(
        (status = 200, description = "The snapshots", body = Vec<Snapshot>),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<Json<Vec<Snapshot>>> {
    crate::permissions::repo(&state, &user.0, id).await?;
    Ok(Json(db::snapshots::list(&state.db, id).await?))
}

#[utoipa::path(
    get,
    path = "/snapshots/{id}",
    tag = "repos",
    operation_id = "get_snapshot",
    params(("id" = SnapshotId, Path)),
    responses(
        (status = 200, description = "The snapshot, with its build log", body = Snapshot),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SnapshotId>,
) -> Result<Json<Snapshot>> {
    let missing = || Error::NotFound(format!("no snapshot {id}"));
    let snapshot = db::snapshots::get(&state.db, id)
        .await?
        .ok_or_else(missing)?;
    // A snapshot of a repo the person may not see does not exist for them.
    match crate::permissions::repo(&state, &user.0, snapshot.repo_id)
        .await
        .map_err(Error::from)
    {
        Ok(_) => Ok(Json(snapshot)),
        Err(Error::NotFound(_)) => Err(missing()),
        Err(e) => Err(e),
    }
}
