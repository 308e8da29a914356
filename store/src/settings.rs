//! The `settings` table: values set on the settings page, as JSON text by key.

use crate::Conn;
use crate::Result;

/// Every stored setting, `(key, JSON value)`.
pub async fn all(mut ex: impl Conn) -> Result<Vec<(String, String)>> {
    Ok(
        sqlx::query_as("SELECT key, value FROM settings ORDER BY key")
            .fetch_all(ex.ex())
            .await?,
    )
}

/// Stores or replaces one setting.
pub async fn put(mut ex: impl Conn, key: &str, value: &str, now: i64, by: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO settings (key, value, updated_at, updated_by) VALUES ($1, $2, $3, $4)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by",
    )
    .bind(key)
    .bind(value)
    .bind(now)
    .bind(by)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Removes one setting (back to the file's value or the default).
pub async fn delete(mut ex: impl Conn, key: &str) -> Result<()> {
    sqlx::query("DELETE FROM settings WHERE key = $1")
        .bind(key)
        .execute(ex.ex())
        .await?;
    Ok(())
}
