//! The gateway: what a workspace may ask of the server, on a unix socket bound read-only into
//! that workspace only (`/run/tandem/gateway/gateway.sock`). It relays model requests to the
//! configured OpenAI-compatible endpoint, adding the API key from the secret store — the key
//! never enters the workspace — and serves the agent's child-session tools, scoped to the
//! workspace's own session. Who is calling is known from which socket they called.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::*;

use crate::Host;
use crate::state::AppState;
use crate::{Error, Result, db, sessions};

mod chat;
mod egress;
mod git_relay;
mod mcp;
mod mcp_server;
mod model_relay;
mod tools;
mod usage;
use chat::*;
pub use git_relay::*;
use tools::*;

/// Largest request a workspace may send through the gateway (a long conversation).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// One listener per workspace.
pub struct Gateways {
    http: reqwest::Client,
    /// For the git relay: follows no redirect (it reaches one repository and nowhere else).
    git_http: reqwest::Client,
    /// Each workspace's listener: when it was started, for which start of the workspace.
    listening: Mutex<HashMap<String, Listening>>,
    /// One [`Gateways::ensure`] at a time: two must not both make a workspace's listener.
    ensuring: tokio::sync::Mutex<()>,
    /// Attachments (count, bytes) each session stored so far.
    attachments: Mutex<HashMap<SessionId, (u32, usize)>>,
    /// Bytes of model requests being read and parsed now, server-wide ([`MAX_PARSING_BYTES`]).
    parsing: Arc<tokio::sync::Semaphore>,
    /// Connections to the remote MCP servers.
    mcp: mcp::McpClients,
}

/// A workspace's gateway listener.
struct Listening {
    since: std::time::Instant,
    /// The start of the workspace it serves ([`tandem_host::runtime::Workspace::instance`]).
    instance: i32,
    task: tokio::task::JoinHandle<()>,
}

/// Most attachments, and attachment bytes, one session's workspace may store.
pub const MAX_ATTACHMENTS_PER_SESSION: u32 = 200;

pub const MAX_ATTACHMENT_BYTES_PER_SESSION: usize = 256 * 1024 * 1024;

/// Most requests one workspace's gateway serves at once (a workspace cannot tie up the
/// server's connections or the model endpoint).
pub const MAX_CONCURRENT_REQUESTS: usize = 16;

/// Most bytes of model requests the whole server reads and parses at once, every workspace
/// together: a request parsed into JSON values takes many times its bytes, so this bounds the
/// relay's memory however many workspaces ask. A request waits for its share of it (the bytes
/// its `Content-Length` declares, else the most a request may be); none is refused for want of
/// one.
pub const MAX_PARSING_BYTES: usize = 64 * 1024 * 1024;

/// Most of [`MAX_PARSING_BYTES`] one workspace holds at once: one workspace cannot take it all.
pub const MAX_PARSING_BYTES_PER_WORKSPACE: usize = MAX_REQUEST_BYTES;

/// How long a model request's body has to arrive once its share of [`MAX_PARSING_BYTES`] is
/// held (an agent writes its request at once; a trickle cannot keep the share).
pub const MODEL_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for Gateways {
    fn default() -> Self {
        // No overall timeout: a streamed answer takes as long as the model writes.
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        let git_http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            http,
            git_http,
            ensuring: tokio::sync::Mutex::new(()),
            listening: Mutex::new(HashMap::new()),
            attachments: Default::default(),
            parsing: Arc::new(tokio::sync::Semaphore::new(MAX_PARSING_BYTES)),
            mcp: Default::default(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Gw {
    app: AppState,
    wid: String,
    /// Held by every request until its answer's body ends (a streamed answer too): at most
    /// [`MAX_CONCURRENT_REQUESTS`] at once per workspace.
    slots: Arc<tokio::sync::Semaphore>,
    /// This workspace's bytes of model requests being read and parsed now
    /// ([`MAX_PARSING_BYTES_PER_WORKSPACE`]).
    parsing: Arc<tokio::sync::Semaphore>,
}

impl Gateways {
    /// Makes sure workspace `wid`'s gateway is listening for its start `instance`.
    pub async fn ensure(&self, app: &AppState, wid: &str, instance: i32) -> Result<()> {
        let host = app.workspaces()?;
        let _one = self.ensuring.lock().await;
        {
            let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
            // A restarted workspace (resume) needs a fresh listener: the old one is gone.
            if listening
                .get(wid)
                .is_some_and(|l| !l.task.is_finished() && l.instance == instance)
                && host.runtime.gateway_listening(wid)
            {
                return Ok(());
            }
            if let Some(old) = listening.remove(wid) {
                old.task.abort();
            }
        }
        // Where the workspace's connections arrive is the runtime's to say (the workspace's
        // root only, locally).
        let listener = Accepting(host.listen_gateway(wid, instance).await?);
        let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
        let gw = Gw {
            app: app.clone(),
            wid: wid.to_string(),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS)),
            parsing: Arc::new(tokio::sync::Semaphore::new(MAX_PARSING_BYTES_PER_WORKSPACE)),
        };
        let metrics = app.metrics.clone();
        let router = router()
            .with_state(gw.clone())
            .nest_service(agent::MCP_SERVER_PATH, mcp_server::service(gw))
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let metrics = metrics.clone();
                    async move {
                        let route = route_label(req.uri().path());
                        let res = next.run(req).await;
                        metrics.gateway_request(route, res.status().as_u16());
                        res
                    }
                },
            ));
        // A request to reach out (the workspace's egress proxy) is not one for a route.
        let egress_wid = wid.to_string();
        let service = tower::ServiceBuilder::new()
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let wid = egress_wid.clone();
                    async move {
                        if egress::asks_out(&req) {
                            egress::serve(&wid, req).await
                        } else {
                            next.run(req).await
                        }
                    }
                },
            ))
            .service(router);
        let service = axum::ServiceExt::<axum::extract::Request>::into_make_service(service);
        let wid_owned = wid.to_string();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, service).await {
                tracing::warn!(workspace = %wid_owned, error = %e, "a gateway stopped");
            }
        });
        listening.insert(
            wid.to_string(),
            Listening {
                since: std::time::Instant::now(),
                instance,
                task,
            },
        );
        Ok(())
    }

    /// Stops the listeners of workspaces not in `live`. A listener started within the last
    /// minute stays: `live` may have been read before its workspace's turn began.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.listening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|wid, l| {
                let keep = !l.task.is_finished()
                    && (live.contains(wid)
                        || l.since.elapsed() < std::time::Duration::from_secs(60));
                if !keep {
                    l.task.abort();
                }
                keep
            });
    }
}

/// A gateway request's route for the metrics: one of a fixed few (a workspace names the rest
/// of the path, and must not grow the metrics' labels).
fn route_label(path: &str) -> &'static str {
    const EXACT: &[&str] = &[
        "/v1/chat/completions",
        "/v1/models",
        agent::GIT_CREDENTIAL_PATH,
        agent::PULL_REQUEST_PATH,
        agent::ATTACHMENT_PATH,
        agent::MCP_TOOLS_PATH,
        agent::MCP_CALL_PATH,
        agent::APPROVAL_PATH,
    ];
    if let Some(p) = EXACT.iter().find(|p| **p == path) {
        return p;
    }
    if path.starts_with("/tandem/children") {
        "/tandem/children"
    } else if path.starts_with(agent::GIT_RELAY_PREFIX) {
        "/git"
    } else if path.starts_with(agent::MCP_SERVER_PATH) {
        agent::MCP_SERVER_PATH
    } else {
        "other"
    }
}

pub(super) fn router() -> Router<Gw> {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/tandem/children", post(spawn_children))
        .route("/tandem/children/{id}", get(child_status))
        .route("/tandem/children/{id}/prompts", post(child_prompt))
        .route("/tandem/children/{id}/cancel", post(child_cancel))
        .route(agent::GIT_CREDENTIAL_PATH, post(git_credential))
        .route(agent::PULL_REQUEST_PATH, post(pull_request))
        .route(agent::ATTACHMENT_PATH, post(attachment))
        .route(agent::MCP_TOOLS_PATH, get(mcp::tools))
        .route(agent::MCP_CALL_PATH, post(mcp::call))
        .route(agent::APPROVAL_PATH, post(mcp::approval))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        // A push can be far larger than any model request: streamed through, never buffered.
        .route(
            &format!("{}{{owner}}/{{repo}}/{{*rest}}", agent::GIT_RELAY_PREFIX),
            axum::routing::any(git_relay).layer(DefaultBodyLimit::disable()),
        )
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            MAX_CONCURRENT_REQUESTS,
        ))
}

impl Gw {
    /// A slot for a streamed answer, kept by its body until it ends.
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Internal("the gateway is closing".into()))
    }

    /// The session this workspace belongs to now.
    async fn session(&self) -> Result<SessionId> {
        db::sessions::by_workspace(&self.app.db, &self.wid)
            .await?
            .ok_or_else(|| Error::Forbidden("this workspace belongs to no live session".into()))
    }

    /// Whether the policy lets the agent take Tandem's own `action` here (asking a driver
    /// where it says so); refused with the reason the agent reads.
    async fn gate(
        &self,
        session: SessionId,
        action: &str,
        arguments: serde_json::Value,
    ) -> Result<()> {
        let repo = sessions::get(&self.app.db, session)
            .await?
            .session
            .repo_name;
        let timeout = std::time::Duration::from_secs(self.app.config.agents.approval_timeout_secs);
        let d = crate::approvals::gate_action(
            &self.app.db,
            session,
            &repo,
            action,
            &arguments,
            timeout,
        )
        .await?;
        match d.allowed {
            true => Ok(()),
            false => Err(Error::Forbidden(
                d.message.unwrap_or_else(|| "denied".into()),
            )),
        }
    }

    /// Who the agent acts for: the author of the running prompt, as an automation.
    async fn author(&self, session: SessionId) -> Result<Author> {
        let running = db::prompts::running(&self.app.db, session).await?;
        let (user_id, name) = match running {
            Some(p) => (p.author.user_id, p.author.name),
            None => {
                let s = sessions::get(&self.app.db, session).await?.session;
                (s.author.user_id, s.author.name)
            }
        };
        Ok(Author {
            kind: AuthorKind::Automation,
            user_id,
            name: format!("agent for {name}"),
        })
    }
}

/// The configured model endpoint and its key: checked before a request is counted.
struct Endpoint {
    base: String,
    key: Option<String>,
}

impl Gw {
    async fn endpoint(&self) -> Result<Endpoint> {
        let model = self.app.settings.model();
        let base = model.base_url.clone().ok_or_else(|| {
            Error::Unavailable(
                "no model is configured: an admin sets it on the Settings page (or model_base_url under [agents] in tandem.toml)"
                    .into(),
            )
        })?;
        let key = self
            .app
            .secrets
            .get(&self.app.db, &model.api_key_secret)
            .await?;
        Ok(Endpoint { base, key })
    }

    /// Waits for this request's share of the bytes being parsed (the workspace's, then the
    /// server's), then reads its body. The shares are held until they are dropped: once the
    /// request is parsed and written again.
    async fn read_model_request(
        &self,
        headers: &axum::http::HeaderMap,
        body: Body,
    ) -> Result<(Bytes, Shares)> {
        let limit = model_request_limit(headers)?;
        let shares = Shares::take(&self.parsing, &self.app.gateways.parsing, limit).await?;
        let body = read_body(body, limit, MODEL_BODY_TIMEOUT).await?;
        Ok((body, shares))
    }
}

/// The most a model request's body may be: its `Content-Length`, else the most any may be (a
/// 413 at once for a declared length past it).
fn model_request_limit(headers: &axum::http::HeaderMap) -> Result<usize> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    match declared {
        Some(n) if n > model_relay::MAX_MODEL_REQUEST_BYTES => Err(Error::TooLarge(format!(
            "a model request is at most {} MiB of JSON; this one declares {n} bytes",
            model_relay::MAX_MODEL_REQUEST_BYTES >> 20
        ))),
        Some(n) => Ok(n),
        None => Ok(model_relay::MAX_MODEL_REQUEST_BYTES),
    }
}

/// A request's share of the bytes being parsed: of its workspace's, and of the server's, given
/// back when dropped.
struct Shares {
    _mine: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

impl Shares {
    /// Waits until `bytes` of `mine`, then of `all`, are free (never fails for want of them).
    async fn take(
        mine: &Arc<tokio::sync::Semaphore>,
        all: &Arc<tokio::sync::Semaphore>,
        bytes: usize,
    ) -> Result<Self> {
        let n = u32::try_from(bytes.clamp(1, MAX_PARSING_BYTES_PER_WORKSPACE))
            .expect("a share fits in u32");
        let closing = |_| Error::Internal("the gateway is closing".into());
        let mine = mine.clone().acquire_many_owned(n).await.map_err(closing)?;
        let all = all.clone().acquire_many_owned(n).await.map_err(closing)?;
        Ok(Self {
            _mine: mine,
            _all: all,
        })
    }
}

/// Reads a body of at most `limit` bytes within `timeout`: past the limit a 413, any other
/// failure to read it a 400 that says what happened.
async fn read_body(body: Body, limit: usize, timeout: std::time::Duration) -> Result<Bytes> {
    let read = http_body_util::BodyExt::collect(http_body_util::Limited::new(body, limit));
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(Error::TooLarge(format!(
            "a model request is at most {limit} bytes of JSON (its Content-Length, at most {} MiB)",
            model_relay::MAX_MODEL_REQUEST_BYTES >> 20
        ))),
        Ok(Err(e)) => Err(Error::BadRequest(format!(
            "the model request's body could not be read ({e}); send it whole, with a Content-Length that matches it"
        ))),
        Err(_) => Err(Error::BadRequest(format!(
            "the model request's body did not arrive within {timeout:?}; send it whole at once"
        ))),
    }
}

impl Endpoint {
    async fn send(
        &self,
        g: &Gw,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let url = format!("{}/{path}", self.base.trim_end_matches('/'));
        let http = &g.app.gateways.http;
        let mut req = match body {
            Some(b) => http
                .post(&url)
                .header("content-type", "application/json")
                .body(b),
            None => http.get(&url),
        };
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        req.send().await
    }

    /// The 503 a workspace gets when the endpoint cannot be reached. It names the endpoint by
    /// its scheme, host and port only: a key in the configured URL (user info, a query) never
    /// reaches the workspace, nor does the request (which carries the key).
    fn unreachable(&self, e: reqwest::Error) -> Error {
        Error::Unavailable(format!(
            "the model endpoint {} is not reachable: {}",
            origin(&self.base),
            e.without_url()
        ))
    }
}

/// `url`'s scheme, host and port, and nothing else of it.
fn origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.has_host() => u.origin().ascii_serialization(),
        _ => "(as configured)".into(),
    }
}

/// A runtime's gateway listener, as axum serves it.
struct Accepting(Box<dyn tandem_host::runtime::GatewayListener>);

impl axum::serve::Listener for Accepting {
    type Io = tandem_host::runtime::AgentStream;
    type Addr = ();

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(io) => return (io, ()),
                Err(e) => {
                    // Out of descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "a gateway could not accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::body::{Body, Bytes};
    use futures::FutureExt;
    use tokio::sync::Semaphore;

    use super::*;

    fn body_of(chunks: Vec<std::io::Result<&'static str>>) -> Body {
        Body::from_stream(futures::stream::iter(
            chunks.into_iter().map(|c| c.map(Bytes::from)),
        ))
    }

    #[tokio::test]
    async fn a_body_that_breaks_is_a_400_and_only_one_past_its_limit_a_413() {
        let broken = body_of(vec![
            Ok("{\"messages\""),
            Err(std::io::Error::other("reset")),
        ]);
        let err = read_body(broken, 1000, MODEL_BODY_TIMEOUT)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BadRequest(_)), "{err}");
        assert!(err.to_string().contains("could not be read"), "{err}");
        let long = body_of(vec![Ok("0123456789"), Ok("0123456789")]);
        let err = read_body(long, 15, MODEL_BODY_TIMEOUT).await.unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err}");
        let trickle = Body::from_stream(futures::stream::pending::<std::io::Result<Bytes>>());
        let err = read_body(trickle, 15, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("did not arrive within 50ms"),
            "{err}"
        );
        let fine = body_of(vec![Ok("{}")]);
        assert_eq!(read_body(fine, 2, MODEL_BODY_TIMEOUT).await.unwrap(), "{}");
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("content-length", (64u64 << 20).into());
        let err = model_request_limit(&headers).unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err}");
    }

    #[test]
    fn an_unreachable_endpoint_is_named_by_its_origin_only() {
        assert_eq!(
            origin("https://user:sk-secret@models.example:8443/v1?key=sk-other#k"),
            "https://models.example:8443"
        );
        assert_eq!(origin("http://127.0.0.1:9/v1"), "http://127.0.0.1:9");
        assert_eq!(origin("not a url sk-secret"), "(as configured)");
    }

    /// The bytes being parsed are bounded server-wide and per workspace: past the bound a
    /// request waits (it is not refused) until a share is given back.
    #[tokio::test]
    async fn requests_wait_for_a_share_of_the_bytes_being_parsed() {
        let all = Arc::new(Semaphore::new(MAX_PARSING_BYTES));
        let big = MAX_PARSING_BYTES_PER_WORKSPACE;
        let workspaces: Vec<_> = (0..5)
            .map(|_| Arc::new(Semaphore::new(MAX_PARSING_BYTES_PER_WORKSPACE)))
            .collect();
        let mut held = Vec::new();
        for mine in &workspaces[..MAX_PARSING_BYTES / big] {
            held.push(Shares::take(mine, &all, big).await.unwrap());
        }
        let fifth = Shares::take(&workspaces[4], &all, big);
        tokio::pin!(fifth);
        assert!(
            (&mut fifth).now_or_never().is_none(),
            "the server's bound holds"
        );
        held.pop();
        let fifth = fifth.await.unwrap();
        // One workspace holds at most its own bound, whatever the server has free.
        drop((held, fifth));
        let _one = Shares::take(&workspaces[0], &all, big).await.unwrap();
        let again = Shares::take(&workspaces[0], &all, 1);
        assert!(
            again.now_or_never().is_none(),
            "the workspace's bound holds"
        );
        assert!(
            Shares::take(&workspaces[1], &all, 1)
                .now_or_never()
                .is_some()
        );
    }
}
