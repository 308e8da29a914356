//! The per-session event log. Sequence numbers come from `sessions.last_seq`, bumped in the same
//! transaction as the insert, so they are gap-free and never reused even with several writers.

use sqlx::FromRow;
use tandem_protocol::{Event, EventKind, Seq, SessionId, Timestamp};

use crate::{Conn, Tx};
use crate::{Error, Result};

/// Appends one event inside the caller's transaction and returns it with its sequence number.
/// The first statement is a write, so SQLite takes its write lock up front.
/// The session's stored bytes of events grow by the payload's (see [`crate::usage`]).
pub async fn append(tx: &mut Tx, session: SessionId, at: i64, kind: EventKind) -> Result<Event> {
    let payload = serde_json::to_string(&kind)
        .map_err(|e| Error::Internal(format!("encoding event: {e}")))?;
    let (seq,): (i64,) = sqlx::query_as(
        "UPDATE sessions SET last_seq = last_seq + 1, event_bytes = event_bytes + $3, updated_at = $1
         WHERE id = $2 RETURNING last_seq",
    )
    .bind(at)
    .bind(session.to_string())
    .bind(payload.len() as i64)
    .fetch_optional(&mut *tx.tx)
    .await?
    .ok_or_else(|| Error::NotFound(format!("no session {session}")))?;
    sqlx::query(
        "INSERT INTO events (session_id, seq, at, type, payload) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(session.to_string())
    .bind(seq)
    .bind(at)
    .bind(kind.type_name())
    .bind(payload)
    .execute(&mut *tx.tx)
    .await?;
    tx.appended(session, seq);
    tx.bus
        .observed(crate::bus::Observation::Event(session, &kind));
    Ok(Event {
        session_id: session,
        seq,
        at: Timestamp(at),
        kind,
    })
}

#[derive(FromRow)]
struct EventRow {
    seq: i64,
    at: i64,
    payload: String,
}

impl EventRow {
    fn into_event(self, session: SessionId) -> Result<Event> {
        let kind: EventKind = serde_json::from_str(&self.payload).map_err(|e| {
            Error::Internal(format!(
                "stored event {session}/{} unreadable: {e}",
                self.seq
            ))
        })?;
        Ok(Event {
            session_id: session,
            seq: self.seq,
            at: Timestamp(self.at),
            kind,
        })
    }
}

/// The session's newest event, if any.
pub async fn last(mut ex: impl Conn, session: SessionId) -> Result<Option<Event>> {
    let row: Option<EventRow> = sqlx::query_as(
        "SELECT seq, at, payload FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(session.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(|r| r.into_event(session)).transpose()
}

/// Events with `seq > after`, oldest first, at most `limit`.
pub async fn list_after(
    mut ex: impl Conn,
    session: SessionId,
    after: Seq,
    limit: i64,
) -> Result<Vec<Event>> {
    let rows: Vec<EventRow> =
        sqlx::query_as("SELECT seq, at, payload FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
            .bind(session.to_string())
            .bind(after)
            .bind(limit)
            .fetch_all(ex.ex())
            .await?;
    rows.into_iter().map(|r| r.into_event(session)).collect()
}
