//! How long a request may take before it is answered 408: [`REQUEST_TIMEOUT_SECS`], except the
//! verbs that change a session's workspace, which take what the runtime needs (on a cluster a
//! stop keeps the writable layer in the registry and waits for the pod to go). Those verbs run to
//! their end whatever the caller does (`commands::to_the_end`), so a 408 never cuts one in half.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tandem_protocol::limits::{LIFECYCLE_TIMEOUT_SECS, REQUEST_TIMEOUT_SECS};

/// The verbs under `/sessions/{id}/` that stop, suspend, resume or fork a workspace.
const LIFECYCLE: [&str; 4] = ["stop", "suspend", "resume", "fork"];

/// The bound of a request to `path` (below `/api`).
pub fn bound(method: &Method, path: &str) -> Duration {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let lifecycle = *method == Method::POST
        && matches!(parts.as_slice(), ["sessions", _, verb] if LIFECYCLE.contains(verb));
    Duration::from_secs(if lifecycle {
        LIFECYCLE_TIMEOUT_SECS
    } else {
        REQUEST_TIMEOUT_SECS
    })
}

/// Answers 408 once the request's bound has passed.
pub async fn layer(req: Request, next: Next) -> Response {
    let limit = bound(req.method(), req.uri().path());
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_workspace_verbs_get_the_longer_bound() {
        let long = Duration::from_secs(LIFECYCLE_TIMEOUT_SECS);
        let short = Duration::from_secs(REQUEST_TIMEOUT_SECS);
        assert!(long > short);
        for verb in LIFECYCLE {
            assert_eq!(bound(&Method::POST, &format!("/sessions/7/{verb}")), long);
            assert_eq!(bound(&Method::GET, &format!("/sessions/7/{verb}")), short);
        }
        for path in [
            "/sessions",
            "/sessions/7",
            "/sessions/7/prompts",
            "/sessions/7/stop/more",
            "/repos/stop/fork",
        ] {
            assert_eq!(bound(&Method::POST, path), short, "{path}");
        }
    }
}
