//! Git in the checkout: status and commit, with the workspace's own git.

use std::path::Path;

use axum::http::StatusCode;
use tandem_protocol::agent::{GitChange, GitCommit, GitCommitted, GitStatus};

/// A failed git call: status and message.
pub type GitError = (StatusCode, String);

pub(crate) async fn git(
    root: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String, GitError> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot run git: {e}"),
            )
        })?;
    if !out.status.success() {
        return Err((
            StatusCode::CONFLICT,
            format!(
                "git {}: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Branch, HEAD and changed paths (porcelain v1, NUL-separated so any path name survives).
pub async fn status(root: &Path) -> Result<GitStatus, GitError> {
    let branch = git(root, &["rev-parse", "--abbrev-ref", "HEAD"], &[])
        .await?
        .trim()
        .to_string();
    let head = git(root, &["rev-parse", "HEAD"], &[])
        .await?
        .trim()
        .to_string();
    let raw = git(
        root,
        &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
        &[],
    )
    .await?;
    let mut changes = Vec::new();
    let mut parts = raw.split('\0').filter(|p| !p.is_empty());
    while let Some(entry) = parts.next() {
        if entry.len() < 4 {
            continue;
        }
        let (code, path) = entry.split_at(2);
        // A rename or copy is followed by its source path; the destination is what changed.
        if code.starts_with('R') || code.starts_with('C') {
            parts.next();
        }
        changes.push(GitChange {
            code: code.to_string(),
            path: path[1..].to_string(),
        });
    }
    Ok(GitStatus {
        branch,
        head,
        changes,
    })
}

/// Commits every change (new files too) as the given author.
pub async fn commit(root: &Path, req: GitCommit) -> Result<GitCommitted, GitError> {
    if req.message.trim().is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "the commit message is empty".into(),
        ));
    }
    git(root, &["add", "-A"], &[]).await?;
    let env = [
        ("GIT_AUTHOR_NAME", req.author_name.as_str()),
        ("GIT_AUTHOR_EMAIL", req.author_email.as_str()),
        ("GIT_COMMITTER_NAME", req.author_name.as_str()),
        ("GIT_COMMITTER_EMAIL", req.author_email.as_str()),
    ];
    git(
        root,
        &["commit", "--quiet", "--no-verify", "-m", &req.message],
        &env,
    )
    .await?;
    let commit = git(root, &["rev-parse", "HEAD"], &[])
        .await?
        .trim()
        .to_string();
    Ok(GitCommitted { commit })
}
