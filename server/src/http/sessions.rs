//! `/api/sessions`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::{CreateSession, EventsPage, EventsQuery, Session, SessionDetail, SessionFilter, SessionId};

use crate::auth::CurrentUser;
use crate::state::AppState;
use crate::{Result, sessions};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/{id}", get(show))
        .route("/sessions/{id}/events", get(events))
}

async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateSession>,
) -> Result<(StatusCode, Json<SessionDetail>)> {
    Ok((StatusCode::CREATED, Json(sessions::create(&state.db, user.author(), req).await?)))
}

async fn list(
    State(state): State<AppState>,
    _user: CurrentUser,
    Query(filter): Query<SessionFilter>,
) -> Result<Json<Vec<Session>>> {
    Ok(Json(sessions::list(&state.db, filter).await?))
}

async fn show(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<SessionId>) -> Result<Json<SessionDetail>> {
    Ok(Json(sessions::get(&state.db, id).await?))
}

async fn events(
    State(state): State<AppState>,
    _user: CurrentUser,
    Path(id): Path<SessionId>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<EventsPage>> {
    Ok(Json(sessions::events(&state.db, id, q).await?))
}
