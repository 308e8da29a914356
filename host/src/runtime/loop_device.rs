//! Workspace disks mounted ahead of need: a spare image is attached to a free loop device and
//! its filesystem mounted detached (`fsopen`/`fsmount`: held by a file descriptor, in no
//! directory), all in the background; a start then only moves the detached mount into place
//! (`move_mount`, one system call).
//!
//! No `mount` process: util-linux's reads the whole mount table (and, for `-o loop`, every loop
//! device) at each call, which with a thousand workspaces on the host took more of the
//! machine than the starts themselves. `losetup --find` takes a free device from the kernel
//! (`/dev/loop-control`) without a scan.
//!
//! The loop device is detached while its filesystem holds it, which the kernel turns into
//! autoclear: it goes with the last unmount, so a detached mount that is never placed (its
//! holder dropped it, the server died) takes its device with it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, umount2};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, fsconfig_create, fsconfig_set_flag,
    fsconfig_set_string, fsmount, fsopen, move_mount,
};

use crate::{Error, Result};

fn failed(what: &str, at: &Path, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("{what} {}: {e}", at.display()))
}

/// `losetup` with `args`; its output, or what it said.
fn losetup(args: &[&std::ffi::OsStr], image: &Path) -> Result<String> {
    let out = std::process::Command::new("losetup")
        .args(args)
        .output()
        .map_err(|e| failed("attaching a workspace disk", image, e))?;
    if !out.status.success() {
        // `losetup` names the image itself.
        return Err(Error::Internal(format!(
            "attaching a workspace disk: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The image's ext4 filesystem on `device`, mounted nowhere. `discard`: what the workspace
/// deletes goes back to the host's disk. `noinit_itable`: the image is a sparse copy of a fresh
/// template, so its unused inode tables already read as zeros; the kernel would otherwise write
/// them all in the background, turning holes into blocks. No set-uid, no devices, no atime.
fn mount_detached(device: &Path) -> Result<OwnedFd> {
    let fs = fsopen("ext4", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(|e| failed("mounting the workspace disk on", device, e))?;
    let configured = (|| {
        fsconfig_set_string(&fs, "source", device)?;
        fsconfig_set_flag(&fs, "discard")?;
        fsconfig_set_flag(&fs, "noinit_itable")?;
        fsconfig_create(&fs)
    })();
    configured.map_err(|e| failed("mounting the workspace disk on", device, e))?;
    fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOATIME,
    )
    .map_err(|e| failed("mounting the workspace disk on", device, e))
}

/// `image` mounted nowhere, on a loop device that goes with its last unmount. Blocking.
pub fn open(image: &Path) -> Result<OwnedFd> {
    let device = PathBuf::from(losetup(
        &["--find".as_ref(), "--show".as_ref(), image.as_os_str()],
        image,
    )?);
    let mounted = mount_detached(&device);
    // Detached while the filesystem holds it, the device is set to clear itself once that
    // goes; not mounted, it is detached now.
    let detached = losetup(&["--detach".as_ref(), device.as_os_str()], image);
    let mount = mounted?;
    detached?;
    Ok(mount)
}

/// Detaches every loop device whose image is under `dir` (read from sysfs, no scan of the
/// mount table). One holding a mounted filesystem is only set to go with its last unmount.
pub fn detach_backed_by(dir: &Path) {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return;
    };
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n');
        let file = Path::new(backing.strip_suffix(" (deleted)").unwrap_or(backing));
        if file.starts_with(&dir) {
            let device = Path::new("/dev").join(&name);
            if let Err(e) = losetup(&["--detach".as_ref(), device.as_os_str()], file) {
                tracing::warn!("detaching a spare disk left by an earlier server: {e}");
            }
        }
    }
}

/// Whether the kernel has the mount API ([`open`] needs it: 5.2 and later).
pub fn detached_mounts() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        !matches!(
            fsopen("ext4", FsOpenFlags::FSOPEN_CLOEXEC),
            Err(rustix::io::Errno::NOSYS)
        )
    })
}

/// Mounts `image` at `at` ([`open`], then [`place`]; `mount -o loop` on a kernel without the
/// mount API).
pub async fn mount_at(image: &Path, at: &Path) -> Result<()> {
    if !detached_mounts() {
        return mount_command(image, at).await;
    }
    let (image, at) = (image.to_path_buf(), at.to_path_buf());
    tokio::task::spawn_blocking(move || place(&open(&image)?, &at))
        .await
        .map_err(|e| Error::Internal(format!("mounting a workspace disk: {e}")))?
}

/// `mount -o loop`: the image bound to a loop device set to free itself, and mounted.
async fn mount_command(image: &Path, at: &Path) -> Result<()> {
    let out = tokio::process::Command::new("mount")
        .args([
            "-t",
            "ext4",
            "-o",
            "loop,discard,nosuid,nodev,noatime,noinit_itable",
        ])
        .arg(image)
        .arg(at)
        .output()
        .await
        .map_err(|e| failed("attaching a workspace disk", image, e))?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "attaching a workspace disk: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Unmounts what an older server that died while staging a disk left at `staging`, and removes
/// it.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn backing(device: &Path) -> Option<String> {
        let name = device.file_name()?;
        std::fs::read_to_string(Path::new("/sys/block").join(name).join("loop/backing_file")).ok()
    }

    /// A server killed between attaching a spare's image and mounting it leaves the loop device
    /// attached (no filesystem holds it, so nothing clears it); the next sweep of that spares
    /// directory detaches it, and no other device.
    #[test]
    fn a_device_left_attached_to_a_spare_is_detached_by_the_sweep() {
        if !nix::unistd::geteuid().is_root() {
            let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
            assert!(!required, "the loop device test needs root");
            eprintln!("skipped: the loop device test needs root");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let spares = t.path().join("spare-1048576");
        std::fs::create_dir_all(&spares).unwrap();
        let attach = |image: &Path| {
            std::fs::File::create(image)
                .unwrap()
                .set_len(1 << 20)
                .unwrap();
            PathBuf::from(
                losetup(
                    &["--find".as_ref(), "--show".as_ref(), image.as_os_str()],
                    image,
                )
                .unwrap(),
            )
        };
        let left = attach(&spares.join("left.img"));
        let other = attach(&t.path().join("not-a-spare.img"));
        // As the next process finds it: the image already unlinked.
        std::fs::remove_file(spares.join("left.img")).unwrap();
        assert!(backing(&left).is_some());
        detach_backed_by(&spares);
        // The kernel lets go once the last opener (udev may probe it) closes it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while backing(&left).is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let still = backing(&other);
        let _ = losetup(&["--detach".as_ref(), other.as_os_str()], &other);
        assert_eq!(backing(&left), None, "the spare's device is still attached");
        assert!(
            still.is_some_and(|b| b.contains("not-a-spare.img")),
            "a device outside the spares directory was detached"
        );
    }
}
