//! The diff a stopped or suspended session keeps: what its changes were when its workspace
//! stopped, shown until it runs again (then its workspace's own diff is the truth).

use crate::{Conn, Result};
use tandem_protocol::SessionId;

/// Keeps `diff` (JSON) as `session`'s, replacing the one kept before.
pub async fn keep(mut ex: impl Conn, session: SessionId, diff: &str, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO kept_diffs (session_id, diff, kept_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO UPDATE SET diff = excluded.diff, kept_at = excluded.kept_at",
    )
    .bind(session.to_string())
    .bind(diff)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// The diff `session` keeps (JSON), if it keeps one.
pub async fn kept(mut ex: impl Conn, session: SessionId) -> Result<Option<String>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT diff FROM kept_diffs WHERE session_id = $1")
            .bind(session.to_string())
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.map(|(d,)| d))
}

/// Whether `session` keeps a diff.
pub async fn has(mut ex: impl Conn, session: SessionId) -> Result<bool> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT session_id FROM kept_diffs WHERE session_id = $1")
            .bind(session.to_string())
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.is_some())
}

/// Drops `session`'s kept diff (it runs again).
pub async fn forget(mut ex: impl Conn, session: SessionId) -> Result<()> {
    sqlx::query("DELETE FROM kept_diffs WHERE session_id = $1")
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}
