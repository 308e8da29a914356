//! A WebSocket whose frames are written from shared buffers (the live channel's): the upgrade
//! (RFC 6455's handshake), the client's frames read by tungstenite, the server's frames written
//! here with vectored writes. One terminal frame is queued to every member without a copy;
//! tungstenite would format each member's frame into a buffer of its own first, and merging a
//! run of output into one frame would copy it again: at 2,000 viewers those two copies were a
//! quarter of the server's CPU (docs/PERF.md).
//!
//! On a plain TCP connection (what Tandem's own HTTP/1.1 loop hands over, `serve::http1`),
//! bytes that also lie in an append-only memory file ([`InFile`]: the live channel's terminal
//! output) go out with `sendfile` in runs of at least [`SENDFILE_MIN`]: the kernel then refers
//! to the file's pages instead of copying the bytes into every member's socket buffer.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The upgraded connection.
type Io = TokioIo<hyper::upgrade::Upgraded>;

/// The client's side: tungstenite reads and checks its frames (masking, limits, UTF-8).
pub type Reader = WebSocketStream<ReadOnly<ReadSide>>;

/// The read side of an upgraded connection: the TCP socket itself when the connection was
/// served by `serve::http1`, else hyper's upgraded stream.
pub enum ReadSide {
    Tcp(OwnedReadHalf),
    Upgraded(ReadHalf<Io>),
}

/// The write side of an upgraded connection (see [`ReadSide`]).
pub enum WriteSide {
    Tcp(OwnedWriteHalf),
    Upgraded(WriteHalf<Io>),
}

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Self::Upgraded(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteSide {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Self::Upgraded(w) => Pin::new(w).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Self::Upgraded(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(w) => w.is_write_vectored(),
            Self::Upgraded(w) => w.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(w) => Pin::new(w).poll_flush(cx),
            Self::Upgraded(w) => Pin::new(w).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Self::Upgraded(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// What a [`Writer`] writes to: any stream, and the TCP socket under it when there is one
/// (for `sendfile`).
pub trait Wire: AsyncWrite + Unpin {
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl Wire for WriteSide {
    fn socket(&self) -> Option<&TcpStream> {
        match self {
            Self::Tcp(w) => Some(w.as_ref()),
            Self::Upgraded(_) => None,
        }
    }
}

/// Bytes that also lie in `file` at `at`: an append-only memory file whose written bytes never
/// change (the live channel's terminal output log), so they can be sent from it.
#[derive(Clone, Debug)]
pub struct InFile {
    pub file: Arc<std::fs::File>,
    pub at: u64,
}

/// A piece of a binary message: its bytes, and where they also lie in a file.
pub type Piece = (Bytes, Option<InFile>);

/// The least bytes in a row from one file worth a `sendfile` (smaller runs go in the
/// vectored write: below this a `sendfile` costs as much as the copy it saves, docs/PERF.md).
pub const SENDFILE_MIN: usize = 16 * 1024;

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
        F: FnOnce(Reader, Writer<WriteSide>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept =
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let on = self.on;
        tokio::spawn(async move {
            let Ok(upgraded) = on.await else { return };
            // The socket itself when hyper served it directly; what hyper read past the
            // handshake comes first.
            let (r, w, read) = match upgraded.downcast::<TokioIo<TcpStream>>() {
                Ok(parts) => {
                    let (r, w) = parts.io.into_inner().into_split();
                    (ReadSide::Tcp(r), WriteSide::Tcp(w), parts.read_buf.to_vec())
                }
                Err(upgraded) => {
                    let (r, w) = tokio::io::split(TokioIo::new(upgraded));
                    (ReadSide::Upgraded(r), WriteSide::Upgraded(w), Vec::new())
                }
            };
            // Clients send small frames (keys, JSON): a small buffer, not 128 KiB zeroed per
            // connection; a larger frame still gets the room it needs.
            let config = WebSocketConfig::default()
                .read_buffer_size(8 * 1024)
                .max_message_size(Some(max_bytes))
                .max_frame_size(Some(max_bytes));
            let reader =
                WebSocketStream::from_partially_read(ReadOnly(r), read, Role::Server, Some(config))
                    .await;
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
/// buffer written as it is (and where it also lies in a file).
enum Part {
    Head(std::ops::Range<usize>),
    Shared(Bytes, Option<InFile>),
}

impl Part {
    fn bytes<'a>(&'a self, heads: &'a [u8]) -> &'a [u8] {
        match self {
            Part::Head(r) => &heads[r.clone()],
            Part::Shared(b, _) => b,
        }
    }
}

/// The server's side: frames queued, then written together by [`Writer::flush`].
pub struct Writer<W> {
    io: W,
    heads: Vec<u8>,
    parts: Vec<Part>,
}

impl<W: Wire> Writer<W> {
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

    /// Whether bytes that lie in a file go out from it (`sendfile`): on a TCP socket.
    pub fn sends_files(&self) -> bool {
        self.io.socket().is_some()
    }

    /// Queues a text message (`text` is UTF-8: made by serde_json or from a `String`).
    pub fn text(&mut self, text: Bytes) {
        self.head(TEXT, text.len());
        self.shared(text);
    }

    /// Queues one binary message made of `pieces` in order, none of them copied.
    pub fn binary(&mut self, pieces: Vec<Bytes>) {
        self.binary_pieces(pieces.into_iter().map(|b| (b, None)).collect());
    }

    /// Queues one binary message made of `pieces` in order, none of them copied; those that also
    /// lie in a file may be sent from it.
    pub fn binary_pieces(&mut self, pieces: Vec<Piece>) {
        let len = pieces.iter().map(|p| p.0.len()).sum();
        self.head(BINARY, len);
        for (b, file) in pieces {
            if !b.is_empty() {
                self.parts.push(Part::Shared(b, file));
            }
        }
    }

    /// An empty piece is left out: `flush` takes a write of nothing for a closed socket.
    fn shared(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.parts.push(Part::Shared(b, None));
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

    /// Writes everything queued, in order, with as few `writev`s as the socket takes (and
    /// `sendfile`s, on a TCP socket). Not cancel-safe: after an error or a cancelled flush the
    /// writer is dropped, never flushed again (what was written of a frame is not known to the
    /// next call).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if self.io.socket().is_some() {
            self.flush_socket().await?;
        } else {
            self.flush_vectored().await?;
        }
        self.heads.clear();
        self.parts.clear();
        self.io.flush().await
    }

    async fn flush_vectored(&mut self) -> std::io::Result<()> {
        let Self { io, heads, parts } = self;
        let mut done = Done::default();
        while done.at < parts.len() {
            let slices = done.slices(heads, &parts[done.at..]);
            let n = io.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            done.advance(heads, parts, n);
        }
        Ok(())
    }

    /// The same on the TCP socket with its own calls: runs of file bytes of at least
    /// [`SENDFILE_MIN`] with `sendfile`, what comes before such a run with `MSG_MORE` (the
    /// header goes out in one segment with the run's start).
    async fn flush_socket(&mut self) -> std::io::Result<()> {
        let Self { io, heads, parts } = self;
        let Some(socket) = io.socket() else {
            return Ok(());
        };
        let from_file = sendfile_runs(parts);
        let mut done = Done::default();
        while done.at < parts.len() {
            let n = if let Some((file, run_end)) = from_file[done.at].clone() {
                let total: usize = parts[done.at..run_end]
                    .iter()
                    .map(|p| p.bytes(heads).len())
                    .sum();
                let Part::Shared(_, Some(f)) = &parts[done.at] else {
                    unreachable!("a run starts at a piece in a file")
                };
                let mut offset = f.at + done.offset as u64;
                let count = total - done.offset;
                socket
                    .async_io(Interest::WRITABLE, || {
                        rustix::fs::sendfile(socket, &*file, Some(&mut offset), count)
                            .map_err(std::io::Error::from)
                    })
                    .await?
            } else {
                // Up to the next run from a file, corked if one follows.
                let end = (done.at..parts.len())
                    .find(|&i| from_file[i].is_some())
                    .unwrap_or(parts.len());
                let slices = done.slices(heads, &parts[done.at..end]);
                let mut flags = rustix::net::SendFlags::NOSIGNAL;
                if end < parts.len() {
                    flags |= rustix::net::SendFlags::MORE;
                }
                socket
                    .async_io(Interest::WRITABLE, || {
                        rustix::net::sendmsg(socket, &slices, &mut Default::default(), flags)
                            .map_err(std::io::Error::from)
                    })
                    .await?
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            done.advance(heads, parts, n);
        }
        Ok(())
    }
}

/// For each queued part: if it starts (or continues) a run sent from a file, the file and the
/// index just past the run. A run is consecutive pieces whose bytes lie back to back in one
/// file, at least [`SENDFILE_MIN`] of them.
fn sendfile_runs(parts: &[Part]) -> Vec<Option<(Arc<std::fs::File>, usize)>> {
    let mut runs = vec![None; parts.len()];
    let mut i = 0;
    while i < parts.len() {
        let Part::Shared(b, Some(first)) = &parts[i] else {
            i += 1;
            continue;
        };
        let (mut end, mut next_at, mut bytes) = (i + 1, first.at + b.len() as u64, b.len());
        while let Some(Part::Shared(b, Some(f))) = parts.get(end) {
            if !Arc::ptr_eq(&f.file, &first.file) || f.at != next_at {
                break;
            }
            next_at += b.len() as u64;
            bytes += b.len();
            end += 1;
        }
        if bytes >= SENDFILE_MIN {
            for r in &mut runs[i..end] {
                *r = Some((first.file.clone(), end));
            }
        }
        i = end;
    }
    runs
}

/// How far a flush has come: the part it is in and the bytes of it already written.
#[derive(Default)]
struct Done {
    at: usize,
    offset: usize,
}

impl Done {
    /// What is left of `parts` (which start at the current part) as slices for one write.
    fn slices<'a>(&self, heads: &'a [u8], parts: &'a [Part]) -> Vec<IoSlice<'a>> {
        parts
            .iter()
            .take(MAX_SLICES)
            .enumerate()
            .map(|(i, p)| IoSlice::new(&p.bytes(heads)[if i == 0 { self.offset } else { 0 }..]))
            .collect()
    }

    /// Moves past `n` more written bytes.
    fn advance(&mut self, heads: &[u8], parts: &[Part], mut n: usize) {
        while n > 0 && self.at < parts.len() {
            let left = parts[self.at].bytes(heads).len() - self.offset;
            if n >= left {
                n -= left;
                self.at += 1;
                self.offset = 0;
            } else {
                self.offset += n;
                n = 0;
            }
        }
    }
}

#[cfg(test)]
#[path = "websocket_tests.rs"]
mod tests;
