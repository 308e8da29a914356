//! Agent runs: which agent works on a session, prompts and their queue, turns and their usage,
//! child sessions, artifacts, secrets and the audit log (REST bodies under `/api`).

use serde::{Deserialize, Serialize};

use crate::api::{PromptMode, PromptState};
use crate::ids::*;

/// Which agent works on a session's prompts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentSpec {
    /// Tandem's own tool-calling loop against the server's OpenAI-compatible model endpoint.
    #[default]
    Builtin,
    /// OpenCode (`opencode run`), pointed at the same model endpoint.
    Opencode,
    /// Any CLI agent: `template` is run with `sh -c` after `{prompt}` is replaced by the prompt,
    /// shell-quoted (e.g. `claude -p {prompt}`).
    Command { template: String },
    /// No agent: the session is a shared workspace for people; prompts are refused.
    None,
}

impl AgentSpec {
    /// Its name for people and the event log.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Opencode => "opencode",
            Self::Command { .. } => "command",
            Self::None => "none",
        }
    }
}

/// `POST /api/sessions/{id}/prompts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreatePrompt {
    pub text: String,
    /// `queue` (default): after the turn that is running. `steer`: into the running turn at its
    /// next tool boundary (queued like `queue` when no turn runs or the agent cannot be steered).
    #[serde(default)]
    pub mode: PromptMode,
    /// Another agent for this prompt only; default: the session's.
    #[serde(default)]
    pub agent: Option<AgentSpec>,
    /// The page it is about (the Chrome extension).
    #[serde(default)]
    pub context: Option<crate::extension::PageContext>,
}

/// `PATCH /api/sessions/{id}/prompts/{prompt}`: only its author, only while it is queued.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EditPrompt {
    pub text: String,
}

/// Tokens a turn used, as the model reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Model requests made.
    pub requests: i64,
}

impl Usage {
    /// Adds `other` to this.
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.requests += other.requests;
    }
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The agent finished.
    Completed,
    /// Someone stopped it.
    Stopped,
    /// The agent failed (the event says why).
    Failed,
    /// The server or the workspace went away mid-turn; the prompt was queued again.
    Interrupted,
}

impl TurnOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
        }
    }
}

/// How a file changed during a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FileChange {
    Created,
    Modified,
    Deleted,
}

/// `POST /api/sessions/{id}/children`: spawn child sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateChildren {
    pub prompt: String,
    /// Another repo; default: the parent's. Ignored with `fork`.
    #[serde(default)]
    pub repo_id: Option<RepoId>,
    /// How many children get this prompt (1 to [`crate::limits::MAX_FORKS`], default 1).
    #[serde(default)]
    pub variants: Option<i64>,
    /// Start from a copy of the parent's workspace as it is now (default: from the repo's snapshot).
    #[serde(default)]
    pub fork: bool,
    /// Default: the parent's agent.
    #[serde(default)]
    pub agent: Option<AgentSpec>,
}

/// One child session as its parent sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChildSession {
    pub session: crate::api::Session,
    /// Its first prompt's state.
    pub prompt_state: Option<PromptState>,
    /// Paths its diff touches (empty until it has a workspace or kept diff).
    pub files_changed: i64,
}

/// Whether an artifact of this content type is stored base64-encoded (images and other
/// non-text files) and served decoded.
pub fn is_binary_artifact(content_type: &str) -> bool {
    !(content_type.starts_with("text/") || content_type.starts_with("application/json"))
}

/// A large output kept whole, referenced from a truncated event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactInfo {
    pub id: ArtifactId,
    pub session_id: SessionId,
    pub name: String,
    pub content_type: String,
    pub size: i64,
    pub created_at: Timestamp,
}

/// An image with a prompt, kept as an artifact of its session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromptImage {
    pub artifact: crate::ArtifactId,
    /// Its name where it came from (one line).
    pub name: String,
    pub width: u32,
    pub height: u32,
}

/// `PUT /api/secrets/{name}` (admins): the value is write-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetSecret {
    pub value: String,
}

/// A secret's name and dates; never its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretInfo {
    pub name: String,
    pub updated_at: Timestamp,
}

/// Query string of `GET /api/audit` (admins).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only entries about this session.
    #[serde(default)]
    pub session: Option<SessionId>,
    /// Entries with an id below this (paging back), newest first.
    #[serde(default)]
    pub before: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// One audit entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: i64,
    pub at: Timestamp,
    pub actor_user_id: Option<UserId>,
    pub actor_name: String,
    /// e.g. `session.create`, `session.exec`, `agent.tool`, `agent.file_write`.
    pub action: String,
    /// Usually a session id.
    pub target: String,
    pub detail: serde_json::Value,
}
