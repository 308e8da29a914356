//! The `CurrentUser` extractor: `Authorization: Bearer tdm_…` (API token), `Authorization: Bearer
//! <jwt>` or the session cookie (browser login: `__Host-tandem_session` on an https public URL,
//! `tandem_session` on http; [`super::cookies`]). Anything else is a 401.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use tandem_protocol::limits::API_TOKEN_PREFIX;
use tandem_protocol::{Author, AuthorKind, User, UserId};

use crate::state::AppState;
use crate::{Error, Result, db};

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct CurrentUser(pub User);

impl CurrentUser {
    /// This user as the author of a prompt or action.
    pub fn author(&self) -> Author {
        Author {
            kind: AuthorKind::User,
            user_id: Some(self.0.id),
            name: self.0.name.clone(),
        }
    }
}

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        if let Some(value) = parts.headers.get(AUTHORIZATION) {
            let value = value
                .to_str()
                .map_err(|_| Error::Unauthorized("Authorization header is not ASCII".into()))?;
            let token = value
                .strip_prefix("Bearer ")
                .ok_or_else(|| {
                    Error::Unauthorized("Authorization must be `Bearer <token>`".into())
                })?
                .trim();
            if token.starts_with(API_TOKEN_PREFIX) {
                let (user, scope) =
                    crate::identity::auth::scoped_user_for_api_token(&state.db, token).await?;
                if let Some(scope) = scope {
                    let route = parts
                        .extensions
                        .get::<axum::extract::MatchedPath>()
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default();
                    if !scope_allows(&scope, &parts.method, &route) {
                        return Err(Error::Forbidden(format!(
                            "an {scope} token may start sessions, send prompts and read what its person may see; not {} {route}",
                            parts.method
                        )));
                    }
                }
                return Ok(CurrentUser(user));
            }
            return user_for_jwt(state, token).await.map(CurrentUser);
        }
        if let Some(jwt) = super::cookies::SESSION.read(state, &parts.headers) {
            return user_for_jwt(state, &jwt).await.map(CurrentUser);
        }
        Err(Error::Unauthorized(
            "sign in first: no session cookie or Authorization header".into(),
        ))
    }
}

/// What a scoped token may do: the extension's, start sessions, send prompts, answer approval
/// cards and read sessions, their events, use and repos (whatever its person may see and do in
/// the session; the routes check that).
pub fn scope_allows(scope: &str, method: &axum::http::Method, route: &str) -> bool {
    use axum::http::Method;
    if scope != crate::identity::auth::EXTENSION_SCOPE {
        return false;
    }
    let reads = [
        "/api/me",
        "/api/repos",
        "/api/repos/{id}",
        "/api/sessions",
        "/api/sessions/{id}",
        "/api/sessions/{id}/events",
        "/api/sessions/{id}/pr",
        "/api/sessions/{id}/artifacts/{artifact}",
        "/api/sessions/{id}/spend",
        "/api/extension/rules",
    ];
    // Answering an approval card in the side panel (the route still wants a driver).
    let writes = [
        "/api/sessions",
        "/api/sessions/{id}/prompts",
        "/api/sessions/{id}/approvals/{approval}",
    ];
    (*method == Method::GET && reads.contains(&route))
        || (*method == Method::POST && writes.contains(&route))
}

/// The user a browser login JWT names, fully checked: signature and expiry, not signed out
/// (the revocation list), the user still there and active.
pub(crate) async fn user_for_jwt(state: &AppState, token: &str) -> Result<User> {
    let claims = state.jwt.verify(token)?;
    if let Some(jti) = &claims.jti
        && db::revoked::is_revoked(&state.db, jti).await?
    {
        return Err(Error::Unauthorized(
            "this login was signed out; sign in again".into(),
        ));
    }
    let id: UserId = claims
        .sub
        .parse()
        .map_err(|_| Error::Unauthorized("login token is not valid".into()))?;
    db::users::get(&state.db, id)
        .await?
        .ok_or_else(|| Error::Unauthorized("the login's user no longer exists".into()))
        .and_then(crate::identity::auth::active)
}
