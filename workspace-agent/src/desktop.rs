//! The workspace's desktop: a virtual display (Xvfb) with a headful Chromium on it, started on
//! first use and shared by the agent and people. The agent drives the browser through the
//! Chrome DevTools Protocol on the workspace's own loopback (navigate, click, type, screenshot);
//! clicks and keys are real input events, as a person's would be.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::Message;

/// The display number Xvfb serves (`DISPLAY=:99`).
pub const DISPLAY: &str = ":99";
/// The DevTools port, on the workspace's loopback only.
pub const CDP_PORT: u16 = 9222;
/// The screen, unless `TANDEM_DESKTOP_SIZE` (`WIDTHxHEIGHT`) says otherwise.
pub const DEFAULT_SIZE: (u32, u32) = (1280, 720);
/// Where the display's and the browser's messages go.
pub const LOG: &str = "/tmp/tandem-desktop.log";
/// How long starting the display and the browser may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one DevTools call (a page load included) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The flags that make Chromium work here: no sandbox (root in a container), no GPU, offline.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--password-store=basic",
    // No "unsupported command-line flag" bar over the page.
    "--test-type",
    "--window-position=0,0",
];

struct Running {
    xvfb: Child,
    browser: Child,
}

static DESKTOP: Mutex<Option<Running>> = Mutex::const_new(None);

pub fn size() -> (u32, u32) {
    std::env::var("TANDEM_DESKTOP_SIZE")
        .ok()
        .and_then(|s| {
            let (w, h) = s.split_once('x')?;
            Some((w.parse().ok()?, h.parse().ok()?))
        })
        .unwrap_or(DEFAULT_SIZE)
}

/// Starts the display and the browser if they are not running (again if either died).
pub async fn ensure() -> Result<()> {
    let mut d = DESKTOP.lock().await;
    if let Some(r) = d.as_mut()
        && r.xvfb.try_wait()?.is_none()
        && r.browser.try_wait()?.is_none()
    {
        return Ok(());
    }
    if let Some(mut old) = d.take() {
        let _ = old.browser.kill().await;
        let _ = old.xvfb.kill().await;
    }
    let (w, h) = size();
    let socket = format!("/tmp/.X11-unix/X{}", &DISPLAY[1..]);
    let _ = std::fs::remove_file(&socket);
    let xvfb = Command::new("Xvfb")
        .args([
            DISPLAY,
            "-screen",
            "0",
            &format!("{w}x{h}x24"),
            "-nolisten",
            "tcp",
            "-ac",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start Xvfb (is it in the image?)")?;
    wait_for("the virtual display", || {
        std::path::Path::new(&socket).exists()
    })
    .await?;
    let profile = "/tmp/tandem-browser";
    let _ = std::fs::remove_dir_all(profile);
    // Its messages go to a log people can read (`cat /tmp/tandem-desktop.log`).
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(LOG)?;
    let browser = Command::new("chromium")
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={profile}"))
        .arg(format!("--window-size={w},{h}"))
        .arg(format!("--remote-debugging-port={CDP_PORT}"))
        .arg("--remote-debugging-address=127.0.0.1")
        .arg("about:blank")
        .env("DISPLAY", DISPLAY)
        .env("HOME", "/root")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start chromium (is it in the image?)")?;
    *d = Some(Running { xvfb, browser });
    drop(d);
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if page_socket().await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(LOG).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "chromium did not open its DevTools port within {} s; its log ends: {}",
                START_TIMEOUT.as_secs(),
                tail.join(" | ")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for(what: &str, ready: impl Fn() -> bool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    while !ready() {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{what} did not come up within {} s",
                START_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `GET path` on the DevTools HTTP endpoint (HTTP/1.1; the body read by its length).
async fn http_get(path: &str) -> Result<Value> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", CDP_PORT)).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .context("the DevTools answer has no length")?;
                if buf.len() >= end + 4 + len {
                    return Ok(serde_json::from_slice(&buf[end + 4..end + 4 + len])?);
                }
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 || buf.len() > 4 * 1024 * 1024 {
                bail!("the DevTools answer was cut short");
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .context("DevTools did not answer within 5 s")?
}

/// The DevTools WebSocket of the browser's first page (a new one if it has none).
async fn page_socket() -> Result<String> {
    let list = http_get("/json/list").await?;
    let page = list
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["type"] == "page");
    if let Some(url) = page.and_then(|p| p["webSocketDebuggerUrl"].as_str()) {
        // It names the host as it was asked ("127.0.0.1"), or "localhost" (which may resolve
        // to ::1, where nothing listens): always the loopback address it listens on.
        let path = url
            .split_once("/devtools/")
            .map(|(_, p)| p)
            .context("an unexpected DevTools address")?;
        return Ok(format!("ws://127.0.0.1:{CDP_PORT}/devtools/{path}"));
    }
    bail!("the browser has no page open")
}

/// One DevTools session with the page.
struct Cdp {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next: u64,
}

impl Cdp {
    async fn open() -> Result<Self> {
        ensure().await?;
        let url = page_socket().await?;
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .context("connecting to the browser's DevTools")?;
        Ok(Self { ws, next: 1 })
    }

    /// Calls `method`; its result (DevTools errors become errors).
    async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next;
        self.next += 1;
        self.ws
            .send(Message::text(
                json!({ "id": id, "method": method, "params": params }).to_string(),
            ))
            .await?;
        let wait = async {
            while let Some(msg) = self.ws.next().await {
                let Message::Text(text) = msg? else { continue };
                let v: Value = serde_json::from_str(&text)?;
                if v["id"].as_u64() == Some(id) {
                    if let Some(e) = v.get("error") {
                        bail!("{method}: {}", e["message"].as_str().unwrap_or("failed"));
                    }
                    return Ok(v["result"].clone());
                }
            }
            bail!("the browser closed the DevTools connection")
        };
        tokio::time::timeout(CALL_TIMEOUT, wait)
            .await
            .with_context(|| format!("{method} took over {} s", CALL_TIMEOUT.as_secs()))?
    }

    async fn eval(&mut self, expression: &str) -> Result<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!(
                "the page threw: {}",
                e["exception"]["description"]
                    .as_str()
                    .or(e["text"].as_str())
                    .unwrap_or("an exception")
            );
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until the page has loaded.
    async fn settle(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        while self.eval("document.readyState").await?.as_str() != Some("complete") {
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the page did not finish loading within {} s",
                    CALL_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn where_am_i(&mut self) -> Result<String> {
        let v = self
            .eval("JSON.stringify([location.href, document.title])")
            .await?;
        let pair: (String, String) = serde_json::from_str(v.as_str().unwrap_or("[\"\",\"\"]"))?;
        Ok(format!("at {} (title: {:?})", pair.0, pair.1))
    }
}

/// Opens `url` in the browser; says where it landed.
pub async fn navigate(url: &str) -> Result<String> {
    let mut cdp = Cdp::open().await?;
    let r = cdp.call("Page.navigate", json!({ "url": url })).await?;
    if let Some(e) = r["errorText"].as_str() {
        bail!("loading {url} failed: {e}");
    }
    cdp.settle().await?;
    cdp.where_am_i().await
}

/// Clicks the centre of the first element matching `selector`, with real mouse events.
pub async fn click(selector: &str) -> Result<String> {
    let mut cdp = Cdp::open().await?;
    let sel = serde_json::to_string(selector)?;
    let at = cdp
        .eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ))
        .await?;
    let (Some(x), Some(y)) = (at[0].as_f64(), at[1].as_f64()) else {
        bail!("no element matches {selector:?}")
    };
    for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
        cdp.call(
            "Input.dispatchMouseEvent",
            json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
        )
        .await?;
    }
    cdp.settle().await?;
    Ok(format!(
        "clicked {selector} at ({x:.0}, {y:.0}); now {}",
        cdp.where_am_i().await?
    ))
}

/// Types `text` (into `selector` after clicking it, else where the focus is).
pub async fn type_text(selector: Option<&str>, text: &str) -> Result<String> {
    if let Some(s) = selector {
        click(s).await?;
    }
    let mut cdp = Cdp::open().await?;
    cdp.call("Input.insertText", json!({ "text": text }))
        .await?;
    Ok(format!("typed {} characters", text.chars().count()))
}

/// A PNG of what the browser shows.
pub async fn screenshot() -> Result<Vec<u8>> {
    let mut cdp = Cdp::open().await?;
    let r = cdp
        .call("Page.captureScreenshot", json!({ "format": "png" }))
        .await?;
    let data = r["data"].as_str().context("the browser sent no image")?;
    Ok(base64::engine::general_purpose::STANDARD.decode(data)?)
}

/// Whether the desktop is running (for the turn's before/after screenshots).
pub async fn is_running() -> bool {
    DESKTOP
        .lock()
        .await
        .as_mut()
        .is_some_and(|r| matches!(r.browser.try_wait(), Ok(None)))
}

/// What the browser shows: `(url, title)`, when the desktop is running.
pub async fn page() -> Result<Option<(String, String)>> {
    if !is_running().await {
        return Ok(None);
    }
    let mut cdp = Cdp::open().await?;
    let v = cdp
        .eval("JSON.stringify([location.href, document.title])")
        .await?;
    Ok(Some(serde_json::from_str(
        v.as_str().unwrap_or("[\"\",\"\"]"),
    )?))
}
