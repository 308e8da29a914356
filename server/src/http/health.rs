//! `GET /api/health`: unauthenticated liveness plus a database round trip.

use axum::Json;
use axum::extract::State;
use tandem_protocol::Health;
use utoipa_axum::routes;

use super::ApiRouter;
use crate::state::AppState;
use crate::{Result, VERSION};

pub fn router() -> ApiRouter {
    ApiRouter::new().routes(routes!(health))
}

/// Anyone may ask; only signed-in people get the problems' details (they name host paths).
#[utoipa::path(
    get,
    path = "/health",
    tag = "meta",
    operation_id = "health",
    security((), ("bearer_token" = []), ("session_cookie" = [])),
    responses((status = 200, description = "The server and its database answer", body = Health)),
)]
async fn health(
    State(state): State<AppState>,
    user: std::result::Result<crate::identity::auth::CurrentUser, crate::Error>,
) -> Result<Json<Health>> {
    state.db.ping().await?;
    let mut workspaces = crate::availability::health(&state);
    let mut warnings = crate::availability::warnings(&state.config);
    if user.is_err() {
        for p in workspaces.problems.iter_mut().chain(warnings.iter_mut()) {
            p.message = format!("{:?}", p.kind).to_lowercase().replace('_', " ") + " missing";
            p.fix = "sign in to see what to do".into();
        }
    }
    Ok(Json(Health {
        status: "ok".into(),
        version: VERSION.into(),
        database: state.db.backend().as_str().into(),
        workspaces,
        warnings,
    }))
}
