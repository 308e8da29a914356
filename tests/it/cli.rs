//! The `tandem` CLI against a running server.

use std::process::Output;

use tandem_protocol::Session;
use tokio::process::Command;

use crate::harness::{Backend, TestServer, Transport};

const BIN: &str = env!("CARGO_BIN_EXE_tandem");

fn tandem(url: &str, token: Option<&str>) -> Command {
    let mut c = Command::new(BIN);
    for var in [
        "TANDEM_TOKEN",
        "TANDEM_URL",
        "TANDEM_DATA_DIR",
        "TANDEM_DATABASE_URL",
        "TANDEM_PUBLIC_URL",
    ] {
        c.env_remove(var);
    }
    c.env("TANDEM_URL", url);
    if let Some(t) = token {
        c.env("TANDEM_TOKEN", t);
    }
    c
}

async fn ok(cmd: &mut Command) -> String {
    let out: Output = cmd.output().await.expect("tandem runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "tandem failed: {}\nstdout: {stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn repo_session_and_token_commands_work_against_a_running_server() {
    let s = TestServer::start(Backend::Sqlite, Transport::Socket)
        .await
        .unwrap();
    let t = Some(s.admin_token.as_str());

    let out = ok(tandem(&s.url, t).args([
        "repo",
        "add",
        "demo",
        "https://example.invalid/demo.git",
        "--branch",
        "trunk",
    ]))
    .await;
    assert!(out.contains("demo") && out.contains("trunk"), "{out}");
    let out = ok(tandem(&s.url, t).args(["repo", "ls"])).await;
    assert!(
        out.lines().next().unwrap().starts_with("ID"),
        "a table with a header: {out}"
    );
    assert!(out.contains("https://example.invalid/demo.git"), "{out}");

    let out = ok(tandem(&s.url, t).args([
        "session",
        "new",
        "--repo",
        "demo",
        "Fix the flaky test\nin CI",
    ]))
    .await;
    assert!(
        out.contains("queued") && out.contains("Fix the flaky test"),
        "{out}"
    );

    let out = ok(tandem(&s.url, t).args(["session", "ls"])).await;
    assert!(
        out.contains("Fix the flaky test") && out.contains("queued") && out.contains("demo"),
        "{out}"
    );
    let json = ok(tandem(&s.url, t).args(["session", "ls", "--json", "--repo", "demo"])).await;
    let sessions: Vec<Session> = serde_json::from_str(&json).expect("--json prints JSON");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].branch, "trunk");

    let out = ok(tandem(&s.url, t).args(["session", "show", &sessions[0].id.to_string()])).await;
    assert!(
        out.contains("admin queued a prompt: Fix the flaky test"),
        "{out}"
    );
    assert!(out.contains("#1") && out.contains("#2"), "{out}");

    // A token made through the API works for the next command.
    let token = ok(tandem(&s.url, t).args(["token", "create", "--name", "ci"]))
        .await
        .trim()
        .to_string();
    assert!(token.starts_with("tdm_"), "{token}");
    let out = ok(tandem(&s.url, Some(&token)).args(["session", "ls"])).await;
    assert!(out.contains("Fix the flaky test"));

    // Without a token the server refuses, and the CLI says why.
    let out = tandem(&s.url, None)
        .args(["repo", "ls"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sign in"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Unknown repo name: a clear error, nothing created.
    let out = tandem(&s.url, t)
        .args(["session", "new", "--repo", "nope", "x"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no repo named \"nope\""));
}

#[tokio::test]
async fn local_admin_commands_mint_working_tokens_and_login_links() {
    let s = TestServer::start(Backend::Sqlite, Transport::Socket)
        .await
        .unwrap();
    let data = s.dir.path().join("data");
    let db_url = s.state.config.database_url.clone();
    let local = |args: &[&str]| {
        let mut c = tandem(&s.url, None);
        c.args(args).args([
            "--data-dir",
            data.to_str().unwrap(),
            "--database-url",
            &db_url,
            "--public-url",
            &s.url,
        ]);
        c
    };
    let token = ok(&mut local(&["token", "create", "--name", "bootstrap"]))
        .await
        .trim()
        .to_string();
    assert!(token.starts_with("tdm_"));
    let me = tandem_server::client::Client::new(&s.url, Some(token))
        .unwrap()
        .me()
        .await
        .unwrap();
    assert_eq!(me.name, "admin");

    let link = ok(&mut local(&["login-link"])).await.trim().to_string();
    assert!(
        link.starts_with(&format!("{}/login#code=tlc_", s.url)),
        "{link}"
    );
    let code = link.split_once("#code=").unwrap().1;
    let res = reqwest::Client::new()
        .post(format!("{}/api/auth/login", s.url))
        .json(&serde_json::json!({ "credential": code }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// `tandem doctor` says when the data dir keeps workspaces out of user namespaces: a parent the
/// workspace's uid cannot pass (as `/root` is) is named, with what to do.
#[tokio::test]
async fn doctor_reports_confinement_and_a_data_dir_that_rules_out_user_namespaces() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let closed = t.path().join("closed");
    std::fs::create_dir_all(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let checks = |dir: std::path::PathBuf| async move {
        let out = ok(tandem("http://127.0.0.1:1", None)
            .args(["doctor", "--json", "--data-dir"])
            .arg(dir))
        .await;
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["checks"].as_array().unwrap().clone()
    };
    let find = |checks: &[serde_json::Value], name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {checks:?}"))
            .clone()
    };
    let open = checks(t.path().join("open")).await;
    for name in ["seccomp", "user namespaces", "disk limits"] {
        assert_eq!(find(&open, name)["ok"], true, "{:?}", find(&open, name));
    }
    let behind = checks(closed.join("data")).await;
    let userns = find(&behind, "user namespaces");
    assert_eq!(userns["ok"], false, "{userns:?}");
    assert!(
        userns["detail"]
            .as_str()
            .unwrap()
            .contains("/var/lib/tandem"),
        "{userns:?}"
    );
}

#[tokio::test]
async fn user_commands_invite_list_change_roles_and_deactivate() {
    let s = TestServer::start(Backend::Sqlite, Transport::Socket)
        .await
        .unwrap();
    let t = Some(s.admin_token.as_str());
    let url =
        ok(tandem(&s.url, t).args(["user", "invite", "quinn", "--email", "quinn@acme.test"])).await;
    let code = url
        .trim()
        .split_once("#code=")
        .expect("the link")
        .1
        .to_string();
    let joined = s
        .req(axum::http::Method::POST, "/api/auth/invite")
        .json(&serde_json::json!({ "code": code }))
        .send()
        .await;
    assert_eq!(joined.status, axum::http::StatusCode::OK);

    let out = ok(tandem(&s.url, t).args(["user", "ls"])).await;
    let row = out
        .lines()
        .find(|l| l.contains("quinn"))
        .expect("quinn is listed");
    assert!(
        row.contains("quinn@acme.test") && row.contains("member") && row.contains("active"),
        "{row}"
    );
    let out = ok(tandem(&s.url, t).args(["user", "set-role", "quinn", "admin"])).await;
    assert!(out.contains("quinn is admin"), "{out}");
    let out = ok(tandem(&s.url, t).args(["user", "deactivate", "quinn"])).await;
    assert!(out.contains("deactivated"), "{out}");
    let people = s.get("/api/people").send().await.json();
    let quinn = people
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "quinn")
        .unwrap();
    assert!(quinn["deactivated_at"].is_number() && quinn["is_admin"] == true);
    // A person who is not there is named in the error.
    let out = tandem(&s.url, t)
        .args(["user", "deactivate", "nobody"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no person called \"nobody\""));
}

#[test]
fn tandem_extension_writes_the_package_for_a_server() {
    let out = tempfile::tempdir().unwrap();
    let res = std::process::Command::new(BIN)
        .args([
            "extension",
            "--server",
            "https://tandem.acme.test",
            "--page",
        ])
        .arg("https://app.acme.test/*")
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let unpacked = out.path().join("tandem");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["host_permissions"],
        serde_json::json!(["https://tandem.acme.test/*", "https://app.acme.test/*"])
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["server_url"], "https://tandem.acme.test");
    for file in ["panel.html", "picker.js", "background.js"] {
        assert!(unpacked.join(file).is_file(), "{file}");
    }
    let zip = std::fs::read(out.path().join("tandem.zip")).unwrap();
    assert_eq!(crate::extension::zipped_manifest(&zip), manifest);
}
