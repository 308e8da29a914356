//! `/api/auth/oidc/{id}` (to the provider) and `/api/auth/oidc/{id}/callback` (back from it).
//! A refused sign-in answers a page that says why and what to do, not JSON: a person's browser
//! lands here.

use axum::extract::{Path, Query, State};
use axum::http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::oidc;
use crate::openapi::RefusalPage;
use crate::state::AppState;
use crate::{Error, Result};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(start))
        .routes(routes!(callback))
}

/// Sends the browser to the OpenID provider, with a flow bound to this browser.
#[utoipa::path(
    get,
    path = "/auth/oidc/{id}",
    tag = "auth",
    operation_id = "oidc_start",
    security(()),
    params(("id" = String, Path, description = "The provider's id in `tandem.toml`")),
    responses(
        (status = 303, description = "To the provider; the flow's cookie is set",
            headers(("location" = String), ("set-cookie" = String))),
        RefusalPage,
    ),
)]
async fn start(
    // Per-address limit first (429 page past it): `http/rate.rs`.
    _limit: super::rate::Limited<super::rate::SignInStarts>,
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(e) = same_site(&state, &id, &headers) {
        return page(&e);
    }
    let p = match oidc::provider(&state, &id) {
        Ok(p) => p,
        Err(e) => return page(&e),
    };
    match oidc::begin(&state, p, &headers).await {
        Ok((url, cookie)) => (
            StatusCode::SEE_OTHER,
            [(LOCATION, url), (SET_COOKIE, cookie)],
        )
            .into_response(),
        Err(e) => page(&e),
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The provider sends the browser back here; signed in, it goes to the web app.
#[utoipa::path(
    get,
    path = "/auth/oidc/{id}/callback",
    tag = "auth",
    operation_id = "oidc_callback",
    security(()),
    params(("id" = String, Path, description = "The provider's id in `tandem.toml`"), Callback),
    responses(
        (status = 303, description = "Signed in: to the web app, with the session cookie",
            headers(("location" = String), ("set-cookie" = String))),
        RefusalPage,
    ),
)]
async fn callback(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let via = format!("oidc:{id}");
    if let Some(e) = same_site(&state, &id, &headers) {
        return page(&e);
    }
    let outcome = signed_in(&state, &id, &headers, q).await;
    match outcome {
        Ok(user) => {
            crate::identity::people::audit_sign_in(
                &state,
                &via,
                Some(&user),
                None,
                serde_json::json!({}),
            )
            .await;
            match super::auth::session_cookie(&state, &user) {
                Ok(c) => {
                    let mut res =
                        (StatusCode::SEE_OTHER, [(LOCATION, "/".to_string())]).into_response();
                    res.headers_mut()
                        .append(SET_COOKIE, c.parse().expect("cookie"));
                    res
                }
                Err(e) => page(&e),
            }
        }
        Err(e) => {
            crate::identity::people::audit_sign_in(
                &state,
                &via,
                None,
                Some(&e.to_string()),
                serde_json::json!({}),
            )
            .await;
            page(&e)
        }
    }
}

async fn signed_in(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    q: Callback,
) -> Result<tandem_protocol::User> {
    let p = oidc::provider(state, id)?;
    if let Some(err) = q.error {
        return Err(Error::Unauthorized(format!(
            "{} did not sign you in: {err}{}",
            p.label,
            q.error_description
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )));
    }
    let (Some(code), Some(st)) = (q.code, q.state) else {
        return Err(Error::BadRequest(
            "the sign-in answer has no code or state; start again".into(),
        ));
    };
    oidc::complete(state, p, headers, &code, &st).await
}

/// The refusal of a start or callback another site of Tandem's domain sent, unless provider
/// `id` itself lives on Tandem's site ([`crate::identity::auth::flow::same_site_refusal`]).
fn same_site(state: &AppState, id: &str, headers: &HeaderMap) -> Option<Error> {
    let issuer = oidc::provider(state, id).ok().map(|p| p.issuer.as_str());
    crate::identity::auth::flow::same_site_refusal(state, headers, issuer)
}

/// A page that says what failed and what to do (GitHub's sign-in shows it too).
pub(crate) fn page(e: &Error) -> Response {
    let status = match e {
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::Conflict(_) | Error::Refused { .. } => StatusCode::CONFLICT,
        Error::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
        Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::BadRequest(_) | Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::UNAUTHORIZED,
    };
    let message = match e {
        // An internal error's text is for the log.
        Error::Internal(m) => {
            tracing::warn!(error = %m, "sign-in failed");
            "something went wrong on the server; try again, and tell an admin if it keeps happening"
                .to_string()
        }
        other => other.to_string(),
    };
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Sign-in refused — Tandem</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#1b1f24}}\
         h1{{font-size:1.4rem}} .why{{background:#fff4f2;border:1px solid #f3c2b8;border-radius:6px;padding:1rem}}</style></head>\
         <body><h1>Sign-in refused</h1><p class=\"why\" id=\"reason\">{}</p>\
         <p><a href=\"/login\">Back to sign in</a></p></body></html>",
        html_escape(&message)
    );
    (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

pub(crate) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
