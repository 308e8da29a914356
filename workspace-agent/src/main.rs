//! The daemon inside every workspace: serves the server over the workspace's unix socket.
//! `tandem-workspace-agent serve [--socket PATH] [--root DIR]`; the token comes from
//! `TANDEM_AGENT_TOKEN`. `tandem-workspace-agent git-credential get` is git's credential helper
//! inside the workspace (`credential.rs`). `tandem-workspace-agent isolate-network` takes a pod's
//! network away before its workspace starts (`isolate.rs`).
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tandem_protocol::agent;

mod bridge;
mod code;
mod credential;
mod desktop;
mod files;
mod forward;
mod git;
mod http;
mod isolate;
mod layer;
mod pty;
mod turns;
mod vnc;
mod watch;
mod xinput;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut socket = PathBuf::from(agent::SOCKET);
    let mut root = PathBuf::from(agent::WORKSPACE_ROOT);
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("serve") => {}
        Some("git-credential") => return credential::run(it.next().map(String::as_str)),
        Some("isolate-network") => return isolate::network(),
        Some("--version") => {
            println!("tandem-workspace-agent {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        _ => bail!(
            "usage: tandem-workspace-agent serve [--socket PATH] [--root DIR] | git-credential get|store|erase | isolate-network"
        ),
    }
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--socket" => socket = value.into(),
            "--root" => root = value.into(),
            other => bail!("unknown flag {other}"),
        }
    }
    let token = std::env::var(agent::TOKEN_ENV)
        .with_context(|| format!("{} is not set", agent::TOKEN_ENV))?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(http::serve(socket, root, token))
}
