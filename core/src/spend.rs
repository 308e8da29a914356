//! What the agents cost, and the budgets that stop them: the price table and the budgets
//! (settings an admin changes), every limit a session draws on with what is used of it, the
//! one check the gateway makes before each model request, and the count it makes after each
//! answer.
//!
//! A limit is checked before a request and counted after its answer, so a turn may pass a
//! limit by at most the one request that reached it (the provider's answer is bounded by
//! `max_output_tokens`); the next request is refused and the turn stops with a
//! `limit_reached` event saying which limit and whose.

use tandem_protocol::spend::{Budgets, LimitKind, LimitScope, LimitUse, Prices, SessionSpend};
use tandem_protocol::{EventKind, PromptId, SessionId, UserId};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

const PRICES_KEY: &str = "spend.prices";
const BUDGETS_KEY: &str = "spend.budgets";

/// The price table (none set: every model costs nothing).
pub async fn prices(db: &Db) -> Result<Prices> {
    crate::settings::stored(db, PRICES_KEY).await
}

/// Replaces the price table (admins).
pub async fn put_prices(db: &Db, prices: &Prices, by: &str) -> Result<()> {
    for (model, p) in &prices.models {
        if model.is_empty() || model.len() > 200 {
            return Err(Error::Invalid(
                "a model's name is 1 to 200 characters".into(),
            ));
        }
        for v in [p.input_per_mtok, p.output_per_mtok] {
            if !v.is_finite() || !(0.0..=1_000_000.0).contains(&v) {
                return Err(Error::Invalid(format!(
                    "{model}'s price {v} is not between 0 and 1,000,000 dollars per million tokens"
                )));
            }
        }
    }
    crate::settings::store(db, PRICES_KEY, prices, by, "spend.prices_put").await
}

/// The budgets (none set: no limit but the server's model requests per tree).
pub async fn budgets(db: &Db) -> Result<Budgets> {
    crate::settings::stored(db, BUDGETS_KEY).await
}

/// Replaces the budgets (admins).
pub async fn put_budgets(db: &Db, budgets: &Budgets, by: &str) -> Result<()> {
    let mut all = vec![
        ("tree", budgets.tree),
        ("person_daily", budgets.person_daily),
        ("repo_daily", budgets.repo_daily),
    ];
    for (repo, b) in &budgets.repos {
        if repo.split('/').count() != 2 {
            return Err(Error::Invalid(format!("{repo:?} is not owner/name")));
        }
        all.extend([
            ("tree", b.tree),
            ("person_daily", b.person_daily),
            ("repo_daily", b.repo_daily),
        ]);
    }
    for (what, l) in all {
        if l.tokens.is_some_and(|n| n < 0)
            || l.sandbox_minutes.is_some_and(|n| n < 0)
            || l.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0)
        {
            return Err(Error::Invalid(format!(
                "the {what} budget has a negative or unreadable limit"
            )));
        }
    }
    crate::settings::store(db, BUDGETS_KEY, budgets, by, "spend.budgets_put").await
}

fn micros(usd: f64) -> i64 {
    (usd * 1e6).round().clamp(0.0, i64::MAX as f64) as i64
}

/// Who a model request is for: its session and the person whose prompt runs.
pub struct Whose<'a> {
    pub session: SessionId,
    pub person: Option<(UserId, &'a str)>,
}

/// Every limit session `who.session` draws on now, with what is used of each; `requests` is
/// the server's model-request limit per tree.
pub async fn limits(db: &Db, who: &Whose<'_>, requests: u32) -> Result<Vec<LimitUse>> {
    let now = now_ms();
    let s = crate::sessions::get(db, who.session).await?.session;
    let root = db::trees::root_of(db, who.session)
        .await?
        .unwrap_or(who.session);
    let b = budgets(db).await?.for_repo(&s.repo_name);
    let tree = db::spend::tree_use(db, root, now).await?;
    let mut out = Vec::new();
    let mut add = |scope, kind, whose: &str, used, limit: Option<i64>| {
        if let Some(limit) = limit {
            out.push(LimitUse {
                scope,
                kind,
                whose: whose.to_string(),
                used,
                limit,
            });
        }
    };
    let root_name = root.to_string();
    add(
        LimitScope::Tree,
        LimitKind::Tokens,
        &root_name,
        tree.tokens,
        b.tree.tokens,
    );
    add(
        LimitScope::Tree,
        LimitKind::CostMicros,
        &root_name,
        tree.cost_micros,
        b.tree.cost_usd.map(micros),
    );
    add(
        LimitScope::Tree,
        LimitKind::SandboxMinutes,
        &root_name,
        tree.running_ms / 60_000,
        b.tree.sandbox_minutes,
    );
    if tree.token_budget.is_some() || tree.cost_budget_micros.is_some() {
        let automation = db::automations::name_of_run(db, root)
            .await?
            .unwrap_or_else(|| "of this run".into());
        add(
            LimitScope::Automation,
            LimitKind::Tokens,
            &automation,
            tree.tokens,
            tree.token_budget,
        );
        add(
            LimitScope::Automation,
            LimitKind::CostMicros,
            &automation,
            tree.cost_micros,
            tree.cost_budget_micros,
        );
    }
    let day = db::spend::day_of(now);
    if let Some((person, name)) = who.person {
        let (tokens, cost) = db::spend::daily(db, "person", &person.to_string(), day).await?;
        add(
            LimitScope::PersonDaily,
            LimitKind::Tokens,
            name,
            tokens,
            b.person_daily.tokens,
        );
        add(
            LimitScope::PersonDaily,
            LimitKind::CostMicros,
            name,
            cost,
            b.person_daily.cost_usd.map(micros),
        );
    }
    let (tokens, cost) = db::spend::daily(db, "repo", &s.repo_id.to_string(), day).await?;
    add(
        LimitScope::RepoDaily,
        LimitKind::Tokens,
        &s.repo_name,
        tokens,
        b.repo_daily.tokens,
    );
    add(
        LimitScope::RepoDaily,
        LimitKind::CostMicros,
        &s.repo_name,
        cost,
        b.repo_daily.cost_usd.map(micros),
    );
    let requests = crate::sessions::budget::model_budget(db, requests, who.session).await?;
    out.push(LimitUse {
        scope: LimitScope::Requests,
        kind: LimitKind::ModelRequests,
        whose: match requests.whose {
            crate::sessions::budget::Whose::Automation => "automation".into(),
            crate::sessions::budget::Whose::Server => "server".into(),
        },
        used: requests.used,
        limit: requests.limit,
    });
    Ok(out)
}

/// What a limit's refusal tells the agent and the people: which limit, whose, and what lifts
/// it.
pub fn refusal(l: &LimitUse) -> String {
    let fix = match l.scope {
        LimitScope::Tree => {
            "an admin raises the session tree budget on the settings page, or start a new session"
        }
        LimitScope::Automation => "raise the automation's limits, or start a new run",
        LimitScope::PersonDaily | LimitScope::RepoDaily => {
            "it starts again at midnight UTC, or an admin raises it on the settings page"
        }
        LimitScope::Requests => {
            "an admin raises max_model_requests_per_session under [agents] in tandem.toml"
        }
    };
    format!(
        "this turn stopped at {}: {} used. To go on, {fix}.",
        l.which(),
        l.amount()
    )
}

/// Refuses the next model request of `who.session` if a budget other than the request count
/// (which the gateway takes with the request) is reached: the first limit reached, said in
/// the timeline once per turn (`prompt`), and a 429 the agent reads.
pub async fn check(
    db: &Db,
    who: &Whose<'_>,
    requests: u32,
    prompt: Option<PromptId>,
) -> Result<()> {
    let all = limits(db, who, requests).await?;
    let Some(reached) = all
        .into_iter()
        .find(|l| l.scope != LimitScope::Requests && l.reached())
    else {
        return Ok(());
    };
    tell_once(db, who.session, prompt, &reached).await?;
    Err(Error::TooMany(refusal(&reached)))
}

/// Says in the timeline that the running turn stopped at `limit`, unless it already did.
pub async fn tell_once(
    db: &Db,
    session: SessionId,
    prompt: Option<PromptId>,
    limit: &LimitUse,
) -> Result<()> {
    if db::spend::limit_told(db, session, prompt).await? {
        return Ok(());
    }
    crate::sessions::workspace::event(
        db,
        session,
        EventKind::LimitReached {
            limit: limit.clone(),
        },
    )
    .await?;
    Ok(())
}

/// A session's use and its limits, for the session page, Slack and the extension.
pub async fn session_spend(db: &Db, who: &Whose<'_>, requests: u32) -> Result<SessionSpend> {
    let (tokens, cost_micros, ms) = db::spend::session_use(db, who.session, now_ms()).await?;
    Ok(SessionSpend {
        tokens,
        cost_micros,
        sandbox_minutes: ms / 60_000,
        limits: limits(db, who, requests).await?,
    })
}

/// Counts one model answer's tokens (as the provider reported them) and cost.
pub async fn record(
    db: &Db,
    session: SessionId,
    person: Option<UserId>,
    model: &str,
    prompt_tokens: i64,
    completion_tokens: i64,
) -> Result<i64> {
    let s = crate::sessions::get(db, session).await?.session;
    let root = db::trees::root_of(db, session).await?.unwrap_or(session);
    let price = prices(db).await?.models.get(model).copied();
    let cost_micros = price.map_or(0, |p| p.cost_micros(prompt_tokens, completion_tokens));
    db::spend::record(
        db,
        &db::spend::Used {
            session,
            root,
            repo: s.repo_id,
            person,
            model,
            prompt_tokens,
            completion_tokens,
            cost_micros,
            at_ms: now_ms(),
        },
    )
    .await?;
    Ok(cost_micros)
}
