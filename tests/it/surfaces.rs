//! Every surface starts a session through the one command (`commands::create_session`): the
//! same opening events, author and budget as the REST path for the same person and input, the
//! same refusals (a deactivated person, a repo they may not see). `opening` is what the Slack
//! and GitHub-issue tests compare their sessions with; `submitted` is what a follow-up prompt
//! recorded, which the pull-request comment test compares with a REST follow-up
//! (`commands::submit_prompt`).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, make_repo};
use crate::matrix;
use crate::people::invite;

/// What a session's start recorded, as the REST path and every other surface must record it:
/// the kinds of its opening events (up to its first prompt), who each says did it, the
/// session's author and its model budget.
#[derive(Debug, PartialEq)]
pub struct Opening {
    pub events: Vec<(String, Value)>,
    pub author_user: Value,
    pub model_request_limit: Value,
    pub agent: Value,
    pub branch: Value,
}

/// The opening of `session`, read through the API as the admin.
pub async fn opening(s: &TestServer, session: &str) -> Opening {
    let detail = s
        .get(&format!("/api/sessions/{session}"))
        .send()
        .await
        .json();
    let page = s
        .get(&format!("/api/sessions/{session}/events"))
        .send()
        .await
        .json();
    let mut events = Vec::new();
    for e in page["events"].as_array().expect("events") {
        let kind = e["type"].as_str().unwrap_or_default().to_string();
        let author = e["author"]["user_id"].clone();
        let done = kind == "prompt_queued";
        events.push((kind, author));
        if done {
            break;
        }
    }
    Opening {
        events,
        author_user: detail["session"]["author"]["user_id"].clone(),
        model_request_limit: detail["model_request_limit"].clone(),
        agent: detail["session"]["agent"].clone(),
        branch: detail["session"]["branch"].clone(),
    }
}

/// A webhook automation of `token`'s person on `repo` with `prompt`; its hook's path and id.
async fn webhook(
    s: &TestServer,
    token: &str,
    repo: &str,
    prompt: &str,
    budget: Option<u32>,
) -> (String, String) {
    let mut body = json!({ "repo_id": repo, "name": "on-call", "prompt": prompt, "trigger": { "kind": "webhook" } });
    if let Some(n) = budget {
        body["max_model_requests"] = json!(n);
    }
    let made = s
        .req(Method::POST, "/api/automations")
        .bearer(token)
        .json(&body)
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let made = made.json();
    let url = made["webhook_url"].as_str().unwrap();
    let path = url
        .split_once("/api/")
        .map(|(_, p)| format!("/api/{p}"))
        .unwrap();
    (path, made["automation"]["id"].as_str().unwrap().to_string())
}

matrix!(an_automation_starts_a_session_as_rest_does);
async fn an_automation_starts_a_session_as_rest_does(s: TestServer) {
    let repo = make_repo(&s, "acme/surfaces").await;
    let mia = invite(&s, "mia", false).await;
    let prompt = "Fix the flaky login test";

    let rest = s
        .req(Method::POST, "/api/sessions")
        .bearer(&mia.token)
        .json(&json!({ "repo_id": repo, "prompt": prompt }))
        .send()
        .await;
    assert_eq!(
        rest.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&rest.body)
    );
    let rest = rest.json();
    let rest_id = rest["session"]["id"].as_str().unwrap().to_string();
    assert_eq!(rest["session"]["author"]["kind"], "user");

    let (hook, _) = webhook(&s, &mia.token, &repo, prompt, None).await;
    let run = s.req(Method::POST, &hook).json(&json!({})).send().await;
    assert_eq!(
        run.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&run.body)
    );
    let auto_id = run.json()["session_id"].as_str().unwrap().to_string();
    let auto = s
        .get(&format!("/api/sessions/{auto_id}"))
        .send()
        .await
        .json();
    // Written as the automation, on behalf of its maker: the same person.
    assert_eq!(auto["session"]["author"]["kind"], "automation");
    assert_eq!(auto["session"]["author"]["name"], "on-call (automation)");
    assert_eq!(auto["session"]["author"]["user_id"], json!(mia.id));

    let (a, b) = (opening(&s, &rest_id).await, opening(&s, &auto_id).await);
    assert_eq!(
        a.events.iter().map(|e| &e.0).collect::<Vec<_>>(),
        ["session_created", "prompt_queued"],
        "{a:?}"
    );
    assert!(a.events.iter().all(|e| e.1 == json!(mia.id)), "{a:?}");
    assert_eq!(a, b, "an automation's session opens as a REST one does");

    // A budget the surface asks for is the session's, from its first moment.
    let (hook, _) = webhook(&s, &mia.token, &repo, prompt, Some(7)).await;
    let run = s.req(Method::POST, &hook).json(&json!({})).send().await;
    assert_eq!(run.status, StatusCode::ACCEPTED);
    let tight = run.json()["session_id"].as_str().unwrap().to_string();
    let c = opening(&s, &tight).await;
    assert_eq!(c.model_request_limit, json!(7));
    assert_eq!(c.events, a.events);
}

matrix!(every_surface_refuses_whom_rest_refuses);
async fn every_surface_refuses_whom_rest_refuses(s: TestServer) {
    let repo = make_repo(&s, "acme/closed").await;
    let mia = invite(&s, "mia", false).await;
    let (hook, id) = webhook(&s, &mia.token, &repo, "Tidy up", None).await;
    let before = s.get("/api/sessions").send().await.json();
    let count = before.as_array().unwrap().len();

    // The repo closes to its members: REST says it does not know it, and so does the run.
    let res = s
        .req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "members", "grants": [] }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    s.req(Method::POST, "/api/sessions")
        .bearer(&mia.token)
        .json(&json!({ "repo_id": repo, "prompt": "Tidy up" }))
        .send()
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    let run = s.req(Method::POST, &hook).json(&json!({})).send().await;
    let runs = s
        .get(&format!("/api/automations/{id}/runs"))
        .send()
        .await
        .json();
    let refused = runs.as_array().unwrap().iter().any(|r| {
        r["session_id"].is_null()
            && r["error"]
                .as_str()
                .is_some_and(|e| e.contains("unknown repo"))
    });
    assert!(
        run.status.is_client_error() || refused,
        "{} {runs:?}",
        run.status
    );

    // Open again, then she is deactivated: neither path starts anything for her.
    s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "everyone", "grants": [] }))
        .send()
        .await;
    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", mia.id))
        .bearer(&s.admin_token)
        .json(&json!({ "deactivated": true }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    s.req(Method::POST, "/api/sessions")
        .bearer(&mia.token)
        .json(&json!({ "repo_id": repo, "prompt": "Tidy up" }))
        .send()
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let _ = s.req(Method::POST, &hook).json(&json!({})).send().await;
    let after = s.get("/api/sessions").send().await.json();
    assert_eq!(
        after.as_array().unwrap().len(),
        count,
        "no surface started a session for someone REST refuses"
    );
}

/// `session` opened exactly as the REST path opens one for the same person (what
/// [`an_automation_starts_a_session_as_rest_does`] shows REST records): its creation and first
/// prompt, both by `person`, the session theirs, the server's model budget, its repo's default
/// branch. For the surfaces whose tests run a whole conversation (Slack, GitHub issues); the
/// first prompt's `images` each add an `attachment` event, as they would on any surface.
pub async fn assert_opens_as_rest_does(
    s: &TestServer,
    session: &str,
    person: &Value,
    images: usize,
) {
    let mut o = opening(s, session).await;
    let attachments = o.events.iter().filter(|e| e.0 == "attachment").count();
    assert_eq!(attachments, images, "{o:?}");
    o.events.retain(|e| e.0 != "attachment");
    assert_eq!(
        o.events,
        [
            ("session_created".to_string(), person.clone()),
            ("prompt_queued".to_string(), person.clone()),
        ],
        "{o:?}"
    );
    assert_eq!(&o.author_user, person, "{o:?}");
    let cap = s.state.config.agents.max_model_requests_per_session;
    assert_eq!(o.model_request_limit, json!(cap), "{o:?}");
}

/// What submitting a prompt recorded, as every surface must record it: the person it is from,
/// its mode, and the author's kind and name (which say the surface: `slack`, `github`,
/// `automation`… and so differ from REST's by design). [`submitted`] checks its
/// `prompt_queued` event and the stored prompt agree before it answers.
#[derive(Debug, PartialEq)]
pub struct Submitted {
    pub person: Value,
    pub mode: Value,
    pub kind: Value,
    pub name: Value,
}

/// What submitting the prompt `text` to `session` recorded (`commands::submit_prompt`).
pub async fn submitted(s: &TestServer, session: &str, text: &str) -> Submitted {
    let page = s
        .get(&format!("/api/sessions/{session}/events"))
        .send()
        .await
        .json();
    let event = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["type"] == "prompt_queued" && e["text"] == text)
        .unwrap_or_else(|| panic!("no prompt_queued event for {text:?}"))
        .clone();
    let detail = s
        .get(&format!("/api/sessions/{session}"))
        .send()
        .await
        .json();
    let prompt = detail["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["text"] == text)
        .unwrap_or_else(|| panic!("no stored prompt {text:?}"))
        .clone();
    assert_eq!(
        event["prompt_id"], prompt["id"],
        "the event names the prompt"
    );
    assert_eq!(
        event["author"], prompt["author"],
        "the event's author is the prompt's"
    );
    assert_eq!(
        event["mode"], prompt["mode"],
        "the event's mode is the prompt's"
    );
    Submitted {
        person: prompt["author"]["user_id"].clone(),
        mode: prompt["mode"].clone(),
        kind: prompt["author"]["kind"].clone(),
        name: prompt["author"]["name"].clone(),
    }
}

/// The prompt `text` that a surface submitted to `session` was recorded as the same person's
/// `rest` prompt (sent through `POST /api/sessions/{id}/prompts`) was — the same person and
/// mode — with the surface's author `kind`; returns what it recorded.
pub async fn assert_submits_as_rest_does(
    s: &TestServer,
    session: &str,
    text: &str,
    rest: &str,
    kind: &str,
) -> Submitted {
    let theirs = submitted(s, session, text).await;
    let ours = submitted(s, session, rest).await;
    assert_eq!(ours.kind, json!("user"), "{ours:?}");
    assert!(theirs.person.is_string(), "a person is named: {theirs:?}");
    assert_eq!(
        (&theirs.person, &theirs.mode, &theirs.kind),
        (&ours.person, &ours.mode, &json!(kind)),
        "{theirs:?} against REST's {ours:?}"
    );
    theirs
}
