//! Per-workspace disks: each workspace's writable layer, overlay work directory and the host
//! directories bound into it (its agent's socket directory, its X socket directory) live on an
//! ext4 filesystem of their own, a sparse image file of the workspace's size, loop-mounted at
//! `workspaces/<id>/disk`. Writes past it fail with `ENOSPC` inside that workspace only; `df`
//! inside shows its size (overlayfs reports its writable layer's filesystem); the host's data
//! disk and the database never fill up from a workspace.
//!
//! Images are copies of a template formatted once per size (a copy of its few hundred KiB of
//! metadata, holes kept). Spares of each size are made ahead of need, in the background after
//! each start takes one: copied, attached to a loop device and mounted detached
//! ([`loop_device`]), so a start costs a rename and a `move_mount`. How many: at least
//! [`SPARES`], and as many as the busiest [`BURST_SPAN`] of the last [`DEMAND_WINDOW`] asked
//! for (up to [`MAX_SPARES`] of all sizes), so a burst like the last one finds its disks made;
//! they are made one after another while starts go on. A grown pool is kept until its runtime
//! goes. The disk stays mounted
//! while its layer is kept (a suspended session); the next start mounts it again if the host
//! rebooted meanwhile.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::unistd::Whence;
use tokio::process::Command;

use super::loop_device;
use crate::{Error, Result};

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

/// Disks of each size kept ready for the next starts: copied from the template, attached to a
/// loop device and mounted detached ([`loop_device`]), so a start renames one and moves its
/// mount into place.
pub const SPARES: usize = 2;

/// Most spares of all sizes together, whatever the demand (each holds a loop device and a
/// mounted filesystem: about 1 MiB of kernel memory).
pub const MAX_SPARES: usize = 64;
/// How far back the starts count towards the pool's size.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(600);
/// The span a burst is counted over: the pool holds as many as the most disks asked for within
/// one such span in the last [`DEMAND_WINDOW`].
pub const BURST_SPAN: Duration = Duration::from_secs(10);

/// When new disks of one size were asked for (the last [`DEMAND_WINDOW`]).
#[derive(Default)]
struct Demand {
    asked: VecDeque<Instant>,
}

impl Demand {
    fn ask(&mut self, at: Instant) {
        self.forget(at);
        if self.asked.len() >= 4 * MAX_SPARES * 60 {
            self.asked.pop_front();
        }
        self.asked.push_back(at);
    }

    fn forget(&mut self, now: Instant) {
        while self
            .asked
            .front()
            .is_some_and(|t| now.duration_since(*t) > DEMAND_WINDOW)
        {
            self.asked.pop_front();
        }
    }

    /// How many spares to keep: the most asked for within one [`BURST_SPAN`], within bounds.
    fn wanted(&mut self, now: Instant) -> usize {
        self.forget(now);
        let mut most = 0;
        let mut from = 0;
        for (i, t) in self.asked.iter().enumerate() {
            while t.duration_since(self.asked[from]) > BURST_SPAN {
                from += 1;
            }
            most = most.max(i + 1 - from);
        }
        most.clamp(SPARES, MAX_SPARES)
    }
}

static DEMAND: Mutex<BTreeMap<PathBuf, Demand>> = Mutex::new(BTreeMap::new());

fn demand() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Demand>> {
    DEMAND.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many spares of `bytes` are kept for the demand seen now: [`SPARES`] at least.
pub fn spares_wanted(templates: &Path, bytes: i64) -> usize {
    demand()
        .entry(spares_dir(templates, bytes))
        .or_default()
        .wanted(Instant::now())
}

/// Where the spare copies of the template of `bytes` wait.
pub fn spares_dir(templates: &Path, bytes: i64) -> PathBuf {
    templates.join(format!("spare-{bytes}"))
}

/// A spare disk, mounted nowhere yet; dropping it unmounts it and frees its loop device.
struct Ready {
    image: PathBuf,
    mount: OwnedFd,
}

/// This process's ready spares, by [`spares_dir`]. Only the process that mounted a spare may
/// hand it out: its mount lives in that process's file descriptor.
static READY: Mutex<BTreeMap<PathBuf, Vec<Ready>>> = Mutex::new(BTreeMap::new());

fn ready() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Vec<Ready>>> {
    READY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The images of the spare disks of `bytes` ready now (attached and mounted, in this process).
pub fn spares(templates: &Path, bytes: i64) -> Vec<PathBuf> {
    ready()
        .get(&spares_dir(templates, bytes))
        .map(|r| r.iter().map(|r| r.image.clone()).collect())
        .unwrap_or_default()
}

/// How many runtimes use the disk templates under each directory: spares are kept only while
/// one does.
static OWNERS: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

fn owners() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, usize>> {
    OWNERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime gives its workspaces disks from `templates` (until [`let_go`]).
/// The first one in this process clears what a process that died left in the spares
/// directories (staging mounts, images).
pub fn hold(templates: &Path) {
    let first = {
        let mut o = owners();
        let n = o.entry(templates.to_path_buf()).or_default();
        *n += 1;
        *n == 1
    };
    if first {
        let dirs = std::fs::read_dir(templates).into_iter().flatten().flatten();
        for dir in dirs.filter(|d| d.file_name().to_string_lossy().starts_with("spare-")) {
            // Not where a refill of an earlier runtime here is still making one.
            let refilling = REFILLING.lock().unwrap_or_else(|p| p.into_inner());
            if !refilling.contains(&dir.path()) {
                sweep(&dir.path());
            }
        }
    }
}

/// Removes what is left in spares directory `dir`: staging points (unmounted), images, and loop
/// devices an earlier process attached to them but died before mounting (nothing clears those).
fn sweep(dir: &Path) {
    loop_device::detach_backed_by(dir);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "staging") {
            loop_device::clear_staging(&e.path());
        } else {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A runtime that used `templates` goes away; the last one's ready spares are unmounted (and a
/// refill still running keeps none).
pub fn let_go(templates: &Path) {
    let gone: Vec<Vec<Ready>> = {
        // Held while the spares are drained: a refill keeps a spare only under this lock.
        let mut o = owners();
        match o.get_mut(templates) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return;
            }
            _ => {
                o.remove(templates);
            }
        }
        let mut r = ready();
        let dirs: Vec<PathBuf> = r
            .keys()
            .filter(|d| d.starts_with(templates))
            .cloned()
            .collect();
        dirs.iter().filter_map(|d| r.remove(d)).collect()
    };
    for spare in gone.into_iter().flatten() {
        let _ = std::fs::remove_file(&spare.image);
    }
}

/// Takes a ready spare of `bytes`: its image renamed to `to`, its filesystem mounted at
/// `at`. False when there is none (or it is on another filesystem).
fn take_spare(templates: &Path, bytes: i64, to: &Path, at: &Path) -> bool {
    let dir = spares_dir(templates, bytes);
    loop {
        let Some(spare) = ready().get_mut(&dir).and_then(Vec::pop) else {
            return false;
        };
        // A spare that cannot move is dropped (unmounted); the next one may.
        if std::fs::rename(&spare.image, to).is_err() {
            let _ = std::fs::remove_file(&spare.image);
            continue;
        }
        match loop_device::place(&spare.mount, at) {
            Ok(()) => return true,
            Err(e) => {
                tracing::warn!("placing a spare workspace disk: {e}");
                drop(spare);
                let _ = std::fs::remove_file(to);
                return false;
            }
        }
    }
}

fn same_filesystem(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// The spares directories a refill is under way for, in this process.
static REFILLING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Makes spare disks of `template` until as many as the demand wants ([`spares_wanted`]) are
/// ready, in the background; one refill per size at a time, one disk after another, whether or
/// not starts are under way (under a steady stream of starts a pool that waited for a pause
/// would stay empty, and each start would make its own disk); all sizes together hold at most
/// [`MAX_SPARES`]. A pool grown for a burst is kept (the next burst may be like it) until its
/// runtime goes. What an earlier process left in the spares directory is removed first.
fn refill(templates: &Path, bytes: i64, template: PathBuf) {
    static SWEPT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let refilling = || REFILLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = spares_dir(templates, bytes);
    if !refilling().insert(dir.clone()) {
        return;
    }
    /// Ends this size's refill however its task ends (a runtime shut down cancels it).
    struct Refilling(PathBuf);
    impl Drop for Refilling {
        fn drop(&mut self) {
            REFILLING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.0);
        }
    }
    let templates = templates.to_path_buf();
    // Made before the task: a task dropped before it first runs still ends the refill.
    let refilling_guard = Refilling(dir.clone());
    tokio::spawn(async move {
        let refilling_guard = refilling_guard;
        let made = std::fs::create_dir_all(&dir);
        if SWEPT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.clone())
        {
            sweep(&dir);
        }
        if made.is_err() {
            return;
        }
        loop {
            // Decided under the refill's own lock: a start that asks for a refill after this
            // finds either the refill going on or none (and starts one).
            {
                let mut r = refilling();
                let want = demand()
                    .entry(dir.clone())
                    .or_default()
                    .wanted(Instant::now());
                let (have, all) = {
                    let ready = ready();
                    let all: usize = ready.values().map(Vec::len).sum();
                    (ready.get(&dir).map_or(0, Vec::len), all)
                };
                if !owners().contains_key(&templates)
                    || have >= want
                    || (have >= SPARES && all >= MAX_SPARES)
                {
                    r.remove(&dir);
                    std::mem::forget(refilling_guard);
                    return;
                }
            };
            let name = uuid::Uuid::new_v4().simple().to_string();
            let (tmp, image) = (
                dir.join(format!(".{name}.new")),
                dir.join(format!("{name}.img")),
            );
            let (t, i) = (template.clone(), image.clone());
            let spare = tokio::task::spawn_blocking(move || {
                copy_sparse(&t, &tmp)?;
                std::fs::rename(&tmp, &i)?;
                loop_device::open(&i)
            })
            .await
            .map_err(|e| Error::Internal(format!("making a spare disk: {e}")))
            .and_then(|r| r);
            match spare {
                Ok(mount) => {
                    // Kept only while its runtime is there ([`let_go`] drains under this lock).
                    let owners = owners();
                    if owners.contains_key(&templates) {
                        ready()
                            .entry(dir.clone())
                            .or_default()
                            .push(Ready { image, mount });
                    } else {
                        drop(owners);
                        drop(mount);
                        let _ = std::fs::remove_file(&image);
                    }
                }
                Err(e) => {
                    tracing::warn!("making a spare workspace disk: {e}");
                    let _ = std::fs::remove_file(dir.join(format!(".{name}.new")));
                    let _ = std::fs::remove_file(&image);
                    return;
                }
            }
        }
    });
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
            demand()
                .entry(spares_dir(templates, bytes))
                .or_default()
                .ask(Instant::now());
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
