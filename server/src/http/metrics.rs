//! `GET /metrics`: this server's health for Prometheus, in the OpenMetrics text format,
//! for a scraper holding `[telemetry] metrics_token` as its bearer token. Not served without
//! one. Counters are added to as things happen; the gauges below are read at each scrape.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use tandem_protocol::SessionState;

use crate::metrics::{StateLabels, WorkspaceLabels};
use crate::state::AppState;
use crate::{Result, db};

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// The same length whatever the token: comparing digests takes the same time for every
/// wrong guess.
fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    digest(given.as_bytes()) == digest(token.as_bytes())
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let Some(token) = &state.config.telemetry.metrics_token else {
        return Ok((
            StatusCode::NOT_FOUND,
            "/metrics is off: set [telemetry] metrics_token in tandem.toml to serve it\n",
        )
            .into_response());
    };
    if !authorized(&headers, token) {
        return Ok((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "send [telemetry] metrics_token as the bearer token\n",
        )
            .into_response());
    }
    refresh(&state).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response())
}

/// Reads the gauges that are a look at the present.
async fn refresh(state: &AppState) -> Result<()> {
    let m = &state.metrics;
    let counts = db::sessions::count_by_state(&state.db).await?;
    for s in [
        SessionState::Queued,
        SessionState::Starting,
        SessionState::Ready,
        SessionState::Running,
        SessionState::Idle,
        SessionState::Suspended,
        SessionState::Stopped,
        SessionState::Failed,
    ] {
        let n = counts
            .iter()
            .find(|(k, _)| k == s.as_str())
            .map_or(0, |(_, n)| *n);
        m.sessions
            .get_or_create(&StateLabels {
                state: s.as_str().into(),
            })
            .set(n);
    }
    m.prompts_queued
        .set(db::prompts::count_queued(&state.db).await?);
    m.live_members.set(state.hubs.members() as i64);
    m.workspace_memory.clear();
    m.workspace_cpu.clear();
    let live = db::sessions::in_states(
        &state.db,
        &[
            SessionState::Ready,
            SessionState::Running,
            SessionState::Idle,
        ],
    )
    .await?;
    let ids: Vec<_> = live
        .into_iter()
        .filter_map(|w| w.workspace_id.map(|wid| (w.id, wid)))
        .collect();
    let usage = tokio::task::spawn_blocking(move || {
        ids.into_iter()
            .filter_map(|(id, wid)| Some((id, crate::runtime::cgroup_usage::of(&wid)?)))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (id, u) in usage {
        let l = WorkspaceLabels { session: id };
        m.workspace_memory
            .get_or_create(&l)
            .set(u.memory_bytes as i64);
        m.workspace_cpu.get_or_create(&l).set(u.cpu_seconds);
    }
    Ok(())
}
