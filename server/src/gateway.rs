//! The gateway: what a workspace may ask of the server, on a unix socket bound read-only into
//! that workspace only (`/run/tandem/gateway/gateway.sock`). It relays model requests to the
//! configured OpenAI-compatible endpoint, adding the API key from the secret store — the key
//! never enters the workspace — and serves the agent's child-session tools, scoped to the
//! workspace's own session. Who is calling is known from which socket they called.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::*;

use crate::snapshots::Workspaces;
use crate::state::AppState;
use crate::{Error, Result, db, sessions, turns};

/// Largest request a workspace may send through the gateway (a long conversation).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// The host directory bound at the gateway's socket directory.
pub fn host_dir(ws: &Workspaces, wid: &str) -> PathBuf {
    crate::runtime::dirs(ws.runtime.as_ref(), wid).gateway
}

/// One listener per workspace.
pub struct Gateways {
    http: reqwest::Client,
    /// For the git relay: follows no redirect (it reaches one repository and nowhere else).
    git_http: reqwest::Client,
    listening: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// Model requests each session made so far (its budget).
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
struct Gw {
    app: AppState,
    wid: String,
    /// Held by every request until its answer's body ends (a streamed answer too): at most
    /// [`MAX_CONCURRENT_REQUESTS`] at once per workspace.
    slots: Arc<tokio::sync::Semaphore>,
}

impl Gateways {
    /// Makes sure workspace `wid`'s gateway is listening.
    pub async fn ensure(&self, app: &AppState, wid: &str) -> Result<()> {
        let ws = app.workspaces()?;
        let dir = host_dir(&ws, wid);
        let path = dir.join(
            std::path::Path::new(agent::GATEWAY_SOCKET)
                .file_name()
                .unwrap_or_default(),
        );
        let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
        // A restarted workspace (resume) gets a fresh directory: the old socket is gone.
        if listening.get(wid).is_some_and(|h| !h.is_finished()) && path.exists() {
            return Ok(());
        }
        if let Some(old) = listening.remove(wid) {
            old.abort();
        }
        std::fs::create_dir_all(&dir)?;
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)?;
        // The workspace's root only (not the host's under a user namespace): no other host
        // user, and no other workspace, reaches this workspace's gateway.
        let root = ws.runtime.root_uid();
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
        listening.insert(wid.to_string(), task);
        Ok(())
    }

    /// Stops the listeners of workspaces not in `live`.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.listening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|wid, task| {
                let keep = live.contains(wid) && !task.is_finished();
                if !keep {
                    task.abort();
                }
                keep
            });
    }
}

fn router() -> Router<Gw> {
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
        db::sessions::by_workspace(self.app.db.pool(), &self.wid)
            .await?
            .ok_or_else(|| Error::Forbidden("this workspace belongs to no live session".into()))
    }

    /// Who the agent acts for: the author of the running prompt, as an automation.
    async fn author(&self, session: SessionId) -> Result<Author> {
        let running = db::prompts::running(self.app.db.pool(), session).await?;
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

async fn upstream(g: &Gw, path: &str, body: Option<Bytes>) -> Result<Response> {
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

async fn chat(State(g): State<Gw>, body: Bytes) -> Result<Response> {
    let session = g.session().await?;
    let cap = g.app.config.agents.max_model_requests_per_session;
    // Counted in the store: the budget holds across restarts and across a cluster's servers.
    let counted =
        crate::db::sessions::count_model_request(g.app.db.pool(), session, cap.into()).await?;
    if counted.is_none() {
        return Err(Error::TooMany(format!(
            "this session's model budget is used up ({cap} requests; max_model_requests_per_session under [agents])"
        )));
    }
    upstream(&g, "chat/completions", Some(body)).await
}

async fn models(State(g): State<Gw>) -> Result<Response> {
    upstream(&g, "models", None).await
}

async fn spawn_children(
    State(g): State<Gw>,
    Json(req): Json<CreateChildren>,
) -> Result<(StatusCode, Json<Vec<Session>>)> {
    let session = g.session().await?;
    let author = g.author(session).await?;
    Ok((
        StatusCode::CREATED,
        Json(
            sessions::children::spawn(
                &g.app,
                session,
                author,
                req,
                sessions::children::Asker::Workspace,
            )
            .await?,
        ),
    ))
}

async fn child_status(
    State(g): State<Gw>,
    Path(id): Path<SessionId>,
) -> Result<Json<ChildSession>> {
    let session = g.session().await?;
    sessions::children::child_of(&g.app, session, id).await?;
    let all = sessions::children::list(&g.app, session).await?;
    all.into_iter()
        .find(|c| c.session.id == id)
        .map(Json)
        .ok_or_else(|| Error::NotFound("no such child".into()))
}

async fn child_prompt(
    State(g): State<Gw>,
    Path(id): Path<SessionId>,
    Json(req): Json<CreatePrompt>,
) -> Result<(StatusCode, Json<Prompt>)> {
    let session = g.session().await?;
    let child = sessions::children::child_of(&g.app, session, id).await?;
    // The child's own agent only: a workspace must not pick a command template.
    if req.agent.as_ref().is_some_and(|a| *a != child.agent) {
        return Err(Error::Forbidden(
            "a session's agent prompts its children with their own agent only".into(),
        ));
    }
    let author = g.author(session).await?;
    let prompt = sessions::prompts::submit(&g.app.db, id, author, req).await?;
    turns::kick(&g.app, id);
    Ok((StatusCode::CREATED, Json(prompt)))
}

async fn child_cancel(State(g): State<Gw>, Path(id): Path<SessionId>) -> Result<Json<Session>> {
    let session = g.session().await?;
    sessions::children::child_of(&g.app, session, id).await?;
    let author = g.author(session).await?;
    sessions::workspace::stop(
        &g.app.db,
        &*g.app.workspaces()?,
        id,
        Some(format!("cancelled by its parent's {}", author.name)),
    )
    .await?;
    Ok(Json(sessions::get(&g.app.db, id).await?.session))
}

/// The session's GitHub credential, for its git credential helper (an installation token for
/// the session's repository only; asking again renews it near expiry).
/// The credential the workspace's git sends to the relay: an opaque secret of this workspace
/// (an HMAC of its id under the agent key, so nothing is stored), good for this gateway only.
/// No GitHub token ever enters a workspace: the relay puts the real one on the upstream
/// request.
pub fn git_secret(ws: &Workspaces, wid: &str) -> String {
    format!(
        "{GIT_SECRET_PREFIX}{}",
        crate::agent::token(&ws.agent_key, &format!("git-credential\0{wid}"))
    )
}

/// Prefix of [`git_secret`]s (so one is recognised if it ever shows up somewhere).
pub const GIT_SECRET_PREFIX: &str = "tgw_";

/// How long the workspace's git may cache the credential (it is re-asked after).
const GIT_SECRET_TTL_SECS: i64 = 3600;

async fn git_credential(State(g): State<Gw>) -> Result<Json<agent::GitCredential>> {
    let session = g.session().await?;
    let gh = crate::github::pr::github(&g.app)?;
    // Only for a session linked to a GitHub repository.
    crate::github::credentials::linked(gh, session).await?;
    let ws = g.app.workspaces()?;
    Ok(Json(agent::GitCredential {
        username: "x-access-token".into(),
        password: git_secret(&ws, &g.wid),
        expires_at: crate::now_ms() / 1000 + GIT_SECRET_TTL_SECS,
    }))
}

/// Checks the workspace's git sent this workspace's [`git_secret`] (Basic auth, any user).
fn check_git_secret(req: &axum::extract::Request, expected: &str) -> Result<()> {
    use base64::Engine;
    let Some(value) = req.headers().get(axum::http::header::AUTHORIZATION) else {
        // git asks its credential helper after a 401.
        return Err(Error::Unauthorized("git needs its credential".into()));
    };
    let given = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|d| String::from_utf8(d).ok())
        .and_then(|up| up.split_once(':').map(|(_, p)| p.to_string()))
        .unwrap_or_default();
    // Compared as digests: how long a comparison takes says nothing about the secret.
    use sha2::Digest;
    if sha2::Sha256::digest(given.as_bytes()) != sha2::Sha256::digest(expected.as_bytes()) {
        return Err(Error::Forbidden(
            "this is not the workspace's git credential".into(),
        ));
    }
    Ok(())
}

/// The agent's `open_pull_request` tool: as the running prompt's author.
async fn pull_request(
    State(g): State<Gw>,
    Json(req): Json<tandem_protocol::github::CreatePr>,
) -> Result<Json<tandem_protocol::github::PullRequest>> {
    let session = g.session().await?;
    // Only while the agent works for someone: the pull request is theirs.
    let author = db::prompts::running(g.app.db.pool(), session)
        .await?
        .map(|p| p.author)
        .ok_or_else(|| {
            Error::Forbidden("a pull request can be opened by the agent only during a turn".into())
        })?;
    Ok(Json(
        crate::github::pr::open(&g.app, session, &author, req).await?,
    ))
}

/// git's smart HTTP to the session's own GitHub repository and nowhere else: the workspace has
/// no network, so its git reaches GitHub through here. git sends the workspace's opaque
/// credential (from its helper); the relay checks it and sends the session's installation
/// token upstream in its place.
async fn git_relay(
    State(g): State<Gw>,
    Path((owner, repo, rest)): Path<(String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response> {
    let session = g.session().await?;
    let slot = g.slot().await?;
    let gh = crate::github::pr::github(&g.app)?;
    let linked = crate::github::credentials::linked(gh, session).await?;
    let name = repo.strip_suffix(".git").unwrap_or(&repo);
    if !owner.eq_ignore_ascii_case(&linked.owner) || !name.eq_ignore_ascii_case(&linked.name) {
        return Err(Error::Forbidden(format!(
            "this workspace may reach {} only",
            linked.full_name()
        )));
    }
    if !matches!(
        rest.as_str(),
        "info/refs" | "git-upload-pack" | "git-receive-pack" | "HEAD"
    ) {
        return Err(Error::NotFound("not a git smart HTTP path".into()));
    }
    let query = match req.uri().query() {
        None => String::new(),
        Some(q @ ("service=git-upload-pack" | "service=git-receive-pack")) => format!("?{q}"),
        Some(_) => {
            return Err(Error::BadRequest(
                "only ?service=git-upload-pack or git-receive-pack".into(),
            ));
        }
    };
    let ws = g.app.workspaces()?;
    if let Err(e) = check_git_secret(&req, &git_secret(&ws, &g.wid)) {
        return Ok(match e {
            Error::Unauthorized(m) => Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"GitHub\"")
                .body(Body::from(m))
                .map_err(|e| Error::Internal(e.to_string()))?,
            other => return Err(other),
        });
    }
    let (_, token) = crate::github::credentials::for_session(gh, session).await?;
    let upstream_auth = {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", token.token))
        )
    };
    let url = format!(
        "{}/{}/{}.git/{rest}{query}",
        gh.config.web_url, linked.owner, linked.name
    );
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .map_err(|_| Error::BadRequest("method".into()))?;
    let mut up = g
        .app
        .gateways
        .git_http
        .request(method, &url)
        .header("authorization", upstream_auth);
    for h in [
        "content-type",
        "content-encoding",
        "accept",
        "git-protocol",
        "user-agent",
    ] {
        if let Some(v) = req.headers().get(h) {
            up = up.header(h, v.as_bytes());
        }
    }
    // A push may update the session's own branch only: its commands are read before anything
    // is sent on.
    let mut data = req.into_body().into_data_stream();
    let mut head = bytes::BytesMut::new();
    if rest == "git-receive-pack" {
        let allowed = crate::github::pr::session_branch(&g.app, session).await?;
        let refs = receive_pack_refs(&mut data, &mut head).await?;
        if let Some(other) = refs
            .iter()
            .find(|r| r.strip_prefix("refs/heads/") != Some(allowed.as_str()))
        {
            return Err(Error::Forbidden(format!(
                "a session may push only its own branch {allowed}, not {other}"
            )));
        }
    }
    let head = head.freeze();
    let body = futures::StreamExt::chain(
        futures::stream::iter((!head.is_empty()).then(|| Ok::<_, std::io::Error>(head))),
        futures::StreamExt::map(data, |r| r.map_err(std::io::Error::other)),
    );
    let res = up
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .map_err(|e| {
            Error::BadGateway(format!(
                "GitHub is not reachable for git: {}",
                e.without_url()
            ))
        })?;
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder().status(status);
    for h in [
        "content-type",
        "www-authenticate",
        "cache-control",
        "expires",
        "pragma",
    ] {
        if let Some(v) = res.headers().get(h) {
            out = out.header(h, v.as_bytes());
        }
    }
    let stream = futures::StreamExt::map(res.bytes_stream(), move |r| {
        let _held = &slot;
        r.map_err(std::io::Error::other)
    });
    out.body(Body::from_stream(stream))
        .map_err(|e| Error::Internal(e.to_string()))
}

/// The agent's `attach_image` tool: the image becomes an artifact of the session (shown in the
/// timeline, linked from the pull request).
async fn attachment(
    State(g): State<Gw>,
    Json(req): Json<agent::Attachment>,
) -> Result<(StatusCode, Json<ArtifactInfo>)> {
    use base64::Engine;
    let session = g.session().await?;
    if !matches!(
        req.content_type.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return Err(Error::Invalid(
            "only PNG, JPEG, GIF and WebP images can be attached".into(),
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(req.data.as_bytes())
        .map_err(|_| Error::Invalid("data is not base64".into()))?;
    if bytes.len() > agent::MAX_ATTACHMENT_BYTES {
        return Err(Error::TooLarge(format!(
            "an attachment is at most {} bytes",
            agent::MAX_ATTACHMENT_BYTES
        )));
    }
    {
        let mut all = g
            .app
            .gateways
            .attachments
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (n, total) = all.entry(session).or_default();
        if *n >= MAX_ATTACHMENTS_PER_SESSION
            || *total + bytes.len() > MAX_ATTACHMENT_BYTES_PER_SESSION
        {
            return Err(Error::TooMany(format!(
                "this session stored all the attachments it may ({MAX_ATTACHMENTS_PER_SESSION}, {} MiB)",
                MAX_ATTACHMENT_BYTES_PER_SESSION >> 20
            )));
        }
        *n += 1;
        *total += bytes.len();
    }
    let name: String = req
        .name
        .chars()
        .filter(|c| !c.is_control() && !matches!(c, '/' | '\\'))
        .take(200)
        .collect();
    let name = if name.trim().is_empty() {
        "image".to_string()
    } else {
        name
    };
    let running = db::prompts::running(g.app.db.pool(), session)
        .await?
        .map(|p| p.id);
    let now = crate::now_ms();
    let info = ArtifactInfo {
        id: ArtifactId(uuid::Uuid::new_v4()),
        session_id: session,
        name: name.clone(),
        content_type: req.content_type.clone(),
        size: bytes.len() as i64,
        created_at: Timestamp(now),
    };
    let mut tx = g.app.db.begin().await?;
    db::artifacts::insert(&mut tx, &info, &req.data).await?;
    let kind = EventKind::Attachment {
        prompt_id: running,
        artifact: info.id,
        name,
        content_type: req.content_type,
        size: info.size,
    };
    db::events::append(&mut tx, session, now, kind).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Largest command section of a push (its ref updates) read before deciding.
const MAX_PUSH_COMMANDS_BYTES: usize = 64 * 1024;

/// Reads the ref-update commands at the start of a receive-pack request (pkt-lines up to the
/// first flush), keeping the bytes read in `head`; the refs they name.
async fn receive_pack_refs(
    data: &mut (impl futures::Stream<Item = std::result::Result<Bytes, axum::Error>> + Unpin),
    head: &mut bytes::BytesMut,
) -> Result<Vec<String>> {
    let bad = |why: &str| Error::BadRequest(format!("not a git push: {why}"));
    let mut refs = Vec::new();
    let mut at = 0;
    loop {
        while head.len() < at + 4 {
            let chunk = futures::StreamExt::next(data)
                .await
                .ok_or_else(|| bad("it ended early"))?
                .map_err(|e| bad(&e.to_string()))?;
            head.extend_from_slice(&chunk);
            if head.len() > MAX_PUSH_COMMANDS_BYTES {
                return Err(Error::TooLarge(
                    "a push updates too many refs at once".into(),
                ));
            }
        }
        let len = std::str::from_utf8(&head[at..at + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad("bad pkt-line length"))?;
        if len == 0 {
            return Ok(refs);
        }
        if len < 4 {
            return Err(bad("bad pkt-line length"));
        }
        while head.len() < at + len {
            let chunk = futures::StreamExt::next(data)
                .await
                .ok_or_else(|| bad("it ended early"))?
                .map_err(|e| bad(&e.to_string()))?;
            head.extend_from_slice(&chunk);
            if head.len() > MAX_PUSH_COMMANDS_BYTES {
                return Err(Error::TooLarge(
                    "a push updates too many refs at once".into(),
                ));
            }
        }
        let line = String::from_utf8_lossy(&head[at + 4..at + len]).to_string();
        let line = line.split('\0').next().unwrap_or_default().trim_end();
        // `<old> <new> <ref>`; a signed push (`push-cert`) or anything else is refused.
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(old), Some(new), Some(r)) if old.len() >= 40 && new.len() >= 40 => {
                refs.push(r.to_string())
            }
            (Some("shallow"), Some(_), None) => {}
            _ => return Err(bad(&format!("unexpected command {line:?}"))),
        }
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> String {
        format!("{:04x}{s}", s.len() + 4)
    }

    #[tokio::test]
    async fn push_commands_are_read_before_the_pack() {
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let body = format!(
            "{}{}0000PACK...",
            pkt(&format!(
                "{zero} {one} refs/heads/tandem/x\0report-status\n"
            )),
            pkt(&format!("{one} {zero} refs/heads/main\n"))
        );
        let (a, b) = body.split_at(7);
        let mut data = futures::stream::iter(vec![
            Ok(Bytes::from(a.to_string())),
            Ok(Bytes::from(b.to_string())),
        ]);
        let mut head = bytes::BytesMut::new();
        let refs = receive_pack_refs(&mut data, &mut head).await.unwrap();
        assert_eq!(refs, ["refs/heads/tandem/x", "refs/heads/main"]);
        assert!(
            String::from_utf8_lossy(&head).starts_with(&body[..20]),
            "what was read is kept to send on"
        );
        let mut junk = futures::stream::iter(vec![Ok(Bytes::from_static(b"zzzz"))]);
        assert!(
            receive_pack_refs(&mut junk, &mut bytes::BytesMut::new())
                .await
                .is_err()
        );
    }
}
