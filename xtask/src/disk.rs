//! The disk `cargo xtask test` builds on: how much is free before the run and how much the
//! target dir holds after it. A build that runs out of disk fails deep inside rustc ("No space
//! left on device" while writing an object file); the warning before it says what it is.

use std::path::{Path, PathBuf};
use std::process::Command;

/// About what a whole run on a fresh machine takes, with some room: the debug build of every
/// crate with its tests, the web app twice and the workspace images in the target dir (13.5 GiB
/// without incremental caches), the Kubernetes build, Go's and npm's caches and the packages
/// beside it (23 GB in all, measured in the book's "What `cargo xtask test` runs").
pub const WHOLE_RUN_GIB: u64 = 25;

/// Free disk a run wants even when its target dir already holds a whole build: what changed is
/// built again, and the tests' own files.
pub const LEAST_GIB: u64 = 5;

const GIB: u64 = 1 << 30;

/// The directory whose file system holds `dir`: `dir` or its nearest parent that exists.
fn measured_at(dir: &Path) -> Option<PathBuf> {
    let dir = std::path::absolute(dir).ok()?;
    dir.ancestors().find(|d| d.exists()).map(Path::to_path_buf)
}

/// Bytes free on the file system holding `dir`.
pub fn free(dir: &Path) -> Option<u64> {
    let at = measured_at(dir)?;
    let out = Command::new("df")
        .args(["-B1", "--output=avail", "--"])
        .arg(at)
        .output()
        .ok()?;
    // A header line, then the number.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// Bytes `dir` holds (`du`). What `du` counted is used even when it could not read every file
/// (it then exits 1: files the tests left to root, say).
pub fn used(dir: &Path) -> Option<u64> {
    let out = Command::new("du")
        .args(["-sk", "--"])
        .arg(dir)
        .output()
        .ok()?;
    let kib: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

/// What a run wants free, given what its target dir already holds.
fn wanted(held: u64) -> u64 {
    (WHOLE_RUN_GIB * GIB)
        .saturating_sub(held)
        .max(LEAST_GIB * GIB)
}

/// Warns when the target dir's disk has less free than the run wants ([`wanted`]).
pub fn warn_if_short(target: &Path) {
    let Some(free) = free(target) else {
        return;
    };
    let held = used(target).unwrap_or(0);
    let wants = wanted(held);
    if free < wants {
        eprintln!(
            "warning: {:.1} GiB free on the disk holding {}, and this run may need about {:.1} \
             GiB more (a whole run from an empty target dir takes about {WHOLE_RUN_GIB} GiB; \
             {:.1} GiB of it is there). If the build fails with \"No space left on device\", \
             free {:.1} GiB (old incremental caches: {}/*/incremental) or point \
             CARGO_TARGET_DIR at a disk with room.",
            gib(free),
            target.display(),
            gib(wants - free),
            gib(held),
            gib(wants - free),
            target.display(),
        );
    }
}

/// Says how much the target dir holds and how much is free (after the run, passed or not).
pub fn report(target: &Path) {
    if let (Some(held), Some(free)) = (used(target), free(target)) {
        eprintln!(
            "    the target dir {} holds {:.1} GiB; {:.1} GiB free on its disk",
            target.display(),
            gib(held),
            gib(free)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_of_a_dir_not_made_yet_is_its_parents() {
        let root = crate::run::root();
        assert_eq!(measured_at(&root.join("no/such/dir")), Some(root.clone()));
        assert!(free(&root).is_some_and(|b| b > 0));
        assert!(used(&root.join("README.md")).is_some_and(|b| b > 0));
    }

    #[test]
    fn a_full_target_dir_still_wants_room() {
        assert_eq!(wanted(0), WHOLE_RUN_GIB * GIB);
        assert_eq!(wanted(10 * GIB), (WHOLE_RUN_GIB - 10) * GIB);
        assert_eq!(wanted(100 * GIB), LEAST_GIB * GIB);
    }
}
