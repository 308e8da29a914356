//! Burst benchmark (`cargo xtask bench burst`): N sessions (default 50) of one snapshot started
//! at once through the API against the release `tandem serve`, against N started one after
//! another in the same run (the baseline); p50/p99/max of each start (server-side, creation →
//! `ready`) and the wall time until all are ready. Then every session is stopped through the
//! API, and nothing of theirs may be left: the runtime lists no workspace, and `cargo xtask
//! bench burst` runs the leak check (mounts, loop devices, cgroups, processes, networks) over
//! the benchmark's data dir afterwards.
//!
//! Flags: `--sessions N` (default 50).

use tandem_bench as bench_common;

use std::time::Instant;

use anyhow::{Result, bail, ensure};
use tandem_protocol::*;
use tandem_server::client::Client;

use bench_common::{breakdown, quantile, ready_ms, wait_all};

fn args() -> Result<usize> {
    let v: Vec<String> = std::env::args().skip(1).collect();
    match v.as_slice() {
        [] => Ok(50),
        [f, n] if f == "--sessions" => Ok(n.parse()?),
        _ => bail!("usage: bench_burst [--sessions N]"),
    }
}

fn create(repo: RepoId) -> CreateSession {
    CreateSession {
        repo_id: repo,
        prompt: String::new(),
        branch: None,
        agent: Some(AgentSpec::None),
        context: None,
    }
}

/// Stops `ids` all at once through the API and waits until each is stopped; the wall time.
async fn stop_all(c: &Client, repo: RepoId, ids: &[SessionId]) -> Result<f64> {
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for id in ids {
        let (c, id) = (c.clone(), *id);
        set.spawn(async move { c.session_action(id, "stop").await });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    wait_all(c, repo, ids, SessionState::Stopped).await?;
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

fn line(case: &str, v: &[f64]) -> String {
    format!(
        "| {case} | {} | {:.0} | {:.0} | {:.0} |",
        v.len(),
        quantile(v, 0.5),
        quantile(v, 0.99),
        quantile(v, 1.0)
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let n = args()?;
    // The harness's prefix: `cargo xtask leaks` counts what is left under it.
    let srv = bench_common::start("tandem-test-bench-burst-", "").await?;
    let c = srv.client.clone();
    let first = srv
        .ready_session("bench/burst", &[("README.md", "burst\n")])
        .await?;
    let repo = c.session(first).await?.session.repo_id;
    stop_all(&c, repo, &[first]).await?;

    eprintln!("{n} sessions one after another…");
    let mut seq = Vec::new();
    let mut seq_ids = Vec::new();
    let t = Instant::now();
    for _ in 0..n {
        let id = c.create_session(&create(repo)).await?.session.id;
        let s = wait_all(&c, repo, &[id], SessionState::Ready).await?;
        seq.push(ready_ms(&c, &s[0]).await?);
        seq_ids.push(id);
    }
    let seq_wall = t.elapsed().as_secs_f64() * 1000.0;
    let seq_sessions = wait_all(&c, repo, &seq_ids, SessionState::Ready).await?;
    let seq_parts = breakdown(&c, &seq_sessions).await?;
    let seq_stop = stop_all(&c, repo, &seq_ids).await?;

    eprintln!("{n} sessions at once…");
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let c = c.clone();
        set.spawn(async move { c.create_session(&create(repo)).await });
    }
    let mut ids = Vec::new();
    while let Some(r) = set.join_next().await {
        ids.push(r??.session.id);
    }
    let ready = wait_all(&c, repo, &ids, SessionState::Ready).await?;
    let burst_wall = t.elapsed().as_secs_f64() * 1000.0;
    let mut burst = Vec::new();
    for s in &ready {
        burst.push(ready_ms(&c, s).await?);
    }
    let burst_parts = breakdown(&c, &ready).await?;
    let burst_stop = stop_all(&c, repo, &ids).await?;

    // Every session stopped through the API: the runtime must have nothing left.
    let left = srv.finish().await?;
    ensure!(
        left == 0,
        "{left} workspaces were still running after every session was stopped"
    );

    println!("\n| case | sessions | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|");
    println!("{}", line("one after another (baseline)", &seq));
    println!("{}", line("all at once", &burst));
    println!(
        "\nall at once: every session ready {burst_wall:.0} ms after the first request ({seq_wall:.0} ms one after another); p50 ratio {:.2}×, p99 ratio {:.2}× against the baseline; target p99 ≤ 1000 ms: {}",
        quantile(&burst, 0.5) / quantile(&seq, 0.5),
        quantile(&burst, 0.99) / quantile(&seq, 0.99),
        if quantile(&burst, 0.99) <= 1000.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    println!(
        "\nwhere a start's time went, medians in ms, the slowest in brackets (creation → each boot phase; the workspace's steps indented):\n- one after another: {seq_parts}\n- all at once: {burst_parts}"
    );
    println!(
        "stopping all: {burst_stop:.0} ms after the burst, {seq_stop:.0} ms after the sequential ones; no workspace left"
    );
    Ok(())
}
