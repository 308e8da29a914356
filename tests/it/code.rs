//! VS Code through the server: code-server in a real workspace, on an origin of its own per
//! session (`<session>.localhost`) with a ticket in the path, or under Tandem's origin where
//! there is none; drivers only.

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::*;

use crate::session_workspaces::ready_session;

/// The code-server `cargo xtask` set up, or `None` (SKIP printed) when it is not there.
pub fn code_server_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("TANDEM_TEST_CODE_SERVER").map(std::path::PathBuf::from) {
        Some(d) if d.join("out/node/entry.js").is_file() => Some(d),
        Some(d) => panic!(
            "TANDEM_TEST_CODE_SERVER={} holds no code-server (cargo xtask deps --test sets it up)",
            d.display()
        ),
        None => {
            eprintln!(
                "SKIP VS Code: TANDEM_TEST_CODE_SERVER is not set (cargo xtask test sets up code-server)"
            );
            None
        }
    }
}

/// The answer carries one policy, Tandem's, whose every fetch directive names only the page's
/// own origin (`host`, and its WebSockets), `data:` and `blob:`: no `*`, no scheme, no other host.
fn fetches_stay_on(headers: &axum::http::HeaderMap, host: &str) {
    assert!(headers.get("content-security-policy-report-only").is_none());
    let all: Vec<_> = headers.get_all("content-security-policy").iter().collect();
    assert_eq!(all.len(), 1, "{all:?}");
    let csp = all[0].to_str().unwrap();
    let allowed = [
        "'self'".to_string(),
        "data:".into(),
        "blob:".into(),
        "'none'".into(),
        "'unsafe-eval'".into(),
        "'unsafe-inline'".into(),
        format!("ws://{host}"),
        format!("wss://{host}"),
    ];
    for directive in csp.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let mut words = directive.split_whitespace();
        let name = words.next().unwrap();
        for source in words {
            assert!(
                allowed.contains(&source.to_string()),
                "{name}: {source} in {csp}"
            );
        }
    }
    for needed in ["default-src 'self'", "img-src 'self' data: blob:"] {
        assert!(csp.contains(needed), "{csp}");
    }
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(500).collect()
}

#[tokio::test]
async fn vs_code_has_an_origin_of_its_own_per_session_for_drivers_only() {
    let Some(dir) = code_server_dir() else { return };
    let Some(s) = crate::workspaces::server(move |c| c.agents.code_server_dir = Some(dir)).await
    else {
        return;
    };
    let id = ready_session(&s, "acme/code").await;
    let port = s.url.rsplit(':').next().unwrap().to_string();
    let base = format!("http://{id}.localhost:{port}");

    // The owner asks where VS Code opens: the session's own origin, a ticket in the path.
    let link: CodeLink = s
        .post(&format!("/api/sessions/{id}/code"), json!({}))
        .send()
        .await
        .parse();
    assert!(link.isolated);
    let prefix = format!("{base}/_t/");
    assert!(link.url.starts_with(&prefix), "{}", link.url);
    let ticket = link.url[prefix.len()..]
        .split('/')
        .next()
        .unwrap()
        .to_string();

    // The browser resolves `*.localhost` to loopback itself; this client is told to.
    let addr: std::net::SocketAddr = s.url.trim_start_matches("http://").parse().unwrap();
    let browser = reqwest::Client::builder()
        .resolve(&format!("{id}.localhost"), addr)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |url: String| {
        let b = browser.clone();
        async move {
            let r = b.get(url).send().await.unwrap();
            (r.status(), r.bytes().await.unwrap().to_vec())
        }
    };
    // The workbench, from code-server in the workspace, with no Tandem credential at all; its
    // pages never send their URL (the ticket) to another origin.
    let page = browser.get(&link.url).send().await.unwrap();
    assert_eq!(page.headers()["referrer-policy"], "same-origin");
    // code-server sends its own policy (`img-src 'self' https: …`, `connect-src … https:`):
    // the workspace's, which would let its page fetch anywhere from the viewer's browser.
    // Tandem's replaces it.
    fetches_stay_on(page.headers(), &format!("{id}.localhost:{port}"));
    let (status, body) = get(link.url.clone()).await;
    assert_eq!(status, StatusCode::OK, "{}", excerpt(&body));
    let html = String::from_utf8_lossy(&body);
    assert!(html.contains("workbench"), "{}", excerpt(&body));
    // An asset beside it (relative URLs keep the ticket).
    let (status, body) = get(format!("{base}/_t/{ticket}/manifest.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("code-server"));

    // The code origin is VS Code only: not Tandem's API or pages, even with a credential.
    let api = browser
        .get(format!("{base}/api/sessions"))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
    // And Tandem's origin no longer serves VS Code (a link there would run workspace-served
    // script beside Tandem's credentials).
    let same = s.get(&format!("/sessions/{id}/code/")).send().await;
    assert_eq!(same.status, StatusCode::NOT_FOUND);

    // The ticket opens this session's VS Code only, and is no login.
    let other: SessionId = "0b8c2a52-3c1f-4c36-9a59-7d9d2a1e4f10".parse().unwrap();
    let cross = reqwest::Client::builder()
        .resolve(&format!("{other}.localhost"), addr)
        .build()
        .unwrap()
        .get(format!("http://{other}.localhost:{port}/_t/{ticket}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::UNAUTHORIZED);
    let as_login = s
        .req(Method::GET, "/api/sessions")
        .bearer(&ticket)
        .send()
        .await;
    assert_eq!(as_login.status, StatusCode::UNAUTHORIZED);
    // Forged, expired and missing tickets.
    let forged = tandem_server::identity::auth::JwtKeys::from_secret(&[9u8; 32])
        .unwrap()
        .issue_code(
            tandem_protocol::UserId(uuid::Uuid::new_v4()),
            &id.to_string(),
            600,
        )
        .unwrap();
    let admin_id = s.get("/api/me").send().await.parse::<User>().id;
    let expired = s
        .state
        .jwt
        .issue_code(admin_id, &id.to_string(), -1)
        .unwrap();
    for bad in [forged, expired, "nothing".to_string()] {
        let (status, _) = get(format!("{base}/_t/{bad}/")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _) = get(format!("{base}/")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Someone who only watches gets no link, and a ticket of theirs opens nothing: the role
    // is checked on every request, not only when the link is made.
    let (vera, viewer) = crate::agent_runs::another_user(&s, "vera").await;
    let refused = s
        .req(Method::POST, &format!("/api/sessions/{id}/code"))
        .bearer(&viewer)
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let hers = s
        .state
        .jwt
        .issue_code(vera.id, &id.to_string(), 600)
        .unwrap();
    let (status, _) = get(format!("{base}/_t/{hers}/")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let anonymous = s
        .req(Method::POST, &format!("/api/sessions/{id}/code"))
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);

    // A guest with a driver link gets VS Code too, for as long as the link holds; a guest who
    // only watches gets none.
    let link = |role: &str| {
        let s = &s;
        let role = role.to_string();
        async move {
            s.post(
                &format!("/api/sessions/{id}/links"),
                json!({ "role": role, "allow_guests": true }),
            )
            .send()
            .await
            .parse::<tandem_protocol::live::ShareLink>()
        }
    };
    let driver = link("driver").await;
    let as_guest = |token: &str| {
        format!(
            "/api/sessions/{id}/code?share={}&name=Gus",
            urlencoding_free(token)
        )
    };
    let gus: CodeLink = s
        .req(Method::POST, &as_guest(driver.token.as_deref().unwrap()))
        .json(&json!({}))
        .send()
        .await
        .parse();
    let (status, _) = get(gus.url.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let watcher = link("viewer").await;
    let refused = s
        .req(Method::POST, &as_guest(watcher.token.as_deref().unwrap()))
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // Gus's VS Code holds a WebSocket to code-server (its remote connection: terminals, files).
    let gus_ticket = gus.url[prefix.len()..]
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut code_ws = {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!(
            "ws://{id}.localhost:{port}/_t/{gus_ticket}/?reconnectionToken={}&reconnection=false&skipWebSocketFrames=false",
            uuid::Uuid::new_v4()
        )
        .into_client_request()
        .unwrap();
        req.headers_mut().insert("origin", base.parse().unwrap());
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio_tungstenite::client_async(req, tcp)
            .await
            .expect("code-server's WebSocket opens through the origin")
            .0
    };
    let revoked = s
        .req(
            Method::DELETE,
            &format!("/api/sessions/{id}/links/{}", driver.jti),
        )
        .bearer(&s.admin_token)
        .send()
        .await;
    assert!(revoked.status.is_success());
    let (status, _) = get(gus.url.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a revoked link's VS Code");
    // …and the open connection ends too (it is checked every couple of seconds).
    let ended = tokio::time::timeout(std::time::Duration::from_secs(15), async {
        use futures::StreamExt;
        while let Some(Ok(_)) = code_ws.next().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the revoked guest's VS Code connection stayed open"
    );
}

/// A share token as a query value (its characters need no escaping: base64url and dots).
fn urlencoding_free(token: &str) -> &str {
    assert!(
        token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    );
    token
}

#[tokio::test]
async fn without_an_origin_of_its_own_vs_code_stays_under_tandems_where_the_operator_opts_in() {
    let Some(dir) = code_server_dir() else { return };
    // Reached by a non-loopback address and no `code_url`: no `*.localhost` to use.
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.code_server_dir = Some(dir);
        c.public_url = Some("http://10.9.9.9:8080".into());
        c.unsafe_code_on_tandem_origin = true;
    })
    .await
    else {
        return;
    };
    let id = ready_session(&s, "acme/code").await;
    let link: CodeLink = s
        .post(&format!("/api/sessions/{id}/code"), json!({}))
        .send()
        .await
        .parse();
    assert!(!link.isolated);
    assert_eq!(link.url, format!("/sessions/{id}/code/?folder=/workspace"));

    // Without the trailing slash: redirected to the base path.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let bare = no_redirects
        .get(format!("{}/sessions/{id}/code", s.url))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 308);
    assert_eq!(
        bare.headers()["location"],
        format!("/sessions/{id}/code/").as_str()
    );
    let page = s.get(&link.url).send().await;
    assert_eq!(page.status, StatusCode::OK, "{}", excerpt(&page.body));
    fetches_stay_on(&page.headers, s.url.trim_start_matches("http://"));
    assert!(String::from_utf8_lossy(&page.body).contains("workbench"));
    let (_, viewer) = crate::agent_runs::another_user(&s, "vera").await;
    let refused = s
        .req(Method::GET, &format!("/sessions/{id}/code/"))
        .bearer(&viewer)
        .send()
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let anonymous = s
        .req(Method::GET, &format!("/sessions/{id}/code/"))
        .send()
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}
