//! Running commands and reporting progress.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// `cargo build` arguments for the server binary and the workspace agent it binds into
/// workspaces. Both binaries are named: `--bin` filters the binaries of every package given, so
/// `--bin tandem` alone would drop the agent. [`build_server`] builds them and
/// `tandem-confine`; `cargo xtask test` runs clippy with the arguments after `build`.
pub const SERVER_BINARIES: &[&str] = &[
    "build",
    "-p",
    "tandem-server",
    "-p",
    "tandem-workspace-agent",
    "--bin",
    "tandem",
    "--bin",
    "tandem-workspace-agent",
];

/// Builds everything `tandem serve` runs ([`SERVER_BINARIES`] and [`build_confine`]).
pub fn build_server(release: bool) -> Result<()> {
    let mut c = cargo();
    c.args(SERVER_BINARIES).current_dir(root());
    if release {
        c.arg("--release");
    }
    cmd(&mut c)?;
    build_confine(release)
}

/// Builds the release server, its agent and `tandem-confine` as [`build_server`] does, and the
/// benchmark `bench` (a binary of `tandem-bench`) in the same `cargo build`, whose dependencies
/// add no feature to the server's: the server `cargo xtask up` built is reused, not rebuilt.
/// Returns the benchmark's path.
pub fn build_bench(bench: &str) -> Result<PathBuf> {
    cmd(cargo()
        .args(SERVER_BINARIES)
        .args(["-p", "tandem-bench", "--bin", bench, "--release"])
        .current_dir(root()))?;
    build_confine(true)?;
    Ok(target_dir().join("release").join(bench))
}

/// Builds `tandem-confine` linked statically: it runs in workspaces before their seccomp filter
/// is in, so it must not run a workspace's own dynamic loader and libraries (the server refuses
/// a dynamically linked one). `cargo rustc` gives the flag to this one binary only.
pub fn build_confine(release: bool) -> Result<()> {
    let mut c = cargo();
    c.args(["rustc", "-p", "tandem-confine", "--bin", "tandem-confine"])
        .current_dir(root());
    if release {
        c.arg("--release");
    }
    cmd(c.args(["--", "-C", "target-feature=+crt-static"]))
}

/// The binaries `up` needs in `profile_dir` (`target/release` or `target/debug`), checked
/// after the build so a filtered build can never pass unnoticed.
pub fn check_server_binaries(profile_dir: &Path) -> Result<()> {
    for bin in ["tandem", "tandem-workspace-agent", "tandem-confine"] {
        let p = profile_dir.join(bin);
        if !p.is_file() {
            bail!("the build did not produce {}", p.display());
        }
    }
    Ok(())
}

/// The repository root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repo")
        .to_path_buf()
}

/// The cargo target dir (`CARGO_TARGET_DIR` or `<root>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Prints a step header; returns a timer for [`done`].
pub fn step(what: &str) -> Instant {
    eprintln!("\x1b[1;34m==>\x1b[0m \x1b[1m{what}\x1b[0m");
    Instant::now()
}

/// Prints how long a step took.
pub fn done(t: Instant) {
    eprintln!("    done in {:.1}s", t.elapsed().as_secs_f64());
}

/// Runs a command to completion, failing with its command line if it fails.
pub fn cmd(c: &mut Command) -> Result<()> {
    let line = format!("{c:?}");
    let status = c.status().with_context(|| format!("cannot run {line}"))?;
    if !status.success() {
        bail!("{line} failed with {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout, or `None` if it cannot run or fails.
pub fn output(c: &mut Command) -> Option<String> {
    let out = c.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// A new Python venv at `dir` (whatever was there goes) with pip's `requirement` installed.
pub fn venv(dir: &Path, requirement: &str) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    cmd(Command::new("python3").args(["-m", "venv"]).arg(dir))?;
    cmd(Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(requirement))
}

/// The path of `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        })
        .unwrap_or(None)
}

/// A free TCP port on loopback.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// True when running as root.
pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

/// The cargo binary that runs us.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Totals of a `cargo test` run.
#[derive(Default)]
pub struct TestCounts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

/// Runs `cargo test …`, passing its output through, and adds up its `test result:` lines.
pub fn cargo_test(c: &mut Command) -> Result<TestCounts> {
    use std::io::{BufRead, BufReader};
    let line = format!("{c:?}");
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {line}"))?;
    let mut counts = TestCounts::default();
    for l in BufReader::new(child.stdout.take().context("stdout")?).lines() {
        let l = l?;
        println!("{l}");
        if let Some(rest) = l.trim().strip_prefix("test result: ") {
            for part in rest.split([';', '.']) {
                let mut words = part.split_whitespace();
                if let (Some(n), Some(what)) = (
                    words.next().and_then(|n| n.parse::<usize>().ok()),
                    words.next(),
                ) {
                    match what {
                        "passed" => counts.passed += n,
                        "failed" => counts.failed += n,
                        "ignored" => counts.ignored += n,
                        _ => {}
                    }
                }
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "{line} failed with {status} ({} passed, {} failed)",
            counts.passed,
            counts.failed
        );
    }
    if counts.passed == 0 {
        bail!("{line} ran no test");
    }
    Ok(counts)
}
