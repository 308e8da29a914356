//! Remote MCP servers an admin configured.

use sqlx::FromRow;
use tandem_protocol::approval::McpServer;

use crate::{Conn, Error, Result};

#[derive(FromRow)]
struct Row {
    name: String,
    url: String,
    secret: Option<String>,
    repos: String,
    rules: String,
    repo_rules: String,
}

impl Row {
    fn into_server(self) -> Result<McpServer> {
        let bad =
            |e: serde_json::Error| Error::Internal(format!("stored MCP server unreadable: {e}"));
        Ok(McpServer {
            name: self.name,
            url: self.url,
            secret: self.secret,
            secret_set: false,
            repos: serde_json::from_str(&self.repos).map_err(bad)?,
            rules: serde_json::from_str(&self.rules).map_err(bad)?,
            repo_rules: serde_json::from_str(&self.repo_rules).map_err(bad)?,
        })
    }
}

/// Every server, by name.
pub async fn list(mut ex: impl Conn) -> Result<Vec<McpServer>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT name, url, secret, repos, rules, repo_rules FROM mcp_servers ORDER BY name",
    )
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_server).collect()
}

/// Creates or replaces one.
pub async fn put(mut ex: impl Conn, s: &McpServer, by: &str, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO mcp_servers (name, url, secret, repos, rules, repo_rules, updated_at, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (name) DO UPDATE SET url = $2, secret = $3, repos = $4, rules = $5, repo_rules = $6, updated_at = $7, updated_by = $8",
    )
    .bind(&s.name)
    .bind(&s.url)
    .bind(s.secret.as_deref())
    .bind(j(&s.repos))
    .bind(j(&s.rules))
    .bind(j(&s.repo_rules))
    .bind(now)
    .bind(by)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Removes one; `false` if there was none.
pub async fn delete(mut ex: impl Conn, name: &str) -> Result<bool> {
    let done = sqlx::query("DELETE FROM mcp_servers WHERE name = $1")
        .bind(name)
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

fn j<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
