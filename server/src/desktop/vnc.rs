//! The desktop over VNC, for browsers that cannot receive WebRTC (no UDP path):
//! `GET /api/sessions/{id}/vnc` is a WebSocket (subprotocol `binary`, what noVNC speaks) bridged
//! to x11vnc in the workspace through the agent's tunnel. Whoever may control gets the server
//! that takes input; everyone else (viewers, or drivers while someone else holds control) the
//! view-only one — decided when they connect, and an input-taking connection is closed (4403)
//! as soon as its person may no longer control: the web app then connects again and gets the
//! view-only server (and the other way round when control comes to them).

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tandem_protocol::SessionId;
use tandem_protocol::live::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Result;
use crate::identity::auth::CurrentUser;
use crate::state::AppState;

/// `GET /api/sessions/{id}/vnc`.
#[utoipa::path(
    get,
    path = "/sessions/{id}/vnc",
    tag = "sessions",
    operation_id = "desktop_vnc",
    description = "The desktop over VNC: a WebSocket (subprotocol `binary`) to the workspace's \
        x11vnc, taking input when the person may control, view-only otherwise.",
    params(("id" = SessionId, Path)),
    responses(
        (status = 101, description = "Switched to the WebSocket protocol"),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::Forbidden,
        crate::openapi::NotFound,
        crate::openapi::Conflict,
        crate::openapi::BadGateway,
        crate::openapi::Unavailable,
        (status = 426, description = "The connection cannot be upgraded", body = tandem_protocol::ApiError),
    ),
)]
pub async fn socket(
    State(app): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    ws: WebSocketUpgrade,
) -> Result<Response> {
    let access = crate::permissions::require(&app, id, &user.0, Role::Viewer).await?;
    let takes_input = may_control(&app, id, access.role, user.0.id);
    // Watching starts nothing: a viewer sees a desktop a driver (or the agent) started.
    if !access.role.can_drive() && !super::running(&app, id).await? {
        return Err(crate::Error::Forbidden(
            "the desktop is not running; a driver starts it".into(),
        ));
    }
    let service = if takes_input { "vnc" } else { "vnc-view" };
    let host = app.workspaces()?;
    let tunnel = crate::sessions::workspace::workspace_agent(&app.db, &host, id)
        .await?
        .tunnel(service)
        .await?;
    Ok(ws
        .protocols(["binary"])
        .max_message_size(1 << 20)
        .on_upgrade(move |socket| {
            // Watching too ends once the person may no longer see the session.
            let (check, person) = (app.clone(), user.0.clone());
            let until = crate::vscode::origin::while_allowed(move || {
                let (app, person) = (check.clone(), person.clone());
                async move {
                    let Ok(Some(person)) = crate::db::users::get(&app.db, person.id).await else {
                        return false;
                    };
                    crate::permissions::require(&app, id, &person, Role::Viewer)
                        .await
                        .is_ok()
                }
            });
            // The role is looked up again (a revoked link, a demoted driver), control in memory.
            let still = move || {
                let (app, user) = (app.clone(), user.0.clone());
                async move {
                    // The person again (deactivated since?), then their role.
                    let Ok(Some(user)) = crate::db::users::get(&app.db, user.id).await else {
                        return false;
                    };
                    match crate::permissions::require(&app, id, &user, Role::Driver).await {
                        Ok(a) => may_control(&app, id, a.role, user.id),
                        Err(_) => false,
                    }
                }
            };
            async move {
                tokio::select! {
                    () = bridge(socket, TokioIo::new(tunnel), takes_input.then_some(still)) => {}
                    () = until => {}
                }
            }
        }))
}

/// Input only for a driver no one else holds control from (the live hub knows who does).
fn may_control(app: &AppState, id: SessionId, role: Role, user: tandem_protocol::UserId) -> bool {
    role.can_drive() && app.hubs.controller_of(id).is_none_or(|c| c == Some(user))
}

/// How often an input-taking connection checks that its person may still control.
const CONTROL_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// Joins the socket and the tunnel; `input`, for a connection that takes input, says whether
/// its person still may.
async fn bridge<F: std::future::Future<Output = bool>>(
    socket: WebSocket,
    mut tunnel: TokioIo<hyper::upgrade::Upgraded>,
    input: Option<impl Fn() -> F>,
) {
    let (mut sink, mut stream) = socket.split();
    let mut buf = vec![0u8; 64 * 1024];
    let mut check = tokio::time::interval(CONTROL_CHECK);
    loop {
        tokio::select! {
            _ = check.tick(), if input.is_some() => {
                let allowed = match &input {
                    Some(still) => still().await,
                    None => true,
                };
                if !allowed {
                    let _ = sink
                        .send(Message::Close(Some(axum::extract::ws::CloseFrame {
                            code: tandem_protocol::live::close::FORBIDDEN,
                            reason: "control moved: connect again to watch".into(),
                        })))
                        .await;
                    return;
                }
            }
            m = stream.next() => match m {
                Some(Ok(Message::Binary(b))) => {
                    if tunnel.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                _ => break,
            },
            n = tunnel.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
    let _ = sink.close().await;
}
