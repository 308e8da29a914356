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
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::*;

use crate::Host;
use crate::state::AppState;
use crate::{Error, Result, db, sessions};

mod git_relay;
mod model_relay;
mod tools;
pub use git_relay::*;
use tools::*;

/// Largest request a workspace may send through the gateway (a long conversation).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// One listener per workspace.
pub struct Gateways {
    http: reqwest::Client,
    /// For the git relay: follows no redirect (it reaches one repository and nowhere else).
    git_http: reqwest::Client,
    /// Each workspace's listener, and when it was started.
    listening: Mutex<HashMap<String, (std::time::Instant, tokio::task::JoinHandle<()>)>>,
    /// Attachments (count, bytes) each session stored so far.
    attachments: Mutex<HashMap<SessionId, (u32, usize)>>,
}

/// Most attachments, and attachment bytes, one session's workspace may store.
pub const MAX_ATTACHMENTS_PER_SESSION: u32 = 200;

pub const MAX_ATTACHMENT_BYTES_PER_SESSION: usize = 256 * 1024 * 1024;

/// Most requests one workspace's gateway serves at once (a workspace cannot tie up the
/// server's connections or the model endpoint).
pub const MAX_CONCURRENT_REQUESTS: usize = 16;

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
            listening: Mutex::new(HashMap::new()),
            attachments: Default::default(),
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
}

impl Gateways {
    /// Makes sure workspace `wid`'s gateway is listening.
    pub async fn ensure(&self, app: &AppState, wid: &str) -> Result<()> {
        let host = app.workspaces()?;
        let dir = host.dirs(wid).gateway;
        let path = dir.join(
            std::path::Path::new(agent::GATEWAY_SOCKET)
                .file_name()
                .unwrap_or_default(),
        );
        let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
        // A restarted workspace (resume) gets a fresh directory: the old socket is gone.
        if listening.get(wid).is_some_and(|(_, h)| !h.is_finished()) && path.exists() {
            return Ok(());
        }
        if let Some((_, old)) = listening.remove(wid) {
            old.abort();
        }
        std::fs::create_dir_all(&dir)?;
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)?;
        // The workspace's root only (not the host's under a user namespace): no other host
        // user, and no other workspace, reaches this workspace's gateway.
        let root = host.runtime.root_uid();
        std::os::unix::fs::lchown(&path, Some(root), Some(root))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let router = router().with_state(Gw {
            app: app.clone(),
            wid: wid.to_string(),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS)),
        });
        let wid_owned = wid.to_string();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::warn!(workspace = %wid_owned, error = %e, "a gateway stopped");
            }
        });
        listening.insert(wid.to_string(), (std::time::Instant::now(), task));
        Ok(())
    }

    /// Stops the listeners of workspaces not in `live`. A listener started within the last
    /// minute stays: `live` may have been read before its workspace's turn began.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.listening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|wid, (since, task)| {
                let keep = !task.is_finished()
                    && (live.contains(wid) || since.elapsed() < std::time::Duration::from_secs(60));
                if !keep {
                    task.abort();
                }
                keep
            });
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

pub(super) async fn upstream(g: &Gw, path: &str, body: Option<Bytes>) -> Result<Response> {
    g.session().await?;
    // Taken before the model is asked, given back when its answer's body ends.
    let slot = g.slot().await?;
    let model = g.app.settings.model();
    let base = model.base_url.as_deref().ok_or_else(|| {
        Error::Unavailable(
            "no model is configured: an admin sets it on the Settings page (or model_base_url under [agents] in tandem.toml)"
                .into(),
        )
    })?;
    let key = g.app.secrets.get(&g.app.db, &model.api_key_secret).await?;
    let url = format!("{}/{path}", base.trim_end_matches('/'));
    let mut req = match body {
        Some(b) => g
            .app
            .gateways
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(b),
        None => g.app.gateways.http.get(&url),
    };
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    // The error names the endpoint, never the request (which carries the key).
    let res = req.send().await.map_err(|e| {
        Error::Unavailable(format!(
            "the model endpoint {base} is not reachable: {}",
            e.without_url()
        ))
    })?;
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let stream = futures::StreamExt::map(res.bytes_stream(), move |r| {
        let _held = &slot;
        r.map_err(std::io::Error::other)
    });
    Ok((
        status,
        [("content-type", content_type)],
        Body::from_stream(stream),
    )
        .into_response())
}

/// A model request: checked against the admin's policy (the model pinned, one answer, bounded
/// length, no provider-side tools), then counted against the session tree's budget, then
/// relayed. A refused one costs no budget.
pub(super) async fn chat(State(g): State<Gw>, body: Body) -> Result<Response> {
    let session = g.session().await?;
    let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
        body,
        model_relay::MAX_MODEL_REQUEST_BYTES,
    ))
    .await
    .map_err(|_| {
        Error::TooLarge(format!(
            "a model request is at most {} MiB of JSON",
            model_relay::MAX_MODEL_REQUEST_BYTES >> 20
        ))
    })?
    .to_bytes();
    let agents = &g.app.config.agents;
    let model = g.app.settings.model();
    let body = model_relay::relayable(
        &body,
        &model_relay::Policy {
            model: &model.model,
            allowed_models: &agents.allowed_models,
            max_output_tokens: agents.max_output_tokens,
            provider_tools: &agents.provider_tools,
        },
    )?;
    sessions::budget::take_model_request(
        &g.app.db,
        agents.max_model_requests_per_session,
        session,
    )
    .await?;
    upstream(&g, "chat/completions", Some(body.into())).await
}

pub(super) async fn models(State(g): State<Gw>) -> Result<Response> {
    upstream(&g, "models", None).await
}
