//! `cargo xtask`: the project's automation, in Rust.
//!
//! - `cargo xtask up [--debug] [--listen ADDR] [--data-dir DIR]`: install prerequisites, build the
//!   web app and the server, start `tandem serve` with the embedded default (SQLite + local runtime).
//! - `cargo xtask test`: install prerequisites (test ones too), build the web app, start a
//!   throwaway PostgreSQL, run every test (unit, integration on SQLite and PostgreSQL, e2e in
//!   headless Chromium), then schemathesis against `/api/openapi.json` and a smoke test of `up`.
//! - `cargo xtask schemathesis`: only that schemathesis step (the tests' workspace image must be
//!   built: `cargo xtask test` builds it).
//! - `cargo xtask smoke`: only the smoke test of `up` (`--debug`; a first session in headless
//!   Chromium): `test` runs it last.
//! - `cargo xtask tidy [--graph]`: the structure rules (file size, `//!` lines, layers and
//!   forbidden imports); `--graph` prints the server's module graph and its import circles.
//! - `cargo xtask leaks [--clean]`: what the tests left on this host (workspace processes,
//!   mounts, loop devices, networks under test data dirs) and how to clean it; `test` runs it last.
//! - `cargo xtask site [--release]`: build the web app into `target/site`.
//! - `cargo xtask docs`: install mdBook if missing, build the book (`docs/book`) into
//!   `target/book`, and fail on a broken relative link or anchor in the documentation.
//! - `cargo xtask deps [--test]`: only install prerequisites.
//! - `cargo xtask cluster up|down`: the one-node Kubernetes (and registry) on loopback the
//!   Kubernetes runtime's tests run against; `test` brings it up and down itself.
//! - `cargo xtask extension [--server URL] [--page PATTERN]… [--all-sites]`: the Chrome
//!   extension for a server, unpacked in `target/extension/tandem` and as `target/extension/tandem.zip`.
//! - `cargo xtask bench start [flags]`: the session start benchmark (release build; root);
//!   `--runtime kubernetes`: starts on pods of the test cluster beside this machine's.
//! - `cargo xtask bench burst [--sessions N]`: 50 sessions started at once against 50 one after
//!   another, then all stopped and the leak check (release build; root).
//! - `cargo xtask bench density [flags]`: idle sessions added until 1,000 or a start degrades;
//!   memory per workspace counted whole, idle wakeups (release build; root).
//! - `cargo xtask bench live [flags]`: live channel latency and fan-out (release build; root).
//! - `cargo xtask bench edit [flags]`: 20 editors in one shared file, keystroke → every other
//!   editor against the terminal's keystroke path, memory per open document (release; root).
//! - `cargo xtask bench desktop [flags]`: the desktop stream: encoder settings, 1/5/20 viewers,
//!   glass to glass in headless Chromium (release build; root).
//! - `cargo xtask bench queue [flags]`: prompt queue throughput and claim latency, SQLite and
//!   PostgreSQL (release build).
//! - `cargo xtask bench insights [flags]`: `/api/insights` over a generated month of 100,000
//!   sessions, SQLite and PostgreSQL (release build).

use anyhow::{Result, bail};

mod cluster;
mod deps;
mod disk;
mod docs;
mod leaks;
mod phoenix;
mod postgres;
mod run;
mod schemathesis;
mod site;
mod smoke;
mod test;
mod tidy;
mod up;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args
        .split_first()
        .map_or(("help", &[][..]), |(c, r)| (c.as_str(), r));
    match cmd {
        "up" => up::run(up::Options::parse(rest)?),
        "test" => test::run(test::Options::parse(rest)?),
        "tidy" => tidy::run(rest),
        "smoke" => match rest {
            [] => smoke::up(true),
            _ => bail!("`cargo xtask smoke` takes no flags (it runs `up --debug`)"),
        },
        "cluster" => cluster::run(rest),
        "leaks" => leaks::run(rest),
        "docs" => docs::run(true),
        "schemathesis" => schemathesis::run(true, true),
        "site" => {
            deps::ensure(deps::Needs { test: false })?;
            site::build(if rest.iter().any(|a| a == "--release") {
                site::Profile::Release
            } else {
                site::Profile::Debug
            })
            .map(|_| ())
        }
        "extension" => {
            run::step("the Chrome extension's package");
            run::cmd(
                run::cargo()
                    .args([
                        "run",
                        "-q",
                        "-p",
                        "tandem-server",
                        "--bin",
                        "tandem",
                        "--",
                        "extension",
                    ])
                    .args(rest),
            )
        }
        "deps" => deps::ensure(deps::Needs {
            test: rest.iter().any(|a| a == "--test"),
        }),
        "bench" => match rest.split_first() {
            Some((b, flags))
                if b == "start"
                    && flags
                        .windows(2)
                        .any(|w| w[0] == "--runtime" && w[1] == "kubernetes") =>
            {
                deps::ensure(deps::Needs { test: true })?;
                let flags: Vec<String> = flags
                    .iter()
                    .filter(|f| *f != "--runtime" && *f != "kubernetes")
                    .cloned()
                    .collect();
                run::step(
                    "benchmark: session start, Kubernetes beside this machine (release build)",
                );
                let bench = run::build_bench("bench_kube_start")?;
                let cluster = cluster::Cluster::start()?;
                let res = run::cmd(
                    std::process::Command::new(bench)
                        .args(&flags)
                        .env("TANDEM_BENCH_KUBECONFIG", &cluster.kubeconfig)
                        .env("TANDEM_BENCH_REGISTRY", cluster.registry)
                        .current_dir(run::root()),
                );
                let down = cluster.stop();
                res?;
                down
            }
            Some((b, flags)) if b == "start" => {
                deps::ensure(deps::Needs { test: true })?;
                run::step("benchmark: session start (release build)");
                let bench = run::build_bench("bench_start")?;
                run::cmd(
                    std::process::Command::new(bench)
                        .args(flags)
                        .current_dir(run::root()),
                )
            }
            Some((b, flags)) if b == "queue" => {
                deps::ensure(deps::Needs { test: true })?;
                run::step("benchmark: prompt queue on SQLite and PostgreSQL (release build)");
                let bench = run::build_bench("bench_queue")?;
                let pg = postgres::Postgres::start()?;
                let res = run::cmd(
                    std::process::Command::new(bench)
                        .args(flags)
                        .env("TANDEM_BENCH_POSTGRES_URL", &pg.url)
                        .current_dir(run::root()),
                );
                drop(pg);
                res
            }
            Some((b, flags)) if b == "insights" => {
                run::step(
                    "benchmark: insights over 100,000 sessions on SQLite and PostgreSQL (release build)",
                );
                let bench = run::build_bench("bench_insights")?;
                let pg = postgres::Postgres::start()?;
                let res = run::cmd(
                    std::process::Command::new(bench)
                        .args(flags)
                        .env("TANDEM_BENCH_POSTGRES_URL", &pg.url)
                        .current_dir(run::root()),
                );
                drop(pg);
                res
            }
            Some((b, flags)) if b == "live" => release_bench("bench_live", "live channel", flags),
            Some((b, flags)) if b == "edit" => release_bench("bench_edit", "shared editing", flags),
            Some((b, flags)) if b == "burst" => {
                release_bench("bench_burst", "sessions started at once", flags)?;
                // Every session was stopped through the API: nothing of theirs may be left.
                leaks::check()
            }
            Some((b, flags)) if b == "density" => {
                release_bench("bench_density", "idle sessions on one host", flags)?;
                leaks::check()
            }
            Some((b, flags)) if b == "desktop" => {
                // Glass-to-glass is measured in the web app (the release server's `../site`).
                deps::ensure(deps::Needs { test: true })?;
                site::build(site::Profile::Release)?;
                release_bench("bench_desktop", "desktop stream", flags)
            }
            _ => bail!(
                "benchmarks: `cargo xtask bench start`, `burst`, `density`, `queue`, `live`, `edit`, `desktop` or `insights`"
            ),
        },
        "help" | "--help" | "-h" => {
            println!(
                "{}",
                include_str!("main.rs")
                    .lines()
                    .take_while(|l| l.starts_with("//!"))
                    .map(|l| l.trim_start_matches("//!").trim_start())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            Ok(())
        }
        other => bail!("unknown xtask {other:?}; try `cargo xtask help`"),
    }
}

/// A benchmark against the release `tandem serve` and workspace agent: builds them and the
/// benchmark `example` (a binary of `tandem-bench`), then runs it with `flags`.
fn release_bench(example: &str, what: &str, flags: &[String]) -> Result<()> {
    deps::ensure(deps::Needs { test: true })?;
    run::step(&format!("benchmark: {what} (release build; root)"));
    let bench = run::build_bench(example)?;
    run::cmd(
        std::process::Command::new(bench)
            .args(flags)
            .current_dir(run::root()),
    )
}
