//! Who reports a session's progress somewhere (a Slack thread, a GitHub issue) and how far it
//! got. A server process holds a follower while its claim is ahead of the clock and renews it
//! as it works; once the claim lapses (the process stopped), another process takes it over
//! from the last event it reported.

use tandem_protocol::SessionId;

use crate::{Conn, Result};

/// Starts following `session` for `kind`, from its beginning.
pub async fn insert(mut ex: impl Conn, session: SessionId, kind: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO progress_followers (session_id, kind) VALUES ($1, $2) ON CONFLICT (session_id, kind) DO NOTHING",
    )
    .bind(session.to_string())
    .bind(kind)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Claims (or renews) `session`'s `kind` follower for `me` until `until`; its last reported
/// sequence number, or none when another process holds it or it is done.
pub async fn claim(
    mut ex: impl Conn,
    session: SessionId,
    kind: &str,
    me: &str,
    now: i64,
    until: i64,
) -> Result<Option<i64>> {
    let row: Option<(i64,)> = sqlx::query_as(
        "UPDATE progress_followers SET claimed_by = $1, claimed_until = $2
         WHERE session_id = $3 AND kind = $4 AND done = 0 AND (claimed_by = $1 OR claimed_until < $5)
         RETURNING last_seq",
    )
    .bind(me)
    .bind(until)
    .bind(session.to_string())
    .bind(kind)
    .bind(now)
    .fetch_optional(ex.ex())
    .await?;
    Ok(row.map(|(s,)| s))
}

/// Followers no process holds (never claimed, or their claim lapsed): (session, kind).
pub async fn unclaimed(mut ex: impl Conn, now: i64) -> Result<Vec<(SessionId, String)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT session_id, kind FROM progress_followers WHERE done = 0 AND claimed_until < $1 LIMIT 500",
    )
    .bind(now)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter()
        .map(|(s, k)| Ok((SessionId(super::uuid(&s)?), k)))
        .collect()
}

/// Records that `me` reported `session` up to `seq` (`done`: nothing more to report).
pub async fn reported(
    mut ex: impl Conn,
    session: SessionId,
    kind: &str,
    me: &str,
    seq: i64,
    done: bool,
) -> Result<()> {
    sqlx::query(
        "UPDATE progress_followers SET last_seq = $1, done = $2 WHERE session_id = $3 AND kind = $4 AND claimed_by = $5",
    )
    .bind(seq)
    .bind(i64::from(done))
    .bind(session.to_string())
    .bind(kind)
    .bind(me)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Lets go of a claim (this process stops).
pub async fn release(mut ex: impl Conn, me: &str) -> Result<()> {
    sqlx::query("UPDATE progress_followers SET claimed_until = 0 WHERE claimed_by = $1")
        .bind(me)
        .execute(ex.ex())
        .await?;
    Ok(())
}
