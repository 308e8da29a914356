//! Who sees what: a member without access to repo B sees nothing of it — not its repo, its
//! sessions, their events, files, diffs, terminals (the live channel is refused), VS Code or
//! desktop — through every route the router has (the walk reads the router's own route list,
//! so a route added without a check fails it); private sessions; the answers for what one may not
//! see are those for what does not exist.

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::SessionId;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use crate::harness::{TestServer, Transport, make_repo};
use crate::matrix;
use crate::people::invite;

/// Every route path the server's router has (`/api/sessions/{id}/diff`, …), read from the router.
fn route_paths(s: &TestServer) -> Vec<String> {
    let debug = format!("{:?}", tandem_server::app(s.state.clone()));
    let mut out: Vec<String> = debug
        .split('"')
        .filter(|p| p.starts_with('/') && !p.contains(' '))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `path` with its parameters filled: `{id}` → `session`/`repo` (by the segment before it).
fn fill(path: &str, session: &str, repo: &str) -> String {
    let segs: Vec<&str> = path.split('/').collect();
    let mut out = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let before = if i > 0 { segs[i - 1] } else { "" };
        out.push(match *seg {
            "{id}" if before == "sessions" => session.to_string(),
            "{id}" if before == "repos" => repo.to_string(),
            s if s.starts_with('{') => uuid::Uuid::new_v4().to_string(),
            s => s.to_string(),
        });
    }
    out.join("/")
}

async fn create_session(s: &TestServer, token: &str, repo: &str) -> String {
    let res = s
        .req(Method::POST, "/api/sessions")
        .bearer(token)
        .json(&json!({ "repo_id": repo, "prompt": "", "agent": { "kind": "none" } }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    res.json()["session"]["id"].as_str().unwrap().to_string()
}

async fn set_access(s: &TestServer, repo: &str, body: serde_json::Value) {
    let res = s
        .req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&body)
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
}

matrix!(a_member_without_access_sees_nothing_of_another_repo);
async fn a_member_without_access_sees_nothing_of_another_repo(s: TestServer) {
    let open = make_repo(&s, "acme/web").await;
    let secret = make_repo(&s, "acme/payments").await;
    set_access(&s, &secret, json!({ "access": "members", "grants": [] })).await;
    let hidden = create_session(&s, &s.admin_token, &secret).await;
    let visible = create_session(&s, &s.admin_token, &open).await;
    let m = invite(&s, "mia", false).await;

    // What she may see she sees.
    let list = s
        .req(Method::GET, "/api/sessions")
        .bearer(&m.token)
        .send()
        .await;
    let text = String::from_utf8_lossy(&list.body).to_string();
    assert!(text.contains(&visible), "{text}");
    let repos = s
        .req(Method::GET, "/api/repos")
        .bearer(&m.token)
        .send()
        .await;
    assert!(String::from_utf8_lossy(&repos.body).contains(&open));
    let seen = s
        .req(Method::GET, &format!("/api/sessions/{visible}/events"))
        .bearer(&m.token)
        .send()
        .await;
    assert_eq!(seen.status, StatusCode::OK);

    // Every route, every method it answers: about B's session or repo the answer is the one
    // for a session or repo that does not exist; everything else names nothing of B.
    let paths = route_paths(&s);
    assert!(paths.len() > 40, "the router's routes: {paths:?}");
    assert!(
        paths.iter().any(|p| p == "/api/sessions/{id}/diff"),
        "{paths:?}"
    );
    let (ghost_session, ghost_repo) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let mut walked = 0;
    for path in &paths {
        let about_b = path.contains("/sessions/{id}") || path.contains("/repos/{id}");
        let probe = s
            .req(
                Method::from_bytes(b"TRACE").unwrap(),
                &fill(path, &hidden, &secret),
            )
            .bearer(&m.token)
            .send()
            .await;
        let methods: Vec<Method> = match probe.headers.get("allow") {
            Some(a) if probe.status == StatusCode::METHOD_NOT_ALLOWED => a
                .to_str()
                .unwrap()
                .split(',')
                .filter_map(|m| Method::from_bytes(m.trim().as_bytes()).ok())
                .filter(|m| *m != Method::HEAD)
                .collect(),
            _ => vec![Method::GET, Method::POST],
        };
        for method in methods {
            let send = |url: String| {
                let mut r = s
                    .req(method.clone(), &url)
                    .bearer(&m.token)
                    .header("sec-websocket-version", "13")
                    .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
                if method == Method::GET {
                    r = r
                        .header("connection", "upgrade")
                        .header("upgrade", "websocket");
                } else {
                    r = r.json(&json!({}));
                }
                r.send()
            };
            let real = send(fill(path, &hidden, &secret)).await;
            let body = String::from_utf8_lossy(&real.body).to_string();
            assert!(
                !body.contains("acme/payments"),
                "{method} {path} names the hidden repo: {body}"
            );
            if about_b {
                let ghost = send(fill(path, &ghost_session, &ghost_repo)).await;
                let ghost_body = String::from_utf8_lossy(&ghost.body)
                    .replace(&ghost_session, &hidden)
                    .replace(&ghost_repo, &secret);
                assert_eq!(
                    (real.status, body.as_str()),
                    (ghost.status, ghost_body.as_str()),
                    "{method} {path}: B's session or repo answers unlike one that does not exist"
                );
                assert!(
                    !real.status.is_success(),
                    "{method} {path} answered {}",
                    real.status
                );
            } else {
                assert!(
                    !body.contains(&hidden) && !body.contains(&secret),
                    "{method} {path} names B's session or repo: {body}"
                );
            }
            walked += 1;
        }
    }
    assert!(walked > 60, "walked only {walked} route × method pairs");

    // The live channel (terminals, presence) is refused like a session that does not exist.
    if s.transport == Transport::Socket {
        let creds = Credentials {
            token: Some(m.token.clone()),
            share: None,
            name: None,
        };
        let id: SessionId = hidden.parse().unwrap();
        let mut c = LiveClient::connect(&s.url, id, &creds)
            .await
            .expect("connects");
        match c.next().await {
            Some(Incoming::Closed(code, reason)) => {
                assert_eq!(code, Some(4404), "{reason}");
            }
            other => panic!("the live channel of a hidden session answered {other:?}"),
        }
    }

    // Her own session on the open repo cannot reach the hidden one through children: the
    // hidden repo is as unknown as one that does not exist.
    let own = create_session(&s, &m.token, &open).await;
    for repo_id in [secret.clone(), ghost_repo.clone()] {
        let child = s
            .req(Method::POST, &format!("/api/sessions/{own}/children"))
            .bearer(&m.token)
            .json(&json!({ "prompt": "", "repo_id": repo_id, "agent": { "kind": "none" } }))
            .send()
            .await;
        let msg = child.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert_eq!(msg, format!("unknown repo {repo_id}"));
    }
    // The children of a session she sees that are on the hidden repo are not listed to her.
    let spawned = s
        .post(
            &format!("/api/sessions/{visible}/children"),
            json!({ "prompt": "", "repo_id": secret, "agent": { "kind": "none" } }),
        )
        .send()
        .await;
    assert_eq!(
        spawned.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&spawned.body)
    );
    let children = s
        .req(Method::GET, &format!("/api/sessions/{visible}/children"))
        .bearer(&m.token)
        .send()
        .await;
    assert_eq!(children.status, StatusCode::OK);
    assert_eq!(
        children.json().as_array().unwrap().len(),
        0,
        "{}",
        String::from_utf8_lossy(&children.body)
    );
    let admin_sees = s
        .get(&format!("/api/sessions/{visible}/children"))
        .send()
        .await;
    assert_eq!(admin_sees.json().as_array().unwrap().len(), 1);

    // A grant opens it: read lets her watch, not start.
    let grants =
        json!({ "access": "members", "grants": [{ "kind": "user", "who": m.id, "role": "read" }] });
    set_access(&s, &secret, grants).await;
    let seen = s
        .req(Method::GET, &format!("/api/sessions/{hidden}"))
        .bearer(&m.token)
        .send()
        .await;
    assert_eq!(seen.status, StatusCode::OK);
    let start = s
        .req(Method::POST, "/api/sessions")
        .bearer(&m.token)
        .json(&json!({ "repo_id": secret, "prompt": "", "agent": { "kind": "none" } }))
        .send()
        .await;
    let msg = start.assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert!(msg.contains("ask an admin (admin)"), "{msg}");
    // A group grant works the same way (groups come from the identity provider).
    let audit = s.get("/api/audit?limit=500").send().await;
    assert!(String::from_utf8_lossy(&audit.body).contains("repo.access"));
}

matrix!(a_private_session_is_its_owners_and_the_people_they_share_it_with);
async fn a_private_session_is_its_owners_and_the_people_they_share_it_with(s: TestServer) {
    let repo = make_repo(&s, "acme/web").await;
    let owner = invite(&s, "olga", false).await;
    let other = invite(&s, "pete", false).await;
    let id = create_session(&s, &owner.token, &repo).await;
    let seen = s
        .req(Method::GET, &format!("/api/sessions/{id}"))
        .bearer(&other.token)
        .send()
        .await;
    assert_eq!(
        seen.status,
        StatusCode::OK,
        "not private yet: the repo's people see it"
    );

    // Only its owner makes it private.
    let refused = s
        .req(Method::PUT, &format!("/api/sessions/{id}/visibility"))
        .bearer(&other.token)
        .json(&json!({ "private": true }))
        .send()
        .await;
    refused.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let made = s
        .req(Method::PUT, &format!("/api/sessions/{id}/visibility"))
        .bearer(&owner.token)
        .json(&json!({ "private": true }))
        .send()
        .await;
    assert_eq!(made.status, StatusCode::OK);
    assert_eq!(made.json()["private"], true);
    let hidden = s
        .req(Method::GET, &format!("/api/sessions/{id}"))
        .bearer(&other.token)
        .send()
        .await;
    hidden.assert_error(StatusCode::NOT_FOUND, "not_found");
    let list = s
        .req(Method::GET, "/api/sessions")
        .bearer(&other.token)
        .send()
        .await;
    assert!(!String::from_utf8_lossy(&list.body).contains(&id));
    // Its children are private too.
    let child = s
        .req(Method::POST, &format!("/api/sessions/{id}/children"))
        .bearer(&owner.token)
        .json(&json!({ "prompt": "", "agent": { "kind": "none" } }))
        .send()
        .await;
    assert_eq!(
        child.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&child.body)
    );
    let child = child.json()[0]["id"].as_str().unwrap().to_string();
    let seen = s
        .req(Method::GET, &format!("/api/sessions/{child}"))
        .bearer(&other.token)
        .send()
        .await;
    seen.assert_error(StatusCode::NOT_FOUND, "not_found");
    let admin_list = s.get("/api/sessions").send().await;
    assert!(
        String::from_utf8_lossy(&admin_list.body).contains(&id),
        "admins see everything"
    );

    // Shared with a link, the person it is shared with sees it.
    let link = s
        .req(Method::POST, &format!("/api/sessions/{id}/links"))
        .bearer(&owner.token)
        .json(&json!({ "role": "viewer" }))
        .send()
        .await;
    assert_eq!(
        link.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&link.body)
    );
    let token = link.json()["token"].as_str().unwrap().to_string();
    let joined = s
        .req(Method::POST, "/api/links/join")
        .bearer(&other.token)
        .json(&json!({ "token": token }))
        .send()
        .await;
    assert_eq!(joined.status, StatusCode::OK);
    let seen = s
        .req(Method::GET, &format!("/api/sessions/{id}"))
        .bearer(&other.token)
        .send()
        .await;
    assert_eq!(seen.status, StatusCode::OK);

    // A revoked link opens nothing, and the refusal is one the API documents.
    let revoked = s
        .req(Method::POST, &format!("/api/sessions/{id}/links"))
        .bearer(&owner.token)
        .json(&json!({ "role": "driver" }))
        .send()
        .await
        .json();
    let res = s
        .req(
            Method::DELETE,
            &format!(
                "/api/sessions/{id}/links/{}",
                revoked["jti"].as_str().unwrap()
            ),
        )
        .bearer(&owner.token)
        .send()
        .await;
    assert_eq!(res.status, StatusCode::NO_CONTENT);
    s.req(Method::POST, "/api/links/join")
        .bearer(&other.token)
        .json(&json!({ "token": revoked["token"] }))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    s.assert_documented(Method::POST, "/api/links/join", StatusCode::FORBIDDEN)
        .await;
    let list = s
        .req(Method::GET, "/api/sessions")
        .bearer(&other.token)
        .send()
        .await;
    assert!(String::from_utf8_lossy(&list.body).contains(&id));

    // Its owner deactivated: the link they made stops working.
    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", owner.id))
        .bearer(&s.admin_token)
        .json(&json!({ "deactivated": true }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let hidden = s
        .req(Method::GET, &format!("/api/sessions/{id}"))
        .bearer(&other.token)
        .send()
        .await;
    hidden.assert_error(StatusCode::NOT_FOUND, "not_found");
}

/// A live channel open on a session closes (4403) once its holder may no longer see it.
#[tokio::test]
async fn a_watchers_live_channel_closes_when_the_session_is_made_private() {
    let Some(s) = TestServer::start(crate::harness::Backend::Sqlite, Transport::Socket).await
    else {
        return;
    };
    let repo = make_repo(&s, "acme/web").await;
    let owner = invite(&s, "olga", false).await;
    let other = invite(&s, "pete", false).await;
    let id = create_session(&s, &owner.token, &repo).await;
    let creds = Credentials {
        token: Some(other.token.clone()),
        share: None,
        name: None,
    };
    let mut c = LiveClient::connect(&s.url, id.parse().unwrap(), &creds)
        .await
        .expect("connects");
    match c.next().await {
        Some(Incoming::Message(m)) => assert!(
            matches!(*m, tandem_protocol::live::WsServer::Hello { .. }),
            "{m:?}"
        ),
        other => panic!("no hello: {other:?}"),
    }
    let made = s
        .req(Method::PUT, &format!("/api/sessions/{id}/visibility"))
        .bearer(&owner.token)
        .json(&json!({ "private": true }))
        .send()
        .await;
    assert_eq!(made.status, StatusCode::OK);
    // The channel's own re-check closes it: an event, not a wait.
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match c.next().await {
                Some(Incoming::Closed(code, _)) => return code,
                None => return None,
                Some(_) => continue,
            }
        }
    })
    .await
    .expect("the channel closes");
    assert_eq!(closed, Some(4403));
}
