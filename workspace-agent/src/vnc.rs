//! The desktop over VNC, for networks without UDP (where WebRTC cannot reach the browser):
//! x11vnc on the desktop's display, on the workspace's loopback only, reached through the
//! agent's tunnel. Two servers: one that takes input (for whoever may control) and one that
//! cannot (`-viewonly`, for viewers), so no viewer can type whatever their client sends.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// The ports: input allowed, view only.
pub const PORT: u16 = 5900;
pub const VIEW_PORT: u16 = 5901;

static RUNNING: Mutex<[Option<Child>; 2]> = Mutex::const_new([None, None]);

/// Starts the desktop and the x11vnc for `view_only` if need be; its port.
pub async fn ensure(view_only: bool) -> Result<u16> {
    crate::desktop::ensure().await?;
    let (slot, port) = if view_only { (1, VIEW_PORT) } else { (0, PORT) };
    let mut running = RUNNING.lock().await;
    if let Some(c) = running[slot].as_mut()
        && c.try_wait()?.is_none()
    {
        return Ok(port);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/tmp/tandem-vnc.log")?;
    let mut cmd = Command::new("x11vnc");
    cmd.args([
        "-display",
        crate::desktop::DISPLAY,
        "-rfbport",
        &port.to_string(),
        "-localhost",
        "-shared",
        "-forever",
        "-nopw",
        "-noxdamage",
        "-quiet",
    ]);
    if view_only {
        cmd.arg("-viewonly");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start x11vnc (is it in the image?)")?;
    running[slot] = Some(child);
    drop(running);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if tokio::time::Instant::now() > deadline {
            bail!("x11vnc did not listen within 15 s (see /tmp/tandem-vnc.log)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(port)
}
