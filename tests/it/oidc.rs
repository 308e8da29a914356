//! Sign-in with OpenID Connect against a real provider (npm's `oidc-provider`): the whole code
//! flow, then each way an answer can be wrong — another issuer, a bad signature, an expired ID
//! token, a replayed `state`, a wrong `nonce`, a disallowed email domain, no state cookie — is
//! refused with a page that says why, and creates nobody; a rotated signing key is fetched.

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_server::config::oidc::OidcConfig;

use crate::harness::{Backend, TestServer, Transport};
use crate::oidc_provider::{CLIENT_ID, CLIENT_SECRET, Jar, Tamper, TestIdp, through_provider};

const START: &str = "/api/auth/oidc/acme";

async fn server(backend: Backend) -> Option<(TestServer, TestIdp)> {
    let mut idp = TestIdp::bind().await?;
    let issuer = idp.issuer.clone();
    let s = TestServer::start_with(backend, Transport::Socket, move |c| {
        c.oidc = vec![OidcConfig {
            id: "acme".into(),
            label: "Acme SSO".into(),
            issuer,
            client_id: CLIENT_ID.into(),
            client_secret: None,
            scopes: vec!["email".into(), "profile".into(), "groups".into()],
            allowed_domains: vec!["acme.test".into()],
            allowed_groups: vec![],
            open_signup: false,
            admin_groups: vec!["tandem-admins".into()],
            // Trusted: its verified emails are the people's (see signin_forgery for one not).
            trust_email_verified: true,
            groups_claim: "groups".into(),
        }]
    })
    .await?;
    let res = s
        .req(Method::PUT, "/api/secrets/oidc_acme_client_secret")
        .bearer(&s.admin_token)
        .json(&json!({ "value": CLIENT_SECRET }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::NO_CONTENT);
    idp.launch(&format!("{}/api/auth/oidc/acme/callback", s.url))
        .await;
    Some((s, idp))
}

/// Follows the provider back to Tandem's callback: its status, page and cookies.
async fn callback(url: &str, jar: &Jar) -> (u16, String, Vec<String>, Option<String>) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    let res = http
        .get(url)
        .header(reqwest::header::COOKIE, jar.header())
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let cookies = res
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let location = res
        .headers()
        .get(reqwest::header::LOCATION)
        .map(|l| l.to_str().unwrap().to_string());
    (status, res.text().await.unwrap(), cookies, location)
}

async fn people(s: &TestServer) -> Vec<serde_json::Value> {
    s.get("/api/people")
        .send()
        .await
        .json()
        .as_array()
        .unwrap()
        .clone()
}

async fn sign_in_flow(backend: Backend) {
    let Some((s, mut idp)) = server(backend).await else {
        return;
    };
    // The sign-in page offers the provider.
    let providers = s
        .req(Method::GET, "/api/auth/providers")
        .send()
        .await
        .json();
    assert_eq!(providers["oidc"][0]["label"], "Acme SSO");
    assert_eq!(providers["oidc"][0]["url"], START);

    // The whole flow: a person is created just in time, with the provider's email and groups.
    let (url, jar) = through_provider(&s.url, START, "alice").await;
    assert!(url.contains("code=") && url.contains("state="), "{url}");
    let (status, page, cookies, location) = callback(&url, &jar).await;
    assert_eq!(status, 303, "{page}");
    assert_eq!(location.as_deref(), Some("/"));
    let session = cookies
        .iter()
        .find(|c| c.starts_with("tandem_session=") && !c.starts_with("tandem_session=;"))
        .expect("signed in")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let me = s
        .req(Method::GET, "/api/me")
        .header("cookie", &session)
        .send()
        .await;
    assert_eq!(me.status, StatusCode::OK);
    let me = me.json();
    assert_eq!(me["name"], "Alice Example");
    assert_eq!(me["email"], "alice@acme.test");
    assert_eq!(
        me["groups"],
        json!(["acme:engineering"]),
        "the provider's own groups"
    );
    assert_eq!(me["is_admin"], false);
    let count = people(&s).await.len();

    // The same answer again (a replayed state) is refused.
    let (status, page, _, _) = callback(&url, &jar).await;
    assert_eq!(status, 401);
    assert!(page.contains("already used or has expired"), "{page}");

    // Each wrong answer is refused with its reason, and nobody is created.
    for (tamper, login, why) in [
        (Tamper::Issuer, "ivan", "issued by someone else"),
        (Tamper::Signature, "sybil", "signature does not verify"),
        (Tamper::Expired, "ed", "it has expired"),
        (Tamper::Nonce, "nora", "nonce mismatch"),
    ] {
        idp.tamper(tamper);
        let (url, jar) = through_provider(&s.url, START, login).await;
        let (status, page, _, _) = callback(&url, &jar).await;
        assert_eq!(status, 401, "{tamper:?}: {page}");
        assert!(page.contains(why), "{tamper:?}: {page}");
        assert!(page.contains("Sign-in refused"), "a page, not JSON: {page}");
        assert_eq!(people(&s).await.len(), count, "{tamper:?} created someone");
    }
    idp.tamper(Tamper::None);

    // A domain that may not sign in.
    let (url, jar) = through_provider(&s.url, START, "mallory").await;
    let (status, page, _, _) = callback(&url, &jar).await;
    assert_eq!(status, 403, "{page}");
    assert!(
        page.contains("mallory@evil.test may not sign in here"),
        "{page}"
    );
    assert_eq!(people(&s).await.len(), count);

    // An answer that reaches another browser (no state cookie) is refused.
    let (url, _) = through_provider(&s.url, START, "victor").await;
    let (status, page, _, _) = callback(&url, &Jar::default()).await;
    assert_eq!(status, 401);
    assert!(page.contains("not started from this browser"), "{page}");
    assert_eq!(people(&s).await.len(), count);

    // The provider rotates its signing key: the new one is fetched and the sign-in works;
    // alice signing in again is the same person.
    idp.rotate("test-key-2").await;
    let (url, jar) = through_provider(&s.url, START, "alice").await;
    let (status, page, _, _) = callback(&url, &jar).await;
    assert_eq!(status, 303, "after the key rotation: {page}");
    assert_eq!(
        people(&s).await.len(),
        count,
        "the same person, not a new one"
    );

    // Every refusal is in the audit log with its reason.
    let audit = s.get("/api/audit?limit=500").send().await.json();
    let refused: Vec<String> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "auth.refused")
        .map(|e| e["detail"]["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(refused.len() >= 7, "{refused:?}");
    assert!(
        refused.iter().any(|r| r.contains("nonce mismatch")),
        "{refused:?}"
    );
    let logins = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "auth.login" && e["detail"]["via"] == "oidc:acme")
        .count();
    assert_eq!(logins, 2);
}

#[tokio::test]
async fn oidc_sign_in_sqlite() {
    sign_in_flow(Backend::Sqlite).await;
}

#[tokio::test]
async fn oidc_sign_in_postgres() {
    sign_in_flow(Backend::Postgres).await;
}
