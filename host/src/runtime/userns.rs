//! User namespaces: a runc or crun workspace runs in its own user namespace, where its uid 0 is
//! host uid [`HOST_BASE`] (and its uids 0–65535 are host uids `HOST_BASE`–`HOST_BASE + 65535`).
//! Root inside a workspace is an unprivileged user on the host: an escape through a kernel or
//! runtime bug lands as a uid that owns nothing of the host's.
//!
//! The files a workspace sees are stored with those host ids ("shifted"): the image's root
//! filesystem, snapshot layers and writable layers are walked once and re-owned
//! (`u → HOST_BASE + u`), then marked with a `trusted.` extended attribute a workspace cannot set
//! (it needs host `CAP_SYS_ADMIN`). Shifting is idempotent, so a tree the host wrote into (a
//! snapshot's checkout) or one from before user namespaces is simply shifted at its next start.
//! Overlayfs cannot be idmap-mounted on the kernels Tandem supports, which is why ownership is
//! shifted on disk, as Docker's `userns-remap` does.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::{Error, Result};

/// Host uid (and gid) of a workspace's uid 0.
pub const HOST_BASE: u32 = 1_000_000;
/// How many ids a workspace has (0–65535, `nobody` included).
pub const COUNT: u32 = 65_536;
/// The mark of a shifted tree: its value is the base it was shifted to.
const MARK: &str = "trusted.tandem.idbase";

/// True when the kernel lets root make user namespaces.
pub fn kernel_allows() -> bool {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

/// Why the workspace's root (host uid [`HOST_BASE`]) cannot reach `dir`, if it cannot: every
/// directory above it must let others pass (runc and crun set up the root from inside the
/// namespace). A data dir under `/root` (mode 0700) is the usual case.
pub fn reachable(dir: &Path) -> std::result::Result<(), String> {
    for a in dir.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(a) else {
            continue;
        };
        if meta.permissions().mode() & 0o001 == 0 && meta.uid() != HOST_BASE {
            return Err(format!(
                "{} (mode {:o}) does not let uid {HOST_BASE} through; put the data dir elsewhere (as root the default is /var/lib/tandem) or `chmod o+x {}`",
                a.display(),
                meta.permissions().mode() & 0o7777,
                a.display()
            ));
        }
    }
    Ok(())
}

/// The host id of workspace id `id`: ids in the workspace's range stay, others are shifted into it.
fn shifted(id: u32) -> u32 {
    if (HOST_BASE..HOST_BASE + COUNT).contains(&id) {
        id
    } else if id < COUNT {
        HOST_BASE + id
    } else {
        // Outside any range a workspace can name: its `nobody`.
        HOST_BASE + 65_534
    }
}

fn marked(root: &Path) -> bool {
    xattr::get(root, MARK)
        .ok()
        .flatten()
        .is_some_and(|v| v == HOST_BASE.to_string().as_bytes())
}

fn mark(root: &Path) -> Result<()> {
    xattr::set(root, MARK, HOST_BASE.to_string().as_bytes())
        .map_err(|e| Error::Internal(format!("marking {} as shifted: {e}", root.display())))
}

/// Re-owns one entry (never through a link) and keeps its set-id bits, which `chown` clears.
fn shift_one(p: &Path, meta: &std::fs::Metadata) -> Result<()> {
    let (uid, gid) = (shifted(meta.uid()), shifted(meta.gid()));
    if (uid, gid) == (meta.uid(), meta.gid()) {
        return Ok(());
    }
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .map_err(|e| Error::Internal(format!("re-owning {}: {e}", p.display())))?;
    let mode = meta.permissions().mode();
    if meta.is_file() && mode & 0o6000 != 0 {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

fn walk(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        let meta = std::fs::symlink_metadata(&p)?;
        shift_one(&p, &meta)?;
        // A link is re-owned itself and never followed.
        if meta.is_dir() {
            walk(&p)?;
        }
    }
    Ok(())
}

/// Shifts the tree at `root` into the workspace range unless it is marked as shifted already.
/// The tree must be quiescent (no workspace running on it): it is walked without links being
/// followed, but not against concurrent renames.
pub fn shift_tree(root: &Path) -> Result<()> {
    if marked(root) {
        return Ok(());
    }
    // One walk at a time: workspaces starting together on a new image walk it once.
    static WALKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WALKING.lock().unwrap_or_else(|e| e.into_inner());
    if marked(root) {
        return Ok(());
    }
    let meta = std::fs::symlink_metadata(root)?;
    if !meta.is_dir() {
        return Err(Error::Internal(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    shift_one(root, &meta)?;
    walk(root)?;
    mark(root)
}

/// Gives a host directory a workspace writes into (its agent's socket directory) to the
/// workspace's root.
pub fn own(dir: &Path) -> Result<()> {
    std::os::unix::fs::lchown(dir, Some(HOST_BASE), Some(HOST_BASE))
        .map_err(|e| Error::Internal(format!("re-owning {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_behind_a_closed_parent_is_not_reachable() {
        let t = tempfile::tempdir().unwrap();
        let closed = t.path().join("root-home");
        std::fs::create_dir_all(closed.join("tandem/workspaces")).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let why = reachable(&closed.join("tandem/workspaces")).unwrap_err();
        assert!(
            why.contains("root-home") && why.contains("/var/lib/tandem"),
            "{why}"
        );
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        reachable(&closed.join("tandem/workspaces")).unwrap();
    }

    #[test]
    fn ids_shift_into_the_workspace_range_once() {
        assert_eq!(shifted(0), HOST_BASE);
        assert_eq!(shifted(1000), HOST_BASE + 1000);
        assert_eq!(shifted(HOST_BASE + 5), HOST_BASE + 5, "already shifted");
        assert_eq!(shifted(70_000), HOST_BASE + 65_534);
    }

    #[test]
    fn a_tree_is_shifted_without_following_links_and_keeps_set_id_bits() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("host-file");
        std::fs::write(&target, "host").unwrap();
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("layer");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        let suid = root.join("usr/bin/su");
        std::fs::write(&suid, "").unwrap();
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink(&target, root.join("escape")).unwrap();
        shift_tree(&root).unwrap();
        let m = std::fs::metadata(&suid).unwrap();
        assert_eq!((m.uid(), m.gid()), (HOST_BASE, HOST_BASE));
        assert_eq!(m.permissions().mode() & 0o7777, 0o4755, "set-uid bit kept");
        let link = std::fs::symlink_metadata(root.join("escape")).unwrap();
        assert_eq!(link.uid(), HOST_BASE, "the link itself is re-owned");
        assert_eq!(
            std::fs::metadata(&target).unwrap().uid(),
            0,
            "what it points at is not"
        );
        assert!(marked(&root));
        // A file the host adds after the mark is not shifted again until the mark goes.
        std::fs::write(root.join("later"), "").unwrap();
        shift_tree(&root).unwrap();
        assert_eq!(std::fs::metadata(root.join("later")).unwrap().uid(), 0);
    }
}
