//! VS Code in the browser: code-server, started on first use on the workspace's loopback
//! (`127.0.0.1:4200`, no auth of its own: only this agent's tunnel reaches it, and the server
//! checks who may), with its own config, data and extensions directories, telemetry and update
//! checks off. The node binary and code-server are bound in read-only by the server.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// Where code-server listens inside the workspace.
pub const PORT: u16 = 4200;
/// The node binary and code-server, bound in by the server.
pub const NODE: &str = "/run/tandem/bin/node";
pub const CODE_SERVER: &str = "/run/tandem/node_modules/code-server";
/// Its home: settings, data, extensions (per workspace, in its private /tmp).
const HOME: &str = "/tmp/tandem-code";
/// Starting may take this long (the first start unpacks and compiles caches).
const START_TIMEOUT: Duration = Duration::from_secs(60);

static RUNNING: Mutex<Option<Child>> = Mutex::const_new(None);

/// Starts code-server if it is not running; returns when it accepts connections.
pub async fn ensure() -> Result<()> {
    let mut running = RUNNING.lock().await;
    if let Some(c) = running.as_mut()
        && c.try_wait()?.is_none()
    {
        return Ok(());
    }
    if !std::path::Path::new(CODE_SERVER)
        .join("out/node/entry.js")
        .exists()
    {
        bail!("code-server is not available in this workspace (the server has none to bind in)");
    }
    std::fs::create_dir_all(format!("{HOME}/data/User"))?;
    std::fs::write(format!("{HOME}/config.yaml"), "auth: none\ncert: false\n")?;
    // Quiet defaults: no telemetry, no welcome page over the editor.
    std::fs::write(
        format!("{HOME}/data/User/settings.json"),
        r#"{"telemetry.telemetryLevel":"off","workbench.startupEditor":"none","security.workspace.trust.enabled":false,"update.mode":"none"}"#,
    )?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{HOME}/code-server.log"))?;
    let child = Command::new(NODE)
        .arg(format!("{CODE_SERVER}/out/node/entry.js"))
        .args([
            "--auth",
            "none",
            "--bind-addr",
            &format!("127.0.0.1:{PORT}"),
        ])
        .args([
            "--disable-telemetry",
            "--disable-update-check",
            "--disable-workspace-trust",
            "--disable-getting-started-override",
        ])
        .arg(format!("--config={HOME}/config.yaml"))
        .arg(format!("--user-data-dir={HOME}/data"))
        .arg(format!("--extensions-dir={HOME}/extensions"))
        .arg("/workspace")
        .env("HOME", HOME)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start code-server")?;
    *running = Some(child);
    drop(running);
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    // code-server listens before it has its routes (it answers "Cannot GET /" meanwhile):
    // ready once its health route answers.
    while !healthy().await {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "code-server did not answer within {} s (see {HOME}/code-server.log)",
                START_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Whether code-server answers `GET /healthz` with 200.
async fn healthy() -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = async {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", PORT)).await?;
        c.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        c.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    };
    match tokio::time::timeout(Duration::from_secs(5), answer).await {
        Ok(Ok(head)) => head.starts_with(b"HTTP/1.") && &head[9..12] == b"200",
        _ => false,
    }
}
