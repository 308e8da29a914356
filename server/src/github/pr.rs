//! A session's pull request: its changes committed as the people who prompted them, pushed from
//! the workspace through the gateway (the workspace's git asks its credential helper for the
//! session's token), and a pull request opened — by the asking person when they signed in with
//! GitHub, else by the App — whose body tells the session's story. Each later turn commits as
//! its prompt's author and, while the pull request is open, pushes to the same branch.

use std::sync::Arc;

use tandem_protocol::github::{CreatePr, PrState, PullRequest};
use tandem_protocol::{Author, AuthorKind, Event, EventKind, Prompt, SessionId, Timestamp, agent};

use super::{GitHub, credentials, status_of, upstream};
use crate::db::github::LinkedRepo;
use crate::sessions::workspace;
use crate::snapshots::Workspaces;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Longest pull request title and body GitHub accepts (the body's limit is 65,536 characters).
pub const MAX_TITLE_CHARS: usize = 256;
pub const MAX_BODY_CHARS: usize = 60_000;
/// How long one git network operation in the workspace may take.
const GIT_TIMEOUT_SECS: u64 = 300;

/// The GitHub side of the server, or a 503 that says it is not configured.
pub fn github(app: &AppState) -> Result<&Arc<GitHub>> {
    app.github.as_ref().ok_or_else(|| {
        Error::Unavailable(
            "GitHub is not configured on this server ([github] in tandem.toml)".into(),
        )
    })
}

/// The session's branch on GitHub: `tandem/<title words>-<session id prefix>`.
pub fn branch_name(session: SessionId, title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= 40 {
            break;
        }
    }
    let slug = slug.trim_matches('-');
    let id = session.to_string();
    if slug.is_empty() {
        format!("tandem/{}", &id[..8])
    } else {
        format!("tandem/{slug}-{}", &id[..8])
    }
}

/// The one branch the session may push: its pull request's, or the one it will get.
pub async fn session_branch(app: &AppState, session: SessionId) -> Result<String> {
    if let Some(pr) = db::github::pull_request(app.db.pool(), session).await? {
        return Ok(pr.branch);
    }
    let s = crate::sessions::get(&app.db, session).await?.session;
    Ok(branch_name(session, &s.title))
}

/// Puts the session's git credential helper and the gateway relay in the workspace's system git
/// config: `git push origin` (or any GitHub URL of the repo) then goes through the gateway, and
/// the token is asked for each time, never written down.
async fn prepare_git(gh: &GitHub, ws: &Workspaces, wid: &str) -> Result<()> {
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
    let out = workspace::run(ws, wid, script, &env, 30).await?;
    if out.code != Some(0) {
        return Err(Error::Internal(format!(
            "configuring git in the workspace failed: {}",
            out.stderr.trim()
        )));
    }
    Ok(())
}

/// Prepares the workspace's git for GitHub once per workspace, when the session's repo is a
/// GitHub one (the agent's own `git push` then works like the server's).
pub async fn prepare_session(app: &AppState, session: SessionId, wid: &str) -> Result<()> {
    let Some(gh) = app.github.as_ref() else {
        return Ok(());
    };
    if gh
        .prepared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(wid)
    {
        return Ok(());
    }
    if credentials::linked(gh, session).await.is_err() {
        return Ok(());
    }
    prepare_git(gh, &*app.workspaces()?, wid).await?;
    gh.prepared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(wid.to_string());
    Ok(())
}

/// Runs git `script` in the workspace; stdout on success, else stdout+stderr as the error.
async fn git(
    ws: &Workspaces,
    wid: &str,
    script: &str,
    env: &[(String, String)],
) -> std::result::Result<String, String> {
    let out = workspace::run(ws, wid, script, env, GIT_TIMEOUT_SECS)
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
    let ws = app.workspaces()?;
    let status = workspace::git_status(&app.db, &ws, session).await?;
    if status.changes.is_empty() {
        return Ok(None);
    }
    let commit = workspace::git_commit(&app.db, &ws, session, author, message).await?;
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

/// `POST /api/sessions/{id}/pr` and the agent's tool: opens the session's pull request, or
/// brings it up to date when it has one.
pub async fn open(
    app: &AppState,
    session: SessionId,
    by: &Author,
    req: CreatePr,
) -> Result<PullRequest> {
    let gh = github(app)?;
    let ws = app.workspaces()?;
    let lock = gh.pr_lock(session);
    let _one = lock.lock().await;
    let repo = credentials::linked(gh, session).await?;
    // The relay needs the session's token for the workspace's git; minting it here first
    // says what is wrong (git in the workspace would only see the relay's status).
    credentials::for_session(gh, session)
        .await
        .map_err(|e| match e {
            Error::Unavailable(m) | Error::BadGateway(m) => {
                Error::BadGateway(format!("no GitHub credential for the session: {m}"))
            }
            other => other,
        })?;
    let (s, wid, base_commit) = workspace::live_workspace(&app.db, session).await?;
    let title = req
        .title
        .clone()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| s.title.clone());
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(Error::Invalid(format!(
            "a pull request title is at most {MAX_TITLE_CHARS} characters"
        )));
    }
    commit_changes(
        app,
        session,
        by,
        &format!(
            "{title}\n\nCommitted by {} when opening the pull request",
            by.name
        ),
    )
    .await?;
    prepare_git(gh, &ws, &wid).await?;
    let base = base_commit.clone().unwrap_or_default();
    let ahead = git(
        &ws,
        &wid,
        r#"git rev-list --count "$TANDEM_BASE..HEAD""#,
        &[("TANDEM_BASE".into(), base.clone())],
    )
    .await
    .map_err(|e| Error::Internal(format!("counting the session's commits: {}", e.trim())))?;
    if ahead.trim() == "0" {
        return Err(Error::Conflict(
            "nothing to propose: the session has not changed any file".into(),
        ));
    }
    let existing = db::github::pull_request(app.db.pool(), session).await?;
    if let Some(pr) = existing.as_ref().filter(|p| p.state != PrState::Open) {
        return Err(Error::Refused {
            code: "pr_closed",
            message: format!(
                "pull request #{} is {}: reopen it on GitHub ({}) to keep working on it here, or start a new session",
                pr.number,
                pr.state.as_str(),
                pr.url
            ),
        });
    }
    let base_branch = existing
        .as_ref()
        .map(|p| p.base.clone())
        .unwrap_or_else(|| s.branch.clone());
    // Has the base moved on GitHub since the session started?
    let remote = git(
        &ws,
        &wid,
        r#"git ls-remote --heads origin "refs/heads/$TANDEM_BRANCH""#,
        &[("TANDEM_BRANCH".into(), base_branch.clone())],
    )
    .await
    .map_err(|e| push_error(&e, &base_branch))?;
    let remote_head = remote
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut force = false;
    if existing.is_none() && !remote_head.is_empty() && remote_head != base {
        match req.rebase {
            None => {
                return Err(Error::Refused {
                    code: "stale_base",
                    message: format!(
                        "{base_branch} moved on GitHub since this session started ({} → {}): ask again with \"rebase\": true (`tandem session pr --rebase`, or \"Rebase and open\") to rebase the session's commits onto it, or \"rebase\": false (`--no-rebase`) to open the pull request as is",
                        short(&base),
                        short(&remote_head)
                    ),
                });
            }
            Some(true) => {
                rebase(app, &ws, &wid, by, &base_branch).await?;
                db::sessions::set_base_commit(app.db.pool(), session, &remote_head).await?;
                force = true;
            }
            Some(false) => {}
        }
    }
    let branch = existing
        .as_ref()
        .map(|p| p.branch.clone())
        .unwrap_or_else(|| branch_name(session, &s.title));
    let head_sha = push(&ws, &wid, &branch, force).await?;
    let body = body(app, session).await?;
    let pr = match existing {
        Some(pr) => update(app, gh, &repo, pr, &head_sha, body).await?,
        None => {
            create(
                app,
                gh,
                &repo,
                session,
                by,
                &title,
                &branch,
                &base_branch,
                req.draft,
                &head_sha,
                body,
            )
            .await?
        }
    };
    workspace::audit(
        &app.db,
        by,
        "session.pull_request",
        session,
        serde_json::json!({ "number": pr.number, "head": pr.head_sha }),
    )
    .await?;
    Ok(pr)
}

/// After a turn: commit what it changed as its prompt's author and, while the session has an
/// open pull request, push it there. Quiet (logged) when GitHub is not involved.
pub async fn after_turn(app: &AppState, session: SessionId, prompt: &Prompt) -> Result<()> {
    let Some(gh) = app.github.as_ref() else {
        return Ok(());
    };
    let Ok(detail) = crate::sessions::get(&app.db, session).await else {
        return Ok(());
    };
    if db::github::linked_repo(app.db.pool(), detail.session.repo_id)
        .await?
        .is_none()
    {
        return Ok(());
    }
    let lock = gh.pr_lock(session);
    let guard = lock.lock().await;
    let committed = commit_changes(
        app,
        session,
        &prompt.author,
        &commit_message(app, session, prompt),
    )
    .await?;
    let pr = db::github::pull_request(app.db.pool(), session).await?;
    drop(guard);
    match (committed, pr) {
        (Some(_), Some(pr)) if pr.state == PrState::Open => {
            open(app, session, &prompt.author, CreatePr::default()).await?;
        }
        _ => {}
    }
    Ok(())
}

async fn rebase(
    app: &AppState,
    ws: &Workspaces,
    wid: &str,
    by: &Author,
    base_branch: &str,
) -> Result<()> {
    let (name, email) = super::commit_identity(&app.db, by).await?;
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
    let out = workspace::run(ws, wid, script, &env, GIT_TIMEOUT_SECS).await?;
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
async fn push(ws: &Workspaces, wid: &str, branch: &str, force: bool) -> Result<String> {
    let refspec = format!("{}HEAD:refs/heads/{branch}", if force { "+" } else { "" });
    let script = r#"git push --porcelain origin "$TANDEM_REFSPEC" 2>&1 && git rev-parse HEAD"#;
    let out = git(ws, wid, script, &[("TANDEM_REFSPEC".into(), refspec)])
        .await
        .map_err(|e| push_error(&e, branch))?;
    Ok(out.lines().last().unwrap_or_default().trim().to_string())
}

/// What a failed git network operation means for people.
fn push_error(output: &str, branch: &str) -> Error {
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

fn short(sha: &str) -> &str {
    sha.get(..8).unwrap_or(sha)
}

/// An API client acting for `by`: their own GitHub token when they signed in with GitHub (the
/// pull request is theirs, so they cannot approve it themselves), else the session's App token.
async fn client_for(
    app: &AppState,
    gh: &GitHub,
    session: SessionId,
    by: &Author,
) -> Result<(octocrab::Octocrab, bool)> {
    if by.kind == AuthorKind::User
        && let Some(user) = by.user_id
        && let Some(token) = super::signin::person_token(app, gh, user, false).await?
    {
        return Ok((gh.client(&token)?, true));
    }
    Ok((app_client(gh, session).await?, false))
}

async fn app_client(gh: &GitHub, session: SessionId) -> Result<octocrab::Octocrab> {
    let (_, token) = credentials::for_session(gh, session).await?;
    gh.client(&token.token)
}

#[allow(clippy::too_many_arguments)]
async fn create(
    app: &AppState,
    gh: &GitHub,
    repo: &LinkedRepo,
    session: SessionId,
    by: &Author,
    title: &str,
    branch: &str,
    base: &str,
    draft: bool,
    head_sha: &str,
    body: String,
) -> Result<PullRequest> {
    let (client, personal) = client_for(app, gh, session, by).await?;
    let mut pulls = client.pulls(&repo.owner, &repo.name);
    let mut made = pulls
        .create(title, branch, base)
        .body(body.clone())
        .draft(Some(draft))
        .send()
        .await;
    // The person's GitHub token was refused (expired early, or revoked): refreshed once and
    // tried again; failing that, the App opens it.
    let fallback;
    if personal
        && matches!(&made, Err(e) if status_of(e) == Some(401))
        && let Some(user) = by.user_id
    {
        fallback = match super::signin::person_token(app, gh, user, true).await? {
            Some(token) => gh.client(&token)?,
            None => {
                tracing::info!(%session, "the person's GitHub token was refused; the App opens the pull request");
                app_client(gh, session).await?
            }
        };
        pulls = fallback.pulls(&repo.owner, &repo.name);
        made = pulls
            .create(title, branch, base)
            .body(body.clone())
            .draft(Some(draft))
            .send()
            .await;
        if matches!(&made, Err(e) if status_of(e) == Some(401)) {
            tracing::info!(%session, "the person's refreshed GitHub token was refused too; the App opens the pull request");
            let app_only = app_client(gh, session).await?;
            made = app_only
                .pulls(&repo.owner, &repo.name)
                .create(title, branch, base)
                .body(body.clone())
                .draft(Some(draft))
                .send()
                .await;
        }
    }
    let made = match made {
        Ok(pr) => pr,
        // One already exists for the branch (opened by hand, or an answer lost on the way):
        // adopt it.
        Err(e) if status_of(&e) == Some(422) => {
            let page = pulls
                .list()
                .head(format!("{}:{branch}", repo.owner))
                .state(octocrab::params::State::Open)
                .send()
                .await
                .map_err(|e| upstream("listing pull requests", &e))?;
            let found = page
                .items
                .into_iter()
                .next()
                .ok_or_else(|| upstream("opening the pull request", &e))?;
            pulls
                .update(found.number)
                .body(body)
                .send()
                .await
                .map_err(|e| upstream("updating the pull request", &e))?
        }
        Err(e) => return Err(upstream("opening the pull request", &e)),
    };
    let now = now_ms();
    let pr = PullRequest {
        session_id: session,
        number: made.number as i64,
        url: made.html_url.map(|u| u.to_string()).unwrap_or_default(),
        branch: branch.to_string(),
        base: base.to_string(),
        state: PrState::Open,
        // GitHub's word for the head (what webhooks name), else what was pushed.
        head_sha: Some(made.head.sha.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| head_sha.to_string()),
        opened_by: made
            .user
            .map(|u| u.login)
            .unwrap_or_else(|| format!("{}[bot]", gh.config.app_slug)),
        created_at: Timestamp(now),
        updated_at: Timestamp(now),
    };
    let mut tx = app.db.begin().await?;
    db::github::insert_pull_request(&mut *tx, repo_id(app, session).await?, &pr).await?;
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::PrOpened {
            number: pr.number,
            url: pr.url.clone(),
            branch: pr.branch.clone(),
            opened_by: pr.opened_by.clone(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(pr)
}

async fn update(
    app: &AppState,
    gh: &GitHub,
    repo: &LinkedRepo,
    pr: PullRequest,
    head_sha: &str,
    body: String,
) -> Result<PullRequest> {
    let (_, token) = credentials::for_session(gh, pr.session_id).await?;
    let client = gh.client(&token.token)?;
    client
        .pulls(&repo.owner, &repo.name)
        .update(pr.number as u64)
        .body(body)
        .send()
        .await
        .map_err(|e| upstream("updating the pull request", &e))?;
    if pr.head_sha == head_sha {
        return Ok(pr);
    }
    let now = now_ms();
    let mut tx = app.db.begin().await?;
    db::github::set_pull_request_head(&mut *tx, pr.session_id, head_sha, now).await?;
    db::events::append(
        &mut tx,
        pr.session_id,
        now,
        EventKind::PrUpdated {
            number: pr.number,
            head_sha: head_sha.to_string(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(PullRequest {
        head_sha: head_sha.to_string(),
        updated_at: Timestamp(now),
        ..pr
    })
}

async fn repo_id(app: &AppState, session: SessionId) -> Result<tandem_protocol::RepoId> {
    Ok(crate::sessions::get(&app.db, session)
        .await?
        .session
        .repo_id)
}

/// Every event of the session, oldest first.
async fn all_events(app: &AppState, session: SessionId) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = db::events::list_after(app.db.pool(), session, after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        out.extend(page);
    }
    Ok(out)
}

/// Whether a command runs tests (what reviewers want to see the result of).
pub fn is_test_command(cmd: &str) -> bool {
    let c = cmd.to_lowercase();
    [
        "test", "pytest", "jest", "vitest", "rspec", "mocha", "ctest", "check",
    ]
    .iter()
    .any(|w| c.contains(w))
}

/// The pull request body: summary, prompts and their authors, tests run with their results,
/// screenshots, and the way back to the session.
pub async fn body(app: &AppState, session: SessionId) -> Result<String> {
    let detail = crate::sessions::get(&app.db, session).await?;
    let events = all_events(app, session).await?;
    let public = app.public_url();
    let mut md = String::new();

    md.push_str("## Summary\n\n");
    let summary = events.iter().rev().find_map(|e| match &e.kind {
        EventKind::AgentMessage { text, .. } if !text.trim().is_empty() => {
            Some(text.trim().to_string())
        }
        _ => None,
    });
    md.push_str(&cut(
        &summary.unwrap_or_else(|| "The agent left no summary.".into()),
        4000,
    ));
    md.push_str("\n\n## Prompts\n\n");
    for (i, p) in detail.prompts.iter().enumerate() {
        let text = cut(&p.text.replace('\n', " "), 600);
        md.push_str(&format!(
            "{}. **{}** ({}): {text}\n",
            i + 1,
            p.author.name,
            p.state.as_str()
        ));
    }

    md.push_str("\n## Tests run\n\n");
    let mut tests = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match &e.kind {
            EventKind::ToolCall {
                call_id,
                name,
                arguments,
                ..
            } => {
                let Some(cmd) = arguments.get("command").and_then(|c| c.as_str()) else {
                    continue;
                };
                if !is_test_command(cmd) {
                    continue;
                }
                // The first result after the call with its id (ids repeat across model replies).
                let result = events[i..].iter().find_map(|r| match &r.kind {
                    EventKind::ToolResult {
                        call_id: c,
                        exit_code,
                        duration_ms,
                        ..
                    } if c == call_id => Some((*exit_code, *duration_ms)),
                    _ => None,
                });
                tests.push((format!("{cmd} ({name}, agent)"), result));
            }
            EventKind::CommandRun {
                author,
                command,
                exit_code,
                duration_ms,
                ..
            } if is_test_command(command) => {
                tests.push((
                    format!("{command} ({})", author.name),
                    Some((*exit_code, *duration_ms)),
                ));
            }
            _ => {}
        }
    }
    if tests.is_empty() {
        md.push_str("No test commands ran in this session.\n");
    } else {
        md.push_str("| Command | Result |\n|---|---|\n");
        for (cmd, result) in tests.iter().rev().take(30).rev() {
            let verdict = match result {
                Some((Some(0), ms)) => format!("✅ passed ({ms} ms)"),
                Some((Some(c), ms)) => format!("❌ exit {c} ({ms} ms)"),
                Some((None, ms)) => format!("⏱ killed ({ms} ms)"),
                None => "no result".to_string(),
            };
            md.push_str(&format!(
                "| `{}` | {verdict} |\n",
                cut(&cmd.replace('|', "\\|").replace('`', "'"), 200)
            ));
        }
    }

    let shots: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Attachment {
                artifact,
                name,
                content_type,
                ..
            } if content_type.starts_with("image/") => {
                Some((name.clone(), super::artifact_link(app, *artifact)))
            }
            _ => None,
        })
        .collect();
    md.push_str("\n## Screenshots\n\n");
    if shots.is_empty() {
        md.push_str("No screenshots were taken in this session.\n");
    } else {
        // Before and after: the first and the last, and up to four in between.
        let picked: Vec<_> = if shots.len() <= 6 {
            shots.iter().collect()
        } else {
            shots
                .iter()
                .take(3)
                .chain(shots.iter().skip(shots.len() - 3))
                .collect()
        };
        for (name, link) in picked {
            md.push_str(&format!("![{}]({link})\n", name.replace(['[', ']'], "")));
        }
    }
    md.push_str(&format!(
        "\n---\nOpened from Tandem session [{}]({public}/sessions/{session}).\n",
        cut(&detail.session.title, 120)
    ));
    Ok(cut(&md, MAX_BODY_CHARS))
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
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
