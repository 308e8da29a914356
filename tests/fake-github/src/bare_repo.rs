//! The bare repositories on disk, handled with real git: created, read for branch tips, merged
//! into (a pull request's merge commit), and guarded by an `update` hook for protected branches.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// `git -C dir`, with none of the caller's repository variables (a test may run inside a hook).
pub(crate) fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir);
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    ] {
        c.env_remove(var);
    }
    c
}

/// Runs `cmd`, panicking with git's own words if it fails (the fake's setup is the test's setup).
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run git");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `git init --bare -b <branch>` at `path`, open to pushes over HTTP.
pub(crate) fn create(path: &Path, default_branch: &str) {
    std::fs::create_dir_all(path).expect("create the repository directory");
    run(git(path).args(["init", "--bare", "--quiet", "-b", default_branch]));
    run(git(path).args(["config", "http.receivepack", "true"]));
}

fn parse_tips(out: &Output) -> HashMap<String, String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, sha) = l.split_once(' ')?;
            Some((
                name.strip_prefix("refs/heads/")?.to_string(),
                sha.to_string(),
            ))
        })
        .collect()
}

fn tips_command(path: &Path) -> Command {
    let mut c = git(path);
    c.args([
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads",
    ]);
    c
}

/// Branch name → commit, for every branch.
pub(crate) async fn tips(path: &Path) -> HashMap<String, String> {
    match tokio::process::Command::from(tips_command(path))
        .output()
        .await
    {
        Ok(out) => parse_tips(&out),
        Err(_) => HashMap::new(),
    }
}

/// [`tips`] for the test-facing, synchronous side.
pub(crate) fn tips_blocking(path: &Path) -> HashMap<String, String> {
    tips_command(path)
        .output()
        .map(|o| parse_tips(&o))
        .unwrap_or_default()
}

/// How many commits `head` has that `base` lacks.
pub(crate) async fn commits_ahead(path: &Path, base: &str, head: &str) -> u64 {
    let mut c = git(path);
    c.args(["rev-list", "--count", &format!("{base}..{head}")]);
    match tokio::process::Command::from(c).output().await {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0),
        _ => 0,
    }
}

/// Merges `head_sha` into branch `base` (at `base_sha`) with a merge commit, as GitHub's merge
/// button does. Returns the merge commit, or git's message if the two conflict.
pub(crate) fn merge(
    path: &Path,
    base: &str,
    base_sha: &str,
    head_sha: &str,
    message: &str,
) -> Result<String, String> {
    let out = git(path)
        .args(["merge-tree", "--write-tree", base_sha, head_sha])
        .output()
        .expect("run git merge-tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)));
    }
    let tree = stdout.lines().next().unwrap_or_default().to_string();
    let commit = run(git(path)
        .args([
            "commit-tree",
            &tree,
            "-p",
            base_sha,
            "-p",
            head_sha,
            "-m",
            message,
        ])
        .env("GIT_AUTHOR_NAME", "GitHub")
        .env("GIT_AUTHOR_EMAIL", "noreply@github.com")
        .env("GIT_COMMITTER_NAME", "GitHub")
        .env("GIT_COMMITTER_EMAIL", "noreply@github.com"));
    run(git(path).args([
        "update-ref",
        &format!("refs/heads/{base}"),
        &commit,
        base_sha,
    ]));
    Ok(commit)
}

/// Writes the `update` hook that refuses pushes to branches matching any of `globs`, with
/// GitHub's GH006 message. An `update` hook (not `pre-receive`) so that, as on GitHub, only the
/// protected refs of a push are refused and the others land.
pub(crate) fn write_protection_hook(path: &Path, globs: &[String]) {
    for g in globs {
        assert!(
            !g.is_empty()
                && g.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/*?".contains(c)),
            "protect_branch: {g:?} is not a branch glob this fake supports"
        );
    }
    // The globs are unquoted on purpose: `case` matches them as patterns (checked safe above).
    let script = format!(
        r#"#!/bin/sh
# Written by fake-github: branch protection, as GitHub enforces it on push.
refname="$1"
branch="${{refname#refs/heads/}}"
[ "$branch" = "$refname" ] && exit 0
case "$branch" in
  {})
    echo "error: GH006: Protected branch update failed for $refname." >&2
    echo "error: Changes must be made through a pull request." >&2
    exit 1 ;;
esac
exit 0
"#,
        globs.join("|")
    );
    let hook = path.join("hooks").join("update");
    std::fs::create_dir_all(hook.parent().expect("hooks dir")).expect("create hooks dir");
    std::fs::write(&hook, script).expect("write the update hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
        .expect("make the hook executable");
}
