//! The session's live channel in the browser: one WebSocket that carries events, terminals,
//! presence and control, folded into signals the pages read. It reconnects by itself (with
//! backoff) and resumes events after the last sequence number it has, so nothing is missed or
//! shown twice. Terminal bytes go straight to the xterm.js terminals registered here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use base64::Engine as _;
use leptos::prelude::*;
use send_wrapper::SendWrapper;
use tandem_protocol::agent::TreeEntry;
use tandem_protocol::live::*;
use tandem_protocol::{Event, EventKind, Session, SessionId};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{BinaryType, CloseEvent, MessageEvent, WebSocket};

use crate::editor::Editor;
use crate::xterm::XTerm;

/// Where the connection is.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Connecting,
    Open,
    /// Lost; trying again.
    Reconnecting,
    /// Refused for good (the reason, for people).
    Closed(String),
    /// No such session, or one this person may not see (the server does not say which).
    NotFound,
}

/// How the browser identifies itself on the channel.
#[derive(Clone, Debug, Default)]
pub struct Guest {
    pub share: Option<String>,
    pub name: Option<String>,
}

/// Everything the channel said, as signals.
#[derive(Clone, Copy)]
pub struct LiveState {
    pub status: RwSignal<Status>,
    pub me: RwSignal<Option<Participant>>,
    pub session: RwSignal<Option<Session>>,
    pub participants: RwSignal<Vec<Participant>>,
    /// Viewers connected but not listed (a crowd is a count).
    pub audience: RwSignal<u32>,
    pub controller: RwSignal<Option<u32>>,
    pub terminals: RwSignal<Vec<Terminal>>,
    pub events: RwSignal<Vec<Event>>,
    /// The last refusal, for a notice.
    pub refused: RwSignal<Option<String>>,
    /// Someone asks for control (their participant id).
    pub control_asked: RwSignal<Option<u32>>,
    /// The answer to this tab's desktop offer.
    pub desktop_answer: RwSignal<Option<String>>,
    /// The workspace's files (and whether the list was cut short), once asked for.
    pub files: RwSignal<Option<(Vec<TreeEntry>, bool)>>,
    /// The file open in the Files pane.
    pub file: RwSignal<Option<OpenFile>>,
}

/// The file open in the Files pane.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenFile {
    pub path: String,
    /// Until the server's `file_opened` says otherwise.
    pub read_only: bool,
    pub opened: bool,
    /// Why it closed under the editor (deleted, renamed, too large, the workspace stopped).
    pub gone: Option<String>,
}

struct Inner {
    session: SessionId,
    guest: Guest,
    ws: Option<WebSocket>,
    xterms: HashMap<u32, XTerm>,
    /// Output for terminals not shown yet.
    pending: HashMap<u32, Vec<u8>>,
    backoff_ms: i32,
    closures: Vec<Box<dyn std::any::Any>>,
    stopped: bool,
    /// The Files pane's editor: its file, the editor, and a line to go to once it opened.
    editor: Option<(String, Editor, Option<u32>)>,
}

/// A live channel; cheap to clone. The browser runs it on one thread; the wrapper lets Leptos
/// views (which require `Send`) hold it, and would panic if it ever crossed threads.
#[derive(Clone)]
pub struct Live {
    pub state: LiveState,
    inner: SendWrapper<Rc<RefCell<Inner>>>,
}

fn url(session: SessionId, guest: &Guest) -> String {
    let loc = web_sys::window().map(|w| w.location());
    let host = loc.as_ref().and_then(|l| l.host().ok()).unwrap_or_default();
    let scheme = if loc.and_then(|l| l.protocol().ok()).as_deref() == Some("https:") {
        "wss"
    } else {
        "ws"
    };
    let mut u = format!("{scheme}://{host}/api/sessions/{session}/live");
    let mut q = Vec::new();
    if let Some(s) = &guest.share {
        q.push(format!("share={}", js_sys::encode_uri_component(s)));
    }
    if let Some(n) = &guest.name {
        q.push(format!("name={}", js_sys::encode_uri_component(n)));
    }
    if !q.is_empty() {
        u = format!("{u}?{}", q.join("&"));
    }
    u
}

impl Live {
    /// Opens the channel of `session`.
    pub fn open(session: SessionId, guest: Guest) -> Live {
        let state = LiveState {
            status: RwSignal::new(Status::Connecting),
            me: RwSignal::new(None),
            session: RwSignal::new(None),
            participants: RwSignal::new(Vec::new()),
            audience: RwSignal::new(0),
            controller: RwSignal::new(None),
            terminals: RwSignal::new(Vec::new()),
            events: RwSignal::new(Vec::new()),
            refused: RwSignal::new(None),
            control_asked: RwSignal::new(None),
            desktop_answer: RwSignal::new(None),
            files: RwSignal::new(None),
            file: RwSignal::new(None),
        };
        let inner = Rc::new(RefCell::new(Inner {
            session,
            guest,
            ws: None,
            xterms: HashMap::new(),
            pending: HashMap::new(),
            backoff_ms: 500,
            closures: Vec::new(),
            stopped: false,
            editor: None,
        }));
        let live = Live {
            state,
            inner: SendWrapper::new(inner),
        };
        live.connect();
        live
    }

    fn connect(&self) {
        let (session, guest) = {
            let i = self.inner.borrow();
            (i.session, i.guest.clone())
        };
        let Ok(ws) = WebSocket::new(&url(session, &guest)) else {
            self.state
                .status
                .set(Status::Closed("the browser refused the connection".into()));
            return;
        };
        ws.set_binary_type(BinaryType::Arraybuffer);
        let me = self.clone();
        let on_open = Closure::<dyn FnMut()>::new(move || {
            me.inner.borrow_mut().backoff_ms = 500;
            me.state.status.set(Status::Open);
            let after = me
                .state
                .events
                .with_untracked(|e| e.last().map_or(0, |e| e.seq));
            me.send(&WsClient::Subscribe { after });
            // A file that was open is opened again: the server's document catches it up.
            let open = me.inner.borrow().editor.as_ref().map(|(p, ..)| p.clone());
            if let Some(path) = open {
                me.send(&WsClient::OpenFile { path });
            }
        });
        let me = self.clone();
        let on_message =
            Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| me.receive(e));
        let me = self.clone();
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |e: CloseEvent| {
            me.closed(e.code(), e.reason())
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        let mut i = self.inner.borrow_mut();
        i.closures = vec![Box::new(on_open), Box::new(on_message), Box::new(on_close)];
        i.ws = Some(ws);
    }

    fn closed(&self, code: u16, reason: String) {
        if self.inner.borrow().stopped {
            return;
        }
        if code == close::NOT_FOUND {
            self.state.status.set(Status::NotFound);
            return;
        }
        let fatal = match code {
            close::UNAUTHORIZED => Some("you are not signed in, or this link is not valid"),
            close::FORBIDDEN => Some("your access was revoked"),
            _ => None,
        };
        if let Some(why) = fatal {
            let text = if reason.is_empty() {
                why.to_string()
            } else {
                format!("{why}: {reason}")
            };
            self.state.status.set(Status::Closed(text));
            return;
        }
        self.state.status.set(Status::Reconnecting);
        let delay = {
            let mut i = self.inner.borrow_mut();
            let d = i.backoff_ms;
            i.backoff_ms = (d * 2).min(8000);
            d
        };
        let me = self.clone();
        set_timeout(
            move || me.connect(),
            std::time::Duration::from_millis(delay as u64),
        );
    }

    fn receive(&self, e: MessageEvent) {
        let data = e.data();
        if let Some(text) = data.as_string() {
            if let Ok(m) = serde_json::from_str::<WsServer>(&text) {
                self.handle(m);
            }
            return;
        }
        if let Ok(buf) = data.dyn_into::<js_sys::ArrayBuffer>() {
            let bytes = js_sys::Uint8Array::new(&buf).to_vec();
            if let Some((id, b)) = decode_terminal(&bytes) {
                let mut i = self.inner.borrow_mut();
                match i.xterms.get(&id) {
                    Some(x) => x.write_bytes(b),
                    None => {
                        let p = i.pending.entry(id).or_default();
                        p.extend_from_slice(b);
                        let over = p.len().saturating_sub(TERMINAL_SCROLLBACK_BYTES);
                        p.drain(..over);
                    }
                }
            }
        }
    }

    fn handle(&self, m: WsServer) {
        let s = self.state;
        match m {
            WsServer::Hello {
                you,
                session,
                terminals,
                participants,
                controller,
                audience,
            } => {
                // A (re)join replays every terminal's scrollback: start the screens over.
                let mut i = self.inner.borrow_mut();
                for x in i.xterms.values() {
                    x.reset();
                }
                i.pending.clear();
                drop(i);
                s.me.set(Some(you));
                s.session.set(Some(session));
                s.terminals.set(terminals);
                s.participants.set(participants);
                s.audience.set(audience);
                s.controller.set(controller);
            }
            WsServer::Events { events } => {
                let last = s.events.with_untracked(|e| e.last().map_or(0, |e| e.seq));
                // The header's state follows the log (the hello's copy is a snapshot).
                let newest_state = events.iter().rev().find_map(|e| match &e.kind {
                    EventKind::StateChanged { to, .. } if e.seq > last => Some(*to),
                    _ => None,
                });
                if let Some(to) = newest_state {
                    s.session.update(|x| {
                        if let Some(x) = x {
                            x.state = to;
                        }
                    });
                }
                s.events.update(|have| {
                    have.extend(events.into_iter().filter(|e| e.seq > last));
                })
            }
            WsServer::Terminals { terminals } => s.terminals.set(terminals),
            WsServer::Joined { participant } => s.participants.update(|ps| {
                ps.retain(|p| p.id != participant.id);
                ps.push(participant);
            }),
            WsServer::Left { id } => s.participants.update(|ps| ps.retain(|p| p.id != id)),
            WsServer::Audience { viewers } => s.audience.set(viewers),
            WsServer::Presence { id, looking_at } => s.participants.update(|ps| {
                if let Some(p) = ps.iter_mut().find(|p| p.id == id) {
                    p.looking_at = looking_at;
                }
            }),
            WsServer::Control { controller } => s.controller.set(controller),
            WsServer::ControlRequested { by } => s.control_asked.set(Some(by)),
            WsServer::Refused { request, reason } => {
                s.refused.set(Some(format!("{request}: {reason}")))
            }
            WsServer::DesktopAnswer { sdp } => s.desktop_answer.set(Some(sdp)),
            WsServer::FileTree { files, truncated } => s.files.set(Some((files, truncated))),
            WsServer::FileOpened {
                path,
                update,
                awareness,
                read_only,
            } => self.file_opened(path, &update, &awareness, read_only),
            WsServer::FileUpdate { path, update } => {
                if let (Some(u), Some((p, e, _))) = (unb64(&update), &self.inner.borrow().editor)
                    && *p == path
                {
                    e.apply_update(&u);
                }
            }
            WsServer::FileAwareness { path, update } => {
                if let (Some(u), Some((p, e, _))) = (unb64(&update), &self.inner.borrow().editor)
                    && *p == path
                {
                    e.apply_awareness(&u);
                }
            }
            WsServer::FileGone { path, reason } => {
                if let Some((p, e, _)) = &self.inner.borrow().editor
                    && *p == path
                {
                    e.set_read_only(true);
                }
                s.file.update(|f| {
                    if let Some(f) = f.as_mut().filter(|f| f.path == path) {
                        f.gone = Some(reason);
                        f.read_only = true;
                    }
                });
            }
        }
    }

    fn file_opened(&self, path: String, update: &str, awareness: &str, read_only: bool) {
        let missing = {
            let mut i = self.inner.borrow_mut();
            let Some((p, e, line)) = i.editor.as_mut().filter(|(p, ..)| *p == path) else {
                return;
            };
            let Some(state) = unb64(update) else { return };
            e.apply_update(&state);
            if let Some(a) = unb64(awareness).filter(|a| !a.is_empty()) {
                e.apply_awareness(&a);
            }
            e.set_read_only(read_only);
            if let Some(n) = line.take() {
                e.goto_line(n);
            }
            // Edits typed while the connection was down (none on a first open).
            let missing = e.missing_from(&state);
            (missing.len() > 2 && !read_only).then(|| (p.clone(), missing))
        };
        if let Some((path, m)) = missing {
            self.send(&WsClient::FileUpdate {
                path,
                update: b64(&m),
            });
        }
        self.state.file.set(Some(OpenFile {
            path,
            read_only,
            opened: true,
            gone: None,
        }));
    }

    /// Opens `path` in an editor in `parent` (closing the one open before), at `line`.
    pub fn open_file(&self, parent: &web_sys::HtmlElement, path: &str, line: Option<u32>) {
        // Already open here: only go to the line.
        if let Some((p, e, _)) = &self.inner.borrow().editor
            && p == path
        {
            if let Some(n) = line {
                e.goto_line(n);
            }
            return;
        }
        self.close_file();
        parent.set_inner_html("");
        let me = self.state.me.get_untracked();
        let name = me.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        let colour = COLOURS[me.map_or(0, |m| m.id as usize) % COLOURS.len()];
        let weak = Rc::downgrade(&*self.inner);
        let (w1, p1) = (weak.clone(), path.to_string());
        let (w2, p2) = (weak, path.to_string());
        let editor = Editor::open(
            parent,
            path,
            &name,
            colour,
            true,
            move |u| {
                send_on(
                    &w1,
                    &WsClient::FileUpdate {
                        path: p1.clone(),
                        update: b64(&u),
                    },
                )
            },
            move |u| {
                send_on(
                    &w2,
                    &WsClient::FileAwareness {
                        path: p2.clone(),
                        update: b64(&u),
                    },
                )
            },
        );
        self.inner.borrow_mut().editor = Some((path.to_string(), editor, line));
        self.state.file.set(Some(OpenFile {
            path: path.to_string(),
            read_only: true,
            opened: false,
            gone: None,
        }));
        self.send(&WsClient::OpenFile {
            path: path.to_string(),
        });
    }

    /// Closes the Files pane's editor, if one is open.
    pub fn close_file(&self) {
        let open = self.inner.borrow_mut().editor.take();
        if let Some((path, editor, _)) = open {
            // Its cursor's removal goes out first, through the editor's own callback.
            drop(editor);
            self.send(&WsClient::CloseFile { path });
        }
        self.state.file.set(None);
    }

    /// Sends a message (dropped while disconnected: the server state is re-read on reconnect).
    pub fn send(&self, m: &WsClient) {
        if let Some(ws) = &self.inner.borrow().ws
            && ws.ready_state() == WebSocket::OPEN
            && let Ok(t) = serde_json::to_string(m)
        {
            let _ = ws.send_with_str(&t);
        }
    }

    /// Sends a message given as JSON text (from JavaScript), if it is one.
    pub fn send_json(&self, text: &str) {
        if let Ok(m) = serde_json::from_str::<WsClient>(text) {
            self.send(&m);
        }
    }

    /// Types into terminal `id`.
    pub fn input(&self, id: u32, bytes: &[u8]) {
        if let Some(ws) = &self.inner.borrow().ws
            && ws.ready_state() == WebSocket::OPEN
        {
            let _ = ws.send_with_u8_array(&encode_terminal(id, bytes));
        }
    }

    /// Shows terminal `id` in `x` (its pending output first).
    pub fn attach(&self, id: u32, x: XTerm) {
        let mut i = self.inner.borrow_mut();
        if let Some(p) = i.pending.remove(&id) {
            x.write_bytes(&p);
        }
        i.xterms.insert(id, x);
    }

    /// Shows terminal `id` at `cols`×`rows` (the size the server settled on).
    pub fn resize_view(&self, id: u32, cols: u16, rows: u16) {
        if let Some(x) = self.inner.borrow().xterms.get(&id) {
            x.resize(cols, rows);
        }
    }

    /// Turns keyboard input of terminal `id` off or on.
    pub fn set_read_only(&self, id: u32, read_only: bool) {
        if let Some(x) = self.inner.borrow().xterms.get(&id) {
            x.set_read_only(read_only);
        }
    }

    /// Stops showing terminal `id`.
    pub fn detach(&self, id: u32) {
        if let Some(x) = self.inner.borrow_mut().xterms.remove(&id) {
            x.dispose();
        }
    }

    /// Closes the channel for good (the page went away).
    pub fn close(&self) {
        let mut i = self.inner.borrow_mut();
        i.stopped = true;
        if let Some(ws) = i.ws.take() {
            let _ = ws.close();
        }
        for (_, x) in i.xterms.drain() {
            x.dispose();
        }
        i.editor = None;
    }
}

/// The cursor colours the server gives participants (by id), for this person's own view.
const COLOURS: [&str; 8] = [
    "#e06c75", "#61afef", "#98c379", "#c678dd", "#d19a66", "#56b6c2", "#be5046", "#e5c07b",
];

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Sends on the channel of a live whose handle may be gone (the editor's callbacks).
fn send_on(inner: &std::rc::Weak<RefCell<Inner>>, m: &WsClient) {
    let Some(inner) = inner.upgrade() else { return };
    // The editor calls back outside any borrow of the channel (from input or a microtask).
    let Ok(i) = inner.try_borrow() else { return };
    if let Some(ws) = &i.ws
        && ws.ready_state() == WebSocket::OPEN
        && let Ok(t) = serde_json::to_string(m)
    {
        let _ = ws.send_with_str(&t);
    }
}
