//! Approvals and the session-wide grants "approve for the rest of the session" leaves.

use sqlx::FromRow;
use tandem_protocol::approval::{Approval, ApprovalState, ApprovalSubject};
use tandem_protocol::{ApprovalId, Author, PromptId, SessionId, Timestamp};

use crate::{Conn, Error, Result};

#[derive(FromRow)]
struct Row {
    id: String,
    session_id: String,
    prompt_id: Option<String>,
    subject: String,
    arguments: String,
    asked_for: Option<String>,
    state: String,
    asked_at: i64,
    expires_at: i64,
    answered_by: Option<String>,
    answered_at: Option<i64>,
    reason: Option<String>,
    for_session: i64,
}

const COLUMNS: &str = "id, session_id, prompt_id, subject, arguments, asked_for, state, asked_at, expires_at, answered_by, answered_at, reason, for_session";

fn json<T: serde::de::DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| Error::Internal(format!("stored {what} unreadable: {e}")))
}

impl Row {
    fn into_approval(self) -> Result<Approval> {
        Ok(Approval {
            id: ApprovalId(super::uuid(&self.id)?),
            session_id: SessionId(super::uuid(&self.session_id)?),
            prompt_id: self
                .prompt_id
                .as_deref()
                .map(super::uuid)
                .transpose()?
                .map(PromptId),
            subject: json::<ApprovalSubject>(&self.subject, "approval subject")?,
            arguments: json(&self.arguments, "approval arguments")?,
            asked_for: self
                .asked_for
                .as_deref()
                .map(|a| json::<Author>(a, "author"))
                .transpose()?,
            state: ApprovalState::parse(&self.state).ok_or_else(|| {
                Error::Internal(format!("stored approval state {:?} unknown", self.state))
            })?,
            asked_at: Timestamp(self.asked_at),
            expires_at: Timestamp(self.expires_at),
            answered_by: self
                .answered_by
                .as_deref()
                .map(|a| json::<Author>(a, "author"))
                .transpose()?,
            answered_at: self.answered_at.map(Timestamp),
            reason: self.reason,
            for_session: self.for_session != 0,
        })
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

pub async fn insert(mut ex: impl Conn, a: &Approval) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO approvals ({COLUMNS}, grant_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    ))
    .bind(a.id.to_string())
    .bind(a.session_id.to_string())
    .bind(a.prompt_id.map(|p| p.to_string()))
    .bind(to_json(&a.subject))
    .bind(to_json(&a.arguments))
    .bind(a.asked_for.as_ref().map(to_json))
    .bind(a.state.as_str())
    .bind(a.asked_at.0)
    .bind(a.expires_at.0)
    .bind(a.answered_by.as_ref().map(to_json))
    .bind(a.answered_at.map(|t| t.0))
    .bind(a.reason.as_deref())
    .bind(i64::from(a.for_session))
    .bind(a.subject.grant_key())
    .execute(ex.ex())
    .await?;
    sqlx::query("UPDATE sessions SET approvals_count = approvals_count + 1 WHERE id = $1")
        .bind(a.session_id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

pub async fn get(mut ex: impl Conn, id: ApprovalId) -> Result<Option<Approval>> {
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM approvals WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(ex.ex())
            .await?;
    row.map(Row::into_approval).transpose()
}

/// A session's approvals, oldest first (at most `limit`).
pub async fn of_session(
    mut ex: impl Conn,
    session: SessionId,
    limit: i64,
) -> Result<Vec<Approval>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE session_id = $1 ORDER BY asked_at, id LIMIT $2"
    ))
    .bind(session.to_string())
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_approval).collect()
}

/// Whether the session was ever asked about `key` (whatever the answer).
pub async fn asked_before(mut ex: impl Conn, session: SessionId, key: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM approvals WHERE session_id = $1 AND grant_key = $2",
    )
    .bind(session.to_string())
    .bind(key)
    .fetch_one(ex.ex())
    .await?;
    Ok(n > 0)
}

/// Pending approvals of a session (for a bound on how many may wait at once).
pub async fn pending_count(mut ex: impl Conn, session: SessionId) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM approvals WHERE session_id = $1 AND state = 'pending'",
    )
    .bind(session.to_string())
    .fetch_one(ex.ex())
    .await?)
}

/// Answers a pending approval; `false` if it was no longer pending (answered or timed out by
/// someone else first: exactly one answer wins).
pub async fn answer(
    mut ex: impl Conn,
    id: ApprovalId,
    state: ApprovalState,
    by: Option<&Author>,
    reason: Option<&str>,
    for_session: bool,
    now: i64,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE approvals SET state = $1, answered_by = $2, answered_at = $3, reason = $4, for_session = $5
         WHERE id = $6 AND state = 'pending'",
    )
    .bind(state.as_str())
    .bind(by.map(to_json))
    .bind(now)
    .bind(reason)
    .bind(i64::from(for_session))
    .bind(id.to_string())
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Pending approvals past their time, any session (the sweep times them out).
pub async fn expired(mut ex: impl Conn, now: i64, limit: i64) -> Result<Vec<Approval>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE state = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_approval).collect()
}

/// Remembers "approved for the rest of the session".
pub async fn grant(
    mut ex: impl Conn,
    session: SessionId,
    key: &str,
    by: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO approval_grants (session_id, grant_key, granted_by, granted_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id, grant_key) DO NOTHING",
    )
    .bind(session.to_string())
    .bind(key)
    .bind(by)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

pub async fn granted(mut ex: impl Conn, session: SessionId, key: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM approval_grants WHERE session_id = $1 AND grant_key = $2",
    )
    .bind(session.to_string())
    .bind(key)
    .fetch_one(ex.ex())
    .await?;
    Ok(n > 0)
}
