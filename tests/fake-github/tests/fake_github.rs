//! The fake at its boundary: real HTTP, real git, JWTs signed with the fixture key, JSON read
//! back into mirrors of octocrab's models (their required fields, so a missing one fails here).

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use fake_github::{APP_PRIVATE_KEY_PEM, APP_PUBLIC_KEY_PEM, APP_SLUG, FakeGithub};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Deserialize;
use serde_json::{Value, json};
use tempfile::TempDir;

const APP_ID: u64 = 4242;
const INSTALLATION: u64 = 7;

// ---- octocrab's models, as far as they require fields ----------------------------------------

/// octocrab `models::Author`: every field required but `name`, `email`, `patch_url`.
#[derive(Deserialize, Debug)]
#[allow(dead_code)] // Read by serde: deserializing is the check.
struct Author {
    login: String,
    id: u64,
    node_id: String,
    avatar_url: String,
    gravatar_id: String,
    url: String,
    html_url: String,
    followers_url: String,
    following_url: String,
    gists_url: String,
    starred_url: String,
    subscriptions_url: String,
    organizations_url: String,
    repos_url: String,
    events_url: String,
    received_events_url: String,
    r#type: String,
    site_admin: bool,
    name: Option<String>,
    email: Option<String>,
}

/// octocrab `models::Repository` (only `id`, `name`, `url` required) plus what Tandem reads.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Repository {
    id: u64,
    name: String,
    url: String,
    full_name: Option<String>,
    owner: Option<Author>,
    clone_url: Option<String>,
    default_branch: Option<String>,
    private: Option<bool>,
}

/// octocrab `models::pulls::{Head, Base}`.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Branch {
    label: Option<String>,
    #[serde(rename = "ref")]
    ref_field: String,
    sha: String,
    user: Option<Author>,
    repo: Option<Repository>,
}

/// octocrab `models::pulls::PullRequest`: `id`, `number`, `url`, `head`, `base` required.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct PullRequest {
    id: u64,
    number: u64,
    url: String,
    head: Branch,
    base: Branch,
    html_url: Option<String>,
    state: Option<String>,
    title: Option<String>,
    body: Option<String>,
    user: Option<Author>,
    draft: Option<bool>,
    merged: Option<bool>,
    merged_at: Option<String>,
    merged_by: Option<Author>,
    merge_commit_sha: Option<String>,
    mergeable_state: Option<String>,
    author_association: Option<String>,
}

/// octocrab `models::InstallationPermissions` (all optional) — present as an object.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Permissions {
    contents: Option<String>,
    metadata: Option<String>,
}

/// octocrab `models::Installation`: `id`, `account`, `permissions`, `events` required.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Installation {
    id: u64,
    account: Author,
    permissions: Permissions,
    events: Vec<String>,
    app_id: Option<u64>,
    access_tokens_url: Option<String>,
}

/// octocrab `models::InstallationToken`: `token`, `permissions` required.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct InstallationToken {
    token: String,
    permissions: Permissions,
    expires_at: Option<String>,
    repositories: Option<Vec<Repository>>,
    repository_selection: Option<String>,
}

/// octocrab `models::issues::Comment`.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Comment {
    id: u64,
    node_id: String,
    url: String,
    html_url: String,
    issue_url: Option<String>,
    body: Option<String>,
    user: Author,
    created_at: String,
    updated_at: Option<String>,
    author_association: Option<String>,
}

/// octocrab `models::Label`: all required but `description`.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Label {
    id: u64,
    node_id: String,
    url: String,
    name: String,
    description: Option<String>,
    color: String,
    default: bool,
}

/// octocrab `models::issues::PullRequestLink`.
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct PullRequestLink {
    url: String,
    html_url: String,
    diff_url: String,
    patch_url: String,
}

/// octocrab `models::issues::Issue` (`GET …/issues/{n}`, `issue_comment` and `issues` events).
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct Issue {
    id: u64,
    node_id: String,
    url: String,
    repository_url: String,
    labels_url: String,
    comments_url: String,
    events_url: String,
    html_url: String,
    number: u64,
    state: IssueState,
    state_reason: Option<String>,
    title: String,
    body: Option<String>,
    user: Author,
    labels: Vec<Label>,
    assignees: Vec<Author>,
    author_association: Option<String>,
    locked: bool,
    comments: u32,
    pull_request: Option<PullRequestLink>,
    created_at: String,
    updated_at: String,
}

/// octocrab `models::IssueState`.
#[derive(Deserialize, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum IssueState {
    Open,
    Closed,
}

/// octocrab `webhook_events::EventInstallationId` (the untagged enum needs both fields).
#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct EventInstallation {
    id: u64,
    node_id: String,
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:#}"))
}

/// Every `…url` / `href` field of `v` points at the fake (GitHub's git/ssh forms aside).
fn assert_urls_under(v: &Value, base: &str) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let checked = (k.ends_with("url") || k == "href")
                    && !["git_url", "ssh_url", "error_uri"].contains(&k.as_str());
                if let (true, Value::String(s)) = (checked, v) {
                    assert!(s.starts_with(base), "{k} = {s} is not under {base}");
                }
                assert_urls_under(v, base);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| assert_urls_under(v, base)),
        _ => {}
    }
}

// ---- clients ----------------------------------------------------------------------------------

/// One HTTP/1.1 request on a fresh connection.
async fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, HeaderMap, Vec<u8>) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(if path.is_empty() { "/" } else { path })
        .header("host", authority);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = sender
        .send_request(request.body(Full::new(bytes::Bytes::from(body))).unwrap())
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

/// A REST call with `authorization` as given; the body is JSON, the answer parsed as JSON.
async fn api(
    fake: &FakeGithub,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut headers = vec![
        ("accept", "application/vnd.github+json"),
        ("content-type", "application/json"),
    ];
    if let Some(a) = authorization {
        headers.push(("authorization", a));
    }
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let (status, _, body) = http(method, &format!("{}{path}", fake.url()), &headers, body).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A GET of `url` (absolute, as a `Link` header gives it, or a path) that also returns the
/// `Link` header.
async fn get_with_link(
    fake: &FakeGithub,
    url: &str,
    authorization: &str,
) -> (u16, Option<String>, Value) {
    let url = if url.starts_with("http://") {
        url.to_string()
    } else {
        format!("{}{url}", fake.url())
    };
    let headers = [
        ("accept", "application/vnd.github+json"),
        ("authorization", authorization),
    ];
    let (status, headers, body) = http("GET", &url, &headers, vec![]).await;
    let link = headers.get("link").map(|l| l.to_str().unwrap().to_string());
    (
        status,
        link,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// The `Link` header's targets by `rel`, parsed the way octocrab's `Page` does.
fn links(header: &str) -> std::collections::BTreeMap<String, String> {
    header
        .split(',')
        .map(|part| {
            let (url, rel) = part.split_once(';').unwrap();
            let url = url.trim().trim_start_matches('<').trim_end_matches('>');
            let rel = rel.trim().strip_prefix("rel=").unwrap().trim_matches('"');
            (rel.to_string(), url.to_string())
        })
        .collect()
}

/// Signs `login` (already added) in through the OAuth web flow; returns `Bearer <their token>`.
async fn sign_in(fake: &FakeGithub, login: &str) -> String {
    fake.set_oauth_client("Iv1.client", "s3cret");
    fake.set_browser_user(login);
    let callback = "http%3A%2F%2Flocalhost%3A9%2Fcb";
    let authorize = format!(
        "{}/login/oauth/authorize?client_id=Iv1.client&redirect_uri={callback}",
        fake.url()
    );
    let (status, headers, _) = http("GET", &authorize, &[], vec![]).await;
    assert_eq!(status, 302);
    let location = headers["location"].to_str().unwrap();
    let code = location
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let form =
        format!("client_id=Iv1.client&client_secret=s3cret&code={code}&redirect_uri={callback}");
    let headers = [
        ("accept", "application/json"),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let exchange = format!("{}/login/oauth/access_token", fake.url());
    let (_, _, body) = http("POST", &exchange, &headers, form.into_bytes()).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    format!("Bearer {}", body["access_token"].as_str().unwrap())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An app JWT as octocrab makes one (RS256, `iss` the app id as a number, 9 minutes).
fn app_jwt() -> String {
    sign_jwt(&json!({ "iss": APP_ID, "iat": now() - 60, "exp": now() + 540 }))
}

fn sign_jwt(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(APP_PRIVATE_KEY_PEM.as_bytes()).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key).unwrap()
}

/// Mints an installation token; returns it and the raw answer.
async fn mint(fake: &FakeGithub, request: Value) -> (String, Value) {
    let path = format!("/app/installations/{INSTALLATION}/access_tokens");
    let (status, body) = api(
        fake,
        "POST",
        &path,
        Some(&format!("Bearer {}", app_jwt())),
        Some(request),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let token: InstallationToken = parse(&body);
    assert!(token.token.starts_with("ghs_"));
    (token.token, body)
}

/// A fake with `acme/widgets` (and `acme/gadgets`) installed as installation 7.
async fn started() -> (TempDir, FakeGithub) {
    let root = TempDir::new().unwrap();
    let fake = FakeGithub::start(root.path(), APP_ID, APP_PUBLIC_KEY_PEM).await;
    fake.add_repo("acme", "widgets", "main");
    fake.add_repo("acme", "gadgets", "main");
    fake.install(INSTALLATION, "acme", &["acme/widgets", "acme/gadgets"]);
    (root, fake)
}

/// git with no user or system config and no credential prompts (the token rides in the URL).
async fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "credential.helper=",
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .output()
        .await
        .expect("run git")
}

async fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args).await;
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn remote(fake: &FakeGithub, token: &str, repo: &str) -> String {
    format!(
        "http://x-access-token:{token}@{}/acme/{repo}.git",
        fake.url().trim_start_matches("http://")
    )
}

/// A working copy of `acme/<repo>` with a first commit on `main` pushed, then each of
/// `branches` cut from it with a commit of its own and pushed.
async fn seed(fake: &FakeGithub, token: &str, repo: &str, branches: &[&str]) -> TempDir {
    let work = TempDir::new().unwrap();
    let dir = work.path();
    git_ok(dir, &["init", "--quiet"]).await;
    std::fs::write(dir.join("README.md"), "# widgets\n").unwrap();
    git_ok(dir, &["add", "."]).await;
    git_ok(dir, &["commit", "--quiet", "-m", "first"]).await;
    git_ok(
        dir,
        &["remote", "add", "origin", &remote(fake, token, repo)],
    )
    .await;
    git_ok(dir, &["push", "--quiet", "origin", "main"]).await;
    for b in branches {
        git_ok(dir, &["checkout", "--quiet", "-b", b, "main"]).await;
        std::fs::write(dir.join(format!("{}.txt", b.replace('/', "-"))), b).unwrap();
        git_ok(dir, &["add", "."]).await;
        git_ok(dir, &["commit", "--quiet", "-m", b]).await;
        git_ok(dir, &["push", "--quiet", "origin", b]).await;
    }
    git_ok(dir, &["checkout", "--quiet", "main"]).await;
    work
}

// ---- tests ------------------------------------------------------------------------------------

#[tokio::test]
async fn an_installation_token_clones_and_pushes_until_it_is_revoked() {
    let (_root, fake) = started().await;
    let (token, body) = mint(&fake, json!({ "repositories": ["widgets"], "permissions": { "contents": "write", "pull_requests": "write" } })).await;
    assert_urls_under(&body, &fake.url());
    let minted = fake.minted_tokens();
    assert_eq!(minted.len(), 1);
    assert_eq!(minted[0].repos, vec!["acme/widgets".to_string()]);
    assert_eq!(
        minted[0].permissions.get("metadata").map(String::as_str),
        Some("read"),
        "GitHub adds metadata:read"
    );
    assert!(!minted[0].revoked);

    let _work = seed(&fake, &token, "widgets", &[]).await;
    let clones = TempDir::new().unwrap();
    git_ok(
        clones.path(),
        &["clone", "--quiet", &remote(&fake, &token, "widgets"), "w"],
    )
    .await;
    let clone = clones.path().join("w");
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "# widgets\n"
    );

    git_ok(&clone, &["checkout", "--quiet", "-b", "tandem/feature"]).await;
    std::fs::write(clone.join("feature.txt"), "more").unwrap();
    git_ok(&clone, &["add", "."]).await;
    git_ok(&clone, &["commit", "--quiet", "-m", "feature"]).await;
    git_ok(&clone, &["push", "--quiet", "origin", "tandem/feature"]).await;
    let pushed = git_ok(&clone, &["rev-parse", "HEAD"]).await;
    let bare = _root.path().join("acme/widgets.git");
    assert_eq!(
        git_ok(&bare, &["rev-parse", "refs/heads/tandem/feature"]).await,
        pushed
    );
    let pushes = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/git-receive-pack") && r.status == 200)
        .collect::<Vec<_>>();
    assert_eq!(pushes.len(), 2, "{pushes:?}");
    assert!(
        pushes
            .iter()
            .all(|r| r.who == "installation:7" && r.path == "/acme/widgets.git/git-receive-pack")
    );

    // Enough refs that git gzips its upload-pack requests (over 1 KiB), in both protocols.
    for i in 0..40 {
        git_ok(
            &clone,
            &[
                "branch",
                &format!("tandem/many-branches-so-the-want-list-is-long-{i}"),
            ],
        )
        .await;
    }
    git_ok(&clone, &["push", "--quiet", "origin", "--all"]).await;
    for protocol in ["0", "2"] {
        let name = format!("v{protocol}");
        git_ok(
            clones.path(),
            &[
                "-c",
                &format!("protocol.version={protocol}"),
                "clone",
                "--quiet",
                "--mirror",
                &remote(&fake, &token, "widgets"),
                &name,
            ],
        )
        .await;
        let refs = git_ok(
            &clones.path().join(&name),
            &["for-each-ref", "--format=%(refname)", "refs/heads"],
        )
        .await;
        assert_eq!(
            refs.lines().count(),
            42,
            "main, tandem/feature and 40 more over protocol {protocol}"
        );
    }

    let auth = format!("token {token}");
    let (status, _) = api(&fake, "DELETE", "/installation/token", Some(&auth), None).await;
    assert_eq!(status, 204);
    assert!(fake.minted_tokens()[0].revoked);
    let out = git(
        clones.path(),
        &["ls-remote", &remote(&fake, &token, "widgets")],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Authentication failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = api(
        &fake,
        "GET",
        "/installation/repositories",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (401, Some("Bad credentials"))
    );
    let last = fake.requests().pop().unwrap();
    assert_eq!((last.who.as_str(), last.status), ("anonymous", 401));
}

#[tokio::test]
async fn a_token_reaches_only_its_repositories_and_permissions() {
    let (_root, fake) = started().await;
    let (writer, _) = mint(&fake, json!({})).await;
    let _work = seed(&fake, &writer, "widgets", &[]).await;

    let app = format!("Bearer {}", app_jwt());
    let mint_path = "/app/installations/7/access_tokens";
    let (status, body) = api(
        &fake,
        "POST",
        mint_path,
        Some(&app),
        Some(json!({ "repositories": ["ghost"] })),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (status, _) = api(
        &fake,
        "POST",
        mint_path,
        Some(&app),
        Some(json!({ "permissions": { "administration": "write" } })),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = api(
        &fake,
        "POST",
        "/app/installations/99/access_tokens",
        Some(&app),
        None,
    )
    .await;
    assert_eq!(status, 404);

    let (reader, _) = mint(
        &fake,
        json!({ "repositories": ["widgets"], "permissions": { "contents": "read" } }),
    )
    .await;
    let auth = format!("Bearer {reader}");
    let (status, body) = api(
        &fake,
        "GET",
        "/installation/repositories",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["total_count"], 1);
    let repos: Vec<Repository> = parse(&body["repositories"]);
    assert_eq!(repos[0].full_name.as_deref(), Some("acme/widgets"));

    let (status, body) = api(&fake, "GET", "/repos/acme/widgets", Some(&auth), None).await;
    assert_eq!(status, 200);
    assert_urls_under(&body, &fake.url());
    let repo: Repository = parse(&body);
    assert_eq!(
        repo.clone_url,
        Some(format!("{}/acme/widgets.git", fake.url()))
    );
    assert_eq!(repo.default_branch.as_deref(), Some("main"));
    assert_eq!(repo.owner.unwrap().login, "acme");
    let (status, body) = api(&fake, "GET", "/repos/acme/gadgets", Some(&auth), None).await;
    assert_eq!((status, body["message"].as_str()), (404, Some("Not Found")));
    let (status, _) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/pulls",
        Some(&auth),
        Some(json!({ "title": "t", "head": "x", "base": "main" })),
    )
    .await;
    assert_eq!(status, 403, "no pull_requests permission");

    let dir = TempDir::new().unwrap();
    let out = git(
        dir.path(),
        &["ls-remote", &remote(&fake, &reader, "gadgets")],
    )
    .await;
    assert!(!out.status.success(), "another repository");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git_ok(
        dir.path(),
        &["clone", "--quiet", &remote(&fake, &reader, "widgets"), "w"],
    )
    .await;
    let clone = dir.path().join("w");
    git_ok(
        &clone,
        &["commit", "--quiet", "--allow-empty", "-m", "nope"],
    )
    .await;
    let out = git(&clone, &["push", "origin", "main"]).await;
    assert!(!out.status.success(), "contents:read cannot push");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn app_jwts_are_checked_like_githubs() {
    let (_root, fake) = started().await;
    let bad = |claims: Value| sign_jwt(&claims);
    let hs256 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "iss": APP_ID, "iat": now(), "exp": now() + 60 }),
        &EncodingKey::from_secret(b"not the key").unwrap(),
    )
    .unwrap();
    for jwt in [
        hs256,
        bad(json!({ "iss": APP_ID + 1, "iat": now(), "exp": now() + 60 })),
        bad(json!({ "iss": APP_ID, "iat": now() - 900, "exp": now() - 300 })),
        bad(json!({ "iss": APP_ID, "iat": now(), "exp": now() + 3600 })),
        "not.a.jwt".to_string(),
    ] {
        let (status, body) = api(
            &fake,
            "GET",
            "/app/installations",
            Some(&format!("Bearer {jwt}")),
            None,
        )
        .await;
        assert_eq!(status, 401, "{jwt}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("JSON web token")
                || body["message"].as_str().unwrap().contains("claim"),
            "{body}"
        );
        assert_eq!(body["documentation_url"], "https://docs.github.com/rest");
    }
    let (status, body) = api(
        &fake,
        "GET",
        "/app/installations",
        Some(&format!("Bearer {}", app_jwt())),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_urls_under(&body, &fake.url());
    let installations: Vec<Installation> = parse(&body);
    assert_eq!(installations.len(), 1);
    assert_eq!(
        (
            installations[0].id,
            installations[0].account.login.as_str(),
            installations[0].app_id
        ),
        (7, "acme", Some(APP_ID))
    );

    // Some clients send `iss` as a string.
    let string_iss =
        sign_jwt(&json!({ "iss": APP_ID.to_string(), "iat": now() - 60, "exp": now() + 540 }));
    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/installation",
        Some(&format!("Bearer {string_iss}")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse::<Installation>(&body).id, 7);
    let (status, body) = api(
        &fake,
        "GET",
        "/app/installations/7",
        Some(&format!("Bearer {}", app_jwt())),
        None,
    )
    .await;
    assert_eq!((status, parse::<Installation>(&body).id), (200, 7));
    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/nothing/installation",
        Some(&format!("Bearer {}", app_jwt())),
        None,
    )
    .await;
    assert_eq!((status, body["message"].as_str()), (404, Some("Not Found")));

    let (token, _) = mint(&fake, json!({})).await;
    let (status, body) = api(
        &fake,
        "GET",
        "/app/installations",
        Some(&format!("token {token}")),
        None,
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (401, Some("A JSON web token could not be decoded"))
    );
    let (status, body) = api(
        &fake,
        "GET",
        "/installation/repositories",
        Some("token ghs_unknown"),
        None,
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (401, Some("Bad credentials"))
    );
    let whos: Vec<String> = fake.requests().iter().map(|r| r.who.clone()).collect();
    assert!(
        whos.contains(&"app".to_string()) && whos.contains(&"installation:7".to_string()),
        "{whos:?}"
    );
}

#[tokio::test]
async fn pull_requests_and_comments_round_trip_in_githubs_shapes() {
    let (_root, fake) = started().await;
    let (token, _) = mint(&fake, json!({})).await;
    let work = seed(&fake, &token, "widgets", &["tandem/fix", "empty"]).await;
    let auth = format!("Bearer {token}");
    let fix_sha = git_ok(work.path(), &["rev-parse", "tandem/fix"]).await;

    let new = json!({ "title": "Fix it", "head": "tandem/fix", "base": "main", "body": "Made by Tandem", "draft": true });
    let (status, body) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/pulls",
        Some(&auth),
        Some(new.clone()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_urls_under(&body, &fake.url());
    let pr: PullRequest = parse(&body);
    assert_eq!(pr.number, 1);
    assert_eq!(
        pr.html_url.as_deref(),
        Some(format!("{}/acme/widgets/pull/1", fake.url()).as_str())
    );
    assert_eq!(
        (pr.head.ref_field.as_str(), pr.head.label.as_deref()),
        ("tandem/fix", Some("acme:tandem/fix"))
    );
    assert_eq!(pr.head.sha, fix_sha);
    assert_eq!(pr.base.ref_field, "main");
    assert_eq!(
        pr.user
            .as_ref()
            .map(|u| (u.login.as_str(), u.r#type.as_str())),
        Some(("tandem-test[bot]", "Bot"))
    );
    assert_eq!(
        (pr.state.as_deref(), pr.draft, pr.merged),
        (Some("open"), Some(true), Some(false))
    );

    let (status, body) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/pulls",
        Some(&auth),
        Some(new),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(body["message"], "Validation Failed");
    assert_eq!(
        body["errors"][0]["message"],
        "A pull request already exists for acme:tandem/fix."
    );
    let create = "/repos/acme/widgets/pulls";
    let (status, body) = api(
        &fake,
        "POST",
        create,
        Some(&auth),
        Some(json!({ "title": "t", "head": "acme:nope", "base": "main" })),
    )
    .await;
    assert_eq!((status, &body["errors"][0]["field"]), (422, &json!("head")));
    let (status, body) = api(
        &fake,
        "POST",
        create,
        Some(&auth),
        Some(json!({ "title": "t", "head": "main", "base": "main" })),
    )
    .await;
    assert_eq!(
        (status, &body["errors"][0]["message"]),
        (422, &json!("No commits between main and main"))
    );

    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/pulls?head=acme:tandem/fix&state=open",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let listed: Vec<PullRequest> = parse(&body);
    assert_eq!(listed.iter().map(|p| p.number).collect::<Vec<_>>(), vec![1]);
    let (_, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/pulls?head=acme:empty",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(body, json!([]));

    // A push to the head branch moves the pull request's head, as on GitHub.
    git_ok(work.path(), &["checkout", "--quiet", "tandem/fix"]).await;
    git_ok(
        work.path(),
        &["commit", "--quiet", "--allow-empty", "-m", "more"],
    )
    .await;
    git_ok(work.path(), &["push", "--quiet", "origin", "tandem/fix"]).await;
    let moved = git_ok(work.path(), &["rev-parse", "HEAD"]).await;
    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/pulls/1",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(parse::<PullRequest>(&body).head.sha, moved);

    let comment = json!({ "body": "Tests pass" });
    let (status, body) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/issues/1/comments",
        Some(&auth),
        Some(comment),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_urls_under(&body, &fake.url());
    let comment: Comment = parse(&body);
    assert_eq!(
        (comment.body.as_deref(), comment.user.login.as_str()),
        (Some("Tests pass"), "tandem-test[bot]")
    );
    let (status, _) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/issues/9/comments",
        Some(&auth),
        Some(json!({ "body": "x" })),
    )
    .await;
    assert_eq!(status, 404);

    let change = json!({ "title": "Fix it properly", "state": "closed" });
    let (status, body) = api(
        &fake,
        "PATCH",
        "/repos/acme/widgets/pulls/1",
        Some(&auth),
        Some(change),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["title"].as_str(), body["state"].as_str()),
        (Some("Fix it properly"), Some("closed"))
    );
    assert!(body["closed_at"].is_string());
    let (_, open) = api(&fake, "GET", "/repos/acme/widgets/pulls", Some(&auth), None).await;
    let (_, all) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/pulls?state=all",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(
        (
            open.as_array().unwrap().len(),
            all.as_array().unwrap().len()
        ),
        (0, 1)
    );

    let pulls = fake.pulls();
    assert_eq!(pulls.len(), 1);
    let p = &pulls[0];
    assert_eq!(
        (
            p.number,
            p.owner.as_str(),
            p.repo.as_str(),
            p.title.as_str()
        ),
        (1, "acme", "widgets", "Fix it properly")
    );
    assert_eq!(
        (p.head.as_str(), p.base.as_str(), p.draft, p.state.as_str()),
        ("tandem/fix", "main", true, "closed")
    );
    assert_eq!(p.opened_by, format!("{APP_SLUG}[bot]"));
    let comments = fake.comments();
    assert_eq!(comments.len(), 1);
    assert_eq!(
        (
            comments[0].number,
            comments[0].body.as_str(),
            comments[0].author.as_str()
        ),
        (1, "Tests pass", "tandem-test[bot]")
    );
    let logged = fake.requests();
    assert!(logged.iter().any(
        |r| (r.method.as_str(), r.path.as_str(), r.who.as_str(), r.status)
            == ("POST", create, "installation:7", 201)
    ));
}

#[tokio::test]
async fn the_oauth_web_flow_signs_in_the_browser_user() {
    let (_root, fake) = started().await;
    fake.add_user("octo", 501, "Octo Cat", "octo@example.com");
    fake.set_browser_user("octo");
    fake.set_oauth_client("Iv1.client", "s3cret");
    let authorize = |client: &str| {
        format!(
            "{}/login/oauth/authorize?client_id={client}&redirect_uri=http%3A%2F%2Flocalhost%3A9%2Fcb%3Fnext%3D1&state=a%20b&scope=",
            fake.url()
        )
    };
    let (status, _, _) = http("GET", &authorize("someone-else"), &[], vec![]).await;
    assert_eq!(status, 404);
    let code = async || {
        let (status, headers, _) = http("GET", &authorize("Iv1.client"), &[], vec![]).await;
        assert_eq!(status, 302);
        let location = headers["location"].to_str().unwrap().to_string();
        assert!(
            location.starts_with("http://localhost:9/cb?next=1&code=")
                && location.ends_with("&state=a+b"),
            "{location}"
        );
        location
            .split("code=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap()
            .to_string()
    };
    let exchange = async |form: String, accept: &str| {
        let url = format!("{}/login/oauth/access_token", fake.url());
        let headers = [
            ("accept", accept),
            ("content-type", "application/x-www-form-urlencoded"),
        ];
        let (status, _, body) = http("POST", &url, &headers, form.into_bytes()).await;
        assert_eq!(status, 200, "GitHub answers errors with 200 too");
        String::from_utf8(body).unwrap()
    };

    let first = code().await;
    let wrong = exchange(
        format!("client_id=Iv1.client&client_secret=nope&code={first}"),
        "application/json",
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&wrong).unwrap()["error"],
        "incorrect_client_credentials"
    );
    let redirect = "http%3A%2F%2Flocalhost%3A9%2Fcb%3Fnext%3D1";
    let good = exchange(
        format!("client_id=Iv1.client&client_secret=s3cret&code={first}&redirect_uri={redirect}"),
        "application/json",
    )
    .await;
    let good: Value = serde_json::from_str(&good).unwrap();
    let token = good["access_token"].as_str().unwrap().to_string();
    assert!(token.starts_with("gho_"), "{good}");
    assert_eq!(good["token_type"], "bearer");
    let again = exchange(
        format!("client_id=Iv1.client&client_secret=s3cret&code={first}"),
        "application/json",
    )
    .await;
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["error"], "bad_verification_code");
    assert_eq!(
        again["error_description"],
        "The code passed is incorrect or expired."
    );
    let form = exchange(
        format!(
            "client_id=Iv1.client&client_secret=s3cret&code={}",
            code().await
        ),
        "*/*",
    )
    .await;
    assert!(
        form.starts_with("access_token=gho_") && form.contains("token_type=bearer"),
        "{form}"
    );

    let (status, body) = api(
        &fake,
        "GET",
        "/user",
        Some(&format!("Bearer {token}")),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_urls_under(&body, &fake.url());
    let me: Author = parse(&body);
    assert_eq!(
        (me.login.as_str(), me.id, me.r#type.as_str()),
        ("octo", 501, "User")
    );
    assert_eq!(
        (me.name.as_deref(), me.email.as_deref()),
        (Some("Octo Cat"), Some("octo@example.com"))
    );
    assert!(
        body["created_at"].is_string() && body["public_repos"].is_u64(),
        "octocrab's UserProfile needs these"
    );
    let (status, _) = api(&fake, "GET", "/user", None, None).await;
    assert_eq!(status, 401);
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path == "/user" && r.who == "user:octo" && r.status == 200)
    );
}

#[tokio::test]
async fn webhooks_are_signed_and_payloads_match_the_merge_and_the_comment() {
    let (_root, fake) = started().await;
    let (token, _) = mint(&fake, json!({})).await;
    let work = seed(&fake, &token, "widgets", &["tandem/fix"]).await;
    let head = git_ok(work.path(), &["rev-parse", "tandem/fix"]).await;
    let new = json!({ "title": "Fix it", "head": "tandem/fix", "base": "main" });
    let (status, _) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/pulls",
        Some(&format!("token {token}")),
        Some(new),
    )
    .await;
    assert_eq!(status, 201);

    // A receiver that checks the signature the way GitHub's docs say to.
    type Got = Arc<Mutex<Vec<(String, String, Value)>>>;
    let got: Got = Arc::default();
    let receiver = axum::Router::new()
        .route(
            "/hooks/github",
            axum::routing::post(
                |axum::extract::State(got): axum::extract::State<Got>,
                 headers: HeaderMap,
                 body: bytes::Bytes| async move {
                    use hmac::Mac;
                    let header = |n: &str| {
                        headers
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string()
                    };
                    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"whsec").unwrap();
                    mac.update(&body);
                    let expected = format!(
                        "sha256={}",
                        mac.finalize()
                            .into_bytes()
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<String>()
                    );
                    if header("x-hub-signature-256") != expected
                        || header("content-type") != "application/json"
                    {
                        return axum::http::StatusCode::UNAUTHORIZED;
                    }
                    got.lock().unwrap().push((
                        header("x-github-event"),
                        header("x-github-delivery"),
                        serde_json::from_slice(&body).unwrap(),
                    ));
                    axum::http::StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hooks/github", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let merged = fake.merge_pull("acme", "widgets", 1);
    assert_urls_under(&merged, &fake.url());
    assert_eq!(
        (merged["action"].as_str(), merged["number"].as_u64()),
        (Some("closed"), Some(1))
    );
    let pr: PullRequest = parse(&merged["pull_request"]);
    assert_eq!(
        (pr.state.as_deref(), pr.merged, pr.head.sha.as_str()),
        (Some("closed"), Some(true), head.as_str())
    );
    assert!(pr.merged_at.is_some());
    assert_eq!(parse::<EventInstallation>(&merged["installation"]).id, 7);
    assert_eq!(
        (
            &merged["repository"]["full_name"],
            &merged["repository"]["owner"]["login"]
        ),
        (&json!("acme/widgets"), &json!("acme"))
    );
    let bare = _root.path().join("acme/widgets.git");
    assert_eq!(
        git_ok(&bare, &["rev-parse", "main^2"]).await,
        head,
        "a real merge commit on main"
    );
    assert_eq!(
        pr.merge_commit_sha.unwrap(),
        git_ok(&bare, &["rev-parse", "main"]).await
    );
    assert!(fake.pulls()[0].merged);

    let commented = fake.comment_payload("acme", "widgets", 1, "octo", "/tandem retry");
    assert_urls_under(&commented, &fake.url());
    let issue: Issue = parse(&commented["issue"]);
    assert_eq!((issue.number, issue.pull_request.is_some()), (1, true));
    let comment: Comment = parse(&commented["comment"]);
    assert_eq!(
        (comment.body.as_deref(), comment.user.login.as_str()),
        (Some("/tandem retry"), "octo")
    );
    assert_eq!(comment.author_association.as_deref(), Some("COLLABORATOR"));
    assert_eq!(commented["action"], "created");
    assert_eq!(parse::<EventInstallation>(&commented["installation"]).id, 7);
    assert_eq!(
        fake.comments().last().map(|c| c.author.clone()),
        Some("octo".into())
    );
    let owner_says = fake.comment_payload("acme", "widgets", 1, "acme", "thanks");
    assert_eq!(owner_says["comment"]["author_association"], "OWNER");

    assert_eq!(
        FakeGithub::deliver_webhook(&hook, "whsec", "pull_request", &merged).await,
        204
    );
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, "whsec", "issue_comment", &commented).await,
        204
    );
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, "wrong secret", "issue_comment", &commented).await,
        401
    );
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0.as_str(), &got[0].2), ("pull_request", &merged));
    assert_eq!(
        (got[1].0.as_str(), &got[1].2),
        ("issue_comment", &commented)
    );
    assert!(
        got[0].1.len() == 36 && got[0].1 != got[1].1,
        "fresh delivery ids: {got:?}"
    );
}

#[tokio::test]
async fn a_protected_branch_refuses_pushes_like_githubs_hook() {
    let (_root, fake) = started().await;
    let (token, _) = mint(&fake, json!({})).await;
    let work = seed(&fake, &token, "widgets", &[]).await;
    let dir = work.path();
    let bare = _root.path().join("acme/widgets.git");
    let before = git_ok(&bare, &["rev-parse", "main"]).await;
    fake.protect_branch("acme", "widgets", "main");
    fake.protect_branch("acme", "widgets", "release/*");

    git_ok(
        dir,
        &[
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "straight to main",
        ],
    )
    .await;
    git_ok(dir, &["branch", "topic"]).await;
    git_ok(dir, &["branch", "release/1"]).await;
    let out = git(dir, &["push", "origin", "main", "topic", "release/1"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("GH006: Protected branch update failed for refs/heads/main."),
        "{stderr}"
    );
    assert!(
        stderr.contains("GH006: Protected branch update failed for refs/heads/release/1."),
        "{stderr}"
    );
    assert!(
        stderr.contains("[remote rejected] main -> main"),
        "{stderr}"
    );
    assert_eq!(
        git_ok(&bare, &["rev-parse", "main"]).await,
        before,
        "main is unchanged"
    );
    assert_eq!(
        git_ok(&bare, &["rev-parse", "topic"]).await,
        git_ok(dir, &["rev-parse", "topic"]).await,
        "the unprotected ref landed"
    );
}

#[tokio::test]
async fn issues_share_numbers_with_pull_requests_and_read_back_in_githubs_shapes() {
    let (_root, fake) = started().await;
    let (token, _) = mint(&fake, json!({})).await;
    let auth = format!("Bearer {token}");
    let _work = seed(&fake, &token, "widgets", &["tandem/fix", "tandem/more"]).await;
    let open_pull = async |head: &str| {
        let new = json!({ "title": head, "head": head, "base": "main" });
        let (status, body) = api(
            &fake,
            "POST",
            "/repos/acme/widgets/pulls",
            Some(&auth),
            Some(new),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        parse::<PullRequest>(&body).number
    };
    assert_eq!(open_pull("tandem/fix").await, 1);
    assert_eq!(
        fake.open_issue("acme", "widgets", "octo", "Crash on start", "It crashes."),
        2
    );
    assert_eq!(fake.open_issue("acme", "widgets", "octo", "No body", ""), 3);
    assert_eq!(open_pull("tandem/more").await, 4, "one sequence for both");
    assert_eq!(
        fake.open_issue("acme", "gadgets", "octo", "Elsewhere", ""),
        1,
        "per repository"
    );

    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/2",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_urls_under(&body, &fake.url());
    assert!(body.get("pull_request").is_none(), "{body:#}");
    let issue: Issue = parse(&body);
    assert_eq!(
        (
            issue.number,
            issue.title.as_str(),
            issue.body.as_deref(),
            issue.state
        ),
        (2, "Crash on start", Some("It crashes."), IssueState::Open)
    );
    assert_eq!(
        (issue.user.login.as_str(), issue.user.r#type.as_str()),
        ("octo", "User")
    );
    assert_eq!(
        issue.html_url,
        format!("{}/acme/widgets/issues/2", fake.url())
    );
    assert_eq!((issue.comments, issue.labels.len()), (0, 0));
    let (_, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/3",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(body["body"], Value::Null, "GitHub's empty body");

    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/1",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_urls_under(&body, &fake.url());
    let pr_issue: Issue = parse(&body);
    let link = pr_issue
        .pull_request
        .expect("a pull request's issue side links it");
    assert_eq!(
        link.url,
        format!("{}/repos/acme/widgets/pulls/1", fake.url())
    );
    assert_eq!(
        pr_issue.html_url,
        format!("{}/acme/widgets/pull/1", fake.url())
    );
    let (status, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/9",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!((status, body["message"].as_str()), (404, Some("Not Found")));
    let (_, repo) = api(&fake, "GET", "/repos/acme/widgets", Some(&auth), None).await;
    assert_eq!(
        repo["open_issues_count"], 4,
        "GitHub counts pull requests as issues"
    );

    // Who may read: the token's repositories, and `issues` for an issue — a pull request's
    // issue side is reachable with `pull_requests` alone.
    let (pulls_only, _) = mint(
        &fake,
        json!({ "permissions": { "pull_requests": "write" } }),
    )
    .await;
    let pulls_only = format!("Bearer {pulls_only}");
    let (gadgets_only, _) = mint(&fake, json!({ "repositories": ["gadgets"] })).await;
    let gadgets_only = format!("Bearer {gadgets_only}");
    for (who, path, status) in [
        (
            Some(pulls_only.as_str()),
            "/repos/acme/widgets/issues/1",
            200,
        ),
        (
            Some(pulls_only.as_str()),
            "/repos/acme/widgets/issues/2",
            403,
        ),
        (
            Some(pulls_only.as_str()),
            "/repos/acme/widgets/issues/2/comments",
            403,
        ),
        (
            Some(gadgets_only.as_str()),
            "/repos/acme/widgets/issues/2",
            404,
        ),
        (
            Some(gadgets_only.as_str()),
            "/repos/acme/gadgets/issues/1",
            200,
        ),
        (None, "/repos/acme/widgets/issues/2", 404),
        (None, "/repos/acme/widgets/issues/2/comments", 404),
    ] {
        let (got, body) = api(&fake, "GET", path, who, None).await;
        assert_eq!(got, status, "{who:?} {path}: {body}");
    }
    let comment = json!({ "body": "on it" });
    let (status, body) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/issues/2/comments",
        Some(&pulls_only),
        Some(comment.clone()),
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (403, Some("Resource not accessible by integration"))
    );
    let (status, _) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/issues/1/comments",
        Some(&pulls_only),
        Some(comment.clone()),
    )
    .await;
    assert_eq!(
        status, 201,
        "a pull request takes a comment with pull_requests:write"
    );
    let (status, body) = api(
        &fake,
        "POST",
        "/repos/acme/widgets/issues/2/comments",
        None,
        Some(comment),
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (401, Some("Requires authentication"))
    );

    // A person's token, until the repository is hidden from them.
    fake.add_user("octo", 501, "Octo Cat", "octo@example.com");
    let octo = sign_in(&fake, "octo").await;
    let (status, _) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/2",
        Some(&octo),
        None,
    )
    .await;
    assert_eq!(status, 200);
    fake.set_permission("octo", "acme/widgets", "none");
    for path in [
        "/repos/acme/widgets/issues/2",
        "/repos/acme/widgets/issues/2/comments",
        "/repos/acme/widgets/pulls/1",
    ] {
        let (status, _) = api(&fake, "GET", path, Some(&octo), None).await;
        assert_eq!(status, 404, "{path}");
    }

    // Labels: the webhook payload, and the issue carries them from then on.
    let labeled = fake.label_payload("acme", "widgets", 2, "octo", "good first issue");
    assert_urls_under(&labeled, &fake.url());
    assert_eq!(labeled["action"], "labeled");
    let label: Label = parse(&labeled["label"]);
    assert_eq!(label.name, "good first issue");
    assert_eq!(
        label.url,
        format!(
            "{}/repos/acme/widgets/labels/good%20first%20issue",
            fake.url()
        )
    );
    let issue: Issue = parse(&labeled["issue"]);
    assert_eq!(
        issue
            .labels
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>(),
        ["good first issue"]
    );
    assert!(labeled["issue"].get("pull_request").is_none());
    assert_eq!(labeled["sender"]["login"], "octo");
    assert_eq!(labeled["repository"]["full_name"], "acme/widgets");
    assert_eq!(parse::<EventInstallation>(&labeled["installation"]).id, 7);
    let again = fake.label_payload("acme", "widgets", 2, "octo", "tandem");
    let labels: Vec<Label> = parse(&again["issue"]["labels"]);
    assert_eq!(
        labels.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["good first issue", "tandem"]
    );
    assert_eq!(labels[0].id, label.id, "one label, one id");
    let (_, body) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/2",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(parse::<Issue>(&body).labels.len(), 2);

    // The `issue_comment` payload tells an issue from a pull request by `pull_request`.
    let on_issue =
        fake.issue_comment_payload("acme", "widgets", 2, "octo", "@tandem-test fix this");
    assert_urls_under(&on_issue, &fake.url());
    assert_eq!(on_issue["action"], "created");
    assert!(
        on_issue["issue"].get("pull_request").is_none(),
        "{on_issue:#}"
    );
    let issue: Issue = parse(&on_issue["issue"]);
    assert_eq!((issue.number, issue.comments), (2, 1));
    let comment: Comment = parse(&on_issue["comment"]);
    assert_eq!(
        (comment.body.as_deref(), comment.user.login.as_str()),
        (Some("@tandem-test fix this"), "octo")
    );
    assert!(comment.html_url.ends_with(&format!(
        "/acme/widgets/issues/2#issuecomment-{}",
        comment.id
    )));
    assert_eq!(on_issue["sender"]["login"], "octo");
    assert_eq!(parse::<EventInstallation>(&on_issue["installation"]).id, 7);
    let on_pull = fake.issue_comment_payload("acme", "widgets", 1, "octo", "looks good");
    assert!(parse::<Issue>(&on_pull["issue"]).pull_request.is_some());
    assert!(
        on_pull["comment"]["html_url"]
            .as_str()
            .unwrap()
            .contains("/pull/1#issuecomment-")
    );
    fake.add_repo("acme", "lonely", "main");
    fake.open_issue("acme", "lonely", "octo", "Not installed", "");
    let lonely = fake.issue_comment_payload("acme", "lonely", 1, "octo", "anyone?");
    assert!(
        lonely.get("installation").is_none(),
        "no installation there"
    );
    assert_eq!(
        fake.issue_comments("acme", "widgets", 2)
            .iter()
            .map(|c| (c.author.as_str(), c.body.as_str(), c.by_app, c.edits))
            .collect::<Vec<_>>(),
        [("octo", "@tandem-test fix this", false, 0)]
    );
    assert_eq!(fake.issue_comments("acme", "widgets", 1).len(), 2);
}

#[tokio::test]
async fn issue_comments_come_a_page_at_a_time_and_only_their_authors_edit_them() {
    let (_root, fake) = started().await;
    let (token, _) = mint(&fake, json!({})).await;
    let auth = format!("Bearer {token}");
    fake.add_user("octo", 501, "Octo Cat", "octo@example.com");
    let number = fake.open_issue("acme", "widgets", "octo", "Crash on start", "It crashes.");
    let comments = format!("/repos/acme/widgets/issues/{number}/comments");

    let (status, body) = api(
        &fake,
        "POST",
        &comments,
        Some(&auth),
        Some(json!({ "body": "Looking" })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_urls_under(&body, &fake.url());
    let mine: Comment = parse(&body);
    assert_eq!(
        (mine.body.as_deref(), mine.user.login.as_str()),
        (Some("Looking"), "tandem-test[bot]")
    );
    assert_eq!(
        mine.issue_url,
        Some(format!("{}/repos/acme/widgets/issues/{number}", fake.url()))
    );
    let (status, body) = api(
        &fake,
        "POST",
        &comments,
        Some(&auth),
        Some(json!({ "body": "" })),
    )
    .await;
    assert_eq!((status, &body["errors"][0]["field"]), (422, &json!("body")));
    let theirs: Vec<u64> = (1..=4)
        .map(|i| {
            let payload =
                fake.issue_comment_payload("acme", "widgets", number, "octo", &format!("note {i}"));
            payload["comment"]["id"].as_u64().unwrap()
        })
        .collect();

    // Everything fits in GitHub's default page of 30: no Link header.
    let (status, link, body) = get_with_link(&fake, &comments, &auth).await;
    assert_eq!((status, link), (200, None));
    assert_urls_under(&body, &fake.url());
    let all: Vec<Comment> = parse(&body);
    assert_eq!(
        all.iter()
            .map(|c| c.body.as_deref().unwrap())
            .collect::<Vec<_>>(),
        ["Looking", "note 1", "note 2", "note 3", "note 4"],
        "oldest first"
    );
    let (_, link, body) = get_with_link(&fake, &format!("{comments}?per_page=500"), &auth).await;
    assert_eq!(
        (link, body.as_array().unwrap().len()),
        (None, 5),
        "per_page is cut to 100"
    );

    // Two a page: follow `next` as octocrab does, checking each page's links.
    let page_url = |p: u32| format!("{}{comments}?per_page=2&page={p}", fake.url());
    let (status, link, body) = get_with_link(&fake, &format!("{comments}?per_page=2"), &auth).await;
    assert_eq!(status, 200);
    let first = links(&link.expect("more pages"));
    assert_eq!(
        first,
        [
            ("next".to_string(), page_url(2)),
            ("last".to_string(), page_url(3))
        ]
        .into()
    );
    let mut bodies: Vec<String> = parse::<Vec<Comment>>(&body)
        .into_iter()
        .filter_map(|c| c.body)
        .collect();
    let (_, link, body) = get_with_link(&fake, &first["next"], &auth).await;
    let middle = links(&link.unwrap());
    assert_eq!(
        middle,
        [
            ("prev".to_string(), page_url(1)),
            ("next".to_string(), page_url(3)),
            ("last".to_string(), page_url(3)),
            ("first".to_string(), page_url(1)),
        ]
        .into()
    );
    bodies.extend(
        parse::<Vec<Comment>>(&body)
            .into_iter()
            .filter_map(|c| c.body),
    );
    let (_, link, body) = get_with_link(&fake, &middle["next"], &auth).await;
    let last = links(&link.unwrap());
    assert_eq!(
        last,
        [
            ("prev".to_string(), page_url(2)),
            ("first".to_string(), page_url(1))
        ]
        .into()
    );
    bodies.extend(
        parse::<Vec<Comment>>(&body)
            .into_iter()
            .filter_map(|c| c.body),
    );
    assert_eq!(bodies, ["Looking", "note 1", "note 2", "note 3", "note 4"]);
    let (status, _, body) = get_with_link(&fake, &page_url(9), &auth).await;
    assert_eq!(
        (status, body),
        (200, json!([])),
        "past the end: an empty page"
    );

    // `since` (as octocrab sends it, with a fraction) filters, and the links keep it.
    let since = "2000-01-01T00:00:00.5Z";
    let (_, link, body) = get_with_link(
        &fake,
        &format!("{comments}?per_page=2&since={since}"),
        &auth,
    )
    .await;
    assert_eq!(body.as_array().unwrap().len(), 2);
    assert!(
        links(&link.unwrap())["next"]
            .contains("since=2000-01-01T00%3A00%3A00.5Z&per_page=2&page=2"),
        "the filter carries over"
    );
    let (_, _, body) = get_with_link(
        &fake,
        &format!("{comments}?since=2999-01-01T00:00:00Z"),
        &auth,
    )
    .await;
    assert_eq!(body, json!([]));
    let (status, _, _) = get_with_link(&fake, &format!("{comments}?since=yesterday"), &auth).await;
    assert_eq!(status, 422);

    // One comment by id, then edits: octocrab's `update_comment` POSTs, GitHub documents PATCH.
    let one = format!("/repos/acme/widgets/issues/comments/{}", mine.id);
    let (status, body) = api(&fake, "GET", &one, Some(&auth), None).await;
    assert_eq!((status, parse::<Comment>(&body).id), (200, mine.id));
    let (status, body) = api(
        &fake,
        "POST",
        &one,
        Some(&auth),
        Some(json!({ "body": "Fixed in #2" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse::<Comment>(&body).body.as_deref(), Some("Fixed in #2"));
    let (status, body) = api(
        &fake,
        "PATCH",
        &one,
        Some(&auth),
        Some(json!({ "body": "Fixed in #3" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = api(&fake, "GET", &one, Some(&auth), None).await;
    assert_eq!(parse::<Comment>(&body).body.as_deref(), Some("Fixed in #3"));
    let (status, _) = api(&fake, "PATCH", &one, Some(&auth), Some(json!({}))).await;
    assert_eq!(status, 422, "an edit needs a body");
    let (status, _) = api(&fake, "PATCH", &one, None, Some(json!({ "body": "x" }))).await;
    assert_eq!(status, 401);

    // Someone else's comment is not the App's to edit; an unknown id, or another
    // repository's comment, is not found.
    let someone_elses = format!("/repos/acme/widgets/issues/comments/{}", theirs[0]);
    let (status, body) = api(
        &fake,
        "PATCH",
        &someone_elses,
        Some(&auth),
        Some(json!({ "body": "mine now" })),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["message"], "Resource not accessible by integration");
    assert_eq!(body["documentation_url"], "https://docs.github.com/rest");
    let (status, _) = api(
        &fake,
        "PATCH",
        "/repos/acme/widgets/issues/comments/424242",
        Some(&auth),
        Some(json!({ "body": "x" })),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = api(
        &fake,
        "GET",
        "/repos/acme/widgets/issues/comments/424242",
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = api(
        &fake,
        "GET",
        &format!("/repos/acme/gadgets/issues/comments/{}", mine.id),
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(status, 404, "the comment is in acme/widgets");

    // A person edits their own comment and not the App's.
    let octo = sign_in(&fake, "octo").await;
    let (status, body) = api(
        &fake,
        "PATCH",
        &someone_elses,
        Some(&octo),
        Some(json!({ "body": "note 1, edited" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = api(
        &fake,
        "PATCH",
        &one,
        Some(&octo),
        Some(json!({ "body": "hijacked" })),
    )
    .await;
    assert_eq!(status, 403);

    let recorded = fake.issue_comments("acme", "widgets", number);
    assert_eq!(
        recorded
            .iter()
            .map(|c| (c.id, c.author.as_str(), c.body.as_str(), c.by_app, c.edits))
            .collect::<Vec<_>>(),
        [
            (mine.id, "tandem-test[bot]", "Fixed in #3", true, 2),
            (theirs[0], "octo", "note 1, edited", false, 1),
            (theirs[1], "octo", "note 2", false, 0),
            (theirs[2], "octo", "note 3", false, 0),
            (theirs[3], "octo", "note 4", false, 0),
        ]
    );
    assert_eq!(fake.comments(), recorded, "the only comments anywhere");
    let (_, body) = api(
        &fake,
        "GET",
        &format!("/repos/acme/widgets/issues/{number}"),
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(parse::<Issue>(&body).comments, 5);
}
