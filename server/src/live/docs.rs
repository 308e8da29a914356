//! A live session's open files: one shared document per file ([`super::doc::Document`]), the
//! people in each, and a task per document that keeps it and the workspace's file the same —
//! people's edits written to the file (debounced, atomically, and only over the content the
//! server last saw there), the workspace's own changes (the agent, a formatter, `git checkout`)
//! merged in from a long poll on the workspace agent, at most [`WATCH_MIN_INTERVAL`] apart.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use tandem_protocol::SessionId;
use tandem_protocol::agent::{FileNow, WatchFile};
use tandem_protocol::live::*;
use tokio::sync::Notify;

use super::doc::{self, Cursors, Document, User};
use super::hub::{Out, Outbox};
use crate::state::AppState;

/// People's edits are written to the workspace this long after they arrive (typing keeps
/// writing at most this often).
pub const WRITE_DEBOUNCE: Duration = Duration::from_millis(100);
/// The workspace's changes to one file are taken in at most this often, however fast it
/// rewrites the file.
pub const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(100);
/// How long one long poll on the workspace agent waits.
const WATCH_WAIT_MS: u32 = 20_000;

/// What a participant's document message led to.
#[derive(Debug)]
pub enum DocError {
    /// Not done; said to the participant (`refused`).
    Refused(String),
    /// The participant broke the protocol: its channel is closed with this code.
    Close(u16, String),
}

/// One participant in a document.
struct Editor {
    out: Outbox,
    may_edit: bool,
    user: User,
    /// Their editor's Yjs client, claimed by their first cursor update.
    client: Option<u64>,
    /// Token bucket of [`DOC_UPDATES_PER_SEC`].
    tokens: f64,
    at: Instant,
}

struct DocState {
    doc: Document,
    /// What the workspace's file holds, as far as the server knows.
    base: String,
    editors: BTreeMap<u32, Editor>,
    cursors: Cursors,
}

/// One open file.
struct Shared {
    path: String,
    st: Mutex<DocState>,
    dirty: Notify,
    stop: Notify,
    gone: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, DocState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who opens a document.
pub struct Opener<'a> {
    pub member: u32,
    pub out: &'a Outbox,
    pub may_edit: bool,
    pub name: &'a str,
}

/// A live session's open documents.
#[derive(Default)]
pub struct Docs {
    map: Mutex<HashMap<String, Arc<Shared>>>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A participant's base64 payload, decoded within [`MAX_DOC_UPDATE_BYTES`].
fn unb64(s: &str) -> Result<Vec<u8>, DocError> {
    if s.len() > MAX_DOC_UPDATE_BYTES * 4 / 3 + 4 {
        return Err(DocError::Close(
            close::TOO_BIG,
            format!("a document message carries at most {MAX_DOC_UPDATE_BYTES} bytes"),
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| DocError::Close(close::BAD_UPDATE, format!("not base64: {e}")))
}

/// `path` as the key of its document: relative, `/`-separated, no `.` or `..`.
pub fn clean_path(path: &str) -> Result<String, DocError> {
    let bad = |why: &str| DocError::Refused(format!("{path:?}: {why}"));
    if path.len() > 1024 || path.contains('\0') || path.starts_with('/') {
        return Err(bad("a path relative to the workspace is needed"));
    }
    let mut parts = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => return Err(bad("'..' is not allowed")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(bad("a file path is needed"));
    }
    Ok(parts.join("/"))
}

fn sha(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn send(out: &Outbox, msg: &WsServer) {
    out.push(Out::Text(serde_json::to_string(msg).unwrap_or_default()));
}

impl Docs {
    fn get(&self, path: &str) -> Option<Arc<Shared>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .filter(|s| !s.gone.load(Ordering::Acquire))
            .cloned()
    }

    /// Documents open now.
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|s| !s.gone.load(Ordering::Acquire))
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn following(&self, member: u32) -> usize {
        let all: Vec<_> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.iter()
            .filter(|s| s.lock().editors.contains_key(&member))
            .count()
    }

    /// Opens `path` for a participant: its document (read from the workspace if no one has it
    /// open) and everyone's cursors, sent as `file_opened`.
    pub async fn open(
        &self,
        state: &AppState,
        session: SessionId,
        who: Opener<'_>,
        path: &str,
    ) -> Result<(), DocError> {
        let path = clean_path(path)?;
        let shared = match self.get(&path) {
            Some(s) => s,
            None => {
                if self.following(who.member) >= MAX_DOCS_PER_MEMBER {
                    return Err(DocError::Refused(format!(
                        "you follow {MAX_DOCS_PER_MEMBER} files already; close one first"
                    )));
                }
                if self.len() >= MAX_OPEN_DOCS {
                    return Err(DocError::Refused(format!(
                        "this session has {MAX_OPEN_DOCS} files open already"
                    )));
                }
                let content = read(state, session, &path)
                    .await
                    .map_err(DocError::Refused)?;
                let fresh = Arc::new(Shared {
                    path: path.clone(),
                    st: Mutex::new(DocState {
                        doc: Document::new(&content),
                        base: content,
                        editors: BTreeMap::new(),
                        cursors: Cursors::default(),
                    }),
                    dirty: Notify::new(),
                    stop: Notify::new(),
                    gone: AtomicBool::new(false),
                });
                let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
                match map.get(&path).filter(|s| !s.gone.load(Ordering::Acquire)) {
                    // Someone opened it meanwhile: theirs is the document.
                    Some(s) => s.clone(),
                    None => {
                        map.insert(path.clone(), fresh.clone());
                        drop(map);
                        tokio::spawn(keep(state.clone(), session, fresh.clone()));
                        fresh
                    }
                }
            }
        };
        let mut st = shared.lock();
        if !st.editors.contains_key(&who.member) && st.editors.len() >= MAX_EDITORS_PER_DOC {
            return Err(DocError::Refused(format!(
                "{path} has {MAX_EDITORS_PER_DOC} people in it already"
            )));
        }
        st.editors.insert(
            who.member,
            Editor {
                out: who.out.clone(),
                may_edit: who.may_edit,
                user: User {
                    name: who.name.to_string(),
                    colour: doc::colour(who.member),
                },
                client: None,
                tokens: 2.0 * DOC_UPDATES_PER_SEC as f64,
                at: Instant::now(),
            },
        );
        send(
            who.out,
            &WsServer::FileOpened {
                path: path.clone(),
                update: b64(&st.doc.state()),
                awareness: b64(&st.cursors.all()),
                read_only: !who.may_edit,
            },
        );
        Ok(())
    }

    /// A participant's edit: applied, sent to everyone else in the file, written soon.
    pub fn update(&self, member: u32, path: &str, update: &str) -> Result<(), DocError> {
        let bytes = unb64(update)?;
        let shared = self.open_one(member, path)?;
        let mut st = shared.lock();
        let editor = spend(&mut st, member)?;
        if !editor.may_edit {
            return Err(DocError::Refused("viewers cannot edit".into()));
        }
        st.doc
            .apply(&bytes)
            .map_err(|why| DocError::Close(close::BAD_UPDATE, why))?;
        let msg = WsServer::FileUpdate {
            path: shared.path.clone(),
            update: update.to_string(),
        };
        broadcast(&st, &msg, Some(member));
        drop(st);
        shared.dirty.notify_one();
        Ok(())
    }

    /// A participant's cursor: rewritten with their name and colour, sent to the others.
    pub fn awareness(&self, member: u32, path: &str, update: &str) -> Result<(), DocError> {
        let bytes = unb64(update)?;
        let shared = self.open_one(member, path)?;
        let mut st = shared.lock();
        let editor = spend(&mut st, member)?;
        let (mut client, user) = (editor.client, editor.user.clone());
        let taken: Vec<u64> = st
            .editors
            .iter()
            .filter(|(id, _)| **id != member)
            .filter_map(|(_, e)| e.client)
            .collect();
        let out = st
            .cursors
            .accept(&bytes, &mut client, |c| taken.contains(&c), &user)
            .map_err(|why| DocError::Close(close::BAD_UPDATE, why))?;
        if let Some(e) = st.editors.get_mut(&member) {
            e.client = client;
        }
        let msg = WsServer::FileAwareness {
            path: shared.path.clone(),
            update: b64(&out),
        };
        broadcast(&st, &msg, Some(member));
        Ok(())
    }

    /// A participant stops following `path`.
    pub fn close(&self, member: u32, path: &str) {
        if let Ok(path) = clean_path(path)
            && let Some(shared) = self.get(&path)
        {
            self.remove(member, &shared);
        }
    }

    /// A participant left: out of every document.
    pub fn leave(&self, member: u32) {
        let all: Vec<_> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for shared in all {
            self.remove(member, &shared);
        }
    }

    fn remove(&self, member: u32, shared: &Arc<Shared>) {
        let mut st = shared.lock();
        let Some(editor) = st.editors.remove(&member) else {
            return;
        };
        if let Some(gone) = editor.client.and_then(|c| st.cursors.remove(c)) {
            let msg = WsServer::FileAwareness {
                path: shared.path.clone(),
                update: b64(&gone),
            };
            broadcast(&st, &msg, None);
        }
        if st.editors.is_empty() {
            drop(st);
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            if map
                .get(&shared.path)
                .is_some_and(|s| Arc::ptr_eq(s, shared))
            {
                map.remove(&shared.path);
            }
            // The last one out: what is unsaved is written, then the document goes.
            shared.stop.notify_one();
        }
    }

    fn open_one(&self, member: u32, path: &str) -> Result<Arc<Shared>, DocError> {
        let path = clean_path(path)?;
        self.get(&path)
            .filter(|s| s.lock().editors.contains_key(&member))
            .ok_or_else(|| DocError::Refused(format!("{path} is not open; open it first")))
    }
}

/// Takes one message from `member`'s bucket.
fn spend(st: &mut DocState, member: u32) -> Result<&Editor, DocError> {
    let e = st
        .editors
        .get_mut(&member)
        .ok_or_else(|| DocError::Refused("not in this file".into()))?;
    let now = Instant::now();
    let rate = DOC_UPDATES_PER_SEC as f64;
    e.tokens = (e.tokens + now.duration_since(e.at).as_secs_f64() * rate).min(2.0 * rate);
    e.at = now;
    if e.tokens < 1.0 {
        return Err(DocError::Close(
            close::TOO_MANY,
            format!("more than {DOC_UPDATES_PER_SEC} edits a second"),
        ));
    }
    e.tokens -= 1.0;
    Ok(e)
}

fn broadcast(st: &DocState, msg: &WsServer, except: Option<u32>) {
    let text = serde_json::to_string(msg).unwrap_or_default();
    for (id, e) in &st.editors {
        if Some(*id) != except {
            // A slow member's outbox closes it; no one waits for it.
            e.out.push(Out::Text(text.clone()));
        }
    }
}

/// The file's text as the workspace has it, within the document bounds.
async fn read(state: &AppState, session: SessionId, path: &str) -> Result<String, String> {
    let host = state.workspaces().map_err(|e| e.to_string())?;
    let agent = crate::sessions::workspace::workspace_agent(&state.db, &host, session)
        .await
        .map_err(|e| e.to_string())?;
    let w = WatchFile {
        path: path.to_string(),
        known: String::new(),
        wait_ms: 0,
    };
    match agent.watch_file(&w).await.map_err(|e| e.to_string())? {
        FileNow::Changed { content } if content.len() <= MAX_DOC_BYTES => Ok(content),
        FileNow::Same => Ok(String::new()),
        now => Err(gone_reason(path, &now)),
    }
}

fn gone_reason(path: &str, now: &FileNow) -> String {
    match now {
        FileNow::Gone => format!("{path} was deleted or renamed in the workspace"),
        FileNow::TooLarge { size } => format!(
            "{path} is {size} bytes; files open here up to {MAX_DOC_BYTES} (use VS Code or the terminal)"
        ),
        FileNow::Binary => format!("{path} is not text"),
        FileNow::Changed { content } => format!(
            "{path} is {} bytes; files open here up to {MAX_DOC_BYTES} (use VS Code or the terminal)",
            content.len()
        ),
        FileNow::Same => format!("{path} is unchanged"),
    }
}

/// Ends a document for everyone in it, saying why.
fn gone(shared: &Shared, reason: String) {
    shared.gone.store(true, Ordering::Release);
    let mut st = shared.lock();
    let msg = WsServer::FileGone {
        path: shared.path.clone(),
        reason,
    };
    broadcast(&st, &msg, None);
    st.editors.clear();
}

/// The workspace's new content, merged into the document; says whether people have edits
/// the file does not have yet.
fn take_in(shared: &Shared, content: String) -> bool {
    let mut st = shared.lock();
    let base = std::mem::take(&mut st.base);
    if let Some(update) = st.doc.merge(&base, &content) {
        let msg = WsServer::FileUpdate {
            path: shared.path.clone(),
            update: b64(&update),
        };
        broadcast(&st, &msg, None);
    }
    st.base = content;
    st.doc.text() != st.base
}

/// Keeps one document and its file the same until the last person leaves it.
async fn keep(state: AppState, session: SessionId, shared: Arc<Shared>) {
    let host = match state.workspaces() {
        Ok(h) => h,
        Err(e) => return gone(&shared, e.to_string()),
    };
    let agent = match crate::sessions::workspace::workspace_agent(&state.db, &host, session).await {
        Ok(a) => a,
        Err(e) => return gone(&shared, format!("the workspace is not running: {e}")),
    };
    let mut delay = Duration::ZERO;
    loop {
        let known = sha(&shared.lock().base);
        let w = WatchFile {
            path: shared.path.clone(),
            known: known.clone(),
            wait_ms: WATCH_WAIT_MS,
        };
        let watch = async {
            tokio::time::sleep(delay).await;
            agent.watch_file(&w).await
        };
        let (stop, now) = tokio::select! {
            r = watch => (false, Some(r)),
            () = shared.dirty.notified() => (false, None),
            () = shared.stop.notified() => (true, None),
        };
        delay = Duration::ZERO;
        match now {
            None => {
                if !stop {
                    // More edits within the debounce are written together.
                    tokio::time::sleep(WRITE_DEBOUNCE).await;
                }
                match save(&agent, &shared, &known).await {
                    Ok(()) => {}
                    Err(Some(reason)) => return gone(&shared, reason),
                    // The workspace changed the file first: it was merged; write again.
                    Err(None) => shared.dirty.notify_one(),
                }
                if stop {
                    return;
                }
            }
            Some(Ok(FileNow::Same)) => {}
            Some(Ok(FileNow::Changed { content })) if content.len() <= MAX_DOC_BYTES => {
                if take_in(&shared, content) {
                    shared.dirty.notify_one();
                }
                delay = WATCH_MIN_INTERVAL;
            }
            Some(Ok(now)) => return gone(&shared, gone_reason(&shared.path, &now)),
            Some(Err(e)) => {
                return gone(
                    &shared,
                    format!("{}: the workspace stopped answering: {e}", shared.path),
                );
            }
        }
    }
}

/// Writes people's edits over the content whose hash is `known`. `Err(None)`: the workspace
/// had changed the file; its change is merged and the caller writes again. `Err(Some)`: the
/// document cannot go on.
async fn save(
    agent: &crate::workspace_agent::WorkspaceAgent<'_>,
    shared: &Shared,
    known: &str,
) -> Result<(), Option<String>> {
    let (text, base) = {
        let st = shared.lock();
        (st.doc.text(), st.base.clone())
    };
    if text == base {
        return Ok(());
    }
    if text.len() > MAX_DOC_BYTES {
        return Err(Some(format!(
            "{} grew past {MAX_DOC_BYTES} bytes here; what was written before stays in the workspace",
            shared.path
        )));
    }
    let known = if sha(&base) == known {
        known.to_string()
    } else {
        sha(&base)
    };
    match agent
        .write_file_if(&shared.path, text.clone(), Some(known.clone()))
        .await
    {
        Ok(()) => {
            let mut st = shared.lock();
            if st.base == base {
                st.base = text;
            }
            Ok(())
        }
        Err(tandem_host::Error::Conflict(_)) => {
            let w = WatchFile {
                path: shared.path.clone(),
                known,
                wait_ms: 0,
            };
            match agent.watch_file(&w).await {
                Ok(FileNow::Changed { content }) if content.len() <= MAX_DOC_BYTES => {
                    take_in(shared, content);
                    Err(None)
                }
                Ok(FileNow::Same) => Err(None),
                Ok(now) => Err(Some(gone_reason(&shared.path, &now))),
                Err(e) => Err(Some(format!("{}: {e}", shared.path))),
            }
        }
        Err(e) => Err(Some(format!("saving {}: {e}", shared.path))),
    }
}
