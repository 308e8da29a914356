//! The server's side of the workspace agent (the daemon inside each workspace): what a
//! workspace needs to run it (binary, socket directory, token), and [`WorkspaceAgent`], the typed client
//! of one workspace's agent over its unix socket.
//!
//! The agent runs inside the workspace, so everything it says is untrusted input. The socket
//! lives in a directory the workspace can write, so a workspace could swap it for a symlink to
//! some host socket: every connection is therefore checked to lead to a process in the
//! workspace's own PID namespace before a request is sent.

use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tandem_protocol::agent;

use crate::runtime::oci::Bind;
use crate::{Host, Result};

mod bridge;
mod calls;
mod conn;
mod ndjson;

pub use calls::{TurnFrames, check_file_size};

/// Largest answer read from an agent.
pub const MAX_ANSWER_BYTES: usize = 2 * agent::MAX_FILE_BYTES;
/// How long one call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The token of workspace `wid`: HMAC-SHA256 of its id under the agent key, so it survives a
/// server restart without being stored.
pub fn token(key: &[u8], wid: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(wid.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A workspace's init command, environment and binds.
pub(crate) type SpecParts = (Vec<String>, Vec<(String, String)>, Vec<Bind>);

/// The agent as a workspace's first process.
pub(crate) fn agent_init() -> Vec<String> {
    vec![agent::BINARY.to_string(), "serve".into()]
}

/// The environment the agent of workspace `wid` runs with: its token, and git's settings.
pub(crate) fn agent_env(host: &Host, wid: &str) -> Vec<(String, String)> {
    vec![
        (agent::TOKEN_ENV.to_string(), token(&host.agent_key, wid)),
        // The checkout's files have other owners and inode numbers in the workspace than where
        // its index was written (the host's checkout, shifted into the workspace's uids; the
        // layers under its own disk): git compares what is stable across both, mtime and
        // size, rather than re-reading every file at the first status.
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("GIT_CONFIG_KEY_0".into(), "core.checkStat".into()),
        ("GIT_CONFIG_VALUE_0".into(), "minimal".into()),
    ]
}

/// What a workspace spec needs to run the agent here: its init, env and binds.
pub(crate) fn spec_parts(host: &Host, wid: &str) -> Result<SpecParts> {
    let dirs = host.local()?.dirs(wid);
    let dir = dirs.agent;
    std::fs::create_dir_all(&dir)?;
    let init = agent_init();
    let env = agent_env(host, wid);
    let socket_dir = Path::new(agent::SOCKET)
        .parent()
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default();
    let gateway = dirs.gateway;
    std::fs::create_dir_all(&gateway)?;
    let x11 = dirs.x11;
    std::fs::create_dir_all(&x11)?;
    // Xvfb makes its socket here as root with mode 1777 like /tmp/.X11-unix.
    std::fs::set_permissions(&x11, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    let gateway_dir = Path::new(agent::GATEWAY_SOCKET)
        .parent()
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default();
    let binds = vec![
        Bind {
            host: dir,
            container: socket_dir,
            readonly: false,
        },
        // Read-only: the workspace can use the gateway's socket but not replace it.
        Bind {
            host: gateway,
            container: gateway_dir,
            readonly: true,
        },
        Bind {
            host: host.agent_bin.clone(),
            container: agent::BINARY.into(),
            readonly: true,
        },
        // The desktop's display socket, where the server's encoder can reach it.
        Bind {
            host: x11.clone(),
            container: "/tmp/.X11-unix".into(),
            readonly: false,
        },
    ];
    let mut binds = binds;
    if let Some((node, dir)) = &host.code_server {
        binds.push(Bind {
            host: node.clone(),
            container: "/run/tandem/bin/node".into(),
            readonly: true,
        });
        // The whole node_modules: code-server's own dependencies sit beside it (npm hoists them).
        let modules = dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.clone());
        binds.push(Bind {
            host: modules,
            container: "/run/tandem/node_modules".into(),
            readonly: true,
        });
    }
    if let Some(bin) = &host.opencode_bin {
        binds.push(Bind {
            host: bin.clone(),
            container: agent::OPENCODE_BINARY.into(),
            readonly: true,
        });
    }
    Ok((init, env, binds))
}

/// The agent of one running workspace: `workspace` is its id, `instance` the start of it the
/// runtime reported ([`crate::runtime::Workspace::instance`]); the runtime connects to it.
#[derive(Clone)]
pub struct WorkspaceAgent<'a> {
    pub host: &'a Host,
    pub workspace: String,
    pub instance: i32,
}

impl<'a> WorkspaceAgent<'a> {
    pub fn new(host: &'a Host, workspace: impl Into<String>, instance: i32) -> Self {
        Self {
            host,
            workspace: workspace.into(),
            instance,
        }
    }

    /// The bearer token this workspace's agent accepts.
    fn token(&self) -> String {
        token(&self.host.agent_key, &self.workspace)
    }
}
