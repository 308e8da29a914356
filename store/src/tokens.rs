//! API tokens and one-time login codes; only their SHA-256 hashes are stored.

use sqlx::FromRow;
use tandem_protocol::{Timestamp, TokenId, TokenInfo, UserId};

use crate::Conn;
use crate::Result;

#[derive(FromRow)]
struct TokenRow {
    id: String,
    name: String,
    created_at: i64,
    expires_at: Option<i64>,
    last_used_at: Option<i64>,
    scope: Option<String>,
}

impl TokenRow {
    fn into_info(self) -> Result<TokenInfo> {
        Ok(TokenInfo {
            id: TokenId(super::uuid(&self.id)?),
            name: self.name,
            created_at: Timestamp(self.created_at),
            expires_at: self.expires_at.map(Timestamp),
            last_used_at: self.last_used_at.map(Timestamp),
            scope: self.scope,
        })
    }
}

/// Stores a new token's hash.
pub async fn insert(
    mut ex: impl Conn,
    user: UserId,
    info: &TokenInfo,
    token_hash: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO api_tokens (id, user_id, name, token_hash, created_at, expires_at, scope) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(info.id.to_string())
    .bind(user.to_string())
    .bind(&info.name)
    .bind(token_hash)
    .bind(info.created_at.0)
    .bind(info.expires_at.map(|t| t.0))
    .bind(info.scope.as_deref())
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// What a presented token hash resolves to.
pub struct TokenOwner {
    pub token_id: TokenId,
    pub user_id: UserId,
    pub expires_at: Option<i64>,
    pub revoked: bool,
    /// `None`: a full token; `extension`: prompting and reading only.
    pub scope: Option<String>,
}

/// `(id, user_id, expires_at, revoked_at, scope)`.
type OwnerRow = (String, String, Option<i64>, Option<i64>, Option<String>);

/// Looks a token up by hash.
pub async fn find_by_hash(mut ex: impl Conn, hash: &str) -> Result<Option<TokenOwner>> {
    let row: Option<OwnerRow> = sqlx::query_as(
        "SELECT id, user_id, expires_at, revoked_at, scope FROM api_tokens WHERE token_hash = $1",
    )
    .bind(hash)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(id, user, expires_at, revoked_at, scope)| {
        Ok(TokenOwner {
            token_id: TokenId(super::uuid(&id)?),
            user_id: UserId(super::uuid(&user)?),
            expires_at,
            revoked: revoked_at.is_some(),
            scope,
        })
    })
    .transpose()
}

/// Records a use (best effort, for display).
pub async fn touch(mut ex: impl Conn, id: TokenId, now: i64) -> Result<()> {
    sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
        .bind(now)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// A user's live (not revoked) tokens, newest first.
pub async fn list(mut ex: impl Conn, user: UserId) -> Result<Vec<TokenInfo>> {
    let rows: Vec<TokenRow> = sqlx::query_as(
        "SELECT id, name, created_at, expires_at, last_used_at, scope FROM api_tokens
         WHERE user_id = $1 AND revoked_at IS NULL ORDER BY created_at DESC",
    )
    .bind(user.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(TokenRow::into_info).collect()
}

/// Revokes one of a user's tokens; false if there was no such live token.
pub async fn revoke(mut ex: impl Conn, user: UserId, id: TokenId, now: i64) -> Result<bool> {
    let done = sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL")
        .bind(now)
        .bind(id.to_string())
        .bind(user.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Stores a one-time login code's hash.
pub async fn insert_login_code(
    mut ex: impl Conn,
    user: UserId,
    code_hash: &str,
    now: i64,
    expires_at: i64,
) -> Result<()> {
    sqlx::query("INSERT INTO login_codes (code_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)")
        .bind(code_hash)
        .bind(user.to_string())
        .bind(now)
        .bind(expires_at)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Marks a login code used and returns its user, if it was unused and unexpired. Atomic: a code
/// works once even when two requests race.
pub async fn redeem_login_code(
    mut ex: impl Conn,
    code_hash: &str,
    now: i64,
) -> Result<Option<UserId>> {
    let row: Option<(String,)> = sqlx::query_as(
        "UPDATE login_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1
         RETURNING user_id",
    )
    .bind(now)
    .bind(code_hash)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(u,)| Ok(UserId(super::uuid(&u)?))).transpose()
}

/// Revokes every API token of `user` and their unused login codes (they were deactivated).
pub async fn revoke_all(tx: &mut crate::Tx, user: UserId, now: i64) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE api_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(user.to_string())
    .execute(&mut *tx.tx)
    .await?;
    sqlx::query("UPDATE login_codes SET used_at = $1 WHERE user_id = $2 AND used_at IS NULL")
        .bind(now)
        .bind(user.to_string())
        .execute(&mut *tx.tx)
        .await?;
    Ok(done.rows_affected())
}
