//! The commands people, agents and integrations give a session, each done one way whichever
//! surface asked: REST (the web app, the CLI, the extension), the live channel, the workspace's
//! gateway, GitHub issues and comments, Slack, automations. A surface authenticates its caller,
//! resolves the acting person with [`active_person`], then calls one of these; none
//! re-implements one.

use tandem_protocol::approval::{ApprovalState, ApprovalSubject};
use tandem_protocol::live::{CreateLink, MAX_LINK_TTL_SECS, Role, ShareLink};
use tandem_protocol::*;

use crate::Engine;
use crate::jwt::ShareClaims;
use crate::sessions::children::Asker;
use crate::{Error, Result, db, now_ms, sessions, turns};

/// The person a surface acts for, read now: `None` when there is no such person or an admin
/// deactivated them. Every surface that acts for a stored person (Slack, GitHub, an automation's
/// creator, a live member) asks here.
pub async fn active_person(db: &db::Db, id: UserId) -> Result<Option<User>> {
    Ok(db::users::get(db, id)
        .await?
        .filter(|u| u.deactivated_at.is_none()))
}

/// A session a surface asks for, beyond the request itself.
pub struct NewSession {
    pub request: CreateSession,
    /// Who it is written as: `User` from the web app, the CLI and GitHub, `Extension`, `Slack`,
    /// `Automation`.
    pub kind: AuthorKind,
    /// The name it is written under when not the person's own (an automation's).
    pub name: Option<String>,
    /// The first prompt's images, checked.
    pub images: Option<crate::prompt_images::Checked>,
    /// A tighter model budget for its tree than the server's.
    pub max_model_requests: Option<u32>,
    /// Its tree's own limits in model tokens and micro-dollars (an automation's run).
    pub max_tokens: Option<i64>,
    pub max_cost_micros: Option<i64>,
    /// Whether its boot starts now (true), or the surface ties something of its own to it first
    /// (a GitHub issue's row and report) and then calls `supervisor::start_boot`.
    pub boot: bool,
}

impl NewSession {
    /// `request`, written as `kind`, with nothing else.
    pub fn new(request: CreateSession, kind: AuthorKind) -> Self {
        Self {
            request,
            kind,
            name: None,
            images: None,
            max_model_requests: None,
            max_tokens: None,
            max_cost_micros: None,
            boot: true,
        }
    }
}

/// Starts a session for `person`: the one way every surface does. In this order: the person
/// is active; they may work on the repo (one they may not see is as unknown as one that does
/// not exist); the session is stored with its opening events, first prompt, images and budget
/// in one transaction; its boot starts (unless [`NewSession::boot`] says the surface starts it
/// once it has tied something of its own to the session).
pub async fn create_session(
    engine: &Engine,
    person: &User,
    new: NewSession,
) -> Result<SessionDetail> {
    if person.deactivated_at.is_some() {
        return Err(Error::Forbidden(format!(
            "{} was deactivated by an admin; ask an admin to reactivate them",
            person.name
        )));
    }
    let repo = new.request.repo_id;
    match crate::permissions::repo_for_work(engine, person, repo).await {
        Err(Error::NotFound(_)) => {
            return Err(Error::Invalid(format!("unknown repo {repo}")));
        }
        other => other?,
    };
    let new_boot = new.boot;
    let author = Author {
        kind: new.kind,
        user_id: Some(person.id),
        name: new.name.unwrap_or_else(|| person.name.clone()),
    };
    let opening = sessions::Opening {
        images: new.images.as_ref(),
        model_budget: new.max_model_requests,
        token_budget: new.max_tokens,
        cost_budget_micros: new.max_cost_micros,
        ..Default::default()
    };
    let detail = sessions::create_opening(
        &engine.db,
        author,
        new.request,
        &engine.settings.default_agent(),
        opening,
    )
    .await?;
    if new_boot {
        crate::supervisor::start_boot(engine, detail.session.id);
    }
    Ok(detail)
}

/// Default share-link lifetime: one day.
pub const DEFAULT_LINK_TTL_SECS: i64 = 24 * 3600;

/// Stores a prompt and sets it working: a `steer` prompt goes to the running turn (wherever it
/// runs), a `queue` prompt wakes the session's driver.
pub async fn submit_prompt(
    state: &Engine,
    session: SessionId,
    author: Author,
    req: CreatePrompt,
) -> Result<Prompt> {
    submit_prompt_with_images(state, session, author, req, None).await
}

/// [`submit_prompt`] with the prompt's checked `images` (stored in the same transaction, so its
/// turn never starts without them): Slack's messages with files.
pub async fn submit_prompt_with_images(
    state: &Engine,
    session: SessionId,
    author: Author,
    req: CreatePrompt,
    images: Option<&crate::prompt_images::Checked>,
) -> Result<Prompt> {
    let prompt =
        sessions::prompts::submit_with_images(&state.db, session, author, req, images).await?;
    start_work(state, &prompt).await;
    Ok(prompt)
}

/// [`submit_prompt`] for a prompt the workspace of session `asker` puts in its child `child`'s
/// queue: bounded per session and per tree (`sessions::prompts::submit_from_workspace`).
pub async fn submit_child_prompt(
    state: &Engine,
    asker: SessionId,
    child: SessionId,
    author: Author,
    req: CreatePrompt,
) -> Result<Prompt> {
    let prompt =
        sessions::prompts::submit_from_workspace(&state.db, asker, child, author, req).await?;
    start_work(state, &prompt).await;
    Ok(prompt)
}

/// Sets a stored prompt working (every submitting command, after storing it).
async fn start_work(state: &Engine, prompt: &Prompt) {
    match prompt.mode {
        PromptMode::Steer => turns::steer(state, prompt).await,
        PromptMode::Queue => turns::kick(state, prompt.session_id),
    }
}

/// Spawns children of `parent` (each booted and, with a prompt, worked on). Forks start from
/// the parent's copied workspace; new children are booted here (sessions know no boot loop).
pub async fn spawn_children(
    state: &Engine,
    parent: SessionId,
    author: Author,
    req: CreateChildren,
    asker: Asker,
) -> Result<Vec<Session>> {
    let fork = req.fork;
    let state = state.clone();
    // A fork pauses the parent while its layer is copied: it runs to its end.
    to_the_end(async move {
        let children = sessions::children::spawn(&state, parent, author, req, asker).await?;
        if !fork {
            for child in &children {
                crate::supervisor::start_boot(&state, child.id);
            }
        }
        Ok(children)
    })
    .await
}

/// Stops a session's workspace (its diff kept) and says who did.
pub async fn stop_session(state: &Engine, session: SessionId, reason: String) -> Result<()> {
    let host = state.workspaces()?;
    let db = state.db.clone();
    to_the_end(async move { sessions::workspace::stop(&db, &host, session, Some(reason)).await })
        .await
}

/// Suspends a session: its workspace stops, its writable layer is kept for [`resume_session`].
pub async fn suspend_session(state: &Engine, session: SessionId) -> Result<()> {
    let host = state.workspaces()?;
    let db = state.db.clone();
    to_the_end(async move { sessions::workspace::suspend(&db, &host, session).await }).await
}

/// Resumes a suspended session on its kept layer, and its queue goes on where it stopped.
pub async fn resume_session(state: &Engine, session: SessionId) -> Result<()> {
    let host = state.workspaces()?;
    let engine = state.clone();
    to_the_end(async move {
        sessions::workspace::resume(&engine.db, &host, session).await?;
        crate::supervisor::open_egress_gateway(&engine, session).await;
        turns::kick(&engine, session);
        Ok(())
    })
    .await
}

/// Forks a session `count` times from a copy of its workspace, each fork `by`'s.
pub async fn fork_session(
    state: &Engine,
    session: SessionId,
    by: &Author,
    count: i64,
) -> Result<Vec<Session>> {
    let host = state.workspaces()?;
    let (engine, by) = (state.clone(), by.clone());
    to_the_end(async move {
        let forks = sessions::workspace::fork(&engine.db, &host, session, &by, count, None).await?;
        for fork in &forks {
            crate::supervisor::open_egress_gateway(&engine, fork.id).await;
        }
        Ok(forks)
    })
    .await
}

/// Runs a verb that changes a workspace to its end even when its caller goes away (a request
/// timed out, a client hung up): on a cluster a stop keeps the layer, then deletes the pod, and
/// cutting it between the two would leave a session neither running nor stopped.
async fn to_the_end<T: Send + 'static>(
    verb: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(verb)
        .await
        .map_err(|e| Error::Internal(format!("the command stopped short: {e}")))?
}

/// A person answers an approval the agent asked for (REST, the live channel, Slack): drivers
/// and the owner may; `role` is theirs in the session.
pub async fn answer_approval(
    state: &Engine,
    session: SessionId,
    approval: tandem_protocol::ApprovalId,
    by: &Author,
    role: Role,
    req: &tandem_protocol::approval::AnswerApproval,
) -> Result<tandem_protocol::approval::Approval> {
    let answered = crate::approvals::answer(&state.db, session, approval, by, role, req).await?;
    if let (ApprovalState::Approved, ApprovalSubject::Egress { host }) =
        (answered.state, &answered.subject)
    {
        // This session's workspace resolves the name from now on (where this server runs it).
        if let Some(row) = db::sessions::workspace(&state.db, session).await?
            && row.hosted_by(&state.workspaces()?.host_id)
            && let Some(wid) = &row.workspace_id
        {
            crate::runtime::dns::grant(wid, host);
        }
    }
    Ok(answered)
}

/// Stops the running turn; false when none runs.
pub async fn stop_turn(state: &Engine, session: SessionId, by: &Author) -> Result<bool> {
    turns::stop(state, session, by).await
}

/// Makes a share link of `session` for `by` (the link and its audit entry in one transaction);
/// the link comes back with its token and URL, which are never stored.
pub async fn create_link(
    state: &Engine,
    session: SessionId,
    by: &User,
    req: &CreateLink,
) -> Result<ShareLink> {
    if req.role == Role::Owner {
        return Err(Error::Invalid(
            "a link gives `viewer` or `driver`; ownership is not shared".into(),
        ));
    }
    let ttl = req.expires_in.unwrap_or(DEFAULT_LINK_TTL_SECS);
    if !(1..=MAX_LINK_TTL_SECS).contains(&ttl) {
        return Err(Error::Invalid(format!(
            "expires_in must be 1 to {MAX_LINK_TTL_SECS} seconds"
        )));
    }
    let now = now_ms();
    let jti = uuid::Uuid::new_v4().simple().to_string();
    let claims = ShareClaims {
        sub: session.to_string(),
        jti: jti.clone(),
        role: req.role,
        guests: req.allow_guests,
        iat: now / 1000,
        exp: now / 1000 + ttl,
        kind: "share".into(),
    };
    let token = state.jwt.issue_share(&claims)?;
    let mut link = ShareLink {
        jti,
        session_id: session,
        role: req.role,
        allow_guests: req.allow_guests,
        created_at: Timestamp(now),
        expires_at: Timestamp((now / 1000 + ttl) * 1000),
        revoked_at: None,
        token: None,
        url: None,
    };
    let mut tx = state.db.begin().await?;
    db::links::insert(&mut tx, &link, by.id).await?;
    let entry = db::audit::Entry {
        actor_user_id: Some(by.id),
        actor_name: &by.name,
        action: "link.create",
        target: &session.to_string(),
        detail: serde_json::json!({ "jti": link.jti, "role": req.role, "guests": req.allow_guests, "expires_in": ttl }),
    };
    db::audit::record(&mut tx, now, entry).await?;
    tx.commit().await?;
    // The token rides in the fragment: it never reaches a server log or a Referer.
    link.url = Some(format!("{}/join#token={token}", state.public_url()));
    link.token = Some(token);
    Ok(link)
}

/// Revokes link `jti` of `session` (with its audit entry, in one transaction) and disconnects
/// everyone who came through it.
pub async fn revoke_link(state: &Engine, session: SessionId, jti: &str, by: &User) -> Result<()> {
    let now = now_ms();
    let mut tx = state.db.begin().await?;
    if !db::links::revoke(&mut tx, session, jti, now).await? {
        return Err(Error::NotFound(format!(
            "no live link {jti} in this session"
        )));
    }
    let entry = db::audit::Entry {
        actor_user_id: Some(by.id),
        actor_name: &by.name,
        action: "link.revoke",
        target: &session.to_string(),
        detail: serde_json::json!({ "jti": jti }),
    };
    db::audit::record(&mut tx, now, entry).await?;
    tx.commit().await?;
    state.hooks.link_revoked(session, jti);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_workspace_verb_runs_to_its_end_when_its_caller_goes_away() {
        let (begun, started) = tokio::sync::oneshot::channel::<()>();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let caller = tokio::spawn(to_the_end(async move {
            begun.send(()).ok();
            gate.await.ok();
            done.send(()).ok();
            Ok(())
        }));
        started.await.unwrap();
        // The request that asked for it timed out: its handler is dropped mid-verb.
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        open.send(()).unwrap();
        finished
            .await
            .expect("the verb finished although its caller went away");
    }
}
