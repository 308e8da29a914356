//! Sessions and their prompts.

use sqlx::FromRow;
use tandem_protocol::*;

use crate::{Conn, Tx};
use crate::{Error, Result};

#[derive(FromRow)]
struct SessionRow {
    id: String,
    repo_id: String,
    repo_name: String,
    state: String,
    title: String,
    branch: String,
    author_kind: String,
    author_user_id: Option<String>,
    author_name: String,
    created_at: i64,
    updated_at: i64,
    last_seq: i64,
    parent_id: Option<String>,
    agent: String,
    private: i64,
}

fn author(kind: &str, user: Option<String>, name: String) -> Result<Author> {
    let kind: AuthorKind = serde_json::from_value(serde_json::Value::String(kind.to_string()))
        .map_err(|_| Error::Internal(format!("stored author kind {kind:?} unknown")))?;
    Ok(Author {
        kind,
        user_id: user.map(|u| super::uuid(&u).map(UserId)).transpose()?,
        name,
    })
}

/// A stored agent spec (JSON).
pub fn agent_spec(json: &str) -> Result<AgentSpec> {
    serde_json::from_str(json)
        .map_err(|e| Error::Internal(format!("stored agent {json:?} unreadable: {e}")))
}

/// An agent spec as stored.
pub fn agent_json(spec: &AgentSpec) -> String {
    serde_json::to_string(spec).unwrap_or_else(|_| "{\"kind\":\"none\"}".into())
}

pub(crate) fn author_kind_str(kind: AuthorKind) -> &'static str {
    match kind {
        AuthorKind::User => "user",
        AuthorKind::Guest => "guest",
        AuthorKind::Slack => "slack",
        AuthorKind::Extension => "extension",
        AuthorKind::Automation => "automation",
    }
}

impl SessionRow {
    fn into_session(self) -> Result<Session> {
        Ok(Session {
            id: SessionId(super::uuid(&self.id)?),
            repo_id: RepoId(super::uuid(&self.repo_id)?),
            repo_name: self.repo_name,
            state: SessionState::parse(&self.state).ok_or_else(|| {
                Error::Internal(format!("stored session state {:?} unknown", self.state))
            })?,
            title: self.title,
            branch: self.branch,
            author: author(&self.author_kind, self.author_user_id, self.author_name)?,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            last_seq: self.last_seq,
            parent_id: self
                .parent_id
                .map(|p| super::uuid(&p).map(SessionId))
                .transpose()?,
            agent: agent_spec(&self.agent)?,
            participants: 0,
            private: self.private != 0,
        })
    }
}

const SELECT: &str =
    "SELECT s.id, s.repo_id, r.name AS repo_name, s.state, s.title, s.branch, s.author_kind,
    s.author_user_id, s.author_name, s.created_at, s.updated_at, s.last_seq, s.parent_id, s.agent,
    s.private FROM sessions s JOIN repos r ON r.id = s.repo_id";

/// Inserts a session row (with `last_seq = 0`).
pub async fn insert(conn: &mut Tx, s: &Session) -> Result<()> {
    // A child or fork belongs to its parent's tree (and so shares its root's model budget),
    // found in the same statement.
    sqlx::query(&format!(
        "{} INSERT INTO sessions (id, repo_id, state, title, branch, author_kind, author_user_id, author_name,
         created_at, updated_at, last_seq, parent_id, agent, private, state_since, root_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, $11, $12, $13, $9, {})",
        crate::trees::up("$11", "$14"),
        crate::trees::ROOT
    ))
    .bind(s.id.to_string())
    .bind(s.repo_id.to_string())
    .bind(s.state.as_str())
    .bind(&s.title)
    .bind(&s.branch)
    .bind(author_kind_str(s.author.kind))
    .bind(s.author.user_id.map(|u| u.to_string()))
    .bind(&s.author.name)
    .bind(s.created_at.0)
    .bind(s.updated_at.0)
    .bind(s.parent_id.map(|p| p.to_string()))
    .bind(agent_json(&s.agent))
    .bind(i64::from(s.private))
    .bind(crate::trees::MAX_ROOT_WALK)
    .execute(&mut *conn.tx)
    .await?;
    Ok(())
}

/// Appends a prompt at the end of the session's queue.
pub async fn insert_prompt(conn: &mut Tx, p: &Prompt) -> Result<()> {
    let mode = match p.mode {
        PromptMode::Queue => "queue",
        PromptMode::Steer => "steer",
    };
    sqlx::query(
        "INSERT INTO prompts (id, session_id, position, author_kind, author_user_id, author_name, text, mode, state, created_at, agent, context, images)
         VALUES ($1, $2, (SELECT COALESCE(MAX(position), 0) + 1 FROM prompts WHERE session_id = $2), $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(p.id.to_string())
    .bind(p.session_id.to_string())
    .bind(author_kind_str(p.author.kind))
    .bind(p.author.user_id.map(|u| u.to_string()))
    .bind(&p.author.name)
    .bind(&p.text)
    .bind(mode)
    .bind(p.state.as_str())
    .bind(p.created_at.0)
    .bind(p.agent.as_ref().map(agent_json))
    .bind(
        p.context
            .as_ref()
                        .map(|c| serde_json::to_string(c).expect("a context serializes")),
    )
    .bind(images_json(&p.images))
    .execute(&mut *conn.tx)
    .await?;
    sqlx::query("UPDATE sessions SET prompts_count = prompts_count + 1 WHERE id = $1")
        .bind(p.session_id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    Ok(())
}

fn images_json(images: &[tandem_protocol::PromptImage]) -> Option<String> {
    (!images.is_empty()).then(|| serde_json::to_string(images).expect("images serialize"))
}

/// A session by id.
pub async fn get(mut ex: impl Conn, id: SessionId) -> Result<Option<Session>> {
    let row: Option<SessionRow> = sqlx::query_as(&format!("{SELECT} WHERE s.id = $1"))
        .bind(id.to_string())
        .fetch_optional(ex.ex())
        .await?;
    row.map(SessionRow::into_session).transpose()
}

/// Gives session `id` a budget of `n` model requests (below the server's own limit), shared by
/// every session of its tree when it is a root (an automation's run); a child's is never read.
pub async fn set_model_budget(mut ex: impl Conn, id: SessionId, n: i64) -> Result<()> {
    sqlx::query("UPDATE sessions SET model_budget = $1 WHERE id = $2")
        .bind(n)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// How many model requests session `id` has made.
pub async fn model_requests(mut ex: impl Conn, id: SessionId) -> Result<i64> {
    let n: Option<(i64,)> = sqlx::query_as("SELECT model_requests FROM sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(ex.ex())
        .await?;
    Ok(n.map_or(0, |(n,)| n))
}

/// Sessions, newest first, optionally filtered.
pub async fn list(
    mut ex: impl Conn,
    repo: Option<RepoId>,
    state: Option<SessionState>,
    seen_by: Option<&Scope>,
    limit: i64,
) -> Result<Vec<Session>> {
    // What a person may see: sessions of the repos they may read that are not private, or
    // that they own or joined.
    let scope = match seen_by {
        None => String::new(),
        Some(sc) if sc.repos.is_empty() => " AND 1 = 0".into(),
        Some(sc) => format!(
            " AND s.repo_id IN ({}) AND (s.private = 0 OR s.author_user_id = $4
              OR EXISTS (SELECT 1 FROM session_members m
                LEFT JOIN share_links l ON l.jti = m.via_link
                LEFT JOIN users u ON u.id = l.created_by
                WHERE m.session_id = s.id AND m.user_id = $4 AND (m.via_link IS NULL
                  OR (l.revoked_at IS NULL AND l.expires_at > $5 AND u.deactivated_at IS NULL))))",
            (0..sc.repos.len())
                .map(|i| format!("${}", i + 6))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let sql = format!(
        "{SELECT} WHERE ($1 IS NULL OR s.repo_id = $1) AND ($2 IS NULL OR s.state = $2){scope}
         ORDER BY s.created_at DESC, s.id LIMIT $3"
    );
    let mut q = sqlx::query_as::<_, SessionRow>(&sql)
        .bind(repo.map(|r| r.to_string()))
        .bind(state.map(|s| s.as_str()))
        .bind(limit);
    if let Some(sc) = seen_by.filter(|sc| !sc.repos.is_empty()) {
        q = q.bind(sc.user.to_string()).bind(sc.now);
        for r in &sc.repos {
            q = q.bind(r.to_string());
        }
    }
    let rows = q.fetch_all(ex.ex()).await?;
    rows.into_iter().map(SessionRow::into_session).collect()
}

/// Whom a list is for: the person and the repos they may read.
pub struct Scope {
    pub user: UserId,
    pub repos: Vec<RepoId>,
    /// Now (ms): links past their expiry grant nothing.
    pub now: i64,
}

/// Makes a session private (its owner and the people they share it with) or not; false if
/// there is no such session.
pub async fn set_private(mut ex: impl Conn, id: SessionId, private: bool) -> Result<bool> {
    let done = sqlx::query("UPDATE sessions SET private = $1 WHERE id = $2")
        .bind(i64::from(private))
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

#[derive(FromRow)]
pub(crate) struct PromptRow {
    id: String,
    session_id: String,
    author_kind: String,
    author_user_id: Option<String>,
    author_name: String,
    text: String,
    mode: String,
    state: String,
    created_at: i64,
    agent: Option<String>,
    attempts: i64,
    context: Option<String>,
    images: Option<String>,
}

/// The prompt columns, for `SELECT {PROMPT_COLUMNS} FROM prompts`.
pub(crate) const PROMPT_COLUMNS: &str = "id, session_id, author_kind, author_user_id, author_name, text, mode, state, created_at, agent, attempts, context, images";

impl PromptRow {
    pub(crate) fn into_prompt(self) -> Result<Prompt> {
        let mode = serde_json::from_value(serde_json::Value::String(self.mode.clone()))
            .map_err(|_| Error::Internal(format!("stored prompt mode {:?} unknown", self.mode)))?;
        let state = serde_json::from_value(serde_json::Value::String(self.state.clone())).map_err(
            |_| Error::Internal(format!("stored prompt state {:?} unknown", self.state)),
        )?;
        Ok(Prompt {
            id: PromptId(super::uuid(&self.id)?),
            session_id: SessionId(super::uuid(&self.session_id)?),
            author: author(&self.author_kind, self.author_user_id, self.author_name)?,
            text: self.text,
            mode,
            state,
            created_at: Timestamp(self.created_at),
            agent: self.agent.as_deref().map(agent_spec).transpose()?,
            attempts: self.attempts,
            context: self
                .context
                .as_deref()
                .map(|c| {
                    serde_json::from_str(c)
                        .map_err(|e| Error::Internal(format!("stored prompt context: {e}")))
                })
                .transpose()?,
            images: match self.images.as_deref() {
                None => Vec::new(),
                Some(j) => serde_json::from_str(j)
                    .map_err(|e| Error::Internal(format!("stored prompt images: {e}")))?,
            },
        })
    }
}

/// A session's prompts in queue order.
pub async fn prompts(mut ex: impl Conn, session: SessionId) -> Result<Vec<Prompt>> {
    let rows: Vec<PromptRow> = sqlx::query_as(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE session_id = $1 ORDER BY position"
    ))
    .bind(session.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(PromptRow::into_prompt).collect()
}

/// Moves a session to `to` and appends the `state_changed` event, in the caller's transaction.
/// Returns the previous state; `None` if the session does not exist.
pub async fn transition(
    conn: &mut Tx,
    id: SessionId,
    to: SessionState,
    reason: Option<String>,
    now: i64,
) -> Result<Option<SessionState>> {
    // A write first: SQLite takes its write lock and PostgreSQL the row lock before the read, so
    // two transitions of one session never interleave.
    let touched = sqlx::query("UPDATE sessions SET updated_at = $1 WHERE id = $2")
        .bind(now)
        .bind(id.to_string())
        .execute(&mut *conn.tx)
        .await?;
    if touched.rows_affected() == 0 {
        return Ok(None);
    }
    let (from,): (String,) = sqlx::query_as("SELECT state FROM sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_one(&mut *conn.tx)
        .await?;
    // The time spent in the state it leaves is added to its sandbox time.
    sqlx::query(
        "UPDATE sessions SET state = $1,
            running_ms = running_ms + CASE WHEN state IN ('starting', 'ready', 'running', 'idle')
                AND state_since IS NOT NULL AND state_since < $3 THEN $3 - state_since ELSE 0 END,
            suspended_ms = suspended_ms + CASE WHEN state = 'suspended'
                AND state_since IS NOT NULL AND state_since < $3 THEN $3 - state_since ELSE 0 END,
            state_since = $3
         WHERE id = $2",
    )
    .bind(to.as_str())
    .bind(id.to_string())
    .bind(now)
    .execute(&mut *conn.tx)
    .await?;
    let from = SessionState::parse(&from)
        .ok_or_else(|| Error::Internal(format!("stored state {from:?} unknown")))?;
    super::events::append(conn, id, now, EventKind::StateChanged { from, to, reason }).await?;
    Ok(Some(from))
}

/// Moves a session to `to` only if it is in one of `from` (appending `state_changed`), in the
/// caller's transaction. Returns the state it was in when it moved.
pub async fn transition_from(
    conn: &mut Tx,
    id: SessionId,
    from: &[SessionState],
    to: SessionState,
    reason: Option<String>,
    now: i64,
) -> Result<Option<SessionState>> {
    let list: Vec<String> = from.iter().map(|s| format!("'{}'", s.as_str())).collect();
    // One statement locks the row (SQLite: the database) and reads its state.
    let row: Option<(String,)> = sqlx::query_as(&format!(
        "UPDATE sessions SET updated_at = $1 WHERE id = $2 AND state IN ({}) RETURNING state",
        list.join(", ")
    ))
    .bind(now)
    .bind(id.to_string())
    .fetch_optional(&mut *conn.tx)
    .await?;
    let Some((was,)) = row else { return Ok(None) };
    let was = SessionState::parse(&was)
        .ok_or_else(|| Error::Internal(format!("stored state {was:?} unknown")))?;
    if was == to {
        return Ok(Some(was));
    }
    transition(conn, id, to, reason, now).await
}

/// The live session whose workspace is `wid`.
pub async fn by_workspace(mut ex: impl Conn, wid: &str) -> Result<Option<SessionId>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT id FROM sessions WHERE workspace_id = $1 AND state IN ('ready', 'running', 'idle')",
    )
    .bind(wid)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(id,)| super::uuid(&id).map(SessionId)).transpose()
}

/// A session's agent.
pub async fn agent(mut ex: impl Conn, id: SessionId) -> Result<Option<AgentSpec>> {
    let row: Option<(String,)> = sqlx::query_as("SELECT agent FROM sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(ex.ex())
        .await?;
    row.map(|(a,)| agent_spec(&a)).transpose()
}

/// Sessions spawned from `parent`, oldest first.
pub async fn children(mut ex: impl Conn, parent: SessionId) -> Result<Vec<Session>> {
    let rows: Vec<SessionRow> = sqlx::query_as(&format!(
        "{SELECT} WHERE s.parent_id = $1 ORDER BY s.created_at, s.id"
    ))
    .bind(parent.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(SessionRow::into_session).collect()
}

/// Where a session's workspace is.
#[derive(Clone, Debug, FromRow)]
pub struct WorkspaceRow {
    pub id: String,
    pub state: String,
    pub workspace_id: Option<String>,
    pub base_commit: Option<String>,
    pub workspace_pid: Option<i64>,
    pub snapshot_id: Option<String>,
    /// The server whose host runs the workspace (its data dir's id); none before one claimed it.
    pub workspace_host: Option<String>,
}

impl WorkspaceRow {
    /// Whether the server `host` looks after this session's workspace (a row from before
    /// hosts were recorded counts as everyone's).
    pub fn hosted_by(&self, host: &str) -> bool {
        self.workspace_host.as_deref().is_none_or(|h| h == host)
    }
}

/// Records the workspace a session runs in, on the host of server `host`.
pub async fn set_workspace(
    mut ex: impl Conn,
    id: SessionId,
    host: &str,
    workspace_id: Option<&str>,
    snapshot: Option<SnapshotId>,
    base_commit: Option<&str>,
    pid: Option<i64>,
) -> Result<()> {
    sqlx::query("UPDATE sessions SET workspace_id = $1, snapshot_id = $2, base_commit = $3, workspace_pid = $4, workspace_host = $5 WHERE id = $6")
        .bind(workspace_id)
        .bind(snapshot.map(|s| s.to_string()))
        .bind(base_commit)
        .bind(pid)
        .bind(host)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Records that server `host` is starting the session's workspace (before it has one).
pub async fn set_host(mut ex: impl Conn, id: SessionId, host: &str) -> Result<()> {
    sqlx::query("UPDATE sessions SET workspace_host = $1 WHERE id = $2")
        .bind(host)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Moves the commit a session's changes are measured from (after a rebase onto a newer base).
pub async fn set_base_commit(mut ex: impl Conn, id: SessionId, base_commit: &str) -> Result<()> {
    sqlx::query("UPDATE sessions SET base_commit = $1 WHERE id = $2")
        .bind(base_commit)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// A session's workspace record.
pub async fn workspace(mut ex: impl Conn, id: SessionId) -> Result<Option<WorkspaceRow>> {
    Ok(sqlx::query_as(
        "SELECT id, state, workspace_id, base_commit, workspace_pid, snapshot_id, workspace_host FROM sessions WHERE id = $1",
    )
    .bind(id.to_string())
    .fetch_optional(ex.ex())
    .await?)
}

/// Sessions in `states`, oldest first (for recovery and supervision).
pub async fn in_states(mut ex: impl Conn, states: &[SessionState]) -> Result<Vec<WorkspaceRow>> {
    let list: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
    Ok(sqlx::query_as(&format!(
        "SELECT id, state, workspace_id, base_commit, workspace_pid, snapshot_id, workspace_host FROM sessions
         WHERE state IN ({}) ORDER BY created_at",
        list.join(", ")
    ))
    .fetch_all(ex.ex())
    .await?)
}

/// Whether any session, ended or not, records workspace `wid` as its own.
pub async fn named(mut ex: impl Conn, wid: &str) -> Result<bool> {
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT 1 FROM sessions WHERE workspace_id = $1 LIMIT 1")
            .bind(wid)
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.is_some())
}

/// Whether workspace `wid` is left over from sessions that ended on server `host`'s host: some
/// session names it — as the workspace recorded for it, or (`session_prefix`, the start of a
/// session id an `s-` workspace id is made from) as the one its boot started before recording
/// it — and every such session has stopped or failed there. A workspace no session here names
/// (another installation's, another server's warm pool) is not.
pub async fn left_over(
    mut ex: impl Conn,
    wid: &str,
    session_prefix: Option<&str>,
    host: &str,
) -> Result<bool> {
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT state, workspace_host FROM sessions WHERE workspace_id = $1 OR id LIKE $2",
    )
    .bind(wid)
    // An empty pattern matches no session id.
    .bind(session_prefix.map_or(String::new(), |p| format!("{p}%")))
    .fetch_all(ex.ex())
    .await?;
    let ended = [
        SessionState::Stopped.as_str(),
        SessionState::Failed.as_str(),
    ];
    Ok(!rows.is_empty()
        && rows
            .iter()
            .all(|(state, h)| ended.contains(&state.as_str()) && h.as_deref() == Some(host)))
}

/// How many sessions are in each state (states with none are left out).
pub async fn count_by_state(mut ex: impl Conn) -> Result<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT state, CAST(COUNT(*) AS BIGINT) FROM sessions GROUP BY state")
            .fetch_all(ex.ex())
            .await?,
    )
}
