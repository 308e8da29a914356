//! Invites and OpenID Connect identities (the sign-ins in flight are in `flows`).

use sqlx::FromRow;
use tandem_protocol::people::Invite;
use tandem_protocol::{Timestamp, UserId};

use crate::{Conn, Result};

#[derive(FromRow)]
struct InviteRow {
    id: String,
    name: String,
    email: Option<String>,
    is_admin: i64,
    created_by: String,
    created_at: i64,
    expires_at: i64,
    used_at: Option<i64>,
    revoked_at: Option<i64>,
}

impl InviteRow {
    fn into_invite(self) -> Invite {
        Invite {
            id: self.id,
            name: self.name,
            email: self.email,
            is_admin: self.is_admin != 0,
            created_by: self.created_by,
            created_at: Timestamp(self.created_at),
            expires_at: Timestamp(self.expires_at),
            used_at: self.used_at.map(Timestamp),
            revoked_at: self.revoked_at.map(Timestamp),
        }
    }
}

const INVITE_COLUMNS: &str = "i.id, i.name, i.email, i.is_admin, u.name AS created_by, i.created_at, i.expires_at, i.used_at, i.revoked_at";

/// Stores an invite (its code hashed); `created_by` is the inviting admin.
pub async fn insert_invite(
    mut ex: impl Conn,
    invite: &Invite,
    created_by: UserId,
    code_hash: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO invites (id, code_hash, name, email, is_admin, created_by, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&invite.id)
    .bind(code_hash)
    .bind(&invite.name)
    .bind(invite.email.as_deref().map(str::to_lowercase))
    .bind(i64::from(invite.is_admin))
    .bind(created_by.to_string())
    .bind(invite.created_at.0)
    .bind(invite.expires_at.0)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Invites, newest first.
pub async fn list_invites(mut ex: impl Conn, limit: i64) -> Result<Vec<Invite>> {
    let rows: Vec<InviteRow> = sqlx::query_as(&format!(
        "SELECT {INVITE_COLUMNS} FROM invites i JOIN users u ON u.id = i.created_by
         ORDER BY i.created_at DESC, i.id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    Ok(rows.into_iter().map(InviteRow::into_invite).collect())
}

/// Takes an unused, unrevoked, unexpired invite by its code's hash (once: a second call finds
/// nothing).
pub async fn redeem_invite(mut ex: impl Conn, code_hash: &str, now: i64) -> Result<Option<Invite>> {
    let id: Option<(String,)> = sqlx::query_as(
        "UPDATE invites SET used_at = $1
         WHERE code_hash = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1
           AND EXISTS (SELECT 1 FROM users u WHERE u.id = invites.created_by
                       AND u.deactivated_at IS NULL AND (invites.is_admin = 0 OR u.is_admin = 1))
         RETURNING id",
    )
    .bind(now)
    .bind(code_hash)
    .fetch_optional(ex.ex())
    .await?;
    let Some((id,)) = id else {
        return Ok(None);
    };
    let row: Option<InviteRow> = sqlx::query_as(&format!(
        "SELECT {INVITE_COLUMNS} FROM invites i JOIN users u ON u.id = i.created_by WHERE i.id = $1"
    ))
    .bind(id)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.map(InviteRow::into_invite))
}

/// Records who an invite made.
pub async fn set_invite_user(mut ex: impl Conn, id: &str, user: UserId) -> Result<()> {
    sqlx::query("UPDATE invites SET used_by = $1 WHERE id = $2")
        .bind(user.to_string())
        .bind(id)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Revokes an unused invite; whether there was one.
pub async fn revoke_invite(mut ex: impl Conn, id: &str, now: i64) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE invites SET revoked_at = $1 WHERE id = $2 AND used_at IS NULL AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(id)
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Revokes the unused invites `user` made (they were deactivated or are no longer an admin).
pub async fn revoke_invites_by(mut ex: impl Conn, user: UserId, now: i64) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE invites SET revoked_at = $1 WHERE created_by = $2 AND used_at IS NULL AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(user.to_string())
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected())
}

/// The user an identity provider's subject signs in as.
pub async fn identity(mut ex: impl Conn, provider: &str, subject: &str) -> Result<Option<UserId>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT user_id FROM identities WHERE provider = $1 AND subject = $2")
            .bind(provider)
            .bind(subject)
            .fetch_optional(ex.ex())
            .await?;
    row.map(|(u,)| Ok(UserId(super::uuid(&u)?))).transpose()
}

/// Links an identity provider's subject to a user.
pub async fn link_identity(
    mut ex: impl Conn,
    provider: &str,
    subject: &str,
    user: UserId,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO identities (provider, subject, user_id, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(provider)
    .bind(subject)
    .bind(user.to_string())
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// The sign-in methods each user has linked (`provider` of their identities).
pub async fn identities_of(mut ex: impl Conn, user: UserId) -> Result<Vec<String>> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT provider FROM identities WHERE user_id = $1 ORDER BY provider")
            .bind(user.to_string())
            .fetch_all(ex.ex())
            .await?;
    Ok(rows.into_iter().map(|(p,)| p).collect())
}
