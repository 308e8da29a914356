//! A headless Chromium driven through ChromeDriver, plus waiting helpers.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The built web app, or `None` with a printed reason (a failure under `TANDEM_E2E_REQUIRE=1`).
pub fn web_dir() -> Option<PathBuf> {
    let required = std::env::var("TANDEM_E2E_REQUIRE").is_ok_and(|v| v == "1");
    let dir = std::env::var_os("TANDEM_E2E_WEB_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join("index.html").is_file());
    let driver = which("chromedriver");
    match (dir, driver) {
        (Some(d), Some(_)) => Some(d),
        (d, drv) => {
            let why = format!(
                "e2e needs TANDEM_E2E_WEB_DIR with a built site (have: {}) and chromedriver on PATH (have: {})",
                d.is_some(),
                drv.is_some()
            );
            assert!(!required, "{why}");
            eprintln!("SKIP (e2e): {why}; `cargo xtask test` provides both");
            None
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|f| f.is_file())
}

/// One browser: its ChromeDriver process, its profile dir and the WebDriver client.
pub struct Browser {
    pub client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self._driver.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Browser {
    /// Starts ChromeDriver on a free port and a fresh headless Chromium; screenshots go to
    /// `target/tmp/e2e/<test>/`.
    pub async fn start(test: &str) -> Self {
        Self::start_with_args(test, &[]).await
    }

    /// [`Browser::start`] with more Chromium flags (`--load-extension=…`).
    pub async fn start_with_args(test: &str, extra: &[String]) -> Self {
        // Two rustls crypto providers are compiled in (see server/Cargo.toml); choose one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // A process group of its own, which the Chromium it starts joins: dropping the
            // browser ends them all, even when a test ends without closing its session.
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        // Ready when it says so.
        let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
        tokio::time::timeout(WAIT, async {
            while let Some(l) = lines.next_line().await.unwrap() {
                if l.contains("started successfully") {
                    return;
                }
            }
            panic!("chromedriver exited before it was ready");
        })
        .await
        .expect("chromedriver ready in time");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let profile = tempfile::tempdir().unwrap();
        let binary = which("chromium")
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_else(|| "/usr/bin/chromium".into());
        let mut args: Vec<String> = [
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
            // WebRTC over loopback (the desktop), without mDNS-obfuscated candidates.
            "--allow-loopback-in-peer-connection",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            "--autoplay-policy=no-user-gesture-required",
        ]
        .map(String::from)
        .to_vec();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.extend_from_slice(extra);
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": binary, "args": args }),
        );
        let client = ClientBuilder::rustls()
            .expect("rustls client")
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("e2e")
            .join(test);
        std::fs::create_dir_all(&shots).unwrap();
        Self {
            client,
            _driver: driver,
            _profile: profile,
            shots,
        }
    }

    /// Saves a PNG of the viewport as `<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
        path
    }

    /// Waits until the element at `css` exists and its text contains `needle`; returns the text.
    pub async fn wait_text(&self, css: &str, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(el) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = el.text().await
                && text.contains(needle)
            {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {css:?} to contain {needle:?}"
            );
            // Between WebDriver round trips; each check is itself an event from the page.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until no element matches `css`.
    pub async fn wait_gone(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        while self.client.find(Locator::Css(css)).await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {css:?} to go"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's path is `path`.
    pub async fn wait_path(&self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let url = self.client.current_url().await.unwrap();
            if pred(url.path()) {
                return url.path().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the address; at {url}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element at `css` (which must be there), once the page lets it be clicked: a
    /// button still disabled, hidden or covered while the page finishes what it is doing is
    /// waited for, as a person would.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let el = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no {css:?} to click: {e}"));
            let ready = self.takes_input(&el).await;
            let problem = if ready {
                match el.click().await {
                    Ok(()) => return,
                    Err(e) => e.to_string(),
                }
            } else {
                "it is hidden or disabled".to_string()
            };
            let transient = !ready
                || problem.contains("not interactable")
                || problem.contains("click intercepted");
            assert!(
                transient && Instant::now() < deadline,
                "clicking {css:?}: {problem}"
            );
            // Between WebDriver round trips; each check is itself an event from the page.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether `el` can take a click or keys now: laid out (not inside something hidden) and not
    /// disabled. Not WebDriver's "displayed", which says no to a terminal's input box (xterm.js
    /// keeps it transparent and zero-sized on purpose).
    async fn takes_input(&self, el: &fantoccini::elements::Element) -> bool {
        let Ok(arg) = serde_json::to_value(el) else {
            return false;
        };
        self.client
            .execute(
                "const e = arguments[0]; return e.isConnected && !e.disabled && e.getClientRects().length > 0;",
                vec![arg],
            )
            .await
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }

    /// Types `text` into the element at `css`, waiting for it to appear and to take typing (a
    /// box disabled while the page sends what was typed before).
    pub async fn type_into(&self, css: &str, text: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let el = self
                .client
                .wait()
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no {css:?} to type into: {e}"));
            let ready = self.takes_input(&el).await;
            let problem = if ready {
                match el.send_keys(text).await {
                    Ok(()) => return,
                    Err(e) => e.to_string(),
                }
            } else {
                "it is hidden or disabled".to_string()
            };
            assert!(
                (!ready || problem.contains("not interactable")) && Instant::now() < deadline,
                "typing into {css:?}: {problem}"
            );
            // Between WebDriver round trips; each check is itself an event from the page.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Signs in with a one-time login code and waits for the dashboard.
    pub async fn sign_in(&self, url: &str, code: &str) {
        self.client
            .goto(&format!("{url}/login#code={code}"))
            .await
            .unwrap();
        self.wait_path(|p| p == "/").await;
    }

    /// Opens session `id`'s page and waits until it says the session is ready.
    pub async fn open_ready_session(&self, url: &str, id: impl std::fmt::Display) {
        self.client
            .goto(&format!("{url}/sessions/{id}"))
            .await
            .unwrap();
        self.wait_text("#session-state", "ready").await;
    }

    /// Ends the WebDriver session.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
