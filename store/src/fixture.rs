//! Made-up sessions (a month, or a year) for the insights page's browser test and benchmark: repos,
//! people, sessions over the period from every surface, agent and model, their prompts, pull
//! requests (some merged after a review, some closed), costs, sandbox time, tests and
//! approvals. Deterministic for a seed; written in large multi-row statements so 100,000
//! sessions take seconds.

use tandem_protocol::{Timestamp, User, UserId};

use crate::{Db, Result};

/// What to make.
#[derive(Clone, Debug)]
pub struct Month {
    pub sessions: usize,
    pub repos: usize,
    pub people: usize,
    /// The period ends here (ms)…
    pub now: i64,
    /// …and starts this many days before.
    pub days: i64,
    pub seed: u64,
}

/// xorshift64*: enough randomness for made-up data, the same for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn uuid(&mut self) -> String {
        uuid::Uuid::from_u128((u128::from(self.next()) << 64) | u128::from(self.next())).to_string()
    }
}

const NAMES: &[&str] = &[
    "ada",
    "grace",
    "linus",
    "barbara",
    "ken",
    "margaret",
    "dennis",
    "frances",
    "alan",
    "radia",
    "edsger",
    "hedy",
    "donald",
    "katherine",
    "tim",
    "sophie",
];
const REPOS: &[&str] = &[
    "acme/web",
    "acme/api",
    "acme/mobile",
    "acme/infra",
    "acme/billing",
    "acme/search",
    "acme/docs",
    "acme/data",
];
const SURFACES: &[&str] = &[
    "user",
    "user",
    "user",
    "slack",
    "slack",
    "extension",
    "automation",
];
const AGENTS: &[&str] = &[
    r#"{"kind":"builtin"}"#,
    r#"{"kind":"builtin"}"#,
    r#"{"kind":"opencode"}"#,
];
const MODELS: &[(&str, i64, i64)] = &[("gpt-5", 1_250, 10_000), ("claude-sonnet-4", 3_000, 15_000)];

const BATCH: usize = 400;

/// Makes `m`'s repos, people and sessions; `owner` creates the repos.
pub async fn insert_month(db: &Db, m: &Month, owner: UserId) -> Result<()> {
    let mut rng = Rng(m.seed.max(1));
    let span = m.days.max(1) * 86_400_000;
    let start = m.now - span;
    let mut people = Vec::new();
    for name in NAMES.iter().cycle().take(m.people.clamp(1, NAMES.len())) {
        let u = User::new(
            UserId(uuid::Uuid::parse_str(&rng.uuid()).expect("a uuid")),
            *name,
            false,
            Timestamp(start),
        );
        crate::users::insert(db, &u).await?;
        people.push(u);
    }
    let mut repos = Vec::new();
    for name in REPOS.iter().take(m.repos.clamp(1, REPOS.len())) {
        let id = rng.uuid();
        sqlx::query(
            "INSERT INTO repos (id, name, url, default_branch, created_by, created_at) VALUES ($1, $2, $3, 'main', $4, $5)",
        )
        .bind(&id)
        .bind(*name)
        .bind(format!("https://github.example/{name}.git"))
        .bind(owner.to_string())
        .bind(start)
        .execute(&db.pool)
        .await?;
        repos.push((id, *name));
    }
    let mut pr_number = 0_i64;
    let mut done = 0;
    while done < m.sessions {
        let n = BATCH.min(m.sessions - done);
        let (mut sessions, mut prompts, mut prs, mut approvals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let id = rng.uuid();
            let (repo_id, repo_name) = &repos[rng.below(repos.len() as u64) as usize];
            let person = &people[rng.below(people.len() as u64) as usize];
            let kind = SURFACES[rng.below(SURFACES.len() as u64) as usize];
            let agent = AGENTS[rng.below(AGENTS.len() as u64) as usize];
            let (model, in_price, out_price) = MODELS[rng.below(MODELS.len() as u64) as usize];
            let created = start + rng.below(span as u64) as i64;
            let requests = 2 + rng.below(40) as i64;
            let pt = requests * (2_000 + rng.below(8_000) as i64);
            let ct = requests * (100 + rng.below(600) as i64);
            let cost = (pt * in_price + ct * out_price) / 1_000;
            let running = 60_000 + rng.below(40 * 60_000) as i64;
            let suspended = if rng.chance(30) {
                rng.below(6 * 3_600_000) as i64
            } else {
                0
            };
            let tests = rng.below(4) as i64;
            let passed = tests - rng.below(tests as u64 + 1).min(1) as i64;
            let n_prompts = 1 + rng.below(4) as i64;
            let mut interrupted = 0;
            let mut retries = 0;
            let mut asked = 0;
            let state = if rng.chance(90) { "stopped" } else { "failed" };
            for p in 0..n_prompts {
                let pstate = if rng.chance(92) {
                    "done"
                } else if rng.chance(50) {
                    "stopped"
                } else {
                    "failed"
                };
                let attempts = i64::from(rng.chance(3));
                interrupted += i64::from(pstate != "done");
                retries += attempts;
                prompts.push(format!(
                    "('{}', '{id}', {}, '{kind}', '{}', '{}', 'Made-up prompt', 'queue', '{pstate}', {}, {attempts})",
                    rng.uuid(),
                    p + 1,
                    person.id,
                    person.name,
                    created + p * 300_000,
                ));
            }
            if rng.chance(45) {
                pr_number += 1;
                let opened = created + 120_000 + rng.below(3_600_000) as i64;
                let (pstate, merged, closed) = match rng.below(10) {
                    0..=6 => (
                        "merged",
                        Some(opened + 600_000 + rng.below(2 * 86_400_000) as i64),
                        None,
                    ),
                    7 => ("closed", None, Some(opened + rng.below(86_400_000) as i64)),
                    _ => ("open", None, None),
                };
                let sql = |v: Option<i64>| v.map_or("NULL".to_string(), |t| t.to_string());
                prs.push(format!(
                    "('{id}', '{repo_id}', {pr_number}, 'https://github.example/{repo_name}/pull/{pr_number}', 'tandem/x', 'main', '{pstate}', 'abc', '{}', {opened}, {opened}, {}, {})",
                    person.name,
                    sql(merged),
                    sql(closed),
                ));
            }
            if rng.chance(10) {
                asked = 1;
                let asked = created + 60_000;
                approvals.push(format!(
                    "('{}', '{id}', NULL, '{{}}', 'tool:x', '{{}}', NULL, 'approved', {asked}, {}, '{}', {}, NULL, 0)",
                    rng.uuid(),
                    asked + 600_000,
                    person.name,
                    asked + 5_000 + rng.below(300_000) as i64,
                ));
            }
            sessions.push(format!(
                "('{id}', '{repo_id}', '{state}', 'Made-up session', 'tandem/{n}', '{kind}', '{user}', '{name}', {created}, {updated}, 0, '{agent}', 0, '{model}', {requests}, {pt}, {ct}, {cost}, {running}, {suspended}, {updated}, {tests}, {passed}, {n_prompts}, {interrupted}, {retries}, {asked})",
                n = &id[..8],
                user = person.id,
                name = person.name,
                updated = created + running + suspended,
            ));
        }
        let mut tx = db.begin().await?;
        let inserts = [
            (
                "INSERT INTO sessions (id, repo_id, state, title, branch, author_kind, author_user_id, author_name, created_at, updated_at, last_seq, agent, private, model, model_requests, prompt_tokens, completion_tokens, cost_micros, running_ms, suspended_ms, state_since, tests_run, tests_passed, prompts_count, interrupted_turns, retries, approvals_count) VALUES ",
                sessions,
            ),
            (
                "INSERT INTO prompts (id, session_id, position, author_kind, author_user_id, author_name, text, mode, state, created_at, attempts) VALUES ",
                prompts,
            ),
            (
                "INSERT INTO pull_requests (session_id, repo_id, number, url, branch, base, state, head_sha, opened_by, created_at, updated_at, merged_at, closed_at) VALUES ",
                prs,
            ),
            (
                "INSERT INTO approvals (id, session_id, prompt_id, subject, grant_key, arguments, asked_for, state, asked_at, expires_at, answered_by, answered_at, reason, for_session) VALUES ",
                approvals,
            ),
        ];
        for (head, rows) in inserts {
            if !rows.is_empty() {
                sqlx::query(&format!("{head}{}", rows.join(", ")))
                    .execute(&mut *tx.tx)
                    .await?;
            }
        }
        tx.commit().await?;
        done += n;
    }
    Ok(())
}
