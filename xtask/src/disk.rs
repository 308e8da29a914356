//! The disk `cargo xtask test` builds on: how much is free before the run and how much the
//! target dir holds after it. A build that runs out of disk fails deep inside rustc ("No space
//! left on device" while writing an object file); the warning before it says what it is.

use std::path::Path;
use std::process::Command;

use crate::run;

/// About what a whole run from an empty target dir leaves in it (the debug build of every
/// crate with its tests, the web app twice, the workspace images; measured, see the book's
/// "What `cargo xtask test` runs"), with room for the builds' temporary files.
pub const WHOLE_RUN_GIB: u64 = 30;

/// Bytes free on the file system holding `dir` (or the nearest parent that exists).
pub fn free(dir: &Path) -> Option<u64> {
    let dir = dir.ancestors().find(|d| d.exists())?;
    let out = run::output(Command::new("df").args(["-Pk", "--"]).arg(dir))?;
    // "Filesystem 1024-blocks Used Available Capacity Mounted-on", then one line.
    let kib: u64 = out
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Bytes `dir` holds (`du`), or `None` when it cannot be read.
pub fn used(dir: &Path) -> Option<u64> {
    let out = run::output(Command::new("du").args(["-sk", "--"]).arg(dir))?;
    let kib: u64 = out.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

const GIB: f64 = (1u64 << 30) as f64;

/// Warns when the target dir's disk has less free than a whole run takes, less what the
/// target dir already holds (a repeat run builds little).
pub fn warn_if_short(target: &Path) {
    let Some(free) = free(target) else {
        return;
    };
    let held = used(target).unwrap_or(0);
    let needs = (WHOLE_RUN_GIB << 30).saturating_sub(held);
    if free < needs {
        eprintln!(
            "warning: {:.1} GiB free on the disk of {} ; a whole run from an empty target dir \
             takes about {WHOLE_RUN_GIB} GiB ({:.1} GiB of it already there). If the build \
             fails with \"No space left on device\", free disk or set CARGO_TARGET_DIR to a \
             larger one.",
            free as f64 / GIB,
            target.display(),
            held as f64 / GIB,
        );
    }
}

/// Says how much the target dir holds (once the run is over).
pub fn report(target: &Path) {
    if let (Some(held), Some(free)) = (used(target), free(target)) {
        eprintln!(
            "    the target dir {} holds {:.1} GiB; {:.1} GiB free",
            target.display(),
            held as f64 / GIB,
            free as f64 / GIB
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_and_used_read_this_checkout() {
        let root = run::root();
        assert!(free(&root).is_some_and(|b| b > 0));
        // A path that does not exist yet is measured at its nearest parent.
        assert_eq!(
            free(&root.join("no/such/dir")).map(|b| b >> 30),
            free(&root).map(|b| b >> 30)
        );
        let readme = used(&root.join("README.md")).expect("du reads a file");
        let len = std::fs::metadata(root.join("README.md")).unwrap().len();
        assert!(readme >= len, "{readme} < {len}");
    }
}
