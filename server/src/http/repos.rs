//! `/api/repos`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::{CreateRepo, Repo, RepoId};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Result, repos};

pub fn router() -> Router<AppState> {
    Router::new().route("/repos", get(list).post(create)).route("/repos/{id}", get(show))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateRepo>,
) -> Result<(StatusCode, Json<Repo>)> {
    Ok((StatusCode::CREATED, Json(repos::create(&state.db, &user, req).await?)))
}

async fn list(State(state): State<AppState>, _user: CurrentUser) -> Result<Json<Vec<Repo>>> {
    Ok(Json(repos::list(&state.db).await?))
}

async fn show(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<RepoId>) -> Result<Json<Repo>> {
    Ok(Json(repos::get(&state.db, id).await?))
}
