//! Sign-in and link flows in flight: a row per flow, found only by its state's hash together
//! with the hash of the browser's binding secret and its kind, and taken once (one conditional
//! `DELETE … RETURNING`, so two callbacks racing cannot both take it).

use tandem_protocol::UserId;

use crate::{Conn, Result};

/// A flow in flight as it was started.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The person signed in when it started, if anyone was.
    pub started_by: Option<UserId>,
    /// What its kind keeps (JSON).
    pub data: String,
}

/// Where a flow is looked up: its state and binding (both hashed) and its kind.
pub struct Key<'a> {
    pub state_hash: &'a str,
    pub binding_hash: &'a str,
    pub kind: &'a str,
}

/// Stores a flow in flight; flows past their expiry go.
pub async fn insert(
    mut ex: impl Conn,
    key: &Key<'_>,
    started_by: Option<UserId>,
    data: &str,
    now: i64,
    expires_at: i64,
) -> Result<()> {
    sqlx::query("DELETE FROM signin_flows WHERE expires_at <= $1")
        .bind(now)
        .execute(ex.ex())
        .await?;
    sqlx::query(
        "INSERT INTO signin_flows (state_hash, binding_hash, kind, started_by, data, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(key.state_hash)
    .bind(key.binding_hash)
    .bind(key.kind)
    .bind(started_by.map(|u| u.to_string()))
    .bind(data)
    .bind(now)
    .bind(expires_at)
    .execute(ex.ex())
    .await?;
    Ok(())
}

fn flow(row: Option<(Option<String>, String)>) -> Result<Option<Flow>> {
    row.map(|(by, data)| {
        Ok(Flow {
            started_by: by.map(|b| crate::uuid(&b).map(UserId)).transpose()?,
            data,
        })
    })
    .transpose()
}

/// The unexpired flow `key` names, left in place.
pub async fn find(mut ex: impl Conn, key: &Key<'_>, now: i64) -> Result<Option<Flow>> {
    flow(
        sqlx::query_as(
            "SELECT started_by, data FROM signin_flows
             WHERE state_hash = $1 AND binding_hash = $2 AND kind = $3 AND expires_at > $4",
        )
        .bind(key.state_hash)
        .bind(key.binding_hash)
        .bind(key.kind)
        .bind(now)
        .fetch_optional(ex.ex())
        .await?,
    )
}

/// Takes the unexpired flow `key` names, once: a second take (a replay, a racing callback)
/// finds nothing. A key with another browser's binding takes nothing, and leaves the flow.
pub async fn take(mut ex: impl Conn, key: &Key<'_>, now: i64) -> Result<Option<Flow>> {
    flow(
        sqlx::query_as(
            "DELETE FROM signin_flows
             WHERE state_hash = $1 AND binding_hash = $2 AND kind = $3 AND expires_at > $4
             RETURNING started_by, data",
        )
        .bind(key.state_hash)
        .bind(key.binding_hash)
        .bind(key.kind)
        .bind(now)
        .fetch_optional(ex.ex())
        .await?,
    )
}
