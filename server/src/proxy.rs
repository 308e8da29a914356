//! Relays one HTTP/1 request — WebSocket and other upgrades included — over a connection the
//! caller opened: a tunnel into a workspace (VS Code), or to another server (a session hosted
//! there).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header, request::Parts};
use axum::response::Response;
use hyper_util::rt::TokioIo;

use crate::{Error, Result};

/// Sends `req` over `io` after `prepare` adjusted its head; on `101 Switching Protocols` the
/// two upgraded connections are joined until either ends or `until` completes (access was
/// lost, say). `what` names the other side in errors.
pub async fn relay<IO>(
    io: IO,
    mut req: Request,
    what: &str,
    prepare: impl FnOnce(&mut Parts) -> Result<()>,
    until: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Response>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| Error::Unavailable(format!("{what}: {e}")))?;
    tokio::spawn(conn.with_upgrades());
    let client_upgrade = req
        .headers()
        .contains_key(header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    prepare(&mut parts)?;
    let mut res = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(|e| Error::Unavailable(format!("{what}: {e}")))?;
    if res.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client) = client_upgrade
    {
        let upstream = hyper::upgrade::on(&mut res);
        tokio::spawn(async move {
            if let (Ok(c), Ok(u)) = (client.await, upstream.await) {
                let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
                    () = until => {}
                }
            }
        });
    }
    let (parts, body) = res.into_parts();
    let mut out = Response::from_parts(parts, Body::new(body));
    if out.status() == StatusCode::SWITCHING_PROTOCOLS {
        *out.body_mut() = Body::empty();
    }
    Ok(out)
}
