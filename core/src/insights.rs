//! What the agents got merged and what it cost (`/api/insights`): the store's sums per key,
//! with rates, medians and per-merge costs worked out here. Admins see every session; anyone
//! else the sessions they started.

use std::collections::BTreeMap;

use tandem_protocol::spend::{GroupBy, Insights, InsightsRow};
use tandem_protocol::{Timestamp, User};

use crate::db::{self, Db, insights as store};
use crate::{Error, Result, now_ms};

/// The longest period asked for at once.
pub const MAX_PERIOD_MS: i64 = 400 * 86_400_000;

/// The period when none is asked for.
pub const DEFAULT_PERIOD_MS: i64 = 30 * 86_400_000;

/// What `/api/insights` is asked.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub group_by: GroupBy,
    /// Only this repo (`owner/name`).
    pub repo: Option<String>,
}

fn key_of(g: GroupBy) -> store::Key {
    match g {
        GroupBy::Repo => store::Key::Repo,
        GroupBy::Person => store::Key::Person,
        GroupBy::Agent => store::Key::Agent,
        GroupBy::Model => store::Key::Model,
        GroupBy::Surface => store::Key::Surface,
        GroupBy::Day => store::Key::Day,
    }
}

/// A stored key as people read it: an agent's name, a day's date.
fn name_key(g: GroupBy, key: &str) -> String {
    match g {
        GroupBy::Agent => db::sessions::agent_spec(key)
            .map(|a| a.name().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        GroupBy::Day => key
            .parse::<i64>()
            .ok()
            .map(day_name)
            .unwrap_or_else(|| key.to_string()),
        GroupBy::Model if key.is_empty() => "(no model request)".into(),
        _ => key.to_string(),
    }
}

/// Day `n` since 1970-01-01 as `YYYY-MM-DD` (the civil calendar, proleptic Gregorian).
pub fn day_name(n: i64) -> String {
    let z = n + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn median(mut v: Vec<i64>) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    })
}

fn add(a: &mut store::Sums, b: &store::Sums) {
    a.sessions += b.sessions;
    a.prompts += b.prompts;
    a.prs_opened += b.prs_opened;
    a.prs_merged += b.prs_merged;
    a.prs_closed += b.prs_closed;
    a.follow_ups_merged += b.follow_ups_merged;
    a.model_requests += b.model_requests;
    a.prompt_tokens += b.prompt_tokens;
    a.completion_tokens += b.completion_tokens;
    a.cost_micros += b.cost_micros;
    a.running_ms += b.running_ms;
    a.suspended_ms += b.suspended_ms;
    a.tests_run += b.tests_run;
    a.tests_passed += b.tests_passed;
    a.interrupted += b.interrupted;
    a.retries += b.retries;
    a.approvals += b.approvals;
}

/// Durations of each key, for its medians.
#[derive(Default)]
struct Times {
    to_pr: Vec<i64>,
    review: Vec<i64>,
    answer: Vec<i64>,
}

fn row(key: String, s: &store::Sums, t: Times) -> InsightsRow {
    let ratio = |n: i64, d: i64| (d > 0).then(|| n as f64 / d as f64);
    InsightsRow {
        key,
        sessions: s.sessions,
        prompts: s.prompts,
        pull_requests_opened: s.prs_opened,
        pull_requests_merged: s.prs_merged,
        pull_requests_closed: s.prs_closed,
        merge_rate: ratio(s.prs_merged, s.prs_opened),
        median_prompt_to_pr_ms: median(t.to_pr),
        median_review_ms: median(t.review),
        follow_ups_per_merged: ratio(s.follow_ups_merged, s.prs_merged),
        model_requests: s.model_requests,
        prompt_tokens: s.prompt_tokens,
        completion_tokens: s.completion_tokens,
        cost_micros: s.cost_micros,
        cost_per_merged_micros: (s.prs_merged > 0).then(|| s.cost_micros / s.prs_merged),
        sandbox_running_minutes: s.running_ms as f64 / 60_000.0,
        sandbox_suspended_minutes: s.suspended_ms as f64 / 60_000.0,
        tests_run: s.tests_run,
        tests_passed: s.tests_passed,
        interrupted_turns: s.interrupted,
        retries: s.retries,
        approvals_asked: s.approvals,
        median_approval_answer_ms: median(t.answer),
    }
}

/// Rows of `g` (named, merged where two stored keys name the same thing), their total, and
/// the days: all from one scan's sums per key and day, and the durations for the medians.
async fn grouped(
    db: &Db,
    f: &store::Filter,
    g: GroupBy,
    now: i64,
) -> Result<(Vec<InsightsRow>, InsightsRow, Vec<InsightsRow>)> {
    let key = key_of(g);
    let sums = store::sums(db, f, key, now).await?;
    let d = store::durations(db, f, key).await?;
    let mut by: BTreeMap<String, (store::Sums, Times)> = BTreeMap::new();
    let mut days: BTreeMap<i64, store::Sums> = BTreeMap::new();
    let mut total = (store::Sums::default(), Times::default());
    for s in &sums {
        let e = by.entry(name_key(g, &s.key)).or_default();
        add(&mut e.0, s);
        add(&mut total.0, s);
        add(days.entry(s.day).or_default(), s);
    }
    let mut put = |list: Vec<store::Duration>, pick: fn(&mut Times) -> &mut Vec<i64>| {
        for x in list {
            pick(&mut total.1).push(x.ms);
            pick(&mut by.entry(name_key(g, &x.key)).or_default().1).push(x.ms);
        }
    };
    put(d.to_pr, |t| &mut t.to_pr);
    put(d.review, |t| &mut t.review);
    put(d.approval_answer, |t| &mut t.answer);
    let mut rows: Vec<InsightsRow> = by.into_iter().map(|(k, (s, t))| row(k, &s, t)).collect();
    match g {
        // Days in order; anything else by what it cost, then by sessions.
        GroupBy::Day => {}
        _ => rows.sort_by(|a, b| {
            b.cost_micros
                .cmp(&a.cost_micros)
                .then(b.sessions.cmp(&a.sessions))
                .then(a.key.cmp(&b.key))
        }),
    }
    // Every day of the period, those without a session too.
    let (first, last) = (
        f.from.div_euclid(86_400_000),
        (f.to - 1).div_euclid(86_400_000),
    );
    let days = (first..=last)
        .map(|day| {
            let s = days.remove(&day).unwrap_or_default();
            row(day_name(day), &s, Times::default())
        })
        .collect();
    Ok((rows, row(String::new(), &total.0, total.1), days))
}

/// The insights `who` may see for `q`.
pub async fn insights(db: &Db, who: &User, q: &Query) -> Result<Insights> {
    let now = now_ms();
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or(to.saturating_sub(DEFAULT_PERIOD_MS));
    if from >= to {
        return Err(Error::Invalid("from must be before to".into()));
    }
    if to.saturating_sub(from) > MAX_PERIOD_MS {
        return Err(Error::Invalid(format!(
            "a period is at most {} days: ask for a shorter one",
            MAX_PERIOD_MS / 86_400_000
        )));
    }
    let own_only = !who.is_admin;
    let f = store::Filter {
        from,
        to,
        author: own_only.then(|| who.id.to_string()),
        repo: q.repo.clone(),
    };
    let (rows, total, days) = grouped(db, &f, q.group_by, now).await?;
    Ok(Insights {
        from: Timestamp(from),
        to: Timestamp(to),
        group_by: q.group_by,
        rows,
        total,
        days,
        own_only,
    })
}

/// The rows as CSV (a header, then a row per key and the total last).
pub fn csv(i: &Insights) -> String {
    let mut out = String::from(
        "key,sessions,prompts,pull_requests_opened,pull_requests_merged,pull_requests_closed,merge_rate,median_prompt_to_pr_minutes,median_review_minutes,follow_ups_per_merged,model_requests,prompt_tokens,completion_tokens,cost_usd,cost_per_merged_usd,sandbox_running_minutes,sandbox_suspended_minutes,tests_run,tests_passed,interrupted_turns,retries,approvals_asked,median_approval_answer_seconds\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in i.rows.iter().chain(std::iter::once(&i.total)) {
        let key = if r.key.is_empty() && std::ptr::eq(r, &i.total) {
            "total".to_string()
        } else {
            r.key.clone()
        };
        let fields = [
            csv_field(&key),
            r.sessions.to_string(),
            r.prompts.to_string(),
            r.pull_requests_opened.to_string(),
            r.pull_requests_merged.to_string(),
            r.pull_requests_closed.to_string(),
            opt(r.merge_rate.map(|x| format!("{x:.4}"))),
            opt(r
                .median_prompt_to_pr_ms
                .map(|x| format!("{:.1}", x as f64 / 60_000.0))),
            opt(r
                .median_review_ms
                .map(|x| format!("{:.1}", x as f64 / 60_000.0))),
            opt(r.follow_ups_per_merged.map(|x| format!("{x:.2}"))),
            r.model_requests.to_string(),
            r.prompt_tokens.to_string(),
            r.completion_tokens.to_string(),
            format!("{:.6}", r.cost_micros as f64 / 1e6),
            opt(r
                .cost_per_merged_micros
                .map(|x| format!("{:.6}", x as f64 / 1e6))),
            format!("{:.1}", r.sandbox_running_minutes),
            format!("{:.1}", r.sandbox_suspended_minutes),
            r.tests_run.to_string(),
            r.tests_passed.to_string(),
            r.interrupted_turns.to_string(),
            r.retries.to_string(),
            r.approvals_asked.to_string(),
            opt(r
                .median_approval_answer_ms
                .map(|x| format!("{:.1}", x as f64 / 1000.0))),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field: quoted where it holds a separator, a quote or a line break; a field a
/// spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) gets a leading `'`.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_period_at_the_ends_of_time_is_refused_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("insights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Db::connect(&format!("sqlite://{}/t.db?mode=rwc", dir.display()))
            .await
            .unwrap();
        db.migrate().await.unwrap();
        let admin = User::new(
            tandem_protocol::UserId(uuid::Uuid::new_v4()),
            "a",
            true,
            Timestamp(0),
        );
        for (from, to) in [
            (Some(i64::MIN), Some(i64::MAX)),
            (None, Some(i64::MIN)),
            (Some(5), Some(5)),
        ] {
            let q = Query {
                from,
                to,
                ..Query::default()
            };
            assert!(
                matches!(insights(&db, &admin, &q).await, Err(Error::Invalid(_))),
                "{from:?} {to:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn days_are_dates() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(20_425), "2025-12-03");
        assert_eq!(day_name(11_016), "2000-02-29");
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![5, 1, 3]), Some(3));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn a_key_cannot_break_the_csv_or_run_as_a_formula() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("acme/web"), "acme/web");
    }
}
