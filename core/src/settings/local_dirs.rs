//! The directories under which a repo may be a local path (`local_repo_dirs`), as an admin sets
//! them on the settings page: what is accepted, and why. The server's git reads a local repo
//! as root, so a directory here lets anyone who adds repos (admins) turn any git repository
//! under it into sessions whose agents read it whole.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Most directories in the list.
pub const MAX_DIRS: usize = 16;

/// The directories as given, each checked: an absolute path (no `..`), an existing directory,
/// not `/` itself; stored in their real form (symlinks resolved). Blank lines are dropped.
pub fn check(dirs: &[String]) -> Result<Vec<String>> {
    let dirs: Vec<&str> = dirs
        .iter()
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
        .collect();
    if dirs.len() > MAX_DIRS {
        return Err(Error::Invalid(format!(
            "at most {MAX_DIRS} local repo directories"
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for d in dirs {
        let path = Path::new(d);
        if !path.is_absolute() || d.len() > 4096 || d.chars().any(char::is_control) {
            return Err(Error::Invalid(format!(
                "local repo directory {d:?}: give an absolute path such as /srv/repos"
            )));
        }
        let real: PathBuf = std::fs::canonicalize(path)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "local repo directory {d:?} is not a directory on the server: make it first, or check the path"
                ))
            })?;
        if real.parent().is_none() {
            return Err(Error::Invalid(format!(
                "local repo directory {d:?} is the whole filesystem: name the directory that holds your repos"
            )));
        }
        let real = real.display().to_string();
        if !out.contains(&real) {
            out.push(real);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_existing_absolute_directories_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let real = std::fs::canonicalize(dir.path())
            .unwrap()
            .display()
            .to_string();
        assert_eq!(
            check(&[d.clone(), String::new(), format!("{d}/")]).unwrap(),
            [real]
        );
        for bad in [
            "relative/dir",
            "/",
            "/nonexistent/tandem-test-dir",
            "/etc/passwd",
        ] {
            let e = check(&[bad.to_string()]).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
