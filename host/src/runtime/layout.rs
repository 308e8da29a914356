//! Where a workspace's files live on this machine: what its root is made of ([`Files`], the
//! host paths bound into it), its directory and writable layer, the directories bound into it
//! for its agent, gateway and display, and what a stopped one left behind. The local runtime's
//! own module: nothing outside `host` reads these paths.

use std::path::{Path, PathBuf};

use super::oci::OciRuntime;
use super::{Limits, overlay};
use crate::Result;

/// What a workspace's root is made of: on this machine its read-only layers, topmost first
/// (snapshot layers, then the image's root filesystem), and the host paths bound into it; on
/// a cluster an image in a registry, which holds all of them. Opaque outside this crate: the
/// layer store builds it ([`crate::Host::session_spec`]).
#[derive(Clone, Debug, Default)]
pub struct Files {
    pub(crate) layers: Vec<PathBuf>,
    pub(crate) binds: Vec<Bind>,
    /// The image reference a cluster starts it from (`registry/name@sha256:…`).
    pub(crate) image: Option<String>,
}

impl Files {
    /// `layers` (topmost first) with `binds`: for this runtime's own tests and benchmarks,
    /// which start workspaces on directories of their own.
    pub fn local(layers: Vec<PathBuf>, binds: Vec<Bind>) -> Self {
        Self {
            layers,
            binds,
            image: None,
        }
    }

    /// The image `reference` (a registry's), which a cluster's node pulls.
    pub fn image(reference: impl Into<String>) -> Self {
        Self {
            image: Some(reference.into()),
            ..Self::default()
        }
    }
}

/// A host path bound into a workspace.
#[derive(Clone, Debug)]
pub struct Bind {
    pub host: PathBuf,
    pub container: String,
    pub readonly: bool,
}

/// Every host directory of one workspace, in one place.
#[derive(Clone, Debug)]
pub(crate) struct Dirs {
    /// Bound at the workspace agent's socket directory (on the workspace's disk: it writes here).
    pub agent: PathBuf,
    /// Bound at `/tmp/.X11-unix` (on its disk: its X server writes here).
    pub x11: PathBuf,
    /// Bound read-only at the gateway's socket directory: beside the disk, not on it (the
    /// workspace cannot write here, and a listening socket would keep the disk busy).
    pub gateway: PathBuf,
}

impl OciRuntime {
    /// The directory of workspace `id`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.workspaces_dir.join(id)
    }

    /// Where workspace `id` keeps its own writable layer.
    pub fn upper_dir(&self, id: &str) -> PathBuf {
        match self.disks {
            Some(_) => self.dir(id).join(super::disk::MOUNT).join("upper"),
            None => self.dir(id).join("upper"),
        }
    }

    /// Makes workspace `id`'s writable layer ready ([`Runtime::prepare`]) and returns it.
    pub async fn prepare_upper(&self, id: &str, limits: Limits) -> Result<PathBuf> {
        self.prepare_inner(id, limits).await
    }

    /// The host uid of a workspace's root (not 0 under a user namespace).
    pub fn root_uid(&self) -> u32 {
        if self.userns {
            super::userns::HOST_BASE
        } else {
            0
        }
    }

    /// Every host directory of workspace `id`.
    pub(crate) fn dirs(&self, id: &str) -> Dirs {
        let upper = self.upper_dir(id);
        Dirs {
            agent: upper.with_file_name("agent"),
            x11: upper.with_file_name("x11"),
            gateway: self.dir(id).join("gateway"),
        }
    }

    /// What a stopped workspace `id` left behind (mounts, cgroups, runtime state, files); empty
    /// when nothing leaked.
    pub fn leftovers(&self, id: &str) -> Vec<String> {
        let mut found = Vec::new();
        let dir = self.dir(id);
        for m in ["rootfs", super::disk::MOUNT] {
            if overlay::is_mounted(&dir.join(m)) {
                found.push(format!("mount {}", dir.join(m).display()));
            }
        }
        if dir.exists() {
            found.push(format!("dir {}", dir.display()));
        }
        if Path::new("/var/run/netns")
            .join(format!("tdm-{id}"))
            .exists()
        {
            found.push(format!("network namespace tdm-{id}"));
        }
        if self.state_dir.join(id).exists() {
            found.push(format!(
                "runtime state {}",
                self.state_dir.join(id).display()
            ));
        }
        for root in [
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/pids",
            "/sys/fs/cgroup/cpu",
            "/sys/fs/cgroup/unified",
        ] {
            let cg = Path::new(root).join("tandem").join(id);
            if cg.exists() {
                found.push(format!("cgroup {}", cg.display()));
            }
        }
        found
    }
}
