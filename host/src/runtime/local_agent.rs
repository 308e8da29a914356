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
    super::spec::INIT_COMMS
        .iter()
        .any(|c| stat.contains(&format!("({c})")))
        && state != Some('Z')
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A process in a PID namespace of its own (as a workspace's init is), killed on drop.
    struct Contained(std::process::Child);

    impl Drop for Contained {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// `unshare --pid --fork sleep`: the host pid of the `sleep`, which runs in the new
    /// namespace.
    fn contained() -> Option<(Contained, i32)> {
        let child = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "60"])
            .spawn()
            .ok()?;
        let parent = child.id();
        let guard = Contained(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children =
                std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
            {
                return Some((guard, pid));
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// A workspace that swaps its agent socket for one a host process answers (here: this
    /// test, outside the workspace's PID namespace) gets no connection: the peer does not lead
    /// into the workspace.
    #[tokio::test]
    async fn a_socket_answered_outside_the_workspace_is_refused() {
        let Some((_init, init_pid)) = contained() else {
            eprintln!("SKIP: cannot make a PID namespace here (needs root and unshare)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        let agent_dir = dir.path().join("agent");
        std::fs::create_dir_all(&agent_dir).unwrap();
        let socket = agent_dir.join(Path::new(agent::SOCKET).file_name().unwrap());
        let _host_side = tokio::net::UnixListener::bind(&socket).unwrap();
        let refused = connect("w-test", &upper, init_pid).await;
        assert!(
            matches!(&refused, Err(Error::Forbidden(m)) if m.contains("does not lead into the workspace")),
            "{:?}",
            refused.map(|_| ())
        );
        // The same socket, with this process's own namespace as the workspace's: taken.
        let own = i32::try_from(std::process::id()).unwrap();
        assert!(connect("w-test", &upper, own).await.is_ok());
    }

    #[test]
    fn a_dead_or_foreign_process_is_not_a_live_init() {
        assert!(!alive(i32::MAX));
        // This test process is alive, but no workspace's init (dumb-init).
        assert!(!alive(i32::try_from(std::process::id()).unwrap()));
    }
}
