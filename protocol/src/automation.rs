//! Automations: a prompt a repo runs on a schedule (cron syntax) or when an authenticated
//! webhook is called (its JSON body filling the prompt's template), each run a session
//! attributed to the automation and its creator (`/api/automations`).

use serde::{Deserialize, Serialize};

use crate::ids::*;
use crate::turn::AgentSpec;

/// `POST /api/automations` (a person who may start sessions on the repo).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateAutomation {
    pub repo_id: RepoId,
    /// What people call it ("nightly dependency update").
    pub name: String,
    /// The first prompt of every run's session. For a webhook, `{{body}}` is replaced by the
    /// call's JSON body and `{{body.a.b}}` by one of its values.
    pub prompt: String,
    pub trigger: Trigger,
    /// Default: the server's default agent.
    #[serde(default)]
    pub agent: Option<AgentSpec>,
    /// Each run's budget: the most model requests its session may make (at most the server's
    /// `max_model_requests_per_session`). None: the server's limit.
    #[serde(default)]
    pub max_model_requests: Option<u32>,
    /// Each run's budget of model tokens (prompt and completion together, its whole session
    /// tree). None: no limit of the automation's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Each run's budget in US dollars, priced from the settings' price table. None: no limit
    /// of the automation's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// When an automation runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// In cron syntax with an optional seconds field, UTC (`0 3 * * *`: at 03:00 every day).
    Schedule { cron: String },
    /// When its URL is called (`POST`, a JSON body): the URL holds a secret shown once.
    Webhook,
    /// When a CI check fails on the pull request of a session its creator may drive: the
    /// prompt goes to that session, at most `max_runs` times per pull request.
    CiFailure { max_runs: u32 },
}

/// The most follow-ups a CI-failure automation may send one pull request.
pub const MAX_CI_RUNS: u32 = 10;

/// What creating an automation answers: a webhook's URL (with its secret) is shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedAutomation {
    pub automation: Automation,
    #[serde(default)]
    pub webhook_url: Option<String>,
}

/// An automation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Automation {
    pub id: AutomationId,
    pub repo_id: RepoId,
    pub repo_name: String,
    pub name: String,
    pub prompt: String,
    pub trigger: Trigger,
    #[serde(default)]
    pub agent: Option<AgentSpec>,
    pub created_by: UserId,
    pub created_by_name: String,
    pub created_at: Timestamp,
    /// When a schedule runs next.
    #[serde(default)]
    pub next_at: Option<Timestamp>,
    /// Each run's budget of model requests (none: the server's limit).
    #[serde(default)]
    pub max_model_requests: Option<u32>,
    /// Each run's budget of model tokens (none: no limit of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Each run's budget in US dollars (none: no limit of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// One run: the period it ran for, and the session it made (or why it made none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AutomationRun {
    pub automation_id: AutomationId,
    /// The scheduled time this run is for (a webhook's: when it was called).
    pub period: Timestamp,
    pub session_id: Option<SessionId>,
    /// Why no session started (a run never retries: the next period is the next try).
    pub error: Option<String>,
    pub created_at: Timestamp,
}
