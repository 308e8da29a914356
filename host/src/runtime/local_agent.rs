//! How this machine's runtimes reach a workspace's agent and tell whether it runs: the agent's
//! unix socket in the workspace's directory, and the init's host process. The defaults of
//! [`super::Runtime::connect_agent`] and [`super::Runtime::alive`]; nothing outside the runtime
//! sees the socket path or the pid.
//!
//! The agent runs inside the workspace, so everything it says is untrusted input. The socket
//! lives in a directory the workspace can write, so a workspace could swap it for a symlink to
//! some host socket: every connection is therefore checked to lead to a process in the
//! workspace's own PID namespace before it is handed out.

use std::path::{Path, PathBuf};

use tandem_protocol::agent;

use super::{AgentStream, GatewayListener};
use crate::{Error, Result};

fn pid_namespace(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn unreachable(e: &dyn std::fmt::Display) -> Error {
    Error::Unavailable(format!("the workspace agent is not reachable: {e}"))
}

/// A connection to the agent of workspace `id` whose writable layer is `upper` and whose init
/// is host process `init_pid`, checked to lead into that workspace.
pub async fn connect(id: &str, upper: &Path, init_pid: i32) -> Result<AgentStream> {
    let socket = upper
        .with_file_name("agent")
        .join(Path::new(agent::SOCKET).file_name().unwrap_or_default());
    let stream = tokio::net::UnixStream::connect(&socket)
        .await
        .map_err(|e| unreachable(&e))?;
    // The peer must live in this workspace's PID namespace (see the module comment).
    let peer = stream
        .peer_cred()
        .map_err(|e| unreachable(&e))?
        .pid()
        .unwrap_or(0);
    let (Some(theirs), Some(ours)) = (pid_namespace(peer), pid_namespace(init_pid)) else {
        return Err(unreachable(&"cannot identify the agent process"));
    };
    if theirs != ours {
        return Err(Error::Forbidden(format!(
            "the agent socket of {id} does not lead into the workspace"
        )));
    }
    Ok(Box::new(stream))
}

/// True while host process `init_pid` is the live (not zombie) init of a workspace.
pub fn alive(init_pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{init_pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    stat.contains("(tini)") && state != Some('Z')
}

/// The gateway's socket in directory `dir` (bound read-only at the gateway's socket directory).
pub fn gateway_socket(dir: &Path) -> PathBuf {
    dir.join(
        Path::new(agent::GATEWAY_SOCKET)
            .file_name()
            .unwrap_or_default(),
    )
}

/// A fresh gateway socket in `dir`, which only the workspace's root (`root`, the host uid it
/// maps to) may open: no other host user, and no other workspace, reaches this gateway.
pub fn listen_gateway(dir: &Path, root: u32) -> Result<Box<dyn GatewayListener>> {
    let path = gateway_socket(dir);
    std::fs::create_dir_all(dir)?;
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    std::os::unix::fs::lchown(&path, Some(root), Some(root))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(Box::new(Unix(listener)))
}

struct Unix(tokio::net::UnixListener);

impl GatewayListener for Unix {
    fn accept(&mut self) -> futures::future::BoxFuture<'_, std::io::Result<AgentStream>> {
        Box::pin(async move {
            let (stream, _) = self.0.accept().await?;
            Ok(Box::new(stream) as AgentStream)
        })
    }
}
