//! What the agents use, counted as the gateway relays each model answer: a session's tokens
//! and cost, its tree's totals on the root, and each person's and repo's use per day (UTC).
//! Sandbox time is counted at each state change (`sessions::transition`).

use tandem_protocol::{PromptId, RepoId, SessionId, UserId};

use crate::{Conn, Db, Result};

/// States in which a session's workspace runs (its sandbox minutes).
pub const RUNNING_STATES: &str = "('starting', 'ready', 'running', 'idle')";

/// The day (since 1970-01-01, UTC) of `at_ms`.
pub fn day_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(86_400_000)
}

/// One model answer's use.
#[derive(Clone, Debug)]
pub struct Used<'a> {
    pub session: SessionId,
    pub root: SessionId,
    pub repo: RepoId,
    /// Whose prompt was running (none: an automation's or a guest's).
    pub person: Option<UserId>,
    pub model: &'a str,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_micros: i64,
    pub at_ms: i64,
}

/// Counts `u` against its session, its tree's root, its person's day and its repo's day, in
/// one transaction.
pub async fn record(db: &Db, u: &Used<'_>) -> Result<()> {
    let tokens = u.prompt_tokens.saturating_add(u.completion_tokens);
    let mut tx = db.begin().await?;
    sqlx::query(
        "UPDATE sessions SET model = $2, prompt_tokens = prompt_tokens + $3,
            completion_tokens = completion_tokens + $4, cost_micros = cost_micros + $5
         WHERE id = $1",
    )
    .bind(u.session.to_string())
    .bind(u.model)
    .bind(u.prompt_tokens)
    .bind(u.completion_tokens)
    .bind(u.cost_micros)
    .execute(&mut *tx.tx)
    .await?;
    sqlx::query(
        "UPDATE sessions SET tree_tokens = tree_tokens + $2, tree_cost_micros = tree_cost_micros + $3
         WHERE id = $1",
    )
    .bind(u.root.to_string())
    .bind(tokens)
    .bind(u.cost_micros)
    .execute(&mut *tx.tx)
    .await?;
    let day = day_of(u.at_ms);
    let mut daily = vec![("repo", u.repo.to_string())];
    if let Some(p) = u.person {
        daily.push(("person", p.to_string()));
    }
    for (scope, key) in daily {
        sqlx::query(
            "INSERT INTO spend_daily (scope, key, day, tokens, cost_micros) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (scope, key, day) DO UPDATE SET tokens = spend_daily.tokens + excluded.tokens,
                cost_micros = spend_daily.cost_micros + excluded.cost_micros",
        )
        .bind(scope)
        .bind(key)
        .bind(day)
        .bind(tokens)
        .bind(u.cost_micros)
        .execute(&mut *tx.tx)
        .await?;
    }
    tx.commit().await
}

/// A session tree's use, read on its root, and the root's own limits (an automation's run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeUse {
    pub tokens: i64,
    pub cost_micros: i64,
    /// Sandbox time of every session of the tree, a running one's counted up to `now`.
    pub running_ms: i64,
    pub token_budget: Option<i64>,
    pub cost_budget_micros: Option<i64>,
}

/// The use of the tree whose root is `root`, as of `now`.
pub async fn tree_use(mut ex: impl Conn, root: SessionId, now: i64) -> Result<TreeUse> {
    let row: Option<(i64, i64, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT tree_tokens, tree_cost_micros, token_budget, cost_budget_micros FROM sessions WHERE id = $1",
    )
    .bind(root.to_string())
    .fetch_optional(ex.ex())
    .await?;
    let Some((tokens, cost_micros, token_budget, cost_budget_micros)) = row else {
        return Ok(TreeUse::default());
    };
    let (running_ms,): (i64,) = sqlx::query_as(&format!(
        "SELECT CAST(COALESCE(SUM(running_ms + CASE WHEN state IN {RUNNING_STATES}
                AND state_since IS NOT NULL AND state_since < $2 THEN $2 - state_since ELSE 0 END), 0) AS BIGINT)
         FROM sessions WHERE id = $1 OR root_id = $1"
    ))
    .bind(root.to_string())
    .bind(now)
    .fetch_one(ex.ex())
    .await?;
    Ok(TreeUse {
        tokens,
        cost_micros,
        running_ms,
        token_budget,
        cost_budget_micros,
    })
}

/// A person's (`scope` "person") or repo's ("repo") use on `day`: `(tokens, cost_micros)`.
pub async fn daily(mut ex: impl Conn, scope: &str, key: &str, day: i64) -> Result<(i64, i64)> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT tokens, cost_micros FROM spend_daily WHERE scope = $1 AND key = $2 AND day = $3",
    )
    .bind(scope)
    .bind(key)
    .bind(day)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.unwrap_or((0, 0)))
}

/// A session's own use: `(tokens, cost_micros, sandbox ms up to now)`.
pub async fn session_use(mut ex: impl Conn, id: SessionId, now: i64) -> Result<(i64, i64, i64)> {
    let row: Option<(i64, i64, i64)> = sqlx::query_as(&format!(
        "SELECT prompt_tokens + completion_tokens, cost_micros,
            running_ms + CASE WHEN state IN {RUNNING_STATES} AND state_since IS NOT NULL
                AND state_since < $2 THEN $2 - state_since ELSE 0 END
         FROM sessions WHERE id = $1"
    ))
    .bind(id.to_string())
    .bind(now)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.unwrap_or((0, 0, 0)))
}

/// Whether session `id`'s timeline already says that its turn `prompt` stopped at a limit
/// (any turn, without one).
pub async fn limit_told(
    mut ex: impl Conn,
    id: SessionId,
    prompt: Option<PromptId>,
) -> Result<bool> {
    let since = match prompt {
        Some(p) => {
            sqlx::query_as::<_, (Option<i64>,)>("SELECT started_at FROM prompts WHERE id = $1")
                .bind(p.to_string())
                .fetch_optional(ex.ex())
                .await?
                .and_then(|(t,)| t)
                .unwrap_or(0)
        }
        None => 0,
    };
    let row: Option<(i64,)> = sqlx::query_as(
        "SELECT seq FROM events WHERE session_id = $1 AND type = 'limit_reached' AND at >= $2
         ORDER BY seq DESC LIMIT 1",
    )
    .bind(id.to_string())
    .bind(since)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.is_some())
}

/// Sets a run's limits from its automation (on its root, at creation).
pub async fn set_tree_budgets(
    mut ex: impl Conn,
    root: SessionId,
    tokens: Option<i64>,
    cost_micros: Option<i64>,
) -> Result<()> {
    sqlx::query("UPDATE sessions SET token_budget = $2, cost_budget_micros = $3 WHERE id = $1")
        .bind(root.to_string())
        .bind(tokens)
        .bind(cost_micros)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Counts a test command the agent ran in session `id`, and whether it passed.
pub async fn count_test_run(mut ex: impl Conn, id: SessionId, passed: bool) -> Result<()> {
    sqlx::query(
        "UPDATE sessions SET tests_run = tests_run + 1, tests_passed = tests_passed + $2 WHERE id = $1",
    )
    .bind(id.to_string())
    .bind(i64::from(passed))
    .execute(ex.ex())
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_day_starts_at_utc_midnight() {
        assert_eq!(super::day_of(0), 0);
        assert_eq!(super::day_of(86_399_999), 0);
        assert_eq!(super::day_of(86_400_000), 1);
        assert_eq!(super::day_of(-1), -1);
    }
}
