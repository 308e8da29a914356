//! The same attacks on the OpenID Connect sign-in (a real provider) and the Slack one-time link
//! (a stand-in for Slack); OpenID's email trust and provider-namespaced groups; nobody acts as
//! an admin from Slack.

use axum::http::{Method, StatusCode};
use fake_slack::{BOT_USER_ID, FakeSlack, TEAM_ID};
use serde_json::json;
use tandem_server::config::oidc::OidcConfig;

use super::{browser, cookie_set, sign_in_admin, who};
use crate::harness::{Backend, TestServer, Transport, make_repo};
use crate::oidc_provider::{CLIENT_ID, CLIENT_SECRET, TestIdp, through_provider};

const START: &str = "/api/auth/oidc/acme";

async fn oidc_server(backend: Backend) -> Option<(TestServer, TestIdp)> {
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
            admin_groups: vec![],
            // Not trusted: its `email_verified` links nobody to an existing person.
            trust_email_verified: false,
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

/// The provider's answer arriving in a browser holding `cookies`.
async fn arrive(url: &str, cookies: &str) -> reqwest::Response {
    browser()
        .get(url)
        .header("cookie", cookies)
        .send()
        .await
        .unwrap()
}

async fn people(s: &TestServer) -> usize {
    s.get("/api/people")
        .send()
        .await
        .json()
        .as_array()
        .unwrap()
        .len()
}

/// The victim's cookie and a state cookie the attacker set, with the answer to the attacker's
/// own sign-in: refused. With the attacker's real flow planted in the victim's browser it only
/// signs that browser in as the attacker, never as the victim. An unverified-by-the-admin
/// provider's email links nobody; groups are the provider's own (`acme:engineering`).
pub(super) async fn a_forged_openid_callback_signs_nobody_in_as_the_victim(backend: Backend) {
    let Some((s, _idp)) = oidc_server(backend).await else {
        return;
    };
    let victim = sign_in_admin(&s).await;
    let count = people(&s).await;
    let (url, jar) = through_provider(&s.url, START, "eve").await;
    let state = reqwest::Url::parse(&url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    let res = arrive(
        &url,
        &format!("tandem_session={victim}; tandem_oidc_state={state}"),
    )
    .await;
    assert_eq!(res.status(), 401);
    assert_eq!(cookie_set(res.headers(), "tandem_session"), None);
    assert!(res.text().await.unwrap().contains("Sign-in refused"));
    assert_eq!(people(&s).await, count, "nobody created");

    let res = arrive(&url, &format!("tandem_session={victim}; {}", jar.header())).await;
    assert_eq!(res.status(), 303);
    let theirs = cookie_set(res.headers(), "tandem_session").unwrap();
    assert_eq!(who(&s, &theirs).await.as_deref(), Some("eve"));
    assert_eq!(who(&s, &victim).await.as_deref(), Some("admin"));
    // The same answer again: taken once.
    let res = arrive(&url, &jar.header()).await;
    assert_eq!(res.status(), 401);

    // Victor was invited with victor@acme.test; the provider says it verified that email, but
    // the admin does not trust it to: a new person, without that email.
    let victor = crate::people::invite(&s, "victor", false).await;
    let (url, jar) = through_provider(&s.url, START, "victor").await;
    let res = arrive(&url, &jar.header()).await;
    assert_eq!(res.status(), 303);
    let jwt = cookie_set(res.headers(), "tandem_session").unwrap();
    let me = s
        .req(Method::GET, "/api/me")
        .header("cookie", &format!("tandem_session={jwt}"))
        .send()
        .await
        .json();
    assert_ne!(
        me["id"].as_str(),
        Some(victor.id.as_str()),
        "not linked by email"
    );
    assert!(me["email"].is_null(), "{me}");

    // Alice's groups are the provider's: a grant names them `acme:…`, a bare name is refused.
    let (url, jar) = through_provider(&s.url, START, "alice").await;
    let res = arrive(&url, &jar.header()).await;
    let alice = cookie_set(res.headers(), "tandem_session").unwrap();
    let me = s
        .req(Method::GET, "/api/me")
        .header("cookie", &format!("tandem_session={alice}"))
        .send()
        .await
        .json();
    assert_eq!(me["groups"], json!(["acme:engineering"]));
    let repo = make_repo(&s, "acme/payments").await;
    let grant = |who: &str| json!({ "access": "members", "grants": [{ "kind": "group", "who": who, "role": "read" }] });
    let bare = s
        .req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&grant("engineering"))
        .send()
        .await;
    let msg = bare.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert!(msg.contains("<provider>:<group>"), "{msg}");
    let other = s
        .req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&grant("acme:engineering"))
        .send()
        .await;
    assert_eq!(other.status, StatusCode::OK);
    let seen = s
        .req(Method::GET, &format!("/api/repos/{repo}"))
        .header("cookie", &format!("tandem_session={alice}"))
        .send()
        .await;
    assert_eq!(seen.status, StatusCode::OK, "alice's acme group grants it");
}

const SIGNING_SECRET: &str = "slack-signing-forgery";
const BOT_TOKEN: &str = "xoxb-forgery";
const CHANNEL: &str = "C0WEB";

/// The link page as a browser holding `cookies` sees it: its HTML, the form's state and the
/// binding cookie it set.
pub(super) async fn link_page(
    s: &TestServer,
    path: &str,
    cookies: &str,
) -> (String, String, String) {
    let res = browser()
        .get(format!("{}{path}", s.url))
        .header("cookie", cookies)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let binding = cookie_set(res.headers(), "tandem_flow").expect("a binding cookie");
    let html = res.text().await.unwrap();
    let state = html
        .split("name=\"state\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the form's state")
        .to_string();
    (html, state, format!("tandem_flow={binding}"))
}

pub(super) async fn post_link(s: &TestServer, cookies: &str, body: String) -> (u16, String) {
    let res = browser()
        .post(format!("{}/api/slack/link", s.url))
        .header("cookie", cookies)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// A server with the Slack app against the stand-in, and the path of the one-time link Slack
/// user `U2MAL` (handle `mallory`, display name "Admin (IT desk)") was sent in channel
/// [`CHANNEL`] (whose repo is `acme/web`).
pub(super) async fn slack_link_server(backend: Backend) -> Option<(FakeSlack, TestServer, String)> {
    let fake = FakeSlack::start(SIGNING_SECRET, BOT_TOKEN).await;
    let config = tandem_server::config::SlackConfig {
        api_url: fake.api_url(),
        files_url: fake.url(),
        signing_secret: "slack_signing_secret".into(),
        bot_token: "slack_bot_token".into(),
        allowed_teams: Vec::new(),
    };
    let s =
        TestServer::start_with(backend, Transport::Socket, move |c| c.slack = Some(config)).await?;
    for (name, value) in [
        ("slack_signing_secret", SIGNING_SECRET),
        ("slack_bot_token", BOT_TOKEN),
    ] {
        let res = s
            .req(Method::PUT, &format!("/api/secrets/{name}"))
            .bearer(&s.admin_token)
            .json(&json!({ "value": value }))
            .send()
            .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT);
    }
    make_repo(&s, "acme/web").await;
    fake.add_user("U2MAL", "mallory", None);
    fake.set_display_name("U2MAL", "Admin (IT desk)");
    fake.add_channel(CHANNEL, "web");
    let events = format!("{}/api/slack/events", s.url);
    let ask = fake.post_as("U2MAL", CHANNEL, None, &format!("<@{BOT_USER_ID}> hello"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &ask, true))
        .await;
    let told = fake
        .wait_for("the one-time link", |f| {
            f.messages().into_iter().find(|m| {
                m.ephemeral_to.as_deref() == Some("U2MAL") && m.text.contains("one-time link")
            })
        })
        .await;
    let url = told
        .text
        .split('<')
        .nth(1)
        .unwrap()
        .split('|')
        .next()
        .unwrap();
    let path = url.strip_prefix(&s.url).unwrap().to_string();
    Some((fake, s, path))
}

/// An attacker's Slack account tied to the victim's Tandem account would act as the victim
/// from Slack. The attacker's link code posted with the victim's cookie (and a state cookie of
/// the attacker's making), or the attacker's own link page planted in the victim's browser,
/// link nothing. The page names the Slack account as Slack vouches for it, not by the display
/// name its owner chose; linked to an admin, it still never acts as one from Slack.
pub(super) async fn a_forged_slack_link_links_nothing(backend: Backend) {
    let Some((fake, s, path)) = slack_link_server(backend).await else {
        return;
    };
    let events = format!("{}/api/slack/events", s.url);
    let linked = async || {
        tandem_server::db::slack::person(&s.state.db, TEAM_ID, "U2MAL")
            .await
            .unwrap()
    };
    let code = path.split_once("code=").unwrap().1.to_string();

    let victim = sign_in_admin(&s).await;
    let forged = format!(
        "tandem_session={victim}; tandem_slack_state=x; tandem_flow=tfb_{}",
        "x".repeat(40)
    );
    let (status, page) = post_link(&s, &forged, format!("code={code}&state=x")).await;
    assert_eq!(status, 400, "{page}");
    assert_eq!(linked().await, None, "the code alone links nothing");

    // The attacker's own page (signed in as their own account), planted in the victim's browser.
    let attacker = crate::people::invite(&s, "mallet", false).await;
    let (html, state, binding) = link_page(&s, &path, &attacker.cookie).await;
    assert!(html.contains("@mallory"), "the handle Slack gives: {html}");
    assert!(
        !html.contains("Admin (IT desk)"),
        "never the display name: {html}"
    );
    assert!(
        html.contains("Tandem Test") && html.contains(TEAM_ID),
        "{html}"
    );
    let (status, page) = post_link(
        &s,
        &format!("tandem_session={victim}; {binding}"),
        format!("state={state}"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(page.contains("another sign-in"), "{page}");
    assert_eq!(linked().await, None);

    // The victim's own page and form link (once) — here the victim is an admin who chose to.
    let me = format!("tandem_session={victim}");
    let (_, state, binding) = link_page(&s, &path, &me).await;
    let (status, page) = post_link(&s, &format!("{me}; {binding}"), format!("state={state}")).await;
    assert_eq!(status, 200, "{page}");
    let admin = tandem_server::identity::auth::local_admin(&s.state.db)
        .await
        .unwrap();
    assert_eq!(linked().await, Some(admin.id));
    let (status, _) = post_link(&s, &format!("{me}; {binding}"), format!("state={state}")).await;
    assert_eq!(status, 400, "taken once");

    // Linked to an admin, the Slack account still does nothing an admin does.
    let set = fake.post_as(
        "U2MAL",
        CHANNEL,
        None,
        &format!("<@{BOT_USER_ID}> settings repo=acme/web"),
    );
    fake.send_event(&events, &fake.event_for(CHANNEL, &set, true))
        .await;
    fake.wait_for("the refusal", |f| {
        f.messages().into_iter().find(|m| {
            m.ephemeral_to.as_deref() == Some("U2MAL")
                && m.text.contains("from Slack nobody acts as a Tandem admin")
                && m.text.contains("Settings")
        })
    })
    .await;
    assert_eq!(
        tandem_server::db::slack::channel_repo(&s.state.db, TEAM_ID, CHANNEL)
            .await
            .unwrap(),
        None
    );
}
