//! Files confined to the workspace root: no absolute paths, no `..`, no way out through a
//! symlink, bounded sizes.

use std::path::{Component, Path, PathBuf};

use axum::http::StatusCode;
use axum::response::Response;
use tandem_protocol::agent::{FileEntry, FileKind, FileView, MAX_FILE_BYTES};

use crate::http::error;

/// A refused or failed file operation.
#[derive(Debug)]
pub struct FileError(StatusCode, &'static str, String);

impl FileError {
    pub fn into_response(self) -> Response {
        error(self.0, self.1, self.2)
    }

    /// What went wrong, for people (and the agent's model).
    pub fn message(&self) -> &str {
        &self.2
    }
}

fn bad(msg: impl Into<String>) -> FileError {
    FileError(StatusCode::BAD_REQUEST, "bad_path", msg.into())
}

fn io(path: &str, e: std::io::Error) -> FileError {
    match e.kind() {
        std::io::ErrorKind::NotFound => FileError(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{path:?} does not exist"),
        ),
        _ => FileError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{path:?}: {e}"),
        ),
    }
}

/// Checks the shape of a relative path: no absolute paths, no `..`, no NUL.
pub(crate) fn lexical(rel: &str) -> Result<PathBuf, FileError> {
    if rel.contains('\0') {
        return Err(bad("the path contains a NUL byte"));
    }
    let p = Path::new(rel);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(bad(format!(
                    "{rel:?} leaves the workspace: '..' is not allowed"
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad(format!(
                    "{rel:?} is absolute: paths are relative to the workspace"
                )));
            }
        }
    }
    Ok(out)
}

/// `root/rel` resolved through symlinks, refused if that leaves `root`.
pub fn confined(root: &Path, rel: &str) -> Result<PathBuf, FileError> {
    let path = root.join(lexical(rel)?);
    let real_root = root.canonicalize().map_err(|e| io("/", e))?;
    let real = path.canonicalize().map_err(|e| io(rel, e))?;
    if !real.starts_with(&real_root) {
        return Err(bad(format!(
            "{rel:?} leaves the workspace through a symlink"
        )));
    }
    Ok(real)
}

/// A directory listing or a file's content.
pub fn read(root: &Path, rel: &str) -> Result<FileView, FileError> {
    let path = confined(root, rel)?;
    let meta = std::fs::metadata(&path).map_err(|e| io(rel, e))?;
    if meta.is_dir() {
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&path).map_err(|e| io(rel, e))? {
            let e = e.map_err(|e| io(rel, e))?;
            let m = e.path().symlink_metadata().map_err(|e| io(rel, e))?;
            let kind = if m.is_symlink() {
                FileKind::Symlink
            } else if m.is_dir() {
                FileKind::Dir
            } else if m.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            };
            entries.push(FileEntry {
                name: e.file_name().to_string_lossy().into(),
                kind,
                size: m.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        return Ok(FileView::Dir {
            path: rel.into(),
            entries,
        });
    }
    if meta.len() > MAX_FILE_BYTES as u64 {
        return Err(FileError(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "{rel:?} is {} bytes; the file API reads at most {MAX_FILE_BYTES}",
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| io(rel, e))?;
    let (content, binary) = match String::from_utf8(bytes) {
        Ok(s) => (s, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    };
    Ok(FileView::File {
        path: rel.into(),
        size: meta.len(),
        content,
        binary,
    })
}

/// Writes a file, making missing parent directories; never through a symlink.
pub fn write(root: &Path, rel: &str, data: &[u8]) -> Result<(), FileError> {
    let lex = lexical(rel)?;
    if lex.as_os_str().is_empty() {
        return Err(bad("a file path is needed"));
    }
    if data.len() > MAX_FILE_BYTES {
        return Err(FileError(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("at most {MAX_FILE_BYTES} bytes"),
        ));
    }
    let real_root = root.canonicalize().map_err(|e| io("/", e))?;
    // The deepest existing ancestor must be inside; what is created below it cannot be a link.
    let target = root.join(&lex);
    let mut existing = target.parent().unwrap_or(root).to_path_buf();
    while !existing.exists() {
        existing = existing.parent().unwrap_or(root).to_path_buf();
    }
    let real = existing.canonicalize().map_err(|e| io(rel, e))?;
    if !real.starts_with(&real_root) {
        return Err(bad(format!(
            "{rel:?} leaves the workspace through a symlink"
        )));
    }
    if target.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
        return Err(bad(format!(
            "{rel:?} is a symlink; write to its target instead"
        )));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(rel, e))?;
    }
    replace(&target, data).map_err(|e| io(rel, e))
}

/// Replaces `target` atomically: a reader (the agent, an editor, `git diff`) sees the old
/// content or the new, never half of it. The new file keeps the old one's permissions.
fn replace(target: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = target.parent().unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tandem-{}-{n}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        if let Ok(meta) = std::fs::metadata(target) {
            f.set_permissions(meta.permissions())?;
        }
        std::fs::rename(&tmp, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("escape")).unwrap();
        std::os::unix::fs::symlink("src", root.join("inner")).unwrap();

        write(&root, "src/a.txt", b"hi").unwrap();
        assert!(
            matches!(read(&root, "src/a.txt"), Ok(FileView::File { content, .. }) if content == "hi")
        );
        assert!(
            matches!(read(&root, "inner/a.txt"), Ok(FileView::File { .. })),
            "links inside are fine"
        );
        assert!(matches!(read(&root, ""), Ok(FileView::Dir { .. })));
        for bad_path in [
            "../secret",
            "/etc/passwd",
            "src/../../secret",
            "escape/secret",
        ] {
            let e = read(&root, bad_path)
                .err()
                .unwrap_or_else(|| panic!("{bad_path} was allowed"));
            assert_eq!(e.0, StatusCode::BAD_REQUEST, "{bad_path}: {}", e.2);
        }
        for bad_path in [
            "../x",
            "/tmp/x",
            "escape/new.txt",
            "escape/deeper/new.txt",
            "inner",
            "",
        ] {
            assert!(
                write(&root, bad_path, b"x").is_err(),
                "{bad_path} was writable"
            );
        }
        assert!(!dir.path().join("new.txt").exists() && !dir.path().join("deeper").exists());
        assert_eq!(read(&root, "nope").err().unwrap().0, StatusCode::NOT_FOUND);
    }
}
