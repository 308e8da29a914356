//! Browser sign-in: `POST /api/auth/login` exchanges a one-time login code or an API token for an
//! HttpOnly, SameSite=Strict cookie holding a short-lived JWT; `POST /api/auth/logout` clears it;
//! `GET /api/me` says who is signed in.

use axum::Json;
use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::response::{AppendHeaders, IntoResponse};
use tandem_protocol::limits::{API_TOKEN_PREFIX, BROWSER_LOGIN_TTL_SECS, LOGIN_CODE_PREFIX};
use tandem_protocol::{LoginRequest, User};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::{self, CurrentUser, cookies};
use crate::openapi::{Conflict, JsonBody, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(logout))
        .routes(routes!(accept_invite))
        .routes(routes!(me))
}

/// Exchanges a one-time login code or an API token for the browser's session cookie.
#[utoipa::path(
    post,
    path = "/auth/login",
    tag = "auth",
    operation_id = "login",
    security(()),
    request_body = LoginRequest,
    responses(
        (status = 200, description = "Signed in: the cookie is set", body = User,
            headers(("set-cookie" = String, description = "The session cookie"))),
        JsonBody,
        Unauthorized,
    ),
)]
async fn login(
    State(state): State<AppState>,
    Json(req): Json<LoginRequest>,
) -> Result<impl IntoResponse> {
    let credential = req.credential.trim();
    let signed_in = sign_in_with(&state, credential).await;
    let (user, via) = match signed_in {
        Ok(u) => u,
        Err(e) => {
            crate::identity::people::audit_sign_in(
                &state,
                "login",
                None,
                Some(&e.to_string()),
                serde_json::json!({}),
            )
            .await;
            return Err(e);
        }
    };
    let cookie = session_cookie(&state, &user)?;
    crate::identity::people::audit_sign_in(&state, via, Some(&user), None, serde_json::json!({}))
        .await;
    Ok((AppendHeaders([(SET_COOKIE, cookie)]), Json(user)))
}

/// `POST /api/auth/invite`: a person accepts their invite and is signed in.
#[utoipa::path(
    post,
    path = "/auth/invite",
    tag = "auth",
    operation_id = "accept_invite",
    security(()),
    request_body = tandem_protocol::people::AcceptInvite,
    responses(
        (status = 200, description = "Signed in as the invited person: the cookie is set",
            body = User, headers(("set-cookie" = String, description = "The session cookie"))),
        JsonBody,
        Unauthorized,
        Conflict,
    ),
)]
async fn accept_invite(
    State(state): State<AppState>,
    Json(req): Json<tandem_protocol::people::AcceptInvite>,
) -> Result<impl IntoResponse> {
    let user = match crate::identity::people::accept(&state, &req.code).await {
        Ok(u) => u,
        Err(e) => {
            crate::identity::people::audit_sign_in(
                &state,
                "invite",
                None,
                Some(&e.to_string()),
                serde_json::json!({}),
            )
            .await;
            return Err(e);
        }
    };
    let cookie = session_cookie(&state, &user)?;
    crate::identity::people::audit_sign_in(
        &state,
        "invite",
        Some(&user),
        None,
        serde_json::json!({}),
    )
    .await;
    Ok((AppendHeaders([(SET_COOKIE, cookie)]), Json(user)))
}

/// The browser session cookie for `user` (a fresh short-lived JWT).
pub fn session_cookie(state: &AppState, user: &User) -> Result<String> {
    let jwt = state.jwt.issue(user.id, BROWSER_LOGIN_TTL_SECS)?;
    Ok(cookies::SESSION.set(state, &jwt, BROWSER_LOGIN_TTL_SECS))
}

async fn sign_in_with(state: &AppState, credential: &str) -> Result<(User, &'static str)> {
    Ok(if credential.starts_with(LOGIN_CODE_PREFIX) {
        (
            auth::user_for_login_code(&state.db, credential).await?,
            "login_code",
        )
    } else if credential.starts_with(API_TOKEN_PREFIX) {
        (
            auth::user_for_api_token(&state.db, credential).await?,
            "api_token",
        )
    } else {
        return Err(Error::Unauthorized(format!(
            "expected a login code ({LOGIN_CODE_PREFIX}…) or an API token ({API_TOKEN_PREFIX}…)"
        )));
    })
}

/// Clears the cookie and ends the login on the server too: a copy of the token (another
/// tab's, a stolen one) stops working at once, not at its expiry.
#[utoipa::path(
    post,
    path = "/auth/logout",
    tag = "auth",
    operation_id = "logout",
    security((), ("bearer_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Signed out (an empty object); the cookie is cleared",
            body = Object, headers(("set-cookie" = String, description = "The cleared cookie"))),
    ),
)]
async fn logout(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<impl IntoResponse> {
    let token = cookies::SESSION.read(&state, &headers).or_else(|| {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| !t.starts_with(API_TOKEN_PREFIX))
            .map(str::to_string)
    });
    if let Some(claims) = token.and_then(|t| state.jwt.verify(&t).ok())
        && let Some(jti) = &claims.jti
    {
        db::revoked::revoke(&state.db, jti, claims.exp * 1000, now_ms()).await?;
    }
    Ok((
        AppendHeaders([(SET_COOKIE, cookies::SESSION.clear(&state))]),
        Json(serde_json::json!({})),
    ))
}

/// Who is signed in.
#[utoipa::path(
    get,
    path = "/me",
    tag = "auth",
    operation_id = "me",
    responses((status = 200, description = "The signed-in person", body = User), Unauthorized),
)]
async fn me(user: CurrentUser) -> Json<User> {
    Json(user.0)
}
