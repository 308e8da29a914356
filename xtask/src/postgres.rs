//! A throwaway PostgreSQL server for the test suite: its own cluster in the temp dir, on a free
//! loopback port, trust auth, stopped and deleted when dropped.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::run::{self, cmd};

/// The newest `/usr/lib/postgresql/N/bin` (Debian's layout), or the directory of `pg_ctl` on PATH.
pub fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, p)| p)
        .or_else(|| run::which("pg_ctl").and_then(|p| p.parent().map(PathBuf::from)))
}

/// A running cluster.
pub struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
}

/// PostgreSQL refuses to run as root: as root, run its tools as the `postgres` user.
fn as_pg(bin: &std::path::Path, tool: &str) -> Command {
    if run::is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    }
}

impl Postgres {
    /// initdb + start.
    pub fn start() -> Result<Self> {
        let t = run::step("starting a throwaway PostgreSQL");
        let bin = bin_dir().context("PostgreSQL is not installed (apt-get install postgresql)")?;
        // Under the system temp dir, which the `postgres` user can reach (a home dir may not be).
        let dir = std::env::temp_dir().join(format!("tandem-test-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        if run::is_root() {
            cmd(Command::new("chown").args(["-R", "postgres"]).arg(&dir))?;
        }
        let data = dir.join("data");
        cmd(as_pg(&bin, "initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&data)
            .stdout(std::process::Stdio::null()))?;
        let port = run::free_port()?;
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
            dir.display()
        );
        cmd(as_pg(&bin, "pg_ctl")
            .args(["-w", "-t", "60", "-D"])
            .arg(&data)
            .args(["-o", &opts, "-l"])
            .arg(dir.join("log"))
            .arg("start")
            .stdout(std::process::Stdio::null()))?;
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        eprintln!("    {url}");
        run::done(t);
        Ok(Self { dir, bin, url })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_pg(&self.bin, "pg_ctl")
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop")
            .stdout(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
