//! The second review of the sign-in flows, attacked: a flood of GitHub starts from one address,
//! a binding cookie sent twice, flows opened by another site of Tandem's own domain
//! (`Sec-Fetch-Site: same-site`), an unprefixed binding cookie on https, the Slack link page
//! clicked from Slack (cross-site, then its one reload) and its delayed button, and the VS Code
//! origins Tandem refuses to start with or warns about.

use serde_json::json;
use tandem_server::config::code_origin::CodeOrigin;

use super::oidc_and_slack::{link_page, post_link, slack_link_server};
use super::{
    browser, callback, code_for, cookie_set, github_server, set_cookies, sign_in_admin, start,
};
use crate::harness::{Backend, TestServer, Transport};

/// What another site of Tandem's own domain sends with a navigation it starts.
const SAME_SITE: (&str, &str) = ("sec-fetch-site", "same-site");

/// Starting GitHub sign-ins needs no credential and stores a flow: one address flooding it is
/// answered 429 (shared with OpenID's starts), another address still starts, and the flood
/// stored no more than its burst.
pub(super) async fn a_flood_of_github_starts_is_refused_per_address(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let start_from = |addr: &'static str, path: &'static str| {
        browser()
            .get(format!("{}{path}", w.s.url))
            .header("x-forwarded-for", addr)
            .send()
    };
    let mut refused = None;
    for _ in 0..100 {
        let res = start_from("198.51.100.30", "/api/auth/github")
            .await
            .unwrap();
        if res.status() == 429 {
            refused = Some(res);
            break;
        }
        assert_eq!(res.status(), 302);
    }
    let refused = refused.expect("a flood of GitHub starts from one address is refused");
    assert!(refused.headers().contains_key("retry-after"));
    assert!(set_cookies(refused.headers()).is_empty());
    let page = refused.text().await.unwrap();
    assert!(
        page.contains("too many sign-in starts") && page.contains("try again in"),
        "{page}"
    );
    let stored = tandem_server::db::flows::count(&w.s.state.db, None)
        .await
        .unwrap();
    assert!(stored <= 20, "the flood stored {stored} flows");
    // The same bucket holds OpenID's starts from that address.
    let oidc = start_from("198.51.100.30", "/api/auth/oidc/acme")
        .await
        .unwrap();
    assert_eq!(oidc.status(), 429);
    let other = start_from("203.0.113.30", "/api/auth/github")
        .await
        .unwrap();
    assert_eq!(other.status(), 302, "another address still starts");
}

/// A binding (or sign-in) cookie sent twice — a second one can only be another origin's of the
/// same site — is no cookie: the callback is refused saying why, and the flow is left for the
/// browser's own single cookie.
pub(super) async fn a_cookie_sent_twice_is_refused(backend: Backend) {
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let (state, binding) = start(&w, "").await;
    let code = code_for(&w, "alice-gh", &state).await;
    for cookies in [
        format!("tandem_flow=tfb_{}; {binding}", "p".repeat(40)),
        format!("{binding}; tandem_flow=tfb_{}", "p".repeat(40)),
        format!("{binding}; {binding}"),
    ] {
        let res = callback(&w, &code, &state, &cookies).await;
        assert_eq!(res.status(), 401, "{cookies}");
        assert_eq!(cookie_set(res.headers(), "tandem_session"), None);
        let page = res.text().await.unwrap();
        assert!(page.contains("cookie twice"), "{page}");
    }
    let res = callback(&w, &code, &state, &binding).await;
    assert_eq!(
        res.status(),
        302,
        "the browser's own cookie still finishes it"
    );

    let started = browser()
        .get(format!("{}/api/auth/github", w.s.url))
        .header("cookie", format!("{binding}; {binding}"))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 401, "no start with a cookie sent twice");
    assert!(started.text().await.unwrap().contains("cookie twice"));

    let jwt = sign_in_admin(&w.s).await;
    let me = |cookies: String| {
        browser()
            .get(format!("{}/api/me", w.s.url))
            .header("cookie", cookies)
            .send()
    };
    assert_eq!(
        me(format!("tandem_session={jwt}")).await.unwrap().status(),
        200
    );
    assert_eq!(
        me(format!("tandem_session=planted; tandem_session={jwt}"))
            .await
            .unwrap()
            .status(),
        401,
        "a sign-in cookie sent twice signs nobody in"
    );
}

/// GitHub's answer to a flow started in a browser holding `cookies`, as that browser would
/// bring it back: the start's binding cookie line, the code and the state.
async fn through_github(w: &super::Gh, cookies: &str, binding: &str) -> (String, String, String) {
    let started = browser()
        .get(format!("{}/api/auth/github", w.s.url))
        .header("cookie", cookies)
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 302);
    let bound = cookie_set(started.headers(), binding).expect("a binding cookie");
    w.gh.set_browser_user("alice-gh");
    let authorize = started.headers()["location"].to_str().unwrap().to_string();
    let back = browser().get(&authorize).send().await.unwrap();
    assert_eq!(back.status(), 302);
    let back = reqwest::Url::parse(back.headers()["location"].to_str().unwrap()).unwrap();
    let param = |k: &str| {
        back.query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.into_owned())
            .unwrap()
    };
    (bound, param("code"), param("state"))
}

/// Tandem's flows never honestly arrive from another site of its own domain: a GitHub or
/// OpenID start or callback, or the Slack link page or its form, that `Sec-Fetch-Site` says
/// came so is refused with a page saying why, and leaves the flow to the real navigation. Only
/// a provider that itself lives on Tandem's site (which the header cannot tell from a sibling
/// page) is let through.
pub(super) async fn flows_opened_from_a_same_site_page_are_refused(backend: Backend) {
    // Tandem at tandem.test, GitHub (the fake, on 127.0.0.1) another site.
    let Some(w) = github_server(backend, Some("http://tandem.test")).await else {
        return;
    };
    let refused = |res: reqwest::Response| async move {
        assert_eq!(res.status(), 403);
        assert!(set_cookies(res.headers()).is_empty());
        let page = res.text().await.unwrap();
        assert!(
            page.contains("another site of Tandem") && page.contains("start again"),
            "{page}"
        );
    };
    let get = |path: &str, cookies: &str| {
        browser()
            .get(format!("{}{path}", w.s.url))
            .header(SAME_SITE.0, SAME_SITE.1)
            .header("cookie", cookies)
            .send()
    };
    refused(get("/api/auth/github", "").await.unwrap()).await;
    refused(get("/api/auth/oidc/acme", "").await.unwrap()).await;
    refused(
        get("/api/auth/oidc/acme/callback?code=c&state=s", "")
            .await
            .unwrap(),
    )
    .await;

    let (binding, code, state) = through_github(&w, "", "tandem_flow").await;
    let binding = format!("tandem_flow={binding}");
    let path = format!("/api/auth/github/callback?code={code}&state={state}");
    refused(get(&path, &binding).await.unwrap()).await;
    // GitHub's own redirect is cross-site: that one finishes the flow.
    let res = browser()
        .get(format!("{}{path}", w.s.url))
        .header("sec-fetch-site", "cross-site")
        .header("cookie", &binding)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 302, "{}", res.text().await.unwrap());
    assert!(cookie_set(res.headers(), "tandem_session").is_some());
    drop(w);

    // A provider on Tandem's own site (both on 127.0.0.1) sends same-site navigations itself.
    let Some(w) = github_server(backend, None).await else {
        return;
    };
    let (binding, code, state) = through_github(&w, "", "tandem_flow").await;
    let res = browser()
        .get(format!(
            "{}/api/auth/github/callback?code={code}&state={state}",
            w.s.url
        ))
        .header(SAME_SITE.0, SAME_SITE.1)
        .header("cookie", format!("tandem_flow={binding}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 302, "{}", res.text().await.unwrap());
    drop(w);

    let Some((_fake, s, path)) = slack_link_server(backend).await else {
        return;
    };
    let me = format!("tandem_session={}", sign_in_admin(&s).await);
    let res = browser()
        .get(format!("{}{path}", s.url))
        .header(SAME_SITE.0, SAME_SITE.1)
        .header("cookie", &me)
        .send()
        .await
        .unwrap();
    refused(res).await;
    let (_, state, binding) = link_page(&s, &path, &me).await;
    let res = browser()
        .post(format!("{}/api/slack/link", s.url))
        .header(SAME_SITE.0, SAME_SITE.1)
        .header("cookie", format!("{me}; {binding}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("state={state}"))
        .send()
        .await
        .unwrap();
    refused(res).await;
    let (status, page) = post_link(&s, &format!("{me}; {binding}"), format!("state={state}")).await;
    assert_eq!(status, 200, "the page's own form still links: {page}");
}

/// On an https public URL the binding cookie is `__Host-`: a callback carrying the same secret
/// under the unprefixed name (which a sibling origin could have set) is refused, under the
/// `__Host-` name it signs in.
pub(super) async fn https_flows_need_the_host_cookie(backend: Backend) {
    let Some(w) = github_server(backend, Some("https://tandem.example.test")).await else {
        return;
    };
    let (binding, code, state) = through_github(&w, "", "__Host-tandem_flow").await;
    let res = callback(&w, &code, &state, &format!("tandem_flow={binding}")).await;
    assert_eq!(
        res.status(),
        401,
        "an unprefixed binding is not Tandem's on https"
    );
    assert_eq!(cookie_set(res.headers(), "__Host-tandem_session"), None);
    let res = callback(&w, &code, &state, &format!("__Host-tandem_flow={binding}")).await;
    assert_eq!(res.status(), 302, "{}", res.text().await.unwrap());
    assert!(cookie_set(res.headers(), "__Host-tandem_session").is_some());
}

/// The Slack link clicked in Slack's web client is a cross-site navigation, which leaves the
/// (SameSite=Strict) sign-in cookie behind: the first load answers a page that loads itself
/// once from Tandem (no form, no flow stored), whose load — same-origin, with the cookie — shows
/// the confirmation; without the cookie it asks to sign in instead of reloading again. None of
/// these pages is cached or names its URL (the code) in a referrer to another origin, and the
/// button starts disabled, for Tandem's own script to enable a second after the page is shown
/// and focused (`e2e/slack.rs` clicks it in Chromium).
pub(super) async fn the_slack_link_survives_the_cross_site_click(backend: Backend) {
    let Some((_fake, s, path)) = slack_link_server(backend).await else {
        return;
    };
    let private = |res: &reqwest::Response| {
        assert_eq!(res.headers()["cache-control"], "no-store");
        let referrer = &res.headers()["referrer-policy"];
        // The confirmation's own form needs its origin (no-referrer would make it `null`).
        let form = res.headers().contains_key("set-cookie");
        assert_eq!(referrer, if form { "same-origin" } else { "no-referrer" });
    };
    let flows = async || {
        tandem_server::db::flows::count(&s.state.db, None)
            .await
            .unwrap()
    };
    let first = browser()
        .get(format!("{}{path}", s.url))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    private(&first);
    assert!(set_cookies(first.headers()).is_empty());
    let html = first.text().await.unwrap();
    assert!(
        html.contains("<meta http-equiv=\"refresh\" content=\"0;url=/api/slack/link?code="),
        "{html}"
    );
    assert!(!html.contains("name=\"state\""), "no form yet: {html}");
    assert_eq!(flows().await, 0);
    let again = html
        .split("id=\"continue\" href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the reload's link")
        .replace("&amp;", "&");
    assert!(again.contains("again=1"), "{again}");

    let me = format!("tandem_session={}", sign_in_admin(&s).await);
    let second = browser()
        .get(format!("{}{again}", s.url))
        .header("sec-fetch-site", "same-origin")
        .header("cookie", &me)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 200);
    private(&second);
    assert!(cookie_set(second.headers(), "tandem_flow").is_some());
    let html = second.text().await.unwrap();
    assert!(
        html.contains("<b id=\"slack-handle\">@mallory</b>"),
        "{html}"
    );
    assert!(
        html.contains("<button id=\"link\" type=\"submit\" disabled data-arm-ms=\"1000\">"),
        "{html}"
    );
    assert!(
        html.contains("<script src=\"/api/slack/link.js\" defer></script>"),
        "{html}"
    );
    assert_eq!(flows().await, 1);

    let signed_out = browser()
        .get(format!("{}{again}", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), 401, "the reload never reloads again");
    private(&signed_out);
    assert!(!signed_out.text().await.unwrap().contains("http-equiv"));

    let script = browser()
        .get(format!("{}/api/slack/link.js", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert!(
        script.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let js = script.text().await.unwrap();
    for needed in [
        "data-arm-ms",
        "\"focus\"",
        "\"blur\"",
        "visibilitychange",
        "disabled = false",
    ] {
        assert!(js.contains(needed), "{needed}: {js}");
    }
}

/// A person opening link page after link page keeps a few flows, not one per load.
pub(super) async fn a_person_keeps_few_slack_link_flows(backend: Backend) {
    let Some((_fake, s, path)) = slack_link_server(backend).await else {
        return;
    };
    let me = format!("tandem_session={}", sign_in_admin(&s).await);
    for _ in 0..12 {
        // A fresh browser each time (no binding cookie kept).
        link_page(&s, &path, &me).await;
    }
    let stored = tandem_server::db::flows::count(&s.state.db, None)
        .await
        .unwrap();
    assert_eq!(stored, tandem_server::db::flows::MAX_PER_PERSON);
}

/// `/api/health` of a server started with `config` (its warnings).
async fn health(s: &TestServer, config: tandem_server::config::Config) -> serde_json::Value {
    let server = tandem_server::serve::Server::bind(config)
        .await
        .expect("starts");
    let url = format!("http://{}", server.state().config.listen);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    let h = browser()
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
}

/// VS Code on Tandem's own origin is warned about; a same-site `code_url` on an http public
/// URL is refused even when the admin insists (no `__Host-` there); a `code_url` without a
/// `public_url` on a server listening beyond loopback is refused (its site is unknown).
pub(super) async fn vs_code_origins_refused_or_warned(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Socket).await else {
        return;
    };
    let dir = crate::harness::test_dir();
    let mut config = (*s.state.config).clone();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.path().join("data");
    config.public_url = Some("http://tandem.internal.test:8080".into());
    config.code_url = None;
    config.unsafe_code_on_tandem_origin = true;
    let h = health(&s, config.clone()).await;
    assert_eq!(h["warnings"][0]["kind"], "code_origin", "{h}");
    let said = h["warnings"][0].to_string();
    assert!(
        said.contains("VS Code runs on Tandem's own origin") && said.contains("code_url"),
        "{said}"
    );
    config.unsafe_code_on_tandem_origin = false;
    assert_eq!(health(&s, config.clone()).await["warnings"], json!([]));

    config.public_url = Some("http://tandem.example.com".into());
    config.code_url = Some(CodeOrigin::parse("http://{session}.code.example.com").unwrap());
    config.unsafe_same_site_code_url = true;
    let refused = tandem_server::serve::Server::bind(config.clone())
        .await
        .err()
        .expect("a same-site code_url on http is refused whatever the admin says")
        .to_string();
    assert!(
        refused.contains("cannot be __Host-") && refused.contains("cannot allow"),
        "{refused}"
    );

    config.unsafe_same_site_code_url = false;
    config.public_url = None;
    config.listen = "0.0.0.0:0".parse().unwrap();
    config.code_url =
        Some(CodeOrigin::parse("https://{session}.tandem-usercontent.example").unwrap());
    let refused = tandem_server::serve::Server::bind(config.clone())
        .await
        .err()
        .expect("a code_url without public_url beyond loopback is refused")
        .to_string();
    assert!(
        refused.contains("set public_url") && refused.contains("0.0.0.0"),
        "{refused}"
    );
    config.public_url = Some("https://tandem.example.com".into());
    config.listen = "127.0.0.1:0".parse().unwrap();
    assert_eq!(health(&s, config).await["warnings"], json!([]));
}

/// `tandem doctor --json` with `<data dir>/tandem.toml` holding `toml`.
async fn doctor(toml: &str) -> serde_json::Value {
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tandem.toml"), toml).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
    for var in [
        "TANDEM_TOKEN",
        "TANDEM_URL",
        "TANDEM_DATA_DIR",
        "TANDEM_DATABASE_URL",
        "TANDEM_PUBLIC_URL",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(["doctor", "--json", "--data-dir"])
        .arg(&data)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `tandem doctor` says what `/api/health` warns about (VS Code on Tandem's own origin) and why
/// `tandem serve` would refuse (a same-site `code_url` on http, allowed or not).
#[tokio::test]
async fn doctor_warns_of_vs_code_on_tandem_and_says_what_serve_refuses() {
    let v = doctor(
        "public_url = \"http://tandem.internal.test:8080\"\nunsafe_code_on_tandem_origin = true\n",
    )
    .await;
    assert!(
        v["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("VS Code runs on Tandem's own origin"),
        "{v}"
    );
    assert_eq!(v["refused"], serde_json::Value::Null, "{v}");
    let v = doctor(
        "public_url = \"http://tandem.example.com\"\ncode_url = \"http://{session}.code.example.com\"\nunsafe_same_site_code_url = true\n",
    )
    .await;
    assert!(
        v["refused"]
            .as_str()
            .is_some_and(|r| r.contains("cannot be __Host-")),
        "{v}"
    );
}
