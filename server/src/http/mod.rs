//! The HTTP boundary: `app(state)` builds the whole router (REST API under `/api`, the web app
//! everywhere else). Each submodule exposes its own `router()`; the API's routes are registered
//! from their OpenAPI annotations ([`crate::openapi::ApiRouter`]), which `GET /api/openapi.json` serves.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tandem_protocol::limits::{MAX_BODY_BYTES, MAX_CONTEXT_BODY_BYTES};
use tower_http::compression::CompressionLayer;
use tower_http::trace::TraceLayer;

use crate::state::AppState;

/// The API's router, over this server's state.
pub(crate) type ApiRouter = crate::openapi::ApiRouter<AppState>;

mod admin;
mod approvals;
mod auth;
mod automations;
mod csrf;
mod extension;
mod github;
mod headers;
mod health;
mod json_errors;
mod links;
mod metrics;
mod oidc;
mod people;
mod prompts;
mod rate;
mod repos;
mod session_workspace;
mod sessions;
mod settings;
mod slack;
mod snapshots;
mod spend;
mod timeout;
mod tokens;
mod web;

/// The whole service. CORS is off: the web app is served from the same origin, and no
/// cross-origin caller is allowed unless a later configuration says so.
pub fn app(state: AppState) -> Router {
    // A request about a session another server hosts is answered there (PostgreSQL only).
    let forward = axum::middleware::from_fn_with_state(state.clone(), crate::cluster::forward);
    let api = ApiRouter::new()
        .merge(health::router())
        .merge(admin::router())
        .merge(approvals::router())
        .merge(auth::router())
        .merge(automations::router())
        .merge(github::router())
        .merge(tokens::router())
        .merge(repos::router())
        .merge(links::router())
        .merge(people::router())
        .merge(oidc::router())
        .merge(extension::router())
        .merge(sessions::router())
        .merge(settings::router())
        .merge(slack::router())
        .merge(snapshots::router())
        .merge(spend::router())
        .merge(
            ApiRouter::new()
                .merge(sessions::hosted_router())
                .merge(links::hosted_router())
                .merge(github::hosted_router())
                .merge(crate::vscode::api_router())
                .route_layer(forward.clone()),
        )
        .finish();
    let api = api
        .fallback(json_errors::no_such_route)
        .layer(axum::middleware::from_fn(timeout::layer))
        // The request's own bound (`body_limit`); extractors take what it lets through.
        .layer(DefaultBodyLimit::max(MAX_CONTEXT_BODY_BYTES))
        .layer(axum::middleware::from_fn(body_limit))
        // Outermost, so it also sees the answers of the layers above.
        .layer(axum::middleware::from_fn(json_errors::layer));
    // Tandem's own pages and API answers carry its security headers; VS Code (a web app of its
    // own, with inline script) does not.
    let own = Router::new()
        .nest("/api", api)
        .merge(extension::download_router())
        .merge(web::router(state.config.web_dir.clone()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            headers::layer,
        ));
    Router::new()
        .merge(own)
        // Prometheus's, with its own bearer token.
        .merge(metrics::router())
        // VS Code, proxied (outside /api: it is a web app of its own, under its base path).
        .merge(crate::vscode::router().route_layer(forward))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            csrf::layer,
        ))
        // A session's VS Code origin is VS Code's, whatever the path.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::vscode::origin::dispatch,
        ))
        .layer(CompressionLayer::new())
        // Spans name the method and path only (a query can carry a share token, `?share=`),
        // with a VS Code ticket cut out of the path.
        .layer(TraceLayer::new_for_http().make_span_with(
            |req: &axum::http::Request<axum::body::Body>| {
                let path = crate::vscode::origin::loggable_path(req.uri().path());
                tracing::debug_span!("request", method = %req.method(), path = %path)
            },
        ))
        .with_state(state)
}

/// Bounds every request's body: [`MAX_BODY_BYTES`], or [`MAX_CONTEXT_BODY_BYTES`] for the two
/// requests that may carry a page's screenshots (a new session, a prompt). A declared length
/// past the bound is refused before anything is read; a body that grows past it fails its read.
async fn body_limit(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = req.uri().path();
    let carries_page = req.method() == axum::http::Method::POST
        && (path == "/sessions"
            || path
                .strip_prefix("/sessions/")
                .and_then(|rest| rest.strip_suffix("/prompts"))
                .is_some_and(|id| !id.contains('/')));
    let max = if carries_page {
        MAX_CONTEXT_BODY_BYTES
    } else {
        MAX_BODY_BYTES
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return crate::Error::TooLarge(format!("the request body is larger than {max} bytes"))
            .into_response();
    }
    let req = req.map(|b| axum::body::Body::new(http_body_util::Limited::new(b, max)));
    next.run(req).await
}
