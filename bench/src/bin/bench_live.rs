//! Live channel benchmark (`cargo xtask bench live`), against the release `tandem serve` in its
//! own process (so its CPU and memory are its own), on a real workspace PTY:
//! (a) keystroke → echo seen by a second client through the hub, against the same keystroke
//!     echoed on a direct attachment to the workspace agent's PTY (the baseline, same run);
//! (b) one session, N viewers, a terminal writing R KiB/s for S seconds: delivery completeness,
//!     lag of timestamped markers (p50/p99), server CPU and peak RSS. The viewers read the
//!     frames in place (`tandem_bench::viewer`), so their own cost takes as little as it can of
//!     the cores they share with the server.
//!
//! Flags: `--keys N` (200), `--viewers N` (500), `--seconds N` (30), `--rate-kib N` (1024),
//! `--every-ms N` (10: the terminal writes a slice and a marker that often; at 100 each marker
//! waits behind a 100 KiB slice, whose fan-out to every viewer is what its lag then measures).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use tandem_protocol::live::{WsClient, WsServer};
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use tandem_bench as bench_common;
use tandem_bench::viewer::{Frame, RawViewer};

#[derive(Clone, Copy)]
struct Args {
    keys: usize,
    viewers: usize,
    seconds: u64,
    rate_kib: usize,
    every_ms: u64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        keys: 200,
        viewers: 500,
        seconds: 30,
        rate_kib: 1024,
        every_ms: 10,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("flag needs a value")?.parse()?;
        match flag.as_str() {
            "--keys" => a.keys = n,
            "--viewers" => a.viewers = n,
            "--seconds" => a.seconds = n as u64,
            "--rate-kib" => a.rate_kib = n,
            "--every-ms" => {
                if !(1..=1000).contains(&n) {
                    bail!("--every-ms takes 1 to 1000");
                }
                a.every_ms = n as u64;
            }
            f => bail!("unknown flag {f}"),
        }
    }
    Ok(a)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

async fn screen_until(c: &mut LiveClient, needle: &[u8], buf: &mut Vec<u8>) -> Result<()> {
    while !buf.windows(needle.len()).any(|w| w == needle) {
        match tokio::time::timeout(Duration::from_secs(30), c.next()).await? {
            Some(Incoming::Terminal(_, b)) => buf.extend_from_slice(&b),
            Some(Incoming::Closed(code, r)) => bail!("closed {code:?}: {r}"),
            Some(_) => {}
            None => bail!("channel ended"),
        }
        if buf.len() > 1 << 20 {
            buf.drain(..buf.len() - 4096);
        }
    }
    Ok(())
}

/// Finds the load's markers (`@M<micros>@`) and its end (`@DONE@@@`) in terminal frames as
/// they come, reading each frame where it lies: the 2,000 viewers' scans share two cores with
/// the server, so a viewer copies only a marker cut by a frame's end.
#[derive(Default)]
struct Markers {
    /// The start of a marker the last frame ended in.
    carry: Vec<u8>,
}

impl Markers {
    /// Calls `marker` with each marker's time; true once the end came.
    fn feed(&mut self, frame: &[u8], mut marker: impl FnMut(u64)) -> bool {
        let joined;
        let data: &[u8] = if self.carry.is_empty() {
            frame
        } else {
            self.carry.extend_from_slice(frame);
            joined = std::mem::take(&mut self.carry);
            &joined
        };
        let mut pos = 0;
        while let Some(at) = memchr::memmem::find(&data[pos..], b"@M").map(|i| pos + i) {
            let Some(len) = memchr::memchr(b'@', &data[at + 2..]) else {
                break;
            };
            let us = std::str::from_utf8(&data[at + 2..at + 2 + len])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if us > 0 {
                marker(us);
            }
            pos = at + 3 + len;
        }
        let rest = &data[pos..];
        if memchr::memmem::find(rest, b"@DONE@@@").is_some() {
            return true;
        }
        // Markers and the end are short: an unfinished one starts in the last 64 bytes.
        let tail = rest.len().saturating_sub(64);
        if let Some(at) = memchr::memchr(b'@', &rest[tail..]) {
            self.carry = rest[tail + at..].to_vec();
        }
        false
    }
}

/// How many `z` bytes (the load's payload) `b` holds. Counted in runs of 255 into a byte (it
/// cannot wrap: at most 255 a run), which the compiler turns into wide compares; a plain
/// `filter(..).count()` compiled to a loop of one byte at a time and was a third of the machine
/// with 2,000 viewers at 1 MiB/s. A wrapping add: the release profile checks overflow, and a
/// checked add keeps the loop narrow.
fn count_z(b: &[u8]) -> usize {
    b.chunks(255)
        .map(|run| {
            run.iter()
                .fold(0u8, |n, &c| n.wrapping_add(u8::from(c == b'z'))) as usize
        })
        .sum()
}

/// One run's figures.
struct Outcome {
    metrics: bool,
    hub: (f64, f64),
    direct: (f64, f64),
    got_everything: usize,
    dropped: usize,
    lag: (f64, f64),
    cpu: f64,
    /// The viewers' own CPU (this process: their sockets, frames and scans).
    clients_cpu: f64,
    rss_mib: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    // Without, with, with, without: the same server counting nothing (no `[telemetry]
    // metrics_token`, as on a server nobody scrapes) and counting everything for `/metrics`,
    // twice each in an order that a machine growing busier run by run favours neither.
    let mut outcomes = Vec::new();
    for metrics in [false, true, true, false] {
        eprintln!("— metrics {} —", if metrics { "on" } else { "off" });
        outcomes.push(once(&a, metrics).await?);
    }
    // The baseline: 100 viewers of the same stream, in the same run.
    let few = Args {
        viewers: BASELINE_VIEWERS,
        ..a
    };
    eprintln!("— baseline: {BASELINE_VIEWERS} viewers, metrics off —");
    let base = once(&few, false).await?;
    println!();
    println!(
        "| metrics | keystroke → echo at a 2nd client, median | p99 | direct median | direct p99 | added (median) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for o in &outcomes {
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            if o.metrics { "on" } else { "off" },
            o.hub.0,
            o.hub.1,
            o.direct.0,
            o.direct.1,
            o.hub.0 - o.direct.0
        );
    }
    println!();
    println!(
        "| metrics | viewers | rate | written every | seconds | got everything | dropped (4408) | marker lag p50 | p99 | server CPU | viewers' CPU | server peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for o in &outcomes {
        println!(
            "| {} | {} | {} KiB/s | {} ms | {} | {}/{} | {} | {:.1} ms | {:.1} ms | {:.0}% of a core | {:.0}% of a core | {} MiB |",
            if o.metrics { "on" } else { "off" },
            a.viewers,
            a.rate_kib,
            a.every_ms,
            a.seconds,
            o.got_everything,
            a.viewers,
            o.dropped,
            o.lag.0,
            o.lag.1,
            o.cpu,
            o.clients_cpu,
            o.rss_mib
        );
    }
    let mean = |metrics: bool, f: fn(&Outcome) -> f64| {
        let v: Vec<f64> = outcomes
            .iter()
            .filter(|o| o.metrics == metrics)
            .map(f)
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let (on, off) = (mean(true, |o| o.cpu), mean(false, |o| o.cpu));
    let cost = (on / off - 1.0) * 100.0;
    println!(
        "\nmetrics cost: server CPU {on:.1}% of a core with them against {off:.1}% without for the same fan-out, mean of two runs each ({cost:+.1}%; target under 2%: {}); everything delivered to {:.0} of {} viewers with, {:.0} without",
        if cost < 2.0 { "met" } else { "NOT met" },
        mean(true, |o| o.got_everything as f64),
        a.viewers,
        mean(false, |o| o.got_everything as f64),
    );
    let lag99 = outcomes.iter().map(|o| o.lag.1).collect::<Vec<_>>();
    let median_lag99 = {
        let mut v = lag99.clone();
        pct(&mut v, 0.5)
    };
    println!(
        "baseline: {BASELINE_VIEWERS} viewers, marker lag p50 {:.1} ms, p99 {:.1} ms, server CPU {:.0}% of a core, everything to {}/{BASELINE_VIEWERS}; {} viewers' p99 (median of the four runs) {median_lag99:.1} ms = {:.2}× the baseline's; server CPU per viewer {:.3}% of a core against {:.3}%",
        base.lag.0,
        base.lag.1,
        base.cpu,
        base.got_everything,
        a.viewers,
        median_lag99 / base.lag.1,
        mean(false, |o| o.cpu) / a.viewers as f64,
        base.cpu / BASELINE_VIEWERS as f64,
    );
    Ok(())
}

/// The viewers of the baseline run.
const BASELINE_VIEWERS: usize = 100;

/// The whole benchmark once, on a server with `metrics` counted or not.
async fn once(a: &Args, metrics: bool) -> Result<Outcome> {
    let config = if metrics {
        "[telemetry]\nmetrics_token = \"bench-live-metrics-token-0123\"\n"
    } else {
        ""
    };
    let srv = bench_common::start("tandem-bench-live-", config).await?;
    let (url, token, pid) = (&srv.url, &srv.token, srv.pid);
    let id = srv
        .ready_session("bench/live", &[("README.md", "bench\n")])
        .await?;
    let creds = Credentials {
        token: Some(token.clone()),
        ..Default::default()
    };
    eprintln!("session {id} ready; (a) {} keystrokes…", a.keys);

    // (a) Keystroke → echo at a second client, and on a direct attachment to the agent's PTY.
    let mut typist = LiveClient::connect(url, id, &creds).await?;
    let mut watcher = LiveClient::connect(url, id, &creds).await?;
    let term = loop {
        match typist.next().await {
            Some(Incoming::Message(m)) => match *m {
                WsServer::Hello { terminals, .. } | WsServer::Terminals { terminals }
                    if !terminals.is_empty() =>
                {
                    break terminals[0].id;
                }
                _ => {}
            },
            Some(_) => {}
            None => bail!("no terminal"),
        }
    };
    // Quiet terminal: `cat` echoes what is typed, nothing else.
    typist.input(term, b"stty -echo; cat\r").await?;
    let mut buf = Vec::new();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut hub = Vec::new();
    for i in 0..a.keys {
        let key = format!("k{i:05}\r");
        buf.clear();
        let t = Instant::now();
        typist.input(term, key.as_bytes()).await?;
        screen_until(&mut watcher, &key.as_bytes()[..6], &mut buf).await?;
        hub.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    // The baseline: the same on the agent's PTY directly (what the hub sits in front of).
    let config = tandem_server::config::Config::resolve(tandem_server::config::Overrides {
        data_dir: Some(srv.data.clone()),
        images_dir: Some(srv.images_dir.clone()),
        image_recipe: Some(srv.recipe.clone()),
        agent_bin: Some(srv.target.join("release/tandem-workspace-agent")),
        ..Default::default()
    })?;
    let ws = tandem_server::serve::workspaces(&config, None)
        .await
        .map_err(anyhow::Error::msg)?;
    let db = tandem_server::db::Db::connect(&config.database_url).await?;
    let row = tandem_server::db::sessions::workspace(&db, id)
        .await?
        .context("session row")?;
    let mut direct = tandem_server::workspace_agent::WorkspaceAgent::new(
        &ws,
        row.workspace_id.as_deref().context("wid")?,
        row.workspace_pid.context("pid")? as i32,
    )
    .attach_pty(term)
    .await?;
    let mut base = Vec::new();
    for i in 0..a.keys {
        let key = format!("d{i:05}\r");
        let t = Instant::now();
        direct
            .send(tokio_tungstenite::tungstenite::Message::Binary(
                key.clone().into_bytes().into(),
            ))
            .await?;
        let mut seen = Vec::new();
        while !seen.windows(6).any(|w| w == &key.as_bytes()[..6]) {
            if let tokio_tungstenite::tungstenite::Message::Binary(b) =
                tokio::time::timeout(Duration::from_secs(30), direct.next())
                    .await?
                    .context("agent closed")??
            {
                seen.extend_from_slice(&b)
            }
        }
        base.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(direct);
    typist.input(term, &[3]).await?; // Ctrl-C ends cat
    let (h50, h99, b50, b99) = (
        pct(&mut hub.clone(), 0.5),
        pct(&mut hub, 0.99),
        pct(&mut base.clone(), 0.5),
        pct(&mut base, 0.99),
    );

    eprintln!(
        "(a) through the hub: median {h50:.2} ms, p99 {h99:.2} ms; direct: median {b50:.2} ms, p99 {b99:.2} ms"
    );
    // (b) N viewers, R KiB/s for S seconds with a timestamped marker line every 100 ms. They
    // come as an audience does: guests through viewer links (as many links as the per-link
    // bound of guests asks for).
    eprintln!("(b) connecting {} viewers…", a.viewers);
    let http = reqwest::Client::new();
    let mut viewers = Vec::new();
    let mut link = String::new();
    for n in 0..a.viewers {
        if n % tandem_protocol::live::MAX_GUESTS_PER_LINK == 0 {
            let made: tandem_protocol::live::ShareLink = http
                .post(format!("{url}/api/sessions/{id}/links"))
                .bearer_auth(token)
                .json(&tandem_protocol::live::CreateLink {
                    role: tandem_protocol::live::Role::Viewer,
                    expires_in: None,
                    allow_guests: true,
                })
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            link = made.token.context("a new link's token")?;
        }
        viewers
            .push(RawViewer::connect(url, &id.to_string(), &link, &format!("Viewer {n}")).await?);
    }
    let (u0, _) = bench_common::usage(pid);
    let (c0, _) = bench_common::usage(std::process::id());
    let started = Instant::now();
    let epoch = std::time::UNIX_EPOCH;
    let mut tasks = Vec::new();
    let a_seconds = a.seconds;
    for mut v in viewers {
        tasks.push(tokio::spawn(async move {
            let (mut bytes, mut lags, mut markers) = (0usize, Vec::new(), Markers::default());
            let (mut frames, mut texts) = (0usize, 0usize);
            // The first and last marker times seen: the span the load was written over.
            let mut span = (u64::MAX, 0u64);
            let mut closed = None;
            // The loop takes a bit longer than its sleeps; a viewer still waiting after this lost data.
            let end = Instant::now() + Duration::from_secs(a_seconds * 2 + 30);
            loop {
                let m = match tokio::time::timeout(
                    end.saturating_duration_since(Instant::now()),
                    v.next(),
                )
                .await
                {
                    Ok(Ok(m)) => m,
                    Ok(Err(e)) => {
                        eprintln!("a viewer's channel broke: {e:#}");
                        break;
                    }
                    Err(_) => break,
                };
                match m {
                    Frame::Terminal(r) => {
                        let b = v.bytes(r);
                        frames += 1;
                        bytes += count_z(b);
                        let now = || epoch.elapsed().map(|d| d.as_micros() as u64).unwrap_or(0);
                        if markers.feed(b, |us| {
                            span = (span.0.min(us), span.1.max(us));
                            lags.push(now().saturating_sub(us) as f64 / 1000.0)
                        }) {
                            break;
                        }
                    }
                    Frame::Closed(code) => {
                        closed = code;
                        break;
                    }
                    Frame::End => break,
                    Frame::Text => texts += 1,
                }
            }
            (bytes, lags, closed, frames, texts, span)
        }));
    }
    // The load: one loop in the workspace writes a slice of R × every / 1000 KiB of `z` and a
    // marker with its own clock's time every `every` ms (the workspace shares the host's clock),
    // on a schedule of its own: a round that ran late is followed by a shorter wait, so the
    // rate stays R whatever the loop costs.
    let slice = a.rate_kib * 1024 * a.every_ms as usize / 1000;
    let rounds = a.seconds * 1000 / a.every_ms;
    let sent = slice * rounds as usize;
    let mut loader = LiveClient::connect(url, id, &creds).await?;
    loader
        .send(&WsClient::Resize {
            terminal: term,
            cols: 200,
            rows: 50,
        })
        .await?;
    // bash builtins only inside the loop (printf, $EPOCHREALTIME, arithmetic, and `read -t` on
    // a pipe nobody writes to as the wait): the producer must not be what limits the rate, nor
    // take the server's CPU (a `sleep` process a round, 100 a second, was an eighth of the two
    // cores in a profile of 2,000 viewers). A `read` that ends other than by its timeout (no
    // such fd) falls back to `sleep`, so the rate holds either way.
    let every_us = a.every_ms * 1000;
    let script = format!(
        "s=$(head -c {slice} /dev/zero | tr '\\0' z); exec {{z}}<> <(:); t=${{EPOCHREALTIME/./}}; for i in $(seq 1 {rounds}); do printf '%s\\n@M%s@\\n' \"$s\" \"${{EPOCHREALTIME/./}}\"; d=$(( t + i * {every_us} - ${{EPOCHREALTIME/./}} )); if [ $d -gt 0 ]; then printf -v p '%d.%06d' $(( d / 1000000 )) $(( d % 1000000 )); read -t $p -u $z || (( $? > 128 )) || sleep $p; fi; done; echo @DONE@@\"\"@\r"
    );
    eprintln!(
        "(b) {} KiB/s for {} s, {} KiB every {} ms…",
        a.rate_kib,
        a.seconds,
        slice / 1024,
        a.every_ms
    );
    loader.input(term, script.as_bytes()).await?;
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    for n in 0..(a.seconds / 5) {
        tick.tick().await;
        let (_, rss) = bench_common::usage(pid);
        eprintln!("    {:>3} s, server RSS {} MiB", n * 5, rss / 1024);
    }
    eprintln!("(b) waiting for the viewers to drain…");
    let mut bytes = Vec::new();
    let mut lags = Vec::new();
    let mut dropped = 0;
    let (mut frames, mut texts) = (Vec::new(), Vec::new());
    let mut span = (u64::MAX, 0u64);
    for t in tasks {
        let (b, l, closed, f, x, s) = t.await?;
        span = (span.0.min(s.0), span.1.max(s.1));
        frames.push(f as f64);
        texts.push(x as f64);
        bytes.push(b as f64);
        lags.extend(l);
        if closed.is_some() {
            dropped += 1;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let (u1, rss) = bench_common::usage(pid);
    let (c1, _) = bench_common::usage(std::process::id());
    let hz = 100.0;
    let cpu = (u1 - u0) as f64 / hz / wall * 100.0;
    let clients_cpu = (c1 - c0) as f64 / hz / wall * 100.0;
    let full = bytes.iter().filter(|b| **b >= sent as f64).count();
    let mut got = bytes.clone();
    let got_median = pct(&mut got, 0.5) / sent as f64 * 100.0;
    eprintln!(
        "(b) sent {} MiB per viewer; median viewer received {got_median:.0}% of it",
        sent >> 20
    );
    // The producer keeps to its schedule, or the rate was not the one asked for.
    let planned = rounds.saturating_sub(1) as f64 * a.every_ms as f64 / 1000.0;
    if span.0 == u64::MAX {
        eprintln!("(b) no viewer saw a marker of the load (planned over {planned:.2} s)");
    } else {
        eprintln!(
            "(b) the load was written over {:.2} s (planned {planned:.2} s)",
            span.1.saturating_sub(span.0) as f64 / 1e6,
        );
    }
    eprintln!(
        "(b) median viewer: {:.0} terminal frames, {:.0} JSON messages",
        pct(&mut frames, 0.5),
        pct(&mut texts, 0.5)
    );
    let (l50, l99) = (pct(&mut lags.clone(), 0.5), pct(&mut lags, 0.99));
    srv.finish().await?;
    Ok(Outcome {
        metrics,
        hub: (h50, h99),
        direct: (b50, b99),
        got_everything: full,
        dropped,
        lag: (l50, l99),
        cpu,
        clients_cpu,
        rss_mib: rss / 1024,
    })
}

#[cfg(test)]
mod tests {
    use super::Markers;

    #[test]
    fn the_payload_is_counted_whole() {
        let mut b = vec![b'z'; 100_000];
        b[7] = b'@';
        b[99_999] = b'\n';
        assert_eq!(super::count_z(&b), 99_998);
        assert_eq!(super::count_z(&b[..255]), 254);
        assert_eq!(super::count_z(b""), 0);
    }

    #[test]
    fn markers_cut_by_a_frame_end_are_read_whole() {
        let stream = b"zzzz\n@M1000@\nzz\n@M2000@\nzzz@M3000@\n@DONE@@@\n";
        // Every cut of the stream into two frames finds the same markers and the end.
        for cut in 0..stream.len() {
            let (mut m, mut got) = (Markers::default(), Vec::new());
            let first = m.feed(&stream[..cut], |us| got.push(us));
            let done = first || m.feed(&stream[cut..], |us| got.push(us));
            assert!(done, "the end, cut at {cut}");
            assert_eq!(got, [1000, 2000, 3000], "cut at {cut}");
        }
        // A frame without markers leaves nothing carried.
        let mut m = Markers::default();
        assert!(!m.feed(&[b'z'; 4096], |_| panic!("no marker")));
        assert!(m.carry.is_empty());
    }
}
