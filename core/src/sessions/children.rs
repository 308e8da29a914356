//! Child sessions: spawned by a session's agent (or through the API) to work in parallel — on the
//! same or another repo, or as N variants of one prompt from a copy of the parent's workspace.

use tandem_protocol::limits::{MAX_CHILD_DEPTH, MAX_CHILDREN, MAX_FORKS, MAX_TREE_SESSIONS};
use tandem_protocol::*;

use crate::Engine;
use crate::db;
use crate::{Error, Result, now_ms, turns};

/// One spawn at a time per tree of child sessions (keyed by its root).
static TREE_LOCKS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<SessionId, std::sync::Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

/// Who asks for children: a person through the API, or the parent's own workspace (its agent,
/// through the gateway), which is untrusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    Person,
    Workspace,
}

/// Spawns children of `parent` and records each in the parent's timeline. A workspace's
/// children stay on the parent's repo and agent: a workspace must not reach another repo (and
/// its write token) or run a command template of its choosing.
pub async fn spawn(
    state: &Engine,
    parent: SessionId,
    author: Author,
    req: CreateChildren,
    asker: Asker,
) -> Result<Vec<Session>> {
    let n = req.variants.unwrap_or(1);
    if !(1..=MAX_FORKS).contains(&n) {
        return Err(Error::Invalid(format!("variants must be 1–{MAX_FORKS}")));
    }
    let p = super::get(&state.db, parent).await?.session;
    if matches!(p.state, SessionState::Stopped | SessionState::Failed) {
        return Err(Error::Conflict("the parent session has ended".into()));
    }
    // Bounded: an agent spawning children that spawn children must stop somewhere.
    let mut depth = 1;
    let mut up = p.parent_id;
    while let Some(id) = up {
        depth += 1;
        if depth > MAX_CHILD_DEPTH {
            return Err(Error::Invalid(format!(
                "child sessions nest at most {MAX_CHILD_DEPTH} deep"
            )));
        }
        up = super::get(&state.db, id).await?.session.parent_id;
    }
    if asker == Asker::Workspace {
        if req.repo_id.is_some_and(|r| r != p.repo_id) {
            return Err(Error::Forbidden(
                "a session's agent spawns children on its own repo only".into(),
            ));
        }
        if req.agent.as_ref().is_some_and(|a| *a != p.agent) {
            return Err(Error::Forbidden(
                "a session's agent spawns children with its own agent only".into(),
            ));
        }
    }
    // The whole tree is bounded, not only each parent's count and the depth; counting and
    // creating happen under the tree's lock (concurrent spawns would each pass the count).
    let root = {
        let mut root = p.id;
        let mut up = p.parent_id;
        while let Some(id) = up {
            root = id;
            up = super::get(&state.db, id).await?.session.parent_id;
        }
        root
    };
    let tree_lock = {
        let mut locks = TREE_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
        locks.retain(|_, l| std::sync::Arc::strong_count(l) > 1);
        locks.entry(root).or_default().clone()
    };
    let _one_spawn_per_tree = tree_lock.lock().await;
    let mut tree = 1usize;
    let mut frontier = vec![root];
    while let Some(id) = frontier.pop() {
        let kids = db::sessions::children(&state.db, id).await?;
        tree += kids.len();
        frontier.extend(kids.into_iter().map(|k| k.id));
    }
    if tree + n as usize > MAX_TREE_SESSIONS {
        return Err(Error::Invalid(format!(
            "a tree of child sessions holds at most {MAX_TREE_SESSIONS} sessions; this one has {tree}"
        )));
    }
    let existing = db::sessions::children(&state.db, parent).await?.len();
    if existing + n as usize > MAX_CHILDREN {
        return Err(Error::Invalid(format!(
            "a session spawns at most {MAX_CHILDREN} child sessions; this one has {existing}"
        )));
    }
    let agent = req.agent.clone().unwrap_or_else(|| p.agent.clone());
    let children = if req.fork {
        let host = state.workspaces()?;
        let forks = super::workspace::fork(
            &state.db,
            &host,
            parent,
            &author,
            n,
            Some(req.prompt.clone()),
        )
        .await?;
        for f in &forks {
            turns::kick(state, f.id);
        }
        forks
    } else {
        let repo_id = req.repo_id.unwrap_or(p.repo_id);
        let branch = (repo_id == p.repo_id).then(|| p.branch.clone());
        let mut out = Vec::new();
        for _ in 0..n {
            let create = CreateSession {
                repo_id,
                prompt: req.prompt.clone(),
                branch: branch.clone(),
                agent: Some(agent.clone()),
                context: None,
            };
            let child = super::create_with_parent(
                &state.db,
                author.clone(),
                create,
                &agent,
                Some(parent),
                None,
            )
            .await?
            .session;
            out.push(child);
        }
        out
    };
    for child in &children {
        let mut tx = state.db.begin().await?;
        db::events::append(
            &mut tx,
            parent,
            now_ms(),
            EventKind::ChildSpawned {
                child_id: child.id,
                title: child.title.clone(),
                author: author.clone(),
            },
        )
        .await?;
        db::audit::record(
            &mut tx,
            now_ms(),
            db::audit::Entry {
                actor_user_id: author.user_id,
                actor_name: &author.name,
                action: "session.child",
                target: &parent.to_string(),
                detail: serde_json::json!({ "child": child.id, "fork": req.fork }),
            },
        )
        .await?;
        tx.commit().await?;
    }
    Ok(children)
}

/// The children of `parent` with their first prompt's state and how many files they changed.
pub async fn list(state: &Engine, parent: SessionId) -> Result<Vec<ChildSession>> {
    super::get(&state.db, parent).await?;
    let mut out = Vec::new();
    for session in db::sessions::children(&state.db, parent).await? {
        let prompts = db::sessions::prompts(&state.db, session.id).await?;
        let files_changed = match state.workspaces() {
            Ok(host) => super::workspace::diff(&state.db, &host, session.id)
                .await
                .map(|d| d.files.len() as i64)
                .unwrap_or(0),
            Err(_) => 0,
        };
        out.push(ChildSession {
            prompt_state: prompts.first().map(|p| p.state),
            files_changed,
            session,
        });
    }
    Ok(out)
}

/// A child of `parent`, or 404.
pub async fn child_of(state: &Engine, parent: SessionId, child: SessionId) -> Result<Session> {
    // The row alone: a workspace calls this on every prompt it posts (not its queue each time).
    let s = db::sessions::get(&state.db, child)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {child}")))?;
    if s.parent_id != Some(parent) {
        return Err(Error::NotFound(format!(
            "session {child} is not a child of this session"
        )));
    }
    Ok(s)
}
