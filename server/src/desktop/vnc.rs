//! The desktop over VNC, for browsers that cannot receive WebRTC (no UDP path):
//! `GET /api/sessions/{id}/vnc` is a WebSocket (subprotocol `binary`, what noVNC speaks) bridged
//! to x11vnc in the workspace through the agent's tunnel. Whoever may control gets the server
//! that takes input; everyone else (viewers, or drivers while someone else holds control) the
//! view-only one — decided when they connect.

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tandem_protocol::SessionId;
use tandem_protocol::live::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Result;
use crate::auth::CurrentUser;
use crate::state::AppState;

/// `GET /api/sessions/{id}/vnc`.
pub async fn socket(
    State(app): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    ws: WebSocketUpgrade,
) -> Result<Response> {
    let access = crate::sessions::access::require(&app.db, id, &user.0, Role::Viewer).await?;
    // Input only for a driver no one else holds control from (the live hub knows who does).
    let may_control = access.role.can_drive()
        && app
            .hubs
            .controller_of(id)
            .is_none_or(|c| c == Some(user.0.id));
    let service = if may_control { "vnc" } else { "vnc-view" };
    let workspaces = app.workspaces()?.clone();
    let (wid, pid) = crate::sessions::workspace::live_agent(&app.db, id).await?;
    let tunnel = crate::code::open_tunnel(&workspaces, &wid, pid, service).await?;
    Ok(ws
        .protocols(["binary"])
        .max_message_size(1 << 20)
        .on_upgrade(move |socket| bridge(socket, TokioIo::new(tunnel))))
}

async fn bridge(socket: WebSocket, mut tunnel: TokioIo<hyper::upgrade::Upgraded>) {
    let (mut sink, mut stream) = socket.split();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
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
