//! Which files a step changed: the checkout's `git status` with each path's size and mtime,
//! compared before and after. Works the same for every agent, whatever tool made the change.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use tandem_protocol::FileChange;

/// A path's porcelain code plus what the filesystem says about it.
#[derive(Clone, PartialEq, Eq)]
struct Seen {
    code: String,
    size: Option<u64>,
    mtime: Option<SystemTime>,
}

/// The checkout's changed paths at one moment.
#[derive(Default)]
pub struct Snapshot(BTreeMap<String, Seen>);

impl Snapshot {
    /// Reads `git status` (an empty snapshot where there is no git checkout).
    pub async fn take(root: &Path) -> Self {
        let out = tokio::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["status", "--porcelain=v1", "-z", "--untracked-files=all"])
            .output()
            .await;
        let Ok(out) = out else { return Self::default() };
        if !out.status.success() {
            return Self::default();
        }
        let raw = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut map = BTreeMap::new();
        let mut fields = raw.split('\0');
        while let Some(entry) = fields.next() {
            let (Some(code), Some(path)) = (entry.get(..2), entry.get(3..)) else {
                continue;
            };
            if path.is_empty() {
                continue;
            }
            if code.contains('R') || code.contains('C') {
                // Renames carry the old path in the next field.
                fields.next();
            }
            let meta = std::fs::symlink_metadata(root.join(path)).ok();
            map.insert(
                path.to_string(),
                Seen {
                    code: code.to_string(),
                    size: meta.as_ref().map(|m| m.len()),
                    mtime: meta.and_then(|m| m.modified().ok()),
                },
            );
        }
        Self(map)
    }

    /// What changed from `self` to `after`.
    pub fn diff(&self, after: &Snapshot) -> Vec<(String, FileChange)> {
        let mut out = Vec::new();
        for (path, now) in &after.0 {
            match self.0.get(path) {
                Some(before) if before == now => {}
                _ if now.size.is_none() => out.push((path.clone(), FileChange::Deleted)),
                None if now.code == "??" || now.code.starts_with('A') => {
                    out.push((path.clone(), FileChange::Created))
                }
                _ => out.push((path.clone(), FileChange::Modified)),
            }
        }
        for path in self.0.keys() {
            if !after.0.contains_key(path) {
                // Back to the committed content (or removed again, if it was new).
                let change = if root_exists_hint(&self.0[path]) {
                    FileChange::Modified
                } else {
                    FileChange::Deleted
                };
                out.push((path.clone(), change));
            }
        }
        out
    }
}

fn root_exists_hint(before: &Seen) -> bool {
    before.code != "??" && !before.code.starts_with('A')
}
