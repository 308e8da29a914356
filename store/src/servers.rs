//! The server processes sharing the database, by id (`<data dir>/server-id`), and the URL the
//! others reach each one at.

use crate::Conn;
use crate::Result;

/// Records (or refreshes) where server `id` is reached.
pub async fn register(mut ex: impl Conn, id: &str, url: &str, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO servers (id, url, seen_at) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at",
    )
    .bind(id)
    .bind(url)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// True when some server that runs workspaces renewed its registration since `since` (ms).
pub async fn any_since(mut ex: impl Conn, since: i64) -> Result<bool> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT id FROM servers WHERE seen_at > $1 LIMIT 1")
            .bind(since)
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.is_some())
}

/// Where server `id` is reached, if it ever said.
pub async fn url(mut ex: impl Conn, id: &str) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as("SELECT url FROM servers WHERE id = $1")
        .bind(id)
        .fetch_optional(ex.ex())
        .await?;
    Ok(row.map(|r| r.0))
}
