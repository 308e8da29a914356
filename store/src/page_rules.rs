//! URL-pattern → repo rules: which repo a page belongs to, the Chrome extension's default.

use tandem_protocol::extension::PageRule;
use tandem_protocol::{RepoId, UserId};

use crate::{Conn, Result, Tx};

/// Every rule with its repo's name, by pattern.
pub async fn list(mut ex: impl Conn) -> Result<Vec<PageRule>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT r.pattern, r.repo_id, p.name FROM page_rules r JOIN repos p ON p.id = r.repo_id
         ORDER BY r.pattern",
    )
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(pattern, repo, repo_name)| {
            Ok(PageRule {
                pattern,
                repo_id: RepoId(super::uuid(&repo)?),
                repo_name,
            })
        })
        .collect()
}

/// Replaces every rule with `rules`, in the caller's transaction.
pub async fn replace(
    conn: &mut Tx,
    rules: &[(String, RepoId)],
    by: UserId,
    now: i64,
) -> Result<()> {
    sqlx::query("DELETE FROM page_rules")
        .execute(&mut *conn.tx)
        .await?;
    for (pattern, repo) in rules {
        sqlx::query(
            "INSERT INTO page_rules (pattern, repo_id, created_by, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(pattern)
        .bind(repo.to_string())
        .bind(by.to_string())
        .bind(now)
        .execute(&mut *conn.tx)
        .await?;
    }
    Ok(())
}
