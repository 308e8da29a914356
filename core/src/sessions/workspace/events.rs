//! Event and audit helpers of a session's workspace: record an event, move the session's
//! state, time a boot phase, cut output to its bound, audit what a person did.

use super::*;

pub async fn event(db: &Db, id: SessionId, kind: EventKind) -> Result<Event> {
    let mut tx = db.begin().await?;
    let e = db::events::append(&mut tx, id, now_ms(), kind).await?;
    tx.commit().await?;
    Ok(e)
}

pub(super) async fn transition(
    db: &Db,
    id: SessionId,
    to: SessionState,
    reason: Option<String>,
) -> Result<Option<SessionState>> {
    let mut tx = db.begin().await?;
    let from = db::sessions::transition(&mut tx, id, to, reason, now_ms()).await?;
    tx.commit().await?;
    Ok(from)
}

pub(super) async fn phase(
    db: &Db,
    id: SessionId,
    t0: Instant,
    phase: BootPhase,
    detail: Option<String>,
) -> Result<()> {
    event(
        db,
        id,
        EventKind::BootPhase {
            phase,
            elapsed_ms: t0.elapsed().as_millis() as i64,
            detail,
        },
    )
    .await?;
    Ok(())
}

/// The `ready` boot event and the move to `ready`, in one transaction: whoever sees the event
/// sees the state.
pub(super) async fn became_ready(db: &Db, id: SessionId, t0: Instant) -> Result<()> {
    let now = now_ms();
    let mut tx = db.begin().await?;
    db::events::append(
        &mut tx,
        id,
        now,
        EventKind::BootPhase {
            phase: BootPhase::Ready,
            elapsed_ms: t0.elapsed().as_millis() as i64,
            detail: None,
        },
    )
    .await?;
    db::sessions::transition(&mut tx, id, SessionState::Ready, None, now).await?;
    tx.commit().await?;
    Ok(())
}

/// Cuts `s` to at most `max` bytes on a character boundary; true if it cut.
pub fn truncate(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// Records what `author` did to session `id` in the audit log.
pub async fn audit(
    db: &Db,
    author: &Author,
    action: &str,
    id: SessionId,
    detail: serde_json::Value,
) -> Result<()> {
    Ok(db::audit::record(
        db,
        now_ms(),
        db::audit::Entry {
            actor_user_id: author.user_id,
            actor_name: &author.name,
            action,
            target: &id.to_string(),
            detail,
        },
    )
    .await?)
}

pub(super) async fn within<T, E: Into<Error>>(
    what: &str,
    limit: Duration,
    f: impl Future<Output = std::result::Result<T, E>>,
) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| {
            Error::Internal(format!(
                "{what} did not finish within {} s",
                limit.as_secs()
            ))
        })?
        .map_err(Into::into)
}
