//! `/api/secrets` and `/api/audit`: admins only.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use tandem_protocol::limits::MAX_LIST;
use tandem_protocol::{AuditEntry, AuditQuery, SecretInfo, SetSecret};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms, secrets};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/secrets", get(list_secrets))
        .route("/secrets/{name}", put(set_secret).delete(delete_secret))
        .route("/audit", get(audit))
}

pub(super) fn require_admin(user: &CurrentUser) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden("only admins may do this".into()))
    }
}

async fn list_secrets(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<SecretInfo>>> {
    require_admin(&user)?;
    Ok(Json(secrets::list(&state.db).await?))
}

/// Stores a secret; its value is never shown again.
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
