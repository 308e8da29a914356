//! `cargo xtask bench start --runtime kubernetes`: session starts with workspaces as pods,
//! beside the same starts on this machine's runtime in the same run (the baseline). Both are
//! the release `tandem serve`, on the test image, with small limits so twenty fit one node.
//!
//! Cases, each for both runtimes: a start from a snapshot whose image the node has (cached);
//! a start from a snapshot built just before (on Kubernetes its checkout layer is new to the
//! node: uncached); twenty sessions created at once (each one's start, and the wall time).
//! Needs `TANDEM_BENCH_KUBECONFIG` and `TANDEM_BENCH_REGISTRY` (the xtask sets both after
//! `cluster up`). Flags: `--runs N` (default 5), `--concurrent N` (default 20).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tandem_protocol::*;
use tandem_server::client::Client;

use tandem_bench as bench_common;

const LIMITS: &str = "[workspaces.limits]\ncpus = 0.2\nmemory_mb = 256\ndisk_gb = 1\n";

struct Args {
    runs: usize,
    concurrent: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        runs: 5,
        concurrent: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let n: usize = it.next().context("a number after the flag")?.parse()?;
        match flag.as_str() {
            "--runs" => a.runs = n,
            "--concurrent" => a.concurrent = n,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let ok = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=B",
            "-c",
            "user.email=b@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .status()?
        .success();
    ensure!(ok, "git {args:?} failed");
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// One runtime's server and its repo.
struct Side {
    name: &'static str,
    server: bench_common::BenchServer,
    src: std::path::PathBuf,
    repo: RepoId,
    round: usize,
}

impl Side {
    async fn new(name: &'static str, config: &str) -> Result<Self> {
        let server = bench_common::start(&format!("tandem-bench-{name}-"), config).await?;
        let src = server.work.path().join("src");
        std::fs::create_dir_all(&src)?;
        git(&src, &["init", "-q"])?;
        std::fs::write(src.join("README.md"), "bench\n")?;
        std::fs::write(src.join("tandem.toml"), "[workspace]\nsetup = []\n")?;
        git(&src, &["add", "-A"])?;
        git(&src, &["commit", "-qm", "init"])?;
        let repo = server
            .client
            .create_repo(&CreateRepo {
                name: format!("bench/{name}"),
                url: src.to_string_lossy().into(),
                default_branch: None,
                warm_pool: None,
            })
            .await?
            .id;
        let mut side = Self {
            name,
            server,
            src,
            repo,
            round: 0,
        };
        side.snapshot().await?;
        Ok(side)
    }

    /// A new commit and its snapshot, built.
    async fn snapshot(&mut self) -> Result<()> {
        self.round += 1;
        std::fs::write(self.src.join("round.txt"), format!("{}\n", self.round))?;
        git(&self.src, &["add", "-A"])?;
        git(&self.src, &["commit", "-qm", "round"])?;
        let c = &self.server.client;
        let snap = c.build_snapshot(self.repo).await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let s = c.snapshot(snap.id).await?;
            match s.state {
                SnapshotState::Ready => return Ok(()),
                SnapshotState::Failed => bail!("{}: the snapshot failed: {}", self.name, s.log),
                _ => {}
            }
            ensure!(Instant::now() < deadline, "the snapshot never finished");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One session's start: created to `ready`, in ms (the server's own timestamps).
    async fn start(c: &Client, repo: RepoId) -> Result<(f64, SessionId)> {
        let d = c
            .create_session(&CreateSession {
                repo_id: repo,
                prompt: String::new(),
                branch: None,
                agent: Some(AgentSpec::None),
                context: None,
            })
            .await?;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            for e in c.events(d.session.id, 0).await?.events {
                match &e.kind {
                    EventKind::BootPhase {
                        phase: BootPhase::Ready,
                        ..
                    } => return Ok(((e.at.0 - d.session.created_at.0) as f64, d.session.id)),
                    EventKind::Error { message } => bail!("a session failed: {message}"),
                    _ => {}
                }
            }
            ensure!(Instant::now() < deadline, "a session never became ready");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops sessions, four at a time (cleaning up is not measured; twenty stops at once, each
    /// computing its diff, outlast a request's time on two cores).
    async fn stop(&self, ids: Vec<SessionId>) -> Result<()> {
        use futures::StreamExt;
        let c = &self.server.client;
        let stops = ids.into_iter().map(|id| async move {
            let res = c
                .request(reqwest::Method::POST, &format!("/api/sessions/{id}/stop"))
                .send()
                .await?;
            ensure!(res.status().is_success(), "stop: {}", res.text().await?);
            Ok::<_, anyhow::Error>(())
        });
        let done: Vec<Result<()>> = futures::stream::iter(stops)
            .buffer_unordered(4)
            .collect()
            .await;
        done.into_iter().collect()
    }
}

#[derive(Default)]
struct Measured {
    cached: Vec<f64>,
    uncached: Vec<f64>,
    concurrent: Vec<f64>,
    wall: f64,
}

async fn measure(side: &mut Side, a: &Args) -> Result<Measured> {
    let mut m = Measured::default();
    let c = side.server.client.clone();
    // The first start after a snapshot pulls its image on Kubernetes; the next ones find it.
    for i in 0..a.runs {
        side.snapshot().await?;
        let (uncached, id) = Side::start(&c, side.repo).await?;
        side.stop(vec![id]).await?;
        let (cached, id) = Side::start(&c, side.repo).await?;
        side.stop(vec![id]).await?;
        eprintln!(
            "[{}] run {}: uncached {uncached:.0} ms, cached {cached:.0} ms",
            side.name,
            i + 1
        );
        m.uncached.push(uncached);
        m.cached.push(cached);
    }
    let t = Instant::now();
    let starts = (0..a.concurrent).map(|_| Side::start(&c, side.repo));
    let started = futures::future::try_join_all(starts).await?;
    m.wall = t.elapsed().as_secs_f64() * 1000.0;
    m.concurrent = started.iter().map(|(ms, _)| *ms).collect();
    eprintln!(
        "[{}] {} at once: wall {:.0} ms",
        side.name, a.concurrent, m.wall
    );
    side.stop(started.into_iter().map(|(_, id)| id).collect())
        .await?;
    Ok(m)
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let kubeconfig = std::env::var("TANDEM_BENCH_KUBECONFIG").context(
        "TANDEM_BENCH_KUBECONFIG: `cargo xtask bench start --runtime kubernetes` sets it",
    )?;
    let registry = std::env::var("TANDEM_BENCH_REGISTRY").context("TANDEM_BENCH_REGISTRY")?;
    let namespace = format!(
        "tandem-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let client =
        tandem_server::runtime::kubernetes::KubernetesRuntime::client(Some(Path::new(&kubeconfig)))
            .await?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": namespace } }))?;
    namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .with_context(|| format!("making the namespace {namespace}"))?;
    let result = async {
        let mut local = Side::new("local", LIMITS).await?;
        let kube_config = format!(
            "runtime = \"kubernetes\"\n{LIMITS}\n[kubernetes]\nkubeconfig = {kubeconfig:?}\nnamespace = {namespace:?}\nregistry = {registry:?}\nregistry_insecure = true\nroot_on_node = true\ninstallation = \"bench\"\n"
        );
        let mut kube = Side::new("kubernetes", &kube_config).await?;
        // Interleaved halves would share the two cores between a local start and a pod start;
        // one runtime at a time, each on an idle machine.
        let l = measure(&mut local, &a).await?;
        let k = measure(&mut kube, &a).await?;
        println!(
            "\n| case | local median ms | kubernetes median ms | kubernetes / local |\n|---|---:|---:|---:|"
        );
        for (case, lv, kv) in [
            ("start, snapshot image cached on the node", &l.cached, &k.cached),
            ("start, snapshot just built (image not on the node)", &l.uncached, &k.uncached),
            (
                &*format!("{} starts at once, each", a.concurrent),
                &l.concurrent,
                &k.concurrent,
            ),
        ] {
            let (lm, km) = (median(lv), median(kv));
            println!("| {case} | {lm:.0} | {km:.0} | {:.1}× |", km / lm);
        }
        println!(
            "| {} starts at once, wall time | {:.0} | {:.0} | {:.1}× |",
            a.concurrent,
            l.wall,
            k.wall,
            k.wall / l.wall
        );
        println!(
            "\n({} runs of the single starts; medians)",
            a.runs
        );
        local.server.finish().await?;
        kube.server.finish().await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let _ = namespaces
        .delete(&namespace, &kube::api::DeleteParams::default())
        .await;
    result
}
