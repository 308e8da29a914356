//! The warm pool: per repo, a configured number of workspaces already started on the newest
//! snapshot, so claiming one for a new session skips the container start.
//!
//! The pool lives in memory; unclaimed pool workspaces left by a previous server process are
//! removed at start by the server that started them ([`super::orphans`]; their ids start with
//! `w-` and the server's tag; a claimed one is its session's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tandem_protocol::{Repo, RepoId, SnapshotId};

use crate::Host;
use crate::Result;
use crate::db::{self, Db};
use crate::runtime::Keep;

/// Prefix of pool workspace ids.
pub const PREFIX: &str = "w-";

/// A new pool workspace id on host `host_id`: `w-<host tag>-<random>`. The tag keeps one
/// server's leftovers apart from another's where servers share a runtime's listing (the pods of
/// one installation on a cluster).
pub fn new_id(host_id: &str) -> String {
    format!(
        "{PREFIX}{}-{}",
        host_tag(host_id),
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Eight hex digits naming host `host_id` in its pool workspaces' ids.
pub fn host_tag(host_id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(host_id.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `id` is a pool workspace that host `host_id` started, or one of a version that did
/// not tag them (`w-` and 16 hex digits).
pub fn started_by(id: &str, host_id: &str) -> bool {
    match id.strip_prefix(PREFIX) {
        Some(rest) => match rest.split_once('-') {
            Some((tag, _)) => tag == host_tag(host_id),
            None => true,
        },
        None => false,
    }
}

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

    /// Whether workspace `id` waits in a pool.
    pub fn holds(&self, id: &str) -> bool {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|l| l.iter().any(|w| w.workspace_id == id))
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
            let wid = new_id(&host.host_id);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_id_names_the_host_that_started_it() {
        let id = new_id("host-a");
        assert!(crate::runtime::validate_id(&id).is_ok(), "{id}");
        assert!(
            id.len() <= 63
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "a pod's name: {id}"
        );
        assert!(started_by(&id, "host-a"));
        assert!(
            !started_by(&id, "host-b"),
            "another replica's pool workspace"
        );
        assert!(!started_by(
            &crate::sessions::workspace::workspace_id(tandem_protocol::SessionId(
                uuid::Uuid::new_v4()
            )),
            "host-a"
        ));
        // Untagged ids of earlier versions are any server's to clean up.
        assert!(started_by("w-0123456789abcdef", "host-b"));
    }
}
