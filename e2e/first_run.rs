//! The first run as a new user meets it, in headless Chromium: the dashboard says why sessions
//! cannot run their agent yet, the setup page sets the model against the scripted model (with
//! a connection test) and adds the first repo, a session started from the dashboard reaches
//! `ready`, its terminal runs a command through the live channel and its agent answers.
//!
//! It runs against an in-process server on the test image, and — when `cargo xtask test`'s
//! smoke test sets `TANDEM_E2E_UP_URL` and `TANDEM_E2E_UP_CODE` — against the real server
//! `cargo xtask up` started, in `up`'s default profile and with its own image.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use scripted_model::{Reply, ScriptedModel};

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

/// The first snapshot build and boot can take a while on a cold machine.
const BOOT_WAIT: Duration = Duration::from_secs(240);

/// Where the test runs: `up`'s server, or one started here.
enum Target {
    Up { url: String, code: String },
    Local(Box<TestServer>),
}

impl Target {
    fn url(&self) -> &str {
        match self {
            Target::Up { url, .. } => url,
            Target::Local(s) => &s.url,
        }
    }
    fn code(&self) -> &str {
        match self {
            Target::Up { code, .. } => code,
            Target::Local(s) => &s.first_login_code,
        }
    }
}

async fn target() -> Option<Target> {
    if let (Ok(url), Ok(code)) = (
        std::env::var("TANDEM_E2E_UP_URL"),
        std::env::var("TANDEM_E2E_UP_CODE"),
    ) {
        return Some(Target::Up { url, code });
    }
    let web = web_dir()?;
    let images = crate::fixtures::test_images().await?;
    let recipe = crate::fixtures::test_recipe();
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
    })
    .await?;
    Some(Target::Local(Box::new(s)))
}

/// Waits up to `limit` for the element at `css` to contain `needle`.
async fn wait_long(b: &Browser, css: &str, needle: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(el) = b.client.find(Locator::Css(css)).await
            && let Ok(text) = el.text().await
            && text.contains(needle)
        {
            return text;
        }
        if Instant::now() >= deadline {
            let page = match b.client.find(Locator::Css("main")).await {
                Ok(m) => m.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            panic!("timed out waiting for {css:?} to contain {needle:?}; the page says:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn set_field(b: &Browser, css: &str, value: &str) {
    let el = b
        .client
        .wait()
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css:?}: {e}"));
    el.clear().await.unwrap();
    el.send_keys(value).await.unwrap();
}

#[tokio::test]
async fn a_new_user_sets_up_the_model_and_a_repo_on_the_setup_page_and_gets_a_first_reply() {
    let Some(t) = target().await else { return };
    let model = ScriptedModel::start(vec![Reply::text("Hello from your first session.")]).await;
    model.fallback(Reply::text("Noted."));
    let src = crate::fixtures::git_repo();

    let b = Browser::start("first-run").await;
    b.sign_in(t.url(), t.code()).await;
    // No model yet: the dashboard says so, and points the admin at the setup page.
    b.wait_text("#host-banner", "no model is configured").await;
    b.wait_text("#first-run", "Set up Tandem").await;
    b.screenshot("01-dashboard-first-run").await;
    b.click("#first-run-setup").await;
    b.wait_path(|p| p == "/settings").await;

    // The model, tested, then saved.
    set_field(&b, "#setting-model-url", &model.base_url).await;
    set_field(&b, "#setting-model", "scripted-1").await;
    set_field(&b, "#setting-model-key", "sk-first-run").await;
    b.click("#setting-model-test").await;
    let result = b.wait_text("#model-test-result", "answered").await;
    assert!(result.starts_with('✓'), "{result}");
    assert_eq!(
        model.model_lists(),
        vec![Some("Bearer sk-first-run".into())]
    );
    b.client
        .execute("window.scrollTo(0, 0)", vec![])
        .await
        .unwrap();
    b.screenshot("02-settings-model").await;
    b.click("#setting-model-save").await;
    b.wait_text("#setting-saved", "Saved").await;
    b.wait_text("#setup-ready", "Sessions can start here").await;

    // The first repo, on the same page.
    set_field(&b, "#repo-name", "demo/app").await;
    set_field(&b, "#repo-url", src.path().to_str().unwrap()).await;
    b.click("#repo-submit").await;
    b.wait_text("#setup-repo .repo-names", "demo/app").await;
    b.screenshot("03-setup-repo").await;

    // A session from the dashboard: it boots, the terminal runs a command, the agent answers.
    b.click("#setup-done").await;
    b.wait_path(|p| p == "/").await;
    b.wait_text("#new-session-repo", "demo/app").await;
    assert!(
        b.client.find(Locator::Css("#host-banner")).await.is_err(),
        "no banner once the server is ready"
    );
    b.type_into("#new-session-prompt", "Say hello").await;
    b.click("#new-session-submit").await;
    b.wait_path(|p| p.starts_with("/sessions/")).await;
    wait_long(&b, "#timeline", "Hello from your first session.", BOOT_WAIT).await;
    wait_long(&b, "#session-state", "idle", Duration::from_secs(30)).await;
    // The session's model budget in use, where the person looks.
    b.wait_text("#model-budget", "of 2000").await;
    b.click(".pane:not(.hidden) .xterm").await;
    b.type_into(
        ".pane:not(.hidden) .xterm-helper-textarea",
        "echo first-run-$((6*7))\n",
    )
    .await;
    wait_long(
        &b,
        ".pane:not(.hidden) .xterm-rows",
        "first-run-42",
        Duration::from_secs(30),
    )
    .await;
    // The driver's terminal fits its pane: no horizontal scrollbar.
    let overflow = b
        .client
        .execute(
            "const t = document.querySelector('.pane:not(.hidden) .terminal'); return t.scrollWidth - t.clientWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        overflow.as_i64(),
        Some(0),
        "the terminal overflows its pane"
    );
    b.screenshot("04-first-session").await;
    // The model got the prompt, with the key the setup page stored.
    let asked = model.requests();
    assert!(
        asked.iter().any(|r| r.transcript().contains("Say hello")
            && r.authorization.as_deref() == Some("Bearer sk-first-run")),
        "{asked:?}"
    );
    b.close().await;
}

/// The host cannot start workspaces (its agent binary is missing): the dashboard's banner and
/// the session's page say why and what to do; putting the binary back starts the queued
/// session, with no restart of the server, and the page follows it to `ready`.
#[tokio::test]
async fn a_missing_agent_binary_is_shown_where_people_look_and_the_session_starts_once_it_is_back()
{
    let Some(web) = web_dir() else { return };
    let Some(images) = crate::fixtures::test_images().await else {
        return;
    };
    let recipe = crate::fixtures::test_recipe();
    let bin_dir = tempfile::tempdir().unwrap();
    let agent = bin_dir.path().join("tandem-workspace-agent");
    let configured = agent.clone();
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.images_dir = images;
        c.image_recipe = Some(recipe);
        c.agent_bin = Some(configured);
    })
    .await
    .unwrap();
    let api = tandem_server::client::Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    let (_src, repo) = crate::fixtures::repo_with(&api, "demo/missing", &[]).await;
    let b = Browser::start("first-run-missing-agent").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.wait_text("#host-banner", "workspace agent binary is missing")
        .await;
    b.wait_text("#host-banner", "cargo build").await;
    let id = api
        .create_session(&tandem_protocol::CreateSession {
            repo_id: repo.id,
            prompt: String::new(),
            branch: None,
            agent: Some(tandem_protocol::AgentSpec::None),
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    b.client
        .goto(&format!("{}/sessions/{id}", s.url))
        .await
        .unwrap();
    b.wait_text("#session-waiting", "workspace agent binary is missing")
        .await;
    b.wait_text("#session-state", "queued").await;
    b.screenshot("01-waiting").await;
    // Put back: the server notices by itself and the page follows the session.
    let built =
        std::path::Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-workspace-agent");
    std::fs::copy(&built, &agent).unwrap();
    wait_long(&b, "#session-state", "ready", Duration::from_secs(60)).await;
    assert!(
        b.client
            .find(Locator::Css("#session-waiting"))
            .await
            .is_err(),
        "the waiting banner goes once the session starts"
    );
    b.screenshot("02-started").await;
    b.close().await;
}

/// A newcomer with no `tandem.toml`: the model field takes the name typed (its default is a
/// placeholder, not text to type after), a local path is refused until an admin allows its
/// directory on the same page (which says the server's git reads it as root), then it is added.
#[tokio::test]
async fn a_newcomer_allows_a_local_repo_directory_on_the_settings_page_and_types_a_model_name() {
    let Some(web) = web_dir() else { return };
    let s = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
        c.local_repo_dirs = Vec::new();
    })
    .await
    .unwrap();
    let parent = tempfile::tempdir().unwrap();
    let repo = parent.path().join("app");
    std::fs::create_dir(&repo).unwrap();
    let src = crate::fixtures::git_repo();
    let ok = std::process::Command::new("git")
        .args(["clone", "-q"])
        .arg(src.path())
        .arg(&repo)
        .status()
        .unwrap()
        .success();
    assert!(ok);

    let b = Browser::start("first-run-local-dirs").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client.goto(&format!("{}/settings", s.url)).await.unwrap();
    // Typed into as a person types (no clearing first): the value is what was typed.
    b.type_into("#setting-model", "scripted-1").await;
    let typed = b
        .client
        .find(Locator::Css("#setting-model"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(typed.as_deref(), Some("scripted-1"));
    let placeholder = b
        .client
        .find(Locator::Css("#setting-model"))
        .await
        .unwrap()
        .attr("placeholder")
        .await
        .unwrap();
    assert!(
        placeholder.is_some_and(|p| !p.is_empty()),
        "the default shows as a placeholder"
    );

    // A local path before any directory is allowed: refused, saying where to allow it.
    set_field(&b, "#repo-name", "demo/local").await;
    set_field(&b, "#repo-url", repo.to_str().unwrap()).await;
    b.click("#repo-submit").await;
    b.wait_text("#setup-repo", "Settings → Local repos").await;
    // The admin allows the directory; the page says what that means.
    b.click("#local-dirs summary").await;
    b.wait_text("#local-dirs", "reads these directories as root")
        .await;
    b.type_into("#setting-local-dirs", parent.path().to_str().unwrap())
        .await;
    b.click("#setting-local-dirs-save").await;
    b.wait_text("#local-dirs-saved", "Saved").await;
    b.wait_text("#local-dirs-source", "set here").await;
    b.click("#repo-submit").await;
    b.wait_text("#setup-repo .repo-names", "demo/local").await;
    b.client
        .execute(
            "document.getElementById('local-dirs').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    b.screenshot("local-dirs").await;
    b.close().await;

    // Stored: the server keeps it, and tandem.toml's value would win over it.
    let api = tandem_server::client::Client::new(&s.url, Some(s.admin_token.clone())).unwrap();
    assert!(
        api.repos()
            .await
            .unwrap()
            .iter()
            .any(|r| r.name == "demo/local")
    );
}
