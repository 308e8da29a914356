//! Insights benchmark (`cargo xtask bench insights`): `/api/insights`' query (the core's
//! `insights::insights`, every grouping) with 100,000 generated sessions in the database over
//! a year, for the page's default period (the last 30 days) and for the whole year, on SQLite
//! and, when `TANDEM_BENCH_POSTGRES_URL` is set, PostgreSQL. The baseline, measured in the same
//! run on the same database, is counting the period's sessions (the least any answer reads).
//!
//! Flags: `--sessions N` (default 100000), `--days N` they span (365), `--runs N` per
//! grouping (15).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tandem_protocol::spend::GroupBy;
use tandem_protocol::*;
use tandem_server::db::{self, Db};

struct Args {
    sessions: usize,
    days: i64,
    runs: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        sessions: 100_000,
        days: 365,
        runs: 15,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("flag needs a value")?.parse()?;
        match flag.as_str() {
            "--sessions" => a.sessions = n,
            "--runs" => a.runs = n,
            "--days" => a.days = n as i64,
            f => bail!("unknown flag {f}"),
        }
    }
    Ok(a)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench(db: Db, backend: &str, a: &Args) -> Result<Vec<(String, Duration, Duration)>> {
    db.migrate().await?;
    let now = tandem_server::now_ms();
    let admin = User::new(UserId(uuid::Uuid::new_v4()), "admin", true, Timestamp(now));
    db::users::insert(&db, &admin).await?;
    let t = Instant::now();
    db::fixture::insert_month(
        &db,
        &db::fixture::Month {
            sessions: a.sessions,
            repos: 8,
            people: 16,
            now,
            days: a.days,
            seed: 7,
        },
        admin.id,
    )
    .await?;
    eprintln!(
        "{backend}: {} sessions made in {:.1} s",
        a.sessions,
        t.elapsed().as_secs_f64()
    );
    let mut out = Vec::new();
    let month = (now - 30 * 86_400_000, "30 days");
    let year = (now - a.days * 86_400_000, "all");
    for (from, period) in [month, year] {
        let mut base = Vec::new();
        let mut in_period = 0;
        for _ in 0..a.runs {
            let t = Instant::now();
            let (n,): (i64,) = sqlx::query_as(
                "SELECT CAST(COUNT(*) AS BIGINT) FROM sessions WHERE created_at >= $1 AND created_at < $2",
            )
            .bind(from)
            .bind(now + 1)
            .fetch_one(db.raw_pool())
            .await?;
            base.push(t.elapsed());
            in_period = n;
        }
        let base = median(base);
        let groups: &[GroupBy] = match period {
            "30 days" => &[
                GroupBy::Repo,
                GroupBy::Person,
                GroupBy::Agent,
                GroupBy::Model,
                GroupBy::Surface,
                GroupBy::Day,
            ],
            _ => &[GroupBy::Repo],
        };
        for g in groups {
            let q = tandem_server::insights::Query {
                from: Some(from),
                to: Some(now + 1),
                group_by: *g,
                repo: None,
            };
            let mut times = Vec::new();
            let mut total = 0;
            for _ in 0..a.runs {
                let t = Instant::now();
                let i = tandem_server::insights::insights(&db, &admin, &q).await?;
                times.push(t.elapsed());
                total = i.total.sessions;
            }
            anyhow::ensure!(total == in_period, "every session of the period counted");
            out.push((
                format!(
                    "{period} ({in_period} sessions), by {}",
                    format!("{g:?}").to_lowercase()
                ),
                median(times),
                base,
            ));
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let dir = tandem_bench::WorkDir::new("tandem-bench-insights-")?;
    let mut reports = Vec::new();
    // `TANDEM_BENCH_SQLITE` keeps the SQLite database there (to look into it afterwards).
    let path = std::env::var_os("TANDEM_BENCH_SQLITE")
        .map_or_else(|| dir.path().join("bench.db"), std::path::PathBuf::from);
    let sqlite = Db::connect(&tandem_server::config::sqlite_url(&path)).await?;
    reports.push(("sqlite", bench(sqlite, "sqlite", &a).await?));
    match std::env::var("TANDEM_BENCH_POSTGRES_URL") {
        Ok(url) => reports.push((
            "postgres",
            bench(Db::connect(&url).await?, "postgres", &a).await?,
        )),
        Err(_) => eprintln!(
            "PostgreSQL skipped: TANDEM_BENCH_POSTGRES_URL is not set (`cargo xtask bench insights` sets it)"
        ),
    }
    println!();
    println!("| database | period, grouping | insights p50 | baseline (count) p50 | ratio |");
    println!("|---|---|---:|---:|---:|");
    let mut worst = Duration::ZERO;
    for (backend, rows) in &reports {
        for (g, t, base) in rows {
            if g.starts_with("30 days") {
                worst = worst.max(*t);
            }
            println!(
                "| {backend} | {g} | {:.1} ms | {:.2} ms | {:.0}× |",
                ms(*t),
                ms(*base),
                ms(*t) / ms(*base).max(0.001)
            );
        }
    }
    println!(
        "\nTarget (the page's default 30 days under 200 ms with {} sessions in the database): {}",
        a.sessions,
        if worst < Duration::from_millis(200) {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(())
}
