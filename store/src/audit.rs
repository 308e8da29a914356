//! The audit log: who did what, append-only.

use tandem_protocol::UserId;

use crate::Conn;
use crate::Result;

/// One audit entry about to be written.
pub struct Entry<'a> {
    pub actor_user_id: Option<UserId>,
    pub actor_name: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub detail: serde_json::Value,
}

/// Appends an entry.
pub async fn record(mut ex: impl Conn, now: i64, entry: Entry<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit (at, actor_user_id, actor_name, action, target, detail) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(now)
    .bind(entry.actor_user_id.map(|u| u.to_string()))
    .bind(entry.actor_name)
    .bind(entry.action)
    .bind(entry.target)
    .bind(entry.detail.to_string())
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// The newest `limit` entries' `(action, target)`, newest first.
pub async fn recent(mut ex: impl Conn, limit: i64) -> Result<Vec<(String, String)>> {
    Ok(
        sqlx::query_as("SELECT action, target FROM audit ORDER BY id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(ex.ex())
            .await?,
    )
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    at: i64,
    actor_user_id: Option<String>,
    actor_name: String,
    action: String,
    target: String,
    detail: String,
}

/// Entries newest first: about `target` if given, with ids below `before` if given.
pub async fn list(
    mut ex: impl Conn,
    target: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<tandem_protocol::AuditEntry>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, at, actor_user_id, actor_name, action, target, detail FROM audit
         WHERE ($1 IS NULL OR target = $1) AND ($2 IS NULL OR id < $2) ORDER BY id DESC LIMIT $3",
    )
    .bind(target)
    .bind(before)
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(tandem_protocol::AuditEntry {
                id: r.id,
                at: tandem_protocol::Timestamp(r.at),
                actor_user_id: r
                    .actor_user_id
                    .map(|u| super::uuid(&u).map(UserId))
                    .transpose()?,
                actor_name: r.actor_name,
                action: r.action,
                target: r.target,
                detail: serde_json::from_str(&r.detail)
                    .unwrap_or(serde_json::Value::String(r.detail)),
            })
        })
        .collect()
}
