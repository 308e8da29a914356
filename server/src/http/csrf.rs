//! Requests a browser makes with Tandem's cookie must come from Tandem's own pages: a request
//! that changes something (or opens a WebSocket) carrying the cookie and an `Origin` that is
//! neither the address it was sent to nor the public URL is refused. `SameSite=Strict` keeps
//! the cookie off other sites' requests; this covers other origins of the same site (a
//! session's VS Code on a subdomain, say), whose requests do carry it. Bearer tokens are not
//! sent by browsers on their own and need no such check.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Error;
use crate::state::AppState;

/// Middleware: refuses a cookie-authenticated, state-changing request from a foreign origin.
pub async fn layer(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if foreign(&app, &req) {
        return Error::Forbidden(
            "a request with Tandem's sign-in from another origin was refused".into(),
        )
        .into_response();
    }
    next.run(req).await
}

fn foreign(app: &AppState, req: &Request) -> bool {
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && !req.headers().contains_key(header::UPGRADE);
    if reads || !crate::identity::auth::cookies::SESSION.present(app, req.headers()) {
        return false;
    }
    let Some(origin) = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
    else {
        return false;
    };
    let authority = |url: &str| {
        url.split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or("").to_ascii_lowercase())
    };
    let Some(from) = authority(origin) else {
        return true; // `null` and the like
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    host.as_deref() != Some(from.as_str()) && authority(&app.public_url()) != Some(from)
}
