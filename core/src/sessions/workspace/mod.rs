//! A session's workspace: boot it from the repo's newest good snapshot, run commands in it, diff
//! it, stop it. Every step is an event; every failure says what failed. By what it does:
//! [`events`] (events, audit, phases), [`boot`], [`start`] (spec, start commands, readiness),
//! [`checkout`] (exec, diff, files, git), [`lifecycle`] (stop, suspend, resume) and [`fork`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tandem_protocol::limits::{MAX_DIFF_BYTES, MAX_EVENT_OUTPUT_BYTES};
use tandem_protocol::*;

use crate::Host;
use crate::db::{self, Db};
use crate::runtime::{self, Keep, WorkspaceSpec};
use crate::sessions::pool::WarmPool;
use crate::snapshots::{self, REPO_DIR, Recipe};
use crate::workspace_agent::WorkspaceAgent;
use crate::{Error, Result, mirrors, now_ms};

mod boot;
mod checkout;
mod events;
mod fork;
mod lifecycle;
mod start;
mod taking_down;

pub use boot::*;
pub use checkout::*;
pub(crate) use events::*;
pub use events::{audit, event, truncate};
pub use fork::*;
pub use lifecycle::*;
pub use start::*;
pub use taking_down::{TakingDown, taking_down};

/// How long each boot phase may take before the session fails.
pub const DEADLINE_SNAPSHOT: Duration = Duration::from_secs(30 * 60);

pub const DEADLINE_STARTING: Duration = Duration::from_secs(60);

pub const DEADLINE_SYNCING: Duration = Duration::from_secs(120);

pub const DEADLINE_SERVICES: Duration = Duration::from_secs(300);

/// Pause between two tries of a readiness check.
pub const READY_RETRY: Duration = Duration::from_millis(100);

/// How long the workspace agent may take to answer after the container started.
pub const DEADLINE_AGENT: Duration = Duration::from_secs(10);

/// Default and largest timeout of `exec`.
pub const EXEC_DEFAULT_TIMEOUT_SECS: u64 = 600;

pub const EXEC_MAX_TIMEOUT_SECS: u64 = 3600;

/// Prefix of session workspace ids.
pub const PREFIX: &str = "s-";

/// The runtime id of a session's workspace.
pub fn workspace_id(session: SessionId) -> String {
    format!("{PREFIX}{}", &session.0.simple().to_string()[..16])
}

/// The start every session id has whose [`workspace_id`] is `wid` (`s-` and 16 hex digits: the
/// id's first three groups), or none for another id.
pub fn session_prefix(wid: &str) -> Option<String> {
    let hex = wid.strip_prefix(PREFIX)?;
    if hex.len() != 16
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    Some(format!("{}-{}-{}-", &hex[..8], &hex[8..12], &hex[12..16]))
}

/// Where a stopped session's diff was kept before the store kept it (versions before
/// migration 0029); [`adopt_kept_diffs`] moves any left there into the store.
fn legacy_diff_file(data_dir: &std::path::Path, session: SessionId) -> PathBuf {
    data_dir
        .join("sessions")
        .join(session.to_string())
        .join("diff.json")
}

/// Moves the diffs an older version kept in `data_dir` into the store (each removed once
/// stored; one the store already has is left to the store's), so an upgrade loses none.
/// Returns how many it moved.
pub async fn adopt_kept_diffs(db: &Db, data_dir: &std::path::Path) -> Result<usize> {
    let Ok(dir) = std::fs::read_dir(data_dir.join("sessions")) else {
        return Ok(0);
    };
    let mut moved = 0;
    for entry in dir.flatten() {
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<uuid::Uuid>().ok())
            .map(SessionId)
        else {
            continue;
        };
        let file = legacy_diff_file(data_dir, id);
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let known = db::sessions::get(db, id).await?.is_some();
        if known
            && serde_json::from_slice::<Diff>(&bytes).is_ok()
            && !db::diffs::has(db, id).await?
        {
            let text = String::from_utf8_lossy(&bytes);
            db::diffs::keep(db, id, &text, now_ms()).await?;
            moved += 1;
        }
        if known {
            std::fs::remove_file(&file)?;
            let _ = std::fs::remove_dir(entry.path());
        }
    }
    Ok(moved)
}

/// A session's running workspace as the store knows it.
pub struct LiveWorkspace {
    pub session: Session,
    /// The workspace's runtime id.
    pub id: String,
    /// The commit it started from (what its diff is against).
    pub base_commit: Option<String>,
    /// Its init's host PID, once it started.
    pub init_pid: Option<i32>,
}

/// The session's running workspace, or a 409 saying it has none: the one way features find it.
pub async fn live_workspace(db: &Db, id: SessionId) -> Result<LiveWorkspace> {
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let row = db::sessions::workspace(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    match (session.state.is_live(), row.workspace_id) {
        (true, Some(w)) => Ok(LiveWorkspace {
            session,
            id: w,
            base_commit: row.base_commit,
            init_pid: row.workspace_pid.map(|p| p as i32),
        }),
        _ => Err(Error::Conflict(format!(
            "session {id} has no running workspace (it is {})",
            session.state.as_str()
        ))),
    }
}

/// The agent of the session's running workspace.
pub async fn workspace_agent<'a>(
    db: &Db,
    host: &'a Host,
    id: SessionId,
) -> Result<WorkspaceAgent<'a>> {
    let live = live_workspace(db, id).await?;
    let init_pid = live
        .init_pid
        .ok_or_else(|| Error::Conflict(format!("session {id}'s workspace has not started yet")))?;
    Ok(WorkspaceAgent::new(host, live.id, init_pid))
}
