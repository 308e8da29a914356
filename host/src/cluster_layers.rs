//! The layer store where workspaces run on a cluster: a snapshot is an image in the registry
//! (the workspace image, the agent, the snapshot's layer, with Tandem's annotations), so a
//! node's image cache plays the part of the local layer directories. This server keeps, per
//! snapshot, only a note of its image (`<data dir>/snapshots/<id>/image`: the reference by
//! digest and the layer's size); the layer itself is packed from a checkout made here, pushed,
//! and removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tandem_protocol::{SnapshotId, agent};
use tokio::sync::OnceCell;

use crate::registry::{self, Registry, layer};
use crate::{Error, Result, runtime};

/// The image repository snapshots are pushed to, under the registry's base.
pub const SNAPSHOTS: &str = "tandem-snapshots";
/// Annotation keys on every image Tandem pushes.
pub const SNAPSHOT_ANNOTATION: &str = "dev.tandem.snapshot";
pub const AGENT_VERSION_ANNOTATION: &str = "dev.tandem.agent-version";
pub const RECIPE_ANNOTATION: &str = "dev.tandem.image-recipe";

/// Snapshots as images in a registry.
pub struct ClusterLayers {
    pub registry: Registry,
    /// Where packed layers are kept between pushes (the image's, content-addressed).
    cache: PathBuf,
    /// The image's root and the agent, packed once per process.
    base: OnceCell<Vec<layer::Packed>>,
}

/// What a snapshot's note says.
pub struct SnapshotImage {
    /// `registry/tandem-snapshots@sha256:…`.
    pub reference: String,
    /// Bytes of the snapshot's own layer.
    pub size: u64,
}

impl ClusterLayers {
    /// Snapshots pushed to `registry`, packed layers cached under `cache`.
    pub fn new(registry: Registry, cache: PathBuf) -> Self {
        Self {
            registry,
            cache,
            base: OnceCell::new(),
        }
    }

    /// The workspace image's root (`rootfs`, built from the recipe named `recipe_key`) and the
    /// agent binary `agent_bin`, as layers.
    async fn base(
        &self,
        rootfs: &Path,
        recipe_key: &str,
        agent_bin: &Path,
    ) -> Result<Vec<layer::Packed>> {
        self.base
            .get_or_try_init(|| async {
                let image = registry::pack_once(
                    layer::Source::Dir {
                        path: rootfs.to_path_buf(),
                        // As a workspace sees it, whether or not it was shifted for this host's
                        // user namespaces.
                        unshift: Some(runtime::userns::HOST_BASE),
                    },
                    &self.cache,
                    &format!("image-{recipe_key}"),
                )
                .await?;
                let agent = registry::pack(
                    layer::Source::Files(vec![(
                        agent::BINARY.into(),
                        agent_bin.to_path_buf(),
                        0o755,
                    )]),
                    &self.cache,
                    &format!("agent-{}", std::process::id()),
                )
                .await?;
                Ok::<_, Error>(vec![image, agent])
            })
            .await
            .cloned()
    }

    /// What workspace `wid`'s pod kept when it last stopped, if anything
    /// ([`crate::runtime::kubernetes::keep`]).
    pub async fn kept(&self, wid: &str) -> Result<Option<String>> {
        self.registry
            .resolve(SNAPSHOTS, &crate::runtime::kubernetes::keep::tag(wid))
            .await
    }

    /// Snapshot `id`'s image, looked up by its tag (where this server did not build it).
    pub async fn snapshot(&self, id: SnapshotId) -> Result<Option<String>> {
        self.registry.resolve(SNAPSHOTS, &id.to_string()).await
    }

    /// Deletes the image `reference` (a collected snapshot's).
    pub async fn delete(&self, reference: &str) -> Result<()> {
        self.registry.delete(reference).await
    }

    /// Pushes snapshot `id`: the image, the agent and the tree at `layer_dir` (the snapshot's
    /// files, its root the image's root); writes its note next to `layer_dir` and removes the
    /// tree.
    #[allow(clippy::too_many_arguments)]
    pub async fn push_snapshot(
        &self,
        id: SnapshotId,
        layer_dir: &Path,
        rootfs: &Path,
        recipe_key: &str,
        agent_bin: &Path,
    ) -> Result<SnapshotImage> {
        let mut layers = self.base(rootfs, recipe_key, agent_bin).await?;
        let own = registry::pack(
            layer::Source::Dir {
                path: layer_dir.to_path_buf(),
                unshift: None,
            },
            &self.cache,
            &format!("snapshot-{id}"),
        )
        .await?;
        let size = own.size;
        let file = own.file.clone();
        layers.push(own);
        let annotations = BTreeMap::from([
            (SNAPSHOT_ANNOTATION.to_string(), id.to_string()),
            (
                AGENT_VERSION_ANNOTATION.to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            (RECIPE_ANNOTATION.to_string(), recipe_key.to_string()),
        ]);
        let pushed = self
            .registry
            .push(SNAPSHOTS, &id.to_string(), &layers, &annotations)
            .await;
        let _ = std::fs::remove_file(&file);
        let reference = pushed?;
        let image = SnapshotImage { reference, size };
        if let Some(dir) = layer_dir.parent() {
            std::fs::write(note(dir), format!("{}\n{}\n", image.reference, image.size))?;
        }
        let _ = std::fs::remove_dir_all(layer_dir);
        Ok(image)
    }
}

/// The note of the snapshot whose directory is `dir`.
fn note(dir: &Path) -> PathBuf {
    dir.join("image")
}

/// Snapshot directory `dir`'s image, if it was pushed.
pub fn snapshot_image(dir: &Path) -> Option<SnapshotImage> {
    let text = std::fs::read_to_string(note(dir)).ok()?;
    let mut lines = text.lines();
    let reference = lines.next()?.trim().to_string();
    let size = lines.next()?.trim().parse().ok()?;
    (!reference.is_empty()).then_some(SnapshotImage { reference, size })
}
