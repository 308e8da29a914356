//! Secrets, stored encrypted (the `secrets` module holds the key and does the crypto).

use crate::Conn;
use crate::Result;

/// An encrypted secret: `(nonce, ciphertext)`, both base64.
pub async fn get(mut ex: impl Conn, name: &str) -> Result<Option<(String, String)>> {
    Ok(
        sqlx::query_as("SELECT nonce, ciphertext FROM secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(ex.ex())
            .await?,
    )
}

/// Stores or replaces a secret.
pub async fn put(
    mut ex: impl Conn,
    name: &str,
    nonce: &str,
    ciphertext: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO secrets (name, nonce, ciphertext, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext, updated_at = excluded.updated_at",
    )
    .bind(name)
    .bind(nonce)
    .bind(ciphertext)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Deletes a secret; false if there was none.
pub async fn delete(mut ex: impl Conn, name: &str) -> Result<bool> {
    Ok(sqlx::query("DELETE FROM secrets WHERE name = $1")
        .bind(name)
        .execute(ex.ex())
        .await?
        .rows_affected()
        == 1)
}

/// Every secret's name and update time, by name.
pub async fn list(mut ex: impl Conn) -> Result<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT name, updated_at FROM secrets ORDER BY name")
            .fetch_all(ex.ex())
            .await?,
    )
}
