//! The GitHub issues sessions were started from, and each one's progress comment.

use tandem_protocol::{RepoId, SessionId};

use crate::{Conn, Result};

/// The issue `session` was started from: (number, progress comment id).
pub async fn of_session(
    mut ex: impl Conn,
    session: SessionId,
) -> Result<Option<(i64, Option<i64>)>> {
    Ok(
        sqlx::query_as("SELECT number, comment_id FROM issue_sessions WHERE session_id = $1")
            .bind(session.to_string())
            .fetch_optional(ex.ex())
            .await?,
    )
}

/// Records that `session` works on issue `number` of `repo`.
pub async fn insert(
    mut ex: impl Conn,
    session: SessionId,
    repo: RepoId,
    number: i64,
    now: i64,
) -> Result<()> {
    sqlx::query("INSERT INTO issue_sessions (session_id, repo_id, number, created_at) VALUES ($1, $2, $3, $4)")
        .bind(session.to_string())
        .bind(repo.to_string())
        .bind(number)
        .bind(now)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Records `session`'s progress comment.
pub async fn set_comment(mut ex: impl Conn, session: SessionId, comment: i64) -> Result<()> {
    sqlx::query("UPDATE issue_sessions SET comment_id = $1 WHERE session_id = $2")
        .bind(comment)
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// The sessions started from issue `number` of `repo`, newest first.
pub async fn sessions_of(mut ex: impl Conn, repo: RepoId, number: i64) -> Result<Vec<SessionId>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT session_id FROM issue_sessions WHERE repo_id = $1 AND number = $2 ORDER BY created_at DESC",
    )
    .bind(repo.to_string())
    .bind(number)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(s,)| Ok(SessionId(super::uuid(&s)?)))
        .collect()
}
