//! The OpenTelemetry receiver the traces test exports to: Arize Phoenix ([`VERSION`], PyPI, in
//! a venv under the target dir), started by the test itself through
//! `tests/phoenix/run_phoenix.py`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::run;

/// The arize-phoenix release installed.
pub const VERSION: &str = "20.26.1";

/// The venv's python with arize-phoenix [`VERSION`] (`target/phoenix-<version>`), the venv
/// made when missing and `install` is set.
pub fn python(install: bool) -> Result<PathBuf> {
    let dir = run::target_dir().join(format!("phoenix-{VERSION}"));
    let python = dir.join("bin/python");
    let have = run::output(Command::new(&python).args([
        "-c",
        "import importlib.metadata as m; print(m.version('arize-phoenix'))",
    ]));
    if have.is_some_and(|v| v.trim() == VERSION) {
        return Ok(python);
    }
    if !install {
        bail!("arize-phoenix {VERSION} is not installed (`cargo xtask test` installs it)");
    }
    let t = run::step(&format!(
        "arize-phoenix {VERSION} (the OpenTelemetry receiver) into {}",
        dir.display()
    ));
    run::venv(&dir, &format!("arize-phoenix=={VERSION}"))?;
    run::done(t);
    Ok(python)
}
