//! Prerequisites, installed only when missing: the wasm32 target, wasm-bindgen-cli at the
//! lockfile's version, npm packages (binaryen's wasm-opt), and Debian packages (test only:
//! PostgreSQL, Chromium and ChromeDriver, runc, crun, runsc, mmdebstrap, nftables, iproute2, e2fsprogs and util-linux).

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::run::{self, cmd, output, which};

/// What to install.
pub struct Needs {
    /// Test-only prerequisites too.
    pub test: bool,
}

/// Installs whatever is missing.
pub fn ensure(needs: Needs) -> Result<()> {
    let t = run::step("checking prerequisites");
    let mut apt: Vec<&str> = Vec::new();
    if which("node").is_none() || which("npm").is_none() {
        apt.extend(["nodejs", "npm"]);
    }
    if which("git").is_none() {
        apt.push("git");
    }
    // The desktop stream: GStreamer to build against (pkg-config) and its plugins to run
    // (ximagesrc in -good, vp8enc in -good's vpx, videoconvert and appsink in -base).
    let gst_plugin = |name: &str| {
        std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("gstreamer-1.0").join(name).exists())
    };
    let gst_dev = Command::new("pkg-config")
        .args(["--exists", "gstreamer-app-1.0"])
        .status()
        .is_ok_and(|s| s.success());
    // code-server's native modules build here (node-gyp): a compiler, make, Kerberos headers.
    if which("g++").is_none() || which("make").is_none() {
        apt.extend(["g++", "make"]);
    }
    if !std::path::Path::new("/usr/include/gssapi/gssapi.h").exists() {
        apt.push("libkrb5-dev");
    }
    if which("python3").is_none() {
        apt.push("python3");
    }
    if !gst_dev {
        apt.extend([
            "pkg-config",
            "libgstreamer1.0-dev",
            "libgstreamer-plugins-base1.0-dev",
        ]);
    }
    if !gst_plugin("libgstvpx.so") || !gst_plugin("libgstximagesrc.so") {
        apt.push("gstreamer1.0-plugins-good");
    }
    if !gst_plugin("libgstvideoconvertscale.so") && !gst_plugin("libgstvideoconvert.so") {
        apt.push("gstreamer1.0-plugins-base");
    }
    // H.264 for the desktop (`[desktop] codec = "h264"`; the desktop benchmark measures it):
    // OpenH264's encoder is in -bad.
    if needs.test && !gst_plugin("libgstopenh264.so") {
        apt.push("gstreamer1.0-plugins-bad");
    }
    // Workspaces: OCI runtimes and the image builder (tests always; `up` as root, since
    // workspaces need root).
    if needs.test || run::is_root() {
        for (bin, pkg) in [
            ("runc", "runc"),
            ("crun", "crun"),
            ("mmdebstrap", "mmdebstrap"),
            ("nft", "nftables"),
            ("ip", "iproute2"),
            // Per-workspace disks: ext4 images on loop devices.
            ("mkfs.ext4", "e2fsprogs"),
        ] {
            if which(bin).is_none() && !std::path::Path::new("/usr/sbin").join(bin).exists() {
                apt.push(pkg);
            }
        }
    }
    if needs.test {
        if which("chromium").is_none() {
            apt.push("chromium");
        }
        if which("chromedriver").is_none() {
            apt.push("chromium-driver");
        }
        if crate::postgres::bin_dir().is_none() {
            apt.push("postgresql");
        }
    }
    // gVisor: optional for the server, installed for the tests so they cover it. python3 serves
    // the egress test's stand-in for the internet.
    if needs.test {
        for (bin, pkg) in [("runsc", "runsc"), ("python3", "python3")] {
            if which(bin).is_none() {
                apt.push(pkg);
            }
        }
    }
    apt_install(&apt)?;
    wasm_target()?;
    wasm_bindgen()?;
    npm()?;
    agent_clis()?;
    if needs.test {
        // The OpenID provider the sign-in tests run against (npm's oidc-provider).
        npm_ci(
            &run::root().join("tests/oidc-provider"),
            "the test OpenID provider (tests/oidc-provider/package-lock.json)",
        )?;
        // The MCP servers the tools tests run against (npm's reference servers).
        npm_ci(
            &run::root().join("tests/mcp-servers"),
            "the test MCP servers (tests/mcp-servers/package-lock.json)",
        )?;
    }
    run::done(t);
    Ok(())
}

fn apt_install(pkgs: &[&str]) -> Result<()> {
    if pkgs.is_empty() {
        return Ok(());
    }
    eprintln!("    installing Debian packages: {}", pkgs.join(" "));
    let sudo = !run::is_root();
    if sudo && which("sudo").is_none() {
        bail!(
            "need Debian packages {} and neither root nor sudo is available",
            pkgs.join(" ")
        );
    }
    let apt = |args: &[&str]| {
        let mut c = if sudo {
            Command::new("sudo")
        } else {
            Command::new("apt-get")
        };
        if sudo {
            c.arg("apt-get");
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    cmd(&mut apt(&["update", "-q"]))?;
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(pkgs);
    cmd(&mut install)
}

fn wasm_target() -> Result<()> {
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed
        .lines()
        .any(|l| l.trim() == "wasm32-unknown-unknown")
    {
        return Ok(());
    }
    eprintln!("    adding the wasm32-unknown-unknown target");
    cmd(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))
}

/// The wasm-bindgen version pinned in Cargo.lock.
pub fn locked_wasm_bindgen() -> Result<String> {
    let lock =
        std::fs::read_to_string(run::root().join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|v| v.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    bail!("wasm-bindgen is not in Cargo.lock")
}

fn wasm_bindgen() -> Result<()> {
    let want = locked_wasm_bindgen()?;
    let have = output(Command::new("wasm-bindgen").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("    installing wasm-bindgen-cli {want} (a few minutes, once)");
    // Not --locked: its lockfile pins a crate version the registry no longer serves.
    cmd(run::cargo().args(["install", "wasm-bindgen-cli", "--version", &want]))
}

/// The opencode binary the server binds into workspaces (`images/agents/package.json`).
pub fn opencode_bin() -> std::path::PathBuf {
    run::root().join("images/agents/node_modules/opencode-linux-x64/bin/opencode")
}

fn agent_clis() -> Result<()> {
    let dir = run::root().join("images/agents");
    // A lockfile written without an install leaves the stamp fresh: check the package too.
    if !dir.join("node_modules/code-server/package.json").exists() {
        let _ = std::fs::remove_file(dir.join("node_modules/.package-lock.json"));
    }
    npm_ci_with(
        &dir,
        "CLI agents and VS Code for workspaces (images/agents/package-lock.json)",
        &["--ignore-scripts"],
    )?;
    code_server(&dir.join("node_modules/code-server"))
}

/// code-server's own install steps, offline: its VS Code dependencies without their scripts,
/// ripgrep's download replaced by the workspace's own `rg` (the base image has it), then its
/// postinstall (native modules built here against this Node.js), and argon2's binding.
fn code_server(dir: &std::path::Path) -> Result<()> {
    let stamp = dir.join(".tandem-installed");
    if stamp.exists() {
        return Ok(());
    }
    eprintln!("    setting up code-server (native modules; a few minutes)");
    let vscode = dir.join("lib/vscode");
    cmd(Command::new("npm")
        .args([
            "install",
            "--ignore-scripts",
            "--omit=dev",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(&vscode))?;
    let rg = vscode.join("node_modules/@vscode/ripgrep/bin");
    std::fs::create_dir_all(&rg)?;
    let _ = std::fs::remove_file(rg.join("rg"));
    std::os::unix::fs::symlink("/usr/bin/rg", rg.join("rg"))?;
    let node = output(Command::new("node").arg("--version")).context("node --version")?;
    let npm = output(Command::new("npm").arg("--version")).context("npm --version")?;
    cmd(Command::new("sh")
        .arg("postinstall.sh")
        .env(
            "npm_config_user_agent",
            format!("npm/{} node/{} linux x64", npm.trim(), node.trim()),
        )
        .env("npm_config_unsafe_perm", "true")
        .current_dir(dir))?;
    // npm 11 runs no dependency's install script it was not told to allow: build the native
    // modules VS Code needs on Linux one by one (node-pty's own post-install step wants the
    // network and fails after its build; what counts is the binding being there).
    for (pkg, binding) in [
        ("@vscode/spdlog", "build/Release/spdlog.node"),
        ("kerberos", "build/Release/kerberos.node"),
        ("native-watchdog", "build/Release/watchdog.node"),
        ("@vscode/deviceid", "build/Release/windows.node"),
        ("node-pty", "build/Release/pty.node"),
    ] {
        let _ = Command::new("npm")
            .args(["rebuild", pkg, "--loglevel=silent"])
            .current_dir(&vscode)
            .status();
        let built = vscode.join("node_modules").join(pkg).join(binding);
        if !built.exists() {
            bail!(
                "code-server's native module {pkg} did not build ({} is missing)",
                built.display()
            );
        }
    }
    cmd(Command::new("npm")
        .args(["rebuild", "argon2", "--loglevel=error"])
        .current_dir(
            dir.parent()
                .and_then(|p| p.parent())
                .context("code-server's place")?,
        ))?;
    std::fs::write(stamp, "")?;
    Ok(())
}

/// The code-server package directory `cargo xtask` sets up.
pub fn code_server_dir() -> std::path::PathBuf {
    run::root().join("images/agents/node_modules/code-server")
}

fn npm() -> Result<()> {
    npm_ci(
        &run::root().join("frontend"),
        "npm packages (frontend/package-lock.json)",
    )?;
    npm_ci(
        &run::root().join("frontend/editor"),
        "the shared editor's npm packages (frontend/editor/package-lock.json)",
    )
}

fn npm_ci(dir: &std::path::Path, what: &str) -> Result<()> {
    npm_ci_with(dir, what, &[])
}

fn npm_ci_with(dir: &std::path::Path, what: &str, extra: &[&str]) -> Result<()> {
    let dir = dir.to_path_buf();
    let stamp = dir.join("node_modules/.package-lock.json");
    let lock = dir.join("package-lock.json");
    let fresh = match (std::fs::metadata(&stamp), std::fs::metadata(&lock)) {
        (Ok(s), Ok(l)) => s.modified()? >= l.modified()?,
        _ => false,
    };
    if fresh {
        return Ok(());
    }
    eprintln!("    installing {what}");
    cmd(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .args(extra)
        .current_dir(&dir))
}
