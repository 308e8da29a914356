//! The checkout's files for the session page's Files pane: the tree (what git tracks plus new
//! files) and a long poll that answers when an open file changes (inotify on its directory,
//! so a file replaced by a rename — an editor's or a formatter's save — is seen too).

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use notify::Watcher;
use sha2::{Digest, Sha256};
use tandem_protocol::agent::{FileNow, FileTree, TreeEntry, WatchFile};
use tandem_protocol::live::{MAX_DOC_BYTES, MAX_TREE_ENTRIES};

use crate::files::{self, FileError};

/// Longest a watch waits.
pub const MAX_WAIT_MS: u32 = 25_000;

/// SHA-256 of `bytes`, hex.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Tracked files and new ones git does not ignore, sorted, with sizes and a binary mark.
pub async fn tree(root: &Path) -> Result<FileTree, crate::git::GitError> {
    let tracked = crate::git::git(root, &["ls-files", "-z", "--cached"], &[]).await?;
    let new = crate::git::git(
        root,
        &["ls-files", "-z", "--others", "--exclude-standard"],
        &[],
    )
    .await?;
    let mut paths: Vec<(&str, bool)> = tracked
        .split('\0')
        .map(|p| (p, false))
        .chain(new.split('\0').map(|p| (p, true)))
        .filter(|(p, _)| !p.is_empty())
        .collect();
    paths.sort();
    paths.dedup_by(|a, b| a.0 == b.0);
    let truncated = paths.len() > MAX_TREE_ENTRIES;
    let mut files = Vec::with_capacity(paths.len().min(MAX_TREE_ENTRIES));
    for (path, new) in paths.into_iter().take(MAX_TREE_ENTRIES) {
        // A tracked file deleted in the checkout, a symlink, a submodule: not a file to open.
        let Ok(meta) = root.join(path).symlink_metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        files.push(TreeEntry {
            path: path.to_string(),
            size: meta.len(),
            binary: meta.len() <= MAX_DOC_BYTES as u64 && looks_binary(&root.join(path)),
            new,
        });
    }
    Ok(FileTree { files, truncated })
}

/// A NUL byte in the first KiB.
fn looks_binary(path: &Path) -> bool {
    let mut head = [0u8; 1024];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head[..n].contains(&0)
}

/// What `rel` is now, against the content whose hash is `known`.
pub fn now(root: &Path, rel: &str, known: &str) -> Result<FileNow, FileError> {
    let path = root.join(files::lexical(rel)?);
    if path.symlink_metadata().is_err() {
        return Ok(FileNow::Gone);
    }
    let real = files::confined(root, rel)?;
    let Ok(meta) = std::fs::metadata(&real) else {
        return Ok(FileNow::Gone);
    };
    if !meta.is_file() {
        return Ok(FileNow::Gone);
    }
    if meta.len() > MAX_DOC_BYTES as u64 {
        return Ok(FileNow::TooLarge { size: meta.len() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    if std::fs::File::open(&real)
        .and_then(|f| f.take(MAX_DOC_BYTES as u64 + 1).read_to_end(&mut bytes))
        .is_err()
    {
        return Ok(FileNow::Gone);
    }
    if bytes.len() > MAX_DOC_BYTES {
        return Ok(FileNow::TooLarge {
            size: bytes.len() as u64,
        });
    }
    if sha256(&bytes) == known {
        return Ok(FileNow::Same);
    }
    match String::from_utf8(bytes) {
        Ok(content) if !content.contains('\0') => Ok(FileNow::Changed { content }),
        _ => Ok(FileNow::Binary),
    }
}

/// Answers as soon as the file is not what `w.known` says, or after `w.wait_ms` with `same`.
pub async fn watch(root: &Path, w: WatchFile) -> Result<FileNow, FileError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    // Watched before the first look, so a change between the two is not missed.
    let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        let _ = tx.try_send(());
    })
    .ok();
    let dir = root
        .join(files::lexical(&w.path)?)
        .parent()
        .map(Path::to_path_buf);
    let watching = match (&mut watcher, &dir) {
        (Some(watcher), Some(dir)) => watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .is_ok(),
        _ => false,
    };
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(w.wait_ms.min(MAX_WAIT_MS).into());
    loop {
        let (root2, path, known) = (root.to_path_buf(), w.path.clone(), w.known.clone());
        let state = tokio::task::spawn_blocking(move || now(&root2, &path, &known))
            .await
            .unwrap_or(Ok(FileNow::Same))?;
        // Without a watch (its directory is gone), the file is gone too: say what it is now.
        if state != FileNow::Same || !watching {
            return Ok(state);
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(())) => {}
            _ => return Ok(FileNow::Same),
        }
    }
}
