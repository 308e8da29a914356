//! Automations and their runs. A run is claimed by inserting its (automation, period) row: the
//! primary key lets one server process win a period, however many look at it.

use sqlx::FromRow;
use tandem_protocol::automation::{Automation, AutomationRun, Trigger};
use tandem_protocol::{AutomationId, RepoId, SessionId, Timestamp, UserId};

use crate::sessions::{agent_json, agent_spec};
use crate::{Conn, Result, Tx};

#[derive(FromRow)]
struct Row {
    id: String,
    repo_id: String,
    repo_name: String,
    name: String,
    prompt: String,
    schedule: Option<String>,
    ci_max_runs: Option<i64>,
    agent: Option<String>,
    created_by: String,
    created_by_name: String,
    created_at: i64,
    next_at: Option<i64>,
    max_model_requests: Option<i64>,
    max_tokens: Option<i64>,
    max_cost_micros: Option<i64>,
}

impl Row {
    fn into_automation(self) -> Result<Automation> {
        Ok(Automation {
            id: AutomationId(super::uuid(&self.id)?),
            repo_id: RepoId(super::uuid(&self.repo_id)?),
            repo_name: self.repo_name,
            name: self.name,
            prompt: self.prompt,
            trigger: match (self.schedule, self.ci_max_runs) {
                (Some(cron), _) => Trigger::Schedule { cron },
                (None, Some(n)) => Trigger::CiFailure {
                    max_runs: u32::try_from(n).unwrap_or(0),
                },
                (None, None) => Trigger::Webhook,
            },
            agent: self.agent.as_deref().map(agent_spec).transpose()?,
            created_by: UserId(super::uuid(&self.created_by)?),
            created_by_name: self.created_by_name,
            created_at: Timestamp(self.created_at),
            next_at: self.next_at.map(Timestamp),
            max_model_requests: self
                .max_model_requests
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_micros.map(|m| m as f64 / 1e6),
        })
    }
}

const SELECT: &str =
    "SELECT a.id, a.repo_id, r.name AS repo_name, a.name, a.prompt, a.schedule, a.ci_max_runs, a.agent,
        a.created_by, u.name AS created_by_name, a.created_at, a.next_at, a.max_model_requests,
        a.max_tokens, a.max_cost_micros
    FROM automations a JOIN repos r ON r.id = a.repo_id JOIN users u ON u.id = a.created_by";

/// Stores `a`; a webhook's with the hash of its URL's secret.
pub async fn insert(mut ex: impl Conn, a: &Automation, webhook_hash: Option<&str>) -> Result<()> {
    let (schedule, ci) = match &a.trigger {
        Trigger::Schedule { cron } => (Some(cron.as_str()), None),
        Trigger::Webhook => (None, None),
        Trigger::CiFailure { max_runs } => (None, Some(i64::from(*max_runs))),
    };
    sqlx::query(
        "INSERT INTO automations (id, repo_id, name, prompt, schedule, webhook_hash, agent, created_by, created_at, next_at, ci_max_runs, max_model_requests, max_tokens, max_cost_micros)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(a.id.to_string())
    .bind(a.repo_id.to_string())
    .bind(&a.name)
    .bind(&a.prompt)
    .bind(schedule)
    .bind(webhook_hash)
    .bind(a.agent.as_ref().map(agent_json))
    .bind(a.created_by.to_string())
    .bind(a.created_at.0)
    .bind(a.next_at.map(|t| t.0))
    .bind(ci)
    .bind(a.max_model_requests.map(i64::from))
    .bind(a.max_tokens)
    .bind(a.max_cost_usd.map(|d| (d * 1e6).round() as i64))
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Every automation, by name.
pub async fn list(mut ex: impl Conn) -> Result<Vec<Automation>> {
    let rows: Vec<Row> = sqlx::query_as(&format!("{SELECT} ORDER BY a.name, a.id"))
        .fetch_all(ex.ex())
        .await?;
    rows.into_iter().map(Row::into_automation).collect()
}

pub async fn get(mut ex: impl Conn, id: AutomationId) -> Result<Option<Automation>> {
    let row: Option<Row> = sqlx::query_as(&format!("{SELECT} WHERE a.id = $1"))
        .bind(id.to_string())
        .fetch_optional(ex.ex())
        .await?;
    row.map(Row::into_automation).transpose()
}

/// The webhook automation whose URL's secret hashes to `hash`.
pub async fn by_webhook(mut ex: impl Conn, hash: &str) -> Result<Option<Automation>> {
    let row: Option<Row> = sqlx::query_as(&format!("{SELECT} WHERE a.webhook_hash = $1"))
        .bind(hash)
        .fetch_optional(ex.ex())
        .await?;
    row.map(Row::into_automation).transpose()
}

/// How many runs `id` has had since `since`.
pub async fn runs_since(mut ex: impl Conn, id: AutomationId, since: i64) -> Result<i64> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM automation_runs WHERE automation_id = $1 AND created_at >= $2",
    )
    .bind(id.to_string())
    .bind(since)
    .fetch_one(ex.ex())
    .await?;
    Ok(n)
}

/// Claims a webhook call's run (its period: the call's time); false when one at that very
/// millisecond was claimed first.
pub async fn claim_call(conn: &mut Tx, id: AutomationId, now: i64) -> Result<bool> {
    let claimed = sqlx::query(
        "INSERT INTO automation_runs (automation_id, period, created_at) VALUES ($1, $2, $2)
         ON CONFLICT (automation_id, period) DO NOTHING",
    )
    .bind(id.to_string())
    .bind(now)
    .execute(&mut *conn.tx)
    .await?;
    Ok(claimed.rows_affected() == 1)
}

/// The CI-failure automations of `repo`.
pub async fn on_ci_failure(mut ex: impl Conn, repo: RepoId) -> Result<Vec<Automation>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "{SELECT} WHERE a.repo_id = $1 AND a.ci_max_runs IS NOT NULL ORDER BY a.created_at"
    ))
    .bind(repo.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_automation).collect()
}

/// How many runs of `id` went to `session`.
pub async fn runs_for_session(
    mut ex: impl Conn,
    id: AutomationId,
    session: SessionId,
) -> Result<i64> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM automation_runs WHERE automation_id = $1 AND session_id = $2",
    )
    .bind(id.to_string())
    .bind(session.to_string())
    .fetch_one(ex.ex())
    .await?;
    Ok(n)
}

/// Schedules due at `now`.
pub async fn due(mut ex: impl Conn, now: i64) -> Result<Vec<Automation>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "{SELECT} WHERE a.schedule IS NOT NULL AND a.next_at <= $1 ORDER BY a.next_at"
    ))
    .bind(now)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_automation).collect()
}

pub async fn delete(mut ex: impl Conn, id: AutomationId) -> Result<bool> {
    let done = sqlx::query("DELETE FROM automations WHERE id = $1")
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Claims `period` of `id` and moves its next run to `next_at`, in the caller's transaction:
/// false when another process claimed that period first (nothing changes then).
pub async fn claim(
    conn: &mut Tx,
    id: AutomationId,
    period: i64,
    next_at: i64,
    now: i64,
) -> Result<bool> {
    let claimed = sqlx::query(
        "INSERT INTO automation_runs (automation_id, period, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (automation_id, period) DO NOTHING",
    )
    .bind(id.to_string())
    .bind(period)
    .bind(now)
    .execute(&mut *conn.tx)
    .await?;
    if claimed.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("UPDATE automations SET next_at = $1 WHERE id = $2 AND next_at < $1")
        .bind(next_at)
        .bind(id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    Ok(true)
}

/// Records what a claimed run made.
pub async fn finish_run(
    mut ex: impl Conn,
    id: AutomationId,
    period: i64,
    session: Option<SessionId>,
    error: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE automation_runs SET session_id = $1, error = $2 WHERE automation_id = $3 AND period = $4",
    )
    .bind(session.map(|s| s.to_string()))
    .bind(error)
    .bind(id.to_string())
    .bind(period)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A run as stored: automation, period, session, error, created at.
type RunRow = (String, i64, Option<String>, Option<String>, i64);

/// An automation's runs, newest first.
pub async fn runs(mut ex: impl Conn, id: AutomationId, limit: i64) -> Result<Vec<AutomationRun>> {
    let rows: Vec<RunRow> = sqlx::query_as(
        "SELECT automation_id, period, session_id, error, created_at FROM automation_runs
         WHERE automation_id = $1 ORDER BY period DESC LIMIT $2",
    )
    .bind(id.to_string())
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(a, period, session, error, at)| {
            Ok(AutomationRun {
                automation_id: AutomationId(super::uuid(&a)?),
                period: Timestamp(period),
                session_id: session
                    .as_deref()
                    .map(|s| super::uuid(s).map(SessionId))
                    .transpose()?,
                error,
                created_at: Timestamp(at),
            })
        })
        .collect()
}

/// The name of the automation whose run session `root` is, if it is one.
pub async fn name_of_run(mut ex: impl Conn, root: SessionId) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT a.name FROM automation_runs r JOIN automations a ON a.id = r.automation_id
         WHERE r.session_id = $1",
    )
    .bind(root.to_string())
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.map(|(n,)| n))
}
