//! What the agents cost: `/api/spend/prices` and `/api/spend/budgets` (admins change them),
//! `/api/sessions/{id}/spend` (a session's use against its limits), and `/api/insights` (what
//! the agents got merged and what it cost; CSV at `/api/insights/csv`).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde::Deserialize;
use tandem_protocol::live::Role;
use tandem_protocol::spend::{Budgets, GroupBy, Insights, Prices, SessionSpend};
use tandem_protocol::*;
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(get_prices, put_prices))
        .routes(routes!(get_budgets, put_budgets))
        .routes(routes!(session_spend))
        .routes(routes!(insights))
        .routes(routes!(insights_csv))
}

fn require_admin(user: &CurrentUser) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden(
            "only admins may change prices and budgets".into(),
        ))
    }
}

/// The price of each model, in dollars per million tokens (everyone signed in).
#[utoipa::path(
    get,
    path = "/spend/prices",
    tag = "spend",
    operation_id = "get_prices",
    responses((status = 200, description = "The price table", body = Prices), Unauthorized),
)]
async fn get_prices(State(state): State<AppState>, _user: CurrentUser) -> Result<Json<Prices>> {
    Ok(Json(crate::spend::prices(&state.db).await?))
}

/// Replaces the price table (admins).
#[utoipa::path(
    put,
    path = "/spend/prices",
    tag = "spend",
    operation_id = "put_prices",
    request_body = Prices,
    responses(
        (status = 200, description = "The price table as saved", body = Prices),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
async fn put_prices(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<Prices>,
) -> Result<Json<Prices>> {
    require_admin(&user)?;
    crate::spend::put_prices(&state.db, &req, &user.0.name).await?;
    Ok(Json(req))
}

/// The budgets: per session tree, per person per day, per repo per day, and per repo
/// overrides (everyone signed in).
#[utoipa::path(
    get,
    path = "/spend/budgets",
    tag = "spend",
    operation_id = "get_budgets",
    responses((status = 200, description = "The budgets", body = Budgets), Unauthorized),
)]
async fn get_budgets(State(state): State<AppState>, _user: CurrentUser) -> Result<Json<Budgets>> {
    Ok(Json(crate::spend::budgets(&state.db).await?))
}

/// Replaces the budgets (admins).
#[utoipa::path(
    put,
    path = "/spend/budgets",
    tag = "spend",
    operation_id = "put_budgets",
    request_body = Budgets,
    responses(
        (status = 200, description = "The budgets as saved", body = Budgets),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
async fn put_budgets(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<Budgets>,
) -> Result<Json<Budgets>> {
    require_admin(&user)?;
    crate::spend::put_budgets(&state.db, &req, &user.0.name).await?;
    Ok(Json(req))
}

/// What a session used and every limit it draws on (everyone who sees the session). The
/// person's daily budget shown is the viewer's own when they may prompt it, else the
/// session's author's.
#[utoipa::path(
    get,
    path = "/sessions/{id}/spend",
    tag = "sessions",
    operation_id = "session_spend",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The session's use and limits", body = SessionSpend),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn session_spend(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionSpend>> {
    crate::permissions::require(&state, id, &user.0, Role::Viewer).await?;
    let driver = crate::permissions::require(&state, id, &user.0, Role::Driver)
        .await
        .is_ok();
    let author = crate::sessions::get(&state.db, id).await?.session.author;
    let person = match driver {
        true => Some((user.0.id, user.0.name.clone())),
        false => author.user_id.map(|u| (u, author.name.clone())),
    };
    let who = crate::spend::Whose {
        session: id,
        person: person.as_ref().map(|(u, n)| (*u, n.as_str())),
    };
    Ok(Json(
        crate::spend::session_spend(
            &state.db,
            &who,
            state.config.agents.max_model_requests_per_session,
        )
        .await?,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct InsightsQuery {
    /// Sessions started at or after (ms since 1970); default 30 days before `to`.
    from: Option<i64>,
    /// Sessions started before (ms since 1970); default now.
    to: Option<i64>,
    /// What rows are: repo (default), person, agent, model, surface or day.
    #[serde(default)]
    #[param(value_type = Option<GroupBy>)]
    group_by: GroupBy,
    /// Only this repo (`owner/name`).
    repo: Option<String>,
}

impl InsightsQuery {
    fn query(self) -> crate::insights::Query {
        crate::insights::Query {
            from: self.from,
            to: self.to,
            group_by: self.group_by,
            repo: self.repo,
        }
    }
}

/// Sessions, pull requests opened and merged, review time, tokens, cost, sandbox minutes,
/// tests, retries and approvals, by repo, person, agent, model, surface or day. Admins see
/// every session; anyone else the sessions they started.
#[utoipa::path(
    get,
    path = "/insights",
    tag = "spend",
    operation_id = "insights",
    params(InsightsQuery),
    responses(
        (status = 200, description = "The numbers", body = Insights),
        BadRequest,
        Unauthorized,
        Invalid,
    ),
)]
async fn insights(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<InsightsQuery>,
) -> Result<Json<Insights>> {
    Ok(Json(
        crate::insights::insights(&state.db, &user.0, &q.query()).await?,
    ))
}

/// The same numbers as CSV, a row per key and the total last.
#[utoipa::path(
    get,
    path = "/insights/csv",
    tag = "spend",
    operation_id = "insights_csv",
    params(InsightsQuery),
    responses(
        (status = 200, description = "The numbers as CSV", content_type = "text/csv", body = String),
        BadRequest,
        Unauthorized,
        Invalid,
    ),
)]
async fn insights_csv(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<InsightsQuery>,
) -> Result<impl IntoResponse> {
    let i = crate::insights::insights(&state.db, &user.0, &q.query()).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"tandem-insights.csv\"",
            ),
        ],
        crate::insights::csv(&i),
    ))
}
