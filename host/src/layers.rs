//! The layer store: where snapshots' layers and workspaces' own writable layers live, and the
//! operations the core asks of them by id — a snapshot's checkout, capturing a built
//! workspace's layer as a snapshot, copying one workspace's layer to another (a fork), a
//! snapshot's size, collecting it. Here they are directories under the data dir; a runtime on
//! a cluster keeps them as image layers in a registry. No caller outside this crate sees a
//! layer's path.

use std::path::PathBuf;

use tandem_protocol::{Repo, SnapshotId};

use crate::runtime::oci::{Bind, Files};
use crate::runtime::{self, Limits, WorkspaceSpec, network::Egress};
use crate::{Error, Host, Result, mirrors};

/// Where the repository is checked out inside every workspace.
pub const REPO_DIR: &str = "/workspace";

impl Host {
    /// Snapshot `id`'s layer directory.
    fn layer(&self, id: SnapshotId) -> PathBuf {
        self.data_dir
            .join("snapshots")
            .join(id.to_string())
            .join("layer")
    }

    /// Snapshot `id`'s layer becomes `branch` of `repo`'s mirror, checked out at [`REPO_DIR`]
    /// (a snapshot without setup commands). On a cluster the layer is then pushed as the
    /// snapshot's image.
    pub async fn checkout_snapshot(&self, id: SnapshotId, repo: &Repo, branch: &str) -> Result<()> {
        let layer = self.layer(id);
        std::fs::create_dir_all(&layer)?;
        let checkout = layer.join(REPO_DIR.trim_start_matches('/'));
        mirrors::checkout(
            &mirrors::path(&self.data_dir, repo),
            repo,
            branch,
            &checkout,
        )
        .await?;
        if let Some(cluster) = &self.cluster {
            let image = self.image()?;
            cluster
                .push_snapshot(
                    id,
                    &layer,
                    &image.rootfs,
                    image.digest.trim_start_matches("sha256:"),
                    &self.agent_bin,
                )
                .await?;
            return Ok(());
        }
        if self.local()?.root_uid() != 0 {
            // Shifted now rather than at a session's start.
            tokio::task::spawn_blocking(move || runtime::userns::shift_tree(&layer))
                .await
                .map_err(|e| Error::Internal(format!("shifting the snapshot layer: {e}")))??;
        }
        Ok(())
    }

    /// Workspace `wid`'s own layer (made ready on its disk of `limits`) gets `branch` of
    /// `repo`'s mirror at [`REPO_DIR`], before the workspace first runs (a snapshot build's
    /// workspace, whose setup then runs on it).
    pub async fn checkout_into_workspace(
        &self,
        wid: &str,
        limits: Limits,
        repo: &Repo,
        branch: &str,
    ) -> Result<()> {
        if self.cluster.is_some() {
            return Err(Error::Unavailable(
                "a recipe's setup commands do not run on the kubernetes runtime yet: there a snapshot is the checkout alone (remove `setup` from tandem.toml, or run workspaces on a machine)".into(),
            ));
        }
        let upper = self.local()?.prepare_upper(wid, limits).await?;
        let checkout = upper.join(REPO_DIR.trim_start_matches('/'));
        mirrors::checkout(
            &mirrors::path(&self.data_dir, repo),
            repo,
            branch,
            &checkout,
        )
        .await
    }

    /// Stopped workspace `wid`'s own layer becomes snapshot `id`'s.
    pub async fn capture_snapshot(&self, wid: &str, limits: Limits, id: SnapshotId) -> Result<()> {
        let upper = self.local()?.prepare_upper(wid, limits).await?;
        let layer = self.layer(id);
        std::fs::create_dir_all(&layer)?;
        runtime::disk::copy_tree(&upper, &layer).await
    }

    /// Workspace `from`'s own layer, copied to be workspace `to`'s (on its disk of `limits`).
    pub async fn copy_workspace_layer(&self, from: &str, to: &str, limits: Limits) -> Result<()> {
        if self.cluster.is_some() {
            return self.runtime.copy_kept(from, to).await;
        }
        let local = self.local()?;
        let dest = local.prepare_upper(to, limits).await?;
        runtime::disk::copy_tree(&local.upper_dir(from), &dest).await
    }

    /// Bytes snapshot `id`'s layer takes.
    pub fn snapshot_size(&self, id: SnapshotId) -> u64 {
        if self.cluster.is_some() {
            return self.snapshot_image(id).map(|i| i.size).unwrap_or(0);
        }
        crate::images::du(&self.layer(id))
    }

    /// Whether snapshot `id`'s layer is kept.
    pub fn snapshot_kept(&self, id: SnapshotId) -> bool {
        if self.cluster.is_some() {
            return self.snapshot_image(id).is_some();
        }
        self.layer(id).exists()
    }

    /// Snapshot `id`'s image, where snapshots are images.
    fn snapshot_image(&self, id: SnapshotId) -> Option<crate::cluster_layers::SnapshotImage> {
        crate::cluster_layers::snapshot_image(self.layer(id).parent()?)
    }

    /// Removes snapshot `id`'s layer (a failed build, a collected snapshot).
    pub async fn remove_snapshot(&self, id: SnapshotId) {
        if let Some(cluster) = &self.cluster
            && let Some(image) = self.snapshot_image(id)
            && let Err(e) = cluster.delete(&image.reference).await
        {
            // Left in the registry; the warning names it for the operator.
            tracing::warn!(snapshot = %id, image = %image.reference, error = %e, "deleting the snapshot's image failed");
        }
        if let Some(dir) = self.layer(id).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// The spec of a session's workspace `wid`: snapshot `snapshot` over the image, `repo`'s
    /// mirror read-only, the workspace agent as its first process, with `limits` and `egress`.
    /// Its disk is made first (the agent's directories live on it).
    pub async fn session_spec(
        &self,
        wid: &str,
        repo: &Repo,
        snapshot: SnapshotId,
        limits: Limits,
        egress: Option<Egress>,
    ) -> Result<WorkspaceSpec> {
        self.runtime.prepare(wid, limits).await?;
        if let Some(cluster) = &self.cluster {
            // What the workspace kept when it last stopped (a resume), else its snapshot.
            // The snapshot's note is the building server's; another server (replicas on one
            // database) finds the image by its tag.
            let image = match cluster.kept(wid).await? {
                Some(kept) => kept,
                None => match self.snapshot_image(snapshot) {
                    Some(note) => note.reference,
                    None => cluster.snapshot(snapshot).await?.ok_or_else(|| {
                        Error::NotFound(format!("snapshot {snapshot} has no image in the registry"))
                    })?,
                },
            };
            return Ok(WorkspaceSpec {
                id: wid.to_string(),
                files: Files::image(&image),
                hostname: "tandem".into(),
                env: crate::workspace_agent::agent_env(self, wid),
                init: crate::workspace_agent::agent_init(),
                limits,
                egress,
            });
        }
        let (init, env, mut binds) = crate::workspace_agent::spec_parts(self, wid)?;
        binds.push(Bind {
            host: mirrors::path(&self.data_dir, repo),
            container: mirrors::MOUNT_POINT.into(),
            readonly: true,
        });
        Ok(WorkspaceSpec {
            id: wid.to_string(),
            files: Files::local(
                vec![self.layer(snapshot), self.image()?.rootfs.clone()],
                binds,
            ),
            hostname: "tandem".into(),
            env,
            init,
            limits,
            egress,
        })
    }

    /// The spec of a snapshot build's workspace `wid`: the bare image, `env`, nothing bound, a
    /// process that waits while the setup commands run in it.
    pub fn build_spec(
        &self,
        wid: &str,
        env: Vec<(String, String)>,
        limits: Limits,
        egress: Option<Egress>,
    ) -> Result<WorkspaceSpec> {
        self.local()?;
        Ok(WorkspaceSpec {
            id: wid.to_string(),
            files: Files::local(vec![self.image()?.rootfs.clone()], vec![]),
            hostname: "snapshot".into(),
            env,
            init: vec!["sleep".into(), "infinity".into()],
            limits,
            egress,
        })
    }
}
