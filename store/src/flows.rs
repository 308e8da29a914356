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

/// Most flows one browser (binding) keeps in flight: starting another drops its oldest, so a
/// browser (or a script posing as one) holds at most this many rows.
pub const MAX_PER_BINDING: i64 = 5;

/// Most flows one signed-in person keeps in flight, whatever the browser (a signed-in start
/// with a fresh binding each time still holds at most this many): their oldest goes.
pub const MAX_PER_PERSON: i64 = 5;

/// Most flows started signed out in flight at once, all browsers together. Past it a signed-out
/// start is refused until some expire or finish: every address is rate-limited, this bounds
/// what many addresses together can store. Signed-in
/// starts are bounded per person instead, so a flood of anonymous starts never blocks linking.
pub const MAX_SIGNED_OUT: i64 = 10_000;

/// Whether a flow was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    Stored,
    /// [`MAX_SIGNED_OUT`] signed-out flows are in flight: nothing was stored.
    Full,
}

/// Stores a flow in flight: flows past their expiry go, the binding's (and the person's)
/// oldest go beyond [`MAX_PER_BINDING`] ([`MAX_PER_PERSON`]), and a signed-out flow is refused
/// while [`MAX_SIGNED_OUT`] are in flight.
pub async fn insert(
    mut ex: impl Conn,
    key: &Key<'_>,
    started_by: Option<UserId>,
    data: &str,
    now: i64,
    expires_at: i64,
) -> Result<Inserted> {
    sqlx::query("DELETE FROM signin_flows WHERE expires_at <= $1")
        .bind(now)
        .execute(ex.ex())
        .await?;
    if started_by.is_none() {
        let (live,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM signin_flows WHERE started_by IS NULL")
                .fetch_one(ex.ex())
                .await?;
        if live >= MAX_SIGNED_OUT {
            return Ok(Inserted::Full);
        }
    }
    // Room for the new one first (so it is never the one dropped): the newest MAX - 1 stay.
    sqlx::query(
        "DELETE FROM signin_flows WHERE binding_hash = $1 AND state_hash NOT IN (
             SELECT state_hash FROM signin_flows WHERE binding_hash = $1
             ORDER BY created_at DESC, state_hash LIMIT $2)",
    )
    .bind(key.binding_hash)
    .bind(MAX_PER_BINDING - 1)
    .execute(ex.ex())
    .await?;
    if let Some(by) = started_by {
        sqlx::query(
            "DELETE FROM signin_flows WHERE started_by = $1 AND state_hash NOT IN (
                 SELECT state_hash FROM signin_flows WHERE started_by = $1
                 ORDER BY created_at DESC, state_hash LIMIT $2)",
        )
        .bind(by.to_string())
        .bind(MAX_PER_PERSON - 1)
        .execute(ex.ex())
        .await?;
    }
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
    Ok(Inserted::Stored)
}

/// How many flows are stored (expired ones not yet pruned included): all, or one binding's.
pub async fn count(mut ex: impl Conn, binding_hash: Option<&str>) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM signin_flows WHERE $1 IS NULL OR binding_hash = $1")
            .bind(binding_hash)
            .fetch_one(ex.ex())
            .await?;
    Ok(n)
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
