//! Prompt queue benchmark (`cargo xtask bench queue`): enqueue throughput, then claim
//! throughput and claim latency (median, p99) with several workers claiming across sessions —
//! the real code paths (`sessions::prompts::submit`, `turns::claim`, then ending the turn) — on
//! SQLite and, when `TANDEM_BENCH_POSTGRES_URL` is set, PostgreSQL. The baseline, measured in the
//! same run on the same database, is a one-row update in its own transaction.
//!
//! Flags: `--sessions N` (default 50), `--prompts N` per session (40), `--workers N` (4).

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
    enqueue_per_s: f64,
    claims_per_s: f64,
    claim_p50: Duration,
    claim_p99: Duration,
    base_p50: Duration,
    base_p99: Duration,
}

async fn bench(db: Db, backend: &'static str, a: &Args) -> Result<Report> {
    db.migrate().await?;
    let admin = User::new(UserId(uuid::Uuid::new_v4()), "bench", true, Timestamp(0));
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
            name: "bench/queue".into(),
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
    let enqueue_per_s = total as f64 / t0.elapsed().as_secs_f64();

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
    let done: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM prompts WHERE state = 'done'")
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
    Ok(Report {
        backend,
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
    let dir = tempfile::tempdir()?;
    eprintln!(
        "SQLite: {} sessions × {} prompts, {} workers…",
        a.sessions, a.prompts, a.workers
    );
    let sqlite = Db::connect(&tandem_server::config::sqlite_url(
        &dir.path().join("bench.db"),
    ))
    .await?;
    reports.push(bench(sqlite, "sqlite", &a).await?);
    match std::env::var("TANDEM_BENCH_POSTGRES_URL") {
        Ok(url) => {
            eprintln!("PostgreSQL…");
            reports.push(bench(Db::connect(&url).await?, "postgres", &a).await?);
        }
        Err(_) => eprintln!(
            "PostgreSQL skipped: TANDEM_BENCH_POSTGRES_URL is not set (`cargo xtask bench queue` sets it)"
        ),
    }
    println!();
    println!(
        "| database | enqueue/s | claims/s | claim p50 | claim p99 | baseline p50 | baseline p99 | p50 ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &reports {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1}× |",
            r.backend,
            r.enqueue_per_s,
            r.claims_per_s,
            ms(r.claim_p50),
            ms(r.claim_p99),
            ms(r.base_p50),
            ms(r.base_p99),
            ms(r.claim_p50) / ms(r.base_p50)
        );
    }
    if let Some(s) = reports.iter().find(|r| r.backend == "sqlite") {
        let ok = s.claims_per_s >= 1000.0 && s.claim_p99 <= Duration::from_millis(5);
        println!(
            "\nSQLite target (≥1,000 claims/s, p99 ≤ 5 ms): {}",
            if ok { "met" } else { "NOT met" }
        );
    }
    Ok(())
}
