//! The REST API against its own contract: [schemathesis](https://schemathesis.readthedocs.io)
//! (PyPI, [`VERSION`], in a venv under the target dir) runs every operation of
//! `/api/openapi.json` on `tandem serve` (a throwaway data dir, SQLite, the admin's API token),
//! with inputs generated from the schemas and mutated past them. A 5xx, a status the document
//! does not list, a body its schema does not describe or an answer slower than
//! [`MAX_RESPONSE_SECS`] fails the suite. `cargo xtask test` runs it after the tests;
//! `cargo xtask schemathesis` alone.
//!
//! The server runs workspaces with the tests' image (`target/tandem-test-images`, which the
//! integration tests build), so a 503 is a real failure, not a missing capability. A repo and a
//! session are made first, and their ids are among the values tried for `{id}` and `{prompt}`,
//! so the handlers behind the 404 are reached too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::run;

/// The schemathesis release installed and run.
pub const VERSION: &str = "4.32.5";
/// Test cases per operation and phase: the whole step stays within a few minutes on two cores.
const MAX_EXAMPLES: u32 = 50;
/// The slowest answer allowed.
const MAX_RESPONSE_SECS: u32 = 5;
/// What every answer is checked for.
const CHECKS: &str = "not_a_server_error,status_code_conformance,response_schema_conformance";
/// Operations that end the run's own credential: they run last, on their own, or every
/// operation after them would only see 401s.
const ENDS_CREDENTIAL: [&str; 2] = ["revoke_token", "logout"];

/// Runs the step; `install`: create the venv when schemathesis is missing; `build`: build the
/// debug server first (`cargo xtask test` passes false: it runs the server its tests just built,
/// whose `cargo test` features would otherwise make a second build of most dependencies).
pub fn run(install: bool, build: bool) -> Result<()> {
    let t = run::step(&format!(
        "schemathesis {VERSION}: every /api operation against /api/openapi.json"
    ));
    let venv = venv(install)?;
    if build {
        run::build_server(false)?;
    }
    run::check_server_binaries(&run::target_dir().join("debug"))?;
    let bin = run::target_dir().join("debug/tandem");
    let out = run::target_dir().join("schemathesis");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    // Named like the tests' data dirs, so `cargo xtask leaks` would see a workspace left behind.
    let data =
        std::env::temp_dir().join(format!("tandem-test-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let port = run::free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let mut server = Command::new(&bin)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&data)
        .arg("--images-dir")
        .arg(run::target_dir().join("tandem-test-images"))
        .arg("--image-recipe")
        .arg(run::root().join("images/test/image.toml"))
        .env_remove("TANDEM_TOKEN")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(out.join("server.log"))?)
        .spawn()
        .context("starting `tandem serve`")?;
    let result = check(&venv, &bin, &data, &out, &mut server, port);
    stop_sessions(&venv, &bin, &data, &url);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&data);
    if result.is_err() {
        eprintln!(
            "    the server's log: {}; schemathesis's reports: {}",
            out.join("server.log").display(),
            out.display()
        );
    }
    result?;
    run::done(t);
    Ok(())
}

/// The venv with schemathesis [`VERSION`] (`target/schemathesis-<version>`), made when missing.
fn venv(install: bool) -> Result<PathBuf> {
    let dir = run::target_dir().join(format!("schemathesis-{VERSION}"));
    let have = run::output(Command::new(dir.join("bin/schemathesis")).arg("--version"));
    if have.is_some_and(|v| v.contains(&format!("version {VERSION}"))) {
        return Ok(dir);
    }
    if !install {
        bail!("schemathesis {VERSION} is not installed (`cargo xtask schemathesis` installs it)");
    }
    eprintln!(
        "    installing schemathesis {VERSION} into {}",
        dir.display()
    );
    run::venv(&dir, &format!("schemathesis=={VERSION}"))?;
    Ok(dir)
}

fn check(
    venv: &Path,
    bin: &Path,
    data: &Path,
    out: &Path,
    server: &mut Child,
    port: u16,
) -> Result<()> {
    // Wait for the server's own announcement rather than guessing a delay.
    let mut lines = BufReader::new(server.stdout.take().context("stdout")?).lines();
    lines
        .by_ref()
        .map_while(|l| l.ok())
        .find(|l| l.contains(" is listening on "))
        .context("`tandem serve` stopped before it listened")?;
    // Keep draining what the server prints so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let url = format!("http://127.0.0.1:{port}");
    let token = run::output(
        Command::new(bin)
            .args(["token", "create", "--name", "schemathesis", "--data-dir"])
            .arg(data)
            .env_remove("TANDEM_TOKEN"),
    )
    .context("`tandem token create` failed")?
    .trim()
    .to_string();
    let (status, health) = get(port, "/api/health", &token)?;
    ensure!(status == 200, "health: {status} {health}");
    for kind in ["root", "runtime", "image", "agent_binary"] {
        ensure!(
            !health.contains(&format!("\"kind\":\"{kind}\"")),
            "this server cannot run workspaces (the tests build their image into \
             target/tandem-test-images: run `cargo xtask test` once): {health}"
        );
    }
    let config = seed(venv, bin, port, &token)?;
    std::fs::write(out.join("schemathesis.toml"), config)?;

    let everything = schemathesis(venv, out, &url, &token, "main", false)?;
    // The first run must have left the credential alone, or its verdicts were 401s.
    let (status, me) = get(port, "/api/me", &token)?;
    ensure!(
        status == 200,
        "the run ended its own credential ({status} {me}): an operation that does so belongs in ENDS_CREDENTIAL"
    );
    let last = schemathesis(venv, out, &url, &token, "last", true)?;

    let figures = report(venv, &[out.join("main.json"), out.join("last.json")])?;
    eprintln!("    schemathesis: {figures}");
    ensure!(
        everything && last,
        "schemathesis found failures (above; replay one with `{}/bin/schemathesis replay <id>`)",
        venv.display()
    );
    Ok(())
}

/// A repo and a session to aim at; returns schemathesis's configuration, which offers their ids
/// for the path parameters (half the time: the other half, generated ones).
fn seed(venv: &Path, bin: &Path, port: u16, token: &str) -> Result<String> {
    let url = &format!("http://127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        run::output(
            Command::new(bin)
                .args(args)
                .args(["--json", "--url", url, "--token", token]),
        )
        .with_context(|| format!("`tandem {}` failed", args.join(" ")))
    };
    // A remote nobody can clone: the session fails its boot, no workspace starts.
    let repo = cli(&[
        "repo",
        "add",
        "schemathesis/seed",
        "https://example.invalid/seed.git",
    ])?;
    // The CLI prints what it made as a one-item list.
    let repo = python(venv, "print(json.load(sys.stdin)[0]['id'])", &repo)?;
    let session = cli(&["session", "new", "--repo", &repo, "a first prompt"])?;
    let session = python(venv, "print(json.load(sys.stdin)[0]['id'])", &session)?;
    let (status, detail) = get(port, &format!("/api/sessions/{session}"), token)?;
    ensure!(status == 200, "the seeded session: {status} {detail}");
    let prompt = python(
        venv,
        "print(json.load(sys.stdin)['prompts'][0]['id'])",
        &detail,
    )?;
    Ok(format!(
        r#"[dictionaries]
repo = {{ values = ["{repo}"] }}
session = {{ values = ["{session}"] }}
prompt = {{ values = ["{prompt}"] }}

[[operations]]
include-path-regex = "^/api/repos/\\{{id\\}}"
parameters = {{ "path.id" = {{ dictionary = "repo", probability = 0.5 }} }}

[[operations]]
include-path-regex = "^/api/sessions/\\{{id\\}}"
parameters = {{ "path.id" = {{ dictionary = "session", probability = 0.5 }}, "path.prompt" = {{ dictionary = "prompt", probability = 0.5 }} }}
"#
    ))
}

/// Stops the sessions the run left going (a workspace outlives its server by design; the run's
/// must not). Best effort: `cargo xtask leaks` reports anything left.
fn stop_sessions(venv: &Path, bin: &Path, data: &Path, url: &str) {
    let Some(token) = run::output(
        Command::new(bin)
            .args(["token", "create", "--data-dir"])
            .arg(data)
            .env_remove("TANDEM_TOKEN"),
    ) else {
        return;
    };
    let token = token.trim();
    let Some(list) = run::output(
        Command::new(bin).args(["session", "ls", "--json", "--url", url, "--token", token]),
    ) else {
        return;
    };
    let going = "print(' '.join(s['id'] for s in json.load(sys.stdin) \
        if s['state'] not in ('stopped', 'failed')))";
    let Ok(ids) = python(venv, going, &list) else {
        return;
    };
    for id in ids.split_whitespace() {
        let _ = Command::new(bin)
            .args(["session", "stop", id, "--url", url, "--token", token])
            .stdout(Stdio::null())
            .status();
    }
}

/// One schemathesis run: everything but [`ENDS_CREDENTIAL`], or (`last`) only those. Its JSON
/// report is `<out>/<name>.json`. True when it found nothing.
fn schemathesis(
    venv: &Path,
    out: &Path,
    url: &str,
    token: &str,
    name: &str,
    last: bool,
) -> Result<bool> {
    let mut c = Command::new(venv.join("bin/schemathesis"));
    c.arg("--config-file")
        .arg(out.join("schemathesis.toml"))
        .arg("--no-color")
        .arg("run")
        .arg(format!("{url}/api/openapi.json"))
        .args(["--url", url])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", CHECKS])
        .args(["--max-response-time", &MAX_RESPONSE_SECS.to_string()])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        // One request at a time: two cores, and the server is one of them.
        .args(["--workers", "1"])
        .args(["--report", "json", "--report-json-path"])
        .arg(out.join(format!("{name}.json")))
        // The reports keep the token out.
        .args(["--output-sanitize", "true"])
        .current_dir(out);
    for id in ENDS_CREDENTIAL {
        c.arg(if last {
            "--include-operation-id"
        } else {
            "--exclude-operation-id"
        })
        .arg(id);
    }
    let status = c.status().context("running schemathesis")?;
    // 0: nothing found; 1: failures found (reported above); anything else: it could not run.
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => bail!("schemathesis could not run ({status})"),
    }
}

/// The figures of the runs' JSON reports, in one line.
fn report(venv: &Path, reports: &[PathBuf]) -> Result<String> {
    let paths: Vec<String> = reports
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    python(
        venv,
        &format!(
            r#"runs = [json.load(open(p)) for p in [{}]]
ops = sum(r["operations"]["tested"] for r in runs)
cases = sum(r["test_cases"]["generated"] for r in runs)
failing = sum(r["test_cases"]["with_failures"] for r in runs)
unique = sum(r["test_cases"]["unique_failures"] for r in runs)
secs = sum(r["running_time"] for r in runs)
print(f"{{ops}} operations, {{cases}} test cases, {{failing}} failing ({{unique}} unique) in {{secs:.0f}}s; seeds " + ", ".join(str(r["seed"]) for r in runs))"#,
            paths.join(", ")
        ),
        "",
    )
}

/// Runs `code` (with `json` and `sys` imported) in the venv's Python on `input`; its stdout,
/// trimmed. (xtask stays free of a JSON crate; the venv has a JSON reader.)
fn python(venv: &Path, code: &str, input: &str) -> Result<String> {
    let mut child = Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg(format!("import json, sys\n{code}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("the venv's python")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "python failed on {input:?}");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A plain HTTP/1.0 GET with the token (1.0: the body comes whole, never chunked); the status
/// and the body as text.
fn get(port: u16, path: &str, token: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("malformed answer to GET {path}")
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("a status line")?;
    Ok((status, body.to_string()))
}
