//! Smoke test of `cargo xtask up`: the same code path (this binary's `up`), on a free port and a
//! fresh data dir; checks that `/api/health` answers and `/` serves the Leptos app.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::run;

/// Runs `up --debug --no-install` and checks it.
pub fn up() -> Result<()> {
    let t = run::step("smoke test: cargo xtask up");
    let port = run::free_port()?;
    let data = std::env::temp_dir().join(format!("tandem-up-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "up",
            "--debug",
            "--no-install",
            "--no-image",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&data)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting `up`")?;
    let result = check(&mut child, port);
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
    let url = url.context("`up` never said where it listens")?;
    ensure!(
        url == format!("http://127.0.0.1:{port}"),
        "unexpected URL {url}"
    );
    ensure!(link.is_some(), "`up` printed no login link");
    let (head, body) = get(port, "/api/health")?;
    ensure!(head.starts_with("HTTP/1.1 200"), "health: {head}");
    ensure!(
        body.contains("\"status\":\"ok\"") && body.contains("sqlite"),
        "health body: {body}"
    );
    let (head, body) = get(port, "/")?;
    ensure!(head.starts_with("HTTP/1.1 200"), "/: {head}");
    ensure!(
        body.contains("/pkg/tandem.js"),
        "/ does not load the Leptos app: {body}"
    );
    let (head, _) = get(port, "/pkg/tandem_bg.wasm")?;
    ensure!(
        head.starts_with("HTTP/1.1 200") && head.to_lowercase().contains("application/wasm"),
        "wasm: {head}"
    );
    Ok(())
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
