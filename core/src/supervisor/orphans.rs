//! Workspaces nothing claims any more. At start, the warm-pool workspaces a previous process of
//! this server left ([`at_start`]); and on a task of their own ([`sweep_forever`], every 30 s by
//! default: `orphan_sweep_secs`), workspaces
//! whose sessions ended on this server's host while they kept running — a stop cut short by a
//! crash, a boot that failed after its workspace started. The runtime's listing may hold more
//! than this server's (on a cluster: every replica's pods, another installation's in a shared
//! namespace); only what this server's sessions name is ever removed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_protocol::SessionState::*;

use crate::Host;
use crate::Result;
use crate::db::{self, Db};
use crate::runtime::Keep;
use crate::sessions::pool::{self, WarmPool};
use crate::sessions::workspace;

/// Every workspace a session that has not ended names: the one recorded for it, and the one its
/// id names (a boot starts that before it records it).
async fn claimed(db: &Db) -> Result<HashSet<String>> {
    let rows =
        db::sessions::in_states(db, &[Queued, Starting, Ready, Running, Idle, Suspended]).await?;
    let mut claimed = HashSet::new();
    for row in rows {
        if let Ok(id) = row.id.parse() {
            claimed.insert(workspace::workspace_id(id));
        }
        claimed.extend(row.workspace_id);
    }
    Ok(claimed)
}

/// Removes the pool workspaces this server started in an earlier process that no session
/// claimed. Another server's pool workspaces (a replica on the same cluster) stay theirs; an
/// untagged one (a version before the tags) is removed by whichever server starts first, as
/// that version did (a replica of that version that then hands it to a session finds it gone,
/// and the session gets a new workspace, as after any lost pod).
pub async fn at_start(db: &Db, host: &Host) -> Result<()> {
    for id in host.runtime.list().await? {
        // One a session claimed is that session's (an ended one's is the sweep's to remove,
        // keeping its files).
        if pool::started_by(&id, &host.host_id) && !db::sessions::named(db, &id).await? {
            let _ = host.runtime.stop(&id, Keep::Nothing).await;
        }
    }
    Ok(())
}

/// Sweeps `every` so often, apart from the supervisor's look at live workspaces (a slow
/// listing or stop never delays that).
pub async fn sweep_forever(db: Db, host: Arc<Host>, pool: Arc<WarmPool>, every: Duration) {
    let sweeper = Sweeper::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = sweeper.sweep(&db, &host, &pool).await {
            tracing::warn!(error = %e, "looking for workspaces whose session ended failed");
        }
    }
}

/// Finds workspaces left over from sessions that ended on this host
/// ([`db::sessions::left_over`]) and removes each once two sweeps in a row found it so: a verb
/// in flight (a resume starting a stopped session's workspace again) is never raced.
#[derive(Default)]
pub struct Sweeper {
    suspects: Mutex<HashSet<String>>,
}

impl Sweeper {
    /// One sweep; returns the workspaces it removed.
    pub async fn sweep(&self, db: &Db, host: &Host, pool: &WarmPool) -> Result<Vec<String>> {
        let claimed = claimed(db).await?;
        let mut left = HashSet::new();
        for id in host.runtime.list().await? {
            // Another server's pool workspace: no session of this host can name it.
            let others = id.starts_with(pool::PREFIX) && !pool::started_by(&id, &host.host_id);
            if others || claimed.contains(&id) || pool.holds(&id) {
                continue;
            }
            let prefix = workspace::session_prefix(&id);
            if db::sessions::left_over(db, &id, prefix.as_deref(), &host.host_id).await? {
                left.insert(id);
            }
        }
        let confirmed: Vec<String> = {
            let mut suspects = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
            let confirmed = left.intersection(&suspects).cloned().collect();
            *suspects = left;
            confirmed
        };
        let mut removed = Vec::new();
        for id in confirmed {
            // Its files are kept, as a stop keeps them; where they cannot be (a pod whose agent
            // no longer packs them), it goes anyway, keeping what it kept before (a pod's last
            // suspend): its session has ended, and a workspace left running holds a node's room
            // forever.
            let stopped = match host.runtime.stop(&id, Keep::Upper).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    tracing::warn!(workspace = %id, error = %e, "keeping the files of a workspace whose session had ended failed; removing it with what it kept before");
                    host.runtime.stop(&id, Keep::Kept).await
                }
            };
            match stopped {
                Ok(()) => {
                    tracing::warn!(workspace = %id, "a workspace whose session had ended was still running: removed");
                    removed.push(id);
                }
                Err(e) => {
                    tracing::warn!(workspace = %id, error = %e, "removing a workspace whose session had ended failed; the next sweep tries again")
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_workspace_id_names_the_start_of_its_session_id() {
        let session = tandem_protocol::SessionId(uuid::Uuid::new_v4());
        let prefix = workspace::session_prefix(&workspace::workspace_id(session)).unwrap();
        assert!(
            session.to_string().starts_with(&prefix),
            "{prefix} {session}"
        );
        assert_eq!(prefix.len(), 19);
        for other in [
            "w-0123456789abcdef",
            "s-0123",
            "s-0123456789ABCDEF",
            "s-0123456789abcdeg",
            "s-%",
        ] {
            assert_eq!(workspace::session_prefix(other), None, "{other}");
        }
    }
}
