//! What the release benchmarks against `tandem serve` share: the server in its own process on a
//! throwaway data dir, an API token, and a ready session of a throwaway repo.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use tandem_protocol::*;
use tandem_server::client::Client;
use tokio::io::{AsyncBufReadExt, BufReader};

pub mod cdp;
pub mod viewer;

pub const TEST_RECIPE: &str = include_str!("../../images/test/image.toml");

/// A new directory under the system's temporary directory (`TANDEM_BENCH_DIR` if set), removed
/// with what it holds when dropped. Not the `tempfile` crate: it turns on features of crates the
/// server depends on (rustix's defaults), so building a benchmark would rebuild the server.
pub struct WorkDir(PathBuf);

impl WorkDir {
    pub fn new(prefix: &str) -> std::io::Result<Self> {
        let base = std::env::var("TANDEM_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| std::env::temp_dir());
        // Short: workspace sockets live under it, and a socket's path has at most 107 bytes.
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let dir = base.join(format!("{prefix}{}", &unique[..8]));
        std::fs::create_dir(&dir)?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The release server, running until this is dropped (each benchmark reads what it needs).
pub struct BenchServer {
    pub url: String,
    pub token: String,
    pub pid: u32,
    pub client: Client,
    pub target: PathBuf,
    pub data: PathBuf,
    pub images_dir: PathBuf,
    pub recipe: PathBuf,
    pub work: WorkDir,
    _server: tokio::process::Child,
}

/// Starts the release `tandem serve` (its `tandem.toml` holding `config`) on the test image.
pub async fn start(prefix: &str, config: &str) -> Result<BenchServer> {
    ensure!(
        nix::unistd::geteuid().is_root(),
        "the benchmark starts a real workspace: run it as root"
    );
    let target = PathBuf::from(
        std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").into()),
    );
    let images_dir = target.join("tandem-test-images");
    tandem_server::images::build(&images_dir, TEST_RECIPE, |_| {}).await?;
    let work = WorkDir::new(prefix)?;
    let recipe = work.path().join("image.toml");
    std::fs::write(&recipe, TEST_RECIPE)?;
    let data = work.path().join("data");
    std::fs::create_dir_all(&data)?;
    // The benchmark's repos are local ones under its own directory (the only place a local
    // repo may come from); a top-level key, so before any table `config` has.
    let src = work.path().join("src");
    let config = format!(
        "local_repo_dirs = [{:?}]\n{config}",
        src.display().to_string()
    );
    std::fs::write(data.join("tandem.toml"), config)?;
    let bin = target.join("release/tandem");
    // The web app, where a benchmark measures in a browser, is the release binary's
    // `../site` (`cargo xtask bench desktop` builds it).
    let mut server = tokio::process::Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--images-dir")
        .arg(&images_dir)
        .arg("--image-recipe")
        .arg(&recipe)
        .env("TANDEM_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = server.id().context("server pid")?;
    let mut lines = BufReader::new(server.stdout.take().context("stdout")?).lines();
    let url = loop {
        let line = lines.next_line().await?.context("the server exited")?;
        if let Some((_, u)) = line.split_once("listening on ") {
            break u.trim().to_string();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let out = std::process::Command::new(&bin)
        .args(["token", "create", "--data-dir"])
        .arg(&data)
        .env_remove("TANDEM_TOKEN")
        .output()?;
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    let client = Client::new(&url, Some(token.clone()))?;
    Ok(BenchServer {
        url,
        token,
        pid,
        client,
        target,
        data,
        images_dir,
        recipe,
        work,
        _server: server,
    })
}

impl BenchServer {
    /// Stops the server, then every workspace under its data dir (workspaces outlive their
    /// server on purpose; a benchmark's must not outlive the benchmark).
    /// How many workspaces were still running (and were stopped here).
    pub async fn finish(mut self) -> Result<usize> {
        // As an operator stops it: a kill could land while it makes a spare disk.
        if let Some(pid) = self._server.id() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            )?;
        }
        if tokio::time::timeout(Duration::from_secs(30), self._server.wait())
            .await
            .is_err()
        {
            self._server.kill().await?;
        }
        let config = tandem_server::config::Config::resolve(tandem_server::config::Overrides {
            data_dir: Some(self.data.clone()),
            images_dir: Some(self.images_dir.clone()),
            image_recipe: Some(self.recipe.clone()),
            agent_bin: Some(self.target.join("release/tandem-workspace-agent")),
            ..Default::default()
        })?;
        let ws = tandem_server::serve::workspaces(&config, None)
            .await
            .map_err(anyhow::Error::msg)?;
        let left = ws.runtime.list().await?;
        for id in &left {
            ws.runtime
                .stop(id, tandem_server::runtime::Keep::Nothing)
                .await?;
        }
        Ok(left.len())
    }

    /// A repo `name` of `files` and a ready session of it without an agent.
    pub async fn ready_session(&self, name: &str, files: &[(&str, &str)]) -> Result<SessionId> {
        let src = self.work.path().join("src");
        std::fs::create_dir_all(&src)?;
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=B",
                    "-c",
                    "user.email=b@example.invalid",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .args(args)
                .current_dir(&src)
                .status()
        };
        git(&["init", "-q"])?;
        for (path, text) in files {
            std::fs::write(src.join(path), text)?;
        }
        git(&["add", "-A"])?;
        git(&["commit", "-qm", "init"])?;
        let c = &self.client;
        let repo = c
            .create_repo(&CreateRepo {
                name: name.into(),
                url: src.to_string_lossy().into(),
                default_branch: None,
                warm_pool: None,
            })
            .await?;
        let id = c
            .create_session(&CreateSession {
                repo_id: repo.id,
                prompt: String::new(),
                branch: None,
                agent: Some(AgentSpec::None),
                context: None,
            })
            .await?
            .session
            .id;
        let t0 = Instant::now();
        while c.session(id).await?.session.state != SessionState::Ready {
            ensure!(
                t0.elapsed() < Duration::from_secs(300),
                "the session did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(id)
    }
}

/// utime+stime (clock ticks) and peak RSS (KiB) of a process.
pub fn usage(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, r)| r.split(' ').collect())
        .unwrap_or_default();
    let ticks = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    (ticks, hwm)
}

/// The `q` quantile of `v` (nearest rank: p99 of 50 values is the largest).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Server-side milliseconds from a session's creation to its `ready` boot event.
pub async fn ready_ms(c: &Client, s: &Session) -> Result<f64> {
    let page = c.events(s.id, 0).await?;
    let ready = page
        .events
        .iter()
        .find(|e| {
            matches!(
                e.kind,
                EventKind::BootPhase {
                    phase: BootPhase::Ready,
                    ..
                }
            )
        })
        .context("no ready event")?;
    Ok((ready.at.0 - s.created_at.0) as f64)
}

/// Where the starts of `ready` spent their time, as medians (and the slowest) over them: from creation to the
/// `starting` event (waiting for a boot slot, the claim), on to `syncing` (the workspace's
/// start, whose steps the `syncing` event lists), on to `ready`.
pub async fn breakdown(c: &Client, ready: &[Session]) -> Result<String> {
    let mut parts: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for s in ready {
        let page = c.events(s.id, 0).await?;
        let mut last = ("created", s.created_at.0);
        for e in &page.events {
            let EventKind::BootPhase { phase, detail, .. } = &e.kind else {
                continue;
            };
            let name = phase.as_str();
            parts
                .entry(format!("{} → {name}", last.0))
                .or_default()
                .push((e.at.0 - last.1) as f64);
            last = (name, e.at.0);
            let steps = detail
                .as_deref()
                .and_then(|d| d.split_once("; the workspace: "))
                .map(|(_, steps)| steps.trim_end_matches(" ms"));
            for step in steps.into_iter().flat_map(|s| s.split(", ")) {
                if let Some((what, ms)) = step.rsplit_once(' ')
                    && let Ok(ms) = ms.parse::<f64>()
                {
                    parts.entry(format!("  {what}")).or_default().push(ms);
                }
            }
        }
    }
    Ok(parts
        .iter()
        .map(|(k, v)| format!("{k} {:.1} (max {:.1})", quantile(v, 0.5), quantile(v, 1.0)))
        .collect::<Vec<_>>()
        .join(", "))
}

/// Waits until every session of `ids` is in `state` (one list request per round), failing on a
/// failed one.
pub async fn wait_all(
    c: &Client,
    repo: RepoId,
    ids: &[SessionId],
    state: SessionState,
) -> Result<Vec<Session>> {
    let want: std::collections::HashSet<SessionId> = ids.iter().copied().collect();
    let t0 = Instant::now();
    loop {
        let list: Vec<Session> = c
            .request(
                reqwest::Method::GET,
                &format!("/api/sessions?repo_id={repo}&limit=500"),
            )
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let mine: Vec<Session> = list.into_iter().filter(|s| want.contains(&s.id)).collect();
        if let Some(f) = mine.iter().find(|s| s.state == SessionState::Failed) {
            anyhow::bail!("session {} failed", f.id);
        }
        if mine.len() == want.len() && mine.iter().all(|s| s.state == state) {
            return Ok(mine);
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(600),
            "sessions did not reach {} in 10 minutes",
            state.as_str()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
