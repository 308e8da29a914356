//! `/api/sessions` and the event log.

use axum::http::StatusCode;
use serde_json::json;
use tandem_protocol::{
    EventKind, EventsPage, ProblemKind, PromptState, Session, SessionDetail, SessionState,
};

use crate::harness::{TestServer, make_repo};
use crate::matrix;

async fn session_create_get_list_and_events(s: TestServer) {
    let repo = make_repo(&s, "acme/web").await;
    let res = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "  Fix the login bug\nIt fails on Safari.  " }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let created: SessionDetail = res.parse();
    let session = &created.session;
    assert_eq!(session.state, SessionState::Queued);
    assert_eq!(session.title, "Fix the login bug");
    assert_eq!(session.branch, "main");
    assert_eq!(session.repo_name, "acme/web");
    assert_eq!(session.author.name, "admin");
    assert_eq!(session.last_seq, 2);
    assert_eq!(created.prompts.len(), 1);
    assert_eq!(
        created.prompts[0].text,
        "Fix the login bug\nIt fails on Safari."
    );
    assert_eq!(created.prompts[0].state, PromptState::Queued);

    let got: SessionDetail = s
        .get(&format!("/api/sessions/{}", session.id))
        .send()
        .await
        .parse();
    // The same session (a server that cannot start it may have added a `waiting` event since).
    assert_eq!(got.session.id, created.session.id);
    assert_eq!(got.session.title, created.session.title);
    assert_eq!(got.prompts, created.prompts);

    let second: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Add dark mode", "branch": "design/dark" }),
        )
        .send()
        .await
        .parse();
    assert_eq!(second.session.branch, "design/dark");
    let list: Vec<Session> = s.get("/api/sessions").send().await.parse();
    let ids: Vec<_> = list.iter().map(|x| x.id).collect();
    assert!(ids.contains(&session.id) && ids.contains(&second.session.id));
    let queued: Vec<Session> = s
        .get("/api/sessions?state=queued&limit=1")
        .send()
        .await
        .parse();
    assert_eq!(queued.len(), 1);
    let by_repo: Vec<Session> = s
        .get(&format!("/api/sessions?repo_id={repo}"))
        .send()
        .await
        .parse();
    assert_eq!(by_repo.len(), 2);
    let other_repo = make_repo(&s, "acme/empty").await;
    let none: Vec<Session> = s
        .get(&format!("/api/sessions?repo_id={other_repo}"))
        .send()
        .await
        .parse();
    assert!(none.is_empty());

    // This server cannot start sessions (no image): the log says so after the opening events.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let all: EventsPage = loop {
        let page: EventsPage = s
            .get(&format!("/api/sessions/{}/events", session.id))
            .send()
            .await
            .parse();
        if page.events.len() >= 3 {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no waiting event: {page:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        all.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(all.last_seq, 3);
    assert!(matches!(
        all.events[0].kind,
        EventKind::SessionCreated { .. }
    ));
    match &all.events[1].kind {
        EventKind::PromptQueued { text, author, .. } => {
            assert_eq!(text, "Fix the login bug\nIt fails on Safari.");
            assert_eq!(author.name, "admin");
        }
        other => panic!("expected prompt_queued, got {other:?}"),
    }
    assert!(
        matches!(&all.events[2].kind, EventKind::Waiting { problem } if problem.kind == ProblemKind::Image),
        "{:?}",
        all.events[2]
    );
    let after: EventsPage = s
        .get(&format!("/api/sessions/{}/events?after=1", session.id))
        .send()
        .await
        .parse();
    assert_eq!(
        after.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [2, 3]
    );
    let past_end: EventsPage = s
        .get(&format!("/api/sessions/{}/events?after=3", session.id))
        .send()
        .await
        .parse();
    assert!(past_end.events.is_empty());
    assert_eq!(past_end.last_seq, 3);
}
matrix!(session_create_get_list_and_events);

async fn session_bad_input_is_refused_and_stores_nothing(s: TestServer) {
    let repo = make_repo(&s, "acme/web").await;
    let unknown = s
        .post(
            "/api/sessions",
            json!({ "repo_id": uuid::Uuid::new_v4(), "prompt": "x" }),
        )
        .send()
        .await;
    let msg = unknown.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert!(msg.contains("unknown repo"), "{msg}");
    let empty = s
        .post("/api/sessions", json!({ "repo_id": repo, "prompt": "   " }))
        .send()
        .await;
    assert!(
        empty
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
            .contains("empty")
    );
    let big = "x".repeat(tandem_protocol::limits::MAX_PROMPT_BYTES + 1);
    let too_long = s
        .post("/api/sessions", json!({ "repo_id": repo, "prompt": big }))
        .send()
        .await;
    assert!(
        too_long
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
            .contains("longer")
    );
    let bad_branch = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "x", "branch": "-rf" }),
        )
        .send()
        .await;
    bad_branch.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    let extra = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "x", "agnet": "builtin" }),
        )
        .send()
        .await;
    let msg = extra.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert!(msg.contains("agnet"), "unknown fields are named: {msg}");

    let missing = s
        .get(&format!("/api/sessions/{}", uuid::Uuid::new_v4()))
        .send()
        .await;
    missing.assert_error(StatusCode::NOT_FOUND, "not_found");
    let missing_events = s
        .get(&format!("/api/sessions/{}/events", uuid::Uuid::new_v4()))
        .send()
        .await;
    missing_events.assert_error(StatusCode::NOT_FOUND, "not_found");
    let bad_after = s
        .get(&format!(
            "/api/sessions/{}/events?after=-1",
            uuid::Uuid::new_v4()
        ))
        .send()
        .await;
    bad_after.assert_error(StatusCode::BAD_REQUEST, "bad_request");
    let bad_limit = s.get("/api/sessions?limit=0").send().await;
    bad_limit.assert_error(StatusCode::BAD_REQUEST, "bad_request");
    let bad_state = s.get("/api/sessions?state=sleeping").send().await;
    bad_state.assert_error(StatusCode::BAD_REQUEST, "bad_request");

    let list: Vec<Session> = s.get("/api/sessions").send().await.parse();
    assert!(list.is_empty(), "no refused request stored a session");
}
matrix!(session_bad_input_is_refused_and_stores_nothing);

/// Child sessions are bounded: at most `MAX_CHILD_DEPTH` deep and `MAX_CHILDREN` per session,
/// so an agent spawning children that spawn children stops.
#[tokio::test]
async fn child_sessions_nest_and_multiply_within_bounds() {
    use tandem_protocol::limits::{MAX_CHILD_DEPTH, MAX_CHILDREN, MAX_FORKS};
    let s = crate::harness::TestServer::start(
        crate::harness::Backend::Sqlite,
        crate::harness::Transport::Socket,
    )
    .await
    .unwrap();
    let repo = crate::harness::make_repo(&s, "acme/kids").await;
    let root: tandem_protocol::SessionDetail = s
        .post(
            "/api/sessions",
            serde_json::json!({ "repo_id": repo, "prompt": "root" }),
        )
        .send()
        .await
        .parse();
    let mut parent = root.session.id;
    for depth in 1..=MAX_CHILD_DEPTH {
        let res = s
            .post(
                &format!("/api/sessions/{parent}/children"),
                serde_json::json!({ "prompt": format!("level {depth}") }),
            )
            .send()
            .await;
        assert_eq!(
            res.status,
            axum::http::StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
        parent = res.parse::<Vec<tandem_protocol::Session>>()[0].id;
    }
    let too_deep = s
        .post(
            &format!("/api/sessions/{parent}/children"),
            serde_json::json!({ "prompt": "one more level" }),
        )
        .send()
        .await;
    let msg = too_deep.assert_error(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    assert!(msg.contains("nest at most"), "{msg}");

    // The root already has one child; fill it up in batches, then one more is refused.
    let mut have = 1usize;
    while have < MAX_CHILDREN {
        let n = (MAX_CHILDREN - have).min(MAX_FORKS as usize);
        let res = s
            .post(
                &format!("/api/sessions/{}/children", root.session.id),
                serde_json::json!({ "prompt": "sibling", "variants": n }),
            )
            .send()
            .await;
        assert_eq!(
            res.status,
            axum::http::StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
        have += n;
    }
    let too_many = s
        .post(
            &format!("/api/sessions/{}/children", root.session.id),
            serde_json::json!({ "prompt": "one too many" }),
        )
        .send()
        .await;
    let msg = too_many.assert_error(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    assert!(msg.contains(&format!("at most {MAX_CHILDREN}")), "{msg}");
}
