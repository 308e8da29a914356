//! The workspace root: one overlayfs mount of the read-only layers under a writable layer. One
//! mount call, independent of the layers' size.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use crate::{Error, Result};

/// Characters that would break overlayfs' option string.
fn check_path(p: &Path) -> Result<String> {
    let s = p
        .to_str()
        .ok_or_else(|| Error::Config(format!("{} is not UTF-8", p.display())))?;
    if s.contains(',') || s.contains(':') || s.contains('\\') {
        return Err(Error::Config(format!(
            "overlay layer path {s:?} must not contain ',', ':' or '\\'"
        )));
    }
    Ok(s.to_string())
}

/// Mounts `lower` (topmost first) + `upper` at `target`.
pub fn mount_overlay(lower: &[PathBuf], upper: &Path, work: &Path, target: &Path) -> Result<()> {
    if lower.is_empty() {
        return Err(Error::Internal(
            "an overlay needs at least one lower layer".into(),
        ));
    }
    let lower: Vec<String> = lower.iter().map(|p| check_path(p)).collect::<Result<_>>()?;
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        check_path(upper)?,
        check_path(work)?
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .map_err(|e| {
        Error::Internal(format!(
            "mounting the workspace overlay at {}: {e}",
            target.display()
        ))
    })
}

/// Makes the mount at `target` private: no mount or unmount event passes to or from its copies.
pub fn make_private(target: &Path) -> Result<()> {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| Error::Internal(format!("making {} private: {e}", target.display())))
}

/// Unmounts `target`; a target that is not mounted is fine.
pub fn unmount(target: &Path) -> Result<()> {
    match umount2(target, MntFlags::empty()) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        // Still busy (a process of ours holds it): detach now, the kernel frees it when unused.
        Err(nix::errno::Errno::EBUSY) => umount2(target, MntFlags::MNT_DETACH)
            .map_err(|e| Error::Internal(format!("detaching {}: {e}", target.display()))),
        Err(e) => Err(Error::Internal(format!(
            "unmounting {}: {e}",
            target.display()
        ))),
    }
}

/// True if `target` is a mount point.
pub fn is_mounted(target: &Path) -> bool {
    super::loop_device::is_mount_point(target)
}
