//! Session logic, independent of transport: creating sessions, reading them and their event log.
//! Knows the store, never HTTP or WebSockets.

use tandem_protocol::limits::{MAX_EVENTS_PAGE, MAX_LIST, MAX_PROMPT_BYTES};
use tandem_protocol::*;

use crate::db::{self, Db};

pub mod workspace;
use crate::{Error, Result, now_ms};

pub mod access;
pub mod boots;
pub mod bounds;
pub mod budget;
pub mod children;
pub mod pool;
pub mod prompts;

/// Accepts a new session: stored `queued` with its first prompt (if any) and the opening events,
/// all in one transaction. `default_agent` works on it unless the request names one.
pub async fn create(
    db: &Db,
    author: Author,
    req: CreateSession,
    default_agent: &AgentSpec,
) -> Result<SessionDetail> {
    create_with_parent(db, author, req, default_agent, None, None).await
}

/// [`create`], for a session that comes from `parent` (a fork or a child); `title` when it has
/// no prompt to take one from.
pub async fn create_with_parent(
    db: &Db,
    author: Author,
    req: CreateSession,
    default_agent: &AgentSpec,
    parent: Option<SessionId>,
    title: Option<String>,
) -> Result<SessionDetail> {
    let opening = Opening {
        parent,
        title,
        ..Opening::default()
    };
    create_full(db, author, req, default_agent, opening).await
}

/// What a new session starts with besides its request (each stored in the same transaction).
#[derive(Default)]
pub struct Opening<'a> {
    /// The session it comes from (a fork or a child).
    pub parent: Option<SessionId>,
    /// Its title when it has no prompt to take one from.
    pub title: Option<String>,
    /// The first prompt's images.
    pub images: Option<&'a crate::prompt_images::Checked>,
    /// A tighter model budget for its tree than the server's (an automation's).
    pub model_budget: Option<u32>,
    /// Its tree's own limits in model tokens and micro-dollars (an automation's run).
    pub token_budget: Option<i64>,
    pub cost_budget_micros: Option<i64>,
}

/// [`create`] with an [`Opening`].
pub async fn create_opening(
    db: &Db,
    author: Author,
    req: CreateSession,
    default_agent: &AgentSpec,
    opening: Opening<'_>,
) -> Result<SessionDetail> {
    create_full(db, author, req, default_agent, opening).await
}

async fn create_full(
    db: &Db,
    author: Author,
    req: CreateSession,
    default_agent: &AgentSpec,
    opening: Opening<'_>,
) -> Result<SessionDetail> {
    let Opening {
        parent,
        title,
        images,
        model_budget,
        token_budget,
        cost_budget_micros,
    } = opening;
    let prompt = req.prompt.trim().to_string();
    let agent = req.agent.clone().unwrap_or_else(|| default_agent.clone());
    prompts::validate_agent(&agent)?;
    if prompt.is_empty() && agent != AgentSpec::None && title.is_none() {
        return Err(Error::Invalid(
            "prompt is empty (only a session with agent `none` may start without one)".into(),
        ));
    }
    if !prompt.is_empty() && agent == AgentSpec::None {
        return Err(Error::Invalid(
            "a session with agent `none` takes no prompt".into(),
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(Error::Invalid(format!(
            "prompt is longer than {MAX_PROMPT_BYTES} bytes"
        )));
    }
    let repo = db::repos::get(db, req.repo_id)
        .await?
        .ok_or_else(|| Error::Invalid(format!("unknown repo {}", req.repo_id)))?;
    let branch = match req
        .branch
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
    {
        Some(b) => {
            crate::repos::validate_branch(&b)?;
            b
        }
        None => repo.default_branch.clone(),
    };
    // A private session's children and forks are as private as it is.
    let private = match parent {
        Some(p) => db::sessions::get(db, p).await?.is_some_and(|s| s.private),
        None => false,
    };
    let now = now_ms();
    let id = SessionId(uuid::Uuid::new_v4());
    let page = match req.context {
        Some(_) if prompt.is_empty() => {
            return Err(Error::Invalid(
                "a page's context comes with a prompt; write what to do about it".into(),
            ));
        }
        Some(c) => Some(crate::page_context::check(id, c, now)?),
        None => None,
    };
    let session = Session {
        id,
        repo_id: repo.id,
        repo_name: repo.name.clone(),
        state: SessionState::Queued,
        title: title.unwrap_or_else(|| {
            if prompt.is_empty() {
                format!("{} (shared workspace)", repo.name)
            } else {
                title_of(&prompt)
            }
        }),
        branch: branch.clone(),
        author: author.clone(),
        created_at: Timestamp(now),
        updated_at: Timestamp(now),
        last_seq: 0,
        parent_id: parent,
        agent,
        participants: 0,
        private,
    };
    let first = (!prompt.is_empty()).then(|| Prompt {
        id: PromptId(uuid::Uuid::new_v4()),
        session_id: session.id,
        author: author.clone(),
        text: prompt,
        mode: PromptMode::Queue,
        state: PromptState::Queued,
        created_at: Timestamp(now),
        agent: None,
        attempts: 0,
        context: page.as_ref().map(|p| p.context.clone()),
        images: images.map(|c| c.images.clone()).unwrap_or_default(),
    });
    let mut tx = db.begin().await?;
    db::sessions::insert(&mut tx, &session).await?;
    if let Some(n) = model_budget {
        db::sessions::set_model_budget(&mut tx, session.id, i64::from(n)).await?;
    }
    if token_budget.is_some() || cost_budget_micros.is_some() {
        db::spend::set_tree_budgets(&mut tx, session.id, token_budget, cost_budget_micros).await?;
    }
    let mut last = db::events::append(
        &mut tx,
        session.id,
        now,
        EventKind::SessionCreated {
            repo_id: repo.id,
            branch,
            author: author.clone(),
        },
    )
    .await?;
    if let Some(page) = &page {
        crate::page_context::store(&mut tx, session.id, page).await?;
    }
    if let Some(first) = &first {
        db::sessions::insert_prompt(&mut tx, first).await?;
        if let Some(images) = images {
            crate::prompt_images::store(&mut tx, session.id, first.id, images).await?;
        }
        last = db::events::append(
            &mut tx,
            session.id,
            now,
            EventKind::PromptQueued {
                prompt_id: first.id,
                author: author.clone(),
                mode: first.mode,
                text: first.text.clone(),
                context: first.context.clone().map(Box::new),
            },
        )
        .await?;
    }
    db::audit::record(
        &mut tx,
        now,
        db::audit::Entry {
            actor_user_id: author.user_id,
            actor_name: &author.name,
            action: "session.create",
            target: &session.id.to_string(),
            detail: serde_json::json!({ "repo": repo.name }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(SessionDetail {
        session: Session {
            last_seq: last.seq,
            ..session
        },
        prompts: first.into_iter().collect(),
        model_requests: 0,
        model_request_limit: None,
    })
}

/// One session with its prompts.
pub async fn get(db: &Db, id: SessionId) -> Result<SessionDetail> {
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let prompts = db::sessions::prompts(db, id).await?;
    // The budget's use: what the session's whole tree made (children and forks share it).
    let model_requests = db::trees::tree_budget(db, id).await?.map_or(0, |t| t.used);
    Ok(SessionDetail {
        session,
        prompts,
        model_requests,
        model_request_limit: None,
    })
}

/// Sessions, newest first; only those `scope` sees, when given.
pub async fn list(
    db: &Db,
    filter: SessionFilter,
    scope: Option<&db::sessions::Scope>,
) -> Result<Vec<Session>> {
    let limit = clamp_limit(filter.limit, MAX_LIST)?;
    Ok(db::sessions::list(db, filter.repo_id, filter.state, scope, limit).await?)
}

/// An events query's `(after, limit)`, or why it is malformed (checked before anything is read).
pub fn events_query(q: &EventsQuery) -> Result<(i64, i64)> {
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(Error::BadRequest("after must be ≥ 0".into()));
    }
    Ok((after, clamp_limit(q.limit, MAX_EVENTS_PAGE)?))
}

/// Events after a sequence number.
pub async fn events(db: &Db, id: SessionId, q: EventsQuery) -> Result<EventsPage> {
    let (after, limit) = events_query(&q)?;
    // Read the session first: events appended after this read are simply in the next page.
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let events = db::events::list_after(db, id, after, limit).await?;
    let last_seq = events
        .last()
        .map_or(session.last_seq, |e| e.seq.max(session.last_seq));
    Ok(EventsPage { events, last_seq })
}

fn clamp_limit(limit: Option<i64>, max: i64) -> Result<i64> {
    match limit {
        None => Ok(max),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(Error::BadRequest(format!(
            "limit must be between 1 and {max}, got {n}"
        ))),
    }
}

/// The first line of a prompt, shortened to 80 characters.
pub fn title_of(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= 80 {
        line.to_string()
    } else {
        format!("{}…", line.chars().take(79).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn title_is_first_line_shortened() {
        assert_eq!(
            super::title_of("Fix the login bug\nmore"),
            "Fix the login bug"
        );
        let long = "x".repeat(200);
        assert_eq!(super::title_of(&long).chars().count(), 80);
    }
}
