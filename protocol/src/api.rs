//! Request and response bodies of the REST API (`/api/...`).

use serde::{Deserialize, Serialize};

use crate::ids::*;

/// The body of every error answer: a stable machine-readable `code` and a sentence for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    /// Stable, snake_case: `unauthorized`, `not_found`, `invalid_input`, `payload_too_large`, …
    pub code: String,
    /// What was wrong and, where it helps, what to do about it.
    pub message: String,
}

/// `GET /api/health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `"ok"` when the server answers and its database does too.
    pub status: String,
    /// The server's version.
    pub version: String,
    /// `"sqlite"` or `"postgres"`.
    pub database: String,
    /// Whether this server can start sessions, and why not.
    #[serde(default)]
    pub workspaces: WorkspacesHealth,
    /// What is unsafe in how this server is set up, though sessions run (a same-site
    /// `code_url`).
    #[serde(default)]
    pub warnings: Vec<Problem>,
}

/// `Health::workspaces`: what stops sessions from starting or their agents from running here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkspacesHealth {
    /// Sessions start and the default agent has what it needs.
    pub ready: bool,
    /// Every problem found, the most basic first (no root before no image).
    pub problems: Vec<Problem>,
}

/// Something this server lacks, said the way a person can act on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    pub kind: ProblemKind,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.message, self.fix)
    }
}

impl std::error::Error for Problem {}

/// [`Problem::kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The server does not run as root (workspaces need mounts, cgroups, namespaces).
    Root,
    /// No usable OCI runtime.
    Runtime,
    /// The workspace image is not built.
    Image,
    /// The workspace agent binary is missing.
    AgentBinary,
    /// The agent needs a model and none is configured.
    Model,
    /// VS Code is served on Tandem's own site (`code_url`) or origin
    /// (`unsafe_code_on_tandem_origin`): a warning, sessions run, but workspace pages sit next
    /// to Tandem's.
    CodeOrigin,
}

impl ProblemKind {
    /// True for problems that stop workspaces from starting at all (a missing model only
    /// stops turns).
    pub fn blocks_start(self) -> bool {
        !matches!(self, ProblemKind::Model | ProblemKind::CodeOrigin)
    }
}

/// `POST /api/auth/login`: exchange a one-time login code (`tlc_…`) or an API token (`tdm_…`)
/// for a browser session cookie.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// A one-time login code from a login link, or an API token.
    pub credential: String,
}

/// A person known to Tandem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct User {
    pub id: UserId,
    /// Login name, unique.
    pub name: String,
    pub is_admin: bool,
    pub created_at: Timestamp,
    /// Lower-cased; what links sign-ins (OpenID Connect, invites, Slack) to this person.
    #[serde(default)]
    pub email: Option<String>,
    /// Groups from the identity provider (its group claim), as of the last sign-in.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Set when an admin deactivated them: every credential of theirs stops working.
    #[serde(default)]
    pub deactivated_at: Option<Timestamp>,
}

impl User {
    /// A new, active person.
    pub fn new(id: UserId, name: impl Into<String>, is_admin: bool, created_at: Timestamp) -> Self {
        Self {
            id,
            name: name.into(),
            is_admin,
            created_at,
            email: None,
            groups: Vec::new(),
            deactivated_at: None,
        }
    }
}

/// `POST /api/tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What the token is for, e.g. "laptop CLI".
    pub name: String,
    /// Lifetime in seconds; none means the token does not expire.
    #[serde(default)]
    pub expires_in_secs: Option<i64>,
}

/// An API token's metadata; the secret is shown once, in [`CreatedToken`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenInfo {
    pub id: TokenId,
    pub name: String,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    /// `None`: a full token; `extension`: the Chrome extension's (prompting and reading only).
    #[serde(default)]
    pub scope: Option<String>,
}

/// The answer to `POST /api/tokens`: the only time the secret is ever shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedToken {
    pub info: TokenInfo,
    /// `tdm_…`; send as `Authorization: Bearer <token>`.
    pub token: String,
}

/// `POST /api/repos`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRepo {
    /// Short unique name, e.g. `acme/web`.
    pub name: String,
    /// The git remote (https, ssh, or a local path for self-hosted mirrors).
    pub url: String,
    /// Defaults to `main`.
    #[serde(default)]
    pub default_branch: Option<String>,
    /// Started, unclaimed workspaces to keep ready (default 0).
    #[serde(default)]
    pub warm_pool: Option<i64>,
}

/// `PUT /api/repos/{id}/warm-pool`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetWarmPool {
    /// 0 to [`crate::limits::MAX_WARM_POOL`].
    pub size: i64,
}

/// A git remote plus its workspace recipe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Repo {
    pub id: RepoId,
    pub name: String,
    pub url: String,
    pub default_branch: String,
    pub created_by: UserId,
    pub created_at: Timestamp,
    /// Started, unclaimed workspaces to keep ready.
    pub warm_pool: i64,
    /// How many are ready right now.
    #[serde(default)]
    pub warm_ready: i64,
    /// Who may use it besides its grants (`crate::people`).
    #[serde(default)]
    pub access: crate::people::RepoAccess,
}

/// Where a session's lifecycle is. See PRODUCT.md: queued → starting → ready → running ⇄ idle → stopped/failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Accepted, waiting for a workspace.
    Queued,
    /// Workspace booting.
    Starting,
    /// Workspace up, no turn running.
    Ready,
    /// The agent is working on a prompt.
    Running,
    /// Between turns, workspace kept warm.
    Idle,
    /// Workspace kept on disk, no processes.
    Suspended,
    /// Ended on request; its diff is kept.
    Stopped,
    /// Ended by an error; the reason is in the event log.
    Failed,
}

impl SessionState {
    /// The states in which a session has a live workspace.
    pub const LIVE: [SessionState; 3] = [Self::Ready, Self::Running, Self::Idle];

    /// True when a session in this state has a live workspace.
    pub fn is_live(self) -> bool {
        Self::LIVE.contains(&self)
    }

    /// The snake_case name used on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Running => "running",
            Self::Idle => "idle",
            Self::Suspended => "suspended",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "starting" => Self::Starting,
            "ready" => Self::Ready,
            "running" => Self::Running,
            "idle" => Self::Idle,
            "suspended" => Self::Suspended,
            "stopped" => Self::Stopped,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

/// Who wrote a prompt or did an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Author {
    /// Where it came from.
    pub kind: AuthorKind,
    /// The user, when a signed-in user did it.
    pub user_id: Option<UserId>,
    /// A display name for people.
    pub name: String,
}

/// The surface an author acted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AuthorKind {
    /// A signed-in user (web app, CLI, API token).
    User,
    /// A share-link guest.
    Guest,
    /// Slack.
    Slack,
    /// The Chrome extension.
    Extension,
    /// An automation (schedule, parent session).
    Automation,
}

/// How a prompt is delivered relative to the turn that is running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PromptMode {
    /// After the current turn (FIFO).
    #[default]
    Queue,
    /// Interrupt the current turn at its next tool boundary.
    Steer,
}

/// Where a prompt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PromptState {
    /// Waiting for its turn.
    Queued,
    /// Its turn is running.
    Running,
    /// Its turn completed.
    Done,
    /// Its turn was stopped.
    Stopped,
    /// Its turn failed.
    Failed,
    /// Its author took it back before it started.
    Withdrawn,
    /// A steering prompt that reached a running turn.
    Delivered,
    /// Interrupted too many times (server or workspace restarts) to be queued again; resubmit it.
    Interrupted,
}

impl PromptState {
    /// The snake_case name used on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Withdrawn => "withdrawn",
            Self::Delivered => "delivered",
            Self::Interrupted => "interrupted",
        }
    }
}

/// `POST /api/sessions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    pub repo_id: RepoId,
    /// The first prompt; may be empty only with agent `none`.
    #[serde(default)]
    pub prompt: String,
    /// Default: the server's default agent.
    #[serde(default)]
    pub agent: Option<crate::turn::AgentSpec>,
    /// The branch to start from; defaults to the repo's default branch.
    #[serde(default)]
    pub branch: Option<String>,
    /// The page the first prompt is about (the Chrome extension).
    #[serde(default)]
    pub context: Option<crate::extension::PageContext>,
}

/// One session, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    pub id: SessionId,
    pub repo_id: RepoId,
    /// The repo's name, for display.
    pub repo_name: String,
    pub state: SessionState,
    /// A short title (the first line of the first prompt).
    pub title: String,
    pub branch: String,
    pub author: Author,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The sequence number of the newest event.
    pub last_seq: Seq,
    /// The session this one was forked from.
    #[serde(default)]
    pub parent_id: Option<SessionId>,
    /// The agent that works on its prompts.
    #[serde(default)]
    pub agent: crate::turn::AgentSpec,
    /// People connected to it right now (on this server), in lists.
    #[serde(default)]
    pub participants: i64,
    /// Private: only its owner and the people they shared it with see it.
    #[serde(default)]
    pub private: bool,
}

/// One prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prompt {
    pub id: PromptId,
    pub session_id: SessionId,
    pub author: Author,
    pub text: String,
    pub mode: PromptMode,
    pub state: PromptState,
    pub created_at: Timestamp,
    /// The agent for this prompt only, when not the session's.
    #[serde(default)]
    pub agent: Option<crate::turn::AgentSpec>,
    /// How many times its turn was interrupted by a restart.
    #[serde(default)]
    pub attempts: i64,
    /// The page it is about, with its screenshots as artifacts (the Chrome extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::extension::PromptContext>,
    /// Images that came with it (a Slack message and its thread), kept as artifacts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::turn::PromptImage>,
}

/// `GET /api/sessions/{id}`: the session with its prompts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionDetail {
    pub session: Session,
    pub prompts: Vec<Prompt>,
    /// Model requests its session tree has made (the budget's use: a session, the children its
    /// agent spawns and forks share their root's budget), and that budget (an automation run's,
    /// or the server's most per tree).
    #[serde(default)]
    pub model_requests: i64,
    #[serde(default)]
    pub model_request_limit: Option<i64>,
}

/// Query string of `GET /api/sessions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct SessionFilter {
    #[serde(default)]
    pub repo_id: Option<RepoId>,
    #[serde(default)]
    pub state: Option<SessionState>,
    /// At most [`crate::limits::MAX_LIST`].
    #[serde(default)]
    pub limit: Option<i64>,
}

/// Query string of `GET /api/sessions/{id}/events`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Return events with a sequence number greater than this (0 = from the start).
    #[serde(default)]
    pub after: Option<i64>,
    /// At most [`crate::limits::MAX_EVENTS_PAGE`].
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `POST /api/sessions/{id}/exec`: run a shell command in the session's workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Run with `sh -c`.
    pub command: String,
    /// Working directory; default `/workspace`.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Kill it after this many seconds (default 600, at most 3600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// What a command did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecResult {
    /// Exit code; 137 when killed (timeout, memory limit).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// True when output beyond 1 MiB per stream was dropped.
    pub truncated: bool,
    pub duration_ms: i64,
}

/// `POST /api/sessions/{id}/code`: where the session's VS Code opens for the person asking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CodeLink {
    /// The URL to load (in a frame): on VS Code's own origin for this session, with a ticket
    /// for this person and session only in its path.
    pub url: String,
    /// False where the server has no origin for VS Code (it then shares Tandem's; the book's
    /// VS Code chapter says what that costs).
    pub isolated: bool,
}

/// `GET /api/sessions/{id}/diff`: the session's changes against the commit it started from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diff {
    /// The commit the workspace started from.
    pub base: Option<String>,
    /// Unified diff (`git diff`), including new files.
    pub patch: String,
    /// Paths changed.
    pub files: Vec<String>,
    pub truncated: bool,
}

/// `POST /api/sessions/{id}/fork`: N new sessions from identical copies of a running session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// 1 to [`crate::limits::MAX_FORKS`].
    pub count: i64,
}

/// `POST /api/sessions/{id}/git/commit`: commit every change in the checkout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GitCommitRequest {
    pub message: String,
}
