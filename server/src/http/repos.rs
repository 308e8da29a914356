//! `/api/repos`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::{CreateRepo, Repo, RepoId, SetWarmPool};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, repos};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show))
        .routes(routes!(set_warm_pool))
}

fn with_pool(state: &AppState, mut repo: Repo) -> Repo {
    repo.warm_ready = state.pool.ready(repo.id) as i64;
    repo
}

/// Sets how many started workspaces to keep ready; the supervisor fills or drains within a second.
#[utoipa::path(
    put,
    path = "/repos/{id}/warm-pool",
    tag = "repos",
    operation_id = "set_warm_pool",
    params(("id" = RepoId, Path)),
    request_body = SetWarmPool,
    responses(
        (status = 200, description = "The repo with its new pool size", body = Repo),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
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

/// Adds a repo (admins).
#[utoipa::path(
    post,
    path = "/repos",
    tag = "repos",
    operation_id = "create_repo",
    request_body = CreateRepo,
    responses(
        (status = 201, description = "Created", body = Repo),
        JsonBody,
        Unauthorized,
        Forbidden,
        Conflict,
        Invalid,
    ),
)]
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
#[utoipa::path(
    get,
    path = "/repos",
    tag = "repos",
    operation_id = "list_repos",
    responses((status = 200, description = "The repos", body = Vec<Repo>), Unauthorized),
)]
async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Repo>>> {
    Ok(Json(
        crate::permissions::visible_repos(&state, &user.0)
            .await?
            .into_iter()
            .map(|(r, _)| with_pool(&state, r))
            .collect(),
    ))
}

#[utoipa::path(
    get,
    path = "/repos/{id}",
    tag = "repos",
    operation_id = "get_repo",
    params(("id" = RepoId, Path)),
    responses(
        (status = 200, description = "The repo", body = Repo),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<Json<Repo>> {
    let (repo, _) = crate::permissions::repo(&state, &user.0, id).await?;
    Ok(Json(with_pool(&state, repo)))
}
