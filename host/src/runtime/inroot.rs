//! Creating bind targets inside a workspace's merged root without following what workspace
//! code planted there: every path is resolved with `openat2(RESOLVE_IN_ROOT)`, so a symlink
//! (absolute or `..`-laden) in a resumed or forked layer, or in a snapshot's `setup` output,
//! resolves inside the root — the same resolution the runtime uses when it mounts — and never
//! makes root create a file or directory on the host.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat, openat2};
use nix::sys::stat::{Mode, mkdirat};

use crate::{Error, Result};

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS)
}

fn fail(what: &str, path: &Path, e: Errno) -> Error {
    Error::Invalid(format!(
        "the workspace's {what} {} cannot be prepared: {e}",
        path.display()
    ))
}

/// `path` (absolute, inside the container) as its plain components; `..` and the like refused.
fn parts(path: &Path) -> Result<Vec<PathBuf>> {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .map(|c| match c {
            Component::Normal(n) => Ok(PathBuf::from(n)),
            _ => Err(Error::Invalid(format!(
                "bind target {} is not a plain path",
                path.display()
            ))),
        })
        .collect()
}

/// Opens the directory `rel` of the root `root_fd`, resolved inside the root.
fn open_dir(root_fd: &OwnedFd, rel: &Path) -> std::result::Result<OwnedFd, Errno> {
    if rel.as_os_str().is_empty() {
        return root_fd.try_clone().map_err(|_| Errno::EBADF);
    }
    openat2(
        root_fd.as_fd(),
        rel,
        how(OFlag::O_PATH | OFlag::O_DIRECTORY),
    )
}

/// Makes sure `target` exists inside `root` (a directory when `dir`, else an empty file),
/// creating what is missing, every step resolved inside the root. What it creates belongs to
/// `owner` (uid = gid; the workspace's root under a user namespace), else to the host's root.
pub fn ensure(root: &Path, target: &Path, dir: bool, owner: Option<u32>) -> Result<()> {
    let root_fd = open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail("root", root, e))?;
    let parts = parts(target)?;
    let Some((last, parents)) = parts.split_last() else {
        return Ok(());
    };
    let mut prefix = PathBuf::new();
    for p in parents {
        make_dir(&root_fd, &prefix, p, target, owner)?;
        prefix.push(p);
    }
    if dir {
        return make_dir(&root_fd, &prefix, last, target, owner);
    }
    let parent = open_dir(&root_fd, &prefix).map_err(|e| fail("bind target", target, e))?;
    // Resolved inside the root, an existing entry (a symlink too) is fine: the runtime resolves
    // it the same way. A new one is created here, never through a link.
    match openat2(root_fd.as_fd(), &prefix.join(last), how(OFlag::O_PATH)) {
        Ok(_) => Ok(()),
        Err(Errno::ENOENT) => openat(
            parent.as_fd(),
            last.as_path(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .and_then(|_| give(&parent, last, owner))
        .map_err(|e| fail("bind target", target, e)),
        Err(e) => Err(fail("bind target", target, e)),
    }
}

/// Makes `prefix/name` a directory inside the root unless it resolves to one already.
fn make_dir(
    root_fd: &OwnedFd,
    prefix: &Path,
    name: &Path,
    target: &Path,
    owner: Option<u32>,
) -> Result<()> {
    let full = prefix.join(name);
    match open_dir(root_fd, &full) {
        Ok(_) => return Ok(()),
        Err(Errno::ENOENT) => {}
        Err(e) => return Err(fail("bind target", target, e)),
    }
    let parent = open_dir(root_fd, prefix).map_err(|e| fail("bind target", target, e))?;
    // `mkdirat` never follows a link at its last component: a dangling symlink there is EEXIST.
    match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o755)) {
        Ok(()) => give(&parent, name, owner).map_err(|e| fail("bind target", target, e))?,
        Err(Errno::EEXIST) => {}
        Err(e) => return Err(fail("bind target", target, e)),
    }
    open_dir(root_fd, &full)
        .map(drop)
        .map_err(|e| fail("bind target", target, e))
}

/// Gives the entry `name` of `parent` (just created, never a link) to `owner`.
fn give(parent: &OwnedFd, name: &Path, owner: Option<u32>) -> std::result::Result<(), Errno> {
    let Some(id) = owner else {
        return Ok(());
    };
    nix::unistd::fchownat(
        parent.as_fd(),
        name,
        Some(id.into()),
        Some(id.into()),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
}

#[cfg(test)]
mod tests {
    use super::ensure;

    #[test]
    fn planted_symlinks_resolve_inside_the_root() {
        let host = tempfile::tempdir().unwrap();
        let root = host.path().join("root");
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("srv")).unwrap();
        let outside = host.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        // Links to a host directory (absolute), up and out (`..`), to a host file, and to a
        // directory that exists inside the root under the same absolute name.
        std::os::unix::fs::symlink(&outside, root.join("run/tandem")).unwrap();
        std::os::unix::fs::symlink("../../../..", root.join("up")).unwrap();
        std::os::unix::fs::symlink(outside.join("hosts"), root.join("hosts")).unwrap();
        std::os::unix::fs::symlink("/srv", root.join("data")).unwrap();

        // Resolved inside the root, the host directory is not there: refused, nothing made.
        ensure(&root, "/run/tandem/agent".as_ref(), true, None).unwrap_err();
        ensure(&root, "/hosts".as_ref(), false, None).unwrap_err();
        // `..` stops at the root; `/srv` is the root's.
        ensure(&root, "/up/escaped".as_ref(), true, None).unwrap();
        ensure(&root, "/data/agent".as_ref(), true, None).unwrap();
        ensure(&root, "/etc/created".as_ref(), false, None).unwrap();

        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing was made outside the root"
        );
        assert!(!host.path().join("escaped").exists());
        assert!(root.join("escaped").is_dir(), "`..` stops at the root");
        assert!(root.join("srv/agent").is_dir());
        assert!(root.join("etc/created").is_file());
        ensure(&root, "/../x".as_ref(), true, None).unwrap_err();
    }
}
