//! What the agents cost and the limits on it: the price of each model (`/api/spend/prices`),
//! budgets in tokens, money and sandbox minutes (`/api/spend/budgets`), a session's use
//! against them, and the insights page's numbers (`/api/insights`).
//!
//! Money is counted in micro-dollars (`*_micros`, integers) so sums are exact; a price is in
//! dollars per million tokens, which is the same number as micro-dollars per token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A model's price, in US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    /// What `input` and `output` tokens cost, in micro-dollars (rounded up: a budget is never
    /// undercounted).
    pub fn cost_micros(&self, input: i64, output: i64) -> i64 {
        let c = input.max(0) as f64 * self.input_per_mtok.max(0.0)
            + output.max(0) as f64 * self.output_per_mtok.max(0.0);
        if c.is_finite() {
            c.ceil().min(i64::MAX as f64) as i64
        } else {
            0
        }
    }
}

/// The price table: by model name as the gateway relays it. A model not in it costs nothing
/// (its tokens still count).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Prices {
    #[serde(default)]
    pub models: BTreeMap<String, Price>,
}

/// Limits of one kind; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Model tokens, prompt and completion together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<i64>,
    /// Cost in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Minutes a workspace ran (starting, ready, running, idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_minutes: Option<i64>,
}

impl Limits {
    /// These limits with each one `over` sets put in their place.
    pub fn overridden_by(self, over: Limits) -> Limits {
        Limits {
            tokens: over.tokens.or(self.tokens),
            cost_usd: over.cost_usd.or(self.cost_usd),
            sandbox_minutes: over.sandbox_minutes.or(self.sandbox_minutes),
        }
    }
}

/// One repo's budgets, each limit set replacing the installation's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RepoBudgets {
    #[serde(default)]
    pub tree: Limits,
    #[serde(default)]
    pub person_daily: Limits,
    #[serde(default)]
    pub repo_daily: Limits,
}

/// The budgets an admin sets. `tree`: a session tree (a session, its children and forks)
/// together; `person_daily`: what one person's turns use in a day (UTC); `repo_daily`: what
/// every session of a repo uses in a day. `repos` overrides them per repo (`owner/name`). An
/// automation's runs also get the automation's own limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    #[serde(default)]
    pub tree: Limits,
    #[serde(default)]
    pub person_daily: Limits,
    #[serde(default)]
    pub repo_daily: Limits,
    #[serde(default)]
    pub repos: BTreeMap<String, RepoBudgets>,
}

impl Budgets {
    /// The budgets in force for `repo`.
    pub fn for_repo(&self, repo: &str) -> RepoBudgets {
        let over = self.repos.get(repo).copied().unwrap_or_default();
        RepoBudgets {
            tree: self.tree.overridden_by(over.tree),
            person_daily: self.person_daily.overridden_by(over.person_daily),
            repo_daily: self.repo_daily.overridden_by(over.repo_daily),
        }
    }
}

impl Budgets {
    /// The budgets as lines people edit: `tree.cost_usd = 5`, `person_daily.tokens = 2000000`,
    /// `acme/web repo_daily.sandbox_minutes = 600` (a repo's override first).
    pub fn to_lines(&self) -> String {
        let mut out = Vec::new();
        let mut put = |prefix: &str, what: &str, l: &Limits| {
            if let Some(n) = l.tokens {
                out.push(format!("{prefix}{what}.tokens = {n}"));
            }
            if let Some(c) = l.cost_usd {
                out.push(format!("{prefix}{what}.cost_usd = {c}"));
            }
            if let Some(m) = l.sandbox_minutes {
                out.push(format!("{prefix}{what}.sandbox_minutes = {m}"));
            }
        };
        put("", "tree", &self.tree);
        put("", "person_daily", &self.person_daily);
        put("", "repo_daily", &self.repo_daily);
        for (repo, b) in &self.repos {
            let prefix = format!("{repo} ");
            put(&prefix, "tree", &b.tree);
            put(&prefix, "person_daily", &b.person_daily);
            put(&prefix, "repo_daily", &b.repo_daily);
        }
        out.join("\n")
    }

    /// Budgets from [`Budgets::to_lines`]'s lines; the first bad line says what is wrong.
    pub fn from_lines(text: &str) -> Result<Budgets, String> {
        let mut b = Budgets::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("{line:?}: {why}");
            let (left, value) = line
                .split_once('=')
                .ok_or_else(|| bad("write a limit as `tree.cost_usd = 5`"))?;
            let (repo, key) = match left.trim().split_once(' ') {
                Some((repo, key)) => (Some(repo.trim()), key.trim()),
                None => (None, left.trim()),
            };
            let (scope, kind) = key
                .split_once('.')
                .ok_or_else(|| bad("name the budget and the limit, as `tree.cost_usd`"))?;
            let limits = match repo {
                None => match scope {
                    "tree" => &mut b.tree,
                    "person_daily" => &mut b.person_daily,
                    "repo_daily" => &mut b.repo_daily,
                    _ => return Err(bad("the budgets are tree, person_daily and repo_daily")),
                },
                Some(repo) => {
                    if repo.split('/').count() != 2 {
                        return Err(bad("a repo is owner/name"));
                    }
                    let r = b.repos.entry(repo.to_string()).or_default();
                    match scope {
                        "tree" => &mut r.tree,
                        "person_daily" => &mut r.person_daily,
                        "repo_daily" => &mut r.repo_daily,
                        _ => return Err(bad("the budgets are tree, person_daily and repo_daily")),
                    }
                }
            };
            let value = value.trim();
            match kind {
                "tokens" => {
                    limits.tokens = Some(
                        value
                            .parse()
                            .map_err(|_| bad("tokens are a whole number"))?,
                    )
                }
                "cost_usd" => {
                    let v: f64 = value
                        .parse()
                        .map_err(|_| bad("a cost is dollars, as 5 or 0.50"))?;
                    if !v.is_finite() || v < 0.0 {
                        return Err(bad("a cost is not negative"));
                    }
                    limits.cost_usd = Some(v);
                }
                "sandbox_minutes" => {
                    limits.sandbox_minutes = Some(
                        value
                            .parse()
                            .map_err(|_| bad("minutes are a whole number"))?,
                    )
                }
                _ => return Err(bad("the limits are tokens, cost_usd and sandbox_minutes")),
            }
        }
        Ok(b)
    }
}

impl Prices {
    /// The table as lines: `model = input output` (dollars per million tokens).
    pub fn to_lines(&self) -> String {
        self.models
            .iter()
            .map(|(m, p)| format!("{m} = {} {}", p.input_per_mtok, p.output_per_mtok))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A table from [`Prices::to_lines`]'s lines; the first bad line says what is wrong.
    pub fn from_lines(text: &str) -> Result<Prices, String> {
        let mut p = Prices::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || {
                format!(
                    "{line:?}: write a price as `model = 3.00 15.00` (input, output; dollars per million tokens)"
                )
            };
            let (model, prices) = line.rsplit_once('=').ok_or_else(bad)?;
            let mut n = prices.split_whitespace().map(str::parse::<f64>);
            let (Some(Ok(input)), Some(Ok(output)), None) = (n.next(), n.next(), n.next()) else {
                return Err(bad());
            };
            p.models.insert(
                model.trim().to_string(),
                Price {
                    input_per_mtok: input,
                    output_per_mtok: output,
                },
            );
        }
        Ok(p)
    }
}

/// Whose limit a use is counted against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// The session tree (the installation's or repo's tree budget).
    Tree,
    /// The automation whose run the tree is.
    Automation,
    /// The person whose prompt runs, today.
    PersonDaily,
    /// The session's repo, today.
    RepoDaily,
    /// The server's model requests per session tree (`max_model_requests_per_session`).
    Requests,
}

/// What is limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Tokens,
    CostMicros,
    SandboxMinutes,
    ModelRequests,
}

/// One limit and what is used of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LimitUse {
    pub scope: LimitScope,
    pub kind: LimitKind,
    /// Whose: the person's name, the repo, the automation's name, or the tree's root session.
    pub whose: String,
    pub used: i64,
    pub limit: i64,
}

impl LimitUse {
    pub fn reached(&self) -> bool {
        self.used >= self.limit
    }

    /// "$1.20 of $5.00", "12,000 of 50,000 tokens", "3 of 60 sandbox minutes".
    pub fn amount(&self) -> String {
        match self.kind {
            LimitKind::CostMicros => {
                format!("{} of {}", dollars(self.used), dollars(self.limit))
            }
            LimitKind::Tokens => format!("{} of {} tokens", self.used, self.limit),
            LimitKind::SandboxMinutes => {
                format!("{} of {} sandbox minutes", self.used, self.limit)
            }
            LimitKind::ModelRequests => {
                format!("{} of {} model requests", self.used, self.limit)
            }
        }
    }

    /// Which limit, whose, for a person: "the person budget of ada for today".
    pub fn which(&self) -> String {
        match self.scope {
            LimitScope::Tree => format!("the session tree's budget (root {})", self.whose),
            LimitScope::Automation => format!("the automation {}'s budget per run", self.whose),
            LimitScope::PersonDaily => format!("{}'s budget for today", self.whose),
            LimitScope::RepoDaily => format!("the repo {}'s budget for today", self.whose),
            LimitScope::Requests => "the server's model requests per session tree".into(),
        }
    }
}

/// Micro-dollars as people write dollars: "$1,148.34" (cents from a dollar up), "$0.025",
/// "$0.0018" (under a dollar, up to four decimals, only those that say something).
pub fn dollars(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    if m >= 1_000_000 {
        let cents = (m + 5_000) / 10_000;
        let whole = (cents / 100).to_string();
        let mut grouped = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        return format!("{sign}${grouped}.{:02}", cents % 100);
    }
    let tenths_of_cents = (m + 50) / 100;
    let mut frac = format!("{tenths_of_cents:04}");
    while frac.len() > 2 && frac.ends_with('0') {
        frac.pop();
    }
    format!("{sign}$0.{frac}")
}

/// A session's use and the limits it draws on (`GET /api/sessions/{id}/spend`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionSpend {
    /// This session's own use.
    pub tokens: i64,
    pub cost_micros: i64,
    pub sandbox_minutes: i64,
    /// Every limit it draws on, with what is used of each.
    pub limits: Vec<LimitUse>,
}

/// What `/api/insights` groups by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    Repo,
    Person,
    Agent,
    Model,
    Surface,
    Day,
}

/// One row of insights: a repo, a person, an agent, a model, a surface or a day, or the total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InsightsRow {
    /// What the row is (`acme/web`, a person's name, `builtin`, a model, `slack`, `2026-12-01`);
    /// empty on the total.
    pub key: String,
    pub sessions: i64,
    pub prompts: i64,
    pub pull_requests_opened: i64,
    pub pull_requests_merged: i64,
    pub pull_requests_closed: i64,
    /// Merged of those opened (0 to 1), `None` with none opened.
    pub merge_rate: Option<f64>,
    /// Median time from a session's first prompt to its pull request, ms.
    pub median_prompt_to_pr_ms: Option<i64>,
    /// Median time from a pull request's opening to its merge (review time), ms.
    pub median_review_ms: Option<i64>,
    /// Prompts after the first, per merged pull request.
    pub follow_ups_per_merged: Option<f64>,
    pub model_requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_micros: i64,
    pub cost_per_merged_micros: Option<i64>,
    pub sandbox_running_minutes: f64,
    pub sandbox_suspended_minutes: f64,
    /// Test commands the agent ran, and how many passed.
    pub tests_run: i64,
    pub tests_passed: i64,
    /// Turns stopped or failed, and prompts run again (after a lost workspace or a restart).
    pub interrupted_turns: i64,
    pub retries: i64,
    pub approvals_asked: i64,
    pub median_approval_answer_ms: Option<i64>,
}

/// `/api/insights`: rows by the chosen dimension, their total, and cost and merges per day for
/// the charts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Insights {
    pub from: crate::Timestamp,
    pub to: crate::Timestamp,
    pub group_by: GroupBy,
    pub rows: Vec<InsightsRow>,
    pub total: InsightsRow,
    pub days: Vec<InsightsRow>,
    /// True when the caller is not an admin: only their own sessions are counted.
    pub own_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_is_micro_dollars_per_token_rounded_up() {
        let p = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
        };
        assert_eq!(p.cost_micros(1000, 100), 4500);
        assert_eq!(
            Price {
                input_per_mtok: 0.1,
                output_per_mtok: 0.0
            }
            .cost_micros(1, 0),
            1
        );
        assert_eq!(p.cost_micros(-5, -5), 0);
    }

    #[test]
    fn a_repos_budget_replaces_only_what_it_sets() {
        let b = Budgets {
            tree: Limits {
                tokens: Some(100),
                cost_usd: Some(1.0),
                sandbox_minutes: None,
            },
            repos: [(
                "acme/web".to_string(),
                RepoBudgets {
                    tree: Limits {
                        cost_usd: Some(5.0),
                        ..Limits::default()
                    },
                    ..RepoBudgets::default()
                },
            )]
            .into(),
            ..Budgets::default()
        };
        let web = b.for_repo("acme/web").tree;
        assert_eq!((web.tokens, web.cost_usd), (Some(100), Some(5.0)));
        assert_eq!(b.for_repo("acme/api").tree.cost_usd, Some(1.0));
    }

    #[test]
    fn budgets_and_prices_read_back_what_they_write() {
        let text = "tree.cost_usd = 5\nperson_daily.tokens = 2000000\nacme/web repo_daily.sandbox_minutes = 600";
        let b = Budgets::from_lines(text).unwrap();
        assert_eq!(b.tree.cost_usd, Some(5.0));
        assert_eq!(b.repos["acme/web"].repo_daily.sandbox_minutes, Some(600));
        assert_eq!(Budgets::from_lines(&b.to_lines()).unwrap(), b);
        assert!(
            Budgets::from_lines("tree.dollars = 5")
                .unwrap_err()
                .contains("tokens, cost_usd")
        );
        assert!(Budgets::from_lines("tree.cost_usd = -1").is_err());
        let p = Prices::from_lines("gpt-x = 3 15\n").unwrap();
        assert_eq!(p.models["gpt-x"].output_per_mtok, 15.0);
        assert_eq!(Prices::from_lines(&p.to_lines()).unwrap(), p);
        assert!(Prices::from_lines("gpt-x = 3").is_err());
    }

    #[test]
    fn dollars_read_as_people_write_them() {
        assert_eq!(dollars(1_200_000), "$1.20");
        assert_eq!(dollars(25_000), "$0.025");
        assert_eq!(dollars(1_800), "$0.0018");
        assert_eq!(dollars(0), "$0.00");
        assert_eq!(dollars(1_148_338_647), "$1,148.34");
        assert_eq!(dollars(8_591_608), "$8.59");
        assert_eq!(dollars(30_000), "$0.03");
    }
}
