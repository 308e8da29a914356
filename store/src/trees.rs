//! Session trees (a session, the children its agent spawns, forks, and theirs): which root a
//! session belongs to, and the model budget that root holds for the whole tree.
//!
//! Every session written by this version records its root (`root_id`, NULL on a root). A row
//! an older server wrote during a rolling upgrade may have a parent but no `root_id`: the root
//! is then found by walking `parent_id` (bounded), and [`repair_roots`] fills it in at start.

use tandem_protocol::SessionId;

use crate::{Conn, Db, Result};

/// Longest chain of parents walked to find a root. Trees nest far less deep (children at most
/// `MAX_CHILD_DEPTH`, forks of forks rarely more than a few); past it the topmost session
/// reached stands for the root, so a corrupt chain can neither loop nor run long.
pub const MAX_ROOT_WALK: i64 = 64;

/// The chain from the session whose id is parameter `id` up to its root: itself, then its
/// parents while `root_id` is missing (at most parameter `steps` steps); [`ROOT`] picks the
/// root from it. A common table expression, so that a write can find its root in the same
/// statement (on SQLite a transaction that reads before it writes may fail to write).
pub(crate) fn up(id: &str, steps: &str) -> String {
    format!(
        "WITH RECURSIVE up(id, parent_id, root_id, depth) AS (
            SELECT id, parent_id, root_id, 0 FROM sessions WHERE id = {id}
            UNION ALL
            SELECT p.id, p.parent_id, p.root_id, up.depth + 1 FROM up JOIN sessions p ON p.id = up.parent_id
            WHERE up.root_id IS NULL AND up.depth < {steps}
        )"
    )
}

/// The root, from [`up`]: the last session reached names it (its `root_id`, or itself when it
/// has no parent).
pub(crate) const ROOT: &str = "(SELECT COALESCE(root_id, id) FROM up ORDER BY depth DESC LIMIT 1)";

/// The root of session `id`'s tree (itself for a root), or `None` if there is no such session.
pub async fn root_of(mut ex: impl Conn, id: SessionId) -> Result<Option<SessionId>> {
    let row: Option<(String,)> = sqlx::query_as(&format!(
        "{} SELECT r.id FROM sessions r WHERE r.id = {ROOT}",
        up("$1", "$2")
    ))
    .bind(id.to_string())
    .bind(MAX_ROOT_WALK)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(r,)| Ok(SessionId(crate::uuid(&r)?))).transpose()
}

/// Counts one more model request of session `id` against its tree's budget: the tree's root
/// counts the requests of every session in it (children, forks), below `cap` and below the
/// root's own budget. Returns how many the tree has made, this one included, or `None` past
/// its budget. The root's count is taken by one conditional statement (a row lock on
/// PostgreSQL, the one writer on SQLite): concurrent requests of a tree, from any server,
/// never pass the budget together.
pub async fn count_model_request(db: &Db, id: SessionId, cap: i64) -> Result<Option<i64>> {
    // Found before the transaction (a tree's root never changes), so that the transaction
    // begins with its write.
    let Some(root) = root_of(db, id).await? else {
        return Ok(None);
    };
    let mut tx = db.begin().await?;
    let n: Option<(i64,)> = sqlx::query_as(
        "UPDATE sessions SET tree_model_requests = tree_model_requests + 1
         WHERE id = $1
           AND tree_model_requests < $2
           AND (model_budget IS NULL OR tree_model_requests < model_budget)
         RETURNING tree_model_requests",
    )
    .bind(root.to_string())
    .bind(cap)
    .fetch_optional(&mut *tx.tx)
    .await?;
    if n.is_some() {
        sqlx::query("UPDATE sessions SET model_requests = model_requests + 1 WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx.tx)
            .await?;
    }
    tx.commit().await?;
    Ok(n.map(|(n,)| n))
}

/// Gives back one model request of session `id` that never reached the model (its endpoint
/// could not be connected to): its tree's count and its own, together.
pub async fn give_back_model_request(db: &Db, id: SessionId) -> Result<()> {
    let Some(root) = root_of(db, id).await? else {
        return Ok(());
    };
    let mut tx = db.begin().await?;
    sqlx::query(
        "UPDATE sessions SET tree_model_requests = tree_model_requests - 1
         WHERE id = $1 AND tree_model_requests > 0",
    )
    .bind(root.to_string())
    .execute(&mut *tx.tx)
    .await?;
    sqlx::query(
        "UPDATE sessions SET model_requests = model_requests - 1 WHERE id = $1 AND model_requests > 0",
    )
    .bind(id.to_string())
    .execute(&mut *tx.tx)
    .await?;
    tx.commit().await
}

/// The model budget session `id` draws on: its tree's root, with the requests the whole tree
/// made and the root's own budget (an automation's run), if any.
pub struct TreeBudget {
    pub root: SessionId,
    pub used: i64,
    pub budget: Option<i64>,
}

/// Session `id`'s [`TreeBudget`], or `None` if there is no such session.
pub async fn tree_budget(mut ex: impl Conn, id: SessionId) -> Result<Option<TreeBudget>> {
    let row: Option<(String, i64, Option<i64>)> = sqlx::query_as(&format!(
        "{} SELECT r.id, r.tree_model_requests, r.model_budget FROM sessions r WHERE r.id = {ROOT}",
        up("$1", "$2")
    ))
    .bind(id.to_string())
    .bind(MAX_ROOT_WALK)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(root, used, budget)| {
        Ok(TreeBudget {
            root: SessionId(crate::uuid(&root)?),
            used,
            budget,
        })
    })
    .transpose()
}

/// Fills in the root of every session that has a parent but no `root_id` (written by a server
/// older than session trees during a rolling upgrade): one statement, walking up from those
/// rows only. Returns how many were repaired.
pub async fn repair_roots(db: &Db) -> Result<u64> {
    let mut tx = db.begin().await?;
    let done = sqlx::query(
        "WITH RECURSIVE up(id, cur, parent_id, root_id, depth) AS (
            SELECT id, id, parent_id, root_id, 0 FROM sessions
            WHERE root_id IS NULL AND parent_id IS NOT NULL
            UNION ALL
            SELECT up.id, p.id, p.parent_id, p.root_id, up.depth + 1 FROM up JOIN sessions p ON p.id = up.parent_id
            WHERE up.root_id IS NULL AND up.parent_id IS NOT NULL AND up.depth < $1
        )
        UPDATE sessions SET root_id = found.root
        FROM (SELECT id, COALESCE(root_id, cur) AS root FROM up
              WHERE root_id IS NOT NULL OR parent_id IS NULL) AS found
        WHERE sessions.id = found.id AND found.root <> found.id",
    )
    .bind(MAX_ROOT_WALK)
    .execute(&mut *tx.tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(done)
}
