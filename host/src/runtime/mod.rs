//! Workspace runtimes: start an isolated workspace on a stack of read-only layers with a fresh
//! writable layer, run commands in it, stop it without leaving anything behind.
//!
//! [`Runtime`] is the boundary sessions and snapshots use; [`oci::OciRuntime`] implements it with
//! an OCI runtime binary (runc, crun or gVisor's runsc) on an overlayfs root. A Kubernetes driver
//! can implement the same trait later without touching callers.

use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::Serialize;

use crate::Result;

pub mod disk;
pub mod dns;
#[cfg(test)]
mod dns_internal_tests;
pub mod doctor;
mod inroot;
pub mod kind;
pub mod limits;
mod local_agent;
pub mod network;
pub mod oci;
mod overlay;
pub mod seccomp;
mod spec;
pub mod userns;

/// Largest stdout or stderr kept from one `exec` (the rest is dropped and reported truncated).
pub const MAX_EXEC_OUTPUT: usize = 1024 * 1024;

/// What a workspace runs on and with.
#[derive(Clone, Debug)]
pub struct WorkspaceSpec {
    /// Unique id (letters, digits, `-`), used for the container, its cgroup and its directory.
    pub id: String,
    /// Read-only layers, topmost first (snapshot layers, then the image's root filesystem).
    pub layers: Vec<PathBuf>,
    /// Reuse this writable layer (resume, fork) instead of a fresh empty one.
    pub upper: Option<PathBuf>,
    /// The container's hostname.
    pub hostname: String,
    /// Environment of the init process and of `exec`.
    pub env: Vec<(String, String)>,
    /// The container's first process (behind a minimal init that reaps zombies).
    pub init: Vec<String>,
    /// Host paths bound into the workspace.
    pub binds: Vec<Bind>,
    pub limits: Limits,
    /// Domains it may reach; `None`: no network but its own loopback.
    pub egress: Option<network::Egress>,
}

/// A host path bound into the workspace.
#[derive(Clone, Debug)]
pub struct Bind {
    pub host: PathBuf,
    pub container: String,
    pub readonly: bool,
}

/// cgroup limits of one workspace.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Limits {
    /// Memory (and memory + swap) limit in bytes.
    pub memory_bytes: i64,
    /// Most processes and threads.
    pub pids: i64,
    /// CPU quota in cores (1.5 = one and a half cores).
    pub cpus: f64,
    /// Size of the workspace's own disk (its writable layer and the directories bound into
    /// it), where the runtime gives it one ([`disk`]).
    pub disk_bytes: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 4 << 30,
            pids: 4096,
            cpus: 2.0,
            disk_bytes: 20 << 30,
        }
    }
}

/// Every host directory of one workspace, in one place.
#[derive(Clone, Debug)]
pub struct Dirs {
    /// Its own writable layer ([`Runtime::upper_dir`]).
    pub upper: PathBuf,
    /// Bound at the workspace agent's socket directory (on the workspace's disk: it writes here).
    pub agent: PathBuf,
    /// Bound at `/tmp/.X11-unix` (on its disk: its X server writes here).
    pub x11: PathBuf,
    /// Bound read-only at the gateway's socket directory: beside the disk, not on it (the
    /// workspace cannot write here, and a listening socket would keep the disk busy).
    pub gateway: PathBuf,
}

/// The host directories of workspace `id` on `rt`.
pub fn dirs(rt: &dyn Runtime, id: &str) -> Dirs {
    let upper = rt.upper_dir(id);
    Dirs {
        agent: upper.with_file_name("agent"),
        x11: upper.with_file_name("x11"),
        gateway: rt.workspace_dir(id).join("gateway"),
        upper,
    }
}

/// A command to run inside a workspace.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: Vec<(String, String)>,
    /// Kill it after this many seconds.
    pub timeout_secs: Option<u64>,
}

/// What a command did.
#[derive(Clone, Debug, Serialize)]
pub struct ExecOutput {
    /// Exit code; 128 + n when killed by signal n; `None` when it was killed for its timeout.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// True when output beyond [`MAX_EXEC_OUTPUT`] was dropped.
    pub truncated: bool,
}

/// A running workspace.
#[derive(Clone, Debug)]
pub struct Workspace {
    pub id: String,
    /// The merged root filesystem as the host sees it (for host-side git operations).
    pub rootfs: PathBuf,
    /// The workspace's own writable layer.
    pub upper: PathBuf,
    /// Which start of the workspace this is, as the runtime knows it: callers store it and
    /// hand it back ([`Runtime::connect_agent`], [`Runtime::alive`]) and read nothing into it.
    /// (This machine's runtimes use the init's host pid.)
    pub instance: i32,
}

/// A byte stream to a workspace's agent: HTTP/1.1 and WebSocket upgrades run over it.
pub trait AgentIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> AgentIo for T {}

/// [`Runtime::connect_agent`]'s connection.
pub type AgentStream = Box<dyn AgentIo>;

/// Where a workspace's connections to its gateway arrive ([`Runtime::listen_gateway`]).
pub trait GatewayListener: Send + 'static {
    /// The next connection from the workspace.
    fn accept(&mut self) -> BoxFuture<'_, std::io::Result<AgentStream>>;
}

/// How a stop treats the writable layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Delete it.
    Nothing,
    /// Keep it on disk (suspend, archive, snapshot capture).
    Upper,
}

/// A workspace runtime.
pub trait Runtime: Send + Sync {
    /// Its name for people (`runc`, `crun`, `runsc`).
    fn name(&self) -> &str;
    /// Starts a workspace; returns once its init runs. A failed start undoes what it made but
    /// keeps the writable layer (a resumed or forked session's work): the caller stops with
    /// [`Keep::Nothing`] to drop a fresh one.
    fn start(&self, spec: WorkspaceSpec) -> BoxFuture<'_, Result<Workspace>>;
    /// Runs a command inside a running workspace and waits for it.
    fn exec<'a>(&'a self, id: &'a str, req: ExecRequest) -> BoxFuture<'a, Result<ExecOutput>>;
    /// True while the workspace's init is alive.
    fn is_running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// Freezes every process of a workspace (for a consistent copy of its layer).
    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Thaws a paused workspace.
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Workspace `id`'s directory on the host (its disk, when it has one, is inside).
    fn workspace_dir(&self, id: &str) -> PathBuf;
    /// The host uid of a workspace's root (not 0 under a user namespace).
    fn root_uid(&self) -> u32 {
        0
    }
    /// Where workspace `id` keeps its own writable layer (when none is given at start).
    fn upper_dir(&self, id: &str) -> PathBuf;
    /// Makes workspace `id`'s own writable layer ready (on its own disk of `limits.disk_bytes`
    /// where the runtime gives it one) and returns [`Runtime::upper_dir`]. Call it before
    /// writing into the layer or into directories beside it (a fork's copy, a snapshot's
    /// checkout, the agent's socket directory); `start` calls it too.
    fn prepare<'a>(&'a self, id: &'a str, limits: Limits) -> BoxFuture<'a, Result<PathBuf>> {
        let _ = limits;
        Box::pin(async move {
            let upper = self.upper_dir(id);
            std::fs::create_dir_all(&upper)?;
            Ok(upper)
        })
    }
    /// Ids of the workspaces this runtime knows (running or not).
    fn list(&self) -> BoxFuture<'_, Result<Vec<String>>>;
    /// Kills every process, removes the container, its cgroup and its mount; keeps the writable
    /// layer if asked. Stopping a workspace that is already gone is not an error.
    fn stop<'a>(&'a self, id: &'a str, keep: Keep) -> BoxFuture<'a, Result<()>>;
    /// A connection to workspace `id`'s agent, checked to lead into that workspace; `instance`
    /// is what [`Workspace::instance`] said at its start. Here: the agent's unix socket, whose
    /// peer must be inside the workspace. A runtime whose workspaces run elsewhere gives an
    /// authenticated network connection instead; the agent also checks the workspace's token on
    /// every request.
    fn connect_agent<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
    ) -> BoxFuture<'a, Result<AgentStream>> {
        Box::pin(async move { local_agent::connect(id, &self.upper_dir(id), instance).await })
    }
    /// A listener for workspace `id`'s connections to its gateway (the model relay, the git
    /// relay, its tools): here a unix socket only the workspace's root may open, in a directory
    /// bound read-only into the workspace. Made again for a restarted workspace (see
    /// [`Runtime::gateway_listening`]).
    fn listen_gateway<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn GatewayListener>>> {
        Box::pin(async move {
            let dir = self.workspace_dir(id).join("gateway");
            local_agent::listen_gateway(&dir, self.root_uid())
        })
    }
    /// Whether the listener [`Runtime::listen_gateway`] made for workspace `id` still reaches
    /// it (a resumed workspace gets a fresh directory, without the old socket).
    fn gateway_listening(&self, id: &str) -> bool {
        local_agent::gateway_socket(&self.workspace_dir(id).join("gateway")).exists()
    }
    /// Whether workspace `id`'s start `instance` still runs (the supervisor asks every second;
    /// a dead one fails its session).
    fn alive<'a>(&'a self, _id: &'a str, instance: i32) -> BoxFuture<'a, bool> {
        Box::pin(async move { local_agent::alive(instance) })
    }
    /// Takes a running workspace back after this server restarted (its egress name server).
    fn reattach<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// Rejects ids that could escape a directory or confuse the runtime.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(crate::Error::Invalid(format!(
            "workspace id {id:?} must be 1–64 letters, digits or '-'"
        )));
    }
    Ok(())
}
