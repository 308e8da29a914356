//! `tandem-confine FILTER -- COMMAND [ARG...]`: installs the seccomp programs in `FILTER` (the
//! workspace's profile, compiled once on the host; see the library) and then runs `COMMAND` in
//! its place, under them. Every process of a workspace starts this way — its init and every
//! `exec`'d command — so none runs a single instruction of workspace code unfiltered. It fails
//! closed: a filter it cannot read or install means the command does not run (exit 126).
//!
//! The host installs it execute-only (mode 0711, owned by a user the workspace does not map):
//! the kernel then marks the process non-dumpable from its `execve`, so workspace code cannot
//! attach to it with `ptrace` before the filter is in.

#![forbid(unsafe_code)]

use std::os::unix::process::CommandExt;

/// The largest filter file read (a few programs of at most 4,096 instructions).
const MAX_FILE_BYTES: u64 = 256 * 1024;

fn fail(what: &str) -> ! {
    eprintln!("tandem-confine: {what}; the command was not run");
    std::process::exit(126)
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let (filter, command) = match args.as_slice() {
        [filter, sep, command @ ..] if sep == "--" && !command.is_empty() => (filter, command),
        _ => fail("usage: tandem-confine FILTER -- COMMAND [ARG...]"),
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
