//! Prompt queue benchmark (`cargo xtask bench queue`): enqueue throughput, then claim
//! throughput and claim latency (median, p99) with several workers claiming across sessions —
//! the real code paths (`sessions::prompts::submit`, `turns::claim`, then ending the turn) — on
//! SQLite and, when `TANDEM_BENCH_POSTGRES_URL` is set, PostgreSQL. The baseline, measured in the
//! same run on the same database, is a one-row update in its own transaction.
//!
//!
//! Each database runs twice, in alternation: once with the server's metrics observer on the
//! store (every event and claim counted for `/metrics`, as `serve` installs it) and once
//! without; the claims/s ratio between the two is what the metrics cost.
//!
//! Flags: `--sessions N` (default 50), `--prompts N` per session (40), `--workers N` (4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tandem_protocol::*;
use tandem_server::db::{self, Db};
use tandem_server::turns::{self, Claim};

struct Args {
    sessions: usize,
    prompts: usize,
    workers: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        sessions: 50,
        prompts: 40,
        workers: 4,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("flag needs a value")?.parse()?;
        match flag.as_str() {
            "--sessions" => a.sessions = n,
            "--prompts" => a.prompts = n,
            "--workers" => a.workers = n,
            f => bail!("unknown flag {f}"),
        }
    }
    Ok(a)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Report {
    backend: &'static str,
    metered: bool,
    /// Events and measures the metrics observed.
    observer_calls: u64,
    /// The share of the workers' time (enqueue and claim phases) spent in the observer.
    observer_share: f64,
    enqueue_per_s: f64,
    claims_per_s: f64,
    claim_p50: Duration,
    claim_p99: Duration,
    base_p50: Duration,
    base_p99: Duration,
}

async fn bench(db: Db, backend: &'static str, metered: bool, a: &Args) -> Result<Report> {
    db.migrate().await?;
    // The time spent in the observer, measured around each call (the clock reads included,
    // so it overstates the metrics' own work).
    let in_metrics = std::sync::Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    if metered {
        let metrics = std::sync::Arc::new(tandem_server::metrics::Metrics::default());
        let spent = in_metrics.clone();
        db.observe(Box::new(move |o| {
            let t = Instant::now();
            metrics.observe(o);
            spent
                .0
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            spent.1.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // A person of this run's own: PostgreSQL's database is shared by the runs.
    let name = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let admin = User::new(UserId(uuid::Uuid::new_v4()), &name, true, Timestamp(0));
    db::users::insert(&db, &admin).await?;
    let author = Author {
        kind: AuthorKind::User,
        user_id: Some(admin.id),
        name: "bench".into(),
    };
    let repo = tandem_server::repos::create(
        &db,
        &admin,
        CreateRepo {
            // A repo of this run's own: PostgreSQL's database is shared by the runs.
            name: format!("bench/queue-{}", uuid::Uuid::new_v4().simple()),
            url: "https://example.invalid/bench-queue.git".into(),
            default_branch: None,
            warm_pool: None,
        },
        &[],
    )
    .await?;
    let mut sessions = Vec::new();
    for _ in 0..a.sessions {
        let create = CreateSession {
            repo_id: repo.id,
            prompt: String::new(),
            branch: None,
            agent: Some(AgentSpec::None),
            context: None,
        };
        let s = tandem_server::sessions::create(&db, author.clone(), create, &AgentSpec::None)
            .await?
            .session;
        // Prompts need an agent; the session is live (as if its workspace were up).
        sqlx::query("UPDATE sessions SET agent = $1 WHERE id = $2")
            .bind(r#"{"kind":"builtin"}"#)
            .bind(s.id.to_string())
            .execute(db.raw_pool())
            .await?;
        let mut tx = db.begin().await?;
        db::sessions::transition(
            &mut tx,
            s.id,
            SessionState::Ready,
            None,
            tandem_server::now_ms(),
        )
        .await?;
        tx.commit().await?;
        sessions.push(s.id);
    }

    // Enqueue: every prompt through the API's code path (insert + event, one transaction).
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for w in 0..a.workers {
        let (db, author, mine): (Db, Author, Vec<SessionId>) = (
            db.clone(),
            author.clone(),
            sessions
                .iter()
                .copied()
                .skip(w)
                .step_by(a.workers)
                .collect(),
        );
        let n = a.prompts;
        handles.push(tokio::spawn(async move {
            for i in 0..n {
                for s in &mine {
                    let req = CreatePrompt {
                        text: format!("prompt {i}"),
                        mode: PromptMode::Queue,
                        agent: None,
                        context: None,
                    };
                    tandem_server::sessions::prompts::submit(&db, *s, author.clone(), req).await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let total = a.sessions * a.prompts;
    let enqueue_elapsed = t0.elapsed();
    let enqueue_per_s = total as f64 / enqueue_elapsed.as_secs_f64();

    // Claim: each worker claims the next prompt of its sessions in turn (the session lock) and
    // ends the turn, until every queue is empty.
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for w in 0..a.workers {
        let (db, mine): (Db, Vec<SessionId>) = (
            db.clone(),
            sessions
                .iter()
                .copied()
                .skip(w)
                .step_by(a.workers)
                .collect(),
        );
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let runner = format!("bench-{w}");
            loop {
                let mut claimed = 0;
                for s in &mine {
                    let t = Instant::now();
                    let c = turns::claim(&db, *s, &runner).await?;
                    lat.push(t.elapsed());
                    if let Claim::Turn(p, _) = c {
                        claimed += 1;
                        let mut tx = db.begin().await?;
                        db::prompts::finish(
                            &mut tx,
                            p.id,
                            Some(&runner),
                            PromptState::Done,
                            Usage::default(),
                            tandem_server::now_ms(),
                        )
                        .await?;
                        tx.commit().await?;
                    }
                }
                if claimed == 0 {
                    return anyhow::Ok(lat);
                }
            }
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await??);
    }
    let elapsed = t0.elapsed();
    let done: (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM prompts p JOIN sessions s ON s.id = p.session_id \
         WHERE s.repo_id = $1 AND p.state = 'done'",
    )
    .bind(repo.id.to_string())
    .fetch_one(db.raw_pool())
    .await?;
    anyhow::ensure!(done.0 as usize == total, "claimed {} of {total}", done.0);
    lat.sort();

    // Baseline: a one-row update in its own transaction, same workers, same database.
    let mut handles = Vec::new();
    for w in 0..a.workers {
        let (db, mine): (Db, Vec<SessionId>) = (
            db.clone(),
            sessions
                .iter()
                .copied()
                .skip(w)
                .step_by(a.workers)
                .collect(),
        );
        let n = total / a.workers / mine.len().max(1);
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for _ in 0..n {
                for s in &mine {
                    let t = Instant::now();
                    let mut tx = db.begin().await?;
                    sqlx::query("UPDATE sessions SET updated_at = $1 WHERE id = $2")
                        .bind(tandem_server::now_ms())
                        .bind(s.to_string())
                        .execute(tx.raw())
                        .await?;
                    tx.commit().await?;
                    lat.push(t.elapsed());
                }
            }
            anyhow::Ok(lat)
        }));
    }
    let mut base = Vec::new();
    for h in handles {
        base.extend(h.await??);
    }
    base.sort();
    let busy = (enqueue_elapsed + elapsed).as_nanos() as f64 * a.workers as f64;
    Ok(Report {
        backend,
        metered,
        observer_calls: in_metrics.1.load(Ordering::Relaxed),
        observer_share: in_metrics.0.load(Ordering::Relaxed) as f64 / busy,
        enqueue_per_s,
        claims_per_s: total as f64 / elapsed.as_secs_f64(),
        claim_p50: pct(&lat, 0.5),
        claim_p99: pct(&lat, 0.99),
        base_p50: pct(&base, 0.5),
        base_p99: pct(&base, 0.99),
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let mut reports = Vec::new();
    let dir = tandem_bench::WorkDir::new("tandem-bench-queue-")?;
    let postgres = std::env::var("TANDEM_BENCH_POSTGRES_URL").ok();
    if postgres.is_none() {
        eprintln!(
            "PostgreSQL skipped: TANDEM_BENCH_POSTGRES_URL is not set (`cargo xtask bench queue` sets it)"
        );
    }
    // Without, with, with, without: each database's two runs of each kind, in an order that
    // a machine (or a shared database) growing slower or faster run by run favours neither.
    for (round, metered) in [false, true, true, false].into_iter().enumerate() {
        eprintln!(
            "SQLite{}: {} sessions × {} prompts, {} workers…",
            if metered { " with metrics" } else { "" },
            a.sessions,
            a.prompts,
            a.workers
        );
        let sqlite = Db::connect(&tandem_server::config::sqlite_url(
            &dir.path().join(format!("bench-{round}.db")),
        ))
        .await?;
        reports.push(bench(sqlite, "sqlite", metered, &a).await?);
        if let Some(url) = &postgres {
            eprintln!("PostgreSQL{}…", if metered { " with metrics" } else { "" });
            reports.push(bench(Db::connect(url).await?, "postgres", metered, &a).await?);
        }
    }
    println!();
    println!(
        "| database | metrics | enqueue/s | claims/s | claim p50 | claim p99 | baseline p50 | baseline p99 | p50 ratio |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &reports {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1}× |",
            r.backend,
            if r.metered { "on" } else { "off" },
            r.enqueue_per_s,
            r.claims_per_s,
            ms(r.claim_p50),
            ms(r.claim_p99),
            ms(r.base_p50),
            ms(r.base_p99),
            ms(r.claim_p50) / ms(r.base_p50)
        );
    }
    println!();
    for backend in ["sqlite", "postgres"] {
        // The mean of the two runs of each kind.
        let mean = |metered: bool, f: fn(&Report) -> f64| {
            let v: Vec<f64> = reports
                .iter()
                .filter(|r| r.backend == backend && r.metered == metered)
                .map(f)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let (Some(on), Some(off)) = (
            mean(true, |r| r.claims_per_s),
            mean(false, |r| r.claims_per_s),
        ) else {
            continue;
        };
        let enq = mean(true, |r| r.enqueue_per_s).unwrap_or(0.0)
            / mean(false, |r| r.enqueue_per_s).unwrap_or(1.0);
        println!(
            "{backend}: with metrics {on:.0} claims/s against {off:.0} without, mean of two runs each ({:.3}×; enqueue {enq:.3}×; compare with the spread between runs of one kind above)",
            on / off,
        );
    }
    for r in reports.iter().filter(|r| r.metered) {
        println!(
            "{}: the metrics observer took {:.3}% of the workers' time ({} calls){}",
            r.backend,
            r.observer_share * 100.0,
            r.observer_calls,
            if r.observer_share < 0.02 {
                " — under 2%: met"
            } else {
                " — NOT under 2%"
            }
        );
    }
    if let Some(s) = reports.iter().find(|r| r.backend == "sqlite" && r.metered) {
        let ok = s.claims_per_s >= 1000.0 && s.claim_p99 <= Duration::from_millis(5);
        println!(
            "\nSQLite target (≥1,000 claims/s, p99 ≤ 5 ms): {}",
            if ok { "met" } else { "NOT met" }
        );
    }
    Ok(())
}
