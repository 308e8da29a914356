//! The web app: static files from the built site directory, with `index.html` for every other
//! path so the client-side router can take over (`/login`, `/sessions/{id}`, …).

use std::path::PathBuf;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Html;
use axum::routing::get;
use tower_http::services::{ServeDir, ServeFile};

use crate::state::AppState;

pub fn router(web_dir: Option<PathBuf>) -> Router<AppState> {
    match web_dir {
        Some(dir) => {
            let index = ServeFile::new(dir.join("index.html"));
            Router::new().fallback_service(ServeDir::new(dir).fallback(index))
        }
        None => Router::new().fallback(get(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Html(
                    "<!doctype html><title>Tandem</title><h1>Tandem</h1>\
                     <p>The web app is not built. Run <code>cargo xtask up</code>, or pass \
                     <code>--web-dir</code> to <code>tandem serve</code>. The API is at <code>/api</code>.</p>",
                ),
            )
        })),
    }
}
