//! Who sees what. A person's role on a repo comes from its access mode (everyone, their own
//! GitHub permission, or members only), its grants (people and identity-provider groups) and
//! whether they are an admin; a session is seen by the people who may read its repo — unless it
//! is private: then by its owner and the people they shared it with. Every surface (REST, the
//! live channel, VS Code, the desktop, webhooks, lists) asks here, and what a person may not see
//! answers exactly as what does not exist: 404.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tandem_protocol::limits::GITHUB_PERMISSION_TTL_SECS;
use tandem_protocol::live::Role;
use tandem_protocol::people::{RepoAccess, RepoRole};
use tandem_protocol::{Repo, RepoId, Session, SessionId, User, UserId};

use crate::Engine;
use crate::sessions::access::{self, Access};
use crate::{Error, Result, db};

/// The GitHub permissions looked up lately, per person and repo.
#[derive(Default)]
pub struct Permissions {
    github: Mutex<HashMap<(UserId, RepoId), Looked>>,
}

/// When a permission was looked up, and what it was.
type Looked = (Instant, Option<RepoRole>);

impl Permissions {
    fn cached(&self, key: (UserId, RepoId)) -> Option<Option<RepoRole>> {
        let map = self.github.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&key)
            .filter(|(at, _)| at.elapsed() < Duration::from_secs(GITHUB_PERMISSION_TTL_SECS as u64))
            .map(|(_, r)| *r)
    }

    fn remember(&self, key: (UserId, RepoId), role: Option<RepoRole>) {
        let mut map = self.github.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (at, _)| {
            at.elapsed() < Duration::from_secs(GITHUB_PERMISSION_TTL_SECS as u64)
        });
        map.insert(key, (Instant::now(), role));
    }

    /// Forgets what was looked up for `user` (their sign-in changed).
    pub fn forget(&self, user: UserId) {
        let mut map = self.github.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|(u, _), _| *u != user);
    }
}

/// What `user` may do with `repo`; `None`: they may not see it.
pub async fn repo_role(app: &Engine, user: &User, repo: &Repo) -> Result<Option<RepoRole>> {
    if user.deactivated_at.is_some() {
        return Ok(None);
    }
    if user.is_admin {
        return Ok(Some(RepoRole::Write));
    }
    let granted = db::repos::grants_for(&app.db, user.id, &user.groups)
        .await?
        .into_iter()
        .filter(|(r, _)| *r == repo.id)
        .map(|(_, role)| role)
        .max();
    let by_mode = match repo.access {
        RepoAccess::Everyone => Some(RepoRole::Write),
        RepoAccess::Members => None,
        RepoAccess::Github => github_role(app, user, repo).await?,
    };
    Ok(granted.max(by_mode))
}

async fn github_role(app: &Engine, user: &User, repo: &Repo) -> Result<Option<RepoRole>> {
    let key = (user.id, repo.id);
    if let Some(role) = app.permissions.cached(key) {
        return Ok(role);
    }
    let role = match db::github::linked_repo(&app.db, repo.id).await? {
        Some(linked) => {
            app.hooks
                .code_host_role(app, user.id, &linked.owner, &linked.name)
                .await?
        }
        // Not (or no longer) a GitHub repo here: only its grants count.
        None => None,
    };
    app.permissions.remember(key, role);
    Ok(role)
}

/// Every repo `user` may see, with their role, by name.
pub async fn visible_repos(app: &Engine, user: &User) -> Result<Vec<(Repo, RepoRole)>> {
    let mut out = Vec::new();
    for repo in crate::repos::list(&app.db).await? {
        if let Some(role) = repo_role(app, user, &repo).await? {
            out.push((repo, role));
        }
    }
    Ok(out)
}

/// Repo `id` if `user` may see it (else the same 404 as a repo that does not exist).
pub async fn repo(app: &Engine, user: &User, id: RepoId) -> Result<(Repo, RepoRole)> {
    let repo = crate::repos::get(&app.db, id).await?;
    match repo_role(app, user, &repo).await? {
        Some(role) => Ok((repo, role)),
        None => Err(no_repo(id)),
    }
}

/// Repo `id` if `user` may start sessions on it: 404 when they may not see it, 403 (saying whom
/// to ask) when they may only read it.
pub async fn repo_for_work(app: &Engine, user: &User, id: RepoId) -> Result<Repo> {
    let (repo, role) = repo(app, user, id).await?;
    if role < RepoRole::Write {
        return Err(Error::Forbidden(format!(
            "you may view {}'s sessions but not start them: ask {} for write access",
            repo.name,
            whom_to_ask(app).await?
        )));
    }
    Ok(repo)
}

/// The admins to ask for access, by name.
pub async fn whom_to_ask(app: &Engine) -> Result<String> {
    let names: Vec<String> = db::users::admins(&app.db)
        .await?
        .into_iter()
        .map(|u| u.name)
        .take(3)
        .collect();
    Ok(if names.is_empty() {
        "an admin".into()
    } else {
        format!("an admin ({})", names.join(", "))
    })
}

fn no_repo(id: RepoId) -> Error {
    Error::NotFound(format!("no repo {id}"))
}

fn no_session(id: SessionId) -> Error {
    Error::NotFound(format!("no session {id}"))
}

/// Whether `user` sees `session`, and their role in it; `None`: they do not (answer 404).
pub async fn in_session(app: &Engine, session: &Session, user: &User) -> Result<Option<Access>> {
    if user.deactivated_at.is_some() {
        return Ok(None);
    }
    let mut a = access::of_user(&app.db, session, user).await?;
    // Whoever joined through a link that still holds has what the link grants; admins all.
    if user.is_admin || a.jti.is_some() {
        return Ok(Some(a));
    }
    let repo = crate::repos::get(&app.db, session.repo_id).await?;
    let Some(on_repo) = repo_role(app, user, &repo).await? else {
        // Not even its author sees it once the repo is not theirs to see.
        return Ok(None);
    };
    if a.role == Role::Owner {
        // Its author drives it while they may write to the repo; with read only, they watch.
        if on_repo < RepoRole::Write {
            a.role = Role::Viewer;
        }
        return Ok(Some(a));
    }
    if session.private {
        return Ok(None);
    }
    Ok(Some(a))
}

/// Session `id` for `user` with at least `need`: 404 when they do not see it, 403 when they see
/// it with a lower role.
pub async fn require(app: &Engine, id: SessionId, user: &User, need: Role) -> Result<Access> {
    let session = crate::sessions::get(&app.db, id).await?.session;
    require_in(app, &session, user, need).await
}

/// [`require`] for a session already read.
pub async fn require_in(
    app: &Engine,
    session: &Session,
    user: &User,
    need: Role,
) -> Result<Access> {
    let Some(a) = in_session(app, session, user).await? else {
        return Err(no_session(session.id));
    };
    if a.role < need {
        return Err(Error::Forbidden(format!(
            "you are a {} in this session; this needs a {}",
            db::links::role_str(a.role),
            db::links::role_str(need)
        )));
    }
    Ok(a)
}

/// Who is on the other end of a live channel, VS Code or the desktop: a share token (a guest, or
/// a signed-in person with the better of the link's role and their own), else a signed-in
/// person who sees the session.
pub async fn resolve(
    app: &Engine,
    session: &Session,
    user: Option<&User>,
    share: Option<&str>,
    guest_name: Option<&str>,
) -> Result<Access> {
    if share.is_some() {
        // A link grants what it says to whoever holds it (a signed-in holder keeps the better
        // of the link's role and their own).
        return access::resolve(&app.db, &app.jwt, session, user, share, guest_name).await;
    }
    match user {
        Some(u) => require_in(app, session, u, Role::Viewer).await,
        None => Err(Error::Unauthorized("sign in, or open a share link".into())),
    }
}

/// Whom a session list is for.
pub async fn scope(app: &Engine, user: &User) -> Result<Option<db::sessions::Scope>> {
    if user.is_admin {
        return Ok(None);
    }
    let repos = visible_repos(app, user)
        .await?
        .into_iter()
        .map(|(r, _)| r.id)
        .collect();
    Ok(Some(db::sessions::Scope {
        user: user.id,
        repos,
        now: crate::now_ms(),
    }))
}
