//! Automations: a prompt template a repo runs on a schedule (cron syntax), each run a session
//! attributed to the automation and its creator (`/api/automations`).

use serde::{Deserialize, Serialize};

use crate::ids::*;
use crate::turn::AgentSpec;

/// `POST /api/automations` (a person who may start sessions on the repo).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateAutomation {
    pub repo_id: RepoId,
    /// What people call it ("nightly dependency update").
    pub name: String,
    /// The first prompt of every run's session.
    pub prompt: String,
    /// When it runs, in cron syntax with an optional seconds field, UTC
    /// (`0 3 * * *`: at 03:00 every day).
    pub schedule: String,
    /// Default: the server's default agent.
    #[serde(default)]
    pub agent: Option<AgentSpec>,
}

/// An automation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Automation {
    pub id: AutomationId,
    pub repo_id: RepoId,
    pub repo_name: String,
    pub name: String,
    pub prompt: String,
    pub schedule: String,
    #[serde(default)]
    pub agent: Option<AgentSpec>,
    pub created_by: UserId,
    pub created_by_name: String,
    pub created_at: Timestamp,
    /// When it runs next.
    pub next_at: Timestamp,
}

/// One run: the period it ran for, and the session it made (or why it made none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutomationRun {
    pub automation_id: AutomationId,
    /// The scheduled time this run is for.
    pub period: Timestamp,
    pub session_id: Option<SessionId>,
    /// Why no session started (a run never retries: the next period is the next try).
    pub error: Option<String>,
    pub created_at: Timestamp,
}
