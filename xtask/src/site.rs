//! Builds the web app into `target/site`: `static/` plus `pkg/` (the wasm bundle made by cargo +
//! wasm-bindgen, shrunk with binaryen's wasm-opt in release).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::run::{self, cmd};

/// Which wasm build.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Fast to build, large.
    Debug,
    /// `wasm-release` profile + `wasm-opt -Oz`.
    Release,
}

/// Builds the site; returns its directory.
pub fn build(profile: Profile) -> Result<PathBuf> {
    let t = run::step(match profile {
        Profile::Debug => "building the web app (debug wasm)",
        Profile::Release => "building the web app (release wasm + wasm-opt)",
    });
    let root = run::root();
    let target = run::target_dir();
    let mut build = run::cargo();
    build
        .args([
            "build",
            "-p",
            "tandem-frontend",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .current_dir(&root);
    let out_profile = match profile {
        Profile::Debug => "debug",
        Profile::Release => {
            build.args(["--profile", "wasm-release"]);
            "wasm-release"
        }
    };
    cmd(&mut build)?;
    let wasm = target
        .join("wasm32-unknown-unknown")
        .join(out_profile)
        .join("tandem_frontend.wasm");
    let site = target.join("site");
    let pkg = site.join("pkg");
    if site.exists() {
        std::fs::remove_dir_all(&site).with_context(|| format!("clearing {}", site.display()))?;
    }
    std::fs::create_dir_all(&pkg)?;
    cmd(Command::new("wasm-bindgen")
        .args([
            "--target",
            "web",
            "--no-typescript",
            "--out-name",
            "tandem",
            "--out-dir",
        ])
        .arg(&pkg)
        .arg(&wasm))?;
    let bundle = pkg.join("tandem_bg.wasm");
    if profile == Profile::Release {
        let wasm_opt = root.join("frontend/node_modules/.bin/wasm-opt");
        // The features rustc's wasm32 target enables by default; wasm-opt must accept them.
        cmd(Command::new(&wasm_opt)
            .args([
                "-Oz",
                "--enable-bulk-memory",
                "--enable-nontrapping-float-to-int",
                "--enable-sign-ext",
            ])
            .args([
                "--enable-mutable-globals",
                "--enable-reference-types",
                "--enable-multivalue",
            ])
            .arg(&bundle)
            .arg("-o")
            .arg(&bundle))?;
    }
    copy_dir(&root.join("static"), &site)?;
    // xterm.js from npm (frontend/package.json), served next to the app.
    let xterm = root.join("frontend/node_modules/@xterm/xterm");
    std::fs::create_dir_all(site.join("xterm"))?;
    std::fs::copy(xterm.join("lib/xterm.js"), site.join("xterm/xterm.js"))
        .context("xterm.js: run `cargo xtask deps`")?;
    std::fs::copy(xterm.join("css/xterm.css"), site.join("xterm/xterm.css"))?;
    // The shared editor (CodeMirror 6, yjs, y-codemirror.next from npm), bundled by esbuild.
    let editor = root.join("frontend/editor");
    std::fs::create_dir_all(site.join("editor"))?;
    cmd(Command::new(editor.join("node_modules/.bin/esbuild"))
        .args([
            "src/editor.js",
            "--bundle",
            "--minify",
            "--format=iife",
            "--target=es2020",
            "--log-level=warning",
        ])
        .arg(format!(
            "--outfile={}",
            site.join("editor/editor.js").display()
        ))
        .current_dir(&editor))
    .context("bundling the editor: run `cargo xtask deps`")?;
    // noVNC's library (ES modules; the desktop's fallback where WebRTC cannot reach).
    let novnc = root.join("frontend/node_modules/@novnc/novnc");
    std::fs::create_dir_all(site.join("novnc/core"))?;
    std::fs::create_dir_all(site.join("novnc/vendor"))?;
    copy_dir(&novnc.join("core"), &site.join("novnc/core"))
        .context("noVNC: run `cargo xtask deps`")?;
    copy_dir(&novnc.join("vendor"), &site.join("novnc/vendor"))?;
    let size = std::fs::metadata(&bundle)?.len();
    eprintln!(
        "    {} ({:.0} KiB wasm)",
        site.display(),
        size as f64 / 1024.0
    );
    run::done(t);
    Ok(site)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&dest)?;
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}
