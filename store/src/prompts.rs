//! The prompt queue: claiming the next prompt (the session lock), finishing, requeueing,
//! editing and withdrawing. At most one prompt per session is `running`: a unique partial index
//! holds that, so two server processes can never run two turns of one session.

use tandem_protocol::{Prompt, PromptId, PromptState, SessionId, Usage, UserId};

use super::sessions::{PROMPT_COLUMNS, PromptRow};
use crate::Result;
use crate::{Conn, Tx};

/// A prompt by id, with the session it belongs to.
pub async fn get(mut ex: impl Conn, id: PromptId) -> Result<Option<Prompt>> {
    let row: Option<PromptRow> = sqlx::query_as(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE id = $1"
    ))
    .bind(id.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(PromptRow::into_prompt).transpose()
}

/// Marks the session's first queued prompt `running` for `runner`, inside the caller's
/// transaction. `None` when nothing is queued or a turn is already running (then the caller must
/// roll back: on PostgreSQL the failed insert aborted the transaction).
pub async fn claim_next(
    conn: &mut Tx,
    session: SessionId,
    runner: &str,
    now: i64,
) -> Result<Option<Prompt>> {
    let claimed: std::result::Result<Option<PromptRow>, sqlx::Error> = sqlx::query_as(&format!(
        "UPDATE prompts SET state = 'running', runner = $1, heartbeat_at = $2, started_at = $2, stop_requested_by = NULL
         WHERE state = 'queued' AND id = (SELECT id FROM prompts WHERE session_id = $3 AND state = 'queued' ORDER BY position LIMIT 1)
         RETURNING {PROMPT_COLUMNS}"
    ))
    .bind(runner)
    .bind(now)
    .bind(session.to_string())
    .fetch_optional(&mut *conn.tx)
    .await;
    match claimed {
        Ok(row) => row.map(PromptRow::into_prompt).transpose(),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The session's first queued prompt (the next to run), if any.
pub async fn next_queued(mut ex: impl Conn, session: SessionId) -> Result<Option<Prompt>> {
    let row: Option<PromptRow> = sqlx::query_as(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE session_id = $1 AND state = 'queued' ORDER BY position LIMIT 1"
    ))
    .bind(session.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(PromptRow::into_prompt).transpose()
}

/// The prompt whose turn is running in `session`, if any.
pub async fn running(mut ex: impl Conn, session: SessionId) -> Result<Option<Prompt>> {
    let row: Option<PromptRow> = sqlx::query_as(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE session_id = $1 AND state = 'running'"
    ))
    .bind(session.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(PromptRow::into_prompt).transpose()
}

/// Ends a running prompt's turn — only `runner`'s, when given (a runner whose lease lapsed and
/// whose prompt another process took over cannot end that one's run). False if it was not
/// running (for that runner).
pub async fn finish(
    conn: &mut Tx,
    id: PromptId,
    runner: Option<&str>,
    to: PromptState,
    usage: Usage,
    now: i64,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE prompts SET state = $1, finished_at = $2, prompt_tokens = $3, completion_tokens = $4, runner = NULL
         WHERE id = $5 AND state = 'running' AND ($6 IS NULL OR runner = $6)",
    )
    .bind(to.as_str())
    .bind(now)
    .bind(usage.prompt_tokens)
    .bind(usage.completion_tokens)
    .bind(id.to_string())
    .bind(runner)
    .execute(&mut *conn.tx)
    .await?;
    let ended = done.rows_affected() == 1;
    if ended && matches!(to, PromptState::Stopped | PromptState::Failed) {
        sqlx::query(
            "UPDATE sessions SET interrupted_turns = interrupted_turns + 1
             WHERE id = (SELECT session_id FROM prompts WHERE id = $1)",
        )
        .bind(id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    }
    Ok(ended)
}

/// Puts an interrupted prompt back in the queue: `first` keeps its place (it runs next),
/// otherwise it goes to the back; `count` counts the attempt. False if it was not running.
pub async fn requeue(conn: &mut Tx, id: PromptId, first: bool, count: bool) -> Result<bool> {
    let position = if first {
        "position"
    } else {
        "(SELECT COALESCE(MAX(p.position), 0) + 1 FROM prompts p WHERE p.session_id = prompts.session_id)"
    };
    let done = sqlx::query(&format!(
        "UPDATE prompts SET state = 'queued', runner = NULL, attempts = attempts + {}, position = {position}
         WHERE id = $1 AND state = 'running'",
        i64::from(count)
    ))
    .bind(id.to_string())
    .execute(&mut *conn.tx)
    .await?;
    let requeued = done.rows_affected() == 1;
    if requeued && count {
        sqlx::query(
            "UPDATE sessions SET retries = retries + 1
             WHERE id = (SELECT session_id FROM prompts WHERE id = $1)",
        )
        .bind(id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    }
    Ok(requeued)
}

/// Moves a prompt from `from` to `to`; false if it was not in `from`.
pub async fn set_state(
    conn: &mut Tx,
    id: PromptId,
    from: PromptState,
    to: PromptState,
) -> Result<bool> {
    let done = sqlx::query("UPDATE prompts SET state = $1 WHERE id = $2 AND state = $3")
        .bind(to.as_str())
        .bind(id.to_string())
        .bind(from.as_str())
        .execute(&mut *conn.tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Changes a queued prompt's text; false if it is no longer queued.
pub async fn edit(conn: &mut Tx, id: PromptId, text: &str) -> Result<bool> {
    let done = sqlx::query("UPDATE prompts SET text = $1 WHERE id = $2 AND state = 'queued'")
        .bind(text)
        .bind(id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// What a heartbeat learns about the prompt it renews.
#[derive(Debug, PartialEq, Eq)]
pub enum Lease {
    /// Still this runner's.
    Held,
    /// Still this runner's, and someone asked (through another process) to stop it.
    StopAsked(String),
    /// Not this runner's any more (its lease lapsed and another process took it back).
    Lost,
}

/// Says `runner` still runs prompt `id`.
pub async fn heartbeat(mut ex: impl Conn, id: PromptId, runner: &str, now: i64) -> Result<Lease> {
    let row: Option<(Option<String>,)> = sqlx::query_as(
        "UPDATE prompts SET heartbeat_at = $1 WHERE id = $2 AND runner = $3 AND state = 'running'
         RETURNING stop_requested_by",
    )
    .bind(now)
    .bind(id.to_string())
    .bind(runner)
    .fetch_optional(ex.ex())
    .await?;
    Ok(match row {
        None => Lease::Lost,
        Some((Some(by),)) => Lease::StopAsked(by),
        Some((None,)) => Lease::Held,
    })
}

/// Records that `by` asked to stop running prompt `id` (for a process that may miss the
/// notification).
pub async fn request_stop(mut ex: impl Conn, id: PromptId, by: &str) -> Result<()> {
    sqlx::query("UPDATE prompts SET stop_requested_by = $1 WHERE id = $2 AND state = 'running'")
        .bind(by)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Running prompts whose runner is gone: `runner` itself (it restarted), or any runner that has
/// not sent a heartbeat since `stale_before`.
pub async fn orphaned(
    mut ex: impl Conn,
    runner: Option<&str>,
    stale_before: i64,
) -> Result<Vec<Prompt>> {
    let rows: Vec<PromptRow> = sqlx::query_as(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE state = 'running' AND (($1 IS NOT NULL AND runner = $1) OR heartbeat_at < $2)
         ORDER BY session_id"
    ))
    .bind(runner)
    .bind(stale_before)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(PromptRow::into_prompt).collect()
}

/// Sessions with queued prompts in `live` states (to kick after a restart).
pub async fn sessions_with_queue(mut ex: impl Conn, live: &[&str]) -> Result<Vec<SessionId>> {
    let states: Vec<String> = live.iter().map(|s| format!("'{s}'")).collect();
    let rows: Vec<(String,)> = sqlx::query_as(&format!(
        "SELECT DISTINCT p.session_id FROM prompts p JOIN sessions s ON s.id = p.session_id
         WHERE p.state = 'queued' AND s.state IN ({})",
        states.join(", ")
    ))
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(id,)| super::uuid(&id).map(SessionId))
        .collect()
}

/// The queued and running prompts `user` wrote: `(session, prompt, running)`.
pub async fn pending_by(
    mut ex: impl Conn,
    user: UserId,
) -> Result<Vec<(SessionId, PromptId, bool)>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT session_id, id, state FROM prompts WHERE author_user_id = $1 AND state IN ('queued', 'running')",
    )
    .bind(user.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(s, p, state)| {
            Ok((
                SessionId(super::uuid(&s)?),
                PromptId(super::uuid(&p)?),
                state == "running",
            ))
        })
        .collect()
}

/// Prompts waiting in every queue.
pub async fn count_queued(mut ex: impl Conn) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT CAST(COUNT(*) AS BIGINT) FROM prompts WHERE state = 'queued'")
            .fetch_one(ex.ex())
            .await?;
    Ok(n)
}
