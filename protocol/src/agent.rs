//! The workspace agent's API: what the server asks the daemon inside a workspace over the
//! workspace's unix socket (HTTP, `Authorization: Bearer <per-workspace token>`).

use serde::{Deserialize, Serialize};

/// The agent's HTTP routes, shared by the agent (its router) and the server's client. A `{id}`
/// or `{service}` is filled in with [`routes::with`].
pub mod routes {
    pub const HEALTH: &str = "/health";
    /// `GET ?path=` a file or directory listing, `PUT ?path=` a file.
    pub const FILES: &str = "/files";
    /// `GET`: the checkout's files ([`super::FileTree`]).
    pub const FILES_TREE: &str = "/files/tree";
    /// `POST`: wait for an open file to change ([`super::WatchFile`] → [`super::FileNow`]).
    pub const FILES_WATCH: &str = "/files/watch";
    pub const GIT_STATUS: &str = "/git/status";
    pub const GIT_COMMIT: &str = "/git/commit";
    /// `GET` the terminals, `POST` a new one.
    pub const PTYS: &str = "/ptys";
    /// A WebSocket to terminal `{id}`.
    pub const PTY_ATTACH: &str = "/ptys/{id}/attach";
    /// `POST` starts the desktop, `GET` its state and browser page.
    pub const DESKTOP: &str = "/desktop";
    pub const DESKTOP_INPUT: &str = "/desktop/input";
    pub const DESKTOP_OPEN: &str = "/desktop/open";
    /// `POST` starts VS Code.
    pub const CODE: &str = "/code";
    /// An upgraded byte tunnel to `{service}` on the workspace's loopback.
    pub const TUNNEL: &str = "/tunnel/{service}";
    /// `POST` starts a turn; its frames stream back as newline-delimited JSON.
    pub const TURNS: &str = "/turns";
    pub const TURN_STEER: &str = "/turns/{id}/steer";
    pub const TURN_STOP: &str = "/turns/{id}/stop";
    /// An upgraded connection the server leaves open for the workspace's next connection to the
    /// gateway ([`super::GATEWAY_BRIDGE_ENV`]).
    pub const GATEWAY_BRIDGE: &str = "/gateway/bridge";
    /// The workspace's own files ([`super::KEPT_DIRS`]) as a tar layer, each directory
    /// replacing the one below it (an opaque whiteout): what a pod leaves when it stops.
    pub const LAYER: &str = "/layer";

    /// `route` with its one `{…}` parameter filled in.
    pub fn with(route: &str, value: impl std::fmt::Display) -> String {
        match (route.find('{'), route.find('}')) {
            (Some(a), Some(b)) if a < b => format!("{}{value}{}", &route[..a], &route[b + 1..]),
            _ => route.to_string(),
        }
    }
}

/// Where the agent listens, inside the workspace.
pub const SOCKET: &str = "/run/tandem/agent/agent.sock";
/// Where the agent binary is bound into the workspace (read-only).
pub const BINARY: &str = "/run/tandem/bin/tandem-workspace-agent";
/// Where the server binds its `opencode` binary, when it has one (read-only).
pub const OPENCODE_BINARY: &str = "/run/tandem/bin/opencode";
/// The environment variable that carries the agent's token.
pub const TOKEN_ENV: &str = "TANDEM_AGENT_TOKEN";
/// Where the agent also listens over TCP when set: a loopback address. In a pod, the API
/// server's port-forward arrives on the pod's own loopback.
pub const LISTEN_ENV: &str = "TANDEM_AGENT_LISTEN";
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
}

/// `GET /files?path=…`: a directory's entries or a file's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileView {
    Dir {
        path: String,
        entries: Vec<FileEntry>,
    },
    /// `content` is the file as UTF-8; `binary` files come back lossily decoded.
    File {
        path: String,
        size: u64,
        content: String,
        binary: bool,
    },
}

/// `PUT /files?path=…`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    pub content: String,
    /// Write only if the file's content now has this SHA-256 (hex); else `409` and nothing
    /// is written (the server's shared documents: a change it has not seen is merged first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_sha: Option<String>,
}

/// One file of the checkout's tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TreeEntry {
    /// Relative to the workspace root, `/`-separated.
    pub path: String,
    pub size: u64,
    /// Not UTF-8 text (a NUL byte in its first KiB, or it does not decode).
    pub binary: bool,
    /// Not tracked by git yet.
    pub new: bool,
}

/// `GET /files/tree`: what git tracks plus new files that are not ignored, sorted by path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileTree {
    pub files: Vec<TreeEntry>,
    /// More than [`crate::live::MAX_TREE_ENTRIES`] files: the rest are left out.
    pub truncated: bool,
}

/// `POST /files/watch`: answer once `path`'s content is no longer the one whose SHA-256 is
/// `known` (hex), or after `wait_ms` (at most 25,000) with `same`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchFile {
    pub path: String,
    pub known: String,
    pub wait_ms: u32,
}

/// What a watched file is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FileNow {
    Same,
    Changed { content: String },
    Gone,
    TooLarge { size: u64 },
    Binary,
}

/// Query string of the file routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    /// Relative to the workspace root; `""` is the root itself.
    #[serde(default)]
    pub path: String,
}

/// Most bytes of terminal output a PTY keeps for late joiners.
pub const PTY_SCROLLBACK_BYTES: usize = 256 * 1024;
/// Most PTYs one workspace runs at once.
pub const MAX_PTYS: usize = 32;

/// `POST /ptys`: open a terminal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtyOpen {
    pub cols: u16,
    pub rows: u16,
    /// Default: `bash -l` (or `sh` where there is no bash).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Default: the workspace root.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// An open terminal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtyInfo {
    pub id: u32,
    pub command: Vec<String>,
    pub cols: u16,
    pub rows: u16,
}

/// A text frame on a PTY's attach WebSocket (binary frames are terminal bytes both ways).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyControl {
    /// Client → agent: the terminal's new size.
    Resize { cols: u16, rows: u16 },
    /// Agent → client: the program ended.
    Exit { code: Option<i32> },
}

/// One changed path of `GET /git/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GitChange {
    pub path: String,
    /// The two-letter porcelain code (`" M"`, `"??"`, `"A "`, `" D"`, …).
    pub code: String,
}

/// `GET /git/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GitStatus {
    pub branch: String,
    pub head: String,
    pub changes: Vec<GitChange>,
}

/// `POST /git/commit`: commit every change in the checkout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitCommit {
    pub message: String,
    pub author_name: String,
    pub author_email: String,
}

/// The answer to `POST /git/commit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GitCommitted {
    pub commit: String,
}

/// The server's gateway inside the workspace (a read-only bind): model requests
/// (`POST /v1/chat/completions`, OpenAI-compatible; the server adds the API key) and the agent's
/// calls back to Tandem (`/tandem/...`, scoped to the workspace's session).
pub const GATEWAY_SOCKET: &str = "/run/tandem/gateway/gateway.sock";
/// Where the agent forwards TCP to the gateway socket inside the workspace, for CLI agents that
/// speak HTTP over TCP only (`OPENAI_BASE_URL=http://127.0.0.1:4100/v1`).
pub const GATEWAY_LOOPBACK: &str = "127.0.0.1:4100";
/// The directories a workspace that cannot keep its writable layer (a pod) keeps instead: the
/// checkout and the home directory.
pub const KEPT_DIRS: [&str; 2] = ["/workspace", "/root"];
/// Set (to `1`) where the server cannot hand the workspace a socket (a pod on a cluster): the
/// agent itself listens on [`GATEWAY_SOCKET`] and carries each connection to it over one of the
/// connections the server keeps open to it ([`routes::GATEWAY_BRIDGE`]).
pub const GATEWAY_BRIDGE_ENV: &str = "TANDEM_GATEWAY_BRIDGE";
/// Set (to `1`) where the workspace's egress goes through the server's proxy (a pod with an
/// allow-list): the agent listens on [`EGRESS_PROXY_PORT`] of the workspace's loopback and
/// carries each connection there to the gateway, which takes `CONNECT name:port` (and
/// absolute-form plain HTTP) as a request to reach out.
pub const EGRESS_PROXY_ENV: &str = "TANDEM_EGRESS_PROXY";
/// The workspace's egress proxy port, on its own loopback (`HTTPS_PROXY` names it).
pub const EGRESS_PROXY_PORT: u16 = 7312;
/// The byte the agent sends on a bridge when a connection to the gateway takes it; the
/// connection's own bytes follow.
pub const BRIDGE_TAKEN: u8 = 0x01;
/// The `Upgrade` protocol of a bridge.
pub const BRIDGE_PROTOCOL: &str = "tandem-gateway";
/// Largest tool output the agent returns whole (the event keeps a cut, the artifact the rest).
pub const MAX_TOOL_OUTPUT_BYTES: usize = 1024 * 1024;

/// `POST /turns`: work on one prompt. The answer streams [`TurnFrame`]s as newline-delimited
/// JSON; closing the stream stops the turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnStart {
    pub turn_id: crate::PromptId,
    pub prompt: String,
    pub author: crate::Author,
    pub agent: crate::AgentSpec,
    /// The model name sent to the gateway.
    pub model: String,
    /// What the agent returned in its last `state` frame of the previous turn (its conversation),
    /// so any workspace continues the same conversation.
    #[serde(default)]
    pub state: Option<serde_json::Value>,
    /// Most model requests in one turn.
    pub max_steps: u32,
    /// Images that come with the prompt (a page's screenshots): the builtin agent sends them to
    /// the model with the text, other agents find them as files (the prompt names the paths).
    #[serde(default)]
    pub images: Vec<TurnImage>,
}

/// A repo's MCP server run inside the workspace over stdio (`tandem.toml` `[[mcp]]`): the
/// builtin agent starts it and asks the gateway ([`APPROVAL_PATH`]) before each call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalMcp {
    /// Letters, digits, `-` and `_`; its tools reach the model as `<name>__<tool>`.
    pub name: String,
    /// The program and its arguments, run in `/workspace`.
    pub command: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

/// The gateway as an MCP server itself (streamable HTTP): the same tools, named
/// `<server>__<tool>`, under the same policy, for agents configured with MCP servers (OpenCode).
pub const MCP_SERVER_PATH: &str = "/mcp";

/// `GET`: the tools of the remote MCP servers the session may use ([`McpTool`]s; those the
/// policy denies are not offered).
pub const MCP_TOOLS_PATH: &str = "/tandem/mcp/tools";
/// `POST` an [`McpCall`]: the gateway applies the policy (asking a person where it says
/// `ask`), adds the server's credential, calls it and answers an [`McpOutcome`].
pub const MCP_CALL_PATH: &str = "/tandem/mcp/call";

/// A remote MCP server's tool as the gateway offers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpTool {
    pub server: String,
    pub tool: String,
    pub description: String,
    /// Its JSON Schema for the arguments.
    pub input_schema: serde_json::Value,
    pub hints: crate::approval::ToolHints,
    /// What the policy says of it (`allow` or `ask`).
    pub action: crate::approval::ToolAction,
}

/// [`MCP_CALL_PATH`]'s body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpCall {
    pub server: String,
    pub tool: String,
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// A tool call's result as the model gets it (text, cut to [`MAX_TOOL_OUTPUT_BYTES`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpOutcome {
    pub output: String,
    pub is_error: bool,
}

/// `POST` an [`AskApproval`] before calling a tool of a server inside the workspace; the
/// answer is a [`crate::approval::Decision`] (it waits while a person is asked).
pub const APPROVAL_PATH: &str = "/tandem/approvals";

/// [`APPROVAL_PATH`]'s body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskApproval {
    pub server: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    #[serde(default)]
    pub hints: crate::approval::ToolHints,
}

/// Where the workspace agent writes a turn's images for agents that read files.
pub const CONTEXT_DIR: &str = "/tmp/tandem-context";

/// An image with a turn's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnImage {
    /// A file name: letters, digits, `-`, `_` and one `.png`.
    pub name: String,
    /// `image/png`.
    pub content_type: String,
    /// Base64 (standard alphabet).
    pub data: String,
}

/// `POST /turns/{id}/steer`: a prompt for the running turn, delivered at its next tool boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSteer {
    pub prompt_id: crate::PromptId,
    pub text: String,
}

/// One line of `POST /turns`' answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnFrame {
    /// Streamed reply text (coalesced, a few per second).
    Delta { text: String },
    /// A whole reply.
    Message { text: String },
    ToolCall {
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    /// `output` is at most [`MAX_TOOL_OUTPUT_BYTES`].
    ToolResult {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
        exit_code: Option<i32>,
        duration_ms: i64,
    },
    FileChanged {
        path: String,
        change: crate::FileChange,
    },
    /// A steering prompt joined the conversation.
    Steered { prompt_id: crate::PromptId },
    /// The agent's state to keep for the next turn.
    State { state: serde_json::Value },
    /// The last frame. `undelivered`: steering prompts that arrived too late for this turn.
    End {
        outcome: crate::TurnOutcome,
        usage: crate::Usage,
        error: Option<String>,
        #[serde(default)]
        undelivered: Vec<crate::PromptId>,
    },
}

/// The gateway path the git credential helper asks for the session's GitHub credential.
pub const GIT_CREDENTIAL_PATH: &str = "/tandem/git/credential";
/// The gateway path prefix that relays git's smart HTTP to the session's GitHub repository:
/// `http://127.0.0.1:4100/git/<owner>/<name>.git`, which the workspace's git config puts in place
/// of the repository's GitHub URL.
pub const GIT_RELAY_PREFIX: &str = "/git/";
/// The gateway path of the agent's `attach_image` tool: an [`Attachment`] becomes an artifact
/// of the session and an `attachment` event.
pub const ATTACHMENT_PATH: &str = "/tandem/attachments";
/// Largest attachment.
pub const MAX_ATTACHMENT_BYTES: usize = 5 * 1024 * 1024;

/// `POST` [`ATTACHMENT_PATH`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    pub name: String,
    pub content_type: String,
    /// The bytes, base64.
    pub data: String,
}

/// The gateway path of the agent's `open_pull_request` tool.
pub const PULL_REQUEST_PATH: &str = "/tandem/pr";

/// What the credential helper gets: an installation token for the session's repository only,
/// expiring with the session (or within the hour, whichever comes first; asking again renews it).
#[derive(Clone, Serialize, Deserialize)]
pub struct GitCredential {
    pub username: String,
    pub password: String,
    /// Unix seconds.
    pub expires_at: i64,
}

impl std::fmt::Debug for GitCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitCredential")
            .field("username", &self.username)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// `POST /desktop`: start the desktop (display and browser) if it is not running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesktopInfo {
    /// The X display inside the workspace (`:99`).
    pub display: String,
    pub width: u32,
    pub height: u32,
}

/// `POST /desktop/input`: events injected into the display (XTest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopInputs {
    pub events: Vec<crate::live::DesktopInput>,
}

/// `GET /desktop` (and `GET /api/sessions/{id}/desktop`): the desktop and its browser's page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesktopPage {
    pub running: bool,
    pub url: Option<String>,
    pub title: Option<String>,
    /// The stream, while anyone watches (filled in by the server).
    #[serde(default)]
    pub stream: Option<DesktopStreamStats>,
}

/// A desktop stream's numbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesktopStreamStats {
    pub viewers: u32,
    pub fps: u32,
    /// Frames encoded since the stream started, and how many of them were keyframes.
    pub frames: u64,
    #[serde(default)]
    pub keyframes: u64,
    /// Capture → encoded, over the last frames (µs).
    pub encode_latency_p50_us: u64,
    pub encode_latency_p99_us: u64,
    /// The encoder process (its CPU time is the capture and encode cost).
    pub encoder_pid: Option<u32>,
}

/// `POST /desktop/open` (and `POST /api/sessions/{id}/desktop/open`): show a URL in the
/// desktop's browser.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DesktopOpen {
    pub url: String,
}
