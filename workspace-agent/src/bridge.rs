//! The gateway where the server cannot hand the workspace a socket (a pod on a cluster, which
//! the server reaches only through the API server's port-forward): the server keeps a few
//! connections open to this agent ([`routes::GATEWAY_BRIDGE`], upgraded), and the agent listens
//! on the gateway socket itself. Each connection a workspace process makes to that socket takes
//! one idle bridge: the agent sends [`BRIDGE_TAKEN`] on it (so the server knows to open another)
//! and then carries the connection's bytes both ways. Nothing in the workspace can reach the
//! server any other way, and the server still knows which workspace calls by which bridge.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tandem_protocol::agent::{BRIDGE_PROTOCOL, BRIDGE_TAKEN, GATEWAY_SOCKET, routes};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, mpsc};

/// Most idle bridges the agent holds; the server keeps fewer open, so more are someone else's
/// mistake and are closed.
pub const MAX_IDLE: usize = 16;
/// How long a connection to the gateway waits for a bridge before it is closed.
const WAIT_FOR_BRIDGE: Duration = Duration::from_secs(30);

type Bridge = TokioIo<hyper::upgrade::Upgraded>;

/// The idle bridges, shared by the route that receives them and the socket that uses them.
#[derive(Clone)]
pub struct Bridges {
    idle: mpsc::Sender<Bridge>,
    waiting: Arc<Mutex<mpsc::Receiver<Bridge>>>,
}

impl Bridges {
    /// Listens on the gateway socket and carries its connections over bridges, when the
    /// server asked for it ([`tandem_protocol::agent::GATEWAY_BRIDGE_ENV`]).
    pub fn spawn() -> anyhow::Result<Self> {
        let (idle, waiting) = mpsc::channel(MAX_IDLE);
        let bridges = Self {
            idle,
            waiting: Arc::new(Mutex::new(waiting)),
        };
        let socket = std::path::Path::new(GATEWAY_SOCKET);
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket)?;
        // Whoever runs in the workspace may call the gateway, as through a bound socket.
        std::fs::set_permissions(socket, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
        let carrier = bridges.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let carrier = carrier.clone();
                tokio::spawn(async move { carrier.carry(conn).await });
            }
        });
        Ok(bridges)
    }

    /// Carries one connection to the gateway over the next idle bridge that still takes bytes.
    async fn carry(&self, mut conn: tokio::net::UnixStream) {
        loop {
            let next = {
                let mut waiting = self.waiting.lock().await;
                tokio::time::timeout(WAIT_FOR_BRIDGE, waiting.recv()).await
            };
            let Ok(Some(mut bridge)) = next else {
                // No bridge in time: the server is gone or not listening for this workspace.
                return;
            };
            // A bridge whose server side went away fails here; the next one is tried.
            if bridge.write_all(&[BRIDGE_TAKEN]).await.is_err() || bridge.flush().await.is_err() {
                continue;
            }
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut bridge).await;
            return;
        }
    }
}

/// `GET` [`routes::GATEWAY_BRIDGE`] with `Upgrade: tandem-gateway`: the upgraded connection
/// waits as an idle bridge.
pub fn accept(bridges: Option<Bridges>, req: Request) -> Response {
    let Some(bridges) = bridges else {
        return crate::http::error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "{} is not served here: the gateway is a bound socket",
                routes::GATEWAY_BRIDGE
            ),
        );
    };
    let wants = req
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(BRIDGE_PROTOCOL));
    if !wants {
        return crate::http::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("a bridge is an upgrade to {BRIDGE_PROTOCOL}"),
        );
    }
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            // Full: dropped, closing it.
            let _ = bridges.idle.try_send(TokioIo::new(upgraded));
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", BRIDGE_PROTOCOL)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The workspace's egress proxy ([`tandem_protocol::agent::EGRESS_PROXY_ENV`]): each connection
/// to [`tandem_protocol::agent::EGRESS_PROXY_PORT`] on the loopback is carried to the gateway
/// (over a bridge, as any connection to the gateway socket), where the server decides what it
/// may reach.
pub async fn spawn_egress_proxy() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind((
        std::net::Ipv4Addr::LOCALHOST,
        tandem_protocol::agent::EGRESS_PROXY_PORT,
    ))
    .await?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut gateway) = tokio::net::UnixStream::connect(GATEWAY_SOCKET).await {
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut gateway).await;
                }
            });
        }
    });
    Ok(())
}
