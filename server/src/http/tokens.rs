//! API tokens of the signed-in user: create (secret shown once), list, revoke.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::{CreateToken, CreatedToken, TokenId, TokenInfo};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::{self, CurrentUser};
use crate::openapi::{BadRequest, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

/// A new token of the signed-in person; its secret is shown this once.
#[utoipa::path(
    post,
    path = "/tokens",
    tag = "tokens",
    operation_id = "create_token",
    request_body = CreateToken,
    responses(
        (status = 201, description = "Created, with its secret", body = CreatedToken),
        JsonBody,
        Unauthorized,
        Invalid,
    ),
)]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateToken>,
) -> Result<(StatusCode, Json<CreatedToken>)> {
    let created =
        auth::create_api_token(&state.db, &user.0, &req.name, req.expires_in_secs).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The signed-in person's live tokens (never their secrets).
#[utoipa::path(
    get,
    path = "/tokens",
    tag = "tokens",
    operation_id = "list_tokens",
    responses((status = 200, description = "The tokens", body = Vec<TokenInfo>), Unauthorized),
)]
async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<TokenInfo>>> {
    Ok(Json(db::tokens::list(&state.db, user.0.id).await?))
}

#[utoipa::path(
    delete,
    path = "/tokens/{id}",
    tag = "tokens",
    operation_id = "revoke_token",
    params(("id" = TokenId, Path)),
    responses(
        (status = 204, description = "Revoked"),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn revoke(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<TokenId>,
) -> Result<StatusCode> {
    if db::tokens::revoke(&state.db, user.0.id, id, now_ms()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("no live token {id}")))
    }
}
