//! The live channel over a WebSocket: authenticate (a share token in `?share=`, a guest's
//! `?name=`, else the cookie or bearer token), join the hub, then pump frames both ways with the
//! limits of `protocol::live`. Failures before joining close with a documented code.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::Response;
use futures::StreamExt;
use tandem_protocol::live::*;
use tandem_protocol::{Author, AuthorKind, CreatePrompt, PromptMode, SessionId};
use tokio::io::AsyncWrite;
use tokio_tungstenite::tungstenite::Message;

use super::Live;
use super::hub::{CloseSignal, Out, Outbox, outbox};
use crate::identity::auth::CurrentUser;
use crate::sessions::access::Access;
use crate::state::AppState;
use crate::websocket::{Reader, Upgrade, Writer};
use crate::{Error, db, sessions};

/// How often a subscriber looks at the store even without a notification (events written by
/// another server process).
pub const POLL_OTHER_PROCESSES: Duration = Duration::from_secs(2);
/// How often a replay to a backlogged client checks whether it drained.
pub const REPLAY_PACE: Duration = Duration::from_millis(10);

/// `GET /api/sessions/{id}/live`.
#[utoipa::path(
    get,
    path = "/sessions/{id}/live",
    tag = "links",
    operation_id = "live",
    description = "The session's live channel, a WebSocket (`tandem_protocol::live`: `WsClient` and \
        `WsServer` as JSON text frames, terminals as binary frames). Who may join is checked \
        after the upgrade: a refusal is a close frame with its code (`live::close`).",
    security((), ("bearer_token" = []), ("session_cookie" = [])),
    params(
        ("id" = SessionId, Path),
        ("share" = Option<String>, Query, description = "A share link's token"),
        ("name" = Option<String>, Query, description = "A guest's display name"),
    ),
    responses(
        (status = 101, description = "Switched to the WebSocket protocol"),
        (status = 400, description = "Not a WebSocket upgrade, or a malformed parameter (`bad_request`)", body = tandem_protocol::ApiError),
        (status = 426, description = "The connection cannot be upgraded", body = tandem_protocol::ApiError),
    ),
)]
pub async fn upgrade(
    State(state): State<AppState>,
    Path(id): Path<SessionId>,
    q: crate::identity::auth::ShareCredential,
    user: Result<CurrentUser, Error>,
    ws: Upgrade,
) -> Response {
    let user = user.ok().map(|u| u.0);
    ws.on_upgrade(MAX_FRAME_BYTES, move |reader, writer| {
        run(state, id, q, user, reader, writer)
    })
}

async fn close_with(mut socket: Writer<impl AsyncWrite + Unpin>, code: u16, reason: &str) {
    socket.close(code, reason);
    let _ = socket.flush().await;
}

fn close_code(e: &Error) -> u16 {
    match e {
        Error::NotFound(_) => close::NOT_FOUND,
        Error::Forbidden(_) => close::FORBIDDEN,
        Error::Unauthorized(_) | Error::Invalid(_) | Error::BadRequest(_) => close::UNAUTHORIZED,
        _ => close::INTERNAL,
    }
}

async fn run(
    state: AppState,
    id: SessionId,
    q: crate::identity::auth::ShareCredential,
    user: Option<tandem_protocol::User>,
    stream: Reader,
    socket: Writer<impl AsyncWrite + Unpin + Send + 'static>,
) {
    let session = match sessions::get(&state.db, id).await.map_err(Error::from) {
        Ok(d) => d.session,
        Err(e) => return close_with(socket, close_code(&e), &e.to_string()).await,
    };
    let access = match crate::permissions::resolve(
        &state,
        &session,
        user.as_ref(),
        q.share.as_deref(),
        q.name.as_deref(),
    )
    .await
    .map_err(Error::from)
    {
        Ok(a) => a,
        Err(e) => return close_with(socket, close_code(&e), &e.to_string()).await,
    };
    // One link opens a bounded audience: a guest cannot open sockets without end. Counted and
    // joined under the registry's lock, so guests arriving together cannot both take the last
    // place.
    let guest_link = access.jti.clone().filter(|_| access.user_id.is_none());
    let (out, inbox) = outbox();
    let (live, joined) = state.hubs.join(&state, id, |live| {
        if let Some(jti) = &guest_link
            && live.hub.guests_of(jti) >= tandem_protocol::live::MAX_GUESTS_PER_LINK
        {
            return None;
        }
        Some(live.hub.join(
            access.name.clone(),
            access.user_id,
            access.role,
            access.jti.clone(),
            out.clone(),
            |you, participants, controller, terminals, audience| WsServer::Hello {
                you: you.clone(),
                session: session.clone(),
                terminals,
                participants,
                controller,
                audience,
            },
        ))
    });
    let Some((me, watches)) = joined else {
        state.hubs.release(&live);
        return close_with(
            socket,
            close::TOO_MANY,
            "this share link has as many guests connected as it may; try again later",
        )
        .await;
    };
    // A revoke commits before it closes the hub's holders of the link; a joiner checked the
    // link before joining and checks it again after, so one of the two always sees the other.
    // A link's holders also go when it expires, as when it is revoked.
    let mut expiry = None;
    if let Some(jti) = &access.jti {
        let (gone, expires_at) = match db::links::get(&state.db, jti).await {
            Ok(Some(link)) => (
                link.revoked_at.is_some() || link.expires_at.0 <= crate::now_ms(),
                Some(link.expires_at.0),
            ),
            Ok(None) => (true, None),
            Err(e) => {
                tracing::warn!(error = %e, "re-checking a share link failed");
                (true, None)
            }
        };
        if gone {
            out.close(close::FORBIDDEN);
        } else if let Some(at) = expires_at {
            let out = out.clone();
            let left = Duration::from_millis(at.saturating_sub(crate::now_ms()).max(0) as u64);
            expiry = Some(tokio::spawn(async move {
                tokio::time::sleep(left).await;
                out.close(close::FORBIDDEN);
            }));
        }
    }
    let recheck = tokio::spawn(super::recheck::recheck(
        state.clone(),
        session.clone(),
        access.clone(),
        out.clone(),
        live.checks.clone(),
    ));
    let signal = inbox.close_signal();
    // The latest ping's payload: a flood of pings replaces one slot, it queues nothing.
    let (pong, pongs) = tokio::sync::watch::channel(bytes::Bytes::new());
    let writer = tokio::spawn(super::writer::write(
        socket,
        inbox,
        watches,
        pongs,
        state.metrics.clone(),
    ));
    let mut member = Member {
        state: state.clone(),
        live: live.clone(),
        id: me.id,
        access,
        out: out.clone(),
        pong,
        pump: None,
        desktop: None,
    };
    member.read(stream, signal).await;
    if let Some(e) = expiry {
        e.abort();
    }
    recheck.abort();
    if let Some(p) = member.pump.take() {
        p.abort();
    }
    live.hub.leave(me.id);
    live.docs.leave(me.id);
    state.hubs.release(&live);
    out.close(1000);
    // The writer says goodbye if the client still reads; it is not waited for beyond that.
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .is_err()
    {
        abort.abort();
    }
}

struct Member {
    state: AppState,
    live: Arc<Live>,
    id: u32,
    access: Access,
    out: Outbox,
    /// Where the client's latest ping goes for the writer to answer (the only one who writes).
    pong: tokio::sync::watch::Sender<bytes::Bytes>,
    pump: Option<tokio::task::JoinHandle<()>>,
    /// Watching the desktop: the stream kept alive and this member's connection to it.
    desktop: Option<(Arc<crate::desktop::Stream>, crate::desktop::peer::Viewer)>,
}

impl Member {
    fn refuse(&self, request: &str, reason: impl Into<String>) {
        self.out.send(&WsServer::Refused {
            request: request.into(),
            reason: reason.into(),
        });
    }

    async fn read(&mut self, mut stream: Reader, signal: CloseSignal) {
        let idle = Duration::from_secs(IDLE_TIMEOUT_SECS);
        loop {
            if self.out.is_closed() {
                return;
            }
            let next = tokio::select! {
                n = tokio::time::timeout(idle, stream.next()) => n,
                // Closed by the hub (too slow, revoked): leave now, whatever the client does.
                _ = signal.closed() => return,
            };
            let msg = match next {
                Err(_) | Ok(None) => return,
                Ok(Some(Err(_))) => {
                    // Oversized or malformed at the WebSocket level.
                    self.out.close(close::TOO_BIG);
                    return;
                }
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Text(t) => match serde_json::from_str::<WsClient>(t.as_str()) {
                    Ok(m) => self.handle(m).await,
                    Err(e) => self.refuse("message", format!("not a valid message: {e}")),
                },
                Message::Binary(b) => match decode_terminal(&b) {
                    Some((terminal, bytes)) => {
                        if let Err(why) = self.live.hub.input(self.id, terminal, bytes.to_vec()) {
                            self.refuse("input", why);
                        }
                    }
                    None => {
                        self.refuse("input", "a terminal frame starts with a 4-byte terminal id")
                    }
                },
                // Answered with 1000 by the writer once this member leaves (RFC 6455 lets a
                // server choose its own code).
                Message::Close(_) => return,
                // A copy: the payload is a view of tungstenite's read buffer.
                Message::Ping(b) => {
                    self.pong.send_replace(bytes::Bytes::copy_from_slice(&b));
                }
                Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    async fn handle(&mut self, m: WsClient) {
        let hub = &self.live.hub;
        let what = m.name();
        let result: Result<(), String> = match m {
            WsClient::Subscribe { after } => {
                if after < 0 {
                    Err("after must be ≥ 0".into())
                } else {
                    if let Some(p) = self.pump.take() {
                        p.abort();
                    }
                    self.pump = Some(tokio::spawn(pump(
                        self.state.db.clone(),
                        self.live.clone(),
                        after,
                        self.out.clone(),
                    )));
                    Ok(())
                }
            }
            WsClient::OpenTerminal { cols, rows } => {
                if !self.access.role.can_drive() {
                    Err("viewers cannot open terminals".into())
                } else if let Err(why) = tandem_protocol::limits::check_terminal_size(cols, rows) {
                    Err(why)
                } else if self.live.hub.snapshot().2.len() >= MAX_TERMINALS {
                    Err(format!("a session has at most {MAX_TERMINALS} terminals"))
                } else {
                    super::open_terminal(&self.state, &self.live, cols, rows)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            }
            WsClient::Resize {
                terminal,
                cols,
                rows,
            } => hub.resize(self.id, terminal, cols, rows),
            WsClient::Presence { looking_at } => {
                if hub.presence(self.id, looking_at) {
                    let (live, id) = (self.live.clone(), self.id);
                    tokio::spawn(async move {
                        tokio::time::sleep(super::hub::PRESENCE_MIN_INTERVAL).await;
                        live.hub.flush_presence(id);
                    });
                }
                Ok(())
            }
            WsClient::RequestControl => hub.request_control(self.id),
            WsClient::GrantControl { to } => hub.grant_control(self.id, to),
            WsClient::ReleaseControl => hub.release_control(self.id),
            WsClient::TakeControl => hub.take_control(self.id),
            WsClient::Prompt { text, mode } => self.prompt(text, mode).await,
            WsClient::AnswerApproval {
                approval,
                approve,
                for_session,
                reason,
            } => {
                let req = tandem_protocol::approval::AnswerApproval {
                    approve,
                    for_session,
                    reason,
                };
                crate::commands::answer_approval(
                    &self.state,
                    self.live.session,
                    approval,
                    &self.author(),
                    self.access.role,
                    &req,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
            WsClient::DesktopOffer { sdp } => {
                self.desktop = None;
                let may_start = self.access.role.can_drive();
                match crate::desktop::watch(&self.state, self.live.session, sdp, may_start).await {
                    Ok((answer, stream, viewer)) => {
                        self.desktop = Some((stream, viewer));
                        self.out.send(&WsServer::DesktopAnswer { sdp: answer });
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            WsClient::DesktopClose => {
                self.desktop = None;
                Ok(())
            }
            m @ (WsClient::ListFiles
            | WsClient::OpenFile { .. }
            | WsClient::CloseFile { .. }
            | WsClient::FileUpdate { .. }
            | WsClient::FileAwareness { .. }) => {
                let who = super::files::Who {
                    id: self.id,
                    out: &self.out,
                    may_edit: self.access.role.can_drive(),
                    name: &self.access.name,
                };
                super::files::handle(&self.state, &self.live, who, m).await
            }
            WsClient::DesktopInput { input } => match hub.may_control(self.id) {
                Ok(()) => crate::desktop::input(&self.state, self.live.session, vec![input])
                    .await
                    .map_err(|e| e.to_string()),
                Err(why) => Err(why),
            },
        };
        if let Err(why) = result {
            self.refuse(what, why);
        }
    }

    /// This member as the author of what they do.
    fn author(&self) -> Author {
        let kind = if self.access.user_id.is_some() {
            AuthorKind::User
        } else {
            AuthorKind::Guest
        };
        Author {
            kind,
            user_id: self.access.user_id,
            name: self.access.name.clone(),
        }
    }

    async fn prompt(&self, text: String, mode: PromptMode) -> Result<(), String> {
        if !self.access.role.can_drive() {
            return Err("viewers cannot send prompts".into());
        }
        let author = self.author();
        let session = self.live.session;
        crate::commands::submit_prompt(
            &self.state,
            session,
            author,
            CreatePrompt {
                text,
                mode,
                agent: None,
                context: None,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Sends the session's events after `after`, then each new one as it commits, in order and
/// without gaps (it watches before it reads, so nothing falls between).
async fn pump(db: db::Db, live: Arc<Live>, after: i64, out: Outbox) {
    let mut watch = db.subscribe(live.session);
    let mut last = after;
    // What the channel knows was committed; the feed reads the store for it only if no read
    // already has it.
    let mut known = super::feed::Known::now();
    loop {
        loop {
            let page = match live.feed.next(&db, last, known).await {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(session = %live.session, error = %e, "reading events for a live channel failed");
                    break;
                }
            };
            last = page.through;
            // A long history goes out at the client's pace: its queue never fills with replay.
            while out.queued() > MAX_QUEUED_BYTES / 4 && !out.is_closed() {
                tokio::time::sleep(REPLAY_PACE).await;
            }
            if !out.push(Out::Json(page.frame)) {
                return;
            }
        }
        if out.is_closed() {
            return;
        }
        known = tokio::select! {
            // This process committed up to the watch's number.
            r = watch.changed() => {
                if r.is_err() {
                    return;
                }
                super::feed::Known { through: *watch.borrow_and_update(), ..super::feed::Known::now() }
            }
            // Only a fallback for another process's lost notification: a read another channel
            // began in the last half period will do (one read a second per session, not one
            // per viewer).
            () = tokio::time::sleep(POLL_OTHER_PROCESSES) => {
                let now = std::time::Instant::now();
                super::feed::Known {
                    through: i64::MAX,
                    since: now.checked_sub(POLL_OTHER_PROCESSES / 2).unwrap_or(now),
                }
            }
        };
    }
}
