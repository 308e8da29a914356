//! The session event log: everything that happens in a session, in order, with gap-free
//! per-session sequence numbers. Clients replay from any sequence number.

use serde::{Deserialize, Serialize};

use crate::api::{Author, PromptMode, SessionState};
use crate::ids::*;

/// One entry of a session's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The session was accepted.
    SessionCreated { repo_id: RepoId, branch: String, author: Author },
    /// The session moved from one state to another.
    StateChanged { from: SessionState, to: SessionState, reason: Option<String> },
    /// A prompt joined the queue.
    PromptQueued { prompt_id: PromptId, author: Author, mode: PromptMode, text: String },
}

impl EventKind {
    /// The `type` tag, as stored in the database.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::SessionCreated { .. } => "session_created",
            Self::StateChanged { .. } => "state_changed",
            Self::PromptQueued { .. } => "prompt_queued",
        }
    }
}

/// A page of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsPage {
    pub events: Vec<Event>,
    /// The session's newest sequence number at the time of reading.
    pub last_seq: Seq,
}
