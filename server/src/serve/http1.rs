//! The server's accept loop: what `axum::serve` does (a task per connection, the peer's address
//! as `ConnectInfo`, graceful shutdown, `TCP_NODELAY`), with each connection served by hyper's
//! HTTP/1.1 directly. `axum::serve` goes through hyper-util's version sniffing, which wraps every
//! connection in a private type, so an upgraded WebSocket could not be taken back as its
//! `TcpStream`; here it can (`websocket::Upgrade`), and the live channel sends terminal output
//! to it with `sendfile`. HTTP/2 without TLS (prior knowledge) is not served: browsers speak it
//! only over TLS, which a proxy in front of Tandem ends.

use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Serves `app` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish (connections already upgraded carry on: they are their handlers' now).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Connections start a graceful shutdown when `signal` closes; `closed` is done once every
    // connection task has ended.
    let (signal, signal_rx) = tokio::sync::watch::channel(());
    let (closed, closed_rx) = tokio::sync::watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // No Nagle: terminal echo and live frames go out as soon as they are written.
        let _ = tcp.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |mut req: axum::http::Request<Incoming>| {
                // The peer's address reaches handlers (the per-address rate limits).
                req.extensions_mut().insert(ConnectInfo(addr));
                req.map(Body::new)
            });
        let (mut signal_rx, closed_rx) = (signal_rx.clone(), closed_rx.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service))
                .with_upgrades();
            let mut conn = pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::trace!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = signal_rx.changed(), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(closed_rx);
        });
    }
    drop(listener);
    drop(signal_rx);
    // Closing the sender wakes every connection's `changed()` with an error: shut down.
    drop(signal);
    drop(closed_rx);
    closed.closed().await;
}

/// An accept that failed: a connection reset before it was taken is nothing; anything else
/// (out of file descriptors) is logged and waited out for a second, as hyper always did.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::{mpsc, oneshot};

    use super::*;

    async fn request(addr: SocketAddr, req: &str) -> String {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut got = String::new();
        tcp.read_to_string(&mut got).await.unwrap();
        got
    }

    /// Handlers get the peer's address; a WebSocket upgrade hands its handler the TCP socket
    /// itself (what `sendfile` needs); on shutdown a request in flight still gets its answer
    /// and the loop ends once it has.
    #[tokio::test]
    async fn serves_peers_upgrades_and_a_graceful_shutdown() {
        let (upgraded_tx, mut upgraded) = mpsc::unbounded_channel();
        let (entered_tx, mut entered) = mpsc::unbounded_channel();
        let (release_tx, release) = oneshot::channel::<()>();
        let release = std::sync::Arc::new(tokio::sync::Mutex::new(Some(release)));
        let app =
            Router::new()
                .route(
                    "/peer",
                    get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                        peer.ip().to_string()
                    }),
                )
                .route(
                    "/slow",
                    get(move || async move {
                        entered_tx.send(()).unwrap();
                        let rx = release.lock().await.take().unwrap();
                        rx.await.unwrap();
                        "finished"
                    }),
                )
                .route(
                    "/ws",
                    get(move |up: crate::websocket::Upgrade| async move {
                        up.on_upgrade(1024, move |_reader, writer| async move {
                            upgraded_tx.send(writer.sends_files()).unwrap();
                        })
                    }),
                );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app, async move {
            let _ = stop.await;
        }));

        let peer = request(
            addr,
            "GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(peer.starts_with("HTTP/1.1 200"), "{peer}");
        assert!(peer.ends_with("127.0.0.1"), "{peer}");

        let ws = request(
            addr,
            "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        );
        let (ws, sends_files) = tokio::join!(ws, upgraded.recv());
        assert!(ws.starts_with("HTTP/1.1 101"), "{ws}");
        assert_eq!(
            sends_files,
            Some(true),
            "the upgraded connection is the socket"
        );

        let slow = tokio::spawn(request(
            addr,
            "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ));
        entered.recv().await.unwrap();
        stop_tx.send(()).unwrap();
        // The loop (on this test's one thread) sees the stop, and does not end while the
        // request is in flight.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!server.is_finished(), "ended with a request in flight");
        release_tx.send(()).unwrap();
        let slow = slow.await.unwrap();
        assert!(slow.ends_with("finished"), "{slow}");
        server.await.unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
