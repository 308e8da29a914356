//! Repos.

use sqlx::FromRow;
use tandem_protocol::{Repo, RepoId, Timestamp, UserId};

use crate::Conn;
use crate::Result;

#[derive(FromRow)]
struct RepoRow {
    id: String,
    name: String,
    url: String,
    default_branch: String,
    created_by: String,
    created_at: i64,
    warm_pool: i64,
}

impl RepoRow {
    fn into_repo(self) -> Result<Repo> {
        Ok(Repo {
            id: RepoId(super::uuid(&self.id)?),
            name: self.name,
            url: self.url,
            default_branch: self.default_branch,
            created_by: UserId(super::uuid(&self.created_by)?),
            created_at: Timestamp(self.created_at),
            warm_pool: self.warm_pool,
            warm_ready: 0,
        })
    }
}

const COLUMNS: &str = "id, name, url, default_branch, created_by, created_at, warm_pool";

/// Inserts a repo; a duplicate name is a unique violation.
pub async fn insert(mut ex: impl Conn, repo: &Repo) -> Result<()> {
    sqlx::query(
        "INSERT INTO repos (id, name, url, default_branch, created_by, created_at, warm_pool) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(repo.id.to_string())
    .bind(&repo.name)
    .bind(&repo.url)
    .bind(&repo.default_branch)
    .bind(repo.created_by.to_string())
    .bind(repo.created_at.0)
    .bind(repo.warm_pool)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A repo by id.
pub async fn get(mut ex: impl Conn, id: RepoId) -> Result<Option<Repo>> {
    let row: Option<RepoRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM repos WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(ex.ex())
            .await?;
    row.map(RepoRow::into_repo).transpose()
}

/// All repos by name.
pub async fn list(mut ex: impl Conn, limit: i64) -> Result<Vec<Repo>> {
    let rows: Vec<RepoRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM repos ORDER BY name LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(RepoRow::into_repo).collect()
}

/// Sets a repo's warm pool size; false if there is no such repo.
pub async fn set_warm_pool(mut ex: impl Conn, id: RepoId, size: i64) -> Result<bool> {
    let done = sqlx::query("UPDATE repos SET warm_pool = $1 WHERE id = $2")
        .bind(size)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}
