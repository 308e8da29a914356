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
    if dir.join("HEAD").exists() {
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
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
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

/// A file of `commit` as stored in the mirror, if it exists there.
pub async fn read_file(mirror: &Path, commit: &str, file: &str) -> Result<Option<String>> {
    match git(&["show", &format!("{commit}:{file}")], Some(mirror)).await {
        Ok(text) => Ok(Some(text)),
        Err(_) => Ok(None),
    }
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
    pub async fn fetch_mirror(&self, repo: &Repo, branch: &str) -> Result<String> {
        let auth = self.credentials.remote_auth(repo).await?;
        let (_, commit) = update(&self.data_dir, repo, branch, auth.as_deref()).await?;
        Ok(commit)
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
