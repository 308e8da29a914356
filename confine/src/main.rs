//! `tandem-confine FILTER -- COMMAND [ARG...]`: installs the seccomp programs in `FILTER` (the
//! workspace's profile, compiled once on the host; see the library) and then runs `COMMAND` in
//! its place, under them. Every process of a workspace starts this way — its init and every
//! `exec`'d command — so none runs a single instruction of workspace code unfiltered. It fails
//! closed: a filter it cannot read or install means the command does not run (exit 126).
//!
//! The host installs it execute-only (mode 0711, owned by a user the workspace does not map):
//! the kernel then marks the process non-dumpable from its `execve`, so workspace code cannot
//! attach to it with `ptrace` before the filter is in.
//!
//! `tandem-confine --without-cgroup2 -- COMMAND [ARG...]` is for the host, not workspaces: it
//! runs `COMMAND` in a mount namespace of its own without the cgroup2 mount of a hybrid cgroup
//! host (`/sys/fs/cgroup/unified`), which crun refuses to run beside. The server starts crun
//! this way there when the runtime has no namespace of its own (below): one small static
//! program instead of `unshare`, `sh` and `umount` at every call. Every mount of the new namespace is made a slave first, so the host keeps its cgroup2
//! mount and sees none of crun's, whatever its propagation. In a workspace it fails: the filter denies `unshare`.
//!
//! `tandem-confine --hold-mount-ns …` and `tandem-confine --in-mount-ns NSFILE [--carry PATH]...
//! -- COMMAND [ARG...]` are for the host too: the namespace the container runtime runs in, made
//! once, without the workspaces' mounts (see `namespace`).

#![forbid(unsafe_code)]

use std::os::unix::process::CommandExt;

/// The largest filter file read (a few programs of at most 4,096 instructions).
const MAX_FILE_BYTES: u64 = 256 * 1024;

mod namespace;

fn fail(what: &str) -> ! {
    eprintln!("tandem-confine: {what}; the command was not run");
    std::process::exit(126)
}

/// The cgroup2 mount of a hybrid cgroup host.
const UNIFIED: &str = "/sys/fs/cgroup/unified";

fn without_cgroup2(command: &[std::ffi::OsString]) -> ! {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
        fail(&format!("a mount namespace of its own: {e}"));
    }
    // Every mount a slave first: nothing done in this namespace (this unmount, crun's own
    // mounts) reaches the host's, whatever its propagation.
    let slave = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    );
    if let Err(e) = slave {
        fail(&format!("making the mounts slaves: {e}"));
    }
    match umount2(UNIFIED, MntFlags::MNT_DETACH) {
        // Not mounted here: nothing to hide.
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => fail(&format!("unmounting {UNIFIED}: {e}")),
    }
    run(command)
}

/// Runs `command` in this process's place.
fn run(command: &[std::ffi::OsString]) -> ! {
    let e = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    eprintln!("tandem-confine: {}: {e}", command[0].to_string_lossy());
    std::process::exit(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let (filter, command) = match args.as_slice() {
        [mode, rest @ ..] if mode == "--hold-mount-ns" => namespace::hold(rest),
        [mode, rest @ ..] if mode == "--in-mount-ns" => match rest.iter().position(|a| a == "--") {
            Some(sep) if sep + 1 < rest.len() => namespace::enter(&rest[..sep], &rest[sep + 1..]),
            _ => fail(
                "usage: tandem-confine --in-mount-ns NSFILE [--carry PATH]... -- COMMAND [ARG...]",
            ),
        },
        [mode, sep, command @ ..]
            if mode == "--without-cgroup2" && sep == "--" && !command.is_empty() =>
        {
            without_cgroup2(command)
        }
        [filter, sep, command @ ..] if sep == "--" && !command.is_empty() => (filter, command),
        _ => fail(
            "usage: tandem-confine FILTER -- COMMAND [ARG...] | tandem-confine --without-cgroup2 -- COMMAND [ARG...] | tandem-confine --hold-mount-ns [--without-cgroup2] [--drop-under DIR] | tandem-confine --in-mount-ns NSFILE [--carry PATH]... -- COMMAND [ARG...]",
        ),
    };
    let bytes = match std::fs::File::open(filter).and_then(|f| {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE_BYTES + 1), &mut buf)
            .map(|_| buf)
    }) {
        Ok(b) if b.len() as u64 <= MAX_FILE_BYTES => b,
        Ok(_) => fail("the seccomp filter file is too large"),
        Err(e) => fail(&format!("reading the seccomp filter: {e}")),
    };
    let programs = tandem_confine::decode(&bytes).unwrap_or_else(|e| fail(&e.to_string()));
    for p in &programs {
        if let Err(e) = seccompiler::apply_filter(p) {
            fail(&format!("installing the seccomp filter: {e}"));
        }
    }
    run(command)
}
