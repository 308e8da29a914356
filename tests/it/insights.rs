//! What the agents cost and got merged, counted where it happens: a scripted session's two
//! turns and its pull request (opened and merged through the fake GitHub) are exactly what
//! `/api/insights` and `/metrics` say (the latter read with a Prometheus text-format parser);
//! budgets in money stop a turn at their limit, on both databases, and a person's daily budget
//! holds across their sessions.

use axum::http::{Method, StatusCode};
use fake_github::FakeGithub;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::github::PullRequest;
use tandem_protocol::spend::{GroupBy, Insights, LimitKind, LimitScope, SessionSpend};
use tandem_protocol::*;

use crate::agent_runs::{another_user, wait_events};
use crate::harness::{Backend, TestServer};
use crate::session_workspaces::add_repo;

const METRICS_TOKEN: &str = "metrics-token-5d0c2a9e41";

/// Turns ended in `evs`.
fn turns_ended(evs: &[Event]) -> Vec<(TurnOutcome, Option<String>)> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnEnded { outcome, error, .. } => Some((*outcome, error.clone())),
            _ => None,
        })
        .collect()
}

/// `/metrics` as Prometheus reads it.
async fn scrape(s: &TestServer) -> prometheus_parse::Scrape {
    let res = s
        .req(Method::GET, "/metrics")
        .bearer(METRICS_TOKEN)
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let text = String::from_utf8(res.body.to_vec()).unwrap();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("the text format parses")
}

/// The value of sample `name` with exactly `labels` (a counter, gauge or untyped sample).
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one sample {name}{labels:?}: {:#?}",
        scrape
            .samples
            .iter()
            .filter(|s| s.metric.starts_with(name))
            .collect::<Vec<_>>()
    );
    match &found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |c| c.count),
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test]
async fn a_scripted_session_with_two_turns_and_a_merged_pull_request_is_counted_exactly() {
    let script = vec![
        Reply::tool(
            "edit_file",
            json!({ "path": "calc.sh", "old_text": "2 - 2", "new_text": "2 + 2" }),
        )
        .for_prompt("Fix the sum")
        .at_step(0),
        Reply::tool("run_command", json!({ "command": "sh test.sh" }))
            .for_prompt("Fix the sum")
            .at_step(1),
        Reply::text("Fixed the sum; the tests pass.")
            .for_prompt("Fix the sum")
            .at_step(2),
        Reply::tool(
            "write_file",
            json!({ "path": "NOTES.md", "content": "the sum is fixed\n" }),
        )
        .for_last_prompt("notes")
        .at_step(3),
        Reply::text("Added notes.")
            .for_last_prompt("notes")
            .at_step(4),
    ];
    let Some(w) = crate::github::world_on(Backend::Sqlite, script, |c| {
        c.telemetry.metrics_token = Some(METRICS_TOKEN.into());
    })
    .await
    else {
        return;
    };
    let s = &w.s;
    // Without the token, or with another, nothing is told.
    let res = s.req(Method::GET, "/metrics").send().await;
    assert_eq!(res.status, StatusCode::UNAUTHORIZED);
    let res = s
        .req(Method::GET, "/metrics")
        .bearer("metrics-token-5d0c2a9e4X")
        .send()
        .await;
    assert_eq!(res.status, StatusCode::UNAUTHORIZED);

    // $2 per million prompt tokens, $10 per million completion tokens.
    let res = s
        .req(Method::PUT, "/api/spend/prices")
        .bearer(&s.admin_token)
        .json(&json!({ "models": { "scripted-1": { "input_per_mtok": 2.0, "output_per_mtok": 10.0 } } }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.json());

    let alice = crate::github::sign_in_with_github(&w).await;
    let repo = crate::github::import(&w).await;
    let created = s
        .req(Method::POST, "/api/sessions")
        .bearer(&alice)
        .json(&json!({ "repo_id": repo, "prompt": "Fix the sum in calc.sh" }))
        .send()
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.parse::<SessionDetail>().session.id;
    wait_events(s, id, |e| turns_ended(e).len() == 1).await;
    let res = s
        .req(Method::POST, &format!("/api/sessions/{id}/prompts"))
        .bearer(&alice)
        .json(&json!({ "text": "Write notes about it" }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.json());
    let evs = wait_events(s, id, |e| turns_ended(e).len() == 2).await;
    assert!(
        turns_ended(&evs)
            .iter()
            .all(|(o, _)| *o == TurnOutcome::Completed),
        "{:?}",
        turns_ended(&evs)
    );

    let res = s
        .req(Method::POST, &format!("/api/sessions/{id}/pr"))
        .bearer(&alice)
        .json(&json!({ "title": "Fix the sum" }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.json());
    let pr: PullRequest = res.parse();
    let merged = w.gh.merge_pull("acme", "calc", pr.number as u64);
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", s.url),
            crate::github::WEBHOOK_SECRET,
            "pull_request",
            &merged
        )
        .await,
        200
    );
    wait_events(s, id, |e| {
        e.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::PrState {
                    state: tandem_protocol::github::PrState::Merged,
                    ..
                }
            )
        })
    })
    .await;

    // Five model requests: 3 tool calls (20 completion tokens each) and 2 texts (10 each),
    // 100 prompt tokens each. Cost: 500 × $2/M + 80 × $10/M = $0.0018.
    let (requests, prompt_tokens, completion_tokens, cost) = (5, 500, 80, 1_800);
    let insights: Insights = s
        .req(Method::GET, "/api/insights?group_by=repo")
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    assert!(!insights.own_only);
    assert_eq!(insights.rows.len(), 1, "{insights:#?}");
    let row = &insights.rows[0];
    assert_eq!(row.key, "acme/calc");
    assert_eq!(
        (
            row.sessions,
            row.prompts,
            row.pull_requests_opened,
            row.pull_requests_merged,
            row.pull_requests_closed
        ),
        (1, 2, 1, 1, 0)
    );
    assert_eq!(row.merge_rate, Some(1.0));
    assert_eq!(row.follow_ups_per_merged, Some(1.0));
    assert_eq!(
        (
            row.model_requests,
            row.prompt_tokens,
            row.completion_tokens,
            row.cost_micros
        ),
        (requests, prompt_tokens, completion_tokens, cost)
    );
    assert_eq!(row.cost_per_merged_micros, Some(cost));
    assert_eq!((row.tests_run, row.tests_passed), (1, 1));
    assert_eq!((row.interrupted_turns, row.retries), (0, 0));
    // The durations are the stored ones, to the millisecond.
    let (session_at, pr_at, merged_at): (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT s.created_at, p.created_at, p.merged_at FROM sessions s JOIN pull_requests p ON p.session_id = s.id",
    )
    .fetch_one(s.state.db.raw_pool())
    .await
    .unwrap();
    assert_eq!(row.median_prompt_to_pr_ms, Some(pr_at - session_at));
    assert_eq!(row.median_review_ms, Some(merged_at.unwrap() - pr_at));
    assert!(row.sandbox_running_minutes > 0.0);
    assert_eq!(insights.total.cost_micros, cost);
    // Every day of the default 30 days is a bar in the charts, the merge on today's.
    assert!((30..=31).contains(&insights.days.len()));
    assert_eq!(
        insights
            .days
            .iter()
            .map(|d| d.pull_requests_merged)
            .collect::<Vec<_>>()
            .iter()
            .sum::<i64>(),
        1
    );
    assert_eq!(insights.days.last().unwrap().sessions, 1);

    // By surface and by person: the same session, named for where and who it came from.
    let by_surface: Insights = s
        .req(Method::GET, "/api/insights?group_by=surface")
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    assert_eq!(by_surface.rows[0].key, "web");
    let mine: Insights = s
        .req(Method::GET, "/api/insights?group_by=person")
        .bearer(&alice)
        .send()
        .await
        .parse();
    assert!(mine.own_only);
    assert_eq!(mine.rows[0].key, "alice-gh");
    assert_eq!(mine.total.model_requests, requests);
    // The CSV says the same, one row per key and the total.
    let csv = s
        .req(Method::GET, "/api/insights/csv?group_by=model")
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    let text = String::from_utf8(csv.body.to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].starts_with("scripted-1,1,2,1,1,0,1.0000,"),
        "{text}"
    );
    assert!(lines[2].starts_with("total,"), "{text}");

    // The session page's numbers.
    let spend: SessionSpend = s
        .req(Method::GET, &format!("/api/sessions/{id}/spend"))
        .bearer(&alice)
        .send()
        .await
        .parse();
    assert_eq!((spend.tokens, spend.cost_micros), (580, cost));

    // And the same in /metrics.
    let m = scrape(s).await;
    let model = [("model", "scripted-1"), ("status", "200")];
    assert_eq!(
        sample(&m, "tandem_model_requests_total", &model),
        requests as f64
    );
    assert_eq!(
        sample(
            &m,
            "tandem_model_tokens_total",
            &[("model", "scripted-1"), ("kind", "prompt")]
        ),
        prompt_tokens as f64
    );
    assert_eq!(
        sample(
            &m,
            "tandem_model_tokens_total",
            &[("model", "scripted-1"), ("kind", "completion")]
        ),
        completion_tokens as f64
    );
    for tool in ["edit_file", "run_command", "write_file"] {
        assert_eq!(
            sample(
                &m,
                "tandem_tool_calls_total",
                &[("tool", tool), ("outcome", "ok")]
            ),
            1.0,
            "{tool}"
        );
    }
    assert_eq!(
        sample(&m, "tandem_turn_seconds_count", &[("outcome", "completed")]),
        2.0
    );
    assert_eq!(sample(&m, "tandem_prompt_claim_seconds_count", &[]), 2.0);
    assert_eq!(
        sample(
            &m,
            "tandem_gateway_requests_total",
            &[("route", "/v1/chat/completions"), ("status", "200")]
        ),
        requests as f64
    );
    assert_eq!(
        sample(&m, "tandem_snapshot_builds_total", &[("outcome", "ok")]),
        1.0
    );
    assert_eq!(
        sample(&m, "tandem_boot_phase_seconds_count", &[("phase", "ready")]),
        1.0
    );
    let live = sample(&m, "tandem_sessions", &[("state", "ready")])
        + sample(&m, "tandem_sessions", &[("state", "idle")]);
    assert_eq!(live, 1.0, "the session is live");
    assert_eq!(sample(&m, "tandem_prompts_queued", &[]), 0.0);
    let memory = sample(
        &m,
        "tandem_workspace_memory_bytes",
        &[("session", &id.to_string())],
    );
    assert!(
        memory > 1_000_000.0,
        "the workspace's memory, from its cgroup: {memory}"
    );
}

/// A server with a scripted model priced at $100 per million prompt tokens (each request of
/// 100 tokens costs $0.01), and a repo.
async fn priced(
    backend: Backend,
    model: &ScriptedModel,
    budgets: serde_json::Value,
) -> Option<(TestServer, tempfile::TempDir, String)> {
    let url = model.base_url.clone();
    let s = crate::workspaces::server_on(backend, move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
    })
    .await?;
    for (path, body) in [
        (
            "/api/spend/prices",
            json!({ "models": { "scripted-1": { "input_per_mtok": 100.0, "output_per_mtok": 0.0 } } }),
        ),
        ("/api/spend/budgets", budgets),
    ] {
        let res = s
            .req(Method::PUT, path)
            .bearer(&s.admin_token)
            .json(&body)
            .send()
            .await;
        assert_eq!(res.status, StatusCode::OK, "{path}: {}", res.json());
    }
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/budget", src.path()).await;
    Some((s, src, repo))
}

/// A prompt whose agent would loop on `true` for ever.
fn forever(model: &ScriptedModel) {
    model.fallback(Reply::tool("run_command", json!({ "command": "true" })));
}

async fn start(s: &TestServer, token: &str, repo: &str, prompt: &str) -> SessionId {
    let res = s
        .req(Method::POST, "/api/sessions")
        .bearer(token)
        .json(&json!({ "repo_id": repo, "prompt": prompt }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.json());
    res.parse::<SessionDetail>().session.id
}

fn limit_reached(evs: &[Event]) -> Vec<tandem_protocol::spend::LimitUse> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::LimitReached { limit } => Some(limit.clone()),
            _ => None,
        })
        .collect()
}

async fn a_cost_budget_stops_a_turn_at_its_limit(backend: Backend) {
    let model = ScriptedModel::start(vec![]).await;
    forever(&model);
    let Some((s, _src, repo)) =
        priced(backend, &model, json!({ "tree": { "cost_usd": 0.025 } })).await
    else {
        return;
    };
    let id = start(&s, &s.admin_token, &repo, "Loop for ever").await;
    let evs = wait_events(&s, id, |e| turns_ended(e).len() == 1).await;
    // $0.01 a request: the third brings the tree to $0.03, past $0.025; the fourth is refused.
    let reached = limit_reached(&evs);
    assert_eq!(reached.len(), 1, "said once: {reached:?}");
    let l = &reached[0];
    assert_eq!(
        (l.scope, l.kind, l.used, l.limit),
        (LimitScope::Tree, LimitKind::CostMicros, 30_000, 25_000)
    );
    assert_eq!(model.requests().len(), 3, "no request past the limit");
    let (outcome, error) = turns_ended(&evs)[0].clone();
    assert_ne!(outcome, TurnOutcome::Completed);
    let error = error.unwrap_or_default();
    assert!(
        error.contains("session tree's budget") && error.contains("$0.03 of $0.025"),
        "the turn says which limit: {error}"
    );
    // The session page shows the use against the limit.
    let spend: SessionSpend = s
        .get(&format!("/api/sessions/{id}/spend"))
        .send()
        .await
        .parse();
    assert_eq!(spend.cost_micros, 30_000);
    assert!(
        spend
            .limits
            .iter()
            .any(|l| l.scope == LimitScope::Tree && l.reached())
    );
    // A prompt after it is refused at once, and the timeline does not say it twice.
    let res = s
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "Go on" }),
        )
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    let evs = wait_events(&s, id, |e| turns_ended(e).len() == 2).await;
    assert_eq!(model.requests().len(), 3);
    assert_eq!(limit_reached(&evs).len(), 2, "once per turn");
}

#[tokio::test]
async fn a_cost_budget_stops_a_turn_at_its_limit_on_sqlite() {
    a_cost_budget_stops_a_turn_at_its_limit(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_cost_budget_stops_a_turn_at_its_limit_on_postgres() {
    a_cost_budget_stops_a_turn_at_its_limit(Backend::Postgres).await;
}

#[tokio::test]
async fn a_persons_daily_budget_holds_across_their_sessions() {
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", json!({ "command": "true" }))
            .for_prompt("First")
            .at_step(0),
        Reply::text("Done.").for_prompt("First").at_step(1),
        Reply::tool("run_command", json!({ "command": "true" }))
            .for_prompt("Admin")
            .at_step(0),
        Reply::text("Done.").for_prompt("Admin").at_step(1),
    ])
    .await;
    forever(&model);
    let Some((s, _src, repo)) = priced(
        Backend::Sqlite,
        &model,
        json!({ "person_daily": { "cost_usd": 0.035 } }),
    )
    .await
    else {
        return;
    };
    let (_, bob) = another_user(&s, "bob").await;
    // Bob's first session: two requests ($0.02).
    let first = start(&s, &bob, &repo, "First, a small task").await;
    let evs = wait_events(&s, first, |e| turns_ended(e).len() == 1).await;
    assert_eq!(
        turns_ended(&evs)[0].0,
        TurnOutcome::Completed,
        "{:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    // His second may spend $0.02 more ($0.04 ≥ $0.035), then is refused.
    let second = start(&s, &bob, &repo, "Second, loop for ever").await;
    let evs = wait_events(&s, second, |e| turns_ended(e).len() == 1).await;
    let reached = limit_reached(&evs);
    assert_eq!(reached.len(), 1, "{reached:?}");
    assert_eq!(
        (
            reached[0].scope,
            reached[0].whose.as_str(),
            reached[0].used,
            reached[0].limit
        ),
        (LimitScope::PersonDaily, "bob", 40_000, 35_000)
    );
    assert_eq!(model.requests().len(), 4);
    // Someone else's session in the same repo is not held by Bob's budget.
    let admins = start(&s, &s.admin_token, &repo, "Admin's small task").await;
    let evs = wait_events(&s, admins, |e| turns_ended(e).len() == 1).await;
    assert_eq!(turns_ended(&evs)[0].0, TurnOutcome::Completed);
    assert!(limit_reached(&evs).is_empty());
    // Insights by person: each one's cost.
    let by_person: Insights = s.get("/api/insights?group_by=person").send().await.parse();
    let cost_of = |who: &str| {
        by_person
            .rows
            .iter()
            .find(|r| r.key == who)
            .map(|r| r.cost_micros)
    };
    assert_eq!(cost_of("bob"), Some(40_000));
    assert_eq!(cost_of("admin"), Some(20_000));
    assert_eq!(by_person.group_by, GroupBy::Person);
}
