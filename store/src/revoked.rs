//! `revoked_logins`: browser logins ended before their expiry, by token id.

use crate::Conn;
use crate::Result;

/// Records `jti` as ended (until `expires_at`, ms, after which the token is dead anyway), and
/// forgets rows past their expiry.
pub async fn revoke(db: &crate::Db, jti: &str, expires_at: i64, now: i64) -> Result<()> {
    sqlx::query("DELETE FROM revoked_logins WHERE expires_at < $1")
        .bind(now)
        .execute(db.raw_pool())
        .await?;
    sqlx::query(
        "INSERT INTO revoked_logins (jti, expires_at) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING",
    )
    .bind(jti)
    .bind(expires_at)
    .execute(db.raw_pool())
    .await?;
    Ok(())
}

/// True when the login `jti` was ended.
pub async fn is_revoked(mut ex: impl Conn, jti: &str) -> Result<bool> {
    let row: Option<(String,)> = sqlx::query_as("SELECT jti FROM revoked_logins WHERE jti = $1")
        .bind(jti)
        .fetch_optional(ex.ex())
        .await?;
    Ok(row.is_some())
}
