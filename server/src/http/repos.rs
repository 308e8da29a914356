//! `/api/repos`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use tandem_protocol::{CreateRepo, Repo, RepoId, SetWarmPool};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Error, Result, db, repos};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/repos", get(list).post(create))
        .route("/repos/{id}", get(show))
        .route("/repos/{id}/warm-pool", put(set_warm_pool))
}

fn with_pool(state: &AppState, mut repo: Repo) -> Repo {
    repo.warm_ready = state.pool.ready(repo.id) as i64;
    repo
}

/// Sets how many started workspaces to keep ready; the supervisor fills or drains within a second.
async fn set_warm_pool(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
    Json(req): Json<SetWarmPool>,
) -> Result<Json<Repo>> {
    crate::permissions::repo(&state, &user.0, id).await?;
    super::admin::require_admin(&user)?;
    repos::validate_warm_pool(req.size)?;
    if !db::repos::set_warm_pool(&state.db, id, req.size).await? {
        return Err(Error::NotFound(format!("no repo {id}")));
    }
    Ok(Json(with_pool(&state, repos::get(&state.db, id).await?)))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateRepo>,
) -> Result<(StatusCode, Json<Repo>)> {
    super::admin::require_admin(&user)?;
    Ok((
        StatusCode::CREATED,
        Json(repos::create(&state.db, &user.0, req, &state.settings.local_repo_dirs()).await?),
    ))
}

/// The repos the person may see.
async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Repo>>> {
    Ok(Json(
        crate::permissions::visible_repos(&state, &user.0)
            .await?
            .into_iter()
            .map(|(r, _)| with_pool(&state, r))
            .collect(),
    ))
}

async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<Json<Repo>> {
    let (repo, _) = crate::permissions::repo(&state, &user.0, id).await?;
    Ok(Json(with_pool(&state, repo)))
}
