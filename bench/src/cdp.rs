//! A headless Chromium driven over the DevTools protocol (a WebSocket, no ChromeDriver): what a
//! benchmark needs to measure in a real browser — open a page, run a script and wait for its
//! promise. The browser gets a fresh profile and ends when this is dropped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::WorkDir;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Drop for Chromium {
    fn drop(&mut self) {
        if let Some(pid) = self.process.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One headless Chromium and one page in it.
pub struct Chromium {
    socket: Socket,
    session: String,
    next_id: u64,
    process: tokio::process::Child,
    _profile: WorkDir,
}

impl Chromium {
    /// Starts Chromium (flags for WebRTC on loopback, autoplay) with one blank page.
    pub async fn start() -> Result<Self> {
        let profile = WorkDir::new("tandem-bench-chromium-")?;
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .context("no chromium (`cargo xtask deps --test` installs it)")?;
        let process = tokio::process::Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                "--allow-loopback-in-peer-connection",
                "--disable-features=WebRtcHideLocalIpsWithMdns",
                "--autoplay-policy=no-user-gesture-required",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A process group of its own: dropping this ends its renderers and GPU process too.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("starting chromium")?;
        // Chromium writes its port and browser path to the profile once it listens.
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let endpoint = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Some((port, path)) = text.split_once('\n')
                && !path.trim().is_empty()
            {
                break format!("ws://127.0.0.1:{}{}", port.trim(), path.trim());
            }
            if Instant::now() > deadline {
                bail!("chromium did not open its DevTools port within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (socket, _) = tokio_tungstenite::connect_async(&endpoint)
            .await
            .context("connecting to chromium's DevTools")?;
        let mut me = Self {
            socket,
            session: String::new(),
            next_id: 0,
            process,
            _profile: profile,
        };
        let target = me
            .call("Target.createTarget", json!({ "url": "about:blank" }))
            .await?;
        let target = target["targetId"].as_str().context("no target id")?;
        let attached = me
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await?;
        me.session = attached["sessionId"]
            .as_str()
            .context("no session id")?
            .to_string();
        Ok(me)
    }

    /// One DevTools call (on the page once attached); its result.
    async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        self.socket.send(Message::text(msg.to_string())).await?;
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(120), self.socket.next())
                .await
                .with_context(|| format!("chromium did not answer {method} within 120 s"))?
                .context("chromium's DevTools connection closed")??;
            let Message::Text(text) = frame else { continue };
            let v: Value = serde_json::from_str(&text)?;
            if v["id"].as_u64() != Some(id) {
                continue; // an event
            }
            if let Some(e) = v.get("error") {
                bail!("{method}: {e}");
            }
            return Ok(v["result"].clone());
        }
    }

    /// Opens `url` in the page.
    pub async fn goto(&mut self, url: &str) -> Result<()> {
        let r = self.call("Page.navigate", json!({ "url": url })).await?;
        if let Some(e) = r["errorText"].as_str() {
            bail!("opening {url}: {e}");
        }
        Ok(())
    }

    /// Runs `expression` in the page and waits for its value (a promise's, when it is one);
    /// an exception is an error with its text.
    pub async fn eval(&mut self, expression: &str) -> Result<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            let text = e["exception"]["description"]
                .as_str()
                .or(e["text"].as_str())
                .unwrap_or("an exception");
            bail!("in the page: {text}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until `expression` is truthy in the page (checked every 100 ms, for at most
    /// `within`); `what` names it in the error.
    pub async fn wait_for(&mut self, expression: &str, what: &str, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            // A navigation in flight makes an evaluation fail; that is "not yet".
            if let Ok(v) = self.eval(&format!("!!({expression})")).await
                && v == json!(true)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the page did not show {what} within {} s", within.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
