//! `GET /api/health`: unauthenticated liveness plus a database round trip.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::Health;

use crate::state::AppState;
use crate::{Result, VERSION};

pub fn router() -> Router<AppState> {
    Router::new().route("/health", get(health))
}

async fn health(State(state): State<AppState>) -> Result<Json<Health>> {
    state.db.ping().await?;
    Ok(Json(Health {
        status: "ok".into(),
        version: VERSION.into(),
        database: state.db.backend().as_str().into(),
        workspaces: crate::availability::health(&state),
    }))
}
