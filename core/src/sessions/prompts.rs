//! The prompt queue as people use it: submit (queue or steer), edit or withdraw one's own queued
//! prompt. Running turns is `crate::turns`' job; this only stores and records.

use tandem_protocol::limits::{
    MAX_PROMPT_BYTES, MAX_QUEUED_PROMPTS_PER_SESSION, MAX_QUEUED_PROMPTS_PER_TREE,
};
use tandem_protocol::*;

use super::bounds::{self, Bound};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

/// Longest command template of a `command` agent.
pub const MAX_TEMPLATE_BYTES: usize = 4096;

/// Refuses agent specs that cannot work.
pub fn validate_agent(agent: &AgentSpec) -> Result<()> {
    if let AgentSpec::Command { template } = agent {
        if !template.contains("{prompt}") {
            return Err(Error::Invalid(
                "a command agent's template must contain {prompt}".into(),
            ));
        }
        if template.len() > MAX_TEMPLATE_BYTES {
            return Err(Error::Invalid(format!(
                "a command template is at most {MAX_TEMPLATE_BYTES} bytes"
            )));
        }
    }
    Ok(())
}

fn validate_text(text: &str) -> Result<String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::Invalid("prompt is empty".into()));
    }
    if text.len() > MAX_PROMPT_BYTES {
        return Err(Error::Invalid(format!(
            "prompt is longer than {MAX_PROMPT_BYTES} bytes"
        )));
    }
    Ok(text.to_string())
}

/// Queues a prompt from `author`. Refused for sessions without an agent and for ended sessions.
pub async fn submit(db: &Db, id: SessionId, author: Author, req: CreatePrompt) -> Result<Prompt> {
    submit_with_images(db, id, author, req, None).await
}

/// [`submit`], the prompt with `images` (stored in the same transaction, so its turn never
/// starts without them).
pub async fn submit_with_images(
    db: &Db,
    id: SessionId,
    author: Author,
    req: CreatePrompt,
    images: Option<&crate::prompt_images::Checked>,
) -> Result<Prompt> {
    store(db, id, author, req, images, None).await
}

/// [`submit`] for a prompt the workspace of session `asker` (its agent, through the gateway)
/// puts in the queue of its child `id`. Refused past the queue's bounds (per session and per
/// tree) and past the child's room for events, each said once in `asker`'s timeline.
pub async fn submit_from_workspace(
    db: &Db,
    asker: SessionId,
    id: SessionId,
    author: Author,
    req: CreatePrompt,
) -> Result<Prompt> {
    // A flood is mostly refusals: those are answered from the counts, without the write lock.
    let room = super::bounds::room(db, id).await?;
    if !room.fits_events(1, req.text.len() as i64 + 1024) {
        return Err(bounds::refuse(db, asker, Bound::Events, room.events_refusal()).await);
    }
    let (own, tree) = db::usage::queued(db, id).await?;
    if let Some(full) = queue_full(own, tree) {
        return Err(bounds::refuse(db, asker, Bound::Queue, full).await);
    }
    store(db, id, author, req, None, Some((asker, room.root))).await
}

/// Why a workspace may not queue another prompt where `own` wait in the child's queue and `tree`
/// in its tree's, if it may not.
fn queue_full(own: i64, tree: i64) -> Option<String> {
    if own >= MAX_QUEUED_PROMPTS_PER_SESSION {
        return Some(format!(
            "this child session has {own} prompts waiting, the most a workspace may queue in one session ({MAX_QUEUED_PROMPTS_PER_SESSION}); wait until some have run"
        ));
    }
    if tree >= MAX_QUEUED_PROMPTS_PER_TREE {
        return Some(format!(
            "this session tree has {tree} prompts waiting, the most a workspace may queue in one tree ({MAX_QUEUED_PROMPTS_PER_TREE}); wait until some have run"
        ));
    }
    None
}

/// Stores a prompt (with its images) and its `prompt_queued` event. `bounded`: the session whose
/// workspace asks and the tree's root; the queue is counted again under the root's lock, so
/// concurrent requests never pass the bound together.
async fn store(
    db: &Db,
    id: SessionId,
    author: Author,
    req: CreatePrompt,
    images: Option<&crate::prompt_images::Checked>,
    bounded: Option<(SessionId, SessionId)>,
) -> Result<Prompt> {
    let text = validate_text(&req.text)?;
    // The row alone, not its prompts: the cost of a prompt does not grow with the queue.
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    if matches!(session.state, SessionState::Stopped | SessionState::Failed) {
        return Err(Error::Conflict(format!(
            "the session has ended ({}); start a new one",
            session.state.as_str()
        )));
    }
    let agent = req.agent.clone().unwrap_or_else(|| session.agent.clone());
    validate_agent(&agent)?;
    if agent == AgentSpec::None {
        return Err(Error::Conflict(
            "this session has no agent (agent `none`): it is a shared workspace for people".into(),
        ));
    }
    let now = now_ms();
    let page = req
        .context
        .map(|c| crate::page_context::check(id, c, now))
        .transpose()?;
    let prompt = Prompt {
        id: PromptId(uuid::Uuid::new_v4()),
        session_id: id,
        author: author.clone(),
        text,
        mode: req.mode,
        state: PromptState::Queued,
        created_at: Timestamp(now),
        agent: req.agent,
        attempts: 0,
        context: page.as_ref().map(|p| p.context.clone()),
        images: images.map(|c| c.images.clone()).unwrap_or_default(),
    };
    let mut tx = db.begin().await?;
    if let Some((asker, root)) = bounded {
        db::usage::lock(&mut tx, root).await?;
        let (own, tree) = db::usage::queued(&mut tx, id).await?;
        if let Some(full) = queue_full(own, tree) {
            drop(tx);
            return Err(bounds::refuse(db, asker, Bound::Queue, full).await);
        }
    }
    if let Some(page) = &page {
        crate::page_context::store(&mut tx, id, page).await?;
    }
    db::sessions::insert_prompt(&mut tx, &prompt).await?;
    if let Some(images) = images {
        crate::prompt_images::store(&mut tx, id, prompt.id, images).await?;
    }
    db::events::append(
        &mut tx,
        id,
        now,
        EventKind::PromptQueued {
            prompt_id: prompt.id,
            author,
            mode: prompt.mode,
            text: prompt.text.clone(),
            context: prompt.context.clone().map(Box::new),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(prompt)
}

/// The prompt `prompt` of session `id`, checked to be `author`'s and still queued.
async fn own_queued(db: &Db, id: SessionId, prompt: PromptId, author: &Author) -> Result<Prompt> {
    let p = db::prompts::get(db, prompt)
        .await?
        .filter(|p| p.session_id == id)
        .ok_or_else(|| Error::NotFound(format!("no prompt {prompt} in this session")))?;
    if p.author.user_id.is_none() || p.author.user_id != author.user_id {
        return Err(Error::Forbidden(
            "only a prompt's author may change it".into(),
        ));
    }
    if p.state != PromptState::Queued {
        return Err(Error::Conflict(format!(
            "the prompt is {} and can no longer change",
            p.state.as_str()
        )));
    }
    Ok(p)
}

/// Changes the text of one's own queued prompt.
pub async fn edit(
    db: &Db,
    id: SessionId,
    prompt: PromptId,
    author: &Author,
    text: &str,
) -> Result<Prompt> {
    let text = validate_text(text)?;
    own_queued(db, id, prompt, author).await?;
    let mut tx = db.begin().await?;
    if !db::prompts::edit(&mut tx, prompt, &text).await? {
        return Err(Error::Conflict("the prompt started meanwhile".into()));
    }
    db::events::append(
        &mut tx,
        id,
        now_ms(),
        EventKind::PromptEdited {
            prompt_id: prompt,
            author: author.clone(),
            text,
        },
    )
    .await?;
    tx.commit().await?;
    db::prompts::get(db, prompt)
        .await?
        .ok_or_else(|| Error::NotFound("the prompt vanished".into()))
}

/// Takes back one's own queued prompt.
pub async fn withdraw(db: &Db, id: SessionId, prompt: PromptId, author: &Author) -> Result<()> {
    own_queued(db, id, prompt, author).await?;
    let mut tx = db.begin().await?;
    if !db::prompts::set_state(&mut tx, prompt, PromptState::Queued, PromptState::Withdrawn).await?
    {
        return Err(Error::Conflict("the prompt started meanwhile".into()));
    }
    db::events::append(
        &mut tx,
        id,
        now_ms(),
        EventKind::PromptWithdrawn {
            prompt_id: prompt,
            author: author.clone(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
