//! Workspace runtimes: start an isolated workspace on a stack of read-only layers with a fresh
//! writable layer, run commands in it, stop it without leaving anything behind.
//!
//! [`Runtime`] is the boundary sessions and snapshots use; [`oci::OciRuntime`], this machine's
//! runtime, implements it with an OCI runtime binary (runc, crun or gVisor's runsc) on an
//! overlayfs root. Nothing here names a host path, a pid or a namespace: a workspace is an id,
//! its start an opaque [`Workspace::instance`], its files an opaque [`oci::Files`] the layer
//! store builds, and its agent and gateway are byte streams the runtime hands out. The local
//! runtime's own modules (`oci`, `layout`, `overlay`, `spec`, `local_agent`, `disk`, `userns`,
//! `inroot`, `beside`) are where this machine's paths and pids live; tidy keeps the rest of the
//! boundary free of them and keeps everything but the composition root from naming them.

use futures::future::BoxFuture;
use serde::Serialize;

use crate::Result;

pub mod beside;
pub mod cgroup_usage;
pub mod confine;
pub mod disk;
pub mod dns;
#[cfg(test)]
mod dns_internal_tests;
pub mod doctor;
pub mod egress_proxy;
mod inroot;
pub mod kind;
pub mod kubernetes;
mod layout;
pub mod limits;
mod local_agent;
mod loop_device;
pub mod network;
pub mod oci;
mod oci_exec;
mod overlay;
mod runtime_ns;
pub mod seccomp;
pub mod seccomp_bpf;
mod spec;
mod start_phases;
pub mod userns;

/// Largest stdout or stderr kept from one `exec` (the rest is dropped and reported truncated).
pub const MAX_EXEC_OUTPUT: usize = 1024 * 1024;

/// What a workspace runs on and with.
#[derive(Clone, Debug)]
pub struct WorkspaceSpec {
    /// Unique id (letters, digits, `-`), used for the container, its cgroup and its directory.
    pub id: String,
    /// Its read-only layers and what is bound into it, as the layer store made them
    /// ([`crate::Host::session_spec`], [`crate::Host::build_spec`]): opaque outside the runtime.
    pub files: oci::Files,
    /// The container's hostname.
    pub hostname: String,
    /// Environment of the init process and of `exec`.
    pub env: Vec<(String, String)>,
    /// The container's first process (behind a minimal init that reaps zombies).
    pub init: Vec<String>,
    pub limits: Limits,
    /// Domains it may reach; `None`: no network but its own loopback.
    pub egress: Option<network::Egress>,
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
    /// Which start of the workspace this is, as the runtime knows it: callers store it and
    /// hand it back ([`Runtime::connect_agent`], [`Runtime::alive`]) and read nothing into it.
    /// (This machine's runtimes use the init's host pid.)
    pub instance: i32,
    /// Where its start spent its time, step by step, in milliseconds (empty where the runtime
    /// does not say): what a slow start is explained with.
    pub took: Vec<(&'static str, f64)>,
}

/// `took` as one line: "disk 0.2, mount 1.1, runtime run 30.5 ms".
pub fn describe_steps(took: &[(&'static str, f64)]) -> String {
    let steps: Vec<String> = took.iter().map(|(s, ms)| format!("{s} {ms:.1}")).collect();
    format!("{} ms", steps.join(", "))
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
    /// Take the workspace down without keeping anything new, and without deleting what was
    /// kept before (a workspace whose keep failed, taken down anyway: on a cluster its last
    /// suspend's image stays; locally the layer stays on disk, as with [`Keep::Upper`]).
    Kept,
}

/// A workspace runtime.
pub trait Runtime: Send + Sync {
    /// Its name for people (`runc`, `crun`, `runsc`).
    fn name(&self) -> &str;
    /// Starts a workspace; returns once its init runs. A failed start undoes what it made but
    /// keeps the writable layer (a resumed or forked session's work): the caller stops with
    /// [`Keep::Nothing`] to drop a fresh one.
    fn start(&self, spec: WorkspaceSpec) -> BoxFuture<'_, Result<Workspace>>;
    /// How long [`Runtime::start`] may take where that is longer than a local start (a pod
    /// is scheduled and pulls its image first); callers wait at least this long.
    fn start_limit(&self) -> Option<std::time::Duration> {
        None
    }
    /// Runs a command inside a running workspace and waits for it.
    fn exec<'a>(&'a self, id: &'a str, req: ExecRequest) -> BoxFuture<'a, Result<ExecOutput>>;
    /// True while the workspace's init is alive.
    fn is_running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// Freezes every process of a workspace (for a consistent copy of its layer).
    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Whether [`Runtime::pause`] works here (a pod cannot be frozen: a copy of its files is
    /// made while it runs).
    fn freezes(&self) -> bool {
        true
    }
    /// Whether workspace `id` was taken away (its pod deleted: a drained or lost node, a
    /// person, the cluster's routine) rather than dying in place: its session gets a new one,
    /// where a workspace whose init exited (or was evicted past its own limits) fails it.
    fn taken_away<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }
    /// Makes workspace `from`'s files (running or kept) what workspace `to` starts with,
    /// where the runtime keeps them itself (a cluster's registry); on this machine
    /// [`crate::Host::copy_workspace_layer`] copies the layer instead.
    fn copy_kept<'a>(&'a self, from: &'a str, _to: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            Err(crate::Error::Unavailable(format!(
                "workspace {from}'s runtime does not copy what it keeps"
            )))
        })
    }
    /// Thaws a paused workspace.
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Makes workspace `id`'s own writable layer ready (on its own disk of `limits.disk_bytes`
    /// where the runtime gives it one). The layer store calls it before writing into the layer
    /// (a fork's copy, a snapshot's checkout); `start` calls it too.
    fn prepare<'a>(&'a self, id: &'a str, limits: Limits) -> BoxFuture<'a, Result<()>>;
    /// Ids of the workspaces this runtime knows (running or not).
    fn list(&self) -> BoxFuture<'_, Result<Vec<String>>>;
    /// Kills every process, removes the container, its cgroup and its mount; keeps the writable
    /// layer if asked. Stopping a workspace that is already gone is not an error.
    fn stop<'a>(&'a self, id: &'a str, keep: Keep) -> BoxFuture<'a, Result<()>>;
    /// A connection to workspace `id`'s agent, checked to lead into that workspace; `instance`
    /// is what [`Workspace::instance`] said at its start. Locally: the agent's unix socket, whose
    /// peer must be inside the workspace. A runtime whose workspaces run elsewhere gives an
    /// authenticated network connection instead; the agent also checks the workspace's token on
    /// every request.
    fn connect_agent<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
    ) -> BoxFuture<'a, Result<AgentStream>>;
    /// A listener for workspace `id`'s connections to its gateway (the model relay, the git
    /// relay, its tools). Made again for a restarted workspace (see
    /// [`Runtime::gateway_listening`]).
    fn listen_gateway<'a>(&'a self, id: &'a str)
    -> BoxFuture<'a, Result<Box<dyn GatewayListener>>>;
    /// True where the runtime cannot hand a workspace a socket of the server's: its gateway
    /// connections then come over bridges the server opens through
    /// [`Runtime::connect_agent`] ([`crate::Host::listen_gateway`]), and the workspace's agent
    /// is started to serve them (`agent::GATEWAY_BRIDGE_ENV`).
    fn gateway_through_agent(&self) -> bool {
        false
    }
    /// Whether the listener [`Runtime::listen_gateway`] made for workspace `id` still reaches
    /// it (a resumed workspace gets a fresh one).
    fn gateway_listening(&self, id: &str) -> bool;
    /// Whether workspace `id`'s start `instance` still runs (the supervisor asks every second;
    /// a dead one fails its session).
    fn alive<'a>(&'a self, id: &'a str, instance: i32) -> BoxFuture<'a, bool>;
    /// Where a program that reads workspace `id`'s display `display` (the desktop encoder) runs
    /// beside it ([`beside::Beside`]), or why it cannot.
    fn beside<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
        display: u32,
    ) -> BoxFuture<'a, Result<beside::Beside>> {
        let _ = (id, instance, display);
        Box::pin(async {
            Err(crate::Error::Unavailable(format!(
                "the {} runtime runs no desktop encoder beside its workspaces",
                self.name()
            )))
        })
    }
    /// This machine's runtime, when workspaces run on it: the layer store keeps their layers
    /// as directories here. A runtime wrapping it hands it out; one that runs workspaces
    /// elsewhere does not.
    fn local(&self) -> Option<&oci::OciRuntime> {
        None
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
