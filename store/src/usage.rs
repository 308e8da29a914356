//! What a session, and its session tree, has stored: events and their bytes, artifact bytes,
//! queued prompts. The counts are kept in `sessions` as rows are written (`last_seq`,
//! `event_bytes`, `artifact_bytes`; nothing stored is ever deleted, so they are exact) and
//! summed over a tree by its parent links (`sessions_parent`); queued prompts are counted on
//! `prompts_by_state`. Each answer is one indexed query.

use tandem_protocol::SessionId;

use crate::{Conn, Tx};
use crate::{Error, Result};

/// Stored rows of one session, or of a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub events: i64,
    pub event_bytes: i64,
    pub artifact_bytes: i64,
}

/// What session `session` and its tree have stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The tree's root (the session itself when it has no parent).
    pub root: SessionId,
    pub session: Stored,
    pub tree: Stored,
}

/// The ancestors of `$1` up to its root (`up`), then the root and all its descendants (`tree`).
/// `UNION` (not `UNION ALL`): a row met twice ends the walk, so even a corrupt chain of parents
/// cannot loop.
const TREE: &str = "WITH RECURSIVE up(id, parent_id) AS (
        SELECT id, parent_id FROM sessions WHERE id = $1
        UNION
        SELECT s.id, s.parent_id FROM sessions s JOIN up ON s.id = up.parent_id
    ),
    tree(id) AS (
        SELECT id FROM up WHERE parent_id IS NULL
        UNION
        SELECT s.id FROM sessions s JOIN tree ON s.parent_id = tree.id
    )";

/// What `session` and its tree have stored; `None` if there is no such session.
pub async fn usage(mut ex: impl Conn, session: SessionId) -> Result<Option<Usage>> {
    type Row = (Option<String>, i64, i64, i64, i64, i64, i64);
    let row: Row = sqlx::query_as(&format!(
        "{TREE}
        SELECT (SELECT id FROM up WHERE parent_id IS NULL),
            CAST(COALESCE(SUM(CASE WHEN s.id = $1 THEN s.last_seq ELSE 0 END), 0) AS BIGINT),
            CAST(COALESCE(SUM(CASE WHEN s.id = $1 THEN s.event_bytes ELSE 0 END), 0) AS BIGINT),
            CAST(COALESCE(SUM(CASE WHEN s.id = $1 THEN s.artifact_bytes ELSE 0 END), 0) AS BIGINT),
            CAST(COALESCE(SUM(s.last_seq), 0) AS BIGINT),
            CAST(COALESCE(SUM(s.event_bytes), 0) AS BIGINT),
            CAST(COALESCE(SUM(s.artifact_bytes), 0) AS BIGINT)
        FROM sessions s JOIN tree ON s.id = tree.id"
    ))
    .bind(session.to_string())
    .fetch_one(ex.ex())
    .await?;
    let (Some(root), se, sb, sa, te, tb, ta) = row else {
        return Ok(None);
    };
    Ok(Some(Usage {
        root: SessionId(crate::uuid(&root)?),
        session: Stored {
            events: se,
            event_bytes: sb,
            artifact_bytes: sa,
        },
        tree: Stored {
            events: te,
            event_bytes: tb,
            artifact_bytes: ta,
        },
    }))
}

/// Prompts waiting in `session`'s queue, and in its whole tree's queues.
pub async fn queued(mut ex: impl Conn, session: SessionId) -> Result<(i64, i64)> {
    let (own, tree): (i64, i64) = sqlx::query_as(&format!(
        "{TREE}
        SELECT CAST(COALESCE(SUM(CASE WHEN p.session_id = $1 THEN 1 ELSE 0 END), 0) AS BIGINT),
            CAST(COUNT(p.id) AS BIGINT)
        FROM tree JOIN prompts p ON p.session_id = tree.id AND p.state = 'queued'"
    ))
    .bind(session.to_string())
    .fetch_one(ex.ex())
    .await?;
    Ok((own, tree))
}

/// Holds session `id`'s row until the transaction ends (counts taken after this in the same
/// transaction stay true until it commits: a row lock on PostgreSQL; SQLite has one writer).
pub async fn lock(tx: &mut Tx, id: SessionId) -> Result<()> {
    let done = sqlx::query("UPDATE sessions SET bounds_noted = bounds_noted WHERE id = $1")
        .bind(id.to_string())
        .execute(&mut *tx.tx)
        .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound(format!("no session {id}")));
    }
    Ok(())
}

/// Whether bound `bit` was said in session `id`'s timeline already (a read: a flood of refusals
/// takes no write lock once it was).
pub async fn noted(mut ex: impl Conn, id: SessionId, bit: i64) -> Result<bool> {
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT bounds_noted & $2 FROM sessions WHERE id = $1")
            .bind(id.to_string())
            .bind(bit)
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.is_some_and(|(n,)| n != 0))
}

/// Marks bound `bit` as said in session `id`'s timeline; true only the first time (whoever
/// gets true says it, in the same transaction).
pub async fn note_once(tx: &mut Tx, id: SessionId, bit: i64) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE sessions SET bounds_noted = bounds_noted | $2 WHERE id = $1 AND (bounds_noted & $2) = 0",
    )
    .bind(id.to_string())
    .bind(bit)
    .execute(&mut *tx.tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
