//! Live sessions: the hub per session (`hub.rs`, transport-free), its terminals attached to the
//! workspace agent's PTYs (one upstream per terminal, `upstream.rs`, fanned out to every member
//! at a pace set by the audience's size), and the WebSocket glue (`socket.rs`). A hub exists
//! while someone is connected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tandem_protocol::SessionId;
use tandem_protocol::agent::{PtyInfo, PtyOpen};
use tandem_protocol::live::Terminal;
use tokio::sync::mpsc;

use crate::Result;
use crate::state::AppState;
use crate::workspace_agent::WorkspaceAgent;

pub mod doc;
pub mod docs;
pub mod feed;
mod files;
pub mod hub;
pub mod outbox;
mod pty_output;
mod recheck;
pub mod socket;
mod upstream;
mod writer;

#[cfg(test)]
mod fuzz_tests;

use hub::{Hub, UPSTREAM_QUEUE, Upstream};

/// Size of the terminal opened for a session that has none.
pub const DEFAULT_COLS: u16 = 120;
pub const DEFAULT_ROWS: u16 = 32;

/// How often a hub without terminals looks again even without news from the session.
pub const REATTACH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// One live session: its hub and the tasks feeding it.
pub struct Live {
    pub session: SessionId,
    pub hub: Hub,
    /// The files open in the session page's Files pane.
    pub docs: docs::Docs,
    /// One read of new events for all of its channels.
    pub feed: feed::Feed,
    /// Its members' access checks, shared by holder.
    checks: Arc<recheck::Checks>,
    upstreams: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        for t in self
            .upstreams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// Every live session of this process.
#[derive(Default)]
pub struct Hubs {
    map: Mutex<HashMap<SessionId, Arc<Live>>>,
}

impl Hubs {
    /// `session`'s live hub, while anyone is connected.
    pub fn get(&self, session: SessionId) -> Option<Arc<Live>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .cloned()
    }

    /// People connected to this process's live sessions.
    pub fn members(&self) -> usize {
        let all: Vec<_> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.iter().map(|l| l.hub.snapshot().0.len()).sum()
    }

    /// The user holding control of `session`'s live hub, if a signed-in participant does
    /// (`Some(None)`: someone without an account does).
    pub fn controller_of(&self, session: SessionId) -> Option<Option<tandem_protocol::UserId>> {
        let live = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .cloned()?;
        let (participants, controller, _) = live.hub.snapshot();
        let c = controller?;
        Some(
            participants
                .into_iter()
                .find(|p| p.id == c)
                .and_then(|p| p.user_id),
        )
    }

    /// Joins the session's live hub (started, terminals attaching in the background, if
    /// needed): `join` runs under the registry's lock, so a hub being released cannot be joined.
    pub fn join<R>(
        &self,
        state: &AppState,
        session: SessionId,
        join: impl FnOnce(&Live) -> R,
    ) -> (Arc<Live>, R) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = map.get(&session) {
            let r = join(l);
            return (l.clone(), r);
        }
        let live = Arc::new(Live {
            session,
            hub: Hub::default(),
            docs: docs::Docs::default(),
            feed: feed::Feed::new(session),
            checks: Arc::default(),
            upstreams: Mutex::new(Vec::new()),
        });
        map.insert(session, live.clone());
        let (state, weak) = (state.clone(), Arc::downgrade(&live));
        tokio::spawn(async move {
            // Whenever the session has a running workspace and the hub no terminal (it is still
            // booting, or it was resumed), attach them; until no one is connected.
            let mut changed = state.db.subscribe(session);
            loop {
                let Some(l) = weak.upgrade() else { return };
                if l.hub.snapshot().2.is_empty()
                    && let Err(e) = attach_all(&state, &l, true).await
                {
                    tracing::debug!(session = %session, error = %e, "no terminals yet");
                }
                drop(l);
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    () = tokio::time::sleep(REATTACH_EVERY) => {}
                }
            }
        });
        let r = join(&live);
        (live, r)
    }

    /// Forgets the hub once its last member left (its upstreams stop; the PTYs keep running).
    pub fn release(&self, live: &Arc<Live>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&live.session).is_some_and(|l| Arc::ptr_eq(l, live))
            && live.hub.snapshot().0.is_empty()
        {
            map.remove(&live.session);
        }
    }

    /// How many people are connected to `session`.
    pub fn participants(&self, session: SessionId) -> usize {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .map_or(0, |l| l.hub.snapshot().0.len())
    }

    /// How many sessions are live (someone connected).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Disconnects person `user` from every session (they were deactivated).
    pub fn drop_user(&self, user: tandem_protocol::UserId) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for l in map.values() {
            l.hub.close_if(|u, _| u == Some(user));
        }
    }

    /// Disconnects everyone who came through share link `jti`.
    pub fn revoke(&self, session: SessionId, jti: &str) {
        if let Some(l) = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
        {
            l.hub.close_if(|_, link| link == Some(jti));
        }
    }
}

/// Attaches every terminal of the workspace not attached yet; opens one if there is none and
/// `open_if_none`.
async fn attach_all(state: &AppState, live: &Arc<Live>, open_if_none: bool) -> Result<()> {
    let host = state.workspaces()?;
    let agent = crate::sessions::workspace::workspace_agent(&state.db, &host, live.session).await?;
    let mut ptys: Vec<PtyInfo> = agent.ptys().await?;
    if ptys.is_empty() && open_if_none {
        ptys.push(
            agent
                .open_pty(&PtyOpen {
                    cols: DEFAULT_COLS,
                    rows: DEFAULT_ROWS,
                    command: None,
                    cwd: None,
                })
                .await?,
        );
    }
    for p in ptys {
        if !live.hub.has_terminal(p.id) {
            attach(live, &agent, p).await?;
        }
    }
    Ok(())
}

/// Opens a new terminal in the workspace and attaches it.
pub async fn open_terminal(
    state: &AppState,
    live: &Arc<Live>,
    cols: u16,
    rows: u16,
) -> Result<u32> {
    let host = state.workspaces()?;
    let agent = crate::sessions::workspace::workspace_agent(&state.db, &host, live.session).await?;
    let info = agent
        .open_pty(&PtyOpen {
            cols,
            rows,
            command: None,
            cwd: None,
        })
        .await?;
    let id = info.id;
    attach(live, &agent, info).await?;
    Ok(id)
}

/// One upstream: the agent's PTY WebSocket, its output into the hub, the hub's input and
/// resizes out to it.
async fn attach(live: &Arc<Live>, agent: &WorkspaceAgent<'_>, info: PtyInfo) -> Result<()> {
    let socket = agent.attach_pty(info.id).await?;
    let (tx, rx) = mpsc::channel::<Upstream>(UPSTREAM_QUEUE);
    let id = info.id;
    live.hub.add_terminal(
        Terminal {
            id,
            cols: info.cols,
            rows: info.rows,
            command: info.command,
        },
        tx,
    );
    let weak = Arc::downgrade(live);
    let task = tokio::spawn(async move {
        let (sink, stream) = socket.split();
        upstream::relay(stream, sink, rx, |b| {
            weak.upgrade().map(|l| l.hub.output(id, b))
        })
        .await;
        if let Some(l) = weak.upgrade() {
            l.hub.remove_terminal(id);
        }
    });
    live.upstreams
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(task.abort_handle());
    Ok(())
}
