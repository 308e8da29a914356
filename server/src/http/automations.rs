//! `/api/automations`: prompts a repo runs on a schedule (`crate::automations`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::AutomationId;
use tandem_protocol::automation::{Automation, AutomationRun, CreateAutomation, CreatedAutomation};

use crate::Result;
use crate::auth::CurrentUser;
use crate::automations;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/automations", get(list).post(create))
        .route("/automations/{id}", get(show).delete(delete))
        .route("/automations/{id}/runs", get(runs))
        .route("/automations/hooks/{token}", axum::routing::post(hook))
}

/// A webhook call (no sign-in: the URL's secret is the credential).
async fn hook(
    State(state): State<AppState>,
    Path(token): Path<String>,
    Json(body): Json<serde_json::Value>,
) -> Result<(StatusCode, Json<AutomationRun>)> {
    Ok((
        StatusCode::ACCEPTED,
        Json(automations::call(&state, &token, &body).await?),
    ))
}

async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Automation>>> {
    Ok(Json(automations::list(&state, &user.0).await?))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateAutomation>,
) -> Result<(StatusCode, Json<CreatedAutomation>)> {
    Ok((
        StatusCode::CREATED,
        Json(automations::create(&state, &user.0, req).await?),
    ))
}

async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<Json<Automation>> {
    Ok(Json(automations::get(&state, &user.0, id).await?))
}

async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<StatusCode> {
    automations::delete(&state, &user.0, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn runs(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<Json<Vec<AutomationRun>>> {
    Ok(Json(automations::runs(&state, &user.0, id).await?))
}
