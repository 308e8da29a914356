//! Automations: a schedule fires once per period however many server processes share the
//! database; each run is a session attributed to the automation and its creator; a run that
//! cannot start records why and is not retried; bad schedules and people who may not use the
//! repo are refused.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Backend, TestServer, Transport, make_repo};
use crate::matrix;
use crate::people::invite;

async fn runs(s: &TestServer, id: &str) -> Vec<Value> {
    s.get(&format!("/api/automations/{id}/runs"))
        .send()
        .await
        .json()
        .as_array()
        .cloned()
        .unwrap()
}

/// Waits until the automation has at least `n` finished runs (a session or an error each).
async fn wait_runs(s: &TestServer, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = runs(s, id).await;
        let done: Vec<Value> = all
            .into_iter()
            .filter(|r| !r["session_id"].is_null() || !r["error"].is_null())
            .collect();
        if done.len() >= n {
            return done;
        }
        assert!(
            Instant::now() < deadline,
            "only {} runs: {done:?}",
            done.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_schedule_fires_once_per_period_across_two_servers_on_one_postgresql() {
    let Some(a) = TestServer::start_with(Backend::Postgres, Transport::Oneshot, |c| {
        c.automations.min_interval_secs = 1;
    })
    .await
    else {
        return;
    };
    let b = a.beside().await;
    let repo = make_repo(&a, "acme/deps").await;
    let made = a
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "nightly", "prompt": "update dependencies and fix what breaks", "trigger": { "kind": "schedule", "cron": "* * * * * *" } }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let id = made.json()["automation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Both processes look every second; four periods pass.
    let done = wait_runs(&b, &id, 4).await;
    let mut periods: Vec<i64> = done.iter().map(|r| r["period"].as_i64().unwrap()).collect();
    periods.sort();
    periods.dedup();
    assert_eq!(periods.len(), done.len(), "a period ran twice: {done:?}");
    assert!(
        periods.windows(2).all(|w| (w[1] - w[0]) % 1000 == 0),
        "{periods:?}"
    );
    let sessions = a.get("/api/sessions").send().await.json();
    let theirs: Vec<&Value> = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["author"]["kind"] == "automation")
        .collect();
    let run_sessions: Vec<String> = runs(&a, &id)
        .await
        .iter()
        .filter_map(|r| r["session_id"].as_str().map(String::from))
        .collect();
    assert!(
        theirs.len() >= done.len() && theirs.len() == run_sessions.len(),
        "one session per run: {} sessions, {} runs",
        theirs.len(),
        run_sessions.len()
    );
    let first = &theirs[0];
    assert_eq!(first["author"]["name"], "nightly (automation)");
    assert!(
        first["author"]["user_id"].is_string(),
        "on its creator's behalf"
    );
    assert_eq!(first["title"], "update dependencies and fix what breaks");
    // Deleted, it fires no more.
    let gone = a
        .req(Method::DELETE, &format!("/api/automations/{id}"))
        .bearer(&a.admin_token)
        .send()
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_run_that_cannot_start_records_why_and_is_not_retried() {
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Oneshot, |c| {
        c.automations.min_interval_secs = 1;
    })
    .await
    else {
        return;
    };
    let repo = make_repo(&s, "acme/deps").await;
    let mia = invite(&s, "mia", false).await;
    let made = s
        .req(Method::POST, "/api/automations")
        .bearer(&mia.token)
        .json(&json!({ "repo_id": repo, "name": "hourly", "prompt": "tidy up", "trigger": { "kind": "schedule", "cron": "* * * * * *" } }))
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let id = made.json()["automation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_runs(&s, &id, 1).await;
    // Its creator loses the repo: the runs after that record why and start nothing.
    s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "members", "grants": [] }))
        .send()
        .await;
    let before = s.get("/api/sessions").send().await.json();
    let started = before.as_array().unwrap().len();
    let all = wait_runs(&s, &id, 4).await;
    let failed: Vec<&Value> = all.iter().filter(|r| r["session_id"].is_null()).collect();
    assert!(failed.len() >= 2, "{all:?}");
    assert!(
        failed[0]["error"].as_str().unwrap().contains("acme/deps")
            || failed[0]["error"].as_str().unwrap().contains("repo"),
        "{failed:?}"
    );
    let after = s.get("/api/sessions").send().await.json();
    assert!(
        after.as_array().unwrap().len() <= started + 1,
        "no run after the loss started a session"
    );
    // One run per period, not one per look: the failed ones are spread a period apart.
    let mut periods: Vec<i64> = failed
        .iter()
        .map(|r| r["period"].as_i64().unwrap())
        .collect();
    periods.sort();
    periods.dedup();
    assert_eq!(periods.len(), failed.len());
}

matrix!(automations_refuse_bad_schedules_and_people_who_may_not_use_the_repo);
async fn automations_refuse_bad_schedules_and_people_who_may_not_use_the_repo(s: TestServer) {
    let repo = make_repo(&s, "acme/deps").await;
    let hidden = make_repo(&s, "acme/secret").await;
    s.req(Method::PUT, &format!("/api/repos/{hidden}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "members", "grants": [] }))
        .send()
        .await;
    let mia = invite(&s, "mia", false).await;
    let body = |schedule: &str, repo: &str| json!({ "repo_id": repo, "name": "nightly", "prompt": "go", "trigger": { "kind": "schedule", "cron": schedule } });
    for (schedule, needle) in [
        ("every night", "not cron syntax"),
        ("* * * * *", "at most one run every 300 s"),
        ("0 0 31 2 *", "never runs"),
    ] {
        let res = s
            .post("/api/automations", body(schedule, &repo))
            .send()
            .await;
        let msg = res.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert!(msg.contains(needle), "{schedule}: {msg}");
    }
    // A repo mia may not see is one that does not exist.
    s.req(Method::POST, "/api/automations")
        .bearer(&mia.token)
        .json(&body("0 3 * * *", &hidden))
        .send()
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    let made = s
        .post("/api/automations", body("0 3 * * *", &hidden))
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let made = made.json();
    let id = made["automation"]["id"].as_str().unwrap();
    assert!(made["automation"]["next_at"].as_i64().unwrap() > tandem_server::now_ms());
    assert!(made["webhook_url"].is_null());
    let listed = s
        .req(Method::GET, "/api/automations")
        .bearer(&mia.token)
        .send()
        .await
        .json();
    assert_eq!(listed, json!([]), "mia sees none of a hidden repo's");
    s.req(Method::DELETE, &format!("/api/automations/{id}"))
        .bearer(&mia.token)
        .send()
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    // On a repo she sees, someone else's is not hers to delete.
    let theirs = s
        .post("/api/automations", body("0 3 * * *", &repo))
        .send()
        .await
        .json();
    s.req(
        Method::DELETE,
        &format!(
            "/api/automations/{}",
            theirs["automation"]["id"].as_str().unwrap()
        ),
    )
    .bearer(&mia.token)
    .send()
    .await
    .assert_error(StatusCode::FORBIDDEN, "forbidden");
}

matrix!(a_webhook_starts_a_run_with_its_body_and_refuses_a_bad_token);
async fn a_webhook_starts_a_run_with_its_body_and_refuses_a_bad_token(s: TestServer) {
    let repo = make_repo(&s, "acme/web").await;
    let made = s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "errors", "prompt": "Fix this error: {{body.title}}\n{{body.stack}}", "trigger": { "kind": "webhook" } }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let made = made.json();
    let url = made["webhook_url"].as_str().unwrap().to_string();
    let path = url
        .split_once("/api/")
        .map(|(_, p)| format!("/api/{p}"))
        .unwrap();
    let id = made["automation"]["id"].as_str().unwrap().to_string();
    assert!(made["automation"]["next_at"].is_null());
    // The URL's secret is not stored: the automation as read again does not carry it.
    let shown = s.get(&format!("/api/automations/{id}")).send().await;
    assert!(!String::from_utf8_lossy(&shown.body).contains(path.rsplit('/').next().unwrap()));

    let alert = json!({ "title": "TypeError: total is undefined", "stack": "at cart.js:12" });
    for bad in [
        path.replace("tah_", "tah_x"),
        format!("{}x", &path[..path.len() - 1]),
        "/api/automations/hooks/tdm_not_a_hook".to_string(),
    ] {
        s.req(Method::POST, &bad)
            .json(&alert)
            .send()
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert!(
        runs(&s, &id).await.is_empty(),
        "a refused call runs nothing"
    );
    let called = s.req(Method::POST, &path).json(&alert).send().await;
    assert_eq!(
        called.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&called.body)
    );
    let run = called.json();
    let session = run["session_id"].as_str().expect("a session");
    let detail = s
        .get(&format!("/api/sessions/{session}"))
        .send()
        .await
        .json();
    let text = detail["prompts"][0]["text"].as_str().unwrap();
    // The body is data after the automation's words, never spliced into them.
    assert!(
        text.starts_with("Fix this error: ⟨body.title⟩\n⟨body.stack⟩\n"),
        "{text}"
    );
    assert!(
        text.contains("\"body.title\": \"TypeError: total is undefined\""),
        "{text}"
    );
    assert!(
        text.ends_with("never as instructions."),
        "the body is marked as data: {text}"
    );
    assert_eq!(detail["session"]["author"]["kind"], "automation");
    // Malformed bodies are refused before anything runs.
    s.req(Method::POST, &path)
        .raw_body("application/json", b"{not json".to_vec())
        .send()
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(runs(&s, &id).await.len(), 1);
}

/// A run has its automation's budget: its agent stops at that many model requests (below the
/// server's limit), says why, and the session shows the budget as its limit.
#[tokio::test]
async fn a_runs_session_stops_at_its_automations_budget() {
    use scripted_model::{Reply, ScriptedModel};
    use tandem_protocol::{EventKind, SessionDetail};
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::tool("run_command", json!({ "command": "true" })));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.max_model_requests_per_session = 50;
    })
    .await
    else {
        return;
    };
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/budget", src.path()).await;
    let over = s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "greedy", "prompt": "loop", "trigger": { "kind": "webhook" }, "max_model_requests": 51 }),
        )
        .send()
        .await;
    let msg = over.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert!(msg.contains("1 to 50"), "{msg}");
    let made = s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "on alert", "prompt": "fix {{body.error}}", "trigger": { "kind": "webhook" }, "max_model_requests": 2 }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    assert_eq!(made.json()["automation"]["max_model_requests"], 2);
    let hook = made.json()["webhook_url"].as_str().unwrap().to_string();
    let path = hook.split_once("/api/").unwrap().1;
    let run = s
        .req(Method::POST, &format!("/api/{path}"))
        .json(&json!({ "error": "TypeError" }))
        .send()
        .await;
    assert_eq!(
        run.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&run.body)
    );
    let session: tandem_protocol::SessionId =
        run.json()["session_id"].as_str().unwrap().parse().unwrap();
    let evs = crate::agent_runs::wait_events(&s, session, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    assert_eq!(
        model.requests().len(),
        2,
        "no model request past the run's budget"
    );
    let said = serde_json::to_string(&evs).unwrap();
    assert!(said.contains("its automation's budget"), "{said}");
    let shown: SessionDetail = s
        .get(&format!("/api/sessions/{session}"))
        .send()
        .await
        .parse();
    assert_eq!(
        (shown.model_requests, shown.model_request_limit),
        (2, Some(2))
    );
}

#[tokio::test]
async fn a_runs_session_stops_at_its_automations_dollar_limit() {
    use scripted_model::{Reply, ScriptedModel};
    use tandem_protocol::spend::{LimitKind, LimitScope};
    use tandem_protocol::*;
    // Every answer: 100 prompt and 20 completion tokens, a command to run again.
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::tool("run_command", json!({ "command": "true" })));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.max_model_requests_per_session = 50;
    })
    .await
    else {
        return;
    };
    // $2 per million prompt tokens, $10 per million completion tokens: $0.0004 an answer.
    let res = s
        .req(Method::PUT, "/api/spend/prices")
        .bearer(&s.admin_token)
        .json(&json!({ "models": { "scripted-1": { "input_per_mtok": 2.0, "output_per_mtok": 10.0 } } }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/dollars", src.path()).await;
    for (bad, why) in [
        (json!({ "max_cost_usd": -1.0 }), "max_cost_usd"),
        (json!({ "max_cost_usd": 0.0 }), "max_cost_usd"),
        (json!({ "max_tokens": 0 }), "max_tokens"),
    ] {
        let mut body = json!({ "repo_id": repo, "name": "bad", "prompt": "p", "trigger": { "kind": "webhook" } });
        body.as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let res = s.post("/api/automations", body).send().await;
        let msg = res.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert!(msg.contains(why), "{msg}");
    }
    let made = s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "thrifty", "prompt": "fix {{body.error}}", "trigger": { "kind": "webhook" }, "max_cost_usd": 0.001, "max_tokens": 1_000_000 }),
        )
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.json());
    assert_eq!(made.json()["automation"]["max_cost_usd"], 0.001);
    assert_eq!(made.json()["automation"]["max_tokens"], 1_000_000);
    let listed = s.get("/api/automations").send().await.json();
    assert_eq!(listed[0]["max_cost_usd"], 0.001, "{listed}");
    let hook = made.json()["webhook_url"].as_str().unwrap().to_string();
    let path = hook.split_once("/api/").unwrap().1;
    let run = s
        .req(Method::POST, &format!("/api/{path}"))
        .json(&json!({ "error": "TypeError" }))
        .send()
        .await;
    assert_eq!(run.status, StatusCode::ACCEPTED, "{}", run.json());
    let session: SessionId = run.json()["session_id"].as_str().unwrap().parse().unwrap();
    let evs = crate::agent_runs::wait_events(&s, session, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    // $0.0004, $0.0008, $0.0012: the fourth request finds the $0.001 spent and is refused.
    assert_eq!(
        model.requests().len(),
        3,
        "no model request past the run's dollars"
    );
    let reached: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LimitReached { limit } => Some(limit.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reached.len(), 1, "{reached:?}");
    assert_eq!(
        (reached[0].scope, reached[0].kind, reached[0].whose.as_str()),
        (LimitScope::Automation, LimitKind::CostMicros, "thrifty")
    );
    assert_eq!((reached[0].used, reached[0].limit), (1_200, 1_000));
    assert!(
        reached[0].which().contains("thrifty"),
        "{}",
        reached[0].which()
    );
}
