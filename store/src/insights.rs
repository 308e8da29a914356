//! The numbers of the insights page: sessions started in a period, grouped by a key (repo,
//! person, agent, model, surface, day), summed in the database in one pass over the period's
//! sessions (their prompts, pull request and approvals joined in), and the few durations whose
//! medians are wanted (pull requests' and approvals'), read for the period's sessions that have
//! them. Counted by when a session started: its later pull request, merge and cost belong to
//! that session's period.

use crate::spend::RUNNING_STATES;
use crate::{Conn, Result};

/// What rows are keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Repo,
    Person,
    /// The session's agent spec as stored (JSON): the caller names it.
    Agent,
    Model,
    Surface,
    Day,
}

impl Key {
    fn expr(self) -> &'static str {
        match self {
            Key::Repo => "r.name",
            Key::Person => "s.author_name",
            Key::Agent => "s.agent",
            Key::Model => "COALESCE(s.model, '')",
            Key::Surface => {
                "CASE WHEN i.session_id IS NOT NULL THEN 'issue' WHEN s.author_kind = 'user' THEN 'web' ELSE s.author_kind END"
            }
            Key::Day => "CAST(s.created_at / 86400000 AS BIGINT)",
        }
    }
}

/// Which sessions count.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Started at or after (ms).
    pub from: i64,
    /// Started before (ms).
    pub to: i64,
    /// Only these people's sessions (their user id).
    pub author: Option<String>,
    /// Only this repo's (`owner/name`).
    pub repo: Option<String>,
}

/// One key's sums.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    pub key: String,
    /// The day (since 1970, UTC) the sessions started.
    pub day: i64,
    pub sessions: i64,
    pub prompts: i64,
    pub prs_opened: i64,
    pub prs_merged: i64,
    pub prs_closed: i64,
    /// Prompts after the first in sessions whose pull request was merged.
    pub follow_ups_merged: i64,
    pub model_requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_micros: i64,
    pub running_ms: i64,
    pub suspended_ms: i64,
    pub tests_run: i64,
    pub tests_passed: i64,
    pub interrupted: i64,
    pub retries: i64,
    pub approvals: i64,
}

/// One duration of one key (for medians).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duration {
    pub key: String,
    pub ms: i64,
}

/// The key's SQL as text (a day or an agent's JSON become text the same way on both
/// databases).
fn key_text(key: Key) -> String {
    match key {
        Key::Day => format!("CAST({} AS TEXT)", key.expr()),
        _ => key.expr().to_string(),
    }
}

const FROM: &str = "FROM sessions s JOIN repos r ON r.id = s.repo_id
    LEFT JOIN pull_requests pr ON pr.session_id = s.id
    LEFT JOIN issue_sessions i ON i.session_id = s.id";

/// The period's conditions on `s` (parameters `$1`, `$2`, and `$3`/`$4` for the optional
/// filters, which bind as NULL when unused).
const WHERE: &str = "s.created_at >= $1 AND s.created_at < $2
    AND ($3 IS NULL OR s.author_user_id = $3)
    AND ($4 IS NULL OR s.repo_id IN (SELECT id FROM repos WHERE name = $4))";

fn sum(expr: &str) -> String {
    format!("CAST(COALESCE(SUM({expr}), 0) AS BIGINT)")
}

/// The sums of every key and day (since 1970, UTC) in the period: one scan of the period's
/// sessions (their counts are kept on them as rows are written) with their pull requests.
pub async fn sums(mut ex: impl Conn, f: &Filter, key: Key, now: i64) -> Result<Vec<Sums>> {
    let live = |col: &str, states: &str| {
        format!(
            "s.{col} + CASE WHEN s.state IN {states} AND s.state_since IS NOT NULL AND s.state_since < $5 THEN $5 - s.state_since ELSE 0 END"
        )
    };
    let sql = format!(
        "SELECT {key}, {day}, CAST(COUNT(*) AS BIGINT), {prompts},
            {opened}, {merged}, {closed}, {follow_ups},
            {requests}, {pt}, {ct}, {cost}, {running}, {suspended},
            {tests}, {passed}, {interrupted}, {retries}, {approvals}
        {FROM}
        WHERE {WHERE}
        GROUP BY {key}, {day}",
        key = key_text(key),
        day = Key::Day.expr(),
        prompts = sum("s.prompts_count"),
        opened = sum("CASE WHEN pr.session_id IS NOT NULL THEN 1 ELSE 0 END"),
        merged = sum("CASE WHEN pr.state = 'merged' THEN 1 ELSE 0 END"),
        closed = sum("CASE WHEN pr.state = 'closed' THEN 1 ELSE 0 END"),
        follow_ups = sum(
            "CASE WHEN pr.state = 'merged' AND s.prompts_count > 1 THEN s.prompts_count - 1 ELSE 0 END"
        ),
        requests = sum("s.model_requests"),
        pt = sum("s.prompt_tokens"),
        ct = sum("s.completion_tokens"),
        cost = sum("s.cost_micros"),
        running = sum(&live("running_ms", RUNNING_STATES)),
        suspended = sum(&live("suspended_ms", "('suspended')")),
        tests = sum("s.tests_run"),
        passed = sum("s.tests_passed"),
        interrupted = sum("s.interrupted_turns"),
        retries = sum("s.retries"),
        approvals = sum("s.approvals_count"),
    );
    let rows = sqlx::query(&sql)
        .bind(f.from)
        .bind(f.to)
        .bind(f.author.clone())
        .bind(f.repo.clone())
        .bind(now)
        .fetch_all(ex.ex())
        .await?;
    use sqlx::Row as _;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let n = |i: usize| r.try_get::<i64, _>(i);
        out.push(Sums {
            key: r.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
            day: n(1)?,
            sessions: n(2)?,
            prompts: n(3)?,
            prs_opened: n(4)?,
            prs_merged: n(5)?,
            prs_closed: n(6)?,
            follow_ups_merged: n(7)?,
            model_requests: n(8)?,
            prompt_tokens: n(9)?,
            completion_tokens: n(10)?,
            cost_micros: n(11)?,
            running_ms: n(12)?,
            suspended_ms: n(13)?,
            tests_run: n(14)?,
            tests_passed: n(15)?,
            interrupted: n(16)?,
            retries: n(17)?,
            approvals: n(18)?,
        });
    }
    Ok(out)
}

/// Per key: each pull request's time from its session's start to its opening, each merged
/// one's time from opening to merge, and each answered approval's time to its answer.
#[derive(Default)]
pub struct Durations {
    pub to_pr: Vec<Duration>,
    pub review: Vec<Duration>,
    pub approval_answer: Vec<Duration>,
}

pub async fn durations(mut ex: impl Conn, f: &Filter, key: Key) -> Result<Durations> {
    let k = key_text(key);
    let prs: Vec<(Option<String>, i64, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT {k}, pr.created_at - s.created_at, pr.merged_at - pr.created_at
         {FROM} WHERE {WHERE} AND pr.session_id IS NOT NULL"
    ))
    .bind(f.from)
    .bind(f.to)
    .bind(f.author.clone())
    .bind(f.repo.clone())
    .fetch_all(ex.ex())
    .await?;
    let approvals: Vec<(Option<String>, i64)> = sqlx::query_as(&format!(
        "SELECT {k}, a.answered_at - a.asked_at
         {FROM} JOIN approvals a ON a.session_id = s.id
         WHERE {WHERE} AND a.answered_at IS NOT NULL AND a.answered_by IS NOT NULL"
    ))
    .bind(f.from)
    .bind(f.to)
    .bind(f.author.clone())
    .bind(f.repo.clone())
    .fetch_all(ex.ex())
    .await?;
    let mut to_pr = Vec::with_capacity(prs.len());
    let mut review = Vec::new();
    for (key, opened, merged) in prs {
        let key = key.unwrap_or_default();
        if let Some(ms) = merged {
            review.push(Duration {
                key: key.clone(),
                ms,
            });
        }
        to_pr.push(Duration { key, ms: opened });
    }
    Ok(Durations {
        to_pr,
        review,
        approval_answer: approvals
            .into_iter()
            .map(|(key, ms)| Duration {
                key: key.unwrap_or_default(),
                ms,
            })
            .collect(),
    })
}
