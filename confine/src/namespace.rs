//! The mount namespace the host runs its container runtime in (`--hold-mount-ns`,
//! `--in-mount-ns`): a copy of the host's mount table made once, private, without the
//! workspaces' own mounts, so the runtime's work at every call (its namespace copies, its reads
//! of the mount table, `pivot_root`'s detach of the old root) stays the same size however many
//! workspaces run. What one call needs from the host's table (a workspace's root, its disk, its
//! network namespace) it carries in: cloned on the host's side, attached in a throwaway copy.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};

use super::{UNIFIED, fail, run};

/// `--hold-mount-ns [--without-cgroup2] [--drop-under DIR]`: makes the namespace (every mount
/// private, the cgroup2 mount gone if asked, every mount under `DIR` gone), prints `ready`, and
/// holds it until its stdin closes — the host opens `/proc/<pid>/ns/mnt` meanwhile and keeps
/// that, which keeps the namespace.
pub fn hold(args: &[OsString]) -> ! {
    let mut without_cgroup2 = false;
    let mut drop_under = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--without-cgroup2") => without_cgroup2 = true,
            Some("--drop-under") => match it.next() {
                Some(d) => drop_under = Some(PathBuf::from(d)),
                None => fail("--drop-under needs a directory"),
            },
            _ => fail(&format!(
                "--hold-mount-ns: unknown flag {}",
                a.to_string_lossy()
            )),
        }
    }
    if let Err(e) = unshare(CloneFlags::CLONE_NEWNS) {
        fail(&format!("a mount namespace of its own: {e}"));
    }
    // Private: nothing mounted on the host later (a workspace's disk) shows here, and nothing
    // done here reaches the host.
    private_all(fail);
    if without_cgroup2 {
        unmount(Path::new(UNIFIED));
    }
    // Every workspace's mounts go — this host's (under `DIR`) and any other Tandem server's
    // (a root or disk at `…/workspaces/<id>/{rootfs,disk}`, a network namespace bound at
    // `/run/netns/tdm-…`): a copy here would hold them (a loop device, a network) after their
    // workspace stopped. Nothing else: the runtime needs the rest. Deepest first; what a
    // running workspace holds lives on in its own namespace.
    let workspace_mounts = || -> Vec<PathBuf> {
        mounts()
            .into_iter()
            .filter(|m| is_workspace_mount(m, drop_under.as_deref()))
            .collect()
    };
    // Again while that makes progress: a host that stops workspaces meanwhile can leave one
    // that a pass could not reach by its path (its directory going on the host).
    let mut left = workspace_mounts();
    for _ in 0..4 {
        if left.is_empty() {
            break;
        }
        left.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
        for m in &left {
            // Whatever refuses is listed below.
            let _ = umount2(m, MntFlags::MNT_DETACH);
        }
        let now = workspace_mounts();
        if now.len() >= left.len() {
            left = now;
            break;
        }
        left = now;
    }
    // What stays only holds its filesystem until the server stops: said, not fatal.
    for m in &left {
        eprintln!(
            "tandem-confine: {} stays in the runtime's mount namespace",
            m.display()
        );
    }
    let mut out = std::io::stdout();
    if out
        .write_all(b"ready\n")
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0)
}

/// `--in-mount-ns NSFILE [--carry PATH]... -- COMMAND [ARG...]`: runs `COMMAND` in a throwaway
/// copy of the namespace `NSFILE` names, with each `PATH`'s mount tree (taken from this
/// process's own namespace first) attached at the same path. It exits `LAUNCHER_BROKEN` when the
/// namespace cannot be used, 126 when a carried mount cannot be brought in.
pub fn enter(args: &[OsString], command: &[OsString]) -> ! {
    let Some((ns, rest)) = args.split_first() else {
        broken("--in-mount-ns needs the namespace's file")
    };
    let mut carried = Vec::new();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match (a.to_str(), it.next()) {
            (Some("--carry"), Some(path)) => {
                let flags = OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE;
                match open_tree(rustix::fs::CWD, path.as_os_str(), flags) {
                    Ok(tree) => carried.push((PathBuf::from(path), tree)),
                    // This start's own mount, not the namespace: the runtime's failure.
                    Err(e) => fail(&format!("taking {}: {e}", path.to_string_lossy())),
                }
            }
            _ => broken(&format!("unknown flag {}", a.to_string_lossy())),
        }
    }
    // `/proc/<pid>/fd/<n>` is the server's own descriptor, so the server must be this
    // process's parent still: a reused pid is another process's descriptor.
    let owner = ns.to_str().and_then(|p| {
        p.strip_prefix("/proc/")?
            .split('/')
            .next()?
            .parse::<u32>()
            .ok()
    });
    if owner.is_some_and(|pid| pid != std::os::unix::process::parent_id()) {
        broken("the server that holds it is gone");
    }
    let file = std::fs::File::open(ns)
        .unwrap_or_else(|e| broken(&format!("opening {}: {e}", ns.to_string_lossy())));
    if let Err(e) = setns(&file, CloneFlags::CLONE_NEWNS) {
        broken(&format!("joining {}: {e}", ns.to_string_lossy()));
    }
    drop(file);
    // A copy of its own: what is carried in goes with this process's namespace (the runtime's
    // workspaces keep their own copies), never into the shared one.
    if let Err(e) = unshare(CloneFlags::CLONE_NEWNS) {
        broken(&format!("a copy of its own: {e}"));
    }
    for (path, tree) in &carried {
        let at = move_mount(
            tree,
            "",
            rustix::fs::CWD,
            path.as_os_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        );
        if let Err(e) = at {
            fail(&format!("attaching {}: {e}", path.display()));
        }
    }
    // What came in may be the host's shared mounts' peers: private, so the runtime's own
    // unmounts (its old root after `pivot_root`) reach no other copy.
    private_all(broken);
    run(command)
}

/// Every mount private; `or` says why not.
fn private_all(or: fn(&str) -> !) {
    if let Err(e) = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    ) {
        or(&format!("making the mounts private: {e}"));
    }
}

fn broken(what: &str) -> ! {
    eprintln!("tandem-confine: the runtime's mount namespace: {what}; the command was not run");
    std::process::exit(tandem_confine::LAUNCHER_BROKEN)
}

fn unmount(path: &Path) {
    match umount2(path, MntFlags::MNT_DETACH) {
        // Not mounted here (any more): nothing to hide.
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => fail(&format!("unmounting {}: {e}", path.display())),
    }
}

/// True for a workspace's mount: under `under`, a Tandem workspace's root or disk, or a
/// network namespace Tandem bound for one.
fn is_workspace_mount(point: &Path, under: Option<&Path>) -> bool {
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let parent = point.parent();
    under.is_some_and(|d| point.starts_with(d) && point != d)
        || (matches!(name(Some(point)).as_str(), "rootfs" | "disk")
            && name(parent.and_then(Path::parent)) == "workspaces")
        || (name(Some(point)).starts_with("tdm-") && name(parent) == "netns")
}

/// Every mount point of this namespace: the fifth field of `/proc/self/mountinfo`, with the
/// kernel's octal escapes of space, tab, newline and backslash undone.
fn mounts() -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let info = std::fs::read("/proc/self/mountinfo")
        .unwrap_or_else(|e| fail(&format!("reading the mount table: {e}")));
    info.split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape(field))))
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn only_workspaces_mounts_are_dropped() {
        let under = Some(Path::new("/srv/tandem/workspaces"));
        for p in [
            "/srv/tandem/workspaces/w1/disk",
            "/srv/tandem/workspaces/w1/rootfs/proc",
            "/tmp/other/data/workspaces/w2/rootfs",
            "/tmp/other/data/workspaces/w2/disk",
            "/run/netns/tdm-w3",
            "/var/run/netns/tdm-w3",
        ] {
            assert!(super::is_workspace_mount(Path::new(p), under), "{p}");
        }
        for p in [
            "/",
            "/srv/tandem/workspaces",
            "/srv/tandem",
            "/snap/core/1",
            "/var/lib/docker/overlay2/x/merged",
            "/home/me/disk",
            "/run/netns/mine",
            "/run/user/1000",
        ] {
            assert!(!super::is_workspace_mount(Path::new(p), under), "{p}");
        }
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(super::unescape(br"/a\040b\011c\134d"), b"/a b\tc\\d");
        assert_eq!(super::unescape(br"/plain\9"), b"/plain\\9");
    }
}
