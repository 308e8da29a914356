//! `/api/settings`: the first-run / Settings page (admins only): the model, the default agent,
//! the GitHub App, and a connection test against the model endpoint.

use axum::Json;
use axum::extract::State;
use tandem_protocol::{ModelTest, Settings, TestModel, UpdateSettings};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{Conflict, Forbidden, Invalid, JsonBody, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(show, update))
        .routes(routes!(test_model))
}

fn require_admin(user: &CurrentUser) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden("only admins may change settings".into()))
    }
}

async fn view(state: &AppState) -> Result<Json<Settings>> {
    Ok(Json(
        state
            .settings
            .view(
                &state.db,
                state.github.is_some(),
                crate::availability::health(state),
            )
            .await?,
    ))
}

/// The settings the first-run page edits, each with where its value comes from (admins).
#[utoipa::path(
    get,
    path = "/settings",
    tag = "admin",
    operation_id = "get_settings",
    responses(
        (status = 200, description = "The settings", body = Settings),
        Unauthorized,
        Forbidden,
    ),
)]
async fn show(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Settings>> {
    require_admin(&user)?;
    view(&state).await
}

/// Changes the given settings; the model ones apply at once (turns waiting for a model start).
#[utoipa::path(
    put,
    path = "/settings",
    tag = "admin",
    operation_id = "update_settings",
    request_body = UpdateSettings,
    responses(
        (status = 200, description = "The settings as now", body = Settings),
        JsonBody,
        Unauthorized,
        Forbidden,
        Conflict,
        Invalid,
    ),
)]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<UpdateSettings>,
) -> Result<Json<Settings>> {
    require_admin(&user)?;
    let changed = state
        .settings
        .update(&state.db, &state.secrets, req, &user.0.name)
        .await?;
    let entry = db::audit::Entry {
        actor_user_id: Some(user.0.id),
        actor_name: &user.0.name,
        action: "settings.update",
        target: "settings",
        // Names only: values may be keys.
        detail: serde_json::json!({ "changed": changed }),
    };
    db::audit::record(&state.db, now_ms(), entry).await?;
    crate::supervisor::wake_model_waiters(&state);
    view(&state).await
}

/// One real request to the model endpoint with the given (or saved) values.
#[utoipa::path(
    post,
    path = "/settings/model/test",
    tag = "admin",
    operation_id = "test_model",
    request_body = TestModel,
    responses(
        (status = 200, description = "How the endpoint answered (`ok` false when it failed)", body = ModelTest),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
async fn test_model(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<TestModel>,
) -> Result<Json<ModelTest>> {
    require_admin(&user)?;
    Ok(Json(
        state
            .settings
            .test_model(&state.db, &state.secrets, req)
            .await?,
    ))
}
