//! Session start benchmark (`cargo xtask bench start`): POST /api/sessions → the `ready` boot
//! event, from a warm snapshot, for a small and a large repo (starts interleaved, so both meet
//! the same machine state), against `cp -a` of the same tree
//! measured in the same run, and from the warm pool. Needs root, runc and mmdebstrap.
//!
//! Flags: `--runs N` (default 10), `--large-files N` (100000), `--large-mib N` (2048),
//! `--cp-runs-large N` (1: one copy of 4 GiB takes minutes here).
//!
//! Last, what each part of a workspace's confinement costs: bare runtime starts (the image, no
//! agent) with everything on, with each of the seccomp profile, the user namespace and the own
//! disk off, and with all three off (the baseline), interleaved, in the same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tandem_protocol::*;
use tandem_server::client::Client;
use tandem_server::config::{Config, sqlite_url};
use tandem_server::serve::Server;

const TEST_RECIPE: &str = include_str!("../../../images/test/image.toml");

struct Args {
    runs: usize,
    large_files: usize,
    large_mib: usize,
    cp_runs_large: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        runs: 10,
        large_files: 100_000,
        large_mib: 2048,
        cp_runs_large: 1,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("flag needs a value")?.parse()?;
        match flag.as_str() {
            "--runs" => a.runs = n,
            "--large-files" => a.large_files = n,
            "--large-mib" => a.large_mib = n,
            "--cp-runs-large" => a.cp_runs_large = n,
            f => bail!("unknown flag {f}"),
        }
    }
    Ok(a)
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(["-c", "core.compression=0", "-c", "core.looseCompression=0"])
        .args(args)
        .current_dir(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A repo of `files` files totalling `bytes`, in folders of 100, with text-like content.
fn make_repo(dir: &Path, files: usize, bytes: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let per = (bytes / files).max(1);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut buf = vec![0u8; per];
    for i in 0..files {
        let sub = dir.join(format!("src/d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        for b in buf.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = b"abcdefghijklmnopqrstuvwxyz \n"[(state % 28) as usize];
        }
        std::fs::write(sub.join(format!("f{i}.txt")), &buf)?;
    }
    std::fs::write(dir.join("tandem.toml"), "[workspace]\n")?;
    git(dir, &["init", "-q"])?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-qm", "bench"])?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn cp_a(from: &Path, scratch: &Path, runs: usize) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let to = scratch.join("copy");
        let _ = std::fs::remove_dir_all(&to);
        let t = Instant::now();
        let st = Command::new("cp").arg("-a").arg(from).arg(&to).status()?;
        ensure!(st.success(), "cp -a failed");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        std::fs::remove_dir_all(&to)?;
    }
    Ok(times)
}

async fn wait_snapshot(c: &Client, id: SnapshotId) -> Result<Snapshot> {
    loop {
        let s = c.snapshot(id).await?;
        if s.state != SnapshotState::Building {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a session and returns server-side ms from its creation to its `ready` event.
async fn start_once(c: &Client, repo: RepoId) -> Result<(f64, SessionId)> {
    let (ms, id, phases) = start_with_phases(c, repo).await?;
    eprintln!("    phases: {phases}");
    Ok((ms, id))
}

async fn start_with_phases(c: &Client, repo: RepoId) -> Result<(f64, SessionId, String)> {
    let d = c
        .create_session(&CreateSession {
            repo_id: repo,
            prompt: String::new(),
            branch: None,
            agent: Some(tandem_protocol::AgentSpec::None),
            context: None,
        })
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let page = c.events(d.session.id, 0).await?;
        for e in &page.events {
            match &e.kind {
                EventKind::BootPhase {
                    phase: BootPhase::Ready,
                    ..
                } => {
                    let phases: Vec<String> = page
                        .events
                        .iter()
                        .filter_map(|e| match &e.kind {
                            EventKind::BootPhase {
                                phase,
                                elapsed_ms,
                                detail,
                            } => Some(format!(
                                "{}@{elapsed_ms}{}",
                                phase.as_str(),
                                detail
                                    .as_deref()
                                    .map(|d| format!(" ({d})"))
                                    .unwrap_or_default()
                            )),
                            _ => None,
                        })
                        .collect();
                    return Ok((
                        (e.at.0 - d.session.created_at.0) as f64,
                        d.session.id,
                        phases.join(" "),
                    ));
                }
                EventKind::Error { message } => bail!("session failed: {message}"),
                _ => {}
            }
        }
        ensure!(Instant::now() < deadline, "session never became ready");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn stop(c: &Client, id: SessionId) -> Result<()> {
    let res = c
        .request(reqwest::Method::POST, &format!("/api/sessions/{id}/stop"))
        .send()
        .await?;
    ensure!(res.status().is_success(), "stop: {}", res.text().await?);
    Ok(())
}

struct Row {
    case: String,
    runs: usize,
    median: f64,
    p99: f64,
    min: f64,
    max: f64,
}

fn row(case: &str, mut v: Vec<f64>) -> Row {
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    Row {
        case: case.into(),
        runs: v.len(),
        p99: tandem_bench::quantile(&v, 0.99),
        median: median(&mut v),
        min,
        max,
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    ensure!(
        nix::unistd::geteuid().is_root(),
        "the benchmark starts real workspaces: run it as root"
    );
    let target = PathBuf::from(
        std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").into()),
    );
    let images_dir = target.join("tandem-test-images");
    eprintln!("building/finding the test image…");
    let image = tandem_server::images::build(&images_dir, TEST_RECIPE, |_| {}).await?;
    let work = tandem_bench::WorkDir::new("tandem-bench-")?;
    let recipe = work.path().join("image.toml");
    std::fs::write(&recipe, TEST_RECIPE)?;
    let data = work.path().join("data");
    let config = Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: data.clone(),
        database_url: sqlite_url(&work.path().join("tandem.db")),
        public_url: None,
        web_dir: None,
        images_dir: images_dir.clone(),
        image_recipe: Some(recipe),
        runtime: None,
        agent_bin: Some(target.join("release/tandem-workspace-agent")),
        egress_hosts: Default::default(),
        runtime_layer: Default::default(),
        snapshot_interval_secs: 0,
        agents: Default::default(),
        github: None,
        oidc: Vec::new(),
        desktop: Default::default(),
        snapshot_keep: 100,
        orphan_sweep_secs: 30,
        code_url: None,
        advertise_url: None,
        file_sets: Default::default(),
        local_repo_dirs: vec![std::env::temp_dir(), work.path().to_path_buf()],
        unsafe_code_on_tandem_origin: false,
        unsafe_same_site_code_url: false,
        extension: Default::default(),
        automations: Default::default(),
        slack: None,
        kubernetes: None,
        telemetry: Default::default(),
        workspaces: Default::default(),
    };
    let server = Server::bind(config).await?;
    let url = server.url();
    let state = server.state().clone();
    let admin = tandem_server::identity::auth::local_admin(&state.db).await?;
    let token = tandem_server::identity::auth::create_api_token(&state.db, &admin, "bench", None)
        .await?
        .token;
    tokio::spawn(server.run(std::future::pending()));
    let c = Client::new(&url, Some(token))?;
    eprintln!(
        "image {} ({} MiB), runtime {}",
        image.digest,
        image.size_bytes >> 20,
        state.workspaces()?.runtime.name()
    );

    let cases = [
        ("10 MB / 1k files", 1000usize, 10usize << 20, a.runs),
        ("large", a.large_files, a.large_mib << 20, a.cp_runs_large),
    ];
    // Both repos and snapshots first, then the starts interleaved (small, large, large, small,
    // …), so both sizes start under the same conditions: timing one size after generating
    // gigabytes and the other before would measure this benchmark's own disk and page cache
    // churn, not the start.
    let mut prepared = Vec::new();
    for (label, files, bytes, cp_runs) in cases {
        let label = if label == "large" {
            format!("{} MiB / {}k files", a.large_mib, a.large_files / 1000)
        } else {
            label.to_string()
        };
        eprintln!("[{label}] generating the repo…");
        let src = work.path().join(format!("src-{files}"));
        let t = Instant::now();
        make_repo(&src, files, bytes)?;
        eprintln!(
            "[{label}] generated in {:.1}s; building the snapshot…",
            t.elapsed().as_secs_f64()
        );
        let repo = c
            .create_repo(&CreateRepo {
                name: format!("bench/{files}"),
                url: src.to_string_lossy().into(),
                default_branch: None,
                warm_pool: None,
            })
            .await?;
        let snap = c.build_snapshot(repo.id).await?;
        let snap = wait_snapshot(&c, snap.id).await?;
        ensure!(
            snap.state == SnapshotState::Ready,
            "snapshot failed: {}",
            snap.log
        );
        eprintln!(
            "[{label}] snapshot built in {} ms ({} MiB layer)",
            snap.build_ms.unwrap_or(0),
            snap.size_bytes.unwrap_or(0) >> 20
        );
        let tree = data
            .join("snapshots")
            .join(snap.id.to_string())
            .join("layer/workspace");
        prepared.push((label, repo.id, tree, cp_runs, Vec::new()));
    }
    // Writing gigabytes leaves the disk busy with writeback for a while; flush it first so
    // the starts measure starting, not this benchmark's own setup.
    Command::new("sync").status()?;
    for i in 0..a.runs {
        let order: Vec<usize> = if i % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
        for k in order {
            let (label, repo, _, _, starts) = &mut prepared[k];
            let (ms, id) = start_once(&c, *repo).await?;
            eprintln!("[{label}] start {}: {ms:.0} ms", i + 1);
            starts.push(ms);
            stop(&c, id).await?;
        }
    }
    let mut rows = Vec::new();
    let mut medians = Vec::new();
    // The copies run after every start: copying gigabytes evicts the page cache.
    for (label, _, tree, cp_runs, starts) in &prepared {
        eprintln!("[{label}] cp -a baseline ×{cp_runs}…");
        let cp = cp_a(tree, work.path(), *cp_runs)?;
        let r = row(&format!("session start, {label}"), starts.clone());
        medians.push(r.median);
        let cpr = row(&format!("cp -a of the same tree, {label}"), cp);
        eprintln!(
            "[{label}] start median {:.0} ms vs cp -a median {:.0} ms",
            r.median, cpr.median
        );
        rows.push(r);
        rows.push(cpr);
    }
    // Kept: sessions fetch from it.
    let small_repo = Some(prepared[0].1);

    // Warm pool on the small repo.
    let repo = small_repo.context("small repo")?;
    let res = c
        .request(
            reqwest::Method::PUT,
            &format!("/api/repos/{repo}/warm-pool"),
        )
        .json(&SetWarmPool { size: 1 })
        .send()
        .await?;
    ensure!(res.status().is_success(), "set warm pool");
    let mut warm = Vec::new();
    for i in 0..a.runs {
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.repo(repo).await?.warm_ready < 1 {
            ensure!(Instant::now() < deadline, "warm pool never filled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (ms, id) = start_once(&c, repo).await?;
        eprintln!("[warm pool] start {}: {ms:.0} ms", i + 1);
        warm.push(ms);
        stop(&c, id).await?;
    }
    let w = row("session start from the warm pool, 10 MB", warm);
    let warm_median = w.median;
    rows.push(w);
    let res = c
        .request(
            reqwest::Method::PUT,
            &format!("/api/repos/{repo}/warm-pool"),
        )
        .json(&SetWarmPool { size: 0 })
        .send()
        .await?;
    ensure!(res.status().is_success(), "reset warm pool");

    println!("\n| case | runs | median ms | p99 ms | min ms | max ms |\n|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.case, r.runs, r.median, r.p99, r.min, r.max
        );
    }
    let ratio = medians[1] / medians[0];
    let cp_ratio_large = rows[3].median / rows[2].median;
    println!("\nlarge/small session start median ratio: {ratio:.2} (target ≤ 1.2)");
    println!(
        "cp -a / session start, large repo: {cp_ratio_large:.1}× (session start is that much faster than copying the tree)"
    );
    println!(
        "small-repo cold start median: {:.0} ms (target ≤ 250); warm pool median: {warm_median:.0} ms (target ≤ 50)",
        medians[0]
    );
    // Let the pool drain before the data dir goes away.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in state.workspaces()?.runtime.list().await? {
        let _ = state
            .workspaces()?
            .runtime
            .stop(&id, tandem_server::runtime::Keep::Nothing)
            .await;
    }
    confinement_cost(
        &image.rootfs,
        work.path(),
        &target.join("release/tandem-confine"),
        a.runs,
    )
    .await
}

/// Bare runtime starts under each confinement variant, interleaved; medians and the ratio to
/// the unconfined baseline.
async fn confinement_cost(image: &Path, work: &Path, confine: &Path, runs: usize) -> Result<()> {
    use tandem_server::runtime::oci::{Confinement, Files, OciRuntime};
    use tandem_server::runtime::{Keep, Limits, Runtime, WorkspaceSpec};
    let kind = tandem_server::runtime::doctor::default_runtime().context("no runtime")?;
    let on = Confinement::default();
    // The first is what a server runs: the filter compiled once, installed by `tandem-confine`.
    let variants = [
        ("all on, seccomp precompiled (what a server runs)", on),
        ("all on, the runtime compiling the profile", on),
        (
            "no seccomp profile",
            Confinement {
                seccomp: false,
                ..on
            },
        ),
        (
            "no user namespace",
            Confinement {
                user_namespaces: false,
                ..on
            },
        ),
        ("no own disk", Confinement { disks: false, ..on }),
        (
            "none (baseline)",
            Confinement {
                seccomp: false,
                user_namespaces: false,
                disks: false,
            },
        ),
    ];
    // One data dir per variant: the user namespace shifts the layers it sees, so the image is
    // copied for those (shifted once, before the timed starts).
    let mut rts = Vec::new();
    for (i, (label, c)) in variants.iter().enumerate() {
        let dir = work.join(format!("confine-{i}"));
        let mut rt = OciRuntime::with_confinement(kind, &dir, *c)?;
        if i == 0 {
            rt = rt.with_init(confine);
            ensure!(
                rt.precompiled_seccomp(),
                "{} cannot start workspaces here (user namespaces?)",
                confine.display()
            );
        }
        let layer = dir.join("image");
        tandem_server::runtime::disk::copy_tree(image, &layer).await?;
        rts.push((*label, rt, layer, Vec::new()));
    }
    for round in 0..runs + 1 {
        for (label, rt, layer, times) in rts.iter_mut() {
            let id = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
            let spec = WorkspaceSpec {
                id: id.clone(),
                files: Files::local(vec![layer.clone()], vec![]),
                hostname: "bench".into(),
                env: vec![],
                init: vec!["sleep".into(), "infinity".into()],
                limits: Limits::default(),
                egress: None,
            };
            let t = Instant::now();
            let started = rt.start(spec).await?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            rt.stop(&id, Keep::Nothing).await?;
            // The first round shifts layers and formats disk templates: not timed.
            if round > 0 {
                times.push(ms);
            }
            eprintln!(
                "[confinement] {label}: {ms:.0} ms ({})",
                tandem_server::runtime::describe_steps(&started.took)
            );
        }
    }
    let base = {
        let mut v = rts.last().unwrap().3.clone();
        median(&mut v)
    };
    println!(
        "\nConfinement cost ({}, bare runtime starts, {runs} each, interleaved)\n\n| variant | median ms | vs baseline |\n|---|---|---|",
        kind.binary()
    );
    for (label, _, _, times) in rts.iter_mut() {
        let m = median(times);
        println!(
            "| {label} | {m:.0} | {:.2}× (+{:.0} ms) |",
            m / base,
            m - base
        );
    }
    Ok(())
}
