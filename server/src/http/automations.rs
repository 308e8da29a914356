//! `/api/automations`: prompts a repo runs on a schedule (`crate::automations`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::AutomationId;
use tandem_protocol::automation::{Automation, AutomationRun, CreateAutomation, CreatedAutomation};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::Result;
use crate::automations;
use crate::identity::auth::CurrentUser;
use crate::openapi::{
    BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, TooMany, Unauthorized,
};
use crate::state::AppState;

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, delete))
        .routes(routes!(runs))
        .routes(routes!(hook))
}

/// A webhook call (no sign-in: the URL's secret is the credential).
#[utoipa::path(
    post,
    path = "/automations/hooks/{token}",
    tag = "automations",
    operation_id = "call_automation_webhook",
    security(()),
    params(("token" = String, Path, description = "The webhook URL's secret (`tah_…`)")),
    request_body(content = Value, description = "Any JSON; the prompt's `{{body}}` placeholders take its values"),
    responses(
        (status = 202, description = "A run was started (or refused: its `error` says why)", body = AutomationRun),
        JsonBody,
        Unauthorized,
        Conflict,
        TooMany,
    ),
)]
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

#[utoipa::path(
    get,
    path = "/automations",
    tag = "automations",
    operation_id = "list_automations",
    responses(
        (status = 200, description = "The automations of the repos the person sees", body = Vec<Automation>),
        Unauthorized,
    ),
)]
async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Automation>>> {
    Ok(Json(automations::list(&state, &user.0).await?))
}

#[utoipa::path(
    post,
    path = "/automations",
    tag = "automations",
    operation_id = "create_automation",
    request_body = CreateAutomation,
    responses(
        (status = 201, description = "Created; a webhook's URL is shown this once", body = CreatedAutomation),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
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

#[utoipa::path(
    get,
    path = "/automations/{id}",
    tag = "automations",
    operation_id = "get_automation",
    params(("id" = AutomationId, Path)),
    responses(
        (status = 200, description = "The automation", body = Automation),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<Json<Automation>> {
    Ok(Json(automations::get(&state, &user.0, id).await?))
}

#[utoipa::path(
    delete,
    path = "/automations/{id}",
    tag = "automations",
    operation_id = "delete_automation",
    params(("id" = AutomationId, Path)),
    responses(
        (status = 204, description = "Deleted"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<StatusCode> {
    automations::delete(&state, &user.0, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/automations/{id}/runs",
    tag = "automations",
    operation_id = "list_automation_runs",
    params(("id" = AutomationId, Path)),
    responses(
        (status = 200, description = "Its runs, newest first", body = Vec<AutomationRun>),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn runs(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<AutomationId>,
) -> Result<Json<Vec<AutomationRun>>> {
    Ok(Json(automations::runs(&state, &user.0, id).await?))
}
