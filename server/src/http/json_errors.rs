//! Every error under `/api` is a JSON `ApiError`. Handlers return them directly; this middleware
//! turns the plain-text rejections of axum's extractors and tower-http's layers (malformed JSON,
//! unknown fields, bodies over the limit, timeouts) into the same shape, keeping their message.

use axum::Json;
use axum::body::Body;
use axum::extract::{OriginalUri, Request};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tandem_protocol::ApiError;

/// Longest plain-text error body kept as the message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The middleware.
pub async fn layer(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    // JSON errors, and the pages a browser lands on (a refused sign-in), stay as they are.
    if is_json {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = match http_body_util::Limited::new(body, MAX_MESSAGE_BYTES)
        .collect()
        .await
    {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut out = (
        status,
        Json(ApiError {
            code: code_for(status).into(),
            message,
        }),
    )
        .into_response();
    // Keep headers such as `Allow` on 405, but not the old body's type or length.
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_input",
        s if s.is_server_error() => "internal",
        _ => "error",
    }
}

/// `/api/...` paths that match no route.
pub async fn no_such_route(OriginalUri(uri): OriginalUri, req: Request<Body>) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(ApiError {
            code: "not_found".into(),
            message: format!("no API route {} {}", req.method(), uri.path()),
        }),
    )
        .into_response()
}
