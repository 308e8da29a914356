//! GitHub end to end against a fake github.com (`tests/fake-github`: the REST endpoints the
//! server uses, OAuth, and real git smart HTTP over `git http-backend` checking installation
//! tokens) and real workspaces: sign-in, import, a session's pull request with commits by the
//! prompting person, follow-up pushes, webhooks, comments as prompts, credential revocation, and
//! the refusals (not installed, stale base, protected branch, bad signature).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use fake_github::{APP_PRIVATE_KEY_PEM, APP_PUBLIC_KEY_PEM, APP_SLUG, FakeGithub};
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::github::{PrState, PullRequest};
use tandem_protocol::*;

use crate::agent_runs::wait_events;
use crate::harness::TestServer;
use crate::session_workspaces::{events, exec, source_repo};
use crate::snapshots::{git, wait_built};

const APP_ID: u64 = 4242;
pub(crate) const WEBHOOK_SECRET: &str = "whsec-test-3b1f";
const CLIENT_ID: &str = "Iv1.tandemtest";
const CLIENT_SECRET: &str = "oauth-secret-test-91c2";

/// Everything the server logs while this test binary runs (to look for leaked tokens).
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "tandem_server=debug,tower_http=debug",
            ))
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

pub(crate) struct World {
    pub(crate) s: TestServer,
    pub(crate) gh: FakeGithub,
    _root: tempfile::TempDir,
    _src: tempfile::TempDir,
    pub(crate) model: ScriptedModel,
}

/// A fake GitHub with `acme/calc` (installed) and `acme/private` (not), a server configured
/// for the App, its secrets stored.
pub(crate) async fn world(script: Vec<Reply>) -> Option<World> {
    world_on(crate::harness::Backend::Sqlite, script, |_| {}).await
}

/// [`world`] on `backend`, with `tweak` applied to the server's configuration last.
pub(crate) async fn world_on(
    backend: crate::harness::Backend,
    script: Vec<Reply>,
    tweak: impl FnOnce(&mut tandem_server::config::Config),
) -> Option<World> {
    let logs = captured_logs();
    drop(logs);
    let root = tempfile::tempdir().unwrap();
    let gh = FakeGithub::start(root.path(), APP_ID, APP_PUBLIC_KEY_PEM).await;
    let bare = gh.add_repo("acme", "calc", "main");
    gh.add_repo("acme", "private", "main");
    gh.install(77, "acme", &["acme/calc"]);
    gh.add_user("alice-gh", 1001, "Alice Liddell", "alice@example.com");
    gh.set_browser_user("alice-gh");
    gh.set_oauth_client(CLIENT_ID, CLIENT_SECRET);

    let src = source_repo("[workspace]\nsetup = []\n");
    std::fs::write(src.path().join("calc.sh"), "echo $((2 - 2))\n").unwrap();
    std::fs::write(
        src.path().join("test.sh"),
        "[ \"$(sh calc.sh)\" = 4 ] && echo 'tests pass' || { echo 'tests FAIL'; exit 1; }\n",
    )
    .unwrap();
    std::fs::write(src.path().join("shot.png"), PNG).unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "calc"]);
    git(
        src.path(),
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );

    let model = ScriptedModel::start(script).await;
    let (model_url, api) = (model.base_url.clone(), gh.url());
    let s = crate::workspaces::server_on(backend, move |c| {
        c.agents.model_base_url = Some(model_url);
        c.agents.model = "scripted-1".into();
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
            issue_label: Some("tandem".into()),
        });
        tweak(c);
    })
    .await?;
    for (name, value) in [
        ("github_private_key", APP_PRIVATE_KEY_PEM),
        ("github_webhook_secret", WEBHOOK_SECRET),
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
    Some(World {
        s,
        gh,
        _root: root,
        _src: src,
        model,
    })
}

/// Signs in through the OAuth web flow like a browser would; returns the session cookie's JWT.
pub(crate) async fn sign_in_with_github(w: &World) -> String {
    let done = github_callback(w).await;
    assert_eq!(
        done.status(),
        302,
        "{}",
        done.text().await.unwrap_or_default()
    );
    assert_eq!(done.headers()["location"], "/");
    cookie_of(&done, tandem_protocol::limits::SESSION_COOKIE)
}

/// The OAuth web flow up to the server's answer to GitHub's redirect back.
async fn github_callback(w: &World) -> reqwest::Response {
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let start = no_redirects
        .get(format!("{}/api/auth/github", w.s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status(), 302);
    let authorize = start.headers()["location"].to_str().unwrap().to_string();
    assert!(
        authorize.starts_with(&format!(
            "{}/login/oauth/authorize?client_id={CLIENT_ID}",
            w.gh.url()
        )),
        "{authorize}"
    );
    let binding = cookie_of(&start, "tandem_flow");
    let back = no_redirects.get(&authorize).send().await.unwrap();
    assert_eq!(back.status(), 302);
    let callback = back.headers()["location"].to_str().unwrap().to_string();
    assert!(
        callback.starts_with(&format!("{}/api/auth/github/callback?", w.s.url)),
        "{callback}"
    );
    // Without the browser's binding cookie the answer is refused (another browser started it).
    let forged = no_redirects.get(&callback).send().await.unwrap();
    assert_eq!(forged.status(), 401);
    no_redirects
        .get(&callback)
        .header("cookie", format!("tandem_flow={binding}"))
        .send()
        .await
        .unwrap()
}

fn cookie_of(res: &reqwest::Response, name: &str) -> String {
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| {
            c.strip_prefix(&format!("{name}="))
                .map(|rest| rest.split(';').next().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("no {name} cookie"))
}

pub(crate) async fn import(w: &World) -> String {
    let offered: Vec<tandem_protocol::github::GithubRepo> =
        w.s.get("/api/github/repos").send().await.parse();
    assert_eq!(
        offered
            .iter()
            .map(|r| r.full_name.as_str())
            .collect::<Vec<_>>(),
        ["acme/calc"],
        "only installed repos are offered"
    );
    let not_installed =
        w.s.post("/api/github/repos", json!({ "full_name": "acme/private" }))
            .send()
            .await;
    let msg = not_installed.assert_error(StatusCode::CONFLICT, "app_not_installed");
    assert!(msg.contains("/apps/tandem-test/installations/new"), "{msg}");
    let res =
        w.s.post("/api/github/repos", json!({ "full_name": "acme/calc" }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let repo: Repo = res.parse();
    assert_eq!(repo.url, format!("{}/acme/calc.git", w.gh.url()));
    let snap: Snapshot =
        w.s.req(Method::POST, &format!("/api/repos/{}/snapshots", repo.id))
            .bearer(&w.s.admin_token)
            .send()
            .await
            .parse();
    assert_eq!(
        wait_built(&w.s, &snap.id.to_string()).await.state,
        SnapshotState::Ready,
        "the mirror fetched with the App's token"
    );
    repo.id.to_string()
}

fn bare(w: &World) -> std::path::PathBuf {
    w._root.path().join("acme/calc.git")
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `git ls-remote` against the fake with `token` as the password: does GitHub take it?
fn token_works(w: &World, token: &str) -> bool {
    let url = format!("{}/acme/calc.git", w.gh.url()).replacen(
        "http://",
        &format!("http://x-access-token:{token}@"),
        1,
    );
    std::process::Command::new("git")
        .args(["-c", "credential.helper=", "ls-remote", &url])
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap()
        .status
        .success()
}

pub(crate) async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_session_becomes_a_pull_request_by_its_prompting_person_kept_up_to_date_and_tracked() {
    let script = vec![
        Reply::tool(
            "edit_file",
            json!({ "path": "calc.sh", "old_text": "2 - 2", "new_text": "2 + 2" }),
        )
        .for_prompt("Fix the sum")
        .at_step(0),
        Reply::tool("run_command", json!({ "command": "sh test.sh" }))
            .for_prompt("Fix the sum")
            .at_step(1),
        Reply::tool(
            "attach_image",
            json!({ "path": "shot.png", "name": "after.png" }),
        )
        .for_prompt("Fix the sum")
        .at_step(2),
        Reply::text("Fixed the sum; the tests pass.")
            .for_prompt("Fix the sum")
            .at_step(3),
        Reply::tool(
            "write_file",
            json!({ "path": "NOTES.md", "content": "the sum is fixed\n" }),
        )
        .for_last_prompt("notes")
        .at_step(4),
        Reply::text("Added notes.")
            .for_last_prompt("notes")
            .at_step(5),
    ];
    let Some(w) = world(script).await else { return };
    w.model.fallback(Reply::text("Nothing else to do."));
    // A GitHub user nobody allowed gets no account.
    w.gh.add_user("mallory", 666, "Mallory", "mallory@example.com");
    w.gh.set_browser_user("mallory");
    let refused = github_callback(&w).await;
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("allowed_logins"));
    w.gh.set_browser_user("alice-gh");
    let alice_jwt = sign_in_with_github(&w).await;
    let me: User =
        w.s.req(Method::GET, "/api/me")
            .bearer(&alice_jwt)
            .send()
            .await
            .parse();
    assert_eq!(
        me.name, "alice-gh",
        "a new Tandem user named after the GitHub login"
    );
    let repo = import(&w).await;

    // Alice prompts; the turn's changes are committed as her.
    let created =
        w.s.req(Method::POST, "/api/sessions")
            .bearer(&alice_jwt)
            .json(&json!({ "repo_id": repo, "prompt": "Fix the sum in calc.sh" }))
            .send()
            .await;
    assert_eq!(
        created.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let id = created.parse::<SessionDetail>().session.id;
    let evs = wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::Committed { .. }))
    })
    .await;
    let committed = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Committed {
                author, message, ..
            } => Some((author.clone(), message.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(committed.0.name, "alice-gh");
    assert!(
        committed.1.starts_with("Fix the sum in calc.sh"),
        "{}",
        committed.1
    );

    // The workspace's git config names the helper, never a token.
    let config = exec(&w.s, id, "cat /etc/gitconfig .git/config")
        .await
        .stdout;
    assert!(
        config.contains("git-credential") && config.contains("insteadOf"),
        "{config}"
    );

    // The pull request, opened with Alice's own GitHub token.
    let res =
        w.s.req(Method::POST, &format!("/api/sessions/{id}/pr"))
            .bearer(&alice_jwt)
            .json(&json!({ "title": "Fix the sum" }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let pr: PullRequest = res.parse();
    assert!(
        pr.branch.starts_with("tandem/fix-the-sum-in-calc-sh-"),
        "{}",
        pr.branch
    );
    assert_eq!(
        (pr.base.as_str(), pr.state, pr.opened_by.as_str()),
        ("main", PrState::Open, "alice-gh")
    );
    let pulls = w.gh.pulls();
    assert_eq!(pulls.len(), 1);
    let opened = &pulls[0];
    let body = opened.body.clone().unwrap_or_default();
    assert_eq!(
        (
            opened.head.as_str(),
            opened.base.as_str(),
            opened.title.as_str(),
            opened.opened_by.as_str()
        ),
        (pr.branch.as_str(), "main", "Fix the sum", "alice-gh")
    );
    for section in [
        "## Summary",
        "Fixed the sum; the tests pass.",
        "## Prompts",
        "**alice-gh**",
        "Fix the sum in calc.sh",
        "## Tests run",
        "`sh test.sh",
        "✅ passed",
        "## Screenshots",
        "/api/artifacts/",
        &format!("/sessions/{id}"),
    ] {
        assert!(
            body.contains(section),
            "the body lacks {section:?}:\n{body}"
        );
    }
    // The screenshot link works without signing in, and a forged one does not.
    let link = body
        .split("](")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("an image link")
        .to_string();
    let shot = reqwest::get(&link).await.unwrap();
    assert_eq!(shot.headers()["content-type"], "image/png");
    assert_eq!(shot.bytes().await.unwrap().as_ref(), PNG);
    let forged = format!("{}0000", &link[..link.len() - 4]);
    assert_eq!(reqwest::get(&forged).await.unwrap().status(), 404);
    // On GitHub: the branch with Alice's commit.
    let log = git_out(
        &bare(&w),
        &[
            "log",
            "--format=%an <%ae>|%s",
            &format!("main..{}", pr.branch),
        ],
    );
    assert_eq!(
        log,
        "Alice Liddell <alice@example.com>|Fix the sum in calc.sh"
    );

    // A follow-up prompt's turn is committed and pushed to the same pull request.
    let follow =
        w.s.req(Method::POST, &format!("/api/sessions/{id}/prompts"))
            .bearer(&alice_jwt)
            .json(&json!({ "text": "Write some notes" }))
            .send()
            .await;
    assert_eq!(
        follow.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&follow.body)
    );
    let evs = wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::PrUpdated { .. }))
    })
    .await;
    let head = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::PrUpdated { head_sha, .. } => Some(head_sha.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(git_out(&bare(&w), &["rev-parse", &pr.branch]), head);
    assert_eq!(
        git_out(&bare(&w), &["log", "-1", "--format=%an|%s", &pr.branch]),
        "Alice Liddell|Write some notes"
    );
    assert_eq!(w.gh.pulls().len(), 1, "the same pull request, updated");

    // A comment mentioning the App becomes Alice's follow-up prompt; the bot's own do not.
    let before =
        w.s.get(&format!("/api/sessions/{id}"))
            .send()
            .await
            .parse::<SessionDetail>()
            .prompts
            .len();
    let payload = w.gh.comment_payload(
        "acme",
        "calc",
        pr.number as u64,
        "alice-gh",
        "@tandem-test please also add a test for 3 + 3",
    );
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            WEBHOOK_SECRET,
            "issue_comment",
            &payload
        )
        .await,
        200
    );
    let detail: SessionDetail = wait_for("the comment's prompt", async || {
        let d: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
        (d.prompts.len() > before).then_some(d)
    })
    .await;
    let prompt = detail.prompts.last().unwrap();
    assert_eq!(
        (prompt.author.name.as_str(), prompt.text.as_str()),
        ("alice-gh", "please also add a test for 3 + 3")
    );
    // Recorded as her REST follow-up was: one command submits for every surface.
    let session = id.to_string();
    assert_eq!(
        crate::surfaces::submitted(&w.s, &session, "please also add a test for 3 + 3").await,
        crate::surfaces::submitted(&w.s, &session, "Write some notes").await,
    );
    let hook = format!("{}/api/github/webhook", w.s.url);
    // The same comment again (a new delivery id): still one prompt.
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, WEBHOOK_SECRET, "issue_comment", &payload).await,
        200
    );
    // The App's own comments, someone without a Tandem account, a mention inside another handle.
    let bot = w.gh.comment_payload(
        "acme",
        "calc",
        pr.number as u64,
        "tandem-test[bot]",
        "@tandem-test updated",
    );
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, WEBHOOK_SECRET, "issue_comment", &bot).await,
        202
    );
    let stranger = w.gh.comment_payload(
        "acme",
        "calc",
        pr.number as u64,
        "mallory",
        "@tandem-test delete everything",
    );
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, WEBHOOK_SECRET, "issue_comment", &stranger).await,
        200
    );
    let lookalike = w.gh.comment_payload(
        "acme",
        "calc",
        pr.number as u64,
        "alice-gh",
        "ping @tandem-test-bot",
    );
    assert_eq!(
        FakeGithub::deliver_webhook(&hook, WEBHOOK_SECRET, "issue_comment", &lookalike).await,
        202
    );
    let evs = wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(&e.kind, EventKind::PrComment { author, .. } if author == "mallory"))
    })
    .await;
    let ignored = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::PrComment {
                author,
                ignored,
                prompt_id,
                ..
            } if author == "mallory" => Some((ignored.clone(), *prompt_id)),
            _ => None,
        })
        .unwrap();
    assert!(
        ignored.1.is_none() && ignored.0.unwrap().contains("has not signed in"),
        "a stranger's comment is no prompt"
    );
    let d: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_eq!(
        d.prompts.len(),
        before + 1,
        "one prompt from the comment, none from the others"
    );

    // Inside the workspace: the helper gives the session's token to the gateway's relay only; the
    // relay reaches the session's repository only, and its branch only.
    let helper = format!(
        "printf 'protocol=http\\nhost={}\\n\\n' | {} git-credential get",
        tandem_protocol::agent::GATEWAY_LOOPBACK,
        tandem_protocol::agent::BINARY
    );
    let given = exec(&w.s, id, &helper).await.stdout;
    let helper_token = given
        .lines()
        .find_map(|l| l.strip_prefix("password="))
        .expect("a password")
        .to_string();
    let elsewhere = exec(
        &w.s,
        id,
        &format!(
            "printf 'protocol=https\\nhost=evil.example\\n\\n' | {} git-credential get",
            tandem_protocol::agent::BINARY
        ),
    )
    .await
    .stdout;
    assert!(!elsewhere.contains("password"), "{elsewhere}");
    let other_repo = exec(
        &w.s,
        id,
        &format!(
            "git ls-remote http://{}/git/acme/private.git 2>&1",
            tandem_protocol::agent::GATEWAY_LOOPBACK
        ),
    )
    .await;
    assert_ne!(other_repo.exit_code, Some(0), "{}", other_repo.stdout);
    let to_main = exec(&w.s, id, "git push origin HEAD:refs/heads/main 2>&1").await;
    assert_ne!(to_main.exit_code, Some(0));
    assert!(
        to_main.stdout.contains("403") || to_main.stdout.contains("own branch"),
        "{}",
        to_main.stdout
    );
    assert_eq!(
        git_out(&bare(&w), &["log", "-1", "--format=%s", "main"]),
        "calc",
        "main untouched"
    );

    // A webhook with a bad signature is refused and records nothing.
    let n = events(&w.s, id).await.len();
    let merged = w.gh.merge_pull("acme", "calc", pr.number as u64);
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            "wrong-secret",
            "pull_request",
            &merged
        )
        .await,
        401
    );
    let after: Vec<Event> = events(&w.s, id).await;
    assert!(
        !after
            .iter()
            .any(|e| matches!(e.kind, EventKind::PrState { .. })),
        "nothing recorded"
    );
    let _ = n;
    // A review and a CI check on the pull request reach the session.
    let repo_json =
        json!({ "name": "calc", "full_name": "acme/calc", "owner": { "login": "acme" } });
    let review = json!({
        "action": "submitted",
        "review": { "state": "APPROVED", "body": "Looks right.", "user": { "login": "rita" } },
        "pull_request": { "number": pr.number },
        "repository": repo_json,
        "sender": { "login": "rita" },
    });
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            WEBHOOK_SECRET,
            "pull_request_review",
            &review
        )
        .await,
        200
    );
    let check = json!({
        "action": "completed",
        "check_run": { "name": "ci / test", "status": "completed", "conclusion": "success", "head_sha": "0", "pull_requests": [{ "number": pr.number }] },
        "repository": repo_json,
    });
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            WEBHOOK_SECRET,
            "check_run",
            &check
        )
        .await,
        200
    );
    let evs = wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::PrCheck { .. }))
    })
    .await;
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::PrReview { reviewer, state, .. } if reviewer == "rita" && state == "approved")));
    // The same signed review replayed under another delivery id (the id is not signed) is
    // handled once.
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            WEBHOOK_SECRET,
            "pull_request_review",
            &review
        )
        .await,
        200
    );
    let reviews = events(&w.s, id)
        .await
        .iter()
        .filter(|e| matches!(e.kind, EventKind::PrReview { .. }))
        .count();
    assert_eq!(reviews, 1, "a replayed delivery was handled again");
    // Nor does the event header, which is not signed either: a signed check, replayed as a
    // `status` delivery (which would read its `state` as a failing commit status), is the same
    // signed body, handled once.
    let head: PullRequest =
        w.s.get(&format!("/api/sessions/{id}/pr"))
            .send()
            .await
            .parse();
    let both = json!({
        "action": "completed",
        "check_run": { "name": "ci / lint", "status": "completed", "conclusion": "success", "head_sha": head.head_sha, "pull_requests": [{ "number": pr.number }] },
        "context": "ci / lint", "state": "failure", "sha": head.head_sha,
        "repository": repo_json,
    });
    for event in ["check_run", "status"] {
        assert_eq!(
            FakeGithub::deliver_webhook(
                &format!("{}/api/github/webhook", w.s.url),
                WEBHOOK_SECRET,
                event,
                &both
            )
            .await,
            200,
            "{event}"
        );
    }
    let lint: Vec<Option<String>> = events(&w.s, id)
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::PrCheck {
                name, conclusion, ..
            } if name == "ci / lint" => Some(conclusion),
            _ => None,
        })
        .collect();
    assert_eq!(
        lint,
        vec![Some("success".to_string())],
        "the replay under another event was handled"
    );
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::PrCheck { name, conclusion, .. } if name == "ci / test" && conclusion.as_deref() == Some("success"))));
    // A failing check sends the session a follow-up from its repo's CI-failure automation, at
    // most its limit per pull request.
    let made = w
        .s
        .post(
            "/api/automations",
            json!({ "repo_id": repo, "name": "fix ci", "prompt": "Fix the failing check.", "trigger": { "kind": "ci_failure", "max_runs": 2 } }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let automation = made.json()["automation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for n in 1..=3 {
        let failed = json!({
            "action": "completed",
            "check_run": { "name": format!("ci / test {n}"), "status": "completed", "conclusion": "failure", "head_sha": "0", "pull_requests": [{ "number": pr.number }] },
            "repository": repo_json,
        });
        assert_eq!(
            FakeGithub::deliver_webhook(
                &format!("{}/api/github/webhook", w.s.url),
                WEBHOOK_SECRET,
                "check_run",
                &failed
            )
            .await,
            200
        );
    }
    let runs =
        w.s.get(&format!("/api/automations/{automation}/runs"))
            .send()
            .await
            .json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(
        runs.iter()
            .filter(|r| r["session_id"] == json!(id.to_string()))
            .count(),
        2,
        "{runs:?}"
    );
    assert!(
        runs[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("its most"),
        "{runs:?}"
    );
    let prompts = w.s.get(&format!("/api/sessions/{id}")).send().await.json()["prompts"].clone();
    let fixes: Vec<&serde_json::Value> = prompts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["author"]["kind"] == "automation")
        .collect();
    assert_eq!(fixes.len(), 2);
    assert!(
        fixes[0]["text"]
            .as_str()
            .unwrap()
            .contains("The check `ci / test 1` ended `failure`")
    );
    // Recorded as its creator's (the admin's) REST prompt is, as the automation.
    let res =
        w.s.post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "Fix the failing check, by REST" }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let said = crate::surfaces::assert_submits_as_rest_does(
        &w.s,
        &id.to_string(),
        fixes[0]["text"].as_str().unwrap(),
        "Fix the failing check, by REST",
        "automation",
    )
    .await;
    assert_eq!(said.name, json!("fix ci (automation)"), "{said:?}");
    // Merged: the session hears it.
    assert_eq!(
        FakeGithub::deliver_webhook(
            &format!("{}/api/github/webhook", w.s.url),
            WEBHOOK_SECRET,
            "pull_request",
            &merged
        )
        .await,
        200
    );
    wait_events(&w.s, id, |e| {
        e.iter().any(|e| {
            matches!(
                &e.kind,
                EventKind::PrState {
                    state: PrState::Merged,
                    ..
                }
            )
        })
    })
    .await;
    let shown: PullRequest =
        w.s.get(&format!("/api/sessions/{id}/pr"))
            .send()
            .await
            .parse();
    assert_eq!(shown.state, PrState::Merged);

    // No GitHub token is inside the workspace: the helper gives an opaque secret the relay
    // takes, and GitHub does not.
    let minted = w.gh.minted_tokens();
    assert!(
        helper_token.starts_with(tandem_server::gateway::GIT_SECRET_PREFIX),
        "{helper_token}"
    );
    assert!(
        !minted.iter().any(|t| t.token == helper_token),
        "the helper gave a real GitHub token"
    );
    assert!(
        !token_works(&w, &helper_token),
        "GitHub takes the helper's secret"
    );
    // The session's token, which the relay used for the pushes: scoped to this repository,
    // working until the session stops.
    let (sealed, _) = tandem_store::github::credential(&w.s.state.db, id)
        .await
        .unwrap()
        .expect("the session has a token");
    let session_token =
        w.s.state
            .secrets
            .open_value(&format!("github.session.{id}"), &sealed)
            .unwrap();
    let scoped = minted
        .iter()
        .find(|t| t.token == session_token)
        .expect("the session's token was minted by the App");
    assert_eq!(scoped.repos, ["acme/calc"], "scoped to the one repository");
    assert_eq!(
        scoped.permissions.get("contents").map(String::as_str),
        Some("write")
    );
    assert!(
        token_works(&w, &session_token),
        "the session's token works while it runs"
    );
    wait_state_not_running(&w.s, id).await;
    let config = exec(&w.s, id, "cat /etc/gitconfig .git/config 2>&1").await;
    assert!(
        !config.stdout.contains(&session_token),
        "a token in the git config"
    );
    let stopped =
        w.s.req(Method::POST, &format!("/api/sessions/{id}/stop"))
            .bearer(&w.s.admin_token)
            .send()
            .await;
    assert_eq!(
        stopped.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&stopped.body)
    );
    assert!(
        !token_works(&w, &session_token),
        "GitHub refuses the session's token once it stopped"
    );

    // It never appears in events, the audit log, the workspace's git config or the log.
    let all = serde_json::to_string(&events(&w.s, id).await).unwrap();
    assert!(!all.contains(&session_token), "a token in the events");
    let audit = String::from_utf8_lossy(&w.s.get("/api/audit").send().await.body).to_string();
    assert!(!audit.contains(&session_token), "a token in the audit log");
    let logs = String::from_utf8_lossy(&captured_logs().lock().unwrap()).to_string();
    assert!(
        logs.contains("minted the session's GitHub token"),
        "the log is captured"
    );
    for t in &minted {
        assert!(!logs.contains(&t.token), "a token in the server log");
    }
}

/// Waits until no turn runs (the comment's prompt has been worked through).
async fn wait_state_not_running(s: &TestServer, id: SessionId) {
    crate::session_workspaces::wait_state(s, id, &[SessionState::Idle, SessionState::Ready]).await;
}

#[tokio::test]
async fn an_expired_github_token_is_refreshed_so_the_pull_request_is_still_the_persons() {
    let script = vec![
        Reply::tool(
            "write_file",
            json!({ "path": "later.txt", "content": "hours later\n" }),
        )
        .at_step(0),
        Reply::text("Done.").at_step(1),
    ];
    let Some(w) = world(script).await else { return };
    let alice_jwt = sign_in_with_github(&w).await;
    let repo = import(&w).await;
    let created =
        w.s.req(Method::POST, "/api/sessions")
            .bearer(&alice_jwt)
            .json(&json!({ "repo_id": repo, "prompt": "Write it down" }))
            .send()
            .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.parse::<SessionDetail>().session.id;
    wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::Committed { .. }))
    })
    .await;
    // Eight hours on: GitHub no longer takes the token Alice signed in with.
    w.gh.expire_user_tokens("alice-gh");
    assert_eq!(w.gh.refreshes(), 0);
    let res =
        w.s.req(Method::POST, &format!("/api/sessions/{id}/pr"))
            .bearer(&alice_jwt)
            .json(&json!({ "title": "Write it down" }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let pr: PullRequest = res.parse();
    assert_eq!(pr.opened_by, "alice-gh", "opened as Alice, not the App");
    assert_eq!(w.gh.refreshes(), 1, "her token was refreshed once");
    assert_eq!(w.gh.pulls()[0].opened_by, "alice-gh");
    // Neither token reaches the log, the events or the audit log.
    let evs = crate::session_workspaces::events(&w.s, id).await;
    let text = serde_json::to_string(&evs).unwrap();
    assert!(!text.contains("gho_") && !text.contains("ghr_"));
    w.s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_stale_base_is_offered_a_rebase_and_a_protected_branch_refuses_the_push() {
    let script = vec![
        Reply::tool(
            "write_file",
            json!({ "path": "feature.txt", "content": "new feature\n" }),
        )
        .at_step(0),
        Reply::text("Done.").at_step(1),
    ];
    let Some(w) = world(script).await else { return };
    let repo = import(&w).await;
    let created: SessionDetail =
        w.s.post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Add a feature" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::Committed { .. }))
    })
    .await;
    // Committed as the admin (a local user: no GitHub identity).
    let branch_log = exec(&w.s, id, "git log -1 --format='%an <%ae>'")
        .await
        .stdout;
    assert_eq!(branch_log.trim(), "admin <admin@users.tandem.invalid>");

    // main moves on GitHub meanwhile.
    let other = tempfile::tempdir().unwrap();
    git(
        other.path(),
        &["clone", "-q", bare(&w).to_str().unwrap(), "."],
    );
    std::fs::write(other.path().join("UPSTREAM.md"), "moved\n").unwrap();
    git(other.path(), &["add", "-A"]);
    git(
        other.path(),
        &[
            "-c",
            "user.name=Bob",
            "-c",
            "user.email=bob@example.com",
            "commit",
            "-qm",
            "upstream",
        ],
    );
    git(other.path(), &["push", "-q", "origin", "HEAD:main"]);

    // The App's key is broken: no token can be minted, and the answer says so.
    let put_key = async |pem: &str| {
        let res =
            w.s.req(Method::PUT, "/api/secrets/github_private_key")
                .bearer(&w.s.admin_token)
                .json(&json!({ "value": pem }))
                .send()
                .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT);
    };
    put_key("-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----").await;
    let broken =
        w.s.post(&format!("/api/sessions/{id}/pr"), json!({}))
            .send()
            .await;
    let msg = broken.assert_error(StatusCode::BAD_GATEWAY, "bad_gateway");
    assert!(msg.contains("private key"), "{msg}");
    put_key(APP_PRIVATE_KEY_PEM).await;

    let stale =
        w.s.post(&format!("/api/sessions/{id}/pr"), json!({}))
            .send()
            .await;
    let msg = stale.assert_error(StatusCode::CONFLICT, "stale_base");
    assert!(msg.contains("\"rebase\": true"), "{msg}");
    assert!(w.gh.pulls().is_empty());

    // Branch protection on tandem/*: the rebase works, GitHub rejects the push, clearly.
    w.gh.protect_branch("acme", "calc", "tandem/*");
    let rejected =
        w.s.post(&format!("/api/sessions/{id}/pr"), json!({ "rebase": true }))
            .send()
            .await;
    let msg = rejected.assert_error(StatusCode::CONFLICT, "push_rejected");
    assert!(
        msg.contains("declined") || msg.contains("protected"),
        "{msg}"
    );
    assert!(w.gh.pulls().is_empty());
    // The session now sits on the new main.
    let on_top = exec(&w.s, id, "git log --format=%s -3").await.stdout;
    assert_eq!(
        on_top.lines().collect::<Vec<_>>(),
        ["Add a feature", "upstream", "calc"],
        "{on_top}"
    );

    // Opened by the App (the admin has no GitHub account).
    let bad_title =
        w.s.post(
            &format!("/api/sessions/{id}/pr"),
            json!({ "title": "x".repeat(300) }),
        )
        .send()
        .await;
    bad_title.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    std::fs::remove_file(bare(&w).join("hooks/update")).unwrap();
    let res =
        w.s.post(&format!("/api/sessions/{id}/pr"), json!({ "draft": true }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let pr: PullRequest = res.parse();
    assert_eq!(pr.opened_by, format!("{APP_SLUG}[bot]"));
    assert!(w.gh.pulls()[0].draft);
}

/// A GitHub repo follows each person's own GitHub permission: read lets them watch its
/// sessions, write lets them start them, none hides it (404).
#[tokio::test]
async fn a_persons_github_permission_decides_what_they_may_do_with_a_repo() {
    let Some(w) = world(vec![]).await else {
        return;
    };
    let repo = import(&w).await;
    let as_alice = |jwt: &str, method: Method, path: &str| {
        w.s.req(method, path)
            .header("cookie", &format!("tandem_session={jwt}"))
            .header("origin", &w.s.url)
    };
    let start = json!({ "repo_id": repo, "prompt": "", "agent": { "kind": "none" } });

    w.gh.set_permission("alice-gh", "acme/calc", "read");
    let jwt = sign_in_with_github(&w).await;
    let repos = as_alice(&jwt, Method::GET, "/api/repos").send().await;
    assert!(
        String::from_utf8_lossy(&repos.body).contains(&repo),
        "read: she sees the repo"
    );
    let refused = as_alice(&jwt, Method::POST, "/api/sessions")
        .json(&start)
        .send()
        .await;
    let msg = refused.assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert!(msg.contains("ask an admin"), "{msg}");

    w.gh.set_permission("alice-gh", "acme/calc", "write");
    let jwt = sign_in_with_github(&w).await;
    let made = as_alice(&jwt, Method::POST, "/api/sessions")
        .json(&start)
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let id = made.json()["session"]["id"].as_str().unwrap().to_string();

    w.gh.set_permission("alice-gh", "acme/calc", "none");
    let jwt = sign_in_with_github(&w).await;
    let gone = as_alice(&jwt, Method::GET, &format!("/api/repos/{repo}"))
        .send()
        .await;
    gone.assert_error(StatusCode::NOT_FOUND, "not_found");
    // Not even her own session there: the repo is not hers to see any more.
    let listed = as_alice(&jwt, Method::GET, "/api/repos").send().await;
    assert!(!String::from_utf8_lossy(&listed.body).contains(&repo));
    let own = as_alice(&jwt, Method::GET, &format!("/api/sessions/{id}"))
        .send()
        .await;
    own.assert_error(StatusCode::NOT_FOUND, "not_found");
    // The lookups went to GitHub with her own token.
    assert!(
        w.gh.requests()
            .iter()
            .any(|r| r.path == "/repos/acme/calc" && r.who == "user:alice-gh"),
        "{:?}",
        w.gh.requests()
    );
}
