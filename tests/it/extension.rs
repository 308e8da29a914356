//! The Chrome extension's pairing, tested like the other credentials: a code approved only by a
//! signed-in person, taken once, expiring; the token it gives is scoped to starting sessions,
//! prompting and reading what its person may see, listed with their tokens and revocable.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::harness::{TestServer, make_repo};
use crate::matrix;
use crate::people::invite;

async fn start(s: &TestServer) -> (String, String) {
    let res = s
        .req(Method::POST, "/api/extension/pairings")
        .json(&json!({ "label": "Chrome on my laptop" }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let p = res.json();
    let code = p["user_code"].as_str().unwrap().to_string();
    // The approving page's link names the pairing, never its code.
    let approve = p["approve_url"].as_str().unwrap();
    assert!(approve.contains("/pair#id="), "{approve}");
    assert!(!approve.contains(&code), "{approve}");
    (p["device_code"].as_str().unwrap().to_string(), code)
}

async fn poll(s: &TestServer, device: &str) -> crate::harness::Res {
    s.req(Method::POST, "/api/extension/pairings/poll")
        .json(&json!({ "device_code": device }))
        .send()
        .await
}

matrix!(the_extension_pairs_once_with_a_code_a_signed_in_person_approves);
async fn the_extension_pairs_once_with_a_code_a_signed_in_person_approves(s: TestServer) {
    let repo = make_repo(&s, "acme/web").await;
    let mia = invite(&s, "mia", false).await;
    let (device, code) = start(&s).await;
    let pending = poll(&s, &device).await;
    assert_eq!(pending.status, StatusCode::OK);
    assert_eq!(pending.json()["status"], "pending");

    // Only a signed-in person approves: not anonymously, not with a wrong code.
    let anon = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .json(&json!({ "user_code": code }))
        .send()
        .await;
    anon.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let wrong = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&mia.token)
        .json(&json!({ "user_code": "ZZZZ-ZZZZ" }))
        .send()
        .await;
    wrong.assert_error(StatusCode::NOT_FOUND, "not_found");
    // Typed in lower case with a space, it is the same code.
    let typed = code.to_lowercase().replace('-', " ");
    let ok = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .header("cookie", &mia.cookie)
        .header("origin", &s.url)
        .json(&json!({ "user_code": typed }))
        .send()
        .await;
    assert_eq!(
        ok.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&ok.body)
    );
    // Approved once.
    let again = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&mia.token)
        .json(&json!({ "user_code": code }))
        .send()
        .await;
    again.assert_error(StatusCode::NOT_FOUND, "not_found");

    // The extension takes its token once.
    let taken = poll(&s, &device).await;
    assert_eq!(taken.status, StatusCode::OK);
    let taken = taken.json();
    assert_eq!(taken["status"], "approved");
    let token = taken["token"]["token"].as_str().unwrap().to_string();
    assert_eq!(taken["token"]["info"]["scope"], "extension");
    assert!(
        taken["token"]["info"]["expires_at"].is_number(),
        "it expires"
    );
    let replay = poll(&s, &device).await;
    replay.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");

    // It prompts and reads as mia…
    let me = s.req(Method::GET, "/api/me").bearer(&token).send().await;
    assert_eq!(me.json()["name"], "mia");
    let made = s
        .req(Method::POST, "/api/sessions")
        .bearer(&token)
        .json(&json!({ "repo_id": repo, "prompt": "", "agent": { "kind": "none" } }))
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let id = made.json()["session"]["id"].as_str().unwrap().to_string();
    let events = s
        .req(Method::GET, &format!("/api/sessions/{id}/events"))
        .bearer(&token)
        .send()
        .await;
    assert_eq!(events.status, StatusCode::OK);
    // …and nothing else: no commands, files, links, tokens, people, browser sign-in or pairing.
    for (method, path, body) in [
        (
            Method::POST,
            format!("/api/sessions/{id}/exec"),
            json!({ "command": "id" }),
        ),
        (
            Method::GET,
            format!("/api/sessions/{id}/files?path=/etc/passwd"),
            json!({}),
        ),
        (
            Method::POST,
            format!("/api/sessions/{id}/links"),
            json!({ "role": "viewer" }),
        ),
        (
            Method::POST,
            "/api/tokens".to_string(),
            json!({ "name": "more" }),
        ),
        (Method::GET, "/api/tokens".to_string(), json!({})),
        (
            Method::POST,
            "/api/extension/pairings/approve".to_string(),
            json!({ "user_code": "X" }),
        ),
        (Method::POST, format!("/api/sessions/{id}/stop"), json!({})),
    ] {
        let res = s
            .req(method.clone(), &path)
            .bearer(&token)
            .json(&body)
            .send()
            .await;
        let msg = res.assert_error(StatusCode::FORBIDDEN, "forbidden");
        assert!(
            msg.contains("an extension token may"),
            "{method} {path}: {msg}"
        );
    }
    let login = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": token }))
        .send()
        .await;
    login.assert_error(StatusCode::FORBIDDEN, "forbidden");

    // Listed with mia's tokens, and revoked there.
    let tokens = s
        .req(Method::GET, "/api/tokens")
        .bearer(&mia.token)
        .send()
        .await
        .json();
    let entry = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["scope"] == "extension")
        .expect("the extension's token is listed")
        .clone();
    assert_eq!(entry["name"], "Chrome on my laptop");
    let gone = s
        .req(
            Method::DELETE,
            &format!("/api/tokens/{}", entry["id"].as_str().unwrap()),
        )
        .bearer(&mia.token)
        .send()
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    let refused = s.req(Method::GET, "/api/me").bearer(&token).send().await;
    refused.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");

    // An expired pairing gives nothing.
    let (device, code) = start(&s).await;
    let mut tx = s.state.db.begin().await.unwrap();
    sqlx::query("UPDATE pairings SET expires_at = 1")
        .execute(tx.raw())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let late = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&mia.token)
        .json(&json!({ "user_code": code }))
        .send()
        .await;
    late.assert_error(StatusCode::NOT_FOUND, "not_found");
    poll(&s, &device)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}

/// Pairs an extension for `person` the way the extension does; its token.
pub async fn pair(s: &TestServer, person: &crate::people::Invited) -> String {
    let (device, code) = start(s).await;
    let ok = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&person.token)
        .json(&json!({ "user_code": code }))
        .send()
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    poll(s, &device).await.json()["token"]["token"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The `manifest.json` of a zipped extension package.
pub fn zipped_manifest(zip: &[u8]) -> serde_json::Value {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).expect("a zip");
    let file = archive.by_name("manifest.json").expect("a manifest");
    serde_json::from_reader(file).expect("the manifest is JSON")
}

matrix!(starting_pairings_is_limited_per_address_and_the_page_sees_who_asked);
async fn starting_pairings_is_limited_per_address_and_the_page_sees_who_asked(s: TestServer) {
    let mia = invite(&s, "mia", false).await;
    // A reverse proxy on this host names the client in X-Forwarded-For.
    let start_from = |addr: &'static str| {
        s.req(Method::POST, "/api/extension/pairings")
            .header("x-forwarded-for", addr)
            .json(&json!({ "label": "Chrome at the café" }))
    };
    let first = start_from("198.51.100.7").send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    let first = first.json();
    let mut refused = None;
    for _ in 0..50 {
        let res = start_from("198.51.100.7").send().await;
        if res.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(res);
            break;
        }
        assert_eq!(res.status, StatusCode::CREATED);
    }
    let refused = refused.expect("a flood from one address is refused");
    assert!(refused.headers.contains_key("retry-after"));
    let msg = refused.assert_error(StatusCode::TOO_MANY_REQUESTS, "too_many_requests");
    assert!(
        msg.contains("too many pairing starts") && msg.contains("try again in"),
        "{msg}"
    );
    // Another address still pairs.
    let other = start_from("203.0.113.9").send().await;
    assert_eq!(other.status, StatusCode::CREATED);

    // The approving page sees what asked: its label, when, from where; not its code.
    let id = first["approve_url"]
        .as_str()
        .unwrap()
        .rsplit("#id=")
        .next()
        .unwrap()
        .to_string();
    let anon = s
        .req(Method::GET, &format!("/api/extension/pairings/{id}"))
        .send()
        .await;
    anon.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let shown = s
        .req(Method::GET, &format!("/api/extension/pairings/{id}"))
        .bearer(&mia.token)
        .send()
        .await;
    assert_eq!(shown.status, StatusCode::OK);
    let shown = shown.json();
    assert_eq!(shown["label"], "Chrome at the café");
    assert_eq!(shown["address"], "198.51.100.7");
    assert_eq!(shown["approved"], false);
    assert!(shown["created_at"].as_i64().unwrap() > 0);
    let text = shown.to_string();
    assert!(
        !text.contains(first["user_code"].as_str().unwrap()),
        "{text}"
    );
    // Approving that pairing needs its own code: another pairing's code does not do.
    let wrong = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&mia.token)
        .json(&json!({ "user_code": other.json()["user_code"], "pairing_id": id }))
        .send()
        .await;
    wrong.assert_error(StatusCode::NOT_FOUND, "not_found");
    let ok = s
        .req(Method::POST, "/api/extension/pairings/approve")
        .bearer(&mia.token)
        .json(&json!({ "user_code": first["user_code"], "pairing_id": id }))
        .send()
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

matrix!(the_policy_package_is_signed_once_and_served_the_same);
async fn the_policy_package_is_signed_once_and_served_the_same(s: TestServer) {
    let one = s.req(Method::GET, "/extension/tandem.crx").send().await;
    assert_eq!(one.status, StatusCode::OK);
    let two = s.req(Method::GET, "/extension/tandem.crx").send().await;
    assert_eq!(two.status, StatusCode::OK);
    assert_eq!(&one.body[..4], b"Cr24");
    assert!(one.body == two.body, "the same signed bytes each time");
    assert_eq!(s.state.extension_crx.signatures(), 1, "signed once");
}
