//! One image layer as a registry keeps it: an uncompressed tar (so its blob digest is its
//! diff id) of a directory, or of a few files placed at paths in the image. Overlay whiteouts
//! (a 0:0 character device, an opaque directory's `trusted.overlay.opaque`) become OCI ones
//! (`.wh.NAME`, `.wh..wh..opq`); owners stored shifted into a user namespace's range are
//! stored unshifted. Entries go in sorted order, so the same tree packs to the same digest.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header, HeaderMode};

use crate::{Error, Result};

/// What a layer holds.
#[derive(Clone, Debug)]
pub enum Source {
    /// A directory tree, its root the image's root. `unshift`: owners at or above it (and
    /// below it plus 65,536) are stored less it.
    Dir { path: PathBuf, unshift: Option<u32> },
    /// Files of this machine placed at absolute paths in the image (parents made, root-owned).
    Files(Vec<(String, PathBuf, u32)>),
}

/// A packed layer: its tar file, digest (`sha256:…`) and size.
#[derive(Clone, Debug)]
pub struct Packed {
    pub file: PathBuf,
    pub digest: String,
    pub size: u64,
}

/// Counts and hashes what passes to the file.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Packs `source` into a tar at `into` (blocking: run it off the async threads).
pub fn pack(source: &Source, into: &Path) -> Result<Packed> {
    let out = Hashing {
        inner: std::io::BufWriter::with_capacity(1 << 20, File::create(into)?),
        hash: Sha256::new(),
        size: 0,
    };
    let mut tar = tar::Builder::new(out);
    match source {
        Source::Dir { path, unshift } => {
            for entry in walkdir::WalkDir::new(path)
                .follow_links(false)
                .sort_by_file_name()
                .min_depth(1)
            {
                let entry = entry.map_err(|e| Error::Io(e.into()))?;
                let rel = entry
                    .path()
                    .strip_prefix(path)
                    .map_err(|e| Error::Internal(e.to_string()))?;
                append(&mut tar, entry.path(), rel, *unshift)?;
            }
        }
        Source::Files(files) => {
            let mut dirs = std::collections::BTreeSet::new();
            for (at, _, _) in files {
                let mut p = Path::new(at.trim_start_matches('/'));
                while let Some(parent) = p.parent().filter(|p| !p.as_os_str().is_empty()) {
                    dirs.insert(parent.to_path_buf());
                    p = parent;
                }
            }
            for d in &dirs {
                let mut h = synthetic(EntryType::Directory, 0o755, 0);
                tar.append_data(&mut h, d, std::io::empty())?;
            }
            for (at, file, mode) in files {
                let f = File::open(file)?;
                let mut h = synthetic(EntryType::Regular, *mode, 0);
                h.set_size(f.metadata()?.len());
                tar.append_data(&mut h, at.trim_start_matches('/'), f)?;
            }
        }
    }
    let mut out = tar.into_inner()?;
    out.flush()?;
    Ok(Packed {
        file: into.to_path_buf(),
        digest: format!("sha256:{:x}", out.hash.finalize()),
        size: out.size,
    })
}

/// Reads exactly `left` bytes of a file, or fails (a file cut short while it was packed).
struct Exact<'a> {
    file: File,
    left: u64,
    name: &'a Path,
}

impl<'a> Exact<'a> {
    fn new(file: File, len: u64, name: &'a Path) -> Self {
        Self {
            file,
            left: len,
            name,
        }
    }
}

impl std::io::Read for Exact<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::other(format!(
                "{} was cut short while it was packed",
                self.name.display()
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A root-owned entry of `kind` and `mode`, empty until sized.
fn synthetic(kind: EntryType, mode: u32, mtime: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(0);
    h.set_mtime(mtime);
    h
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    full: &Path,
    rel: &Path,
    unshift: Option<u32>,
) -> Result<()> {
    let meta = std::fs::symlink_metadata(full)?;
    let ft = meta.file_type();
    let name = rel
        .file_name()
        .ok_or_else(|| Error::Internal(format!("{} has no name", rel.display())))?;
    if ft.is_char_device() && meta.rdev() == 0 {
        // An overlay whiteout: the file below is deleted.
        let mut wh = std::ffi::OsString::from(".wh.");
        wh.push(name);
        let mut h = synthetic(EntryType::Regular, 0o600, meta.mtime().max(0) as u64);
        tar.append_data(&mut h, rel.with_file_name(wh), std::io::empty())?;
        return Ok(());
    }
    let mut h = Header::new_gnu();
    h.set_metadata_in_mode(&meta, HeaderMode::Complete);
    let shift = |id: u32| match unshift {
        Some(base) if (base..base + 65_536).contains(&id) => id - base,
        _ => id,
    };
    h.set_uid(u64::from(shift(meta.uid())));
    h.set_gid(u64::from(shift(meta.gid())));
    if ft.is_symlink() {
        let target = std::fs::read_link(full)?;
        tar.append_link(&mut h, rel, target)?;
    } else if ft.is_file() {
        // Opened without following a link, sized from what was opened, and read to exactly
        // that size: a file swapped for a link, grown or cut short since the walk packs
        // nothing it should not.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(full)?;
        let opened = f.metadata()?;
        if !opened.is_file() {
            return Err(Error::Invalid(format!(
                "{} changed while it was packed",
                rel.display()
            )));
        }
        h.set_size(opened.len());
        tar.append_data(&mut h, rel, Exact::new(f, opened.len(), rel))?;
    } else if ft.is_dir() {
        h.set_size(0);
        tar.append_data(&mut h, rel, std::io::empty())?;
        let opaque = xattr::get(full, "trusted.overlay.opaque")
            .ok()
            .flatten()
            .is_some_and(|v| v == b"y");
        if opaque {
            let mut o = synthetic(EntryType::Regular, 0o600, meta.mtime().max(0) as u64);
            tar.append_data(&mut o, rel.join(".wh..wh..opq"), std::io::empty())?;
        }
    } else {
        // Devices and fifos: their header says all (a device's numbers too).
        if ft.is_char_device() || ft.is_block_device() {
            let rdev = meta.rdev();
            h.set_device_major(nix::sys::stat::major(rdev) as u32)?;
            h.set_device_minor(nix::sys::stat::minor(rdev) as u32)?;
        }
        h.set_size(0);
        tar.append_data(&mut h, rel, std::io::empty())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(file: &Path) -> Vec<(String, u64, u64)> {
        let mut a = tar::Archive::new(File::open(file).unwrap());
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.uid().unwrap(),
                    h.gid().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_tree_packs_sorted_to_the_same_digest_with_whiteouts_and_unshifted_owners() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("b/deep")).unwrap();
        std::fs::write(root.join("b/deep/f"), "x").unwrap();
        std::fs::write(root.join("a"), "y").unwrap();
        std::os::unix::fs::symlink("a", root.join("c")).unwrap();
        nix::sys::stat::mknod(
            &root.join("gone"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            0,
        )
        .unwrap();
        std::os::unix::fs::chown(root.join("a"), Some(1_000_005), Some(1_000_007)).unwrap();
        let src = Source::Dir {
            path: root.clone(),
            unshift: Some(1_000_000),
        };
        let one = pack(&src, &dir.path().join("1.tar")).unwrap();
        let two = pack(&src, &dir.path().join("2.tar")).unwrap();
        assert_eq!(one.digest, two.digest, "packing is deterministic");
        assert_eq!(one.size, std::fs::metadata(&one.file).unwrap().len());
        let list = entries(&one.file);
        let names: Vec<&str> = list.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["a", "b", "b/deep", "b/deep/f", "c", ".wh.gone"]);
        assert_eq!((list[0].1, list[0].2), (5, 7), "owners unshifted");
    }

    #[test]
    fn a_link_to_a_host_file_is_packed_as_the_link_and_a_device_keeps_its_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", root.join("shadow")).unwrap();
        nix::sys::stat::mknod(
            &root.join("null"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        let p = pack(
            &Source::Dir {
                path: root,
                unshift: None,
            },
            &dir.path().join("l.tar"),
        )
        .unwrap();
        let mut a = tar::Archive::new(File::open(&p.file).unwrap());
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            seen.push((
                e.path().unwrap().to_string_lossy().into_owned(),
                h.entry_type(),
                h.size().unwrap(),
                h.device_major().unwrap(),
                h.device_minor().unwrap(),
            ));
        }
        assert_eq!(
            seen,
            [
                ("null".into(), EntryType::Char, 0, Some(1), Some(3)),
                ("shadow".into(), EntryType::Symlink, 0, Some(0), Some(0)),
            ]
        );
    }

    #[test]
    fn files_land_at_their_paths_under_made_parents() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("agent");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let p = pack(
            &Source::Files(vec![("/run/tandem/bin/agent".into(), bin, 0o755)]),
            &dir.path().join("l.tar"),
        )
        .unwrap();
        let names: Vec<String> = entries(&p.file).into_iter().map(|e| e.0).collect();
        assert_eq!(
            names,
            [
                "run",
                "run/tandem",
                "run/tandem/bin",
                "run/tandem/bin/agent"
            ]
        );
    }
}
