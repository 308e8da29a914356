//! Share links and the memberships people took through them.

use sqlx::FromRow;
use tandem_protocol::live::{Role, ShareLink};
use tandem_protocol::{SessionId, Timestamp, UserId};

use crate::{Conn, Tx};
use crate::{Error, Result};

pub fn role_str(r: Role) -> &'static str {
    match r {
        Role::Viewer => "viewer",
        Role::Driver => "driver",
        Role::Owner => "owner",
    }
}

pub fn parse_role(s: &str) -> Result<Role> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| Error::Internal(format!("stored role {s:?} unknown")))
}

#[derive(FromRow)]
struct Row {
    jti: String,
    session_id: String,
    role: String,
    allow_guests: i64,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
}

impl Row {
    fn into_link(self) -> Result<ShareLink> {
        Ok(ShareLink {
            jti: self.jti,
            session_id: SessionId(super::uuid(&self.session_id)?),
            role: parse_role(&self.role)?,
            allow_guests: self.allow_guests != 0,
            created_at: Timestamp(self.created_at),
            expires_at: Timestamp(self.expires_at),
            revoked_at: self.revoked_at.map(Timestamp),
            token: None,
            url: None,
        })
    }
}

const COLUMNS: &str = "jti, session_id, role, allow_guests, created_at, expires_at, revoked_at";

pub async fn insert(mut ex: impl Conn, link: &ShareLink, by: UserId) -> Result<()> {
    sqlx::query(
        "INSERT INTO share_links (jti, session_id, role, allow_guests, created_by, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&link.jti)
    .bind(link.session_id.to_string())
    .bind(role_str(link.role))
    .bind(i64::from(link.allow_guests))
    .bind(by.to_string())
    .bind(link.created_at.0)
    .bind(link.expires_at.0)
    .execute(ex.ex())
    .await?;
    Ok(())
}

pub async fn get(mut ex: impl Conn, jti: &str) -> Result<Option<ShareLink>> {
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM share_links WHERE jti = $1"))
            .bind(jti)
            .fetch_optional(ex.ex())
            .await?;
    row.map(Row::into_link).transpose()
}

pub async fn list(mut ex: impl Conn, session: SessionId) -> Result<Vec<ShareLink>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM share_links WHERE session_id = $1 ORDER BY created_at DESC"
    ))
    .bind(session.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_link).collect()
}

/// Revokes a link and the memberships taken through it; false if it was not live.
pub async fn revoke(tx: &mut Tx, session: SessionId, jti: &str, now: i64) -> Result<bool> {
    let done = sqlx::query("UPDATE share_links SET revoked_at = $1 WHERE jti = $2 AND session_id = $3 AND revoked_at IS NULL")
        .bind(now)
        .bind(jti)
        .bind(session.to_string())
        .execute(&mut *tx.tx)
        .await?;
    sqlx::query("DELETE FROM session_members WHERE via_link = $1")
        .bind(jti)
        .execute(&mut *tx.tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Records (or upgrades) a signed-in user's membership.
pub async fn join(
    mut ex: impl Conn,
    session: SessionId,
    user: UserId,
    role: Role,
    jti: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO session_members (session_id, user_id, role, via_link, joined_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (session_id, user_id) DO UPDATE SET role = excluded.role, via_link = excluded.via_link, joined_at = excluded.joined_at",
    )
    .bind(session.to_string())
    .bind(user.to_string())
    .bind(role_str(role))
    .bind(jti)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A signed-in user's membership: role and the link it came through.
pub async fn member(
    mut ex: impl Conn,
    session: SessionId,
    user: UserId,
) -> Result<Option<(Role, Option<String>)>> {
    let row: Option<(String, Option<String>)> = sqlx::query_as(
        "SELECT role, via_link FROM session_members WHERE session_id = $1 AND user_id = $2",
    )
    .bind(session.to_string())
    .bind(user.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(r, j)| Ok((parse_role(&r)?, j))).transpose()
}

/// Whether the person who made link `jti` is still active (a deactivated person's links stop).
pub async fn maker_active(mut ex: impl Conn, jti: &str) -> Result<bool> {
    let row: Option<(Option<i64>,)> = sqlx::query_as(
        "SELECT u.deactivated_at FROM share_links l JOIN users u ON u.id = l.created_by WHERE l.jti = $1",
    )
    .bind(jti)
    .fetch_optional(ex.ex())
    .await?;
    Ok(matches!(row, Some((None,))))
}

/// Revokes every live link `user` made; the `(session, jti)` of each.
pub async fn revoke_made_by(
    tx: &mut Tx,
    user: UserId,
    now: i64,
) -> Result<Vec<(SessionId, String)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "UPDATE share_links SET revoked_at = $1 WHERE created_by = $2 AND revoked_at IS NULL
         RETURNING session_id, jti",
    )
    .bind(now)
    .bind(user.to_string())
    .fetch_all(&mut *tx.tx)
    .await?;
    rows.into_iter()
        .map(|(s, j)| Ok((SessionId(super::uuid(&s)?), j)))
        .collect()
}
