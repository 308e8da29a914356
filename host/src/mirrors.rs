//! Server-side bare mirrors of repo remotes (`<data dir>/mirrors/<repo id>.git`).
//!
//! Only the server writes a mirror, and workspaces see it read-only, so host-side git never runs
//! on content a workspace controls (a workspace could plant hooks, filters or `core.fsmonitor` in
//! its own `.git`). Updating a mirror fetches only what changed on the remote.

use std::path::{Path, PathBuf};

use tandem_protocol::Repo;
use tokio::process::Command;

use crate::{Error, Result};

/// Where workspaces see the mirror.
pub const MOUNT_POINT: &str = "/run/tandem/mirror.git";

/// The mirror of `repo` under `data_dir`.
pub fn path(data_dir: &Path, repo: &Repo) -> PathBuf {
    data_dir.join("mirrors").join(format!("{}.git", repo.id))
}

async fn git(args: &[&str], cwd: Option<&Path>) -> Result<String> {
    git_with(args, cwd, None).await
}

/// `auth` is an `Authorization` header for the remote (a GitHub App token), given to git through
/// its environment so it is never written into the mirror's config.
async fn git_with(args: &[&str], cwd: Option<&Path>, auth: Option<&str>) -> Result<String> {
    let mut c = Command::new("git");
    // No prompts, no system/global config surprises, and none of the server user's own
    // credentials: no ssh keys or agent, no ~/.netrc (HOME is empty), no credential helper.
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", "/nonexistent")
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("XDG_CONFIG_HOME")
        .env(
            "GIT_SSH_COMMAND",
            "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityFile=/dev/null -o IdentityAgent=none",
        );
    // Only the transports a repo URL may name (never `ext::`, whatever a config says).
    for kv in [
        "protocol.allow=never",
        "protocol.https.allow=always",
        "protocol.http.allow=always",
        "protocol.ssh.allow=always",
        "protocol.git.allow=always",
        "protocol.file.allow=always",
    ] {
        c.args(["-c", kv]);
    }
    if let Some(header) = auth {
        c.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_0", header);
    }
    if let Some(d) = cwd {
        c.arg("-C").arg(d);
    }
    let out = c
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| Error::Config(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "git {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Creates or updates the mirror; returns its path and the commit of `branch`. `auth`: see
/// [`git_with`].
pub async fn update(
    data_dir: &Path,
    repo: &Repo,
    branch: &str,
    auth: Option<&str>,
) -> Result<(PathBuf, String)> {
    let dir = path(data_dir, repo);
    let name = format!("refs/heads/{branch}");
    if dir.join("HEAD").exists() {
        // Where the remote has the branch (one round trip, refs only), against where the
        // mirror has it: no fetch when it has not moved, the usual case at a session start.
        let verify = format!("{name}^{{commit}}");
        let (ls, rev) = (
            ["ls-remote", "origin", name.as_str()],
            ["rev-parse", "--verify", verify.as_str()],
        );
        let (remote, mirror) =
            tokio::join!(git_with(&ls, Some(&dir), auth), git(&rev, Some(&dir)),);
        let at_remote = remote?.lines().find_map(|l| {
            l.split_once('\t')
                .filter(|(_, r)| *r == name)
                .map(|(c, _)| c.to_string())
        });
        if let (Some(remote), Ok(mirror)) = (at_remote, mirror)
            && remote == mirror
        {
            return Ok((dir, mirror));
        }
        // No automatic gc or maintenance on this hot path: with many loose objects git would
        // start repacking in the background at every session start. The snapshot refresh
        // packs mirrors instead.
        git_with(
            &[
                "-c",
                "gc.auto=0",
                "-c",
                "maintenance.auto=false",
                "fetch",
                "--prune",
                "--quiet",
                "--no-write-fetch-head",
                "origin",
            ],
            Some(&dir),
            auth,
        )
        .await?;
    } else {
        std::fs::create_dir_all(dir.parent().unwrap_or(data_dir))?;
        let tmp = dir.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        let tmp_s = tmp.to_string_lossy().to_string();
        git_with(
            &["clone", "--mirror", "--quiet", "--", &repo.url, &tmp_s],
            None,
            auth,
        )
        .await?;
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another build made it first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    let commit = git(
        &["rev-parse", "--verify", &format!("{name}^{{commit}}")],
        Some(&dir),
    )
    .await
    .map_err(|_| Error::Invalid(format!("branch {branch:?} does not exist in {}", repo.url)))?;
    Ok((dir, commit))
}

/// Clones `branch` of the mirror into `dest` (a fresh directory), with `origin` pointing at the
/// real remote.
pub async fn checkout(mirror: &Path, repo: &Repo, branch: &str, dest: &Path) -> Result<()> {
    let (m, d) = (
        mirror.to_string_lossy().to_string(),
        dest.to_string_lossy().to_string(),
    );
    git(
        &[
            "clone",
            "--quiet",
            "--single-branch",
            "--branch",
            branch,
            "--",
            &m,
            &d,
        ],
        None,
    )
    .await?;
    git(&["remote", "set-url", "origin", &repo.url], Some(dest)).await?;
    Ok(())
}

/// Files read at a full commit id, which never change: a start reads its recipe without a
/// `git` process once any start has read it. Bounded: texts up to [`KEPT_FILE_BYTES`], at most
/// [`KEPT_FILES`] (then the whole cache starts again).
type Kept = std::collections::HashMap<(PathBuf, String, String), Option<String>>;
static KEPT: std::sync::Mutex<Option<Kept>> = std::sync::Mutex::new(None);
const KEPT_FILES: usize = 512;
const KEPT_FILE_BYTES: usize = 64 << 10;

fn kept() -> std::sync::MutexGuard<'static, Option<Kept>> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A full commit id (SHA-1 or SHA-256), not a name that can move.
fn is_commit_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A file of `commit` as stored in the mirror, if it exists there.
pub async fn read_file(mirror: &Path, commit: &str, file: &str) -> Result<Option<String>> {
    let key = (mirror.to_path_buf(), commit.to_string(), file.to_string());
    let pinned = is_commit_id(commit);
    if pinned && let Some(hit) = kept().as_ref().and_then(|k| k.get(&key)) {
        return Ok(hit.clone());
    }
    let text = match git(&["show", &format!("{commit}:{file}")], Some(mirror)).await {
        Ok(text) => Some(text),
        // Absent for good only when git says the commit has no such path (not when the commit
        // is not fetched yet, or git failed for another reason).
        Err(e) if pinned && e.to_string().contains("does not exist in") => None,
        Err(_) => return Ok(None),
    };
    if pinned && text.as_ref().is_none_or(|t| t.len() <= KEPT_FILE_BYTES) {
        let mut k = kept();
        let k = k.get_or_insert_default();
        if k.len() >= KEPT_FILES {
            k.clear();
        }
        k.insert(key, text.clone());
    }
    Ok(text)
}

/// Packs a mirror's objects (off the session-start path), so clones and fetches stay fast.
pub async fn pack(data_dir: &Path, repo: &Repo) -> Result<()> {
    let dir = path(data_dir, repo);
    if dir.join("HEAD").exists() {
        git(&["gc", "--quiet", "--prune=now"], Some(&dir)).await?;
    }
    Ok(())
}

/// The commits `branch` of the mirror has past `base`, as a git bundle (none when it has none).
pub async fn bundle(mirror: &Path, base: Option<&str>, branch: &str) -> Result<Option<Vec<u8>>> {
    let file = std::env::temp_dir().join(format!("tandem-delta-{}.bundle", uuid::Uuid::new_v4()));
    let range = match base {
        Some(base) => format!("{base}..refs/heads/{branch}"),
        None => format!("refs/heads/{branch}"),
    };
    let out = git(
        &[
            "bundle",
            "create",
            "--quiet",
            &file.to_string_lossy(),
            &range,
        ],
        Some(mirror),
    )
    .await;
    let read = match out {
        Ok(_) => tokio::fs::read(&file).await.map(Some).map_err(Error::from),
        Err(e) if e.to_string().contains("empty bundle") => Ok(None),
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&file).await;
    read
}

/// The longest a mirror's fetch may take (git is killed with it).
const FETCH_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// How long a branch's last fetch is kept for callers asked for before it began.
const ANSWERS_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// The fetches of each mirror's branches ([`crate::Host::fetch_mirror`]).
#[derive(Default)]
struct Fetches {
    /// When the last fetch started, and its answer; held while a fetch runs.
    last: tokio::sync::Mutex<Option<(std::time::Instant, Result<String>)>>,
}

impl Fetches {
    /// The fetches of `branch` into the mirror at `mirror`.
    fn slot(mirror: PathBuf, branch: &str) -> std::sync::Arc<Fetches> {
        type Slots = std::collections::HashMap<(PathBuf, String), std::sync::Arc<Fetches>>;
        static SLOTS: std::sync::Mutex<Option<Slots>> = std::sync::Mutex::new(None);
        let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        let slots = slots.get_or_insert_default();
        // Branches being fetched now keep a slot, and those fetched in the last
        // [`ANSWERS_KEPT`]: a session asked for with others and booted after them (boots wait
        // for a slot) takes the answer of the fetch that began after they were asked for.
        slots.retain(|_, s| std::sync::Arc::strong_count(s) > 1 || s.recent());
        slots
            .entry((mirror, branch.to_string()))
            .or_default()
            .clone()
    }

    /// Whether the last fetch began within [`ANSWERS_KEPT`] (or one is running).
    fn recent(&self) -> bool {
        self.last.try_lock().map_or(true, |last| {
            last.as_ref()
                .is_some_and(|(started, _)| started.elapsed() < ANSWERS_KEPT)
        })
    }

    /// `work`'s answer: run now, or that of a run that started at or after `asked`.
    async fn shared(
        &self,
        asked: std::time::Instant,
        work: impl std::future::Future<Output = Result<String>>,
    ) -> Result<String> {
        let mut last = self.last.lock().await;
        if let Some((started, answer)) = &*last
            && *started >= asked
        {
            return match answer {
                Ok(commit) => Ok(commit.clone()),
                Err(e) => Err(e.again()),
            };
        }
        let started = std::time::Instant::now();
        // A remote that hangs holds up only the callers waiting now, not every later one.
        let answer = tokio::time::timeout(FETCH_LIMIT, work)
            .await
            .unwrap_or_else(|_| {
                Err(Error::BadGateway(format!(
                    "the repo's remote did not answer in {} s",
                    FETCH_LIMIT.as_secs()
                )))
            });
        let shared = answer.as_ref().map(Clone::clone).map_err(Error::again);
        *last = Some((started, shared));
        answer
    }
}

impl crate::Host {
    /// What `branch` of `repo`'s mirror has past `base`, as a git bundle: how a workspace
    /// that cannot see the mirror (a pod) catches up.
    pub async fn mirror_delta(
        &self,
        repo: &Repo,
        base: Option<&str>,
        branch: &str,
    ) -> Result<Option<Vec<u8>>> {
        bundle(&path(&self.data_dir, repo), base, branch).await
    }

    /// Whether workspaces see the mirror at [`MOUNT_POINT`] (they do on this machine; a pod
    /// catches up from [`crate::Host::mirror_delta`] instead).
    pub fn mirror_mounted(&self) -> bool {
        self.cluster.is_none()
    }

    /// Fetches `branch` of `repo` into its mirror (made on first use, with the code host's
    /// credential when it has one); returns the branch's commit.
    ///
    /// Callers share fetches: one of a branch runs at a time, and a caller takes the answer of
    /// a fetch that started at or after `asked` (it looked at the remote after they asked:
    /// for a session, when it was requested). Fifty sessions started at once from one repo
    /// fetch once or twice, not fifty times.
    pub async fn fetch_mirror(
        &self,
        repo: &Repo,
        branch: &str,
        asked: std::time::Instant,
    ) -> Result<String> {
        Fetches::slot(path(&self.data_dir, repo), branch)
            .shared(asked, async {
                let auth = self.credentials.remote_auth(repo).await?;
                let (_, commit) = update(&self.data_dir, repo, branch, auth.as_deref()).await?;
                Ok(commit)
            })
            .await
    }

    /// `file` at `commit` of `repo`'s mirror, if it is there.
    pub async fn read_mirror(
        &self,
        repo: &Repo,
        commit: &str,
        file: &str,
    ) -> Result<Option<String>> {
        read_file(&path(&self.data_dir, repo), commit, file).await
    }

    /// Packs `repo`'s mirror (off the session-start path).
    pub async fn pack_mirror(&self, repo: &Repo) -> Result<()> {
        pack(&self.data_dir, repo).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn callers_that_came_before_a_fetch_started_share_it() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        use std::time::Instant;
        let slot = std::sync::Arc::new(Fetches::default());
        let runs = std::sync::Arc::new(AtomicU64::new(0));
        let (open, gate) = tokio::sync::watch::channel(false);
        let call = |slot: std::sync::Arc<Fetches>, asked: Instant| {
            let (runs, mut gate) = (runs.clone(), gate.clone());
            tokio::spawn(async move {
                slot.shared(asked, async {
                    let n = runs.fetch_add(1, SeqCst) + 1;
                    gate.wait_for(|open| *open).await.unwrap();
                    Ok(format!("fetch {n}"))
                })
                .await
                .unwrap()
            })
        };
        // Sessions requested together, before any fetch: the first to ask starts one.
        let requested = Instant::now();
        let first = call(slot.clone(), requested);
        while runs.load(SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Nine more of them come while it runs: it started after they were requested, so
        // its answer is theirs.
        let together: Vec<_> = (0..9).map(|_| call(slot.clone(), requested)).collect();
        // Forty asked after it started: they wait for the next one and share it.
        let later = Instant::now();
        let rest: Vec<_> = (0..40).map(|_| call(slot.clone(), later)).collect();
        tokio::task::yield_now().await;
        open.send(true).unwrap();
        assert_eq!(first.await.unwrap(), "fetch 1");
        for r in together {
            assert_eq!(r.await.unwrap(), "fetch 1");
        }
        for r in rest {
            assert_eq!(r.await.unwrap(), "fetch 2");
        }
        assert_eq!(runs.load(SeqCst), 2);
        // One that asks after both ended looks again.
        assert_eq!(call(slot.clone(), Instant::now()).await.unwrap(), "fetch 3");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_outlives_its_callers_for_those_asked_before_it_began() {
        let mirror = PathBuf::from(format!("/nowhere/{}.git", uuid::Uuid::new_v4()));
        let asked = std::time::Instant::now();
        let fetch = |n: u32| async move { Ok(format!("fetch {n}")) };
        let first = Fetches::slot(mirror.clone(), "main")
            .shared(asked, fetch(1))
            .await
            .unwrap();
        assert_eq!(first, "fetch 1");
        // Every caller of that fetch is gone; one asked for together with it boots now.
        let late = Fetches::slot(mirror.clone(), "main")
            .shared(asked, fetch(2))
            .await
            .unwrap();
        assert_eq!(late, "fetch 1", "the answer went with its callers");
        // One asked for now looks again; another branch has its own.
        let now = std::time::Instant::now();
        let again = Fetches::slot(mirror.clone(), "main")
            .shared(now, fetch(3))
            .await;
        assert_eq!(again.unwrap(), "fetch 3");
        let other = Fetches::slot(mirror, "dev").shared(asked, fetch(4)).await;
        assert_eq!(other.unwrap(), "fetch 4");
    }

    #[tokio::test]
    async fn a_file_read_at_a_commit_id_is_read_from_git_once() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("tandem.toml"), "start = []\n").unwrap();
        for args in [
            &["init", "--quiet"][..],
            &["add", "tandem.toml"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.com",
                "commit",
                "--quiet",
                "-m",
                "one",
            ],
        ] {
            git(args, Some(&repo)).await.unwrap();
        }
        let commit = git(&["rev-parse", "HEAD"], Some(&repo)).await.unwrap();
        let read = async |at: &str, file: &str| read_file(&repo, at, file).await.unwrap();
        assert_eq!(
            read(&commit, "tandem.toml").await.as_deref(),
            Some("start = []")
        );
        assert_eq!(
            read("HEAD", "tandem.toml").await.as_deref(),
            Some("start = []")
        );
        assert_eq!(read(&commit, "missing").await, None);
        // With the repository gone, git can answer nothing: what is still read came from the
        // cache, and only at the commit id (a branch or HEAD can move).
        std::fs::remove_dir_all(&repo).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        assert_eq!(
            read(&commit, "tandem.toml").await.as_deref(),
            Some("start = []")
        );
        assert_eq!(read("HEAD", "tandem.toml").await, None);
        // A commit the mirror does not have yet is not taken as one without the file.
        let other = "0123456789012345678901234567890123456789";
        assert_eq!(read(other, "tandem.toml").await, None);
        assert!(!kept().as_ref().unwrap().contains_key(&(
            repo.clone(),
            other.into(),
            "tandem.toml".into()
        )));
    }
}
