//! API tokens of the signed-in user: create (secret shown once), list, revoke.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use tandem_protocol::{CreateToken, CreatedToken, TokenId, TokenInfo};

use crate::auth::{self, CurrentUser};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{id}", delete(revoke))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateToken>,
) -> Result<(StatusCode, Json<CreatedToken>)> {
    let created =
        auth::create_api_token(&state.db, &user.0, &req.name, req.expires_in_secs).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<TokenInfo>>> {
    Ok(Json(db::tokens::list(&state.db, user.0.id).await?))
}

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
