//! Per-workspace disks: each workspace's writable layer, overlay work directory and the host
//! directories bound into it (its agent's socket directory, its X socket directory) live on an
//! ext4 filesystem of their own, a sparse image file of the workspace's size, loop-mounted at
//! `workspaces/<id>/disk`. Writes past it fail with `ENOSPC` inside that workspace only; `df`
//! inside shows its size (overlayfs reports its writable layer's filesystem); the host's data
//! disk and the database never fill up from a workspace.
//!
//! Images are copies of a template formatted once per size (a copy of its few hundred KiB of
//! metadata, holes kept). A start takes a spare made ahead of need ([`pool`]): a rename and a
//! `move_mount`. The disk stays mounted while its layer is kept (a suspended session); the next
//! start mounts it again if the host rebooted meanwhile.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;
use std::sync::Mutex;

use nix::unistd::Whence;
use tokio::process::Command;

use super::loop_device;
use crate::{Error, Result};

#[path = "disk_pool.rs"]
mod pool;
pub use pool::{
    BURST_SPAN, DEMAND_WINDOW, MAX_SPARES, SPARES, hold, keep_grown_pool_for, let_go, spares,
    spares_dir, spares_wanted, trim_pending,
};
use pool::{refill, take_spare};

/// The smallest disk a workspace can have (ext4 and its journal need room).
pub const MIN_BYTES: i64 = 64 << 20;

/// File name of a workspace's image and of its mount point, in its directory.
pub const IMAGE: &str = "disk.img";
pub const MOUNT: &str = "disk";

/// Why this host cannot give workspaces disks of their own, if it cannot.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("workspace disks need root (loop devices, mounts)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("the kernel has no loop devices (/dev/loop-control; modprobe loop)".into());
    }
    for (bin, pkg) in [("mkfs.ext4", "e2fsprogs"), ("losetup", "mount")] {
        let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(bin).exists());
        if !found {
            return Some(format!("{bin} is not installed (apt-get install {pkg})"));
        }
    }
    None
}

async fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .await
        .map_err(|e| Error::Internal(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The formatted, empty template of `bytes` under `dir`, made once. Every new disk is a copy
/// of it, so what it holds is written at every start: 328 KiB for a 20 GiB disk, where
/// mkfs's defaults held 4.4 MiB — 4.1 of it the blocks reserved for growing the filesystem
/// online (`resize_inode`), which a workspace's disk never does.
async fn template(dir: &Path, bytes: i64) -> Result<PathBuf> {
    let path = dir.join(format!("ext4-{bytes}-v2.img"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".ext4-{bytes}-{}.img",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::File::create(&tmp)?.set_len(bytes as u64)?;
    // Lazy inode tables and journal: formatting writes a few hundred KiB, whatever the size.
    // No blocks reserved for root: the workspace's root is who fills it.
    let made = run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-O", "^resize_inode", "-E"])
            .arg("lazy_itable_init=1,lazy_journal_init=1,nodiscard")
            .arg(&tmp),
        "formatting a workspace disk",
    )
    .await;
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // Another start may have made it meanwhile; either copy is the same.
    std::fs::rename(&tmp, &path)?;
    // Templates of an earlier release (mkfs's defaults), of any size: no start copies them now.
    for old in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = old.file_name();
        let name = name.to_string_lossy();
        let size = name
            .strip_prefix("ext4-")
            .and_then(|n| n.strip_suffix(".img"));
        if size.is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            let _ = std::fs::remove_file(old.path());
        }
    }
    Ok(path)
}

fn same_filesystem(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// Copies `from` to `to` keeping its holes (only the data extents are read and written).
fn copy_sparse(from: &Path, to: &Path) -> Result<()> {
    let mut src = std::fs::File::open(from)?;
    let len = src.metadata()?.len();
    let mut dst = std::fs::File::create(to)?;
    dst.set_len(len)?;
    let mut pos: i64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    while (pos as u64) < len {
        let data = match nix::unistd::lseek(&src, pos, Whence::SeekData) {
            Ok(d) => d,
            Err(nix::errno::Errno::ENXIO) => break,
            Err(e) => return Err(Error::Internal(format!("reading a disk template: {e}"))),
        };
        let hole = nix::unistd::lseek(&src, data, Whence::SeekHole)
            .map_err(|e| Error::Internal(format!("reading a disk template: {e}")))?;
        src.seek(SeekFrom::Start(data as u64))?;
        dst.seek(SeekFrom::Start(data as u64))?;
        let mut left = (hole - data) as usize;
        while left > 0 {
            let want = left.min(buf.len());
            let n = src.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n])?;
            left -= n;
        }
        pos = hole;
    }
    dst.sync_all()?;
    Ok(())
}

/// Copies the contents of directory `from` into directory `to` (made if missing), keeping
/// owners, modes, links, extended attributes and overlay whiteouts: a layer moved between
/// disks.
pub async fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    let mut src = from.as_os_str().to_owned();
    src.push("/.");
    run(
        Command::new("cp")
            .args(["-a", "--reflink=auto", "--"])
            .arg(src)
            .arg(to),
        "copying a workspace layer",
    )
    .await
    .map(drop)
}

/// True if a loop device still serves `image`.
fn attached(image: &Path) -> bool {
    let Ok(image) = std::fs::canonicalize(image) else {
        return false;
    };
    let Ok(devices) = std::fs::read_dir("/sys/block") else {
        return false;
    };
    devices.flatten().any(|d| {
        std::fs::read_to_string(d.path().join("loop/backing_file"))
            .is_ok_and(|f| Path::new(f.trim()) == image.as_path())
    })
}

/// True if `target` is a mount point.
pub fn is_mounted(target: &Path) -> bool {
    loop_device::is_mount_point(target)
}

/// One at a time per workspace directory: two starts of one workspace must not attach its
/// image twice. Starts of different workspaces do not wait for each other.
async fn one_at_a_time(dir: &Path) -> tokio::sync::OwnedMutexGuard<()> {
    static HELD: Mutex<BTreeMap<PathBuf, std::sync::Weak<tokio::sync::Mutex<()>>>> =
        Mutex::new(BTreeMap::new());
    let lock = {
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, w| w.strong_count() > 0);
        match held.get(dir).and_then(std::sync::Weak::upgrade) {
            Some(l) => l,
            None => {
                let l = std::sync::Arc::new(tokio::sync::Mutex::new(()));
                held.insert(dir.to_path_buf(), std::sync::Arc::downgrade(&l));
                l
            }
        }
    };
    lock.lock_owned().await
}

/// Makes sure workspace directory `dir` has its disk of `bytes` mounted at `dir/disk`: a
/// ready spare (or a copy of the template) when it has none, its own mounted again when it has
/// one (its size then stays).
pub async fn ensure(dir: &Path, templates: &Path, bytes: i64) -> Result<PathBuf> {
    let _one = one_at_a_time(dir).await;
    let mnt = dir.join(MOUNT);
    let image = dir.join(IMAGE);
    if !image.exists() && !is_mounted(&mnt) {
        // A new workspace: nothing of it is attached yet.
        std::fs::create_dir_all(&mnt)?;
        let bytes = bytes.max(MIN_BYTES);
        let template = template(templates, bytes).await?;
        // Spares are renamed into place: only where both are on one filesystem.
        let pooled = same_filesystem(dir, templates);
        if pooled {
            pool::ask(&spares_dir(templates, bytes));
        }
        let taken = pooled && take_spare(templates, bytes, &image, &mnt);
        if pooled {
            refill(templates, bytes, template.clone());
        }
        if taken {
            return Ok(mnt);
        }
        let tmp = dir.join(".disk.img.new");
        let (t, n) = (template, tmp.clone());
        tokio::task::spawn_blocking(move || copy_sparse(&t, &n))
            .await
            .map_err(|e| Error::Internal(format!("copying a disk template: {e}")))??;
        std::fs::rename(&tmp, &image)?;
        return mount_at(&image, &mnt).await;
    }
    if is_mounted(&mnt) {
        return Ok(mnt);
    }
    std::fs::create_dir_all(&mnt)?;
    // The kernel lets go of a loop device after its unmount in the background: wait for that
    // (briefly). One still attached after that is in use (a lazy unmount), and mounting it a
    // second time would corrupt it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while attached(&image) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    if attached(&image) {
        return Err(Error::Conflict(format!(
            "the workspace's disk {} is still in use by a process of the host; try again once it has exited",
            image.display()
        )));
    }
    mount_at(&image, &mnt).await
}

async fn mount_at(image: &Path, mnt: &Path) -> Result<PathBuf> {
    loop_device::mount_at(image, mnt).await?;
    Ok(mnt.to_path_buf())
}

/// Unmounts workspace directory `dir`'s disk (its device goes with it); fine if it has none.
pub fn unmount(dir: &Path) -> Result<()> {
    super::overlay::unmount(&dir.join(MOUNT))
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
