//! Turns: the agent working through a session's prompt queue, one prompt at a time.
//!
//! The queue lives in the database. A turn starts by claiming the first queued prompt (the claim
//! is the session lock: a unique index allows one running prompt per session, whichever process
//! asks). The claiming process streams the turn's frames from the workspace agent and appends
//! each as an event. A process that dies mid-turn leaves its prompt `running` under its runner
//! id; on restart (or when its heartbeat goes stale) the prompt is queued again, never dropped.
//!
//! Knows the store and the workspace agent, never HTTP or WebSockets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_protocol::*;
use tokio::sync::Notify;

use crate::Engine;
use crate::db::{self, Db};
use crate::{Result, now_ms};

mod control;
#[cfg(test)]
mod fuzz_tests;
pub mod record;
mod run;

use control::Control;
pub use control::{listen_control, recover, steer, stop, sweep};
use run::run;

/// How often a running turn's heartbeat is written.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A running prompt whose heartbeat is older than this belongs to a dead process.
pub const LEASE: Duration = Duration::from_secs(60);
/// How long to wait before giving a prompt to an agent that was still busy.
pub const BUSY_BACKOFF: Duration = Duration::from_millis(500);
/// How long a stopped turn's agent may take to end it before the server ends it itself.
pub const STOP_GRACE: Duration = Duration::from_millis(1500);

/// Sessions whose queue this process is driving.
pub struct Turns {
    /// This server's id as a runner (kept in the data dir, so it survives restarts).
    runner: String,
    active: Mutex<HashMap<SessionId, Active>>,
}

#[derive(Default)]
struct Active {
    /// Set when someone kicked the session while its driver was busy.
    again: bool,
    turn: Option<Running>,
}

#[derive(Clone)]
struct Running {
    prompt: PromptId,
    wid: String,
    init_pid: i32,
    stop: Arc<Notify>,
    stopped_by: Arc<Mutex<Option<String>>>,
    /// The prompts handed to this turn as steering: the only ones its agent may report
    /// delivered.
    steered: Arc<Mutex<std::collections::HashSet<PromptId>>>,
}

impl Turns {
    /// Loads (or makes) this server's runner id from `<data dir>/server-id`.
    pub fn load(data_dir: &std::path::Path) -> Result<Self> {
        Ok(Self {
            runner: crate::data_dir::server_id(data_dir)?,
            active: Mutex::new(HashMap::new()),
        })
    }

    fn running(&self, session: SessionId) -> Option<Running> {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .and_then(|a| a.turn.clone())
    }

    fn set_running(&self, session: SessionId, turn: Option<Running>) {
        if let Some(a) = self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&session)
        {
            a.turn = turn;
        }
    }
}

/// Makes sure the session's queue is being worked on (call after anything is queued or the
/// session became live). Cheap when a driver is already running.
pub fn kick(state: &Engine, session: SessionId) {
    if !state.workspaces.is_ok() {
        return;
    }
    {
        let mut active = state.turns.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = active.get_mut(&session) {
            a.again = true;
            return;
        }
        active.insert(session, Active::default());
    }
    tokio::spawn(drive(state.clone(), session));
}

async fn drive(state: Engine, session: SessionId) {
    loop {
        let ran = match next(&state, session).await {
            Ok(ran) => ran,
            Err(e) => {
                tracing::error!(session = %session, error = %e, "running the next turn failed");
                false
            }
        };
        if ran {
            continue;
        }
        let mut active = state.turns.active.lock().unwrap_or_else(|e| e.into_inner());
        match active.get_mut(&session) {
            Some(a) if a.again => a.again = false,
            _ => {
                active.remove(&session);
                return;
            }
        }
    }
}

/// Claims and runs the next prompt; false when there is none (or the session is not live).
async fn next(state: &Engine, session: SessionId) -> Result<bool> {
    let db = &state.db;
    let Some(row) = db::sessions::workspace(db, session).await? else {
        return Ok(false);
    };
    // Another server's host runs the workspace: that server runs its turns (a webhook or a
    // sweep may kick a session anywhere).
    if !row.hosted_by(&state.workspaces()?.host_id) {
        let msg = Control::Kick { session };
        db.send_control(&serde_json::to_string(&msg).unwrap_or_default())
            .await?;
        return Ok(false);
    }
    let (Some(wid), Some(init_pid)) = (row.workspace_id, row.workspace_pid) else {
        return Ok(false);
    };
    // An agent that needs a model waits for one (the session says why) instead of failing.
    if let Some(p) = db::prompts::next_queued(db, session).await? {
        let agent = match p.agent {
            Some(a) => a,
            None => db::sessions::agent(db, session).await?.unwrap_or_default(),
        };
        if let Some(problem) = state.settings.model_problem(&agent) {
            state.boots.wait_for_model(session);
            crate::sessions::boots::tell_waiting(state, session, &problem).await?;
            return Ok(false);
        }
    }
    match claim(db, session, &state.turns.runner).await? {
        Claim::Turn(prompt, agent) => {
            run(state, session, *prompt, agent, wid, init_pid as i32).await?;
            Ok(true)
        }
        Claim::Empty { was_running } => {
            // A session that ran a turn rests (one that never did stays `ready`).
            if was_running {
                let mut tx = db.begin().await?;
                db::sessions::transition_from(
                    &mut tx,
                    session,
                    &[SessionState::Running],
                    SessionState::Idle,
                    None,
                    now_ms(),
                )
                .await?;
                tx.commit().await?;
            }
            Ok(false)
        }
        Claim::NotLive => Ok(false),
    }
}

/// What [`claim`] found.
pub enum Claim {
    /// This prompt's turn is ours to run, with this agent.
    Turn(Box<Prompt>, AgentSpec),
    /// Nothing queued (or another process runs a turn).
    Empty { was_running: bool },
    /// The session has no live workspace.
    NotLive,
}

/// In one transaction: a live session moves to `running`, its first queued prompt is claimed
/// for `runner` (the session lock) and `turn_started` is appended. Nothing changes unless all do.
pub async fn claim(db: &Db, session: SessionId, runner: &str) -> Result<Claim> {
    let now = now_ms();
    let mut tx = db.begin().await?;
    let live = [
        SessionState::Ready,
        SessionState::Idle,
        SessionState::Running,
    ];
    let Some(was) =
        db::sessions::transition_from(&mut tx, session, &live, SessionState::Running, None, now)
            .await?
    else {
        tx.rollback().await?;
        return Ok(Claim::NotLive);
    };
    let Some(prompt) = db::prompts::claim_next(&mut tx, session, runner, now).await? else {
        // Rolled back: the session keeps its state.
        tx.rollback().await?;
        return Ok(Claim::Empty {
            was_running: was == SessionState::Running,
        });
    };
    db.observed(db::bus::Observation::PromptWaited(
        now.saturating_sub(prompt.created_at.0),
    ));
    let agent = match &prompt.agent {
        Some(a) => a.clone(),
        None => db::sessions::agent(&mut tx, session)
            .await?
            .unwrap_or_default(),
    };
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::TurnStarted {
            prompt_id: prompt.id,
            author: prompt.author.clone(),
            agent: agent.name().into(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Claim::Turn(Box::new(prompt), agent))
}
