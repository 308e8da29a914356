//! Share links and the live channel: `/api/sessions/{id}/links…`, `/api/links/join`,
//! `/api/sessions/{id}/live`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::SessionId;
use tandem_protocol::live::{CreateLink, JoinLink, Joined, Role, ShareLink};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::sessions::access;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms, sessions};

pub fn router() -> ApiRouter {
    ApiRouter::new().routes(routes!(join))
}

/// A session's links and live channel: answered by the server hosting the session, whose hub
/// a revocation closes (`cluster::forward`).
pub fn hosted_router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
        .routes(routes!(crate::live::socket::upgrade))
}

/// Makes a link (owner only): `{role, expires_in?, allow_guests?}` → the link with its token and URL.
#[utoipa::path(
    post,
    path = "/sessions/{id}/links",
    tag = "links",
    operation_id = "create_link",
    params(("id" = SessionId, Path)),
    request_body = CreateLink,
    responses(
        (status = 201, description = "The link, with its token and URL (shown this once)", body = ShareLink),
        BadRequest,
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
    Path(id): Path<SessionId>,
    Json(req): Json<CreateLink>,
) -> Result<(StatusCode, Json<ShareLink>)> {
    crate::permissions::require(&state, id, &user.0, Role::Owner).await?;
    let link = crate::commands::create_link(&state, id, &user.0, &req).await?;
    Ok((StatusCode::CREATED, Json(link)))
}

/// The session's links (owner only), without their tokens.
#[utoipa::path(
    get,
    path = "/sessions/{id}/links",
    tag = "links",
    operation_id = "list_links",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The links", body = Vec<ShareLink>),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<ShareLink>>> {
    crate::permissions::require(&state, id, &user.0, Role::Owner).await?;
    Ok(Json(db::links::list(&state.db, id).await?))
}

/// Revokes a link (owner only) and disconnects everyone who came through it.
#[utoipa::path(
    delete,
    path = "/sessions/{id}/links/{jti}",
    tag = "links",
    operation_id = "revoke_link",
    params(("id" = SessionId, Path), ("jti" = String, Path, description = "The link's id")),
    responses(
        (status = 204, description = "Revoked"),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn revoke(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, jti)): Path<(SessionId, String)>,
) -> Result<StatusCode> {
    crate::permissions::require(&state, id, &user.0, Role::Owner).await?;
    crate::commands::revoke_link(&state, id, &jti, &user.0).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A signed-in user joins a session with a link's role (kept until the link is revoked).
#[utoipa::path(
    post,
    path = "/links/join",
    tag = "links",
    operation_id = "join_link",
    request_body = JoinLink,
    responses(
        (status = 200, description = "The session and the role the person now has in it", body = Joined),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn join(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<JoinLink>,
) -> Result<Json<Joined>> {
    let claims = state.jwt.verify_share(&req.token)?;
    let session: SessionId = claims
        .sub
        .parse()
        .map_err(|_| Error::Unauthorized("this share link is not valid".into()))?;
    let s = sessions::get(&state.db, session).await?.session;
    let link = access::link(&state.db, &state.jwt, session, &req.token).await?;
    // Someone who already sees the session with at least the link's role keeps their own; else
    // (a lower role, or a session they would not see: private, or another repo's) they join.
    if let Some(own) = crate::permissions::in_session(&state, &s, &user.0).await?
        && own.role >= link.role
    {
        return Ok(Json(Joined {
            session_id: session,
            role: own.role,
        }));
    }
    db::links::join(
        &state.db,
        session,
        user.0.id,
        link.role,
        &link.jti,
        now_ms(),
    )
    .await?;
    Ok(Json(Joined {
        session_id: session,
        role: link.role,
    }))
}
