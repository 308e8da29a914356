//! The session's git in its workspace: prepared to push through the gateway, the turn's changes
//! committed as their authors, rebased onto the base and pushed, a refused push explained.

use super::*;

/// How long one git network operation in the workspace may take.
pub(super) const GIT_TIMEOUT_SECS: u64 = 300;

/// Puts the session's git credential helper and the gateway relay in the workspace's system git
/// config: `git push origin` (or any GitHub URL of the repo) then goes through the gateway, and
/// the token is asked for each time, never written down.
pub(super) async fn prepare_git(gh: &GitHub, host: &Host, wid: &str) -> Result<()> {
    let script = r#"set -e
git config --system --unset-all credential.helper 2>/dev/null || true
git config --system "credential.$TANDEM_RELAY.helper" "$TANDEM_HELPER"
git config --system --replace-all "url.$TANDEM_RELAY.insteadOf" "$TANDEM_WEB/""#;
    let env = [
        (
            "TANDEM_HELPER".to_string(),
            format!("{} git-credential", agent::BINARY),
        ),
        (
            "TANDEM_RELAY".to_string(),
            format!(
                "http://{}{}",
                agent::GATEWAY_LOOPBACK,
                agent::GIT_RELAY_PREFIX
            ),
        ),
        ("TANDEM_WEB".to_string(), gh.config.web_url.clone()),
    ];
    let out = workspace::run(host, wid, script, &env, 30).await?;
    if out.code != Some(0) {
        return Err(Error::Internal(format!(
            "configuring git in the workspace failed: {}",
            out.stderr.trim()
        )));
    }
    Ok(())
}

/// Runs git `script` in the workspace; stdout on success, else stdout+stderr as the error.
pub(super) async fn git(
    host: &Host,
    wid: &str,
    script: &str,
    env: &[(String, String)],
) -> std::result::Result<String, String> {
    let out = workspace::run(host, wid, script, env, GIT_TIMEOUT_SECS)
        .await
        .map_err(|e| e.to_string())?;
    if out.code == Some(0) {
        Ok(out.stdout)
    } else {
        Err(format!("{}{}", out.stdout, out.stderr))
    }
}

/// Commits whatever changed in the checkout as `author` (the prompting person); None when nothing did.
pub async fn commit_changes(
    app: &AppState,
    session: SessionId,
    author: &Author,
    message: &str,
) -> Result<Option<String>> {
    let host = app.workspaces()?;
    let status = workspace::git_status(&app.db, &host, session).await?;
    if status.changes.is_empty() {
        return Ok(None);
    }
    let identity = super::super::commit_identity(&app.db, author).await?;
    let commit = workspace::git_commit(&app.db, &host, session, author, identity, message).await?;
    workspace::event(
        &app.db,
        session,
        EventKind::Committed {
            commit: commit.clone(),
            author: author.clone(),
            message: message.to_string(),
        },
    )
    .await?;
    Ok(Some(commit))
}

/// A commit message for a prompt: its first line (cut), then where it came from.
pub fn commit_message(app: &AppState, session: SessionId, prompt: &Prompt) -> String {
    let first = prompt
        .text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("Changes")
        .trim();
    let subject: String = first.chars().take(72).collect();
    format!(
        "{subject}\n\nPrompted by {} in Tandem session {}/sessions/{session}",
        prompt.author.name,
        app.public_url()
    )
}

pub(super) async fn rebase(
    app: &AppState,
    host: &Host,
    wid: &str,
    by: &Author,
    base_branch: &str,
) -> Result<()> {
    let (name, email) = super::super::commit_identity(&app.db, by).await?;
    let env = [
        ("TANDEM_BRANCH".to_string(), base_branch.to_string()),
        ("GIT_COMMITTER_NAME".to_string(), name),
        ("GIT_COMMITTER_EMAIL".to_string(), email),
    ];
    let script = r#"git fetch --quiet origin "refs/heads/$TANDEM_BRANCH" || exit 3
if git rebase --quiet FETCH_HEAD >/dev/null 2>&1; then exit 0; fi
git diff --name-only --diff-filter=U
git rebase --abort >/dev/null 2>&1
exit 4"#;
    let out = workspace::run(host, wid, script, &env, GIT_TIMEOUT_SECS).await?;
    match out.code {
        Some(0) => Ok(()),
        Some(4) => {
            let files = out.stdout.split_whitespace().collect::<Vec<_>>().join(", ");
            let what = if files.is_empty() {
                format!("fails: {}", out.stderr.trim())
            } else {
                format!("conflicts in: {files}")
            };
            Err(Error::Refused {
                code: "rebase_conflict",
                message: format!(
                    "rebasing onto {base_branch} {what}; the session is left as it was — ask the agent to merge {base_branch} and resolve it, or open the pull request with \"rebase\": false"
                ),
            })
        }
        _ => Err(push_error(
            &format!("{}{}", out.stdout, out.stderr),
            base_branch,
        )),
    }
}

/// Pushes HEAD to `branch`; returns the pushed commit.
pub(super) async fn push(host: &Host, wid: &str, branch: &str, force: bool) -> Result<String> {
    let refspec = format!("{}HEAD:refs/heads/{branch}", if force { "+" } else { "" });
    let script = r#"git push --porcelain origin "$TANDEM_REFSPEC" 2>&1 && git rev-parse HEAD"#;
    let out = git(host, wid, script, &[("TANDEM_REFSPEC".into(), refspec)])
        .await
        .map_err(|e| push_error(&e, branch))?;
    Ok(out.lines().last().unwrap_or_default().trim().to_string())
}

/// What a failed git network operation means for people.
pub(super) fn push_error(output: &str, branch: &str) -> Error {
    let said: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("remote:")
                || l.starts_with('!')
                || l.starts_with("fatal:")
                || l.starts_with("error:")
                || l.contains("rejected")
                // What the credential helper said (why there is no credential).
                || l.contains("GitHub credential")
        })
        .take(12)
        .collect();
    let said = if said.is_empty() {
        output.trim().chars().take(500).collect::<String>()
    } else {
        said.join("\n")
    };
    let lower = output.to_lowercase();
    if lower.contains("authentication failed")
        || lower.contains("could not read username")
        || lower.contains("error: 403")
        || lower.contains("http 403")
    {
        return Error::BadGateway(format!(
            "GitHub refused the session's credential for {branch}: {said}"
        ));
    }
    if lower.contains("non-fast-forward") || lower.contains("fetch first") {
        return Error::Refused {
            code: "push_rejected",
            message: format!(
                "{branch} on GitHub has commits the session does not (someone pushed to it, or the session rewrote its history); nothing was pushed — ask the agent to pull {branch} and merge it, then try again:\n{said}"
            ),
        };
    }
    if lower.contains("rejected") || lower.contains("declined") || lower.contains("protected") {
        return Error::Refused {
            code: "push_rejected",
            message: format!(
                "GitHub rejected the push to {branch} (branch protection or a hook):\n{said}"
            ),
        };
    }
    Error::BadGateway(format!("git could not reach GitHub for {branch}: {said}"))
}

pub(super) fn short(sha: &str) -> &str {
    sha.get(..8).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_are_valid_and_distinct_per_session() {
        let a = SessionId(uuid::Uuid::new_v4());
        let name = branch_name(a, "Fix the login page: it crashes!");
        assert!(
            name.starts_with("tandem/fix-the-login-page-it-crashes-"),
            "{name}"
        );
        assert!(crate::repos::validate_branch(&name).is_ok(), "{name}");
        assert!(branch_name(a, "???").starts_with("tandem/"));
        assert_ne!(
            branch_name(a, "x"),
            branch_name(SessionId(uuid::Uuid::new_v4()), "x")
        );
    }

    #[test]
    fn push_errors_say_what_happened() {
        let e = push_error(
            "remote: error: GH006: Protected branch update failed\n! refs/heads/x [remote rejected] (protected branch hook declined)",
            "x",
        );
        assert!(
            matches!(
                e,
                Error::Refused {
                    code: "push_rejected",
                    ..
                }
            ),
            "{e}"
        );
        let e = push_error(
            "fatal: Authentication failed for 'http://127.0.0.1:4100/git/o/r.git/'",
            "x",
        );
        assert!(matches!(e, Error::BadGateway(_)), "{e}");
        assert!(is_test_command("cargo test -p x") && !is_test_command("ls -la"));
    }
}
