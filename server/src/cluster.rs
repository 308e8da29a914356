//! Several server processes on one PostgreSQL database. Each registers where the others reach
//! it (`advertise_url`, by its server id); a request about a session whose workspace another
//! server's host runs — its terminal, exec, diff, desktop, VS Code, stop — is forwarded to that
//! server (HTTP and WebSocket upgrades), which answers it as if asked directly: the person's
//! credentials travel with the request and are checked there (the database and the JWT key are
//! shared). Which requests those are is the router's knowledge: [`forward`] is a route layer on
//! the routers of such routes (`http::app`), and a VS Code origin's requests go through
//! [`elsewhere`] from `vscode::origin::dispatch`. Reads the database can answer (the session, its
//! events) stay where they arrive.
use std::time::Duration;

use axum::extract::{OriginalUri, RawPathParams, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tandem_protocol::SessionId;

use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Marks a forwarded request: it is answered where it arrives, never forwarded again. Its value
/// is signed with the key the servers share (`jwt.key`), so a client cannot set it to make a
/// server that does not host a session act on it.
pub const FORWARDED: &str = "x-tandem-forwarded";

/// How long a forwarding marker holds (servers' clocks agree to well within it).
const MARKER_WINDOW_SECS: i64 = 60;

/// The marker's value for `method` on `path` at `now` (seconds): `<now>.<signature>`, so a
/// captured marker works for that request only, and only for a minute.
pub fn marker_for(
    jwt: &crate::identity::auth::JwtKeys,
    method: &str,
    path: &str,
    now: i64,
) -> String {
    format!(
        "{now}.{}",
        jwt.sign("cluster-forward", &format!("{method} {path} {now}"))
    )
}

/// Whether `value` is a marker for `method` on `path` made within the window around `now`.
pub fn marker_holds(
    jwt: &crate::identity::auth::JwtKeys,
    method: &str,
    path: &str,
    value: &str,
    now: i64,
) -> bool {
    let Some((at, sig)) = value.split_once('.') else {
        return false;
    };
    let Ok(at) = at.parse::<i64>() else {
        return false;
    };
    (now - at).abs() <= MARKER_WINDOW_SECS
        && jwt.verify_sig("cluster-forward", &format!("{method} {path} {at}"), sig)
}

fn marker(app: &AppState, req: &Request) -> String {
    marker_for(
        &app.jwt,
        req.method().as_str(),
        asked_path(req),
        crate::now_ms() / 1000,
    )
}

/// The path as the client asked it (a nested router sees it without its prefix).
fn asked_path(req: &Request) -> &str {
    req.extensions()
        .get::<OriginalUri>()
        .map_or(req.uri().path(), |u| u.0.path())
}

/// Whether `req` was forwarded by a server sharing this one's key.
fn forwarded(app: &AppState, req: &Request) -> bool {
    req.headers()
        .get(FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            marker_holds(
                &app.jwt,
                req.method().as_str(),
                asked_path(req),
                v,
                crate::now_ms() / 1000,
            )
        })
}
/// How often a server renews its registration.
pub const REFRESH: Duration = Duration::from_secs(30);
/// How long forwarding may take to reach the other server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the other servers reach this one.
pub fn advertise_url(app: &AppState) -> String {
    app.config
        .advertise_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", app.config.listen))
}

/// Registers this server (whose workspaces' host is `id`) now and every [`REFRESH`].
pub fn register(app: &AppState, id: String) {
    if app.db.backend() == db::Backend::Postgres
        && app.config.advertise_url.is_none()
        && app.config.listen.ip().is_loopback()
    {
        tracing::warn!(
            "on PostgreSQL other servers forward requests about this server's sessions to {}: set advertise_url to an address they reach",
            advertise_url(app)
        );
    }
    let app = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tick.tick().await;
            let url = advertise_url(&app);
            if let Err(e) = db::servers::register(&app.db, &id, &url, now_ms()).await {
                tracing::warn!(error = %e, "registering this server failed");
            }
        }
    });
}

/// Route layer for the routes that act on a session's workspace (its terminal, exec, diff,
/// desktop, VS Code, stop…): `http::app` puts it on exactly those routes, so the router says
/// which they are, and the matched route's `{id}` names the session.
pub async fn forward(
    State(app): State<AppState>,
    params: RawPathParams,
    req: Request,
    next: Next,
) -> Response {
    let id = params
        .iter()
        .find(|(name, _)| *name == "id")
        .and_then(|(_, v)| v.parse::<SessionId>().ok());
    let Some(id) = id else {
        return next.run(req).await;
    };
    match elsewhere(&app, id, req).await {
        Ok(res) => res,
        Err(req) => next.run(req).await,
    }
}

/// Answers `req` (about session `id`) on the server whose host runs its workspace, when that is
/// another server; gives the request back to be answered here otherwise. Only PostgreSQL is
/// shared between hosts (processes on one SQLite file share a host); a request another server
/// forwarded is answered here.
pub async fn elsewhere(
    app: &AppState,
    id: SessionId,
    mut req: Request,
) -> std::result::Result<Response, Request> {
    if app.db.backend() != db::Backend::Postgres || forwarded(app, &req) {
        return Err(req);
    }
    let mine = app.workspaces.get().ok().map(|w| w.host_id.clone());
    let host = match db::sessions::workspace(&app.db, id).await {
        Ok(Some(row)) => row.workspace_host,
        _ => None,
    };
    let Some(host) = host.filter(|h| Some(h) != mine.as_ref()) else {
        return Err(req);
    };
    let url = match db::servers::url(&app.db, &host).await {
        Ok(Some(u)) => u,
        // Never registered (or an error): answer here, which says what is missing.
        _ => return Err(req),
    };
    // Under `/api` the router sees the path without its prefix: forward the one that was asked.
    if let Some(OriginalUri(uri)) = req.extensions().get::<OriginalUri>().cloned() {
        *req.uri_mut() = uri;
    }
    let signed = marker(app, &req);
    Ok(relay(&url, req, signed)
        .await
        .unwrap_or_else(IntoResponse::into_response))
}

/// Sends `req` to the server at `base` (`http://host:port`), marked with `signed`.
async fn relay(base: &str, req: Request, signed: String) -> Result<Response> {
    let authority = base
        .strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
        .ok_or_else(|| Error::Internal(format!("a server registered {base:?}")))?;
    let unreachable = |e: String| {
        Error::Unavailable(format!(
            "the server running this session's workspace ({authority}) is unreachable: {e}"
        ))
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| unreachable("timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let _ = stream.set_nodelay(true);
    crate::proxy::relay(
        TokioIo::new(stream),
        req,
        "the session's server",
        |parts| {
            let value = HeaderValue::from_str(&signed)
                .map_err(|e| Error::Internal(format!("forwarding marker: {e}")))?;
            parts.headers.insert(FORWARDED, value);
            Ok(())
        },
        std::future::pending(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::{marker_for, marker_holds};

    #[test]
    fn a_forwarding_marker_holds_for_its_request_and_its_minute_only() {
        let dir = tempfile::tempdir().unwrap();
        let jwt = crate::identity::auth::JwtKeys::load_or_create(dir.path()).unwrap();
        let path = "/api/sessions/x/exec";
        let m = marker_for(&jwt, "POST", path, 1_000);
        assert!(marker_holds(&jwt, "POST", path, &m, 1_030));
        assert!(
            !marker_holds(&jwt, "GET", path, &m, 1_030),
            "another method"
        );
        assert!(
            !marker_holds(&jwt, "POST", "/api/sessions/y/exec", &m, 1_030),
            "another path"
        );
        assert!(
            !marker_holds(&jwt, "POST", path, &m, 1_100),
            "replayed later"
        );
        let forged = format!("1100.{}", m.split_once('.').unwrap().1);
        assert!(
            !marker_holds(&jwt, "POST", path, &forged, 1_100),
            "a moved timestamp"
        );
        assert!(!marker_holds(&jwt, "POST", path, "garbage", 1_000));
    }
}
