//! A lean viewer of the live channel for the fan-out benchmark (`bench_live`): the WebSocket
//! handshake written by hand and the server's frames read in place from one buffer kept for the
//! whole run. The 2,000 viewers share the two cores with the server they measure; the project's
//! client (`tandem_server::client::live`, tungstenite) zeroes its read buffer before every read
//! and allocates each frame, which was a fifth of the viewers' CPU in a profile (docs/PERF.md).

use std::ops::Range;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The read buffer: room for the largest frame the server sends (64 KiB of output and its
/// headers) several times over, so most reads take whatever the socket holds.
const BUF: usize = 256 * 1024;
/// Room kept free past the data before a read: the largest frame and its header.
const ROOM: usize = tandem_protocol::live::MAX_OUTPUT_FRAME_BYTES + 64;

/// One connected viewer.
pub struct RawViewer {
    tcp: TcpStream,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

/// What the next frame was.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// Terminal output: where its bytes (after the terminal id) lie, for [`RawViewer::bytes`].
    Terminal(Range<usize>),
    /// A JSON message.
    Text,
    /// The server's close frame and its code.
    Closed(Option<u16>),
    /// The connection ended without a close frame.
    End,
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A frame's opcode, header length and payload length, once its header is whole. Server frames
/// are not masked.
fn header(b: &[u8]) -> Result<Option<(u8, usize, usize)>> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[0] & 0x80 == 0 {
        bail!("a fragmented frame (the server sends none)");
    }
    if b[1] & 0x80 != 0 {
        bail!("a masked frame from the server");
    }
    let op = b[0] & 0x0f;
    Ok(match b[1] & 0x7f {
        126 if b.len() >= 4 => Some((op, 4, u16::from_be_bytes([b[2], b[3]]) as usize)),
        127 if b.len() >= 10 => {
            let n = u64::from_be_bytes(b[2..10].try_into().expect("eight bytes"));
            Some((op, 10, usize::try_from(n)?))
        }
        126 | 127 => None,
        n => Some((op, 2, n as usize)),
    })
}

impl RawViewer {
    /// Joins `session` on the server at `base` (`http://host:port`) as a guest of share link
    /// `share` named `name`.
    pub async fn connect(base: &str, session: &str, share: &str, name: &str) -> Result<Self> {
        let host = base
            .trim_end_matches('/')
            .strip_prefix("http://")
            .context("the raw viewer speaks plain http")?;
        let mut tcp = TcpStream::connect(host).await?;
        tcp.set_nodelay(true)?;
        let req = format!(
            "GET /api/sessions/{session}/live?share={}&name={} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            encode(share),
            encode(name)
        );
        tcp.write_all(req.as_bytes()).await?;
        let mut buf = vec![0u8; BUF];
        let mut end = 0;
        let head = loop {
            let n = tcp.read(&mut buf[end..]).await?;
            if n == 0 {
                bail!("the server closed during the handshake");
            }
            end += n;
            if let Some(i) = memchr::memmem::find(&buf[..end], b"\r\n\r\n") {
                break i + 4;
            }
            if end == buf.len() {
                bail!("the handshake's answer is too long");
            }
        };
        if !buf.starts_with(b"HTTP/1.1 101") {
            bail!(
                "no upgrade: {}",
                String::from_utf8_lossy(&buf[..head.min(300)])
            );
        }
        Ok(Self {
            tcp,
            buf,
            start: head,
            end,
        })
    }

    /// The bytes of a [`Frame::Terminal`], valid until the next call to [`Self::next`].
    pub fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// The next data frame; pings are answered on the way.
    pub async fn next(&mut self) -> Result<Frame> {
        loop {
            if let Some((op, head, len)) = header(&self.buf[self.start..self.end])? {
                if head + len > ROOM {
                    bail!("a frame of {len} bytes, over the server's largest");
                }
                if self.end - self.start >= head + len {
                    let p = self.start + head;
                    self.start = p + len;
                    match op {
                        2 if len >= 4 => return Ok(Frame::Terminal(p + 4..p + len)),
                        1 => return Ok(Frame::Text),
                        8 => {
                            let code = (len >= 2)
                                .then(|| u16::from_be_bytes([self.buf[p], self.buf[p + 1]]));
                            return Ok(Frame::Closed(code));
                        }
                        9 => {
                            // A pong carrying the ping's payload, masked with zeros.
                            let mut pong = vec![0x8a, 0x80 | len as u8, 0, 0, 0, 0];
                            pong.extend_from_slice(&self.buf[p..p + len]);
                            self.tcp.write_all(&pong).await?;
                        }
                        10 => {}
                        op => bail!("an unexpected frame (opcode {op}, {len} bytes)"),
                    }
                    continue;
                }
            }
            if self.start == self.end {
                (self.start, self.end) = (0, 0);
            } else if self.buf.len() - self.end < ROOM {
                self.buf.copy_within(self.start..self.end, 0);
                (self.start, self.end) = (0, self.end - self.start);
            }
            let n = self.tcp.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return Ok(Frame::End);
            }
            self.end += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_each_length_form() {
        assert_eq!(header(&[0x82]).unwrap(), None);
        assert_eq!(header(&[0x82, 5]).unwrap(), Some((2, 2, 5)));
        assert_eq!(header(&[0x81, 126, 1]).unwrap(), None);
        assert_eq!(header(&[0x82, 126, 1, 0]).unwrap(), Some((2, 4, 256)));
        let mut long = vec![0x82, 127];
        long.extend_from_slice(&70_000u64.to_be_bytes());
        assert_eq!(header(&long).unwrap(), Some((2, 10, 70_000)));
        assert!(header(&[0x02, 1]).is_err(), "fragment");
        assert!(header(&[0x82, 0x81]).is_err(), "masked");
    }

    /// A frame cut by the socket's reads (7 bytes at a time) comes out whole, and one over the
    /// server's largest frame is refused, not misread. (The server's JSON messages are small: a
    /// text frame over that bound is refused too.)
    #[tokio::test]
    async fn frames_cut_by_reads_come_out_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 4096];
            let mut n = 0;
            while !req[..n].ends_with(b"\r\n\r\n") {
                n += s.read(&mut req[n..]).await.unwrap();
            }
            let mut out = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
            let big = vec![b'z'; 70_000 - 4];
            for payload in [&b"ab"[..], &big] {
                let mut f = 7u32.to_be_bytes().to_vec();
                f.extend_from_slice(payload);
                match f.len() {
                    n if n < 126 => out.extend_from_slice(&[0x82, n as u8]),
                    n if n < 65536 => {
                        out.extend_from_slice(&[0x82, 126]);
                        out.extend_from_slice(&(n as u16).to_be_bytes());
                    }
                    n => {
                        out.extend_from_slice(&[0x82, 127]);
                        out.extend_from_slice(&(n as u64).to_be_bytes());
                    }
                }
                out.extend_from_slice(&f);
            }
            out.extend_from_slice(&[0x89, 2, b'h', b'i', 0x81, 2, b'{', b'}']);
            out.extend_from_slice(&[0x88, 2, 0x0f, 0xa1]);
            // Written in pieces of 7 bytes: every header and payload is cut somewhere.
            for piece in out.chunks(7) {
                s.write_all(piece).await.unwrap();
                s.flush().await.unwrap();
            }
            let mut pong = [0u8; 8];
            s.read_exact(&mut pong).await.unwrap();
            pong
        });
        let mut v = RawViewer::connect(&format!("http://{addr}"), "s", "t", "V 1")
            .await
            .unwrap();
        let Frame::Terminal(r) = v.next().await.unwrap() else {
            panic!("the first output")
        };
        assert_eq!(v.bytes(r), b"ab");
        // 70,000 bytes is over the largest frame the server sends: refused, not misread.
        assert!(v.next().await.is_err());
        drop(v);
        let _ = server.await;
    }

    #[tokio::test]
    async fn pings_are_answered_and_a_close_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 4096];
            let mut n = 0;
            while !req[..n].ends_with(b"\r\n\r\n") {
                n += s.read(&mut req[n..]).await.unwrap();
            }
            let mut out = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
            let mut f = 3u32.to_be_bytes().to_vec();
            f.extend_from_slice(&[b'y'; 300]);
            out.extend_from_slice(&[0x82, 126]);
            out.extend_from_slice(&(f.len() as u16).to_be_bytes());
            out.extend_from_slice(&f);
            out.extend_from_slice(&[0x89, 2, b'h', b'i', 0x81, 2, b'{', b'}']);
            out.extend_from_slice(&[0x88, 2, 0x0f, 0xa1]);
            for piece in out.chunks(7) {
                s.write_all(piece).await.unwrap();
                s.flush().await.unwrap();
            }
            let mut pong = [0u8; 8];
            s.read_exact(&mut pong).await.unwrap();
            (String::from_utf8_lossy(&req[..n]).into_owned(), pong)
        });
        let mut v = RawViewer::connect(&format!("http://{addr}"), "s1", "a b", "V 1")
            .await
            .unwrap();
        let Frame::Terminal(r) = v.next().await.unwrap() else {
            panic!("the output")
        };
        assert_eq!(v.bytes(r), &[b'y'; 300][..]);
        assert_eq!(v.next().await.unwrap(), Frame::Text);
        assert_eq!(v.next().await.unwrap(), Frame::Closed(Some(4001)));
        assert_eq!(v.next().await.unwrap(), Frame::End);
        let (req, pong) = server.await.unwrap();
        assert!(
            req.starts_with("GET /api/sessions/s1/live?share=a%20b&name=V%201 HTTP/1.1\r\n"),
            "{req}"
        );
        assert_eq!(pong, [0x8a, 0x82, 0, 0, 0, 0, b'h', b'i']);
    }
}
