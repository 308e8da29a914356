//! Shared editing benchmark (`cargo xtask bench edit`), against the release `tandem serve` in
//! its own process, on a real workspace:
//! (a) one keystroke typed in a file that N editors have open (yrs clients, as the browser's
//!     yjs) → the moment every other editor has it (p50/p99 over all receivers and keys),
//!     against the same run's terminal keystroke → echo at a second client (the baseline);
//! (b) the server's memory per open document (resident memory before and after opening
//!     `MAX_OPEN_DOCS` files of 64 KiB, each followed by two people).
//!
//! Flags: `--editors N` (20), `--keys N` (200).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use tandem_protocol::live::{MAX_DOCS_PER_MEMBER, MAX_OPEN_DOCS, WsClient, WsServer};
use tandem_server::client::live::{Credentials, Incoming, LiveClient};
use yrs::updates::decoder::Decode;
use yrs::{GetString, OffsetKind, Options, Text, Transact, Update};

use tandem_bench as bench_common;

const FILE: &str = "doc.rs";

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Result<Vec<u8>> {
    Ok(base64::engine::general_purpose::STANDARD.decode(s)?)
}

fn new_doc() -> (yrs::Doc, yrs::TextRef) {
    let doc = yrs::Doc::with_options(Options {
        offset_kind: OffsetKind::Bytes,
        ..Options::default()
    });
    let text = doc.get_or_insert_text("content");
    (doc, text)
}

fn apply(doc: &yrs::Doc, update: &str) -> Result<()> {
    let u = Update::decode_v1(&unb64(update)?)?;
    doc.transact_mut().apply_update(u)?;
    Ok(())
}

/// Connects and opens `paths`, answering once each is open.
async fn editor(
    url: &str,
    id: tandem_protocol::SessionId,
    creds: &Credentials,
    paths: &[String],
) -> Result<(LiveClient, yrs::Doc, yrs::TextRef)> {
    let mut c = LiveClient::connect(url, id, creds).await?;
    let (doc, text) = new_doc();
    for p in paths {
        c.send(&WsClient::OpenFile { path: p.clone() }).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(30), c.next()).await? {
                Some(Incoming::Message(m)) => match *m {
                    WsServer::FileOpened { path, update, .. } if path == *p => {
                        if paths.len() == 1 {
                            apply(&doc, &update)?;
                        }
                        break;
                    }
                    WsServer::Refused { request, reason } => bail!("{request}: {reason}"),
                    _ => {}
                },
                Some(Incoming::Closed(code, r)) => bail!("closed {code:?}: {r}"),
                Some(_) => {}
                None => bail!("channel ended"),
            }
        }
    }
    Ok((c, doc, text))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
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

#[tokio::main]
async fn main() -> Result<()> {
    let (mut editors, mut keys) = (20usize, 200usize);
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("flag needs a value")?.parse()?;
        match flag.as_str() {
            "--editors" => editors = n,
            "--keys" => keys = n,
            f => bail!("unknown flag {f}"),
        }
    }
    let srv = bench_common::start("tandem-bench-edit-", "").await?;
    let (url, pid) = (srv.url.clone(), srv.pid);
    let big = "// 64 KiB of code\n".repeat(64 * 1024 / 18);
    let mut files: Vec<(String, String)> = vec![(FILE.into(), "fn main() {}\n".into())];
    for i in 0..MAX_OPEN_DOCS - 1 {
        files.push((format!("big{i:02}.rs"), big.clone()));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let id = srv.ready_session("bench/edit", &refs).await?;
    let creds = Credentials {
        token: Some(srv.token.clone()),
        ..Default::default()
    };

    // The baseline: a terminal keystroke → its echo at a second client, through the hub.
    let mut typist = LiveClient::connect(&url, id, &creds).await?;
    let mut watcher = LiveClient::connect(&url, id, &creds).await?;
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
    typist.input(term, b"stty -echo; cat\r").await?;
    let mut buf = Vec::new();
    screen_until(&mut watcher, b"cat", &mut buf).await?;
    let mut terminal = Vec::new();
    for i in 0..keys {
        let key = format!("k{i:05}\r");
        buf.clear();
        let t = Instant::now();
        typist.input(term, key.as_bytes()).await?;
        screen_until(&mut watcher, &key.as_bytes()[..6], &mut buf).await?;
        terminal.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    typist.input(term, &[3]).await?;
    eprintln!("terminal baseline: {keys} keystrokes");

    // (a) N editors in one file: one types, every other one must have each keystroke.
    let one = vec![FILE.to_string()];
    let (mut typing, doc, text) = editor(&url, id, &creds, &one).await?;
    let current = Arc::new(AtomicUsize::new(usize::MAX));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut readers = Vec::new();
    for _ in 1..editors {
        let (mut c, d, t) = editor(&url, id, &creds, &one).await?;
        let (current, tx) = (current.clone(), tx.clone());
        readers.push(tokio::spawn(async move {
            let mut reported = usize::MAX;
            while let Some(m) = c.next().await {
                if let Incoming::Message(m) = m
                    && let WsServer::FileUpdate { update, .. } = *m
                {
                    let _ = apply(&d, &update);
                    let k = current.load(Ordering::Acquire);
                    if k != reported && t.get_string(&d.transact()).contains(&format!("<{k:05}>")) {
                        reported = k;
                        let _ = tx.send((k, Instant::now()));
                    }
                }
            }
        }));
    }
    eprintln!("{editors} editors in {FILE}; {keys} keystrokes…");
    let mut edits = Vec::new();
    for k in 0..keys {
        current.store(k, Ordering::Release);
        let update = {
            let mut txn = doc.transact_mut();
            text.insert(&mut txn, 0, &format!("<{k:05}>"));
            txn.encode_update_v1()
        };
        let t = Instant::now();
        typing
            .send(&WsClient::FileUpdate {
                path: FILE.into(),
                update: b64(&update),
            })
            .await?;
        let mut got = 0;
        while got < editors - 1 {
            let (key, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await?
                .context("readers ended")?;
            if key == k {
                edits.push(at.duration_since(t).as_secs_f64() * 1000.0);
                got += 1;
            }
        }
        // Keystrokes a person types (at most the rate the server lets one person send).
        tokio::time::sleep(Duration::from_millis(12)).await;
    }
    for r in readers {
        r.abort();
    }

    // (b) Memory per open document: every file open, each by two people.
    let rss_before = rss_kib(pid);
    let mut holders = Vec::new();
    let paths: Vec<String> = files.iter().skip(1).map(|(p, _)| p.clone()).collect();
    for _ in 0..2 {
        for chunk in paths.chunks(MAX_DOCS_PER_MEMBER) {
            holders.push(editor(&url, id, &creds, chunk).await?);
        }
    }
    let rss_after = rss_kib(pid);
    let per_doc = rss_after.saturating_sub(rss_before) as f64 / paths.len() as f64;

    let (t50, t99) = (pct(&mut terminal.clone(), 0.5), pct(&mut terminal, 0.99));
    let (e50, e99) = (pct(&mut edits.clone(), 0.5), pct(&mut edits, 0.99));
    println!();
    println!(
        "| path | samples | median | p99 |\n|---|---:|---:|---:|\n| terminal keystroke → echo at a 2nd client | {} | {t50:.2} ms | {t99:.2} ms |\n| editor keystroke → each of {} other editors | {} | {e50:.2} ms | {e99:.2} ms |",
        keys,
        editors - 1,
        edits.len(),
    );
    println!(
        "\neditor p99 {e99:.1} ms ({:.1}× the terminal's median; target p99 ≤ 50 ms: {})",
        e50 / t50,
        if e99 <= 50.0 { "met" } else { "NOT met" }
    );
    println!(
        "server memory: {} KiB resident before, {} KiB with {} more 64 KiB files open (each by two people): {:.0} KiB per open document",
        rss_before,
        rss_after,
        paths.len(),
        per_doc
    );
    println!(
        "server peak resident memory over the run: {} KiB",
        bench_common::usage(pid).1
    );
    drop(holders);
    srv.finish().await.map(drop)
}
