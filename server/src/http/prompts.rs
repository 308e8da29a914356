//! `/api/sessions/{id}/prompts` and `/turn`: a session's prompt queue — submitting (queued or
//! steering), editing and withdrawing prompts — and stopping the running turn.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::live::Role;
use tandem_protocol::*;
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Conflict, Forbidden, JsonBody, NotFound, TooMany, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, sessions};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(submit_prompt))
        .routes(routes!(edit_prompt, withdraw_prompt))
        .routes(routes!(stop_turn))
}

/// Queues a prompt (`queue`) or hands it to the running turn (`steer`).
#[utoipa::path(
    post,
    path = "/sessions/{id}/prompts",
    tag = "sessions",
    operation_id = "submit_prompt",
    params(("id" = SessionId, Path)),
    request_body = CreatePrompt,
    responses(
        (status = 201, description = "The prompt", body = Prompt),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        TooMany,
    ),
)]
async fn submit_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    body: axum::extract::Request,
) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    // Who may drive is known before a body of up to 8 MiB (a page's context) is read.
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    let req: CreatePrompt =
        match <Json<CreatePrompt> as axum::extract::FromRequest<AppState>>::from_request(
            body, &state,
        )
        .await
        {
            Ok(Json(req)) => req,
            // Its rejection (malformed, unknown fields, too large) as the JSON error layer words it.
            Err(rejection) => return Ok(rejection.into_response()),
        };
    let prompt = crate::commands::submit_prompt(&state, id, user.author(), req).await?;
    Ok((StatusCode::CREATED, Json(prompt)).into_response())
}

/// Changes a queued prompt's text (its author only).
#[utoipa::path(
    patch,
    path = "/sessions/{id}/prompts/{prompt}",
    tag = "sessions",
    operation_id = "edit_prompt",
    params(("id" = SessionId, Path), ("prompt" = PromptId, Path)),
    request_body = EditPrompt,
    responses(
        (status = 200, description = "The prompt", body = Prompt),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn edit_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, prompt)): Path<(SessionId, PromptId)>,
    Json(req): Json<EditPrompt>,
) -> Result<Json<Prompt>> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    Ok(Json(
        sessions::prompts::edit(&state.db, id, prompt, &user.author(), &req.text).await?,
    ))
}

/// Takes back a queued prompt (its author only).
#[utoipa::path(
    delete,
    path = "/sessions/{id}/prompts/{prompt}",
    tag = "sessions",
    operation_id = "withdraw_prompt",
    params(("id" = SessionId, Path), ("prompt" = PromptId, Path)),
    responses(
        (status = 204, description = "Withdrawn"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn withdraw_prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, prompt)): Path<(SessionId, PromptId)>,
) -> Result<StatusCode> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    sessions::prompts::withdraw(&state.db, id, prompt, &user.author()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Stops the running turn: 202 while it ends, 409 when none runs.
#[utoipa::path(
    post,
    path = "/sessions/{id}/turn/stop",
    tag = "sessions",
    operation_id = "stop_turn",
    params(("id" = SessionId, Path)),
    responses(
        (status = 202, description = "The turn is stopping"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn stop_turn(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<StatusCode> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    if crate::commands::stop_turn(&state, id, &user.author()).await? {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(Error::Conflict("no turn of this session is running".into()))
    }
}
