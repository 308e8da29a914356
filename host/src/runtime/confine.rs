//! `tandem-confine` in a workspace: the seccomp filter compiled once ([`super::seccomp_bpf`])
//! and the program that installs it before anything else runs, in `<data dir>/runtime/confine`,
//! mounted read-only at `/.tandem` in every workspace. The init and every `exec`'d command start
//! as `/.tandem/tandem-confine /.tandem/seccomp.bpf -- …`, so the runtime never compiles the
//! profile.
//!
//! Why this holds against the workspace: `/.tandem` is a mount point in the root, which the
//! workspace can neither rename nor mount over (no `CAP_SYS_ADMIN`, and the filter refuses
//! `mount`/`umount`), and its contents are read-only; anything a resumed layer left at
//! `/.tandem` is removed before the mount. The binary is execute-only to the workspace (mode
//! 0711, owned by the host's root, which a user namespace does not map): the kernel makes the
//! process non-dumpable from its `execve`, so workspace code cannot `ptrace` it before the filter
//! is in. That is why this is used only with user namespaces; without them the runtime
//! compiles the profile as before.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::Result;

/// Where the directory is mounted in a workspace (a mount point at the root).
pub const MOUNT: &str = "/.tandem";

/// The program, in a workspace.
pub const BIN: &str = "/.tandem/tandem-confine";

/// The filter file, in a workspace.
pub const FILTER: &str = "/.tandem/seccomp.bpf";

/// The arguments that put a command under the filter.
pub fn prefix() -> Vec<String> {
    vec![BIN.into(), FILTER.into(), "--".into()]
}

/// Writes `bytes` to `path` with `mode`, replacing it at once (a running copy keeps its inode).
fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    std::fs::write(&tmp, bytes)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Makes `<runtime_dir>/confine` with the default profile's filter and an execute-only copy of
/// `bin` (the `tandem-confine` beside the workspace agent).
pub fn prepare(runtime_dir: &Path, bin: &Path) -> Result<PathBuf> {
    let program = std::fs::read(bin)?;
    if !is_static(&program) {
        return Err(crate::Error::Invalid(format!(
            "{} is not a statically linked program: it would run the workspace's own loader and \
             libraries before its filter is in (`cargo xtask` builds it static)",
            bin.display()
        )));
    }
    let filter = super::seccomp_bpf::for_host(&super::seccomp::default_profile())?;
    let dir = runtime_dir.join("confine");
    std::fs::create_dir_all(&dir)?;
    // Reachable by a workspace's mapped root (which mounts it), not listable.
    for d in [runtime_dir, &dir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
    }
    replace(&dir.join("seccomp.bpf"), &filter, 0o644)?;
    replace(&dir.join("tandem-confine"), &program, 0o711)?;
    Ok(dir)
}

/// True for a 64-bit little-endian ELF executable that names no program interpreter: the kernel
/// runs it without a dynamic loader, so nothing from the workspace's root is loaded into it.
pub fn is_static(elf: &[u8]) -> bool {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    // `\x7fELF`, 64-bit, little-endian; an executable or a position-independent one.
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") || !matches!(u16_at(16), Some(2 | 3)) {
        return false;
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    /// `PT_INTERP`: the program interpreter (the dynamic loader).
    const PT_INTERP: u32 = 3;
    (0..usize::from(count)).all(|i| {
        let at = (phoff as usize).saturating_add(i * usize::from(size));
        u32_at(at).is_some_and(|t| t != PT_INTERP)
    })
}

/// Leaves `/.tandem` in `rootfs` (a workspace's merged root, before it starts) a directory or
/// nothing: a link or file a layer planted there is removed, so the mount lands at the root.
pub fn clear_mount_point(rootfs: &Path) -> Result<()> {
    let at = rootfs.join(MOUNT.trim_start_matches('/'));
    match std::fs::symlink_metadata(&at) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Ok(std::fs::remove_file(&at)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's dynamic loader would run inside a dynamically linked `tandem-confine`
    /// before its filter (`/etc/ld.so.preload` in a layer, a replaced `libc`): refused.
    #[test]
    fn a_dynamically_linked_program_is_refused() {
        let dynamic = std::fs::read("/bin/sh").unwrap();
        assert!(!is_static(&dynamic));
        let dir = tempfile::tempdir().unwrap();
        let err = prepare(dir.path(), Path::new("/bin/sh")).unwrap_err();
        assert!(err.to_string().contains("statically linked"), "{err}");
        assert!(!dir.path().join("confine/tandem-confine").exists());
        assert!(!is_static(b"#!/bin/sh\n"));
        assert!(!is_static(&dynamic[..40]), "cut short");
    }
}
