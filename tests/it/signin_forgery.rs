//! Sign-in and link flows attacked the way a page on Tandem's own site could (a workspace's
//! VS Code origin, a sibling subdomain: it can set cookies for the parent domain and navigate a
//! signed-in person anywhere): a state cookie the attacker sets, an attacker's own flow planted
//! in the victim's browser, a signed-out (revoked) login, an existing link, a replayed state —
//! for GitHub, OpenID Connect and the Slack link; `__Host-` cookies on an https public URL; and
//! a `code_url` on Tandem's own site, refused unless the admin insists, then warned about; and
//! what a second review found (`hardening`, `flows_store`).

use axum::http::{Method, StatusCode};
use fake_github::{APP_PRIVATE_KEY_PEM, APP_PUBLIC_KEY_PEM, APP_SLUG, FakeGithub};
use serde_json::json;
use tandem_server::config::code_origin::CodeOrigin;

use crate::harness::{Backend, TestServer, Transport};

const APP_ID: u64 = 4343;
const CLIENT_ID: &str = "Iv1.forgerytest";
const CLIENT_SECRET: &str = "oauth-secret-forgery-7e1d";

struct Gh {
    s: TestServer,
    gh: FakeGithub,
    _root: tempfile::TempDir,
}

/// A server with "Sign in with GitHub" against the fake; `alice-gh` may sign up, `mallory` (the
/// attacker's GitHub account) and `carol` exist but may not.
async fn github_server(backend: Backend, public_url: Option<&str>) -> Option<Gh> {
    let root = tempfile::tempdir().unwrap();
    let gh = FakeGithub::start(root.path(), APP_ID, APP_PUBLIC_KEY_PEM).await;
    gh.add_user("alice-gh", 1001, "Alice", "alice@example.com");
    gh.add_user("mallory", 666, "Mallory", "mallory@example.com");
    gh.add_user("carol", 777, "Carol", "carol@example.com");
    gh.set_oauth_client(CLIENT_ID, CLIENT_SECRET);
    let (api, public_url) = (gh.url(), public_url.map(str::to_string));
    let s = TestServer::start_with(backend, Transport::Socket, move |c| {
        c.public_url = public_url;
        c.github = Some(tandem_server::config::GithubConfig {
            app_id: APP_ID,
            app_slug: APP_SLUG.into(),
            client_id: Some(CLIENT_ID.into()),
            api_url: api.clone(),
            web_url: api,
            private_key_secret: "github_private_key".into(),
            webhook_secret: "github_webhook_secret".into(),
            client_secret: "github_client_secret".into(),
            allowed_logins: vec!["alice-gh".into()],
            open_signup: false,
            issue_label: None,
        });
    })
    .await?;
    for (name, value) in [
        ("github_private_key", APP_PRIVATE_KEY_PEM),
        ("github_webhook_secret", "whsec-forgery"),
        ("github_client_secret", CLIENT_SECRET),
    ] {
        let res = s
            .req(Method::PUT, &format!("/api/secrets/{name}"))
            .bearer(&s.admin_token)
            .json(&json!({ "value": value }))
            .send()
            .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT);
    }
    Some(Gh { s, gh, _root: root })
}

/// A browser that shows each redirect instead of following it.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Every `Set-Cookie` line of a response.
fn set_cookies(headers: &reqwest::header::HeaderMap) -> Vec<String> {
    headers
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// The value a response sets cookie `name` to (not a removal).
fn cookie_set(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    set_cookies(headers).into_iter().find_map(|c| {
        c.strip_prefix(&format!("{name}="))
            .map(|rest| rest.split(';').next().unwrap().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// The admin signs in with the first login code, as a browser: the session JWT.
async fn sign_in_admin(s: &TestServer) -> String {
    let res = browser()
        .post(format!("{}/api/auth/login", s.url))
        .json(&json!({ "credential": s.first_login_code }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    cookie_set(res.headers(), "tandem_session").expect("signed in")
}

/// Who a browser's session cookie `jwt` is: their name, or None when it is refused.
async fn who(s: &TestServer, jwt: &str) -> Option<String> {
    let res = browser()
        .get(format!("{}/api/me", s.url))
        .header("cookie", format!("tandem_session={jwt}"))
        .send()
        .await
        .unwrap();
    if res.status() != 200 {
        return None;
    }
    let me: serde_json::Value = res.json().await.unwrap();
    Some(me["name"].as_str().unwrap().to_string())
}

/// The GitHub login linked to the person of `jwt`.
async fn github_of(s: &TestServer, jwt: &str) -> Option<String> {
    let res = browser()
        .get(format!("{}/api/me/github", s.url))
        .header("cookie", format!("tandem_session={jwt}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: serde_json::Value = res.json().await.unwrap();
    v["login"].as_str().map(str::to_string)
}

/// A code the fake GitHub hands `login` for `state` (what an attacker gets by authorizing with
/// their own GitHub account).
async fn code_for(w: &Gh, login: &str, state: &str) -> String {
    w.gh.set_browser_user(login);
    let url = reqwest::Url::parse_with_params(
        &format!("{}/login/oauth/authorize", w.gh.url()),
        &[
            ("client_id", CLIENT_ID),
            (
                "redirect_uri",
                &format!("{}/api/auth/github/callback", w.s.url),
            ),
            ("state", state),
        ],
    )
    .unwrap();
    let res = browser().get(url).send().await.unwrap();
    assert_eq!(res.status(), 302);
    let back = reqwest::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
    back.query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("a code")
}

/// Starts "Sign in with GitHub" in a browser holding `cookies`: the state sent to GitHub and the
/// browser's binding cookie (`tandem_flow=…`).
async fn start(w: &Gh, cookies: &str) -> (String, String) {
    let res = browser()
        .get(format!("{}/api/auth/github", w.s.url))
        .header("cookie", cookies)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 302);
    let to = reqwest::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
    let state = to
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("a state");
    let binding = cookie_set(res.headers(), "tandem_flow").expect("a binding cookie");
    (state, format!("tandem_flow={binding}"))
}

/// GitHub's redirect back, arriving in a browser holding `cookies`.
async fn callback(w: &Gh, code: &str, state: &str, cookies: &str) -> reqwest::Response {
    let url = reqwest::Url::parse_with_params(
        &format!("{}/api/auth/github/callback", w.s.url),
        &[("code", code), ("state", state)],
    )
    .unwrap();
    browser()
        .get(url)
        .header("cookie", cookies)
        .send()
        .await
        .unwrap()
}

/// The victim's cookie, a state cookie the attacker set and a made-up binding, plus a code for
/// the attacker's GitHub account: nothing is linked, nobody signed in. The attacker's own flow
/// planted in the victim's browser links nothing either: one started signed out only signs in
/// (and `mallory` may not), one started signed in as the attacker is refused.
async fn a_forged_github_callback_links_nothing(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let victim = sign_in_admin(&w.s).await;
    let code = code_for(&w, "mallory", "forged-state").await;
    let res = callback(
        &w,
        &code,
        "forged-state",
        &format!(
            "tandem_session={victim}; tandem_github_state=forged-state; tandem_flow=tfb_{}",
            "x".repeat(40)
        ),
    )
    .await;
    assert_eq!(res.status(), 401, "a state the client made up");
    assert_eq!(cookie_set(res.headers(), "tandem_session"), None);
    assert_eq!(github_of(&w.s, &victim).await, None, "nothing linked");

    // The attacker's own flow, started signed out, in the victim's browser: a sign-in only.
    let (state, binding) = start(&w, "").await;
    let code = code_for(&w, "mallory", &state).await;
    let res = callback(
        &w,
        &code,
        &state,
        &format!("tandem_session={victim}; {binding}"),
    )
    .await;
    assert_eq!(res.status(), 403, "mallory has no account of her own");
    assert_eq!(cookie_set(res.headers(), "tandem_session"), None);
    assert_eq!(github_of(&w.s, &victim).await, None);

    // Started signed in as the attacker's own Tandem account: refused in the victim's browser.
    let attacker = crate::people::invite(&w.s, "mallet", false).await;
    let (state, binding) = start(&w, &attacker.cookie).await;
    let code = code_for(&w, "mallory", &state).await;
    let res = callback(
        &w,
        &code,
        &state,
        &format!("tandem_session={victim}; {binding}"),
    )
    .await;
    assert_eq!(res.status(), 403);
    let body = res.text().await.unwrap();
    assert!(body.contains("another sign-in"), "{body}");
    assert_eq!(github_of(&w.s, &victim).await, None);
    assert_eq!(who(&w.s, &victim).await.as_deref(), Some("admin"));
}

/// A signed-out login (its JWT on the revocation list) neither starts a link nor finishes one.
async fn a_signed_out_login_links_nothing(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let victim = sign_in_admin(&w.s).await;
    let out = browser()
        .post(format!("{}/api/auth/logout", w.s.url))
        .header("cookie", format!("tandem_session={victim}"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert_eq!(who(&w.s, &victim).await, None, "signed out");
    let (state, binding) = start(&w, &format!("tandem_session={victim}")).await;
    let code = code_for(&w, "mallory", &state).await;
    let res = callback(
        &w,
        &code,
        &state,
        &format!("tandem_session={victim}; {binding}"),
    )
    .await;
    assert_eq!(res.status(), 403, "a signed-out start is a sign-in only");
    assert_eq!(cookie_set(res.headers(), "tandem_session"), None);

    // A link started signed in whose login is signed out before GitHub answers.
    let fresh = sign_in_admin_again(&w.s).await;
    let (state, binding) = start(&w, &format!("tandem_session={fresh}")).await;
    browser()
        .post(format!("{}/api/auth/logout", w.s.url))
        .header("cookie", format!("tandem_session={fresh}"))
        .send()
        .await
        .unwrap();
    let code = code_for(&w, "mallory", &state).await;
    let res = callback(
        &w,
        &code,
        &state,
        &format!("tandem_session={fresh}; {binding}"),
    )
    .await;
    assert_eq!(res.status(), 401);
    assert_eq!(cookie_set(res.headers(), "tandem_session"), None);
    let admin = tandem_server::identity::auth::local_admin(&w.s.state.db)
        .await
        .unwrap();
    assert!(
        tandem_server::db::github::account_of(&w.s.state.db, admin.id)
            .await
            .unwrap()
            .is_none(),
        "nothing was linked to the signed-out person"
    );
}

/// A second browser login for the admin (a login code minted for them).
async fn sign_in_admin_again(s: &TestServer) -> String {
    let admin = tandem_server::identity::auth::local_admin(&s.state.db)
        .await
        .unwrap();
    let code = tandem_server::identity::auth::create_login_code(&s.state.db, admin.id)
        .await
        .unwrap();
    let res = browser()
        .post(format!("{}/api/auth/login", s.url))
        .json(&json!({ "credential": code }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    cookie_set(res.headers(), "tandem_session").unwrap()
}

/// An existing link is never replaced: a GitHub account linked to someone else is refused, and
/// so is a second GitHub account for a linked person, until they unlink (audited).
async fn an_existing_github_link_is_never_replaced(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    // Alice signs up with GitHub.
    let (state, binding) = start(&w, "").await;
    let code = code_for(&w, "alice-gh", &state).await;
    let res = callback(&w, &code, &state, &binding).await;
    assert_eq!(res.status(), 302);
    let alice = cookie_set(res.headers(), "tandem_session").unwrap();
    assert_eq!(github_of(&w.s, &alice).await.as_deref(), Some("alice-gh"));

    // The admin may not take alice's GitHub account.
    let admin = sign_in_admin(&w.s).await;
    let me = format!("tandem_session={admin}");
    let (state, binding) = start(&w, &me).await;
    let code = code_for(&w, "alice-gh", &state).await;
    let res = callback(&w, &code, &state, &format!("{me}; {binding}")).await;
    assert_eq!(res.status(), 409);
    let body = res.text().await.unwrap();
    assert!(body.contains("unlink it first"), "{body}");
    assert_eq!(github_of(&w.s, &admin).await, None);
    assert_eq!(github_of(&w.s, &alice).await.as_deref(), Some("alice-gh"));

    // The admin links mallory: GitHub's redirect arrives without the (SameSite=Strict) sign-in
    // cookie, so the page loads itself once more, which carries it.
    let (state, binding) = start(&w, &me).await;
    let code = code_for(&w, "mallory", &state).await;
    let first = callback(&w, &code, &state, &binding).await;
    assert_eq!(first.status(), 200);
    let page = first.text().await.unwrap();
    assert!(page.contains("again=1"), "{page}");
    let again = browser()
        .get(
            reqwest::Url::parse_with_params(
                &format!("{}/api/auth/github/callback", w.s.url),
                &[("code", code.as_str()), ("state", &state), ("again", "1")],
            )
            .unwrap(),
        )
        .header("cookie", format!("{me}; {binding}"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 302, "{}", again.text().await.unwrap());
    assert_eq!(github_of(&w.s, &admin).await.as_deref(), Some("mallory"));

    // A second GitHub account does not replace the first.
    let (state, binding) = start(&w, &me).await;
    let code = code_for(&w, "carol", &state).await;
    let res = callback(&w, &code, &state, &format!("{me}; {binding}")).await;
    assert_eq!(res.status(), 409);
    let body = res.text().await.unwrap();
    assert!(
        body.contains("linked to GitHub user mallory already"),
        "{body}"
    );
    assert_eq!(github_of(&w.s, &admin).await.as_deref(), Some("mallory"));

    // Unlinking is the person's own explicit act, audited; then carol links.
    let unlink = |cookie: String| {
        browser()
            .delete(format!("{}/api/me/github", w.s.url))
            .header("cookie", cookie)
            .send()
    };
    assert_eq!(unlink(me.clone()).await.unwrap().status(), 204);
    assert_eq!(unlink(me.clone()).await.unwrap().status(), 404);
    assert_eq!(github_of(&w.s, &admin).await, None);
    let audit = w.s.get("/api/audit?limit=500").send().await;
    let audit = String::from_utf8_lossy(&audit.body).to_string();
    assert!(audit.contains("github.unlink"), "{audit}");
    assert!(!audit.contains(CLIENT_SECRET));
    let (state, binding) = start(&w, &me).await;
    let code = code_for(&w, "carol", &state).await;
    let res = callback(&w, &code, &state, &format!("{me}; {binding}")).await;
    assert_eq!(res.status(), 302);
    assert_eq!(github_of(&w.s, &admin).await.as_deref(), Some("carol"));
}

/// A flow is taken once: two callbacks with the same state (and two codes) racing, one wins.
async fn a_github_flow_is_taken_once(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let (state, binding) = start(&w, "").await;
    let first = code_for(&w, "alice-gh", &state).await;
    let second = code_for(&w, "alice-gh", &state).await;
    let (a, b) = tokio::join!(
        callback(&w, &first, &state, &binding),
        callback(&w, &second, &state, &binding)
    );
    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [302, 401], "one callback takes the flow");
}

/// On an https public URL every cookie is `__Host-`, `Secure`, `Path=/`, without `Domain`; an
/// unprefixed session cookie (which another origin of the site could set) is not a sign-in.
async fn https_cookies_are_host_only(backend: Backend) {
    let Some(w) = github_server(backend, Some("https://tandem.example.test")).await else {
        return;
    };
    let res = browser()
        .post(format!("{}/api/auth/login", w.s.url))
        .json(&json!({ "credential": w.s.first_login_code }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let host_only = |line: &str, name: &str| {
        assert!(line.starts_with(&format!("__Host-{name}=")), "{line}");
        let attrs: Vec<String> = line
            .split(';')
            .skip(1)
            .map(|a| a.trim().to_ascii_lowercase())
            .collect();
        assert!(attrs.contains(&"secure".to_string()), "{line}");
        assert!(attrs.contains(&"path=/".to_string()), "{line}");
        assert!(attrs.contains(&"httponly".to_string()), "{line}");
        assert!(!attrs.iter().any(|a| a.starts_with("domain")), "{line}");
    };
    let lines = set_cookies(res.headers());
    assert_eq!(lines.len(), 1, "{lines:?}");
    host_only(&lines[0], "tandem_session");
    let jwt = cookie_set(res.headers(), "__Host-tandem_session").unwrap();

    let started = browser()
        .get(format!("{}/api/auth/github", w.s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 302);
    let lines = set_cookies(started.headers());
    assert_eq!(lines.len(), 1, "{lines:?}");
    host_only(&lines[0], "tandem_flow");

    let me = |cookie: String| {
        browser()
            .get(format!("{}/api/me", w.s.url))
            .header("cookie", cookie)
            .send()
    };
    assert_eq!(
        me(format!("tandem_session={jwt}")).await.unwrap().status(),
        401,
        "an unprefixed cookie is not Tandem's on https"
    );
    assert_eq!(
        me(format!("__Host-tandem_session={jwt}"))
            .await
            .unwrap()
            .status(),
        200
    );
    let out = browser()
        .post(format!("{}/api/auth/logout", w.s.url))
        .header("cookie", format!("__Host-tandem_session={jwt}"))
        .send()
        .await
        .unwrap();
    host_only(&set_cookies(out.headers())[0], "tandem_session");
}

/// A `code_url` on Tandem's own site is refused at start, unless the admin insists; then
/// `/api/health` warns (the dashboard's banner shows it). Another site's is fine.
async fn a_same_site_code_url_is_refused_or_warned(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Socket).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = (*s.state.config).clone();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.path().join("data");
    config.public_url = Some("https://tandem.example.com".into());
    config.code_url = Some(CodeOrigin::parse("https://{session}.code.example.com").unwrap());
    let refused = tandem_server::serve::Server::bind(config.clone())
        .await
        .err()
        .expect("a same-site code_url is refused")
        .to_string();
    assert!(
        refused.contains("separate registrable domain")
            && refused.contains("unsafe_same_site_code_url"),
        "{refused}"
    );

    let health = async |config: tandem_server::config::Config| {
        let server = tandem_server::serve::Server::bind(config)
            .await
            .expect("starts");
        let url = format!("http://{}", server.state().config.listen);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        let h: serde_json::Value = browser()
            .get(format!("{url}/api/health"))
            .bearer_auth(&s.admin_token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        drop(tx);
        h
    };
    config.unsafe_same_site_code_url = true;
    let h = health(config.clone()).await;
    assert_eq!(h["warnings"][0]["kind"], "code_origin", "{h}");
    let said = h["warnings"][0].to_string();
    assert!(
        said.contains("same site (example.com)") && said.contains("separate registrable domain"),
        "{said}"
    );
    assert!(
        !h["workspaces"]["problems"].to_string().contains("code_url"),
        "a warning, not a problem that stops sessions: {h}"
    );

    config.unsafe_same_site_code_url = false;
    config.code_url =
        Some(CodeOrigin::parse("https://{session}.tandem-usercontent.example").unwrap());
    let h = health(config).await;
    assert_eq!(h["warnings"], json!([]), "{h}");
}

/// Invites and extension pairings (flows started elsewhere: by an admin, by the extension) are
/// taken once, by one conditional statement, and a signed-out login approves nothing. Both are
/// JSON POSTs, which no form of another origin can send.
async fn invites_and_pairings_are_taken_once(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Socket).await else {
        return;
    };
    let made = s
        .post(
            "/api/people/invites",
            json!({ "name": "ivy", "is_admin": false }),
        )
        .send()
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let url = made.json()["url"].as_str().unwrap().to_string();
    let code = url.split_once("#code=").unwrap().1.to_string();
    let accept = || {
        browser()
            .post(format!("{}/api/auth/invite", s.url))
            .json(&json!({ "code": code }))
            .send()
    };
    let (a, b) = tokio::join!(accept(), accept());
    let mut statuses = [a.unwrap().status().as_u16(), b.unwrap().status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 401], "one person per invite");

    let pairing: serde_json::Value = browser()
        .post(format!("{}/api/extension/pairings", s.url))
        .json(&json!({ "label": "Chrome" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let user_code = pairing["user_code"].as_str().unwrap().to_string();
    let approve = |jwt: String| {
        browser()
            .post(format!("{}/api/extension/pairings/approve", s.url))
            .header("cookie", format!("tandem_session={jwt}"))
            .json(&json!({ "user_code": user_code }))
            .send()
    };
    let old = sign_in_admin(&s).await;
    browser()
        .post(format!("{}/api/auth/logout", s.url))
        .header("cookie", format!("tandem_session={old}"))
        .send()
        .await
        .unwrap();
    assert_eq!(approve(old).await.unwrap().status(), 401, "signed out");
    let jwt = sign_in_admin_again(&s).await;
    let (a, b) = tokio::join!(approve(jwt.clone()), approve(jwt));
    let mut statuses = [a.unwrap().status().as_u16(), b.unwrap().status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 404], "approved once");
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            use crate::harness::Backend;
            #[tokio::test]
            async fn sqlite() {
                super::$name(Backend::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(Backend::Postgres).await
            }
        })*
    };
}

both!(
    a_forged_github_callback_links_nothing,
    a_signed_out_login_links_nothing,
    an_existing_github_link_is_never_replaced,
    a_github_flow_is_taken_once,
    https_cookies_are_host_only,
    a_same_site_code_url_is_refused_or_warned,
    a_forged_openid_callback_signs_nobody_in_as_the_victim,
    a_forged_slack_link_links_nothing,
    invites_and_pairings_are_taken_once,
    a_flood_of_github_starts_is_refused_per_address,
    a_cookie_sent_twice_is_refused,
    flows_opened_from_a_same_site_page_are_refused,
    https_flows_need_the_host_cookie,
    the_slack_link_survives_the_cross_site_click,
    a_person_keeps_few_slack_link_flows,
    vs_code_origins_refused_or_warned,
    flows_in_flight_are_bounded,
    a_flow_is_taken_once_under_racing_takes,
    migration_0025_drops_pre_namespacing_openid_data,
);

mod flows_store;
mod hardening;
mod oidc_and_slack;
use flows_store::{
    a_flow_is_taken_once_under_racing_takes, flows_in_flight_are_bounded,
    migration_0025_drops_pre_namespacing_openid_data,
};
use hardening::{
    a_cookie_sent_twice_is_refused, a_flood_of_github_starts_is_refused_per_address,
    a_person_keeps_few_slack_link_flows, flows_opened_from_a_same_site_page_are_refused,
    https_flows_need_the_host_cookie, the_slack_link_survives_the_cross_site_click,
    vs_code_origins_refused_or_warned,
};
use oidc_and_slack::{
    a_forged_openid_callback_signs_nobody_in_as_the_victim, a_forged_slack_link_links_nothing,
};
