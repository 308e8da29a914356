//! A typed client of the live channel (`/api/sessions/{id}/live`), for the CLI and the tests.

use futures::{SinkExt, StreamExt};
use tandem_protocol::SessionId;
use tandem_protocol::live::{
    MAX_OUTPUT_FRAME_BYTES, WsClient, WsServer, decode_terminal, encode_terminal,
};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::{Error, Result};

/// How to authenticate.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// An API token or browser JWT (`Authorization: Bearer`).
    pub token: Option<String>,
    /// A share-link token.
    pub share: Option<String>,
    /// A guest's display name (with a guest share link).
    pub name: Option<String>,
}

/// What arrived.
#[derive(Debug)]
pub enum Incoming {
    Message(Box<WsServer>),
    /// Terminal output: `(terminal, bytes)` — a view of the received frame, not a copy.
    Terminal(u32, bytes::Bytes),
    /// The server closed the channel: its code and reason.
    Closed(Option<u16>, String),
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct LiveClient {
    ws: Socket,
}

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

impl LiveClient {
    /// Opens the live channel of `session` on the server at `base` (`http(s)://host:port`).
    pub async fn connect(base: &str, session: SessionId, creds: &Credentials) -> Result<Self> {
        let ws_base = base
            .trim_end_matches('/')
            .replacen("http://", "ws://", 1)
            .replacen("https://", "wss://", 1);
        let mut url = format!("{ws_base}/api/sessions/{session}/live");
        let mut q = Vec::new();
        if let Some(s) = &creds.share {
            q.push(format!("share={}", encode(s)));
        }
        if let Some(n) = &creds.name {
            q.push(format!("name={}", encode(n)));
        }
        if !q.is_empty() {
            url = format!("{url}?{}", q.join("&"));
        }
        let mut req = url
            .into_client_request()
            .map_err(|e| Error::BadRequest(format!("live URL: {e}")))?;
        if let Some(t) = &creds.token {
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| Error::BadRequest("token".into()))?,
            );
        }
        // Read buffer sized to the server's largest output frame: tungstenite zeroes the
        // buffer's free part before every read, so an oversized one costs on every frame.
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .read_buffer_size(MAX_OUTPUT_FRAME_BYTES + 16);
        let (ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), true)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot open the live channel: {e}")))?;
        Ok(Self { ws })
    }

    pub async fn send(&mut self, m: &WsClient) -> Result<()> {
        let text = serde_json::to_string(m).map_err(|e| Error::Internal(e.to_string()))?;
        self.raw(Message::Text(text.into())).await
    }

    /// Types into a terminal.
    pub async fn input(&mut self, terminal: u32, bytes: &[u8]) -> Result<()> {
        self.raw(Message::Binary(encode_terminal(terminal, bytes).into()))
            .await
    }

    /// Sends any frame (tests send hostile ones).
    pub async fn raw(&mut self, m: Message) -> Result<()> {
        self.ws
            .send(m)
            .await
            .map_err(|e| Error::Unavailable(format!("the live channel: {e}")))
    }

    /// The next thing that arrived; `None` once the socket is gone.
    pub async fn next(&mut self) -> Option<Incoming> {
        loop {
            match self.ws.next().await? {
                Ok(Message::Text(t)) => match serde_json::from_str::<WsServer>(&t) {
                    Ok(m) => return Some(Incoming::Message(Box::new(m))),
                    Err(_) => continue,
                },
                Ok(Message::Binary(b)) => {
                    if let Some((id, _)) = decode_terminal(&b) {
                        return Some(Incoming::Terminal(id, b.slice(4..)));
                    }
                }
                Ok(Message::Close(frame)) => {
                    return Some(Incoming::Closed(
                        frame.as_ref().map(|f| u16::from(f.code)),
                        frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                    ));
                }
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Closes the channel politely.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}
