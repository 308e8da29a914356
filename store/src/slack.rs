//! Slack: deliveries already handled, Slack users' Tandem people and their one-time links,
//! channels' default repos, admins' keyword rules, the threads that are sessions'
//! conversations, and tasks waiting for a repo choice.

use sqlx::FromRow;
use tandem_protocol::{RepoId, SessionId, UserId};

use crate::{Conn, Result};

/// Records `key` (an event id, or a message's channel and ts); false when it was seen before.
pub async fn first_sight(mut ex: impl Conn, key: &str, now: i64) -> Result<bool> {
    let r = sqlx::query(
        "INSERT INTO slack_seen (key, at) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
    )
    .bind(key)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(r.rows_affected() > 0)
}

/// Forgets deliveries seen before `before` (Slack retries for minutes, not days).
pub async fn forget_seen(mut ex: impl Conn, before: i64) -> Result<()> {
    sqlx::query("DELETE FROM slack_seen WHERE at < $1")
        .bind(before)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Forgets link codes expired before `now` and repo questions asked before `asked_before`.
pub async fn forget_stale(mut ex: impl Conn, now: i64, asked_before: i64) -> Result<()> {
    sqlx::query("DELETE FROM slack_link_codes WHERE expires_at < $1")
        .bind(now)
        .execute(ex.ex())
        .await?;
    sqlx::query("DELETE FROM slack_pending WHERE created_at < $1")
        .bind(asked_before)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// The person Slack user `slack_user` of `team` is linked to.
pub async fn person(mut ex: impl Conn, team: &str, slack_user: &str) -> Result<Option<UserId>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT user_id FROM slack_people WHERE team_id = $1 AND slack_user_id = $2",
    )
    .bind(team)
    .bind(slack_user)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(id,)| Ok(UserId(super::uuid(&id)?))).transpose()
}

/// Links `slack_user` of `team` to `user`; false if they were linked already (left as it was).
pub async fn link(
    mut ex: impl Conn,
    team: &str,
    slack_user: &str,
    user: UserId,
    now: i64,
) -> Result<bool> {
    // A link is never replaced: a Slack user linked already stays linked to whom they were.
    let done = sqlx::query(
        "INSERT INTO slack_people (team_id, slack_user_id, user_id, linked_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (team_id, slack_user_id) DO NOTHING",
    )
    .bind(team)
    .bind(slack_user)
    .bind(user.to_string())
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The Slack user a one-time link is for, as Slack's API told (never a name its owner sets).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct LinkFor {
    pub team_id: String,
    pub slack_user_id: String,
    /// Their handle (`users.info`'s `name`).
    pub slack_name: String,
    /// Their email, when Slack vouches for it (a full member of the workspace).
    pub slack_email: Option<String>,
    /// Their workspace as Slack names it (`auth.test`), or its id.
    pub team_label: String,
}

/// Stores a one-time link code (its hash) for `who`.
pub async fn insert_link_code(
    mut ex: impl Conn,
    hash: &str,
    who: &LinkFor,
    expires_at: i64,
) -> Result<()> {
    sqlx::query("INSERT INTO slack_link_codes (code_hash, team_id, slack_user_id, slack_name, slack_email, team_label, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(hash)
        .bind(&who.team_id)
        .bind(&who.slack_user_id)
        .bind(&who.slack_name)
        .bind(&who.slack_email)
        .bind(&who.team_label)
        .bind(expires_at)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// The Slack user the unexpired link code hashing to `hash` is for.
pub async fn link_code(mut ex: impl Conn, hash: &str, now: i64) -> Result<Option<LinkFor>> {
    Ok(sqlx::query_as(
        "SELECT team_id, slack_user_id, slack_name, slack_email, team_label FROM slack_link_codes WHERE code_hash = $1 AND expires_at > $2",
    )
    .bind(hash)
    .bind(now)
    .fetch_optional(ex.ex())
    .await?)
}

/// Uses up the link code hashing to `hash`: its (team, Slack user) if it was there and unexpired.
pub async fn take_link_code(
    mut ex: impl Conn,
    hash: &str,
    now: i64,
) -> Result<Option<(String, String)>> {
    let row: Option<(String, String, i64)> = sqlx::query_as(
        "DELETE FROM slack_link_codes WHERE code_hash = $1 RETURNING team_id, slack_user_id, expires_at",
    )
    .bind(hash)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row
        .filter(|(_, _, expires)| *expires > now)
        .map(|(team, user, _)| (team, user)))
}

/// The default repo of `channel`: set from Slack for its workspace, else from the web app.
pub async fn channel_repo(mut ex: impl Conn, team: &str, channel: &str) -> Result<Option<RepoId>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT repo_id FROM slack_channels WHERE channel_id = $2 AND team_id IN ($1, '*')
         ORDER BY CASE WHEN team_id = '*' THEN 1 ELSE 0 END LIMIT 1",
    )
    .bind(team)
    .bind(channel)
    .fetch_optional(ex.ex())
    .await?;
    row.map(|(id,)| Ok(RepoId(super::uuid(&id)?))).transpose()
}

/// Forgets every default of `channel`.
pub async fn clear_channel(mut ex: impl Conn, channel: &str) -> Result<()> {
    sqlx::query("DELETE FROM slack_channels WHERE channel_id = $1")
        .bind(channel)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Sets `channel`'s default repo.
pub async fn set_channel_repo(
    mut ex: impl Conn,
    team: &str,
    channel: &str,
    repo: RepoId,
    by: UserId,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO slack_channels (team_id, channel_id, repo_id, set_by, set_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (team_id, channel_id) DO UPDATE SET repo_id = excluded.repo_id, set_by = excluded.set_by, set_at = excluded.set_at",
    )
    .bind(team)
    .bind(channel)
    .bind(repo.to_string())
    .bind(by.to_string())
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Every channel's default repo: (team, channel, repo), by channel.
pub async fn channels(mut ex: impl Conn) -> Result<Vec<(String, String, RepoId)>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT team_id, channel_id, repo_id FROM slack_channels ORDER BY channel_id, team_id",
    )
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(t, c, r)| Ok((t, c, RepoId(super::uuid(&r)?))))
        .collect()
}

/// The admins' keyword rules: (keyword, repo), by keyword.
pub async fn rules(mut ex: impl Conn) -> Result<Vec<(String, RepoId)>> {
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT keyword, repo_id FROM slack_rules ORDER BY keyword")
            .fetch_all(ex.ex())
            .await?;
    rows.into_iter()
        .map(|(k, r)| Ok((k, RepoId(super::uuid(&r)?))))
        .collect()
}

/// Replaces every keyword rule with `rules`.
pub async fn set_rules(conn: &mut crate::Tx, rules: &[(String, RepoId)]) -> Result<()> {
    sqlx::query("DELETE FROM slack_rules")
        .execute(&mut *conn.tx)
        .await?;
    for (keyword, repo) in rules {
        sqlx::query("INSERT INTO slack_rules (keyword, repo_id) VALUES ($1, $2)")
            .bind(keyword)
            .bind(repo.to_string())
            .execute(&mut *conn.tx)
            .await?;
    }
    Ok(())
}

/// A thread that is a session's conversation.
#[derive(Clone, Debug, FromRow)]
pub struct Thread {
    pub team_id: String,
    pub channel_id: String,
    pub thread_ts: String,
    pub session_id: String,
    pub status_ts: Option<String>,
    pub trigger_ts: String,
}

impl Thread {
    pub fn session(&self) -> Result<SessionId> {
        Ok(SessionId(super::uuid(&self.session_id)?))
    }
}

/// Makes `thread` the conversation of its session.
pub async fn insert_thread(mut ex: impl Conn, t: &Thread, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO slack_threads (team_id, channel_id, thread_ts, session_id, status_ts, trigger_ts, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&t.team_id)
    .bind(&t.channel_id)
    .bind(&t.thread_ts)
    .bind(&t.session_id)
    .bind(&t.status_ts)
    .bind(&t.trigger_ts)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

const THREAD: &str =
    "SELECT team_id, channel_id, thread_ts, session_id, status_ts, trigger_ts FROM slack_threads";

/// The session whose conversation thread `thread_ts` of `channel` is.
pub async fn thread(
    mut ex: impl Conn,
    team: &str,
    channel: &str,
    thread_ts: &str,
) -> Result<Option<Thread>> {
    Ok(sqlx::query_as(&format!(
        "{THREAD} WHERE team_id = $1 AND channel_id = $2 AND thread_ts = $3"
    ))
    .bind(team)
    .bind(channel)
    .bind(thread_ts)
    .fetch_optional(ex.ex())
    .await?)
}

/// `session`'s conversation thread.
pub async fn thread_of(mut ex: impl Conn, session: SessionId) -> Result<Option<Thread>> {
    Ok(sqlx::query_as(&format!("{THREAD} WHERE session_id = $1"))
        .bind(session.to_string())
        .fetch_optional(ex.ex())
        .await?)
}

/// Records the status message of `session`'s thread.
pub async fn set_status_ts(mut ex: impl Conn, session: SessionId, ts: &str) -> Result<()> {
    sqlx::query("UPDATE slack_threads SET status_ts = $1 WHERE session_id = $2")
        .bind(ts)
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// A task waiting for its person to choose a repo.
#[derive(Clone, Debug, FromRow)]
pub struct Pending {
    pub id: String,
    pub team_id: String,
    pub channel_id: String,
    pub thread_ts: String,
    pub trigger_ts: String,
    pub slack_user_id: String,
    pub text: String,
}

pub async fn insert_pending(mut ex: impl Conn, p: &Pending, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO slack_pending (id, team_id, channel_id, thread_ts, trigger_ts, slack_user_id, text, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&p.id)
    .bind(&p.team_id)
    .bind(&p.channel_id)
    .bind(&p.thread_ts)
    .bind(&p.trigger_ts)
    .bind(&p.slack_user_id)
    .bind(&p.text)
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Takes `slack_user`'s pending task `id` (once: a second choice finds nothing), if made
/// after `since`.
pub async fn take_pending(
    mut ex: impl Conn,
    id: &str,
    slack_user: &str,
    since: i64,
) -> Result<Option<Pending>> {
    Ok(sqlx::query_as(
        "DELETE FROM slack_pending WHERE id = $1 AND slack_user_id = $2 AND created_at >= $3
         RETURNING id, team_id, channel_id, thread_ts, trigger_ts, slack_user_id, text",
    )
    .bind(id)
    .bind(slack_user)
    .bind(since)
    .fetch_optional(ex.ex())
    .await?)
}

/// Who asked pending task `id`, if it is still there.
pub async fn pending_asker(mut ex: impl Conn, id: &str) -> Result<Option<String>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT slack_user_id FROM slack_pending WHERE id = $1")
            .bind(id)
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.map(|(u,)| u))
}

/// The newest message that asked something of `session`'s thread (its reactions go there).
pub async fn set_trigger_ts(mut ex: impl Conn, session: SessionId, ts: &str) -> Result<()> {
    sqlx::query("UPDATE slack_threads SET trigger_ts = $1 WHERE session_id = $2")
        .bind(ts)
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}
