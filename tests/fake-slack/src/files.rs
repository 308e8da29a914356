//! `files.slack.com` for the files people attach: `GET /files/{id}/{name}` (each file's
//! `url_private`) answers the bytes to the bot token only, and records every fetch.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::api::bearer;
use crate::error::{Error, Result};
use crate::state::{Call, Shared};

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new().route("/files/{id}/{name}", get(download))
}

async fn download(
    State(s): State<Arc<Shared>>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response> {
    let authorized = bearer(&headers) == Some(s.bot_token.as_str());
    let (mimetype, bytes) = s.update(|world| {
        let found = if authorized {
            world
                .files
                .get(&id)
                .filter(|f| f.name == name)
                .map(|f| (f.mimetype.clone(), f.bytes.clone()))
                .ok_or(Error::NotFound)
        } else {
            Err(Error::FileForbidden)
        };
        world.calls.push(Call {
            method: "file_download".into(),
            params: json!({ "file": id, "name": name }),
            at: SystemTime::now(),
            error: found.as_ref().err().map(|e| e.code().to_string()),
        });
        found
    })?;
    Ok(([(CONTENT_TYPE, mimetype)], bytes).into_response())
}
