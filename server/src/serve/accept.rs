//! The server's accept loop: what `axum::serve` does (a task per connection, HTTP/1.1 and
//! HTTP/2, the peer's address as `ConnectInfo`, graceful shutdown, `TCP_NODELAY`), and a bound on
//! how long a client may take to send a request's head. `axum::serve` sets no timer, so hyper's
//! header timeout was off: a client sending its headers a byte at a time held a connection (and
//! a task) for as long as it liked, and enough of them held the server's file descriptors.

use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long a client has to send a request's head (line and headers), from when the server
/// starts waiting for it; then the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish (connections already upgraded carry on: they are their handlers' now).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, app, shutdown, HEADER_READ_TIMEOUT).await
}

/// [`serve`] with a given bound on reading a request's head.
async fn serve_with(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    header_timeout: Duration,
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
                    tokio::select! {
                        () = accept_failed(e) => continue,
                        () = &mut shutdown => break,
                    }
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
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection_with_upgrades(
                TokioIo::new(tcp),
                TowerToHyperService::new(service),
            );
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

    /// Handlers get the peer's address; a WebSocket upgrade reaches its handler; on shutdown a
    /// request in flight still gets its answer and the loop ends once it has.
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
                        up.on_upgrade(1024, move |_reader, _writer| async move {
                            upgraded_tx.send(()).unwrap();
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
        let (ws, handled) = tokio::join!(ws, upgraded.recv());
        assert!(ws.starts_with("HTTP/1.1 101"), "{ws}");
        assert_eq!(
            handled,
            Some(()),
            "the upgraded connection reached its handler"
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

    /// A client that sends a request's head slower than the bound loses its connection; one
    /// that sends it in time is answered.
    #[tokio::test]
    async fn a_head_sent_too_slowly_closes_the_connection() {
        let app = Router::new().route("/", get(|| async { "hi" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bound = Duration::from_millis(500);
        tokio::spawn(serve_with(listener, app, std::future::pending(), bound));

        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = tokio::time::Instant::now();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        // The rest of the head never comes: the server closes the connection.
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut got))
            .await
            .expect("closed within the bound, not held open")
            .ok();
        assert!(started.elapsed() >= bound);
        assert!(!String::from_utf8_lossy(&got).contains("hi"));

        let ok = request(
            addr,
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(ok.ends_with("hi"), "{ok}");
    }
}
