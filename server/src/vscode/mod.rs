//! VS Code in the browser: code-server in the session's workspace, reverse-proxied (HTTP and
//! WebSocket upgrades, the prefix stripped, `Host` kept) with Tandem's roles: drivers and the
//! owner use it; viewers get none (a full editor with a terminal cannot be made read-only).
//! It is served on an origin of its own per session where there is one ([`origin`]), else at
//! `/sessions/{id}/code/…` on Tandem's. Each request goes through a byte tunnel the workspace
//! agent opens to code-server on the workspace's loopback: the workspace has no network the
//! server could reach otherwise.

pub mod origin;

use std::collections::HashSet;
use std::sync::Mutex;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::any;
use tandem_protocol::SessionId;
use tandem_protocol::live::Role;

use crate::identity::auth::CurrentUser;
use crate::state::AppState;
use crate::workspace_agent::WorkspaceAgent;
use crate::{Error, Result};

/// Workspaces whose code-server is known to be up.
#[derive(Default)]
pub struct CodeServers {
    up: Mutex<HashSet<String>>,
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/code", any(to_slash))
        .route("/sessions/{id}/code/", any(proxy_root))
        .route("/sessions/{id}/code/{*rest}", any(proxy))
        // The desktop over VNC, also beside VS Code (the same socket as under /api).
        .route(
            "/sessions/{id}/vnc",
            axum::routing::get(crate::desktop::vnc::socket),
        )
}

/// `POST /api/sessions/{id}/code`.
pub fn api_router() -> crate::openapi::ApiRouter<crate::state::AppState> {
    crate::openapi::ApiRouter::new().routes(utoipa_axum::routes!(open))
}

/// A signed-in driver, or a guest with a driver link (`?share=…&name=…`, as on the live
/// channel), gets a URL.
#[utoipa::path(
    post,
    path = "/sessions/{id}/code",
    tag = "sessions",
    operation_id = "open_code",
    security((), ("bearer_token" = []), ("session_cookie" = [])),
    params(
        ("id" = SessionId, Path),
        ("share" = Option<String>, Query, description = "A driver link's token, for a guest"),
        ("name" = Option<String>, Query, description = "A guest's display name"),
    ),
    responses(
        (status = 200, description = "Where VS Code opens for this person", body = tandem_protocol::CodeLink),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::Forbidden,
        crate::openapi::NotFound,
        crate::openapi::Conflict,
        crate::openapi::BadGateway,
        crate::openapi::Unavailable,
    ),
)]
async fn open(
    State(app): State<AppState>,
    user: Result<CurrentUser, Error>,
    Path(id): Path<SessionId>,
    q: crate::identity::auth::ShareCredential,
) -> Result<axum::Json<tandem_protocol::CodeLink>> {
    let user = user.ok().map(|u| u.0);
    let session = crate::sessions::get(&app.db, id).await?.session;
    let access = crate::permissions::resolve(
        &app,
        &session,
        user.as_ref(),
        q.share.as_deref(),
        q.name.as_deref(),
    )
    .await?;
    if access.role < Role::Driver {
        return Err(not_for_viewers());
    }
    // On VS Code's own origin, whoever came through a share link (a guest, or a signed-in
    // person asking with one) holds a ticket for the link, which each request checks; on
    // Tandem's origin the signed-in person's own role is checked.
    let isolated = app.config.code_url.as_ref().is_some();
    let holder = match (&access.jti, access.user_id) {
        (Some(jti), u) if isolated => origin::Holder::Link(jti.clone(), u),
        (_, Some(u)) => origin::Holder::User(u),
        (Some(jti), None) => origin::Holder::Link(jti.clone(), None),
        (None, None) => return Err(Error::Unauthorized("sign in to use VS Code".into())),
    };
    let (url, isolated) = origin::link(&app, id, &holder)?;
    Ok(axum::Json(tandem_protocol::CodeLink { url, isolated }))
}

fn not_for_viewers() -> Error {
    Error::Forbidden(
        "VS Code is for the session's owner and drivers; viewers watch the terminal and the desktop"
            .into(),
    )
}

async fn require_driver(app: &AppState, id: SessionId, user: &tandem_protocol::User) -> Result<()> {
    crate::permissions::require(app, id, user, Role::Driver)
        .await
        .map(|_| ())
        .map_err(|e| match Error::from(e) {
            Error::Forbidden(_) => not_for_viewers(),
            other => other,
        })
}

async fn to_slash(Path(id): Path<SessionId>) -> Redirect {
    Redirect::permanent(&format!("/sessions/{id}/code/"))
}

async fn proxy_root(
    State(app): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    req: Request,
) -> Response {
    same_origin(app, user, id, String::new(), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn proxy(
    State(app): State<AppState>,
    user: CurrentUser,
    Path((id, rest)): Path<(SessionId, String)>,
    req: Request,
) -> Response {
    same_origin(app, user, id, rest, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// VS Code under Tandem's own origin: only where it has none of its own (else a link could
/// load workspace-served script next to Tandem's credentials).
async fn same_origin(
    app: AppState,
    user: CurrentUser,
    id: SessionId,
    rest: String,
    req: Request,
) -> Result<Response> {
    if app.config.code_url.as_ref().is_some() {
        return Err(Error::NotFound(
            "VS Code has an origin of its own here: open it from the session page".into(),
        ));
    }
    if !app.config.unsafe_code_on_tandem_origin {
        return Err(Error::Unavailable(origin::NO_ORIGIN.into()));
    }
    require_driver(&app, id, &user.0).await?;
    let (check, person) = (app.clone(), user.0.clone());
    let until = origin::while_allowed(move || {
        let (app, person) = (check.clone(), person.clone());
        async move {
            // The person again (deactivated since?), then their role.
            let Ok(Some(person)) = crate::db::users::get(&app.db, person.id).await else {
                return false;
            };
            crate::permissions::require(&app, id, &person, Role::Driver)
                .await
                .is_ok()
        }
    });
    forward(app, id, rest, req, until).await
}

/// A tunnel to code-server in `agent`'s workspace (started first if need be).
async fn tunnel(app: &AppState, agent: &WorkspaceAgent<'_>) -> Result<hyper::upgrade::Upgraded> {
    let wid = agent.workspace.as_str();
    let known = app
        .vscode
        .up
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(wid);
    if !known {
        agent.start_code().await?;
        app.vscode
            .up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(wid.to_string());
    }
    match agent.tunnel("code").await {
        Ok(t) => Ok(t),
        Err(e) => {
            // It was running once and is not now: start it again next time.
            app.vscode
                .up
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(wid);
            Err(e.into())
        }
    }
}

/// Proxies `req` to session `id`'s code-server as `/<rest>` (the caller checked who asks); a
/// WebSocket it upgrades to lasts until `until` completes.
async fn forward(
    app: AppState,
    id: SessionId,
    rest: String,
    req: Request,
    until: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Response> {
    let policy = policy(req.headers().get(header::HOST));
    let host = app.workspaces()?;
    let agent = crate::sessions::workspace::workspace_agent(&app.db, &host, id).await?;
    let io = tunnel(&app, &agent).await?;
    let mut res = crate::proxy::relay(
        io,
        req,
        "VS Code",
        |parts| {
            parts.uri = match parts.uri.query() {
                Some(q) => format!("/{rest}?{q}"),
                None => format!("/{rest}"),
            }
            .parse()
            .map_err(|e| Error::BadRequest(format!("a request VS Code cannot take: {e}")))?;
            // Tandem's own credential stays here.
            parts.headers.remove(header::COOKIE);
            parts.headers.remove(header::AUTHORIZATION);
            Ok(())
        },
        until,
    )
    .await?;
    // A workspace sets no cookie on any origin of Tandem's (a same-site cookie could shadow
    // or fixate Tandem's own).
    res.headers_mut().remove(header::SET_COOKIE);
    // Nor its own policy: a page it serves could allow fetches anywhere from the viewer's
    // browser, a channel out past egress. Tandem's replaces whatever it sent.
    res.headers_mut().remove(header::CONTENT_SECURITY_POLICY);
    res.headers_mut()
        .remove(header::CONTENT_SECURITY_POLICY_REPORT_ONLY);
    if let Ok(v) = header::HeaderValue::from_str(&policy) {
        res.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
    }
    Ok(res)
}

/// The `Content-Security-Policy` of everything VS Code's proxy answers: code-server's own
/// (script with eval and inline, its webviews and workers from its origin) with every fetch
/// kept on the origin the page was asked on (`host`): images, media, fonts, frames, scripts,
/// styles, forms, and connections (plus its WebSockets there), none to another host. Costs:
/// extension icons and the marketplace, fetched from the browser, do not load.
fn policy(host: Option<&header::HeaderValue>) -> String {
    let sockets = host
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        })
        .map(|h| format!(" ws://{h} wss://{h}"))
        .unwrap_or_default();
    format!(
        "default-src 'self'; script-src 'self' 'unsafe-eval' 'unsafe-inline' blob:; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; media-src 'self' blob:; \
         font-src 'self' data: blob:; connect-src 'self'{sockets}; worker-src 'self' data: blob:; \
         child-src 'self' blob:; frame-src 'self' data: blob:; manifest-src 'self'; \
         object-src 'none'; base-uri 'self'; form-action 'self'"
    )
}
