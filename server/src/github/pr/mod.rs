//! A session's pull request: its changes committed as the people who prompted them, pushed from
//! the workspace through the gateway (the workspace's git asks its credential helper for the
//! session's token), and a pull request opened — by the asking person when they signed in with
//! GitHub, else by the App — whose body tells the session's story. Each later turn commits as
//! its prompt's author and, while the pull request is open, pushes to the same branch.

use std::sync::Arc;

use tandem_protocol::github::{CreatePr, PrState, PullRequest};
use tandem_protocol::{Author, AuthorKind, Event, EventKind, Prompt, SessionId, Timestamp, agent};

use super::{GitHub, credentials, status_of, upstream};
use crate::Host;
use crate::db::github::LinkedRepo;
use crate::sessions::workspace;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

mod api;
mod body;
mod git;
use api::*;
pub use body::*;
pub use git::*;

/// Longest pull request title and body GitHub accepts (the body's limit is 65,536 characters).
pub const MAX_TITLE_CHARS: usize = 256;

pub const MAX_BODY_CHARS: usize = 60_000;

/// The GitHub side of the server, or a refusal (409 `github_not_configured`) that says it is
/// not configured: a feature this server lacks, which asking again will not change (a 503
/// would say the server itself is failing).
pub fn github(app: &AppState) -> Result<&Arc<GitHub>> {
    app.github.as_ref().ok_or_else(|| Error::Refused {
        code: "github_not_configured",
        message: "GitHub is not configured on this server ([github] in tandem.toml)".into(),
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
    if let Some(pr) = db::github::pull_request(&app.db, session).await? {
        return Ok(pr.branch);
    }
    let s = crate::sessions::get(&app.db, session).await?.session;
    Ok(branch_name(session, &s.title))
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

/// `POST /api/sessions/{id}/pr` and the agent's tool: opens the session's pull request, or
/// brings it up to date when it has one.
pub async fn open(
    app: &AppState,
    session: SessionId,
    by: &Author,
    req: CreatePr,
) -> Result<PullRequest> {
    let gh = github(app)?;
    let host = app.workspaces()?;
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
    let workspace::LiveWorkspace {
        session: s,
        id: wid,
        base_commit,
        ..
    } = workspace::live_workspace(&app.db, session).await?;
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
    prepare_git(gh, &host, &wid).await?;
    let base = base_commit.clone().unwrap_or_default();
    let ahead = git(
        &host,
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
    let existing = db::github::pull_request(&app.db, session).await?;
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
        &host,
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
                rebase(app, &host, &wid, by, &base_branch).await?;
                db::sessions::set_base_commit(&app.db, session, &remote_head).await?;
                force = true;
            }
            Some(false) => {}
        }
    }
    let branch = existing
        .as_ref()
        .map(|p| p.branch.clone())
        .unwrap_or_else(|| branch_name(session, &s.title));
    let head_sha = push(&host, &wid, &branch, force).await?;
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
    if db::github::linked_repo(&app.db, detail.session.repo_id)
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
    let pr = db::github::pull_request(&app.db, session).await?;
    drop(guard);
    match (committed, pr) {
        (Some(_), Some(pr)) if pr.state == PrState::Open => {
            open(app, session, &prompt.author, CreatePr::default()).await?;
        }
        _ => {}
    }
    Ok(())
}

pub(super) async fn repo_id(app: &AppState, session: SessionId) -> Result<tandem_protocol::RepoId> {
    Ok(crate::sessions::get(&app.db, session)
        .await?
        .session
        .repo_id)
}

/// Every event of the session, oldest first.
pub(super) async fn all_events(app: &AppState, session: SessionId) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = db::events::list_after(&app.db, session, after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        out.extend(page);
    }
    Ok(out)
}
