//! What a workspace may make the server store, per session and per session tree (a root and
//! every descendant): events and their bytes, artifact bytes, prompts queued in its children
//! (the bounds are `tandem_protocol::limits`, the counts `db::usage`). A workspace is refused
//! past a bound (a 429 its agent reads, or its turn's frames left out), and the session's
//! timeline says so once per bound — never once per refusal, which would be a flood itself.
//! People's own writes count toward the totals but are never refused here.

use tandem_protocol::limits::{
    MAX_ARTIFACT_BYTES_PER_SESSION, MAX_ARTIFACT_BYTES_PER_TREE, MAX_EVENT_BYTES_PER_SESSION,
    MAX_EVENT_BYTES_PER_TREE, MAX_EVENTS_PER_SESSION, MAX_EVENTS_PER_TREE,
};
use tandem_protocol::{EventKind, SessionId};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

/// A bound a workspace can reach; each is said once in a session's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Prompts waiting in a child's queue, or in the tree's.
    Queue,
    /// Events (or their bytes) of the session, or of its tree.
    Events,
    /// Artifact bytes of the session, or of its tree.
    Artifacts,
}

impl Bound {
    fn bit(self) -> i64 {
        match self {
            Self::Queue => 1,
            Self::Events => 2,
            Self::Artifacts => 4,
        }
    }
}

/// What a session's workspace may still add: the smaller of the session's and its tree's room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// The session tree's root.
    pub root: SessionId,
    pub events: i64,
    pub event_bytes: i64,
    pub artifact_bytes: i64,
    /// Whose bound leaves the least room for events, and for artifacts: the session's or its
    /// tree's.
    events_whose: &'static str,
    artifacts_whose: &'static str,
}

impl Room {
    fn of(u: &db::usage::Usage) -> Self {
        let (s, t) = (&u.session, &u.tree);
        let events = (MAX_EVENTS_PER_SESSION - s.events).min(MAX_EVENTS_PER_TREE - t.events);
        let event_bytes = (MAX_EVENT_BYTES_PER_SESSION - s.event_bytes)
            .min(MAX_EVENT_BYTES_PER_TREE - t.event_bytes);
        let artifact_bytes = (MAX_ARTIFACT_BYTES_PER_SESSION - s.artifact_bytes)
            .min(MAX_ARTIFACT_BYTES_PER_TREE - t.artifact_bytes);
        let whose = |session_full: bool| {
            if session_full {
                "this session"
            } else {
                "this session's tree"
            }
        };
        Self {
            root: u.root,
            events,
            event_bytes,
            artifact_bytes,
            // No single event needs a MiB (a prompt is at most 256 KiB): a session with less
            // room than that is the one that is full.
            events_whose: whose(
                MAX_EVENTS_PER_SESSION - s.events < 1
                    || MAX_EVENT_BYTES_PER_SESSION - s.event_bytes < 1024 * 1024,
            ),
            artifacts_whose: whose(
                MAX_ARTIFACT_BYTES_PER_SESSION - s.artifact_bytes <= artifact_bytes,
            ),
        }
    }

    /// Room for `n` more events of `bytes` in all.
    pub fn fits_events(&self, n: i64, bytes: i64) -> bool {
        self.events >= n && self.event_bytes >= bytes
    }

    /// Room for `bytes` more artifact bytes.
    pub fn fits_artifact(&self, bytes: i64) -> bool {
        self.artifact_bytes >= bytes
    }

    /// Counts down what was just stored (for a caller that reads the room again only now and
    /// then).
    pub fn take(&mut self, events: i64, event_bytes: i64, artifact_bytes: i64) {
        self.events -= events;
        self.event_bytes -= event_bytes;
        self.artifact_bytes -= artifact_bytes;
    }

    /// What the workspace is told when its events do not fit.
    pub fn events_refusal(&self) -> String {
        format!(
            "{} stored all the events a workspace may add ({MAX_EVENTS_PER_SESSION} events or {} MiB per session, {MAX_EVENTS_PER_TREE} events or {} MiB per session tree); nothing more from the workspace is recorded: start a new session",
            self.events_whose,
            MAX_EVENT_BYTES_PER_SESSION >> 20,
            MAX_EVENT_BYTES_PER_TREE >> 20,
        )
    }

    /// What the workspace is told when an artifact does not fit.
    pub fn artifacts_refusal(&self) -> String {
        format!(
            "{} stored all the artifact bytes a workspace may add ({} MiB per session, {} MiB per session tree); start a new session to keep more",
            self.artifacts_whose,
            MAX_ARTIFACT_BYTES_PER_SESSION >> 20,
            MAX_ARTIFACT_BYTES_PER_TREE >> 20,
        )
    }
}

/// The room session `id`'s workspace has left (one indexed query).
pub async fn room(db: &Db, id: SessionId) -> Result<Room> {
    let usage = db::usage::usage(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    Ok(Room::of(&usage))
}

/// Says in session `id`'s timeline that its workspace reached `bound` (`message`), unless it
/// was said before.
pub async fn note(db: &Db, id: SessionId, bound: Bound, message: &str) -> Result<()> {
    if db::usage::noted(db, id, bound.bit()).await? {
        return Ok(());
    }
    let mut tx = db.begin().await?;
    if db::usage::note_once(&mut tx, id, bound.bit()).await? {
        tracing::warn!(session = %id, ?bound, "a workspace reached a storage bound: {message}");
        db::events::append(
            &mut tx,
            id,
            now_ms(),
            EventKind::Error {
                message: format!(
                    "{message} (said once: what the workspace adds past it is refused the same way)"
                ),
            },
        )
        .await?;
        tx.commit().await?;
    }
    Ok(())
}

/// The workspace of session `id` is refused past `bound`: the timeline says so (once), and the
/// error (429) says what was reached and what to do.
pub async fn refuse(db: &Db, id: SessionId, bound: Bound, message: String) -> Error {
    if let Err(e) = note(db, id, bound, &message).await {
        tracing::warn!(session = %id, error = %e, "saying a bound was reached failed");
    }
    Error::TooMany(message)
}

/// Refuses unless session `id` has room for an artifact of `bytes` and its event.
pub async fn check_artifact(db: &Db, id: SessionId, bytes: i64) -> Result<()> {
    let room = room(db, id).await?;
    if !room.fits_events(1, 1024) {
        return Err(refuse(db, id, Bound::Events, room.events_refusal()).await);
    }
    if !room.fits_artifact(bytes) {
        return Err(refuse(db, id, Bound::Artifacts, room.artifacts_refusal()).await);
    }
    Ok(())
}
