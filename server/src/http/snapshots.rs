//! `/api/repos/{id}/snapshots` and `/api/snapshots/{id}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::{RepoId, Snapshot, SnapshotId};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Error, Result, db, snapshots};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/repos/{id}/snapshots", get(list).post(build))
        .route("/snapshots/{id}", get(show))
}

/// Starts a build on demand; 202 with the snapshot in state `building`.
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

async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<Json<Vec<Snapshot>>> {
    crate::permissions::repo(&state, &user.0, id).await?;
    Ok(Json(db::snapshots::list(&state.db, id).await?))
}

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
