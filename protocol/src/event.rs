//! The session event log: everything that happens in a session, in order, with gap-free
//! per-session sequence numbers. Clients replay from any sequence number.

use serde::{Deserialize, Serialize};

use crate::api::{Author, PromptMode, SessionState};
use crate::ids::*;
use crate::turn::{FileChange, TurnOutcome, Usage};

/// One entry of a session's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub session_id: SessionId,
    /// 1, 2, 3, … per session, without gaps.
    pub seq: Seq,
    pub at: Timestamp,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The session was accepted.
    SessionCreated {
        repo_id: RepoId,
        branch: String,
        author: Author,
    },
    /// The session moved from one state to another.
    StateChanged {
        from: SessionState,
        to: SessionState,
        reason: Option<String>,
    },
    /// A prompt joined the queue.
    PromptQueued {
        prompt_id: PromptId,
        author: Author,
        mode: PromptMode,
        text: String,
        /// The page it is about (the Chrome extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<Box<crate::extension::PromptContext>>,
    },
    /// The workspace reached a boot phase; `elapsed_ms` counts from the start of the boot.
    BootPhase {
        phase: BootPhase,
        elapsed_ms: i64,
        detail: Option<String>,
    },
    /// The session (or its next turn) cannot start yet: what stops it and what to do. It
    /// starts by itself once the cause is fixed; a new `waiting` event follows if the cause
    /// changes.
    Waiting { problem: crate::api::Problem },
    /// The workspace looked up names its egress allow-list does not hold (refused). The first
    /// refusal after a quiet period is reported at once, the rest summed up at most once per
    /// [`crate::limits::EGRESS_REPORT_PERIOD_SECS`]: `lookups` refused lookups, `name` and
    /// `others` the first distinct names of them (at most
    /// [`crate::limits::MAX_EGRESS_REPORT_NAMES`] in all).
    EgressBlocked {
        name: String,
        #[serde(default = "one")]
        lookups: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        others: Vec<String>,
    },
    /// Someone (or something) ran a command in the workspace.
    CommandRun {
        author: Author,
        command: String,
        exit_code: Option<i32>,
        /// stdout then stderr, cut at [`crate::limits::MAX_EVENT_OUTPUT_BYTES`].
        output: String,
        truncated: bool,
        duration_ms: i64,
    },
    /// The workspace was removed; its changes are kept as a diff of `diff_bytes` bytes.
    WorkspaceStopped { diff_bytes: i64 },
    /// Something failed; `message` says what and what to do.
    Error { message: String },
    /// A queued prompt's author changed its text.
    PromptEdited {
        prompt_id: PromptId,
        author: Author,
        text: String,
    },
    /// A queued prompt's author took it back.
    PromptWithdrawn { prompt_id: PromptId, author: Author },
    /// A prompt whose turn was interrupted is queued again (`first`: ahead of the others).
    PromptRequeued {
        prompt_id: PromptId,
        first: bool,
        reason: String,
    },
    /// The agent started working on a prompt.
    TurnStarted {
        prompt_id: PromptId,
        author: Author,
        agent: String,
    },
    /// A piece of the agent's reply as it streams (the whole reply follows as `agent_message`).
    AgentDelta { prompt_id: PromptId, text: String },
    /// The agent's reply (one per model response that had text).
    AgentMessage { prompt_id: PromptId, text: String },
    /// The agent called a tool.
    ToolCall {
        prompt_id: PromptId,
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    /// A tool's result. `exit_code` is set for commands; a cut `output` is whole in `artifact`.
    ToolResult {
        prompt_id: PromptId,
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
        exit_code: Option<i32>,
        duration_ms: i64,
        truncated: bool,
        artifact: Option<ArtifactId>,
    },
    /// A file in the checkout changed during a turn.
    FileChanged {
        prompt_id: PromptId,
        path: String,
        change: FileChange,
    },
    /// A steering prompt reached the running turn.
    SteerDelivered {
        prompt_id: PromptId,
        turn: PromptId,
        author: Author,
    },
    /// The turn ended.
    TurnEnded {
        prompt_id: PromptId,
        outcome: TurnOutcome,
        usage: Usage,
        duration_ms: i64,
        /// Why it failed or was interrupted.
        error: Option<String>,
    },
    /// A child session was spawned from this one.
    ChildSpawned {
        child_id: SessionId,
        title: String,
        author: Author,
    },
    /// A file (a screenshot, a report) kept as an artifact of the session, shown in the timeline
    /// and linked from the pull request.
    Attachment {
        prompt_id: Option<PromptId>,
        artifact: ArtifactId,
        name: String,
        content_type: String,
        size: i64,
    },
    /// The session's changes were committed in the workspace, as `author` (the prompting person).
    Committed {
        commit: String,
        author: Author,
        message: String,
    },
    /// The session's pull request was opened on GitHub.
    PrOpened {
        number: i64,
        url: String,
        branch: String,
        opened_by: String,
    },
    /// New commits were pushed to the pull request's branch.
    PrUpdated { number: i64, head_sha: String },
    /// GitHub says the pull request is now open, closed or merged.
    PrState {
        number: i64,
        state: crate::github::PrState,
        by: Option<String>,
    },
    /// A review was submitted (`state`: approved, changes_requested, commented).
    PrReview {
        number: i64,
        reviewer: String,
        state: String,
        body: Option<String>,
    },
    /// A CI check on the pull request's head finished (or changed status).
    PrCheck {
        number: i64,
        name: String,
        status: String,
        conclusion: Option<String>,
    },
    /// Someone commented on the pull request mentioning the app; `prompt_id` is the follow-up
    /// prompt it became, or `ignored` says why it did not.
    PrComment {
        number: i64,
        author: String,
        prompt_id: Option<PromptId>,
        ignored: Option<String>,
    },
    /// The agent's call waits for a driver's answer (an approval card).
    ApprovalAsked { approval: crate::approval::Approval },
    /// An approval was answered, or timed out (a denial).
    ApprovalAnswered {
        approval_id: crate::ApprovalId,
        state: crate::approval::ApprovalState,
        /// Who answered; none when it timed out.
        by: Option<Author>,
        reason: Option<String>,
        for_session: bool,
    },
    /// A model request was refused at a budget: the turn stops there. Said once per turn.
    LimitReached { limit: crate::spend::LimitUse },
}

/// The steps of starting a session's workspace, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BootPhase {
    /// No snapshot of the repo yet: building one first.
    Snapshot,
    /// Mounting the snapshot and starting the container.
    Starting,
    /// Bringing the checkout to the branch head (fetching only the delta).
    Syncing,
    /// Running the recipe's `start` commands.
    Services,
    /// Ready for prompts and people.
    Ready,
}

impl BootPhase {
    /// Its name for people.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Starting => "starting",
            Self::Syncing => "syncing",
            Self::Services => "services",
            Self::Ready => "ready",
        }
    }
}

impl EventKind {
    /// The `type` tag, as stored in the database.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::SessionCreated { .. } => "session_created",
            Self::StateChanged { .. } => "state_changed",
            Self::PromptQueued { .. } => "prompt_queued",
            Self::BootPhase { .. } => "boot_phase",
            Self::CommandRun { .. } => "command_run",
            Self::WorkspaceStopped { .. } => "workspace_stopped",
            Self::Waiting { .. } => "waiting",
            Self::EgressBlocked { .. } => "egress_blocked",
            Self::Error { .. } => "error",
            Self::PromptEdited { .. } => "prompt_edited",
            Self::PromptWithdrawn { .. } => "prompt_withdrawn",
            Self::PromptRequeued { .. } => "prompt_requeued",
            Self::TurnStarted { .. } => "turn_started",
            Self::AgentDelta { .. } => "agent_delta",
            Self::AgentMessage { .. } => "agent_message",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::FileChanged { .. } => "file_changed",
            Self::SteerDelivered { .. } => "steer_delivered",
            Self::TurnEnded { .. } => "turn_ended",
            Self::ChildSpawned { .. } => "child_spawned",
            Self::Attachment { .. } => "attachment",
            Self::Committed { .. } => "committed",
            Self::PrOpened { .. } => "pr_opened",
            Self::PrUpdated { .. } => "pr_updated",
            Self::PrState { .. } => "pr_state",
            Self::PrReview { .. } => "pr_review",
            Self::PrCheck { .. } => "pr_check",
            Self::PrComment { .. } => "pr_comment",
            Self::ApprovalAsked { .. } => "approval_asked",
            Self::ApprovalAnswered { .. } => "approval_answered",
            Self::LimitReached { .. } => "limit_reached",
        }
    }

    /// One line for people (the CLI and the web app's timeline).
    pub fn summary(&self) -> String {
        match self {
            Self::SessionCreated { author, branch, .. } => {
                format!("{} started the session on {branch}", author.name)
            }
            Self::StateChanged { from, to, reason } => format!(
                "state {} → {}{}",
                from.as_str(),
                to.as_str(),
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            Self::PromptQueued { author, text, .. } => {
                format!("{} queued a prompt: {text}", author.name)
            }
            Self::BootPhase {
                phase,
                elapsed_ms,
                detail,
            } => format!(
                "boot: {} at {elapsed_ms} ms{}",
                phase.as_str(),
                detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ),
            Self::CommandRun {
                author,
                command,
                exit_code,
                ..
            } => format!(
                "{} ran `{command}` → {}",
                author.name,
                exit_code.map_or("killed".to_string(), |c| format!("exit {c}"))
            ),
            Self::WorkspaceStopped { diff_bytes } => {
                format!("workspace stopped; diff kept ({diff_bytes} bytes)")
            }
            Self::Waiting { problem } => format!("waiting: {} ({})", problem.message, problem.fix),
            Self::EgressBlocked {
                name,
                lookups,
                others,
            } => {
                if *lookups <= 1 && others.is_empty() {
                    format!("egress refused: {name} is not on the allow-list")
                } else {
                    let names = std::iter::once(name.as_str())
                        .chain(others.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!(
                        "egress refused {lookups} lookups of names not on the allow-list (the first: {names})"
                    )
                }
            }
            Self::Error { message } => format!("error: {message}"),
            Self::PromptEdited { author, text, .. } => {
                format!("{} edited a queued prompt: {text}", author.name)
            }
            Self::PromptWithdrawn { author, .. } => {
                format!("{} withdrew a queued prompt", author.name)
            }
            Self::PromptRequeued { reason, first, .. } => {
                format!(
                    "prompt queued again{}: {reason}",
                    if *first { " (next)" } else { "" }
                )
            }
            Self::TurnStarted { author, agent, .. } => {
                format!("{agent} agent started on {}'s prompt", author.name)
            }
            Self::AgentDelta { text, .. } => text.clone(),
            Self::AgentMessage { text, .. } => format!("agent: {text}"),
            Self::ToolCall {
                name, arguments, ..
            } => format!("tool {name} {arguments}"),
            Self::ToolResult {
                name,
                exit_code,
                is_error,
                duration_ms,
                ..
            } => format!(
                "tool {name} {} in {duration_ms} ms",
                match (exit_code, is_error) {
                    (Some(c), _) => format!("→ exit {c}"),
                    (None, true) => "failed".to_string(),
                    (None, false) => "done".to_string(),
                }
            ),
            Self::FileChanged { path, change, .. } => {
                format!("{path} {}", format!("{change:?}").to_lowercase())
            }
            Self::SteerDelivered { author, .. } => {
                format!("{}'s steering reached the agent", author.name)
            }
            Self::TurnEnded {
                outcome,
                usage,
                duration_ms,
                error,
                ..
            } => format!(
                "turn {} in {duration_ms} ms ({} + {} tokens){}",
                outcome.as_str(),
                usage.prompt_tokens,
                usage.completion_tokens,
                error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
            Self::ChildSpawned { title, author, .. } => {
                format!("{} spawned a child session: {title}", author.name)
            }
            Self::Attachment { name, size, .. } => format!("attached {name} ({size} bytes)"),
            Self::Committed {
                commit,
                author,
                message,
            } => {
                format!(
                    "committed {} as {}: {}",
                    commit.get(..8).unwrap_or(commit),
                    author.name,
                    message.lines().next().unwrap_or("")
                )
            }
            Self::PrOpened {
                number,
                url,
                opened_by,
                ..
            } => format!("pull request #{number} opened by {opened_by}: {url}"),
            Self::PrUpdated { number, head_sha } => format!(
                "pull request #{number} updated to {}",
                head_sha.get(..8).unwrap_or(head_sha)
            ),
            Self::PrState { number, state, by } => {
                format!(
                    "pull request #{number} {}{}",
                    state.as_str(),
                    by.as_deref()
                        .map(|b| format!(" by {b}"))
                        .unwrap_or_default()
                )
            }
            Self::PrReview {
                number,
                reviewer,
                state,
                ..
            } => format!(
                "{reviewer} reviewed pull request #{number}: {}",
                state.replace('_', " ")
            ),
            Self::PrCheck {
                name,
                status,
                conclusion,
                ..
            } => {
                format!("check {name}: {}", conclusion.as_deref().unwrap_or(status))
            }
            Self::PrComment {
                number,
                author,
                prompt_id,
                ignored,
            } => match (prompt_id, ignored) {
                (Some(_), _) => {
                    format!("{author} commented on #{number}; it became a follow-up prompt")
                }
                (None, reason) => format!(
                    "{author} commented on #{number} (not a prompt: {})",
                    reason.as_deref().unwrap_or("no mention")
                ),
            },
            Self::ApprovalAsked { approval } => format!(
                "the agent asks to {}{}",
                approval.subject.describe(),
                approval
                    .asked_for
                    .as_ref()
                    .map(|a| format!(" (for {})", a.name))
                    .unwrap_or_default()
            ),
            Self::ApprovalAnswered {
                state,
                by,
                reason,
                for_session,
                ..
            } => {
                let who = by.as_ref().map_or("nobody", |a| a.name.as_str());
                let why = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                match state {
                    crate::approval::ApprovalState::Approved if *for_session => {
                        format!("{who} approved it for the rest of the session")
                    }
                    crate::approval::ApprovalState::Approved => format!("{who} approved it"),
                    crate::approval::ApprovalState::TimedOut => {
                        format!("nobody answered in time; denied{why}")
                    }
                    _ => format!("{who} denied it{why}"),
                }
            }
            Self::LimitReached { limit } => {
                format!("stopped at {}: {} used", limit.which(), limit.amount())
            }
        }
    }
}

/// A page of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventsPage {
    pub events: Vec<Event>,
    /// The session's newest sequence number at the time of reading.
    pub last_seq: Seq,
}

/// The `lookups` of a refused-lookup report stored before reports were summed up: one.
fn one() -> u64 {
    1
}
