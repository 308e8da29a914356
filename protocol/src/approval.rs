//! Tools from MCP servers and the approvals that gate them: the servers an admin configures
//! (`/api/mcp/servers`), the policy per tool (`allow`, `ask`, `deny`), and an approval — a call
//! paused at the tool boundary until a driver answers or it times out.

use serde::{Deserialize, Serialize};

use crate::{ApprovalId, Author, PromptId, SessionId, Timestamp};

/// What the policy says of a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolAction {
    /// Called at once.
    Allow,
    /// Paused until a driver approves it (an unanswered approval is a denial).
    Ask,
    /// Refused; the agent is told why.
    Deny,
}

impl ToolAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

/// One rule: tools whose name matches `tool` (a glob: `*` any run of characters, `?` one)
/// get `action`. The first rule that matches wins; no rule: the tool's own hints decide.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    pub tool: String,
    pub action: ToolAction,
}

/// What a tool says of itself (MCP's annotations; hints, never trusted to widen a rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct ToolHints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub open_world: Option<bool>,
}

/// A remote MCP server (streamable HTTP) the gateway reaches for workspaces, adding its
/// credential; configured by admins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServer {
    /// Letters, digits, `-` and `_`; tools reach the agent as `<name>__<tool>`.
    pub name: String,
    /// `http(s)://…` of its streamable HTTP endpoint.
    pub url: String,
    /// The secret sent as `Authorization: Bearer …` (its name in the secret store).
    pub secret: Option<String>,
    /// Whether that secret is set (its value is never shown).
    pub secret_set: bool,
    /// The repos (`owner/name`) whose sessions get it; empty: every repo.
    pub repos: Vec<String>,
    /// The installation's rules for its tools.
    pub rules: Vec<ToolRule>,
    /// Per-repo rules (`owner/name` → rules), tried before the installation's.
    #[serde(default)]
    pub repo_rules: std::collections::BTreeMap<String, Vec<ToolRule>>,
}

/// Tandem's own actions the agent takes that the policy governs (each allowed unless a rule
/// says otherwise).
pub const ACTIONS: &[&str] = &["open_pull_request", "push", "spawn_sessions"];

/// `GET`/`PUT /api/mcp/actions` (admins): the rules for [`ACTIONS`], the installation's and
/// per repo (tried first).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ActionPolicy {
    pub rules: Vec<ToolRule>,
    pub repo_rules: std::collections::BTreeMap<String, Vec<ToolRule>>,
}

/// `PUT /api/mcp/servers/{name}` (admins): creates or replaces a server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PutMcpServer {
    pub url: String,
    /// The secret's name in the secret store.
    #[serde(default)]
    pub secret: Option<String>,
    /// Stored under `secret` (never shown again).
    #[serde(default)]
    pub secret_value: Option<String>,
    #[serde(default)]
    pub repos: Vec<String>,
    #[serde(default)]
    pub rules: Vec<ToolRule>,
    #[serde(default)]
    pub repo_rules: std::collections::BTreeMap<String, Vec<ToolRule>>,
}

/// What an approval is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalSubject {
    /// A call of an MCP server's tool.
    Tool { server: String, tool: String },
    /// One of Tandem's own actions the agent takes through the gateway ([`ACTIONS`]).
    Action { action: String },
    /// The workspace looked up a name off its egress allow-list (the repo's recipe says to
    /// ask); approved, this session's workspace reaches it.
    Egress { host: String },
}

impl ApprovalSubject {
    /// What "approve for the rest of the session" remembers.
    pub fn grant_key(&self) -> String {
        match self {
            Self::Tool { server, tool } => format!("tool:{server}/{tool}"),
            Self::Egress { host } => format!("egress:{host}"),
            Self::Action { action } => format!("action:{action}"),
        }
    }

    /// In words, for people.
    pub fn describe(&self) -> String {
        match self {
            Self::Tool { server, tool } => format!("call {server}'s tool {tool}"),
            Self::Egress { host } => format!("reach {host} (not on the allow-list)"),
            Self::Action { action } => match action.as_str() {
                "open_pull_request" => "open or update the session's pull request".into(),
                "push" => "push to the session's branch".into(),
                "spawn_sessions" => "start child sessions".into(),
                other => format!("do {other}"),
            },
        }
    }
}

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    /// Nobody answered in time: a denial.
    TimedOut,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::TimedOut => "timed_out",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "approved" => Self::Approved,
            "denied" => Self::Denied,
            "timed_out" => Self::TimedOut,
            _ => return None,
        })
    }
}

/// A call paused at the tool boundary, asking a driver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Approval {
    pub id: ApprovalId,
    pub session_id: SessionId,
    /// The turn that asked.
    pub prompt_id: Option<PromptId>,
    pub subject: ApprovalSubject,
    /// The call's arguments, secrets redacted, cut to [`MAX_APPROVAL_ARGUMENTS_BYTES`].
    pub arguments: serde_json::Value,
    /// Who started the turn that asked.
    pub asked_for: Option<Author>,
    pub state: ApprovalState,
    pub asked_at: Timestamp,
    /// When it becomes a denial if nobody answered.
    pub expires_at: Timestamp,
    pub answered_by: Option<Author>,
    pub answered_at: Option<Timestamp>,
    /// The denial's reason (the agent sees it).
    pub reason: Option<String>,
    /// Approved for the rest of the session.
    pub for_session: bool,
}

/// Largest arguments an approval card shows (the call itself gets them whole).
pub const MAX_APPROVAL_ARGUMENTS_BYTES: usize = 16 * 1024;

/// Longest reason a denial carries.
pub const MAX_APPROVAL_REASON_CHARS: usize = 1000;

/// `POST /api/sessions/{id}/approvals/{approval}` and the live channel's `answer_approval`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AnswerApproval {
    pub approve: bool,
    /// Approve this and every later call of the same tool in this session.
    #[serde(default)]
    pub for_session: bool,
    /// Why not (the agent is told).
    #[serde(default)]
    pub reason: Option<String>,
}

/// The gateway's answer to a workspace asking whether it may call a tool of a server that
/// runs inside it (`POST` [`crate::agent::APPROVAL_PATH`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub allowed: bool,
    /// Why not, in words the agent gets as the tool's result.
    pub message: Option<String>,
}
