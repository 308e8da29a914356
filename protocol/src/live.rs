//! The live channel: `GET /api/sessions/{id}/live` (WebSocket). JSON text frames carry
//! [`WsClient`] (client → server) and [`WsServer`] (server → client); binary frames carry
//! terminal bytes both ways, prefixed by the terminal's id ([`encode_terminal`]).
//! Share links, roles and presence live here too.

use serde::{Deserialize, Serialize};

use crate::api::{PromptMode, Session};
use crate::event::Event;
use crate::ids::*;

/// Largest frame a client may send (bigger ones close the channel with [`close::TOO_BIG`]).
pub const MAX_FRAME_BYTES: usize = 64 * 1024;
/// Most terminal bytes in one server → client frame: output already queued for a client goes
/// out merged into frames up to this size, so a client that falls behind gets fewer, larger
/// frames instead of more small ones.
pub const MAX_OUTPUT_FRAME_BYTES: usize = 64 * 1024;
/// Most bytes waiting to be written to one client; a client that falls this far behind is
/// closed with [`close::TOO_SLOW`] so it never holds the others back.
pub const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// The server pings this often; clients answer (WebSocket pong) or are dropped.
pub const HEARTBEAT_SECS: u64 = 15;
/// A channel with no frame from the client for this long is closed.
pub const IDLE_TIMEOUT_SECS: u64 = 60;
/// Viewers listed by name in a live session (drivers and the owner always are); the rest
/// are counted ([`WsServer::Audience`]).
pub const LISTED_VIEWERS: usize = 32;
/// Least time between two `audience` messages to one member.
pub const AUDIENCE_INTERVAL_MS: u64 = 250;
/// Most events sent in one `events` frame (a replay comes in several).
pub const MAX_EVENTS_PER_FRAME: usize = 200;
/// Terminal bytes a late joiner gets to redraw the screen.
pub const TERMINAL_SCROLLBACK_BYTES: usize = 256 * 1024;
/// Most terminals one session has open at once.
pub const MAX_TERMINALS: usize = 8;
/// Longest share-link lifetime.
pub const MAX_LINK_TTL_SECS: i64 = 30 * 24 * 3600;
/// Longest display name.
pub const MAX_DISPLAY_NAME: usize = 60;
/// Most live connections of guests (people without an account) through one share link at once.
pub const MAX_GUESTS_PER_LINK: usize = 100;

/// WebSocket close codes.
pub mod close {
    /// No (valid) credential.
    pub const UNAUTHORIZED: u16 = 4401;
    /// The credential does not allow this (e.g. its share link was revoked).
    pub const FORBIDDEN: u16 = 4403;
    /// No such session.
    pub const NOT_FOUND: u16 = 4404;
    /// The client fell too far behind ([`super::MAX_QUEUED_BYTES`]).
    pub const TOO_SLOW: u16 = 4408;
    /// A frame over [`super::MAX_FRAME_BYTES`].
    pub const TOO_BIG: u16 = 4413;
    /// Too many connections through one share link ([`super::MAX_GUESTS_PER_LINK`]), or
    /// edits faster than [`super::DOC_UPDATES_PER_SEC`].
    pub const TOO_MANY: u16 = 4429;
    /// A document update or awareness message that does not decode, or names another
    /// participant's client.
    pub const BAD_UPDATE: u16 = 4400;
    /// The server failed.
    pub const INTERNAL: u16 = 4500;
}

/// What a participant may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Watches: never types, resizes or prompts.
    Viewer,
    /// Types in terminals (when no one else holds control), prompts, opens terminals.
    Driver,
    /// The session's owner: a driver who can also take control, share and revoke.
    Owner,
}

impl Role {
    pub fn can_drive(self) -> bool {
        self >= Role::Driver
    }
}

/// One connected participant (one per live channel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    /// Per connection; a person with two tabs is two participants.
    pub id: u32,
    pub name: String,
    pub role: Role,
    /// Signed in (`Some`) or a share-link guest.
    pub user_id: Option<UserId>,
    /// What they are looking at (`terminal:1`, `diff`, …), as they say.
    pub looking_at: Option<String>,
}

/// A terminal of the session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminal {
    pub id: u32,
    pub cols: u16,
    pub rows: u16,
    pub command: Vec<String>,
}

/// Client → server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WsClient {
    /// Send events after `after` (0 = all), then every new one.
    Subscribe { after: Seq },
    /// Open a terminal (drivers).
    OpenTerminal { cols: u16, rows: u16 },
    /// This participant's view of a terminal is `cols`×`rows` (drivers); a terminal takes the
    /// smallest size among the drivers who sent one. (Input is a binary frame; every terminal's
    /// output streams to every participant from the moment they join.)
    Resize { terminal: u32, cols: u16, rows: u16 },
    /// Say what this participant looks at.
    Presence { looking_at: Option<String> },
    /// Ask for control of the terminals (granted at once when no one holds it).
    RequestControl,
    /// Hand control to another participant (the holder or the owner).
    GrantControl { to: u32 },
    /// Give control back (no one holds it: every driver may type).
    ReleaseControl,
    /// Take control (the owner).
    TakeControl,
    /// Queue or steer a prompt (drivers).
    Prompt {
        text: String,
        #[serde(default)]
        mode: PromptMode,
    },
    /// Watch the desktop: a WebRTC offer (non-trickle: all candidates in the SDP) asking to
    /// receive its video; answered by `desktop_answer`.
    DesktopOffer { sdp: String },
    /// Stop watching the desktop.
    DesktopClose,
    /// Mouse or keyboard on the desktop (the participant who holds control, or any driver
    /// when no one does).
    DesktopInput { input: DesktopInput },
    /// Answer an approval the agent asked for (drivers and the owner).
    AnswerApproval {
        approval: crate::ApprovalId,
        approve: bool,
        #[serde(default)]
        for_session: bool,
        #[serde(default)]
        reason: Option<String>,
    },
    /// List the workspace's files (answered by `file_tree`).
    ListFiles,
    /// Open a file of the workspace as a shared document (everyone; drivers edit, viewers
    /// watch). Answered by `file_opened`, or `file_gone` when it cannot be opened.
    OpenFile { path: String },
    /// Stop following a file.
    CloseFile { path: String },
    /// An edit: a Yjs update (v1 encoding, base64) of an open file's document (drivers).
    FileUpdate { path: String, update: String },
    /// This participant's cursor and selection in an open file: a y-protocols awareness
    /// update (base64) for this participant's own client only.
    FileAwareness { path: String, update: String },
}

impl WsClient {
    /// The message's `type`, as a refusal names it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Subscribe { .. } => "subscribe",
            Self::OpenTerminal { .. } => "open_terminal",
            Self::Resize { .. } => "resize",
            Self::Presence { .. } => "presence",
            Self::RequestControl => "request_control",
            Self::GrantControl { .. } => "grant_control",
            Self::ReleaseControl => "release_control",
            Self::TakeControl => "take_control",
            Self::Prompt { .. } => "prompt",
            Self::DesktopOffer { .. } => "desktop_offer",
            Self::DesktopClose => "desktop_close",
            Self::DesktopInput { .. } => "desktop_input",
            Self::AnswerApproval { .. } => "answer_approval",
            Self::ListFiles => "list_files",
            Self::OpenFile { .. } => "open_file",
            Self::CloseFile { .. } => "close_file",
            Self::FileUpdate { .. } => "file_update",
            Self::FileAwareness { .. } => "file_awareness",
        }
    }
}

/// One input event for the desktop; coordinates are fractions (0..1) of the screen, so any
/// video size maps onto it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DesktopInput {
    Move {
        x: f64,
        y: f64,
    },
    /// `button`: 1 left, 2 middle, 3 right.
    Down {
        x: f64,
        y: f64,
        button: u8,
    },
    Up {
        x: f64,
        y: f64,
        button: u8,
    },
    /// Lines to scroll; positive is down.
    Scroll {
        x: f64,
        y: f64,
        dy: i32,
    },
    /// A key by its DOM `key` name (`a`, `Enter`, `ArrowLeft`, …), pressed and released, with
    /// the modifiers held (Shift is in `key` itself for characters: `A`, `!`).
    Key {
        key: String,
        #[serde(default)]
        ctrl: bool,
        #[serde(default)]
        alt: bool,
        #[serde(default)]
        shift: bool,
        #[serde(default)]
        meta: bool,
    },
    /// Text typed as is.
    Text {
        text: String,
    },
}

/// Server → client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(
    clippy::large_enum_variant,
    reason = "`Hello` is sent once per connection; boxing it would only move the allocation"
)]
pub enum WsServer {
    /// The first frame: who you are and the session as it is. `participants` lists the
    /// drivers, the owner and the first [`LISTED_VIEWERS`] viewers; `audience` counts the
    /// other viewers, you among them if you are not listed (a crowd is a number, not a list).
    Hello {
        you: Participant,
        session: Session,
        terminals: Vec<Terminal>,
        participants: Vec<Participant>,
        controller: Option<u32>,
        #[serde(default)]
        audience: u32,
    },
    /// Events in order, without gaps, after what was last sent.
    Events { events: Vec<Event> },
    /// The terminals changed (opened, resized, ended).
    Terminals { terminals: Vec<Terminal> },
    /// Someone joined the list (the participant list changes by deltas after the hello, so
    /// a change costs each member one small message, never a list). Viewers past
    /// [`LISTED_VIEWERS`] are not listed but counted: see `audience`.
    Joined { participant: Participant },
    /// The count of viewers connected but not listed changed: the newest count, at most one
    /// message per [`AUDIENCE_INTERVAL_MS`].
    Audience { viewers: u32 },
    /// Someone left. If they held control, a `control` with `None` follows.
    Left { id: u32 },
    /// What someone looks at changed.
    Presence { id: u32, looking_at: Option<String> },
    /// Control moved; `None`: free, every driver may type.
    Control { controller: Option<u32> },
    /// Someone asks for control (sent to the holder and the owner).
    ControlRequested { by: u32 },
    /// Something this client asked for was not done, and why.
    Refused { request: String, reason: String },
    /// The answer to `desktop_offer` (all candidates in the SDP).
    DesktopAnswer { sdp: String },
    /// The workspace's files: tracked and new, sorted by path.
    FileTree {
        files: Vec<crate::agent::TreeEntry>,
        truncated: bool,
    },
    /// A file opened: its document's whole state (a Yjs v1 update, base64) and everyone's
    /// cursors in it (a y-protocols awareness update, base64, empty when there are none).
    FileOpened {
        path: String,
        update: String,
        awareness: String,
        read_only: bool,
    },
    /// Someone else's edit, or the workspace's (the agent, a formatter, `git checkout`).
    FileUpdate { path: String, update: String },
    /// Cursors moved, arrived or left (names and colours set by the server).
    FileAwareness { path: String, update: String },
    /// The file is no longer open here: deleted or renamed in the workspace, grown past
    /// [`MAX_DOC_BYTES`], binary, or the workspace stopped.
    FileGone { path: String, reason: String },
}

/// Largest file opened as a shared document (bytes of UTF-8); larger files are listed and
/// marked, and open in VS Code or the terminal instead.
pub const MAX_DOC_BYTES: usize = 1024 * 1024;
/// Documents open at once in one session.
pub const MAX_OPEN_DOCS: usize = 16;
/// Documents one participant follows at once.
pub const MAX_DOCS_PER_MEMBER: usize = 4;
/// People in one document at once.
pub const MAX_EDITORS_PER_DOC: usize = 32;
/// Largest single update or awareness message (decoded bytes).
pub const MAX_DOC_UPDATE_BYTES: usize = 32 * 1024;
/// Updates a participant may send per second, sustained (bursts of twice as many pass).
pub const DOC_UPDATES_PER_SEC: u32 = 100;
/// Files listed in a workspace's tree at most.
pub const MAX_TREE_ENTRIES: usize = 20_000;

/// A binary frame: the terminal id (big-endian u32) then its bytes.
pub fn encode_terminal(terminal: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&terminal.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The terminal id and bytes of a binary frame.
pub fn decode_terminal(frame: &[u8]) -> Option<(u32, &[u8])> {
    let id = u32::from_be_bytes(frame.get(..4)?.try_into().ok()?);
    Some((id, &frame[4..]))
}

/// `POST /api/sessions/{id}/links`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateLink {
    pub role: Role,
    /// Seconds, at most [`MAX_LINK_TTL_SECS`] (default one day).
    #[serde(default)]
    pub expires_in: Option<i64>,
    /// Let people without an account join with a display name.
    #[serde(default)]
    pub allow_guests: bool,
}

/// A share link (the token only in the answer to its creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareLink {
    pub jti: String,
    pub session_id: SessionId,
    pub role: Role,
    pub allow_guests: bool,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    /// The signed token and the URL to open, only when just created.
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
}

/// `POST /api/links/join`: a signed-in user joins with a link's role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinLink {
    pub token: String,
}

/// The answer to a join.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Joined {
    pub session_id: SessionId,
    pub role: Role,
}
