//! Limits every component agrees on. Changing one is a protocol change.

/// Largest request body the HTTP API accepts (1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Longest prompt text, in bytes.
pub const MAX_PROMPT_BYTES: usize = 256 * 1024;
/// Longest repo or token name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;
/// Longest git remote URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Most events returned by one `GET /api/sessions/{id}/events` call.
pub const MAX_EVENTS_PAGE: i64 = 1000;
/// Most sessions or repos returned by one list call.
pub const MAX_LIST: i64 = 500;
/// Seconds a browser login (the JWT in the session cookie) stays valid.
pub const BROWSER_LOGIN_TTL_SECS: i64 = 12 * 60 * 60;
/// Seconds a one-time login link stays valid.
pub const LOGIN_LINK_TTL_SECS: i64 = 24 * 60 * 60;
/// Seconds the server gives one HTTP request before answering 408.
pub const REQUEST_TIMEOUT_SECS: u64 = 30;
/// Seconds the server gives a request that stops, suspends, resumes or forks a session's
/// workspace before answering 408 (on a cluster a stop pushes the writable layer and waits for
/// the pod to go); the verb itself runs to its end either way.
pub const LIFECYCLE_TIMEOUT_SECS: u64 = 300;
/// Name of the HttpOnly cookie that carries the browser's JWT.
pub const SESSION_COOKIE: &str = "tandem_session";
/// Prefix of API tokens (`Authorization: Bearer tdm_…`).
pub const API_TOKEN_PREFIX: &str = "tdm_";
/// Prefix of one-time login codes (`/login#code=tlc_…`).
pub const LOGIN_CODE_PREFIX: &str = "tlc_";
/// Prefix of invite codes (`/invite#code=tiv_…`).
pub const INVITE_CODE_PREFIX: &str = "tiv_";
/// Seconds an invite stays valid unless its maker says otherwise.
pub const INVITE_TTL_SECS: i64 = 7 * 24 * 60 * 60;
/// Longest an invite may be made to last.
pub const MAX_INVITE_TTL_SECS: i64 = 30 * 24 * 60 * 60;
/// Seconds a pairing of the Chrome extension waits for its approval.
pub const PAIRING_TTL_SECS: i64 = 10 * 60;
/// Seconds the Chrome extension's token lasts (it pairs again after).
pub const EXTENSION_TOKEN_TTL_SECS: i64 = 30 * 24 * 60 * 60;
/// Seconds an OpenID Connect sign-in may take from the redirect to the callback.
pub const OIDC_FLOW_TTL_SECS: i64 = 10 * 60;
/// Seconds a person's GitHub permission on a repo is trusted before it is asked again.
pub const GITHUB_PERMISSION_TTL_SECS: i64 = 60;
/// Most command output kept inside one event (the full output is in the exec answer).
pub const MAX_EVENT_OUTPUT_BYTES: usize = 16 * 1024;
/// Most bytes of a short string a workspace's agent sends in a turn's frame (a changed file's
/// path, a tool's name, a tool call's id): longer ones are cut to it before they are recorded,
/// in the event and in the audit log.
pub const MAX_FRAME_FIELD_BYTES: usize = 4096;
/// Largest diff `GET /api/sessions/{id}/diff` returns.
pub const MAX_DIFF_BYTES: usize = 8 * 1024 * 1024;
/// Largest warm pool of one repo.
pub const MAX_WARM_POOL: i64 = 32;
/// The largest body of a request that may carry a page's context (`POST /api/sessions`, a
/// prompt): two screenshots and the element.
pub const MAX_CONTEXT_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of a picked element's outer HTML kept (the rest is cut, and the prompt says so).
pub const MAX_OUTER_HTML_BYTES: usize = 32 * 1024;
/// Most bytes of a picked element's text, selector, page URL and title.
pub const MAX_ELEMENT_TEXT_BYTES: usize = 4096;
pub const MAX_SELECTOR_BYTES: usize = 1024;
pub const MAX_PAGE_URL_BYTES: usize = 4096;
pub const MAX_PAGE_TITLE_BYTES: usize = 512;
/// Most component names in a picked element's React chain, and bytes per name.
pub const MAX_COMPONENTS: usize = 32;
pub const MAX_COMPONENT_BYTES: usize = 100;
/// Most console errors sent with a page, and bytes per error.
pub const MAX_CONSOLE_ERRORS: usize = 20;
pub const MAX_CONSOLE_ERROR_BYTES: usize = 2000;
/// Most bytes of one screenshot (PNG) and the most pixels on a side.
pub const MAX_SCREENSHOT_BYTES: usize = 3 * 1024 * 1024;
pub const MAX_SCREENSHOT_SIDE: u32 = 16_384;
/// Most pixels of one screenshot (a 5K screen at 2×): a PNG is small, its pixels are not.
pub const MAX_SCREENSHOT_PIXELS: u64 = 10_240 * 5_760;
/// Most bytes of page screenshots one session keeps.
pub const MAX_CONTEXT_BYTES_PER_SESSION: i64 = 64 * 1024 * 1024;
/// Most URL-pattern → repo rules for the extension's default repo.
pub const MAX_PAGE_RULES: usize = 200;

/// Most messages in one model request a workspace sends through its gateway (a long
/// conversation has hundreds), most content parts in one of its messages, and most tools it
/// offers: the gateway parses each request whole, so its shape is bounded as well as its bytes.
pub const MAX_MODEL_MESSAGES: usize = 4096;
pub const MAX_MODEL_CONTENT_PARTS: usize = 256;
pub const MAX_MODEL_TOOLS: usize = 256;

/// Most sessions one fork request makes.
pub const MAX_FORKS: i64 = 8;
/// How deep child sessions nest (a child of a child of a child), so an agent cannot spawn
/// without end.
pub const MAX_CHILD_DEPTH: usize = 3;
/// Most child sessions one session may spawn in all.
pub const MAX_CHILDREN: usize = 32;
/// Most sessions in one tree of child sessions (the root and every descendant).
pub const MAX_TREE_SESSIONS: usize = 64;

// What a workspace may make the server store, per session and per session tree (a root session
// and every descendant: the children its agent spawns, forks, and theirs). Stored rows are never
// deleted, so these are totals over a session's life. Everything a session's log holds counts
// (people's writes too), but only a workspace's writes are refused past a bound: its turns'
// frames, its agent's child prompts and attachments, its refused-lookup reports. The per-turn
// bounds (20,000 frames, 64 MiB of artifacts) still hold within each turn. Generous for real
// agents: a real turn records hundreds of events and a few MiB at most.

/// Most prompts a workspace may have waiting in one child session's queue (the rest are refused
/// until some have run): an agent hands a child work a few prompts at a time.
pub const MAX_QUEUED_PROMPTS_PER_SESSION: i64 = 1_000;
/// Most prompts waiting in the queues of a whole session tree when a workspace adds one.
pub const MAX_QUEUED_PROMPTS_PER_TREE: i64 = 10_000;
/// Most events a session's log holds before its workspace may add none (10 turns at the
/// per-turn bound, hundreds of real ones).
pub const MAX_EVENTS_PER_SESSION: i64 = 200_000;
/// Most bytes of event payloads a session's log holds before its workspace may add none.
pub const MAX_EVENT_BYTES_PER_SESSION: i64 = 256 * 1024 * 1024;
/// Most events of a whole session tree before its workspaces may add none.
pub const MAX_EVENTS_PER_TREE: i64 = 800_000;
/// Most bytes of event payloads of a whole session tree before its workspaces may add none.
pub const MAX_EVENT_BYTES_PER_TREE: i64 = 1024 * 1024 * 1024;
/// Most artifact bytes (tool outputs kept whole, attachments) a session keeps from its
/// workspace (8 turns at the per-turn bound).
pub const MAX_ARTIFACT_BYTES_PER_SESSION: i64 = 512 * 1024 * 1024;
/// Most artifact bytes a whole session tree keeps from its workspaces.
pub const MAX_ARTIFACT_BYTES_PER_TREE: i64 = 2 * 1024 * 1024 * 1024;
/// Refused lookups of a workspace's name server are reported at most once per this period: the
/// first after a quiet period at once, the rest summed up when the period ends.
pub const EGRESS_REPORT_PERIOD_SECS: u64 = 60;
/// Most names one refused-lookup report keeps (the first distinct ones of its period).
pub const MAX_EGRESS_REPORT_NAMES: usize = 20;

/// Failed session starts in a row after which a snapshot is set aside, if an older good one
/// exists to start from instead.
pub const SNAPSHOT_BREAKER_FAILURES: i64 = 3;

/// The largest terminal anyone may open or ask a terminal to be resized to.
pub const MAX_TERMINAL_COLS: u16 = 1000;
pub const MAX_TERMINAL_ROWS: u16 = 500;

/// Why `cols` × `rows` is no terminal size (at least 1 × 1, at most
/// [`MAX_TERMINAL_COLS`] × [`MAX_TERMINAL_ROWS`]), if it is not.
pub fn check_terminal_size(cols: u16, rows: u16) -> Result<(), String> {
    if cols == 0 || rows == 0 || cols > MAX_TERMINAL_COLS || rows > MAX_TERMINAL_ROWS {
        Err(format!(
            "a terminal is 1–{MAX_TERMINAL_COLS} columns by 1–{MAX_TERMINAL_ROWS} rows"
        ))
    } else {
        Ok(())
    }
}
