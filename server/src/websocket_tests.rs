//! The WebSocket writer's tests: frames cut by short and vectored writes read back whole by a
//! real client, and a frame's pieces reach the socket from the shared buffers.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::Writer;

fn big() -> Bytes {
    (0..70_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

/// Queues every kind of frame: text, a run of pieces (one empty), a 64-bit length, a 16-bit
/// one, ping, pong, and a close whose reason must be cut.
fn queue_every_kind<W: AsyncWrite + Unpin>(w: &mut Writer<W>) {
    let reason = "é".repeat(100); // 200 bytes: cut at a character boundary to fit 123
    w.text(Bytes::from_static("{\"type\":\"hello\"}".as_bytes()));
    w.binary(vec![
        Bytes::from_static(b"\0\0\0\x07ab"),
        Bytes::from_static(b""),
        Bytes::from_static(b"cd"),
    ]);
    w.binary(vec![big()]);
    w.binary(vec![big().slice(..300)]);
    w.ping();
    w.pong(b"p1");
    w.close(4408, &reason);
}

/// Reads messages up to the close with a real WebSocket client and checks them against
/// [`queue_every_kind`].
async fn read_every_kind(client: impl AsyncRead + AsyncWrite + Unpin) {
    let mut ws = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    let mut got = Vec::new();
    while let Some(m) = ws.next().await {
        let m = m.expect("a frame");
        let end = matches!(m, Message::Close(_));
        got.push(m);
        if end {
            break;
        }
    }
    assert_eq!(got.len(), 7, "{got:?}");
    assert_eq!(got[0], Message::Text("{\"type\":\"hello\"}".into()));
    assert_eq!(
        got[1],
        Message::Binary(Bytes::from_static(b"\0\0\0\x07abcd"))
    );
    assert_eq!(got[2], Message::Binary(big()));
    assert_eq!(got[3], Message::Binary(big().slice(..300)));
    assert_eq!(got[4], Message::Ping(Bytes::new()));
    assert_eq!(got[5], Message::Pong(Bytes::from_static(b"p1")));
    let Message::Close(Some(c)) = &got[6] else {
        panic!("{:?}", got[6])
    };
    assert_eq!(c.code, CloseCode::from(4408));
    assert_eq!(c.reason.as_str(), "é".repeat(61));
}

/// Every kind of frame, written through a pipe that takes 7 bytes at a time (so every write
/// is cut somewhere), reads back whole and in order with a real WebSocket client.
#[tokio::test]
async fn frames_cut_by_short_writes_read_back_whole_in_order() {
    let (server, client) = tokio::io::duplex(7);
    let mut w = Writer::new(server);
    queue_every_kind(&mut w);
    // The writer is kept until the client is done (it answers the ping into the pipe).
    let write = tokio::spawn(async move { w.flush().await.map(|()| w) });
    read_every_kind(client).await;
    write.await.unwrap().unwrap();
}

/// A socket whose `writev` takes at most `take` bytes across the slices it is given: one
/// write ends pieces and stops inside the next.
struct Trickle {
    take: usize,
    to: tokio::io::DuplexStream,
}

impl AsyncWrite for Trickle {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut joined = Vec::new();
        for b in bufs {
            joined.extend_from_slice(&b[..b.len().min(self.take - joined.len())]);
        }
        Pin::new(&mut self.to).poll_write(cx, &joined)
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.to).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.to).poll_shutdown(cx)
    }
}

/// The same through `writev`s that each end several pieces and stop inside another (1,000
/// bytes across headers and payloads, then 13 — smaller than some headers).
#[tokio::test]
async fn vectored_writes_cut_across_pieces_read_back_whole_in_order() {
    for take in [1000, 13] {
        let (server, client) = tokio::io::duplex(1 << 20);
        let mut w = Writer::new(Trickle { take, to: server });
        queue_every_kind(&mut w);
        let write = tokio::spawn(async move { w.flush().await.map(|()| w) });
        read_every_kind(client).await;
        write.await.unwrap().unwrap();
    }
}

/// A socket that takes everything and keeps where each written slice pointed.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(usize, usize)>>>);

impl AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0
            .lock()
            .unwrap()
            .push((buf.as_ptr() as usize, buf.len()));
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(bufs.iter().map(|b| (b.as_ptr() as usize, b.len())));
        Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What made the fan-out cheaper: a terminal frame queued to many members reaches each
/// member's socket from the one shared buffer — every piece of a merged run too — and no
/// member's copy of it is made (tungstenite's writer copied each frame into its own buffer).
#[tokio::test]
async fn a_frames_pieces_go_to_the_socket_from_the_shared_buffers() {
    let first: Bytes = vec![b'a'; 100_000].into();
    let second: Bytes = vec![b'b'; 50_000].into();
    for _member in 0..3 {
        let rec = Recorder::default();
        let mut w = Writer::new(rec.clone());
        w.binary(vec![first.clone(), second.slice(4..)]);
        w.flush().await.unwrap();
        let seen = rec.0.lock().unwrap().clone();
        assert!(
            seen.contains(&(first.as_ptr() as usize, first.len())),
            "{seen:?}"
        );
        assert!(
            seen.contains(&(second.as_ptr() as usize + 4, second.len() - 4)),
            "{seen:?}"
        );
        let total: usize = seen.iter().map(|s| s.1).sum();
        assert_eq!(
            total,
            10 + first.len() + second.len() - 4,
            "a header and the two pieces, nothing else"
        );
    }
}
