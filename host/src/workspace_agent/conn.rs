//! Connections to a workspace's agent: the connection its runtime provides (checked to lead
//! into the workspace; `runtime/local_agent.rs` here), one request, and the one mapping of the
//! agent's error answers to ours. The agent runs inside the workspace, so everything it says is
//! untrusted input.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use tandem_protocol::ApiError;
use tandem_protocol::agent;

use super::{CALL_TIMEOUT, MAX_ANSWER_BYTES, WorkspaceAgent};
use crate::runtime::AgentStream;
use crate::{Error, Result};

/// The most of an agent's error answer quoted in ours.
const QUOTED_CHARS: usize = 300;

pub(super) fn unreachable(e: &dyn std::fmt::Display) -> Error {
    Error::Unavailable(format!("the workspace agent is not reachable: {e}"))
}

/// What an agent's refusal (`status`, `body`) of `what` becomes. A client error it names (400,
/// 404, 409, 413, 422) keeps its message (from its [`ApiError`], else its first bytes) under
/// that kind; anything else is the agent failing: 503 saying so, its text only in the log
/// (the agent is untrusted, and its own errors can name host paths).
pub(super) fn refused(what: &str, status: StatusCode, body: &[u8]) -> Error {
    let message = serde_json::from_slice::<ApiError>(body)
        .map(|e| e.message)
        .unwrap_or_else(|_| {
            let text: String = String::from_utf8_lossy(body)
                .chars()
                .take(QUOTED_CHARS)
                .collect();
            if text.trim().is_empty() {
                format!("the workspace agent answered {status}")
            } else {
                text
            }
        });
    match status.as_u16() {
        400 => Error::BadRequest(message),
        404 => Error::NotFound(message),
        409 => Error::Conflict(message),
        413 => Error::TooLarge(message),
        422 => Error::Invalid(message),
        _ => {
            tracing::warn!(%status, answer = %message, "{what}: the workspace agent failed");
            Error::Unavailable(format!("{what}: the workspace agent answered {status}"))
        }
    }
}

impl WorkspaceAgent<'_> {
    /// A connection to the agent, as its runtime provides it (checked to lead into the
    /// workspace).
    pub async fn connect(&self) -> Result<AgentStream> {
        self.host
            .runtime
            .connect_agent(&self.workspace, self.instance)
            .await
    }

    /// Sends one request; the answer's body is left to the caller.
    pub(super) async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header("host", "agent")
            .header("authorization", format!("Bearer {}", self.token()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::Internal(e.to_string()))?;
        sender.send_request(req).await.map_err(|e| unreachable(&e))
    }

    /// One request, its whole (bounded) answer.
    pub(super) async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes)> {
        let fut = async {
            let res = self.send(method, path_and_query, body).await?;
            let status = res.status();
            let body = http_body_util::Limited::new(res.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| Error::Internal(format!("reading the agent's answer: {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(CALL_TIMEOUT, fut)
            .await
            .map_err(|_| Error::Unavailable("the workspace agent did not answer in time".into()))?
    }

    /// One request whose answer must have status `want`: its body, or the agent's refusal as
    /// an error about `what`.
    pub(super) async fn expect(
        &self,
        what: &str,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        want: StatusCode,
    ) -> Result<Bytes> {
        let (status, answer) = self.call(method, path_and_query, body).await?;
        if status == want {
            Ok(answer)
        } else {
            Err(refused(what, status, &answer))
        }
    }

    /// A byte tunnel through the agent to `service` on the workspace's loopback (`code`,
    /// `vnc`, `vnc-view`).
    pub async fn tunnel(&self, service: &str) -> Result<hyper::upgrade::Upgraded> {
        self.upgrade(
            &agent::routes::with(agent::routes::TUNNEL, service),
            "tandem-tunnel",
        )
        .await
        .map_err(|e| match e {
            Error::Conflict(status) => Error::Unavailable(format!(
                "{service} is not reachable in the workspace ({status})"
            )),
            e => e,
        })
    }

    /// An idle bridge for the workspace's next connection to its gateway
    /// ([`agent::routes::GATEWAY_BRIDGE`]).
    pub async fn gateway_bridge(&self) -> Result<hyper::upgrade::Upgraded> {
        self.upgrade(agent::routes::GATEWAY_BRIDGE, agent::BRIDGE_PROTOCOL)
            .await
            .map_err(|e| match e {
                Error::Conflict(status) => Error::Unavailable(format!(
                    "the workspace agent keeps no gateway bridges ({status})"
                )),
                e => e,
            })
    }

    /// `GET path` upgraded to `protocol`; an answer other than 101 is a `Conflict` naming its
    /// status.
    async fn upgrade(&self, path: &str, protocol: &str) -> Result<hyper::upgrade::Upgraded> {
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(conn.with_upgrades());
        let req = Request::builder()
            .uri(path)
            .header("host", "agent")
            .header("authorization", format!("Bearer {}", self.token()))
            .header("connection", "upgrade")
            .header("upgrade", protocol)
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| Error::Internal(e.to_string()))?;
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(&e))?;
        if res.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Err(Error::Conflict(res.status().to_string()));
        }
        hyper::upgrade::on(res).await.map_err(|e| unreachable(&e))
    }

    /// A WebSocket to the agent's `path`; a 404 is `not_found` (`what` names it).
    pub(super) async fn websocket(
        &self,
        path: &str,
        what: &str,
    ) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let stream = self.connect().await?;
        let mut req = format!("ws://agent{path}")
            .into_client_request()
            .map_err(|e| Error::Internal(e.to_string()))?;
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.token())
                .parse()
                .map_err(|_| Error::Internal("token header".into()))?,
        );
        let (socket, _) =
            tokio_tungstenite::client_async(req, stream)
                .await
                .map_err(|e| match e {
                    tokio_tungstenite::tungstenite::Error::Http(r)
                        if r.status() == StatusCode::NOT_FOUND =>
                    {
                        Error::NotFound(format!("no {what}"))
                    }
                    e => unreachable(&e),
                })?;
        Ok(socket)
    }
}
