//! Desktop stream benchmark (`cargo xtask bench desktop`), against the release `tandem serve` in
//! its own process, on a real workspace whose Chromium shows a page that changes every frame:
//! for 1, 5 and 20 viewers (Rust WebRTC receivers in this process), the frames each viewer
//! gets per second, the CPU of capture + encode (the encoder process), the server's CPU (the
//! sending: DTLS/SRTP, packetising per viewer), and the encode latency. The 1-viewer run is the
//! baseline the others are compared with.
//!
//! Flags: `--seconds N` (10) per run, `--fps N` (15).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;
use tandem_protocol::agent::DesktopPage;
use tandem_protocol::live::{WsClient, WsServer};
use tandem_server::client::desktop::DesktopViewer;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use tandem_bench as bench_common;

/// A page that repaints every frame (a moving gradient and a clock): the encoder's real work.
const BUSY_PAGE: &str = r#"<!doctype html><title>busy</title><body style="margin:0">
<canvas id=c width=1280 height=720 style="width:100vw;height:100vh"></canvas><script>
const c = document.getElementById('c'), g = c.getContext('2d');
function draw(t) {
  const x = (t / 5) % 1280;
  const grad = g.createLinearGradient(x, 0, x + 640, 720);
  grad.addColorStop(0, '#1a6'); grad.addColorStop(1, '#06c');
  g.fillStyle = grad; g.fillRect(0, 0, 1280, 720);
  g.fillStyle = '#fff'; g.font = '64px sans-serif'; g.fillText(new Date().toISOString(), 80, 360);
  g.fillRect(x, 500, 120, 120);
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);
</script></body>"#;

fn flag(name: &str, default: u64) -> Result<u64> {
    let v: Vec<String> = std::env::args().skip(1).collect();
    for w in v.windows(2) {
        if w[0] == name {
            return Ok(w[1].parse()?);
        }
    }
    for f in v.iter().step_by(2) {
        if !["--seconds", "--fps"].contains(&f.as_str()) {
            bail!("unknown flag {f}");
        }
    }
    Ok(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

struct Run {
    viewers: usize,
    fps_median: f64,
    fps_min: f64,
    encoder_cpu: f64,
    server_cpu: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let seconds = flag("--seconds", 10)?;
    let fps = flag("--fps", 15)?;
    let srv = bench_common::start(
        "tandem-bench-desktop-",
        &format!("[desktop]\nfps = {fps}\n"),
    )
    .await?;
    let (url, token, pid, _c) = (&srv.url, &srv.token, srv.pid, &srv.client);
    let id = srv
        .ready_session("bench/desktop", &[("busy.html", BUSY_PAGE)])
        .await?;
    let http = reqwest::Client::new();
    let res = http
        .post(format!("{url}/api/sessions/{id}/desktop/open"))
        .bearer_auth(token)
        .json(&json!({ "url": "file:///workspace/busy.html" }))
        .send()
        .await?;
    ensure!(
        res.status().is_success(),
        "opening the page: {}",
        res.text().await?
    );
    let creds = Credentials {
        token: Some(token.clone()),
        ..Default::default()
    };
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
    eprintln!("session {id} ready; the desktop shows a page repainting every frame");

    let mut runs = Vec::new();
    for n in [1usize, 5, 20] {
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
        let page: DesktopPage = http
            .get(format!("{url}/api/sessions/{id}/desktop"))
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?;
        let stream = page.stream.context("no stream numbers")?;
        let encoder = stream.encoder_pid.context("no encoder pid")?;
        let before: Vec<u64> = viewers
            .iter()
            .map(|v| v.received.frames.load(Ordering::Relaxed))
            .collect();
        let (s0, e0) = (bench_common::usage(pid).0, bench_common::usage(encoder).0);
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let secs = t.elapsed().as_secs_f64();
        let (s1, e1) = (bench_common::usage(pid).0, bench_common::usage(encoder).0);
        let mut rates: Vec<f64> = viewers
            .iter()
            .zip(&before)
            .map(|(v, b)| (v.received.frames.load(Ordering::Relaxed) - b) as f64 / secs)
            .collect();
        let page: DesktopPage = http
            .get(format!("{url}/api/sessions/{id}/desktop"))
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?;
        let stream = page.stream.context("no stream numbers")?;
        let fps_min = rates.iter().cloned().fold(f64::INFINITY, f64::min);
        let run = Run {
            viewers: n,
            fps_median: median(&mut rates),
            fps_min,
            encoder_cpu: (e1 - e0) as f64 / tick / secs * 100.0,
            server_cpu: (s1 - s0) as f64 / tick / secs * 100.0,
            latency_p50_ms: stream.encode_latency_p50_us as f64 / 1000.0,
            latency_p99_ms: stream.encode_latency_p99_us as f64 / 1000.0,
        };
        eprintln!(
            "[{n} viewers] {:.1} fps (min {:.1}), encoder {:.1}% of a core, server {:.1}%, encode latency p50 {:.1} ms p99 {:.1} ms",
            run.fps_median,
            run.fps_min,
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
        runs.push(run);
        // The stream ends when the last viewer leaves; the next run starts a fresh one.
        let t0 = Instant::now();
        loop {
            let page: DesktopPage = http
                .get(format!("{url}/api/sessions/{id}/desktop"))
                .bearer_auth(token)
                .send()
                .await?
                .json()
                .await?;
            if page.stream.is_none() {
                break;
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "the stream outlived its viewers"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    println!(
        "\n| viewers | fps per viewer (median / min) | capture+encode CPU (% of a core) | server CPU (% of a core) | encode latency p50 / p99 ms |\n|---|---|---|---|---|"
    );
    for r in &runs {
        println!(
            "| {} | {:.1} / {:.1} | {:.1} | {:.1} | {:.1} / {:.1} |",
            r.viewers,
            r.fps_median,
            r.fps_min,
            r.encoder_cpu,
            r.server_cpu,
            r.latency_p50_ms,
            r.latency_p99_ms
        );
    }
    let base = &runs[0];
    for r in &runs[1..] {
        let per_viewer = (r.server_cpu - base.server_cpu) / (r.viewers - 1) as f64;
        println!(
            "\n{} viewers vs 1 (the baseline): server CPU {:.2}×, per extra viewer {:.2}% of a core (target ≤ 2%); fps {:.2}× the baseline's",
            r.viewers,
            r.server_cpu / base.server_cpu.max(0.01),
            per_viewer,
            r.fps_median / base.fps_median.max(0.01)
        );
    }
    println!(
        "\n1280×720 at {fps} fps: {:.1} fps delivered, capture+encode {:.1}% of a core (target ≥ 15 fps within one core)",
        base.fps_median, base.encoder_cpu
    );
    srv.finish().await.map(drop)
}
