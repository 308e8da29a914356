//! Snapshots as the REST API shows them: a repo's prebuilt filesystem layers and their builds.

use serde::{Deserialize, Serialize};

use crate::ids::*;

/// Where a snapshot build is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    Building,
    Ready,
    Failed,
    /// Garbage-collected: its layer is gone, the record stays.
    Collected,
}

/// An immutable filesystem layer: the repo at a commit with its `setup` done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    pub id: SnapshotId,
    pub repo_id: RepoId,
    pub state: SnapshotState,
    pub branch: String,
    /// The commit the layer holds (known once cloned).
    pub commit: Option<String>,
    pub image_digest: Option<String>,
    /// Hash of the repo's `tandem.toml` workspace recipe.
    pub recipe_hash: Option<String>,
    pub agent_version: Option<String>,
    pub size_bytes: Option<i64>,
    pub build_ms: Option<i64>,
    /// Why the build failed.
    pub error: Option<String>,
    /// The build's output (clone, each setup command with its output).
    pub log: String,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// Session starts from it whose recipe `start` commands failed, in a row, since it was built
    /// or last started well.
    #[serde(default)]
    pub boot_failures: i64,
    /// When it was set aside after [`crate::limits::SNAPSHOT_BREAKER_FAILURES`] failed starts in
    /// a row: new sessions start from the newest good snapshot before it, and it is not rebuilt
    /// until the branch, the recipe or the image changes (or someone asks).
    #[serde(default)]
    pub quarantined_at: Option<Timestamp>,
}
