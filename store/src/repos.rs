//! Repos.

use sqlx::FromRow;
use tandem_protocol::people::{Grantee, RepoAccess, RepoGrant, RepoRole};
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
    access: String,
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
            access: RepoAccess::parse(&self.access).unwrap_or(RepoAccess::Members),
        })
    }
}

const COLUMNS: &str = "id, name, url, default_branch, created_by, created_at, warm_pool, access";

/// Inserts a repo; a duplicate name is a unique violation.
pub async fn insert(mut ex: impl Conn, repo: &Repo) -> Result<()> {
    sqlx::query(
        "INSERT INTO repos (id, name, url, default_branch, created_by, created_at, warm_pool, access) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(repo.id.to_string())
    .bind(&repo.name)
    .bind(&repo.url)
    .bind(&repo.default_branch)
    .bind(repo.created_by.to_string())
    .bind(repo.created_at.0)
    .bind(repo.warm_pool)
    .bind(repo.access.as_str())
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

/// Sets who may use a repo and replaces its grants, in one transaction's `ex`; false if there
/// is no such repo.
pub async fn set_access(
    ex: &mut crate::Tx,
    id: RepoId,
    access: RepoAccess,
    grants: &[RepoGrant],
    now: i64,
) -> Result<bool> {
    let done = sqlx::query("UPDATE repos SET access = $1 WHERE id = $2")
        .bind(access.as_str())
        .bind(id.to_string())
        .execute(&mut *ex.tx)
        .await?;
    if done.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM repo_grants WHERE repo_id = $1")
        .bind(id.to_string())
        .execute(&mut *ex.tx)
        .await?;
    for g in grants {
        let (kind, who) = match &g.grantee {
            Grantee::User(u) => ("user", u.to_string()),
            Grantee::Group(name) => ("group", name.clone()),
        };
        sqlx::query(
            "INSERT INTO repo_grants (repo_id, kind, who, role, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id.to_string())
        .bind(kind)
        .bind(who)
        .bind(g.role.as_str())
        .bind(now)
        .execute(&mut *ex.tx)
        .await?;
    }
    Ok(true)
}

/// A repo's grants, people first.
pub async fn grants(mut ex: impl Conn, id: RepoId) -> Result<Vec<RepoGrant>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT kind, who, role FROM repo_grants WHERE repo_id = $1 ORDER BY kind DESC, who",
    )
    .bind(id.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .filter_map(|(kind, who, role)| {
            let role = RepoRole::parse(&role)?;
            let grantee = match kind.as_str() {
                "user" => match super::uuid(&who) {
                    Ok(u) => Grantee::User(UserId(u)),
                    Err(e) => return Some(Err(e)),
                },
                "group" => Grantee::Group(who),
                _ => return None,
            };
            Some(Ok(RepoGrant { grantee, role }))
        })
        .collect()
}

/// Every grant that names `user` or one of `groups`: `(repo, role)`.
pub async fn grants_for(
    mut ex: impl Conn,
    user: UserId,
    groups: &[String],
) -> Result<Vec<(RepoId, RepoRole)>> {
    let rows: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT repo_id, kind, who, role FROM repo_grants WHERE kind = 'group' OR (kind = 'user' AND who = $1)")
            .bind(user.to_string())
            .fetch_all(ex.ex())
            .await?;
    let mut out = Vec::new();
    for (repo, kind, who, role) in rows {
        if kind == "group" && !groups.contains(&who) {
            continue;
        }
        if let Some(role) = RepoRole::parse(&role) {
            out.push((RepoId(super::uuid(&repo)?), role));
        }
    }
    Ok(out)
}
