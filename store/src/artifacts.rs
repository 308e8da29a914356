//! Artifacts: large outputs kept whole, and the agent's kept state per session.

use sqlx::FromRow;
use tandem_protocol::{ArtifactId, ArtifactInfo, SessionId, Timestamp};

use crate::Result;
use crate::{Conn, Tx};

/// Stores an artifact inside the caller's transaction; its session's stored artifact bytes grow
/// by the body's (see [`crate::usage`]).
pub async fn insert(conn: &mut Tx, info: &ArtifactInfo, body: &str) -> Result<()> {
    sqlx::query("UPDATE sessions SET artifact_bytes = artifact_bytes + $1 WHERE id = $2")
        .bind(body.len() as i64)
        .bind(info.session_id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    sqlx::query(
        "INSERT INTO artifacts (id, session_id, name, content_type, size, body, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(info.id.to_string())
    .bind(info.session_id.to_string())
    .bind(&info.name)
    .bind(&info.content_type)
    .bind(info.size)
    .bind(body)
    .bind(info.created_at.0)
    .execute(&mut *conn.tx)
    .await?;
    Ok(())
}

#[derive(FromRow)]
struct Row {
    id: String,
    session_id: String,
    name: String,
    content_type: String,
    size: i64,
    created_at: i64,
    body: String,
}

impl Row {
    fn into_pair(self) -> Result<(ArtifactInfo, String)> {
        Ok((
            ArtifactInfo {
                id: ArtifactId(super::uuid(&self.id)?),
                session_id: SessionId(super::uuid(&self.session_id)?),
                name: self.name,
                content_type: self.content_type,
                size: self.size,
                created_at: Timestamp(self.created_at),
            },
            self.body,
        ))
    }
}

/// An artifact of `session` with its body.
pub async fn get(
    mut ex: impl Conn,
    session: SessionId,
    id: ArtifactId,
) -> Result<Option<(ArtifactInfo, String)>> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT id, session_id, name, content_type, size, created_at, body FROM artifacts WHERE id = $1 AND session_id = $2",
    )
    .bind(id.to_string())
    .bind(session.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(Row::into_pair).transpose()
}

/// The agent's kept state of `session` (JSON), if any.
pub async fn agent_state(mut ex: impl Conn, session: SessionId) -> Result<Option<String>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT state FROM agent_states WHERE session_id = $1")
            .bind(session.to_string())
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.map(|(s,)| s))
}

/// Replaces the agent's kept state of `session`.
pub async fn set_agent_state(
    conn: &mut Tx,
    session: SessionId,
    state: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO agent_states (session_id, state, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
    )
    .bind(session.to_string())
    .bind(state)
    .bind(now)
    .execute(&mut *conn.tx)
    .await?;
    Ok(())
}

/// An artifact by id alone (signed links), with its body.
pub async fn by_id(mut ex: impl Conn, id: ArtifactId) -> Result<Option<(ArtifactInfo, String)>> {
    let row: Option<Row> = sqlx::query_as("SELECT id, session_id, name, content_type, size, created_at, body FROM artifacts WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(ex.ex())
        .await?;
    row.map(Row::into_pair).transpose()
}

/// Bytes of the page screenshots (`element.png`, `view.png`) `session` keeps.
pub async fn context_bytes(mut ex: impl Conn, session: SessionId) -> Result<i64> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM artifacts
         WHERE session_id = $1 AND name IN ('element.png', 'view.png', 'attached.png')",
    )
    .bind(session.to_string())
    .fetch_one(ex.ex())
    .await?;
    Ok(n)
}
