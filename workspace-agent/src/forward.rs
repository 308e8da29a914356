//! Loopback TCP → gateway socket, for CLI agents that only speak HTTP over TCP: inside the
//! workspace, `127.0.0.1:4100` leads to the server's gateway (its own network namespace, so no
//! other workspace or host process can reach it).

use tandem_protocol::agent::{GATEWAY_LOOPBACK, GATEWAY_SOCKET};

/// Starts forwarding in the background, when the gateway socket is bound into this workspace.
pub fn spawn() {
    if std::path::Path::new(GATEWAY_SOCKET)
        .parent()
        .is_none_or(|d| !d.exists())
    {
        return;
    }
    tokio::spawn(async {
        let Ok(listener) = tokio::net::TcpListener::bind(GATEWAY_LOOPBACK).await else {
            return;
        };
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(GATEWAY_SOCKET).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
}
