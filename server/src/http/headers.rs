//! Security headers on everything Tandem's own origin serves: a strict
//! `Content-Security-Policy` (no inline script, WebAssembly allowed, no plugins, framed only by
//! itself, frames only its own VS Code origins, images only from itself: no image fetch carries
//! data to another host) and `X-Content-Type-Options: nosniff`. Whatever
//! an agent or a person writes is rendered by the web app; if a rendering bug let markup
//! through, the policy still runs none of it.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::http::header::{CONTENT_SECURITY_POLICY, X_CONTENT_TYPE_OPTIONS};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;

/// The policy, with `frame-src` naming the sessions' VS Code origins (if VS Code has any).
pub fn policy(app: &AppState) -> String {
    let frames = match app.config.code_url.as_ref() {
        Some(o) => format!("'self' {}", o.wildcard()),
        None => "'self'".into(),
    };
    format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self' ws: wss:; \
         font-src 'self' data:; worker-src 'self' blob:; frame-src {frames}; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
    )
}

/// Middleware: adds the headers unless the handler set its own (artifacts set a stricter one).
pub async fn layer(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    if !h.contains_key(CONTENT_SECURITY_POLICY)
        && let Ok(v) = HeaderValue::from_str(&policy(&app))
    {
        h.insert(CONTENT_SECURITY_POLICY, v);
    }
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    res
}
