//! Desktop stream benchmark (`cargo xtask bench desktop`), against the release `tandem serve` in
//! its own process, on a real workspace whose Chromium shows a page that changes every frame
//! and draws the time it drew each frame as a row of black and white cells.
//!
//! For each encoder setting (frames per second, codec, VP8 speed) — the baseline is 15 fps, VP8
//! at `--speed`; then `--fps` at `--speed`, at each of `--speeds`, and H.264 — one server and
//! one session: the frames a viewer gets per second, the CPU of capture +
//! encode (the encoder process), the server's, the encode latency, and **glass to glass** in a
//! headless Chromium watching through the web app as a guest: each received frame's cells are
//! read back from the `<video>` (`requestVideoFrameCallback`) and the time they say is taken
//! from the time the browser shows the frame. The setting under test (`--fps`, `--speed`) also
//! runs 1, 5 and 20 viewers (WebRTC receivers in this process) for the per-viewer cost.
//!
//! Flags: `--seconds N` (10) per measurement, `--fps N` (30), `--speed N` (12, the default
//! `[desktop] vp8_speed`), `--speeds A,B,…` (4,8: the others compared).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use tandem_protocol::SessionId;
use tandem_protocol::agent::DesktopPage;
use tandem_protocol::live::{ShareLink, WsClient, WsServer};
use tandem_server::client::desktop::DesktopViewer;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use tandem_bench as bench_common;
use tandem_bench::cdp::Chromium;

/// A page that repaints every frame (a moving gradient, a square and a clock: the encoder's
/// real work) and draws, at its top, a red bar and 40 cells of 32 × 40 px: the 32 low bits of
/// the millisecond it drew the frame, then an 8-bit check.
const GLASS_PAGE: &str = r#"<!doctype html><title>glass</title><body style="margin:0;overflow:hidden">
<canvas id=c style="display:block"></canvas><script>
const c = document.getElementById('c'), g = c.getContext('2d');
function size() { c.width = innerWidth; c.height = innerHeight; }
size(); addEventListener('resize', size);
function draw(t) {
  const x = (t / 5) % c.width;
  const grad = g.createLinearGradient(x, 0, x + 640, c.height);
  grad.addColorStop(0, '#1a6'); grad.addColorStop(1, '#06c');
  g.fillStyle = grad; g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = '#fff'; g.font = '64px sans-serif'; g.fillText(new Date().toISOString(), 80, 360);
  g.fillRect(x, 500, 120, 120);
  const ms = Math.floor(performance.timeOrigin + performance.now()) % 4294967296;
  let sum = 0;
  for (let i = 0; i < 4; i++) sum += Math.floor(ms / 2 ** (8 * i)) % 256;
  const check = (sum ^ 0xa5) & 0xff;
  g.fillStyle = '#f00'; g.fillRect(0, 0, 1280, 16);
  for (let i = 0; i < 40; i++) {
    const bit = i < 32 ? Math.floor(ms / 2 ** i) % 2 : (check >> (i - 32)) & 1;
    g.fillStyle = bit ? '#fff' : '#000'; g.fillRect(i * 32, 16, 32, 40);
  }
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);
</script></body>"#;

/// Run in the viewer's page: for `SECONDS`, reads each frame the desktop `<video>` shows back
/// into the time its cells say, and resolves with the samples (ms): stamp → shown
/// (`expectedDisplayTime`), stamp → its last packet received (`receiveTime`), and counts.
const MEASURE_JS: &str = r#"new Promise((done) => {
  const v = document.querySelector('#desktop-video');
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d', { willReadFrequently: true });
  const out = { glass: [], received: [], decode: [], frames: 0, unread: 0, y: -1 };
  let y0 = -1, first = -1, last = -1;
  const lum = (d, i) => (d[i] * 299 + d[i + 1] * 587 + d[i + 2] * 114) / 1000;
  const frame = (now, meta) => {
    if (first < 0) first = meta.presentedFrames;
    last = meta.presentedFrames;
    out.frames++;
    g.drawImage(v, 0, 0, c.width, c.height);
    if (y0 < 0) {
      // The page's top: the first red row at the left edge.
      const col = g.getImageData(8, 0, 1, Math.min(c.height, 400)).data;
      for (let y = 0; y < col.length / 4; y++) {
        const [r, gr, b] = [col[4 * y], col[4 * y + 1], col[4 * y + 2]];
        if (r > 180 && gr < 80 && b < 80) { y0 = y; out.y = y; break; }
      }
    }
    if (y0 >= 0) {
      const row = g.getImageData(0, y0 + 16 + 20, Math.min(c.width, 1280), 1).data;
      let ms = 0, check = 0;
      for (let i = 0; i < 40; i++) {
        let s = 0;
        for (let dx = -6; dx <= 6; dx++) s += lum(row, 4 * (i * 32 + 16 + dx));
        const bit = s / 13 > 128 ? 1 : 0;
        if (i < 32) ms += bit * 2 ** i; else check |= bit << (i - 32);
      }
      let sum = 0;
      for (let i = 0; i < 4; i++) sum += Math.floor(ms / 2 ** (8 * i)) % 256;
      if (((sum ^ 0xa5) & 0xff) === check) {
        // Signed, modulo 2^32 ms: a clock a little behind gives a small negative, not 49 days.
        const at = (t) => {
          const d = (Math.floor(performance.timeOrigin + t) - ms) % 4294967296;
          return ((d + 6442450944) % 4294967296) - 2147483648;
        };
        const glass = at(meta.expectedDisplayTime);
        if (Math.abs(glass) < 10000) {
          out.glass.push(glass);
          // The split at receipt, paired with this frame (null where the browser gives none).
          out.received.push(meta.receiveTime ? at(meta.receiveTime) : null);
          if (meta.processingDuration !== undefined) out.decode.push(meta.processingDuration * 1000);
        } else {
          out.unread++;
        }
      } else {
        out.unread++;
      }
    }
    v.requestVideoFrameCallback(frame);
  };
  v.requestVideoFrameCallback(frame);
  setTimeout(async () => {
    out.presented = last - first;
    // What the browser decodes (the codec the server answered with).
    const stats = await window.tandemDesktopPc.getStats();
    stats.forEach((s) => {
      if (s.type === 'inbound-rtp' && s.kind === 'video' && s.codecId) {
        const c = stats.get(s.codecId);
        if (c) out.codec = c.mimeType;
      }
    });
    done(out);
  }, SECONDS * 1000);
})"#;

fn flag(name: &str, default: &str) -> Result<String> {
    let v: Vec<String> = std::env::args().skip(1).collect();
    for f in v.iter().step_by(2) {
        if !["--seconds", "--fps", "--speed", "--speeds"].contains(&f.as_str()) {
            bail!("unknown flag {f} (--seconds N, --fps N, --speed N, --speeds A,B,…)");
        }
    }
    Ok(v.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].clone())
        .unwrap_or_else(|| default.to_string()))
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        bench_common::quantile(v, q)
    }
}

/// One measurement with WebRTC receivers in this process.
struct Run {
    viewers: usize,
    /// What one viewer received, Mbit/s.
    mbits: f64,
    fps_median: f64,
    fps_min: f64,
    encoder_cpu: f64,
    server_cpu: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
}

/// Glass to glass in a browser.
struct Glass {
    codec: String,
    encoder_cpu: f64,
    samples: usize,
    unread: u64,
    fps: f64,
    p50: f64,
    p99: f64,
    received_p50: f64,
    after_receipt_p50: f64,
    decode_p50: f64,
}

/// One encoder setting's results.
struct Setting {
    fps: u32,
    codec: &'static str,
    speed: i32,
    runs: Vec<Run>,
    glass: Glass,
}

struct Bench {
    srv: bench_common::BenchServer,
    id: SessionId,
    http: reqwest::Client,
    tick: f64,
    seconds: u64,
}

impl Bench {
    async fn start(fps: u32, codec: &str, speed: i32, seconds: u64) -> Result<Self> {
        let srv = bench_common::start(
            "tandem-bench-desktop-",
            &format!("[desktop]\nfps = {fps}\nvp8_speed = {speed}\ncodec = \"{codec}\"\n"),
        )
        .await?;
        let id = srv
            .ready_session("bench/desktop", &[("glass.html", GLASS_PAGE)])
            .await?;
        let http = reqwest::Client::new();
        let res = http
            .post(format!("{}/api/sessions/{id}/desktop/open", srv.url))
            .bearer_auth(&srv.token)
            .json(&json!({ "url": "file:///workspace/glass.html" }))
            .send()
            .await?;
        ensure!(
            res.status().is_success(),
            "opening the page: {}",
            res.text().await?
        );
        let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
        Ok(Self {
            srv,
            id,
            http,
            tick,
            seconds,
        })
    }

    async fn page(&self) -> Result<DesktopPage> {
        Ok(self
            .http
            .get(format!("{}/api/sessions/{}/desktop", self.srv.url, self.id))
            .bearer_auth(&self.srv.token)
            .send()
            .await?
            .json()
            .await?)
    }

    /// Waits until nobody streams (the next measurement starts a fresh encoder).
    async fn stream_gone(&self) -> Result<()> {
        let t0 = Instant::now();
        while self.page().await?.stream.is_some() {
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "the stream outlived its viewers"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// `n` WebRTC receivers in this process for `seconds`.
    async fn viewers(&self, n: usize) -> Result<Run> {
        let (url, id) = (&self.srv.url, self.id);
        let creds = Credentials {
            token: Some(self.srv.token.clone()),
            ..Default::default()
        };
        let mut members = Vec::new();
        let mut viewers = Vec::new();
        for _ in 0..n {
            let mut live = LiveClient::connect(url, id, &creds).await?;
            let (viewer, offer) = DesktopViewer::offer("127.0.0.1:0").await?;
            live.send(&WsClient::DesktopOffer { sdp: offer }).await?;
            let answer = loop {
                match tokio::time::timeout(Duration::from_secs(30), live.next()).await? {
                    Some(Incoming::Message(m)) => match *m {
                        WsServer::DesktopAnswer { sdp } => break sdp,
                        WsServer::Refused { request, reason } => bail!("{request}: {reason}"),
                        _ => {}
                    },
                    Some(_) => {}
                    None => bail!("the live channel ended"),
                }
            };
            viewer.accept(answer).await?;
            members.push(live);
            viewers.push(viewer);
        }
        // Everyone receiving.
        let t0 = Instant::now();
        while viewers
            .iter()
            .any(|v| v.received.frames.load(Ordering::Relaxed) < 5)
        {
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "not every viewer receives frames"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let encoder = self
            .page()
            .await?
            .stream
            .context("no stream numbers")?
            .encoder_pid
            .context("no encoder pid")?;
        let before: Vec<u64> = viewers
            .iter()
            .map(|v| v.received.frames.load(Ordering::Relaxed))
            .collect();
        let bytes_before = viewers[0].received.bytes.load(Ordering::Relaxed);
        let pid = self.srv.pid;
        let (s0, e0) = (bench_common::usage(pid).0, bench_common::usage(encoder).0);
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(self.seconds)).await;
        let secs = t.elapsed().as_secs_f64();
        let (s1, e1) = (bench_common::usage(pid).0, bench_common::usage(encoder).0);
        let rates: Vec<f64> = viewers
            .iter()
            .zip(&before)
            .map(|(v, b)| (v.received.frames.load(Ordering::Relaxed) - b) as f64 / secs)
            .collect();
        let stream = self.page().await?.stream.context("no stream numbers")?;
        let run = Run {
            viewers: n,
            mbits: (viewers[0].received.bytes.load(Ordering::Relaxed) - bytes_before) as f64 * 8.0
                / secs
                / 1e6,
            fps_median: median(&rates),
            fps_min: rates.iter().cloned().fold(f64::INFINITY, f64::min),
            encoder_cpu: (e1 - e0) as f64 / self.tick / secs * 100.0,
            server_cpu: (s1 - s0) as f64 / self.tick / secs * 100.0,
            latency_p50_ms: stream.encode_latency_p50_us as f64 / 1000.0,
            latency_p99_ms: stream.encode_latency_p99_us as f64 / 1000.0,
        };
        eprintln!(
            "    [{n} viewers] {:.1} fps (min {:.1}), {:.2} Mbit/s, encoder {:.1}% of a core, server {:.1}%, encode latency p50 {:.1} ms p99 {:.1} ms",
            run.fps_median,
            run.fps_min,
            run.mbits,
            run.encoder_cpu,
            run.server_cpu,
            run.latency_p50_ms,
            run.latency_p99_ms
        );
        for v in &viewers {
            v.close().await;
        }
        for m in members {
            m.close().await;
        }
        self.stream_gone().await?;
        Ok(run)
    }

    /// A headless Chromium joins through a viewer link as a guest, opens the desktop tab, and
    /// reads the time back from every frame it shows for `seconds`.
    async fn glass(&self) -> Result<Glass> {
        let link: ShareLink = self
            .http
            .post(format!("{}/api/sessions/{}/links", self.srv.url, self.id))
            .bearer_auth(&self.srv.token)
            .json(&json!({ "role": "viewer", "allow_guests": true }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let mut b = Chromium::start().await?;
        b.goto(link.url.as_deref().context("the link has no URL")?)
            .await?;
        let wait = Duration::from_secs(30);
        b.wait_for(
            "document.querySelector('#guest-name')",
            "the guest form",
            wait,
        )
        .await?;
        b.eval(
            "const i = document.querySelector('#guest-name'); i.value = 'Glass';
             i.dispatchEvent(new Event('input', { bubbles: true }));
             document.querySelector('#guest-join').click(); true",
        )
        .await?;
        b.wait_for(
            "location.pathname.startsWith('/sessions/') && document.querySelector('#tab-desktop')",
            "the session page",
            wait,
        )
        .await?;
        b.eval("document.querySelector('#tab-desktop').click(); true")
            .await?;
        b.wait_for(
            "(() => { const v = document.querySelector('#desktop-video'); return v && v.videoWidth > 0 && v.currentTime > 1; })()",
            "the desktop's video playing",
            wait,
        )
        .await?;
        let js = MEASURE_JS.replace("SECONDS", &self.seconds.to_string());
        let encoder = self
            .page()
            .await?
            .stream
            .context("no stream numbers")?
            .encoder_pid
            .context("no encoder pid")?;
        let (e0, t) = (bench_common::usage(encoder).0, Instant::now());
        let out: Value = b.eval(&js).await?;
        let encoder_cpu =
            (bench_common::usage(encoder).0 - e0) as f64 / self.tick / t.elapsed().as_secs_f64()
                * 100.0;
        drop(b);
        self.stream_gone().await?;
        let list = |k: &str| -> Vec<f64> {
            out[k]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        let (glass, decode) = (list("glass"), list("decode"));
        // Frame by frame beside `glass`: null where the browser gave no receipt time.
        let pairs: Vec<(f64, f64)> = glass
            .iter()
            .zip(out["received"].as_array().into_iter().flatten())
            .filter_map(|(g, r)| Some((*g, r.as_f64()?)))
            .collect();
        let received: Vec<f64> = pairs.iter().map(|(_, r)| *r).collect();
        ensure!(
            out["y"].as_i64().unwrap_or(-1) >= 0,
            "the page's red bar was not found in the received frames: is the workspace's page shown?"
        );
        ensure!(
            glass.len() >= 10,
            "only {} of {} frames could be read back ({} unreadable)",
            glass.len(),
            out["frames"],
            out["unread"]
        );
        let after: Vec<f64> = pairs.iter().map(|(g, r)| g - r).collect();
        let g = Glass {
            codec: out["codec"].as_str().unwrap_or("?").to_string(),
            encoder_cpu,
            samples: glass.len(),
            unread: out["unread"].as_u64().unwrap_or(0),
            fps: out["presented"].as_f64().unwrap_or(0.0) / self.seconds as f64,
            p50: median(&glass),
            p99: quantile(&glass, 0.99),
            received_p50: median(&received),
            after_receipt_p50: median(&after),
            decode_p50: median(&decode),
        };
        eprintln!(
            "    [browser, {}] glass to glass p50 {:.0} ms p99 {:.0} ms ({} frames read, {} unreadable, {:.1} fps shown, encoder {:.1}% of a core); drawn → received p50 {:.0} ms, received → shown {:.0} ms (decode {:.1} ms)",
            g.codec,
            g.p50,
            g.p99,
            g.samples,
            g.unread,
            g.fps,
            g.encoder_cpu,
            g.received_p50,
            g.after_receipt_p50,
            g.decode_p50
        );
        Ok(g)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let seconds: u64 = flag("--seconds", "10")?.parse()?;
    let fps: u32 = flag("--fps", "30")?.parse()?;
    let speed: i32 = flag("--speed", "12")?.parse()?;
    let speeds: Vec<i32> = flag("--speeds", "4,8")?
        .split(',')
        .map(|s| s.trim().parse().context("--speeds: numbers, e.g. 4,8,12"))
        .collect::<Result<_>>()?;
    // The baseline first, then the setting under test, the other VP8 speeds, and H.264.
    let mut plan = vec![(15u32, "vp8", speed), (fps, "vp8", speed)];
    plan.extend(
        speeds
            .iter()
            .filter(|s| **s != speed)
            .map(|s| (fps, "vp8", *s)),
    );
    plan.push((fps, "h264", speed));
    let mut settings = Vec::new();
    for (i, (fps, codec, speed)) in plan.into_iter().enumerate() {
        eprintln!("{fps} fps, {codec}, VP8 speed {speed}:");
        let bench = Bench::start(fps, codec, speed, seconds).await?;
        let counts: &[usize] = if i == 1 { &[1, 5, 20] } else { &[1] };
        let mut runs = Vec::new();
        for &n in counts {
            runs.push(bench.viewers(n).await?);
        }
        let glass = bench.glass().await?;
        ensure!(
            glass.codec.to_lowercase().ends_with(codec),
            "the browser decodes {}, not {codec}",
            glass.codec
        );
        bench.srv.finish().await?;
        settings.push(Setting {
            fps,
            codec,
            speed,
            runs,
            glass,
        });
    }

    println!(
        "\n| setting | fps per viewer | Mbit/s | capture+encode CPU (% of a core) | server CPU | encode p50 / p99 ms | glass to glass p50 / p99 ms (browser) | drawn → received p50 | received → shown p50 | fps shown in the browser | browser decodes |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in &settings {
        let r = &s.runs[0];
        let g = &s.glass;
        let name = if s.codec == "vp8" {
            format!("{} fps, VP8 speed {}", s.fps, s.speed)
        } else {
            format!("{} fps, {}", s.fps, s.codec)
        };
        println!(
            "| {name} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} / {:.1} | {:.0} / {:.0} | {:.0} | {:.0} | {:.1} | {} |",
            r.fps_median,
            r.mbits,
            r.encoder_cpu,
            r.server_cpu,
            r.latency_p50_ms,
            r.latency_p99_ms,
            g.p50,
            g.p99,
            g.received_p50,
            g.after_receipt_p50,
            g.fps,
            g.codec
        );
    }
    let base = &settings[0];
    let main = &settings[1];
    println!(
        "\n{} fps vs the 15 fps baseline: capture+encode CPU {:.2}× ({:.1}% of a core; target ≤ 50%), fps delivered {:.2}×, glass to glass p50 {:.0} vs {:.0} ms (target ≤ 100 ms)",
        main.fps,
        main.runs[0].encoder_cpu / base.runs[0].encoder_cpu.max(0.01),
        main.runs[0].encoder_cpu,
        main.runs[0].fps_median / base.runs[0].fps_median.max(0.01),
        main.glass.p50,
        base.glass.p50
    );
    println!(
        "\n| viewers ({} fps, VP8 speed {}) | fps per viewer (median / min) | capture+encode CPU | server CPU |\n|---|---|---|---|",
        main.fps, main.speed
    );
    for r in &main.runs {
        println!(
            "| {} | {:.1} / {:.1} | {:.1} | {:.1} |",
            r.viewers, r.fps_median, r.fps_min, r.encoder_cpu, r.server_cpu
        );
    }
    let one = &main.runs[0];
    for r in &main.runs[1..] {
        println!(
            "{} viewers vs 1: server CPU {:.2}×, per extra viewer {:.2}% of a core (target ≤ 2%); fps {:.2}× one viewer's",
            r.viewers,
            r.server_cpu / one.server_cpu.max(0.01),
            (r.server_cpu - one.server_cpu) / (r.viewers - 1) as f64,
            r.fps_median / one.fps_median.max(0.01)
        );
    }
    Ok(())
}
