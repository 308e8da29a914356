//! Sign-in and authentication: login codes, cookies, API tokens, and 401 for everything else.

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_server::identity::auth::JwtKeys;

use crate::harness::TestServer;
use crate::matrix;

fn cookie_of(res: &crate::harness::Res) -> String {
    let set = res
        .headers
        .get("set-cookie")
        .expect("login sets a cookie")
        .to_str()
        .unwrap()
        .to_string();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap().to_string()
}

async fn login_code_signs_in_once(s: TestServer) {
    let res = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": s.first_login_code }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_eq!(res.json()["name"], "admin");
    let cookie = cookie_of(&res);
    let me = s
        .req(Method::GET, "/api/me")
        .header("cookie", &cookie)
        .send()
        .await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.json()["name"], "admin");
    // The cookie authenticates writes too.
    let repo = s
        .req(Method::POST, "/api/repos")
        .header("cookie", &cookie)
        .json(&json!({ "name": "via-cookie", "url": "https://example.invalid/x.git" }))
        .send()
        .await;
    assert_eq!(repo.status, StatusCode::CREATED);
    // …from Tandem's own pages only: another origin's request carrying the cookie (a session's
    // VS Code on a subdomain of the same site, say) is refused, reads and bearer tokens aside.
    let from = |origin: &str| {
        s.req(Method::POST, "/api/repos")
            .header("cookie", &cookie)
            .header("origin", origin)
            .json(&json!({ "name": format!("from-{}", origin.len()), "url": "https://example.invalid/y.git" }))
    };
    let foreign = from("http://0b8c2a52-3c1f-4c36-9a59-7d9d2a1e4f10.localhost:1")
        .send()
        .await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    let own = from(&s.url).send().await;
    assert_eq!(
        own.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&own.body)
    );
    let read = s
        .req(Method::GET, "/api/me")
        .header("cookie", &cookie)
        .header("origin", "http://elsewhere.example")
        .send()
        .await;
    assert_eq!(read.status, StatusCode::OK);
    // A login code works once.
    let again = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": s.first_login_code }))
        .send()
        .await;
    let msg = again.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("already used"), "{msg}");
    // Logging out clears the cookie.
    let out = s
        .req(Method::POST, "/api/auth/logout")
        .header("cookie", &cookie)
        .send()
        .await;
    assert!(
        out.headers
            .get("set-cookie")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // And ends the login on the server: a copy of the cookie no longer signs in.
    let copied = s
        .req(Method::GET, "/api/me")
        .header("cookie", &cookie)
        .send()
        .await;
    let msg = copied.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("signed out"), "{msg}");
}
matrix!(login_code_signs_in_once);

async fn api_token_signs_in_and_authenticates(s: TestServer) {
    let res = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": s.admin_token }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let cookie = cookie_of(&res);
    assert_eq!(
        s.req(Method::GET, "/api/me")
            .header("cookie", &cookie)
            .send()
            .await
            .status,
        StatusCode::OK
    );
    let me = s.get("/api/me").send().await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.json()["is_admin"], true);
    let bad = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": "hunter2" }))
        .send()
        .await;
    bad.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let unknown = s
        .req(Method::POST, "/api/auth/login")
        .json(&json!({ "credential": "tdm_nope" }))
        .send()
        .await;
    unknown.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}
matrix!(api_token_signs_in_and_authenticates);

async fn every_api_route_but_health_and_login_needs_auth(s: TestServer) {
    let health = s.req(Method::GET, "/api/health").send().await;
    assert_eq!(health.status, StatusCode::OK);
    let h: tandem_protocol::Health = health.parse();
    assert_eq!(h.status, "ok");
    assert_eq!(
        h.database,
        match s.backend {
            crate::harness::Backend::Sqlite => "sqlite",
            crate::harness::Backend::Postgres => "postgres",
        }
    );
    let sid = uuid::Uuid::new_v4();
    for (method, path) in [
        (Method::GET, "/api/me".to_string()),
        (Method::GET, "/api/repos".to_string()),
        (Method::POST, "/api/repos".to_string()),
        (Method::GET, format!("/api/repos/{sid}")),
        (Method::GET, "/api/sessions".to_string()),
        (Method::POST, "/api/sessions".to_string()),
        (Method::GET, format!("/api/sessions/{sid}")),
        (Method::GET, format!("/api/sessions/{sid}/events?after=0")),
        (Method::GET, "/api/tokens".to_string()),
        (Method::POST, "/api/tokens".to_string()),
    ] {
        let res = s.req(method.clone(), &path).json(&json!({})).send().await;
        let msg = res.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(msg.contains("sign in"), "{method} {path}: {msg}");
    }
}
matrix!(every_api_route_but_health_and_login_needs_auth);

async fn forged_expired_and_malformed_jwts_get_401(s: TestServer) {
    let admin = tandem_server::identity::auth::local_admin(&s.state.db)
        .await
        .unwrap();
    let good = s.state.jwt.issue(admin.id, 60).unwrap();
    assert_eq!(
        s.req(Method::GET, "/api/me")
            .bearer(&good)
            .send()
            .await
            .status,
        StatusCode::OK
    );

    let forged = JwtKeys::from_secret(&[42u8; 32])
        .unwrap()
        .issue(admin.id, 60)
        .unwrap();
    let expired = s.state.jwt.issue(admin.id, -120).unwrap();
    // Same header and signature, payload swapped for another user's claims.
    let mut parts: Vec<&str> = good.split('.').collect();
    let other = s
        .state
        .jwt
        .issue(tandem_protocol::UserId(uuid::Uuid::new_v4()), 60)
        .unwrap();
    let other_payload = other.split('.').nth(1).unwrap().to_string();
    parts[1] = &other_payload;
    let tampered = parts.join(".");
    let alg_none = format!(
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
        good.split('.').nth(1).unwrap()
    );

    for (what, token, needle) in [
        ("forged", forged.as_str(), "signature"),
        ("expired", expired.as_str(), "expired"),
        ("tampered", tampered.as_str(), "signature"),
        ("alg none", alg_none.as_str(), "not valid"),
        ("garbage", "not-a-jwt", "not valid"),
    ] {
        for via_cookie in [false, true] {
            let req = s.req(Method::GET, "/api/me");
            let req = if via_cookie {
                req.header("cookie", &format!("tandem_session={token}"))
            } else {
                req.bearer(token)
            };
            let msg = req
                .send()
                .await
                .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
            assert!(msg.contains(needle), "{what} (cookie: {via_cookie}): {msg}");
        }
    }
    let basic = s
        .req(Method::GET, "/api/me")
        .header("authorization", "Basic YWRtaW46eA==")
        .send()
        .await;
    basic.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}
matrix!(forged_expired_and_malformed_jwts_get_401);

async fn api_tokens_are_hashed_listed_expire_and_revoke(s: TestServer) {
    let created = s
        .post("/api/tokens", json!({ "name": "laptop" }))
        .send()
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let created: tandem_protocol::CreatedToken = created.parse();
    assert!(created.token.starts_with("tdm_"));
    assert_eq!(
        s.req(Method::GET, "/api/me")
            .bearer(&created.token)
            .send()
            .await
            .status,
        StatusCode::OK
    );

    // Stored hashed: the secret appears nowhere in the database.
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM api_tokens WHERE token_hash = $1")
        .bind(&created.token)
        .fetch_one(s.state.db.raw_pool())
        .await
        .unwrap();
    assert_eq!(n, 0, "a token is stored as its hash only");

    let list: Vec<tandem_protocol::TokenInfo> = s.get("/api/tokens").send().await.parse();
    assert!(
        list.iter()
            .any(|t| t.id == created.info.id && t.name == "laptop")
    );

    let del = s
        .req(Method::DELETE, &format!("/api/tokens/{}", created.info.id))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(del.status, StatusCode::NO_CONTENT);
    let msg = s
        .req(Method::GET, "/api/me")
        .bearer(&created.token)
        .send()
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("revoked"), "{msg}");

    // An expired token: make one that lapses at once by moving its expiry into the past.
    let short: tandem_protocol::CreatedToken = s
        .post(
            "/api/tokens",
            json!({ "name": "short", "expires_in_secs": 3600 }),
        )
        .send()
        .await
        .parse();
    sqlx::query("UPDATE api_tokens SET expires_at = 1 WHERE id = $1")
        .bind(short.info.id.to_string())
        .execute(s.state.db.raw_pool())
        .await
        .unwrap();
    let msg = s
        .req(Method::GET, "/api/me")
        .bearer(&short.token)
        .send()
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(msg.contains("expired"), "{msg}");

    let bad = s
        .post("/api/tokens", json!({ "name": "x", "expires_in_secs": -1 }))
        .send()
        .await;
    bad.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
}
matrix!(api_tokens_are_hashed_listed_expire_and_revoke);
