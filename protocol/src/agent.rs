//! The workspace agent's API: what the server asks the daemon inside a workspace over the
//! workspace's unix socket (HTTP, `Authorization: Bearer <per-workspace token>`).

use serde::{Deserialize, Serialize};

/// Where the agent listens, inside the workspace.
pub const SOCKET: &str = "/run/tandem/agent/agent.sock";
/// Where the agent binary is bound into the workspace (read-only).
pub const BINARY: &str = "/run/tandem/bin/tandem-workspace-agent";
/// The environment variable that carries the agent's token.
pub const TOKEN_ENV: &str = "TANDEM_AGENT_TOKEN";
/// The directory the file API is confined to.
pub const WORKSPACE_ROOT: &str = "/workspace";
/// Largest file the file API reads or writes.
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;

/// `GET /health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHealth {
    pub version: String,
    /// Seconds since the agent started.
    pub uptime_secs: u64,
}

/// What a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
}

/// `GET /files?path=…`: a directory's entries or a file's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileView {
    Dir { path: String, entries: Vec<FileEntry> },
    /// `content` is the file as UTF-8; `binary` files come back lossily decoded.
    File { path: String, size: u64, content: String, binary: bool },
}

/// `PUT /files?path=…`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    pub content: String,
}

/// Query string of the file routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    /// Relative to the workspace root; `""` is the root itself.
    #[serde(default)]
    pub path: String,
}
