//! `/api/settings`: the first-run / Settings page (admins only): the model, the default agent,
//! the GitHub App, and a connection test against the model endpoint.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::{ModelTest, Settings, TestModel, UpdateSettings};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/settings", get(show).put(update))
        .route("/settings/model/test", post(test_model))
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

async fn show(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Settings>> {
    require_admin(&user)?;
    view(&state).await
}

/// Changes the given settings; the model ones apply at once (turns waiting for a model start).
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
