//! Workspace disks mounted ahead of need: a spare image is loop-mounted at a staging point,
//! cloned into a detached mount (held by a file descriptor, in no directory, `open_tree`) and
//! its staging mount dropped, all in the background; a start then only moves the detached
//! mount into place (`move_mount`, one system call).
//!
//! The loop device is set to free itself once its filesystem is unmounted (autoclear): a
//! detached mount that is never placed (its holder dropped it, the server died) takes its
//! device with it.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};
use tokio::process::Command;

use crate::{Error, Result};

fn failed(what: &str, at: &Path, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("{what} {}: {e}", at.display()))
}

/// `mount`'s options for a workspace disk. `loop`: one `mount -o loop` binds the image to a
/// free loop device set to free itself (autoclear) and mounts it, so the device goes with the
/// unmount, and a crash before the mount leaves none behind. `discard`: what the workspace
/// deletes goes back to the host's disk. `noinit_itable`: the image is a sparse copy of a fresh
/// template, so its unused inode tables already read as zeros; the kernel would otherwise write
/// them all in the background, turning holes into blocks.
const OPTIONS: &str = "loop,discard,nosuid,nodev,noatime,noinit_itable";

fn mounted(image: &Path, out: std::io::Result<std::process::Output>) -> Result<()> {
    let out = out.map_err(|e| failed("attaching a workspace disk", image, e))?;
    if !out.status.success() {
        // `mount` names the image itself.
        return Err(Error::Internal(format!(
            "attaching a workspace disk: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Loop-mounts `image` at `at` ([`OPTIONS`]).
pub async fn mount_at(image: &Path, at: &Path) -> Result<()> {
    let out = Command::new("mount")
        .args(["-t", "ext4", "-o", OPTIONS])
        .arg(image)
        .arg(at)
        .output()
        .await;
    mounted(image, out)
}

/// `image` mounted nowhere: loop-mounted at `staging` (made here), made private (so the clone
/// joins no other mount's propagation), cloned detached, and unmounted from `staging`, which
/// goes. The clone alone holds the filesystem and its loop device. Blocking, and done whole
/// once begun: a staging mount is never left behind by a caller that went away.
///
/// A server killed half-way leaves the staging mount: the next runtime on its data dir clears
/// it ([`super::disk::hold`]). (Staging in a mount namespace of the thread's own would leave
/// nothing, but each copy of the host's mount table cost the starts of a burst 40 % at p99.)
pub fn open(image: &Path, staging: &Path) -> Result<OwnedFd> {
    open_here(image, staging)
}

fn open_here(image: &Path, staging: &Path) -> Result<OwnedFd> {
    std::fs::create_dir_all(staging)?;
    let out = std::process::Command::new("mount")
        .args(["-t", "ext4", "-o", OPTIONS])
        .arg(image)
        .arg(staging)
        .output();
    if let Err(e) = mounted(image, out) {
        let _ = std::fs::remove_dir(staging);
        return Err(e);
    }
    let detached = (|| {
        mount(
            None::<&str>,
            staging,
            None::<&str>,
            MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| failed("making the staged disk private at", staging, e))?;
        open_tree(
            rustix::fs::CWD,
            staging,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|e| failed("detaching the staged disk at", staging, e))
    })();
    clear_staging(staging);
    detached
}

/// Unmounts what a process that died while staging a disk left at `staging`, and removes it.
pub fn clear_staging(staging: &Path) {
    let _ = umount2(staging, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(staging);
}

/// Puts detached mount `mount` at directory `at`.
pub fn place(mount: &OwnedFd, at: &Path) -> Result<()> {
    move_mount(
        mount,
        "",
        rustix::fs::CWD,
        at,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| failed("placing the workspace disk at", at, e))
}

/// True if `target` is a mount point (one `statx`; the mount table is not read, so this costs
/// the same with thousands of workspaces on the host).
pub fn is_mount_point(target: &Path) -> bool {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, statx};
    match statx(
        rustix::fs::CWD,
        target,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::empty(),
    ) {
        Ok(s) if s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) => {
            s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)
        }
        Err(rustix::io::Errno::NOENT) => false,
        _ => in_mount_table(target),
    }
}

/// The mount table's word on `target` (kernels before 5.8 do not say in `statx`).
fn in_mount_table(target: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let t = target.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*t))
}
