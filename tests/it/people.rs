//! People: invites made once, roles, deactivation that stops every credential at once, and the
//! audit of all of it — through the API, on both databases.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;
use crate::matrix;

/// A person invited by the admin and signed in through their invite: their id, browser cookie
/// (`tandem_session=…`) and an API token they made with it.
pub struct Invited {
    pub id: String,
    pub cookie: String,
    pub token: String,
}

/// Invites `name` as the admin, accepts the invite as a browser would, and makes an API token.
pub async fn invite(s: &TestServer, name: &str, is_admin: bool) -> Invited {
    let made = s
        .post(
            "/api/people/invites",
            json!({ "name": name, "email": format!("{name}@acme.test"), "is_admin": is_admin }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let url = made.json()["url"].as_str().unwrap().to_string();
    let code = url
        .split_once("#code=")
        .expect("the code is in the fragment")
        .1;
    assert!(code.starts_with("tiv_"), "{url}");
    let accepted = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": code }))
        .send()
        .await;
    assert_eq!(
        accepted.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&accepted.body)
    );
    let cookie = session_cookie(&accepted);
    let id = accepted.json()["id"].as_str().unwrap().to_string();
    let token = s
        .req(Method::POST, "/api/tokens")
        .header("cookie", &cookie)
        .header("origin", &s.url)
        .json(&json!({ "name": "laptop" }))
        .send()
        .await;
    assert_eq!(
        token.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&token.body)
    );
    Invited {
        id,
        cookie,
        token: token.json()["token"].as_str().unwrap().to_string(),
    }
}

fn session_cookie(res: &crate::harness::Res) -> String {
    res.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("tandem_session=") && !v.starts_with("tandem_session=;"))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_string()
}

async fn people_count(s: &TestServer) -> usize {
    let res = s.get("/api/people").send().await;
    assert_eq!(res.status, StatusCode::OK);
    res.json().as_array().unwrap().len()
}

async fn audit_actions(s: &TestServer) -> Vec<String> {
    let res = s.get("/api/audit?limit=500").send().await;
    res.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("").to_string())
        .collect()
}

matrix!(an_invite_makes_one_person_once);
async fn an_invite_makes_one_person_once(s: TestServer) {
    let before = people_count(&s).await;
    let made = s
        .post(
            "/api/people/invites",
            json!({ "name": "carol", "email": "Carol@Acme.test" }),
        )
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let url = made.json()["url"].as_str().unwrap().to_string();
    let code = url.split_once("#code=").unwrap().1.to_string();
    // The code is shown once: the list does not carry it.
    let listed = s.get("/api/people/invites").send().await;
    assert!(!String::from_utf8_lossy(&listed.body).contains(&code));

    let first = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": code }))
        .send()
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.json()["email"],
        "carol@acme.test",
        "emails are lower-cased"
    );
    assert_eq!(first.json()["is_admin"], false);
    let again = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": code }))
        .send()
        .await;
    let msg = again.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("already used"), "{msg}");
    assert_eq!(
        people_count(&s).await,
        before + 1,
        "a second use made nobody"
    );

    // A revoked invite and an expired one make nobody.
    let revoked = s
        .post("/api/people/invites", json!({ "name": "dave" }))
        .send()
        .await
        .json();
    let id = revoked["invite"]["id"].as_str().unwrap();
    let gone = s
        .req(Method::DELETE, &format!("/api/people/invites/{id}"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    let code = revoked["url"]
        .as_str()
        .unwrap()
        .split_once("#code=")
        .unwrap()
        .1;
    let refused = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": code }))
        .send()
        .await;
    refused.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let expiring = s
        .post("/api/people/invites", json!({ "name": "erin" }))
        .send()
        .await
        .json();
    let mut tx = s.state.db.begin().await.unwrap();
    sqlx::query("UPDATE invites SET expires_at = 1 WHERE name = 'erin'")
        .execute(tx.raw())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let code = expiring["url"]
        .as_str()
        .unwrap()
        .split_once("#code=")
        .unwrap()
        .1;
    let late = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": code }))
        .send()
        .await;
    late.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(people_count(&s).await, before + 1);

    // Bad input is refused with a reason; a taken name too.
    for (body, what) in [
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x<script>" }), "name"),
        (json!({ "name": "fred", "email": "not-an-email" }), "email"),
        (json!({ "name": "fred", "expires_in_secs": 0 }), "lasts"),
    ] {
        let res = s.post("/api/people/invites", body).send().await;
        let msg = res.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
        assert!(msg.contains(what), "{msg}");
    }
    let taken = s
        .post("/api/people/invites", json!({ "name": "carol" }))
        .send()
        .await;
    taken.assert_error(StatusCode::CONFLICT, "conflict");

    // Only admins invite, list and change people.
    let member = invite(&s, "grace", false).await;
    for (method, path) in [
        (Method::GET, "/api/people"),
        (Method::GET, "/api/people/invites"),
        (Method::POST, "/api/people/invites"),
    ] {
        let res = s
            .req(method, path)
            .bearer(&member.token)
            .json(&json!({ "name": "heidi" }))
            .send()
            .await;
        res.assert_error(StatusCode::FORBIDDEN, "forbidden");
    }
    let actions = audit_actions(&s).await;
    for a in [
        "person.invite",
        "person.join",
        "person.invite_revoke",
        "auth.refused",
    ] {
        assert!(
            actions.iter().any(|x| x == a),
            "{a} missing from {actions:?}"
        );
    }
}

matrix!(deactivation_stops_every_credential_at_once);
async fn deactivation_stops_every_credential_at_once(s: TestServer) {
    let carol = invite(&s, "carol", false).await;
    let repo = crate::harness::make_repo(&s, "acme/web").await;
    let made = s
        .req(Method::POST, "/api/sessions")
        .bearer(&carol.token)
        .json(&json!({ "repo_id": repo, "prompt": "make it faster" }))
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let session = made.json()["session"]["id"].as_str().unwrap().to_string();
    let me = s
        .req(Method::GET, "/api/me")
        .header("cookie", &carol.cookie)
        .send()
        .await;
    assert_eq!(me.status, StatusCode::OK);
    let me = s
        .req(Method::GET, "/api/me")
        .bearer(&carol.token)
        .send()
        .await;
    assert_eq!(me.status, StatusCode::OK);

    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", carol.id))
        .bearer(&s.admin_token)
        .json(&json!({ "deactivated": true }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert!(res.json()["deactivated_at"].is_number());
    // What she queued does not run after her: the agent would act as her.
    let detail = s
        .get(&format!("/api/sessions/{session}"))
        .send()
        .await
        .json();
    assert_eq!(detail["prompts"][0]["state"], "withdrawn", "{detail}");

    // The very next request with either credential is refused.
    let by_cookie = s
        .req(Method::GET, "/api/me")
        .header("cookie", &carol.cookie)
        .send()
        .await;
    let msg = by_cookie.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("deactivated"), "{msg}");
    let by_token = s
        .req(Method::GET, "/api/me")
        .bearer(&carol.token)
        .send()
        .await;
    by_token.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    // Reactivated, the revoked token stays revoked (the cookie's login holds again).
    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", carol.id))
        .bearer(&s.admin_token)
        .json(&json!({ "deactivated": false }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let by_token = s
        .req(Method::GET, "/api/me")
        .bearer(&carol.token)
        .send()
        .await;
    let msg = by_token.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("revoked"), "{msg}");

    // Roles: a member made admin may manage people; the last admin stays an admin.
    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", carol.id))
        .bearer(&s.admin_token)
        .json(&json!({ "is_admin": true }))
        .send()
        .await;
    assert_eq!(res.json()["is_admin"], true);
    let listed = s
        .req(Method::GET, "/api/people")
        .header("cookie", &carol.cookie)
        .send()
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    // An invite she made as an admin dies with her admin role.
    let made = s
        .req(Method::POST, "/api/people/invites")
        .header("cookie", &carol.cookie)
        .header("origin", &s.url)
        .json(&json!({ "name": "zoe", "is_admin": true }))
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let zoe = made.json()["url"]
        .as_str()
        .unwrap()
        .split_once("#code=")
        .unwrap()
        .1
        .to_string();
    let admin_id = s.get("/api/me").send().await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let res = s
        .req(Method::PATCH, &format!("/api/people/{}", carol.id))
        .bearer(&s.admin_token)
        .json(&json!({ "is_admin": false }))
        .send()
        .await;
    assert_eq!(res.json()["is_admin"], false);
    let late = s
        .req(Method::POST, "/api/auth/invite")
        .json(&json!({ "code": zoe }))
        .send()
        .await;
    late.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let res = s
        .req(Method::PATCH, &format!("/api/people/{admin_id}"))
        .bearer(&s.admin_token)
        .json(&json!({ "deactivated": true }))
        .send()
        .await;
    let msg = res.assert_error(StatusCode::CONFLICT, "conflict");
    assert!(msg.contains("last active admin"), "{msg}");
    let actions = audit_actions(&s).await;
    for a in [
        "person.deactivate",
        "person.reactivate",
        "person.role",
        "auth.login",
    ] {
        assert!(
            actions.iter().any(|x| x == a),
            "{a} missing from {actions:?}"
        );
    }
}

matrix!(two_admins_demoting_each_other_at_once_leave_one_admin);
/// The last admin stays under concurrency: two admins demote each other at the same instant,
/// round after round; one demotion wins, the other is refused as the last admin's, and there is
/// always an active admin left (PostgreSQL's READ COMMITTED let both counts see two admins).
async fn two_admins_demoting_each_other_at_once_leave_one_admin(s: TestServer) {
    let ann = invite(&s, "ann", true).await;
    let bob = invite(&s, "bob", true).await;
    let admin_id = s.get("/api/me").send().await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let demote = |by: &Invited, whom: &str| {
        s.req(Method::PATCH, &format!("/api/people/{whom}"))
            .bearer(&by.token)
            .json(&json!({ "is_admin": false }))
            .send()
    };
    let res = demote(&ann, &admin_id).await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    for round in 0..12 {
        let (a, b) = tokio::join!(demote(&ann, &bob.id), demote(&bob, &ann.id));
        // The loser is refused as the last admin's demotion (409) or, when the winner's
        // commit came first, as no admin any more (403).
        let statuses = [a.status, b.status];
        let refused = |s: &StatusCode| *s == StatusCode::CONFLICT || *s == StatusCode::FORBIDDEN;
        assert!(
            statuses.iter().filter(|s| **s == StatusCode::OK).count() == 1
                && statuses.iter().any(refused),
            "round {round}: one demotion wins and the other is refused, got {statuses:?}: {} / {}",
            String::from_utf8_lossy(&a.body),
            String::from_utf8_lossy(&b.body)
        );
        let admins = s
            .get("/api/people/admins")
            .bearer(&s.admin_token)
            .send()
            .await;
        let admins = admins.json();
        let admins = admins.as_array().expect("a list of admins");
        assert_eq!(admins.len(), 1, "round {round}: {admins:?}");
        // The one left makes the other an admin again for the next round.
        let (survivor, other) = if a.status == StatusCode::OK {
            (&ann, &bob)
        } else {
            (&bob, &ann)
        };
        let res = s
            .req(Method::PATCH, &format!("/api/people/{}", other.id))
            .bearer(&survivor.token)
            .json(&json!({ "is_admin": true }))
            .send()
            .await;
        assert_eq!(
            res.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
    }
}
