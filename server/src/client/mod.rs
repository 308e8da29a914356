//! A typed client for the REST API, used by the `tandem` CLI and the integration tests.

/// The receive-only desktop viewer (in `tandem-media`).
pub use tandem_media::viewer as desktop;
pub mod live;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tandem_protocol::*;

use crate::{Error, Result};

/// Talks to one Tandem server as one caller.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client for `base` (e.g. `http://127.0.0.1:7878`), authenticating with `token` if given.
    pub fn new(base: &str, token: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("tandem-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Internal(format!("HTTP client: {e}")))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (starting with `/api/`), with the token attached.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut rb = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    async fn send<T: DeserializeOwned>(&self, rb: RequestBuilder) -> Result<T> {
        let res = rb
            .send()
            .await
            .map_err(|e| Error::Internal(format!("cannot reach {}: {e}", self.base)))?;
        let status = res.status();
        let bytes = res
            .bytes()
            .await
            .map_err(|e| Error::Internal(format!("reading answer: {e}")))?;
        if status.is_success() {
            // No body (204, 202) reads as `null`, which `()` accepts.
            let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
            return serde_json::from_slice(bytes).map_err(|e| {
                Error::Internal(format!(
                    "unexpected answer from {} ({status}): {e}",
                    self.base
                ))
            });
        }
        let error = serde_json::from_slice::<ApiError>(&bytes).unwrap_or_else(|_| ApiError {
            code: "unknown".into(),
            message: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
        });
        Err(match status {
            StatusCode::UNAUTHORIZED => Error::Unauthorized(error.message),
            StatusCode::FORBIDDEN => Error::Forbidden(error.message),
            StatusCode::NOT_FOUND => Error::NotFound(error.message),
            StatusCode::CONFLICT => Error::Conflict(error.message),
            StatusCode::UNPROCESSABLE_ENTITY => Error::Invalid(error.message),
            s if s.is_client_error() => Error::BadRequest(error.message),
            s => Error::Internal(format!("server answered {s}: {}", error.message)),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.send(self.request(Method::GET, path)).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    pub async fn health(&self) -> Result<Health> {
        self.get("/api/health").await
    }

    pub async fn me(&self) -> Result<User> {
        self.get("/api/me").await
    }

    pub async fn create_token(&self, req: &CreateToken) -> Result<CreatedToken> {
        self.post("/api/tokens", req).await
    }

    pub async fn create_repo(&self, req: &CreateRepo) -> Result<Repo> {
        self.post("/api/repos", req).await
    }

    pub async fn repos(&self) -> Result<Vec<Repo>> {
        self.get("/api/repos").await
    }

    pub async fn repo(&self, id: RepoId) -> Result<Repo> {
        self.get(&format!("/api/repos/{id}")).await
    }

    /// A repo by id or by exact name.
    pub async fn find_repo(&self, id_or_name: &str) -> Result<Repo> {
        if let Ok(id) = id_or_name.parse::<RepoId>() {
            return self.repo(id).await;
        }
        self.repos()
            .await?
            .into_iter()
            .find(|r| r.name == id_or_name)
            .ok_or_else(|| Error::NotFound(format!("no repo named {id_or_name:?}")))
    }

    pub async fn create_session(&self, req: &CreateSession) -> Result<SessionDetail> {
        self.post("/api/sessions", req).await
    }

    pub async fn sessions(&self, repo: Option<RepoId>) -> Result<Vec<Session>> {
        match repo {
            Some(r) => self.get(&format!("/api/sessions?repo_id={r}")).await,
            None => self.get("/api/sessions").await,
        }
    }

    pub async fn session(&self, id: SessionId) -> Result<SessionDetail> {
        self.get(&format!("/api/sessions/{id}")).await
    }

    pub async fn exec(&self, id: SessionId, req: &ExecRequest) -> Result<ExecResult> {
        self.post(&format!("/api/sessions/{id}/exec"), req).await
    }

    pub async fn diff(&self, id: SessionId) -> Result<Diff> {
        self.get(&format!("/api/sessions/{id}/diff")).await
    }

    /// `stop`, `suspend` or `resume`.
    pub async fn session_action(&self, id: SessionId, action: &str) -> Result<SessionDetail> {
        self.send(self.request(Method::POST, &format!("/api/sessions/{id}/{action}")))
            .await
    }

    pub async fn fork(&self, id: SessionId, count: i64) -> Result<Vec<Session>> {
        self.post(&format!("/api/sessions/{id}/fork"), &ForkRequest { count })
            .await
    }

    /// Starts a snapshot build of a repo.
    pub async fn build_snapshot(&self, repo: RepoId) -> Result<Snapshot> {
        self.send(self.request(Method::POST, &format!("/api/repos/{repo}/snapshots")))
            .await
    }

    pub async fn snapshots(&self, repo: RepoId) -> Result<Vec<Snapshot>> {
        self.get(&format!("/api/repos/{repo}/snapshots")).await
    }

    pub async fn snapshot(&self, id: SnapshotId) -> Result<Snapshot> {
        self.get(&format!("/api/snapshots/{id}")).await
    }

    pub async fn events(&self, id: SessionId, after: Seq) -> Result<EventsPage> {
        self.get(&format!("/api/sessions/{id}/events?after={after}"))
            .await
    }

    pub async fn submit_prompt(&self, id: SessionId, req: &CreatePrompt) -> Result<Prompt> {
        self.post(&format!("/api/sessions/{id}/prompts"), req).await
    }

    /// Stops the running turn (a conflict when none runs).
    pub async fn github_repos(&self) -> Result<Vec<tandem_protocol::github::GithubRepo>> {
        self.get("/api/github/repos").await
    }

    pub async fn import_github_repo(&self, full_name: &str) -> Result<Repo> {
        self.post(
            "/api/github/repos",
            &tandem_protocol::github::ImportRepo {
                full_name: full_name.into(),
            },
        )
        .await
    }

    pub async fn open_pr(
        &self,
        id: SessionId,
        req: &tandem_protocol::github::CreatePr,
    ) -> Result<tandem_protocol::github::PullRequest> {
        self.post(&format!("/api/sessions/{id}/pr"), req).await
    }

    pub async fn stop_turn(&self, id: SessionId) -> Result<()> {
        self.send(self.request(Method::POST, &format!("/api/sessions/{id}/turn/stop")))
            .await
    }

    pub async fn children(&self, id: SessionId) -> Result<Vec<ChildSession>> {
        self.get(&format!("/api/sessions/{id}/children")).await
    }

    /// Everyone, with how they sign in (admins).
    pub async fn people(&self) -> Result<Vec<tandem_protocol::people::Person>> {
        self.get("/api/people").await
    }

    /// The person called `name` (admins).
    pub async fn find_person(&self, name: &str) -> Result<tandem_protocol::people::Person> {
        self.people()
            .await?
            .into_iter()
            .find(|p| p.user.name == name || p.user.id.to_string() == name)
            .ok_or_else(|| Error::NotFound(format!("no person called {name:?}")))
    }

    /// Invites someone (admins): the invite and its one-time link.
    pub async fn invite(
        &self,
        req: &tandem_protocol::people::CreateInvite,
    ) -> Result<tandem_protocol::people::CreatedInvite> {
        self.post("/api/people/invites", req).await
    }

    /// Changes a person's role or deactivates them (admins).
    pub async fn update_person(
        &self,
        id: UserId,
        req: &tandem_protocol::people::UpdatePerson,
    ) -> Result<User> {
        self.send(
            self.request(Method::PATCH, &format!("/api/people/{id}"))
                .json(req),
        )
        .await
    }

    /// Stores a secret (admins).
    pub async fn set_secret(&self, name: &str, value: String) -> Result<()> {
        self.send(
            self.request(Method::PUT, &format!("/api/secrets/{name}"))
                .json(&SetSecret { value }),
        )
        .await
    }
}
