//! `/api/automations`: prompts a repo runs on a schedule (`crate::automations`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::AutomationId;
use tandem_protocol::automation::{Automation, AutomationRun, CreateAutomation};

use crate::Result;
use crate::auth::CurrentUser;
use crate::automations;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/automations", get(list).post(create))
        .route("/automations/{id}", get(show).delete(delete))
        .route("/automations/{id}/runs", get(runs))
}

async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Automation>>> {
    Ok(Json(automations::list(&state, &user.0).await?))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateAutomation>,
) -> Result<(StatusCode, Json<Automation>)> {
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
