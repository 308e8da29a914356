//! `cargo xtask up`: prerequisites, web app, server binary, then `tandem serve` in the
//! foreground with the embedded default (SQLite file in the data dir, local runtime).

use std::process::Command;

use anyhow::{Result, bail};

use crate::run::{self, cmd};
use crate::{deps, site};

/// Flags of `up`.
pub struct Options {
    debug: bool,
    install: bool,
    /// Build the server binaries (`--no-build`: run those already in the profile's target dir;
    /// `cargo xtask test`'s smoke test runs the server the suite has just built and tested).
    build: bool,
    /// Build the workspace base image if it is missing (needs root and mmdebstrap).
    image: bool,
    /// Passed to `tandem serve` as is (`--listen`, `--data-dir`, `--public-url`, …).
    serve_args: Vec<String>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = Options {
            debug: false,
            install: true,
            build: true,
            image: true,
            serve_args: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--debug" => o.debug = true,
                "--no-install" => o.install = false,
                "--no-build" => o.build = false,
                "--no-image" => o.image = false,
                "--listen" | "--data-dir" | "--database-url" | "--public-url" => {
                    let Some(v) = it.next() else {
                        bail!("{a} needs a value")
                    };
                    o.serve_args.extend([a.clone(), v.clone()]);
                }
                other => bail!(
                    "unknown flag {other:?} for `cargo xtask up` (--debug, --no-install, --no-build, --no-image, --listen, --data-dir, --database-url, --public-url)"
                ),
            }
        }
        Ok(o)
    }
}

pub fn run(o: Options) -> Result<()> {
    if o.install {
        deps::ensure(deps::Needs { test: false })?;
    }
    let site = site::build(if o.debug {
        site::Profile::Debug
    } else {
        site::Profile::Release
    })?;
    if o.build {
        let t = run::step(if o.debug {
            "building the server (debug)"
        } else {
            "building the server (release; ~10 min the first time)"
        });
        run::build_server(!o.debug)?;
        run::done(t);
    }
    let profile_dir = run::target_dir().join(if o.debug { "debug" } else { "release" });
    run::check_server_binaries(&profile_dir)?;
    let bin = profile_dir.join("tandem");
    if o.image {
        if run::is_root() && run::which("mmdebstrap").is_some() {
            // Once: an existing image of the same recipe is found by its digest and kept.
            let t = run::step("building the workspace image (once; a few minutes the first time)");
            let mut image = Command::new(&bin);
            image.args(["image", "build"]);
            if let Some(i) = o.serve_args.iter().position(|a| a == "--data-dir") {
                image.args(&o.serve_args[i..i + 2]);
            }
            cmd(&mut image)?;
            run::done(t);
        } else {
            eprintln!(
                "    skipping the workspace image: it needs root and mmdebstrap (sessions stay queued without it)"
            );
        }
    }
    run::step("starting Tandem (Ctrl-C stops it)");
    let mut serve = Command::new(bin);
    serve
        .arg("serve")
        .arg("--web-dir")
        .arg(&site)
        .arg("--print-login-link")
        .args(&o.serve_args);
    if crate::deps::code_server_dir()
        .join("out/node/entry.js")
        .is_file()
    {
        serve.env("TANDEM_CODE_SERVER_DIR", crate::deps::code_server_dir());
    }
    if crate::deps::opencode_bin().is_file() {
        serve.env("TANDEM_OPENCODE_BIN", crate::deps::opencode_bin());
    }
    exec(serve)
}

/// Replaces this process with `c` (so signals reach the server directly).
#[cfg(unix)]
fn exec(mut c: Command) -> Result<()> {
    use std::os::unix::process::CommandExt;
    Err(anyhow::anyhow!("cannot start {c:?}: {}", c.exec()))
}

#[cfg(not(unix))]
fn exec(mut c: Command) -> Result<()> {
    cmd(&mut c)
}
