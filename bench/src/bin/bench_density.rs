//! Density benchmark (`cargo xtask bench density`): idle sessions (agent idle, no desktop) added
//! to one host through the API against the release `tandem serve`, `--batch` at a time, until
//! `--sessions` run (default 1,000) or a start degrades past 10× the first ones' median or fails;
//! then what holds them is counted and an idle minute is watched.
//!
//! Printed every `--step` sessions: the step's median start (server-side, creation → `ready`),
//! the host's available memory, slab and page tables, loop devices, mounts, and the server's
//! resident memory, threads and open files. At the end: memory per idle workspace counted
//! whole (the host's `MemAvailable` drop over the sessions, split into the workspaces' own
//! processes (PSS), slab, page tables and the server's share), the first and the last starts
//! against each other (target: the last within 1.5× of the first), and what an idle workspace
//! costs in CPU: its processes' wakeups (context switches) per second and the server's CPU over
//! `--idle-secs`.
//!
//! Flags: `--sessions N` (1000), `--batch N` (4), `--step N` (100), `--idle-secs N` (20).

use tandem_bench as bench_common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tandem_protocol::*;
use tandem_server::client::Client;

use bench_common::{breakdown, quantile, ready_ms};

struct Args {
    sessions: usize,
    batch: usize,
    step: usize,
    idle_secs: u64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        sessions: 1000,
        batch: 4,
        step: 100,
        idle_secs: 20,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let Some(n) = it.next() else {
            bail!("{flag} needs a value")
        };
        let n: u64 = n.parse()?;
        match flag.as_str() {
            "--sessions" => a.sessions = n as usize,
            "--batch" => a.batch = n.max(1) as usize,
            "--step" => a.step = n.max(1) as usize,
            "--idle-secs" => a.idle_secs = n,
            f => bail!("unknown flag {f}"),
        }
    }
    Ok(a)
}

/// `/proc/meminfo` in KiB.
fn meminfo() -> HashMap<String, i64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

fn loop_devices() -> usize {
    std::fs::read_dir("/sys/block")
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("loop/backing_file").exists())
                .count()
        })
        .unwrap_or(0)
}

fn mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().count())
        .unwrap_or(0)
}

/// The server's resident KiB, threads and open files.
fn server(pid: u32) -> (i64, i64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (field("VmRSS:"), field("Threads:"), fds)
}

/// Processes in Tandem's workspace cgroups (`…/tandem/<id>`).
fn workspace_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains("/tandem/"))
        })
        .collect()
}

/// Proportional set size of `pid`, KiB.
fn pss(pid: u32) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Context switches `pid` has made (each is a wakeup or a preemption).
fn switches(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
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

async fn start_one(c: &Client, repo: RepoId) -> Result<(SessionId, f64)> {
    let id = c.create_session(&create(repo)).await?.session.id;
    let t0 = Instant::now();
    loop {
        let s = c.session(id).await?.session;
        match s.state {
            SessionState::Ready => return Ok((id, ready_ms(c, &s).await?)),
            SessionState::Failed | SessionState::Stopped => {
                let why = c
                    .events(id, 0)
                    .await?
                    .events
                    .into_iter()
                    .rev()
                    .find_map(|e| match e.kind {
                        EventKind::Error { message } => Some(message),
                        _ => None,
                    })
                    .unwrap_or_default();
                bail!("session {id} failed: {why}")
            }
            _ => {}
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("session {id} was not ready in 2 minutes");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let srv = bench_common::start("tandem-test-bench-density-", "").await?;
    let c = srv.client.clone();
    let first = srv
        .ready_session("bench/density", &[("README.md", "idle\n")])
        .await?;
    let repo = c.session(first).await?.session.repo_id;
    c.session_action(first, "stop").await?;

    let mem0 = meminfo();
    let (rss0, _, _) = server(srv.pid);
    let (loops0, mounts0) = (loop_devices(), mounts());
    let mut ids = Vec::new();
    let mut starts = Vec::new();
    let mut stopped_because = None;
    let mut parts = Vec::new();
    println!(
        "| sessions | step median start ms | MemAvailable MiB | Slab MiB | PageTables MiB | loop devices | mounts | server RSS MiB | threads | fds |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    'adding: while ids.len() < a.sessions {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..a.batch.min(a.sessions - ids.len()) {
            let c = c.clone();
            set.spawn(async move { start_one(&c, repo).await });
        }
        while let Some(r) = set.join_next().await {
            match r? {
                Ok((id, ms)) => {
                    ids.push(id);
                    starts.push(ms);
                }
                Err(e) => {
                    stopped_because = Some(format!("a start failed: {e}"));
                    break 'adding;
                }
            }
        }
        if ids.len() % a.step < a.batch || ids.len() == a.sessions {
            let m = meminfo();
            let (rss, threads, fds) = server(srv.pid);
            let recent = &starts[starts.len().saturating_sub(a.step)..];
            println!(
                "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {threads} | {fds} |",
                ids.len(),
                quantile(recent, 0.5),
                m["MemAvailable"] >> 10,
                m["Slab"] >> 10,
                m["PageTables"] >> 10,
                loop_devices(),
                mounts(),
                rss >> 10,
            );
            // After the row's samples: these requests are not the host's idle state.
            let mut step = Vec::new();
            for id in &ids[ids.len().saturating_sub(a.step)..] {
                step.push(c.session(*id).await?.session);
            }
            parts.push((ids.len(), breakdown(&c, &step).await?));
        }
        let head = quantile(&starts[..starts.len().min(a.step)], 0.5);
        let last = quantile(&starts[starts.len().saturating_sub(a.batch)..], 0.5);
        if starts.len() > a.step && last > 10.0 * head {
            stopped_because = Some(format!(
                "starts degraded: {last:.0} ms against {head:.0} ms for the first"
            ));
            break;
        }
    }
    println!(
        "\nwhere each step's starts spent their time, medians in ms, the slowest in brackets (creation → each boot phase; the workspace's steps indented):"
    );
    for (n, p) in &parts {
        println!("- {n}: {p}");
    }
    let n = ids.len();
    println!(
        "\n{n} idle sessions running{}",
        stopped_because
            .as_deref()
            .map(|w| format!("; stopped adding: {w}"))
            .unwrap_or_default()
    );

    // Memory, counted whole.
    let m = meminfo();
    let (rss, _, _) = server(srv.pid);
    let pids = workspace_pids();
    let pss_sum: i64 = pids.iter().map(|p| pss(*p)).sum();
    let per = |kib: i64| kib as f64 / n.max(1) as f64 / 1024.0;
    let total = mem0["MemAvailable"] - m["MemAvailable"];
    println!("\nmemory per idle workspace (MiB):");
    println!("| part | MiB |\n|---|---|");
    println!(
        "| the host's MemAvailable drop, all of it | {:.2} |",
        per(total)
    );
    println!(
        "| its processes' PSS ({} processes in all) | {:.2} |",
        pids.len(),
        per(pss_sum)
    );
    println!("| slab | {:.2} |", per(m["Slab"] - mem0["Slab"]));
    println!(
        "| page tables | {:.2} |",
        per(m["PageTables"] - mem0["PageTables"])
    );
    println!("| the server's share | {:.2} |", per(rss - rss0));
    println!(
        "| loop devices, mounts added | {}, {} |",
        loop_devices() - loops0,
        mounts().saturating_sub(mounts0)
    );

    let k = a.step.min(n / 2).max(1);
    let (head, tail) = (quantile(&starts[..k], 0.5), quantile(&starts[n - k..], 0.5));
    println!(
        "\nstart median, first {k}: {head:.0} ms; last {k}: {tail:.0} ms; ratio {:.2}× (target ≤ 1.5×: {})",
        tail / head,
        if tail <= 1.5 * head { "met" } else { "NOT met" }
    );

    // Idle: nothing is asked of any session.
    let before: Vec<(u32, u64)> = pids.iter().map(|p| (*p, switches(*p))).collect();
    let (server0, _) = bench_common::usage(srv.pid);
    tokio::time::sleep(Duration::from_secs(a.idle_secs)).await;
    let woke: u64 = before
        .iter()
        .map(|(p, s)| switches(*p).saturating_sub(*s))
        .sum();
    let (server1, _) = bench_common::usage(srv.pid);
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
    let secs = a.idle_secs.max(1) as f64;
    println!(
        "\nidle for {secs:.0} s: the workspaces' processes woke {:.3} times a second each ({woke} in all); the server used {:.1}% of a core ({:.3}% per session)",
        woke as f64 / secs / n.max(1) as f64,
        (server1 - server0) as f64 / tick / secs * 100.0,
        (server1 - server0) as f64 / tick / secs * 100.0 / n.max(1) as f64
    );

    eprintln!("stopping {n} sessions…");
    let t = Instant::now();
    for chunk in ids.chunks(16) {
        let mut set = tokio::task::JoinSet::new();
        for id in chunk {
            let (c, id) = (c.clone(), *id);
            set.spawn(async move { c.session_action(id, "stop").await });
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
    }
    println!("stopped all {n} in {:.1} s", t.elapsed().as_secs_f64());
    let left = srv.finish().await?;
    if left > 0 {
        bail!("{left} workspaces were still running after every session was stopped");
    }
    Ok(())
}
