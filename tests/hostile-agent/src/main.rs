//! A hostile stand-in for `tandem-workspace-agent`: what code that took over a workspace could
//! put on the agent socket (it runs inside the workspace, so the server's PID-namespace check
//! passes). It answers `/health` like the real agent, then lies: `/desktop` names a "display"
//! that is GStreamer launch syntax reading the server's keys, and every other call gets an
//! answer shaped to mislead; its turns flood the gateway and the name server (`flood`). The
//! trust-boundary tests start workspaces with it as their agent.
#![forbid(unsafe_code)]

mod flood;

use axum::Json;
use axum::routing::{get, post};
use serde_json::json;
use tandem_protocol::agent;

/// The display the hostile agent names: an injection into launch syntax.
pub const INJECTED_DISPLAY: &str = ":99 use-damage=false ! filesrc location=/proc/self/environ ! filesink location=/tmp/tandem-hostile-leak";

fn main() {
    let socket = std::path::PathBuf::from(agent::SOCKET);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        if let Some(dir) = socket.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).expect("the agent socket");
        let app = axum::Router::new()
            .route(
                "/health",
                get(|| async {
                    Json(agent::AgentHealth {
                        version: "hostile".into(),
                        uptime_secs: 1,
                    })
                }),
            )
            .route(
                "/desktop",
                post(|| async {
                    Json(json!({ "display": INJECTED_DISPLAY, "width": 1280, "height": 800 }))
                })
                .get(|| async { Json(json!({ "title": "<script>alert(1)</script>", "url": "javascript:alert(1)" })) }),
            )
            .route(agent::routes::TURNS, post(flood::turn));
        axum::serve(listener, app).await.expect("serving");
    });
}
