//! Pairings of the Chrome extension in flight: its device secret and the code a person types,
//! both hashed; approved once by a signed-in person; taken once by the extension.

use tandem_protocol::UserId;

use crate::{Conn, Result};

/// A new pairing, its secrets hashed.
pub struct New<'a> {
    pub id: &'a str,
    pub device_hash: &'a str,
    pub user_code_hash: &'a str,
    pub label: &'a str,
    /// The client address it was asked from.
    pub address: &'a str,
}

/// Stores a new pairing (and forgets expired ones).
pub async fn insert(mut ex: impl Conn, p: New<'_>, now: i64, expires_at: i64) -> Result<()> {
    sqlx::query("DELETE FROM pairings WHERE expires_at <= $1")
        .bind(now)
        .execute(ex.ex())
        .await?;
    sqlx::query(
        "INSERT INTO pairings (id, device_hash, user_code_hash, label, address, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(p.id)
    .bind(p.device_hash)
    .bind(p.user_code_hash)
    .bind(p.label)
    .bind(p.address)
    .bind(now)
    .bind(expires_at)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A pairing in flight, as the page that approves it shows it.
pub struct Pending {
    pub label: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub address: Option<String>,
    pub approved: bool,
}

/// The unexpired pairing `id`, or `None`.
pub async fn get(mut ex: impl Conn, id: &str, now: i64) -> Result<Option<Pending>> {
    type Row = (String, i64, i64, Option<String>, Option<String>);
    let row: Option<Row> = sqlx::query_as(
        "SELECT label, created_at, expires_at, address, approved_by FROM pairings
         WHERE id = $1 AND expires_at > $2",
    )
    .bind(id)
    .bind(now)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.map(
        |(label, created_at, expires_at, address, approved_by)| Pending {
            label,
            created_at,
            expires_at,
            address,
            approved: approved_by.is_some(),
        },
    ))
}

/// Approves the unexpired, unapproved pairing whose code hashes to `user_code_hash` (and whose
/// id is `id`, when given), for `by`; its label, or `None`.
pub async fn approve(
    mut ex: impl Conn,
    user_code_hash: &str,
    id: Option<&str>,
    by: UserId,
    now: i64,
) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "UPDATE pairings SET approved_by = $1, approved_at = $2
         WHERE user_code_hash = $3 AND approved_by IS NULL AND expires_at > $2
           AND ($4 = '' OR id = $4)
         RETURNING label",
    )
    .bind(by.to_string())
    .bind(now)
    .bind(user_code_hash)
    .bind(id.unwrap_or_default())
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.map(|(l,)| l))
}

/// What a poll finds.
pub enum Poll {
    /// Approved now by this person (taken: a second poll finds nothing), with its label.
    Approved(UserId, String),
    /// Not approved yet.
    Pending,
    /// Unknown, expired or already taken.
    Gone,
}

/// Takes the approved pairing whose device secret hashes to `device_hash`, once.
pub async fn take(mut ex: impl Conn, device_hash: &str, now: i64) -> Result<Poll> {
    let row: Option<(String, String)> = sqlx::query_as(
        "UPDATE pairings SET taken_at = $1
         WHERE device_hash = $2 AND taken_at IS NULL AND approved_by IS NOT NULL AND expires_at > $1
         RETURNING approved_by, label",
    )
    .bind(now)
    .bind(device_hash)
    .fetch_optional(ex.ex())
    .await?;
    if let Some((by, label)) = row {
        return Ok(Poll::Approved(UserId(super::uuid(&by)?), label));
    }
    let pending: Option<(i64,)> = sqlx::query_as(
        "SELECT 1 FROM pairings WHERE device_hash = $1 AND approved_by IS NULL AND expires_at > $2",
    )
    .bind(device_hash)
    .bind(now)
    .fetch_optional(ex.ex())
    .await?;
    Ok(if pending.is_some() {
        Poll::Pending
    } else {
        Poll::Gone
    })
}
