//! Smoke test of `cargo xtask up`: the same code path (this binary's `up`, `--debug`: the
//! server the suite has already built; a release server build would add ~23 minutes on CI's
//! two cores — Tandem's sources do not branch on the profile, see ARCHITECTURE.md), on a free
//! port and a fresh data dir. It checks that the server answers
//! and serves the Leptos app, then proves the main job in headless Chromium: the e2e test
//! `first_run` runs against this server — the setup page sets the model (the scripted model),
//! adds a local repo, and a session started from the dashboard builds its snapshot, reaches
//! `ready`, runs a command in its terminal and gets its agent's reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::run;

/// Runs `up --no-install --debug` and checks it; `build`: false adds `--no-build` (`cargo
/// xtask test` runs it on the debug server its tests just built).
pub fn up(build: bool) -> Result<()> {
    let t = run::step("smoke test: cargo xtask up (debug), then a first session in Chromium");
    let port = run::free_port()?;
    let data = std::env::temp_dir().join(format!("tandem-up-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    // The browser test adds a local repo from the temp dir: the operator allows that directory.
    std::fs::create_dir_all(&data)?;
    std::fs::write(
        data.join("tandem.toml"),
        format!(
            "local_repo_dirs = [{:?}]\n",
            std::env::temp_dir().display().to_string()
        ),
    )?;
    // The base image is built once per target dir (content-addressed by its recipe), as a
    // user's is built once per data dir.
    let images = run::target_dir().join("tandem-up-images");
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "up",
            "--no-install",
            "--debug",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&data)
        .args((!build).then_some("--no-build"))
        .env("TANDEM_IMAGES_DIR", &images)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting `up`")?;
    let result = check(&mut child, port);
    stop_sessions(
        &run::target_dir().join("debug/tandem"),
        &data,
        &format!("http://127.0.0.1:{port}"),
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
    result?;
    run::done(t);
    Ok(())
}

fn check(child: &mut std::process::Child, port: u16) -> Result<()> {
    // Wait for the server's own announcement rather than guessing a delay.
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut url = None;
    let mut link = None;
    for line in lines.by_ref() {
        let line = line?;
        println!("    | {line}");
        if let Some((_, u)) = line.split_once("listening on ") {
            url = Some(u.trim().to_string());
        }
        if line.contains("/login#code=tlc_") {
            link = Some(line.trim().to_string());
            break;
        }
    }
    // Keep draining what the server prints so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let url = url.context("`up` never said where it listens")?;
    ensure!(
        url == format!("http://127.0.0.1:{port}"),
        "unexpected URL {url}"
    );
    let link = link.context("`up` printed no login link")?;
    let code = link
        .split_once("#code=")
        .map(|(_, c)| c.trim().to_string())
        .context("the login link has no code")?;
    let (head, body) = get(port, "/api/health")?;
    ensure!(head.starts_with("HTTP/1.1 200"), "health: {head}");
    ensure!(
        body.contains("\"status\":\"ok\"") && body.contains("sqlite"),
        "health body: {body}"
    );
    // The host can start sessions: only the model (set on the setup page) may be missing.
    ensure!(
        !body.contains("\"kind\":\"agent_binary\"")
            && !body.contains("\"kind\":\"image\"")
            && !body.contains("\"kind\":\"runtime\"")
            && !body.contains("\"kind\":\"root\""),
        "`up` started a server that cannot start sessions: {body}"
    );
    let (head, body) = get(port, "/")?;
    ensure!(head.starts_with("HTTP/1.1 200"), "/: {head}");
    ensure!(
        body.contains("/boot.js"),
        "/ does not load the Leptos app: {body}"
    );
    let (head, boot) = get(port, "/boot.js")?;
    ensure!(
        head.starts_with("HTTP/1.1 200") && boot.contains("/pkg/tandem.js"),
        "/boot.js does not start the Leptos app: {head}"
    );
    let (head, _) = get(port, "/pkg/tandem_bg.wasm")?;
    ensure!(
        head.starts_with("HTTP/1.1 200") && head.to_lowercase().contains("application/wasm"),
        "wasm: {head}"
    );
    // The main job, in a browser, against this server.
    run::cargo_test(
        run::cargo()
            .args([
                "test",
                "--workspace",
                "--test",
                "e2e",
                "first_run::a_new_user_sets_up_the_model",
            ])
            .current_dir(run::root())
            .env("TANDEM_E2E_UP_URL", &url)
            .env("TANDEM_E2E_UP_CODE", &code)
            .env("TANDEM_E2E_REQUIRE", "1")
            .env_remove("TANDEM_TOKEN")
            .env_remove("TANDEM_URL"),
    )?;
    Ok(())
}

/// Stops the sessions the smoke test started, through the server `up` started (a workspace
/// outlives its server by design; the smoke test's must not).
fn stop_sessions(bin: &Path, data: &Path, url: &str) {
    let Some(token) = run::output(
        Command::new(bin)
            .args(["token", "create", "--data-dir"])
            .arg(data)
            .env_remove("TANDEM_TOKEN"),
    ) else {
        return;
    };
    let token = token.trim().to_string();
    let Some(list) = run::output(
        Command::new(bin).args(["session", "ls", "--json", "--url", url, "--token", &token]),
    ) else {
        return;
    };
    for id in json_ids(&list) {
        let _ = Command::new(bin)
            .args(["session", "stop", &id, "--url", url, "--token", &token])
            .stdout(Stdio::null())
            .status();
    }
}

/// The values of every `"id"` key in a JSON text (xtask stays free of a JSON crate).
fn json_ids(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("\"id\"") {
        rest = &rest[i + 4..];
        let v = rest.trim_start().strip_prefix(':').map(str::trim_start);
        if let Some(v) = v.and_then(|v| v.strip_prefix('"'))
            && let Some(end) = v.find('"')
        {
            ids.push(v[..end].to_string());
        }
    }
    ids
}

/// A plain HTTP/1.1 GET; returns the head and the body as text.
fn get(port: u16, path: &str) -> Result<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("malformed answer to GET {path}")
    };
    Ok((head.to_string(), body.to_string()))
}
