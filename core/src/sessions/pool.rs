//! The warm pool: per repo, a configured number of workspaces already started on the newest
//! snapshot, so claiming one for a new session skips the container start.
//!
//! The pool lives in memory; unclaimed pool workspaces left by a previous server process are
//! removed at start (their ids start with `w-`; a claimed one is its session's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tandem_protocol::{Repo, RepoId, SnapshotId};

use crate::Host;
use crate::Result;
use crate::db::{self, Db};
use crate::runtime::Keep;

/// Prefix of pool workspace ids.
pub const PREFIX: &str = "w-";

/// A started, unclaimed workspace.
#[derive(Clone, Debug)]
pub struct Warm {
    pub workspace_id: String,
    pub init_pid: i32,
    pub snapshot: SnapshotId,
}

/// All repos' pools.
#[derive(Default)]
pub struct WarmPool {
    ready: Mutex<HashMap<RepoId, Vec<Warm>>>,
    /// Repos with a refill running, so two never race to overfill.
    filling: Mutex<std::collections::HashSet<RepoId>>,
}

impl WarmPool {
    /// Takes a workspace of `repo` started on `snapshot`, if one is ready.
    pub fn take(&self, repo: RepoId, snapshot: SnapshotId) -> Option<Warm> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let list = ready.get_mut(&repo)?;
        let i = list.iter().position(|w| w.snapshot == snapshot)?;
        Some(list.swap_remove(i))
    }

    /// The snapshots `repo`'s pooled workspaces run on.
    pub fn snapshots(&self, repo: RepoId) -> Vec<SnapshotId> {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&repo)
            .map_or(vec![], |l| l.iter().map(|w| w.snapshot).collect())
    }

    /// How many are ready for `repo`.
    pub fn ready(&self, repo: RepoId) -> usize {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&repo)
            .map_or(0, Vec::len)
    }

    fn put(&self, repo: RepoId, w: Warm) {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(repo)
            .or_default()
            .push(w);
    }

    /// Removes and returns everything of `repo` not on `snapshot` (or everything, with `None`).
    fn drain_stale(&self, repo: RepoId, keep: Option<SnapshotId>) -> Vec<Warm> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let Some(list) = ready.get_mut(&repo) else {
            return vec![];
        };
        let (stale, fresh): (Vec<Warm>, Vec<Warm>) =
            list.drain(..).partition(|w| Some(w.snapshot) != keep);
        *list = fresh;
        stale
    }

    /// Brings `repo`'s pool to its configured size on its newest good snapshot: stops stale or
    /// surplus workspaces, starts missing ones.
    pub async fn refill(self: &Arc<Self>, db: &Db, host: &Host, repo: &Repo) -> Result<()> {
        {
            let mut filling = self.filling.lock().unwrap_or_else(|p| p.into_inner());
            if !filling.insert(repo.id) {
                return Ok(());
            }
        }
        let result = self.refill_inner(db, host, repo).await;
        self.filling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&repo.id);
        result
    }

    async fn refill_inner(&self, db: &Db, host: &Host, repo: &Repo) -> Result<()> {
        let size = db::repos::get(db, repo.id)
            .await?
            .map_or(0, |r| r.warm_pool.max(0) as usize);
        let snap = db::snapshots::latest_ready(db, repo.id).await?;
        let keep = if size > 0 {
            snap.as_ref().map(|s| s.id)
        } else {
            None
        };
        let mut stale = self.drain_stale(repo.id, keep);
        while self.ready(repo.id) > size {
            if let Some(w) = self.drain_stale(repo.id, None).pop() {
                stale.push(w);
            }
        }
        for w in stale {
            let _ = host.runtime.stop(&w.workspace_id, Keep::Nothing).await;
        }
        let Some(snap) = snap.filter(|_| size > 0) else {
            return Ok(());
        };
        while self.ready(repo.id) < size {
            let wid = format!(
                "{PREFIX}{}",
                &uuid::Uuid::new_v4().simple().to_string()[..16]
            );
            let init_pid = crate::sessions::workspace::start_on(
                host,
                repo,
                snap.id,
                snap.commit.as_deref(),
                &wid,
                Keep::Nothing,
            )
            .await?;
            self.put(
                repo.id,
                Warm {
                    workspace_id: wid,
                    init_pid,
                    snapshot: snap.id,
                },
            );
        }
        Ok(())
    }
}

/// Removes pool workspaces a previous server process left behind: unclaimed ones only. A
/// session that claimed a pool workspace keeps its `w-` id, so a workspace recorded for a
/// session that has not ended (live, starting, suspended: its layer is the person's work) is
/// never one of them.
pub async fn remove_orphans(db: &Db, host: &Host) -> Result<()> {
    use tandem_protocol::SessionState::*;
    let claimed: std::collections::HashSet<String> =
        db::sessions::in_states(db, &[Queued, Starting, Ready, Running, Idle, Suspended])
            .await?
            .into_iter()
            .filter_map(|row| row.workspace_id)
            .collect();
    for id in host.runtime.list().await? {
        if id.starts_with(PREFIX) && !claimed.contains(&id) {
            let _ = host.runtime.stop(&id, Keep::Nothing).await;
        }
    }
    Ok(())
}
