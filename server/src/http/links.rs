//! Share links and the live channel: `/api/sessions/{id}/links…`, `/api/links/join`,
//! `/api/sessions/{id}/live`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use tandem_protocol::live::{CreateLink, JoinLink, Joined, MAX_LINK_TTL_SECS, Role, ShareLink};
use tandem_protocol::{SessionId, Timestamp};

use crate::auth::CurrentUser;
use crate::auth::jwt::ShareClaims;
use crate::sessions::access;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms, sessions};

/// Default share-link lifetime: one day.
pub const DEFAULT_LINK_TTL_SECS: i64 = 24 * 3600;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/links", get(list).post(create))
        .route("/sessions/{id}/links/{jti}", delete(revoke))
        .route("/links/join", post(join))
        .route("/sessions/{id}/live", get(crate::live::socket::upgrade))
}

/// Makes a link (owner only): `{role, expires_in?, allow_guests?}` → the link with its token and URL.
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<CreateLink>,
) -> Result<(StatusCode, Json<ShareLink>)> {
    access::require(&state.db, id, &user.0, Role::Owner).await?;
    if req.role == Role::Owner {
        return Err(Error::Invalid(
            "a link gives `viewer` or `driver`; ownership is not shared".into(),
        ));
    }
    let ttl = req.expires_in.unwrap_or(DEFAULT_LINK_TTL_SECS);
    if !(1..=MAX_LINK_TTL_SECS).contains(&ttl) {
        return Err(Error::Invalid(format!(
            "expires_in must be 1 to {MAX_LINK_TTL_SECS} seconds"
        )));
    }
    let now = now_ms();
    let jti = uuid::Uuid::new_v4().simple().to_string();
    let claims = ShareClaims {
        sub: id.to_string(),
        jti: jti.clone(),
        role: req.role,
        guests: req.allow_guests,
        iat: now / 1000,
        exp: now / 1000 + ttl,
        kind: "share".into(),
    };
    let token = state.jwt.issue_share(&claims)?;
    let mut link = ShareLink {
        jti,
        session_id: id,
        role: req.role,
        allow_guests: req.allow_guests,
        created_at: Timestamp(now),
        expires_at: Timestamp((now / 1000 + ttl) * 1000),
        revoked_at: None,
        token: None,
        url: None,
    };
    db::links::insert(state.db.pool(), &link, user.0.id).await?;
    let entry = db::audit::Entry {
        actor_user_id: Some(user.0.id),
        actor_name: &user.0.name,
        action: "link.create",
        target: &id.to_string(),
        detail: serde_json::json!({ "jti": link.jti, "role": req.role, "guests": req.allow_guests, "expires_in": ttl }),
    };
    db::audit::record(state.db.pool(), now, entry).await?;
    // The token rides in the fragment: it never reaches a server log or a Referer.
    link.url = Some(format!("{}/join#token={token}", state.public_url()));
    link.token = Some(token);
    Ok((StatusCode::CREATED, Json(link)))
}

async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<ShareLink>>> {
    access::require(&state.db, id, &user.0, Role::Owner).await?;
    Ok(Json(db::links::list(state.db.pool(), id).await?))
}

/// Revokes a link (owner only) and disconnects everyone who came through it.
async fn revoke(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, jti)): Path<(SessionId, String)>,
) -> Result<StatusCode> {
    access::require(&state.db, id, &user.0, Role::Owner).await?;
    let mut tx = state.db.begin().await?;
    if !db::links::revoke(&mut tx, id, &jti, now_ms()).await? {
        return Err(Error::NotFound(format!(
            "no live link {jti} in this session"
        )));
    }
    tx.commit().await?;
    state.hubs.revoke(id, &jti);
    let entry = db::audit::Entry {
        actor_user_id: Some(user.0.id),
        actor_name: &user.0.name,
        action: "link.revoke",
        target: &id.to_string(),
        detail: serde_json::json!({ "jti": jti }),
    };
    db::audit::record(state.db.pool(), now_ms(), entry).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A signed-in user joins a session with a link's role (kept until the link is revoked).
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
    let own = access::of_user(&state.db, &s, &user.0).await?;
    if own.role >= link.role {
        return Ok(Json(Joined {
            session_id: session,
            role: own.role,
        }));
    }
    db::links::join(
        state.db.pool(),
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
