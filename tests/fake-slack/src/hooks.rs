//! The `response_url`s handed out with interactivity and slash commands
//! (`/actions/…`, `/commands/…`): a post to one is recorded as a `response_url` call and
//! acknowledged. The fake does not turn those posts into messages.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, http::StatusCode};
use serde_json::{Value, json};

use crate::error::Error;
use crate::state::{Call, Shared};

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/actions/{team}/{id}/{secret}", post(respond))
        .route("/commands/{team}/{id}/{secret}", post(respond))
}

async fn respond(
    State(s): State<Arc<Shared>>,
    OriginalUri(uri): OriginalUri,
    body: Bytes,
) -> Response {
    let url = format!("{}{}", s.url, uri.path());
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let answer = s.update(|world| {
        let answer = if !world.response_urls.contains(&url) {
            Err(Error::NotFound)
        } else if parsed.as_ref().is_some_and(Value::is_object) {
            Ok(())
        } else {
            Err(Error::InvalidPayload)
        };
        let recorded = parsed
            .clone()
            .unwrap_or_else(|| Value::String(String::from_utf8_lossy(&body).into_owned()));
        world.calls.push(Call {
            method: "response_url".into(),
            params: json!({ "url": url, "body": recorded }),
            at: SystemTime::now(),
            error: answer.as_ref().err().map(|e| e.code().to_string()),
        });
        answer
    });
    match answer {
        Ok(()) => (StatusCode::OK, Json(json!({ "ok": true }))).into_response(),
        Err(e) => e.into_response(),
    }
}
