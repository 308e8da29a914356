//! Secrets, stored encrypted (the `secrets` module holds the key and does the crypto).

use sqlx::{Any, Executor};

use crate::Result;

/// An encrypted secret: `(nonce, ciphertext)`, both base64.
pub async fn get<'e>(
    ex: impl Executor<'e, Database = Any>,
    name: &str,
) -> Result<Option<(String, String)>> {
    Ok(
        sqlx::query_as("SELECT nonce, ciphertext FROM secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(ex)
            .await?,
    )
}

/// Stores or replaces a secret.
pub async fn put<'e>(
    ex: impl Executor<'e, Database = Any>,
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
    .execute(ex)
    .await?;
    Ok(())
}

/// Deletes a secret; false if there was none.
pub async fn delete<'e>(ex: impl Executor<'e, Database = Any>, name: &str) -> Result<bool> {
    Ok(sqlx::query("DELETE FROM secrets WHERE name = $1")
        .bind(name)
        .execute(ex)
        .await?
        .rows_affected()
        == 1)
}

/// Every secret's name and update time, by name.
pub async fn list<'e>(ex: impl Executor<'e, Database = Any>) -> Result<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT name, updated_at FROM secrets ORDER BY name")
            .fetch_all(ex)
            .await?,
    )
}
