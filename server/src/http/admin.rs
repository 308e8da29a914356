//! `/api/secrets` and `/api/audit`: admins only.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use tandem_protocol::limits::MAX_LIST;
use tandem_protocol::{AuditEntry, AuditQuery, SecretInfo, SetSecret};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms, secrets};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list_secrets))
        .routes(routes!(set_secret, delete_secret))
        .routes(routes!(audit))
}

pub(super) fn require_admin(user: &CurrentUser) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden("only admins may do this".into()))
    }
}

/// The secrets' names and dates, never their values.
#[utoipa::path(
    get,
    path = "/secrets",
    tag = "admin",
    operation_id = "list_secrets",
    responses(
        (status = 200, description = "The secrets", body = Vec<SecretInfo>),
        Unauthorized,
        Forbidden,
    ),
)]
async fn list_secrets(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<SecretInfo>>> {
    require_admin(&user)?;
    Ok(Json(secrets::list(&state.db).await?))
}

/// Stores a secret; its value is never shown again.
#[utoipa::path(
    put,
    path = "/secrets/{name}",
    tag = "admin",
    operation_id = "set_secret",
    params(("name" = String, Path, description = "The secret's name")),
    request_body = SetSecret,
    responses(
        (status = 204, description = "Stored"),
        Unauthorized,
        Forbidden,
        JsonBody,
        Invalid,
    ),
)]
async fn set_secret(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(name): Path<String>,
    Json(req): Json<SetSecret>,
) -> Result<StatusCode> {
    require_admin(&user)?;
    state.secrets.set(&state.db, &name, &req.value).await?;
    let entry = db::audit::Entry {
        actor_user_id: Some(user.0.id),
        actor_name: &user.0.name,
        action: "secret.set",
        target: &name,
        detail: serde_json::json!({}),
    };
    db::audit::record(&state.db, now_ms(), entry).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    delete,
    path = "/secrets/{name}",
    tag = "admin",
    operation_id = "delete_secret",
    params(("name" = String, Path, description = "The secret's name")),
    responses(
        (status = 204, description = "Deleted"),
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn delete_secret(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    require_admin(&user)?;
    if !db::secrets::delete(&state.db, &name).await? {
        return Err(Error::NotFound(format!("no secret {name:?}")));
    }
    let entry = db::audit::Entry {
        actor_user_id: Some(user.0.id),
        actor_name: &user.0.name,
        action: "secret.delete",
        target: &name,
        detail: serde_json::json!({}),
    };
    db::audit::record(&state.db, now_ms(), entry).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The audit log, newest first; `?session=` narrows it to one session.
#[utoipa::path(
    get,
    path = "/audit",
    tag = "admin",
    operation_id = "audit",
    params(AuditQuery),
    responses(
        (status = 200, description = "Audit entries, newest first", body = Vec<AuditEntry>),
        BadRequest,
        Unauthorized,
        Forbidden,
    ),
)]
async fn audit(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>> {
    require_admin(&user)?;
    let limit = q.limit.unwrap_or(MAX_LIST);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(Error::BadRequest(format!(
            "limit must be between 1 and {MAX_LIST}"
        )));
    }
    let target = q.session.map(|s| s.to_string());
    Ok(Json(
        db::audit::list(&state.db, target.as_deref(), q.before, limit).await?,
    ))
}
