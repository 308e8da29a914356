//! A WebSocket whose frames are written from shared buffers (the live channel's): the upgrade
//! (RFC 6455's handshake), the client's frames read by tungstenite, the server's frames written
//! here with vectored writes. One terminal frame is queued to every member without a copy;
//! tungstenite would format each member's frame into a buffer of its own first, and merging a
//! run of output into one frame would copy it again: at 2,000 viewers those two copies were a
//! quarter of the server's CPU (docs/PERF.md).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The upgraded connection.
type Io = TokioIo<hyper::upgrade::Upgraded>;

/// The client's side: tungstenite reads and checks its frames (masking, limits, UTF-8).
pub type Reader = WebSocketStream<ReadOnly<ReadHalf<Io>>>;

/// A request to upgrade to a WebSocket, checked as RFC 6455 asks.
pub struct Upgrade {
    key: HeaderValue,
    on: hyper::upgrade::OnUpgrade,
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_string()).into_response();
        if parts.method != Method::GET {
            return Err(bad("a WebSocket upgrade is a GET"));
        }
        if !has_token(&parts.headers, header::CONNECTION, "upgrade") {
            return Err(bad("the Connection header does not include 'upgrade'"));
        }
        if !has_token(&parts.headers, header::UPGRADE, "websocket") {
            return Err(bad("the Upgrade header is not 'websocket'"));
        }
        if parts
            .headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .map(|v| v.as_bytes())
            != Some(b"13")
        {
            return Err(bad("Sec-WebSocket-Version must be 13"));
        }
        let key = parts
            .headers
            .get(header::SEC_WEBSOCKET_KEY)
            .cloned()
            .ok_or_else(|| bad("no Sec-WebSocket-Key header"))?;
        let on = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .ok_or_else(|| {
                (
                    StatusCode::UPGRADE_REQUIRED,
                    "this connection cannot be upgraded",
                )
                    .into_response()
            })?;
        Ok(Self { key, on })
    }
}

impl Upgrade {
    /// Answers `101 Switching Protocols` and runs `f` with the connection's two sides once the
    /// client has it. Messages over `max_bytes` are refused by the reader.
    pub fn on_upgrade<F, Fut>(self, max_bytes: usize, f: F) -> Response
    where
        F: FnOnce(Reader, Writer<WriteHalf<Io>>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept =
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let on = self.on;
        tokio::spawn(async move {
            let Ok(upgraded) = on.await else { return };
            let (r, w) = tokio::io::split(TokioIo::new(upgraded));
            // Clients send small frames (keys, JSON): a small buffer, not 128 KiB zeroed per
            // connection; a larger frame still gets the room it needs.
            let config = WebSocketConfig::default()
                .read_buffer_size(8 * 1024)
                .max_message_size(Some(max_bytes))
                .max_frame_size(Some(max_bytes));
            let reader =
                WebSocketStream::from_raw_socket(ReadOnly(r), Role::Server, Some(config)).await;
            f(reader, Writer::new(w)).await;
        });
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = res.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(v) = HeaderValue::from_str(&accept) {
            h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
        }
        res
    }
}

/// The read half given to tungstenite. What tungstenite would write on its own (a pong, the
/// close handshake's reply) is dropped: the [`Writer`] is the only one that writes, so frames
/// never interleave; the reader's caller answers pings and closes through it.
pub struct ReadOnly<R>(R);

impl<R: AsyncRead + Unpin> AsyncRead for ReadOnly<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<R: Unpin> AsyncWrite for ReadOnly<R> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Frame opcodes (RFC 6455 §5.2).
const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;
/// A control frame's payload is at most this long.
const MAX_CONTROL: usize = 125;
/// Slices handed to one `writev`.
const MAX_SLICES: usize = 256;

/// One piece of what is queued: a header (or a small control payload) in `heads`, or a shared
/// buffer written as it is.
enum Part {
    Head(std::ops::Range<usize>),
    Shared(Bytes),
}

/// The server's side: frames queued, then written together by [`Writer::flush`].
pub struct Writer<W> {
    io: W,
    heads: Vec<u8>,
    parts: Vec<Part>,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    pub fn new(io: W) -> Self {
        Self {
            io,
            heads: Vec::new(),
            parts: Vec::new(),
        }
    }

    fn head(&mut self, opcode: u8, len: usize) {
        let start = self.heads.len();
        self.heads.push(0x80 | opcode);
        if len < 126 {
            self.heads.push(len as u8);
        } else if let Ok(len) = u16::try_from(len) {
            self.heads.push(126);
            self.heads.extend_from_slice(&len.to_be_bytes());
        } else {
            self.heads.push(127);
            self.heads.extend_from_slice(&(len as u64).to_be_bytes());
        }
        self.parts.push(Part::Head(start..self.heads.len()));
    }

    /// Queues a text message (`text` is UTF-8: made by serde_json or from a `String`).
    pub fn text(&mut self, text: Bytes) {
        self.head(TEXT, text.len());
        self.shared(text);
    }

    /// Queues one binary message made of `pieces` in order, none of them copied.
    pub fn binary(&mut self, pieces: Vec<Bytes>) {
        let len = pieces.iter().map(|p| p.len()).sum();
        self.head(BINARY, len);
        for p in pieces {
            self.shared(p);
        }
    }

    /// An empty piece is left out: `flush` takes a write of nothing for a closed socket.
    fn shared(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.parts.push(Part::Shared(b));
        }
    }

    fn control(&mut self, opcode: u8, payload: &[u8]) {
        let payload = &payload[..payload.len().min(MAX_CONTROL)];
        self.head(opcode, payload.len());
        if !payload.is_empty() {
            let start = self.heads.len();
            self.heads.extend_from_slice(payload);
            self.parts.push(Part::Head(start..self.heads.len()));
        }
    }

    pub fn ping(&mut self) {
        self.control(PING, &[]);
    }

    pub fn pong(&mut self, payload: &[u8]) {
        self.control(PONG, payload);
    }

    /// Queues a close frame: `code` and a reason cut to what a control frame holds (at a
    /// character boundary).
    pub fn close(&mut self, code: u16, reason: &str) {
        let mut end = reason.len().min(MAX_CONTROL - 2);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        self.control(CLOSE, &payload);
    }

    /// Writes everything queued, in order, with as few `writev`s as the socket takes. Not
    /// cancel-safe: after an error or a cancelled flush the writer is dropped, never flushed
    /// again (what was written of a frame is not known to the next call).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        let Self { io, heads, parts } = self;
        fn bytes<'a>(heads: &'a [u8], p: &'a Part) -> &'a [u8] {
            match p {
                Part::Head(r) => &heads[r.clone()],
                Part::Shared(b) => b,
            }
        }
        let bytes = |p| bytes(heads, p);
        let (mut at, mut offset) = (0, 0);
        while at < parts.len() {
            let slices: Vec<IoSlice<'_>> = parts[at..]
                .iter()
                .take(MAX_SLICES)
                .enumerate()
                .map(|(i, p)| IoSlice::new(&bytes(p)[if i == 0 { offset } else { 0 }..]))
                .collect();
            let mut n = io.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while n > 0 && at < parts.len() {
                let left = bytes(&parts[at]).len() - offset;
                if n >= left {
                    n -= left;
                    at += 1;
                    offset = 0;
                } else {
                    offset += n;
                    n = 0;
                }
            }
        }
        heads.clear();
        parts.clear();
        io.flush().await
    }
}

#[cfg(test)]
#[path = "websocket_tests.rs"]
mod tests;
