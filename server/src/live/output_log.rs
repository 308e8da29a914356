//! A terminal's output log: its output written once more, to an append-only memory file
//! (`memfd`), so that members' writers on plain TCP sockets send it with `sendfile`
//! (`websocket::Writer`). The kernel then refers to the file's pages instead of copying the
//! bytes into each member's socket buffer, and every member's socket reads the same pages: with
//! 2,000 viewers of 1 MiB/s of output, the copy into sockets was the server's largest cost
//! (docs/PERF.md). Written bytes are never changed, so pages a socket still holds stay true;
//! a file is let go of (and its memory freed) once no queued frame or socket holds it.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::websocket::InFile;

/// A file takes this much output before the next one starts.
const FILE_BYTES: u64 = 1 << 20;

/// The file being written and how much of it is.
#[derive(Default)]
pub struct OutputLog {
    current: Option<(Arc<std::fs::File>, u64)>,
}

impl OutputLog {
    /// Appends `bytes`; where they lie, or `None` if they could not be written (no file could
    /// be made: the bytes then go out from memory only).
    pub fn append(&mut self, bytes: &[u8]) -> Option<InFile> {
        let len = bytes.len() as u64;
        if bytes.is_empty() || len > FILE_BYTES {
            return None;
        }
        if self
            .current
            .as_ref()
            .is_none_or(|(_, used)| used + len > FILE_BYTES)
        {
            self.current = new_file().map(|f| (Arc::new(f), 0));
        }
        let (file, used) = self.current.as_mut()?;
        if let Err(e) = file.write_all_at(bytes, *used) {
            tracing::warn!(error = %e, "cannot write terminal output to its log; sending it from memory");
            self.current = None;
            return None;
        }
        let at = *used;
        *used += len;
        Some(InFile {
            file: file.clone(),
            at,
        })
    }
}

/// A memory file no child process inherits.
fn new_file() -> Option<std::fs::File> {
    match rustix::fs::memfd_create("tandem-terminal-output", rustix::fs::MemfdFlags::CLOEXEC) {
        Ok(fd) => Some(fd.into()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot make a memory file for terminal output; sending it from memory");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(f: &InFile, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        f.file.read_exact_at(&mut b, f.at).unwrap();
        b
    }

    /// Output lies back to back in a file, is read back as written, and starts a new file when
    /// the current one is full; earlier bytes are never written over.
    #[test]
    fn output_is_appended_and_files_roll_over() {
        let mut log = OutputLog::default();
        let a = log.append(b"hello ").unwrap();
        let b = log.append(b"world").unwrap();
        assert!(Arc::ptr_eq(&a.file, &b.file));
        assert_eq!((a.at, b.at), (0, 6));
        assert_eq!(read(&a, 11), b"hello world");
        assert!(log.append(b"").is_none());
        let big = vec![7u8; FILE_BYTES as usize - 11];
        let c = log.append(&big).unwrap();
        assert_eq!(c.at, 11);
        let d = log.append(b"next").unwrap();
        assert!(
            !Arc::ptr_eq(&c.file, &d.file),
            "a full file is not written past"
        );
        assert_eq!(d.at, 0);
        assert_eq!(read(&d, 4), b"next");
        assert_eq!(read(&a, 11), b"hello world", "what was written stays");
        assert!(log.append(&vec![0; FILE_BYTES as usize + 1]).is_none());
    }

    /// A workspace's processes are the server's children: the log must not leak into them.
    #[test]
    fn the_file_is_closed_on_exec() {
        use std::os::fd::AsFd;
        let mut log = OutputLog::default();
        let f = log.append(b"x").unwrap();
        let flags = rustix::io::fcntl_getfd(f.file.as_fd()).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }
}
