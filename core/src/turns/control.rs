//! Turns across restarts and processes: a dead process's prompts queued again, a running turn
//! stopped or steered wherever it runs, and the control messages between processes.

use tandem_protocol::agent::TurnSteer;
use tandem_protocol::*;

use super::run::interrupt;
use super::{LEASE, kick};
use crate::Engine;
use crate::db;
use crate::page_context;
use crate::workspace_agent::WorkspaceAgent;
use crate::{Result, now_ms};

/// After a restart: this runner's turns (and any whose runner went quiet) are interrupted and
/// their prompts queued again; then every live session with a queue is kicked.
pub async fn recover(state: &Engine) -> Result<()> {
    sweep(state, Some(state.turns.runner.clone())).await?;
    let live = [
        SessionState::Ready.as_str(),
        SessionState::Idle.as_str(),
        SessionState::Running.as_str(),
    ];
    for session in db::prompts::sessions_with_queue(&state.db, &live).await? {
        kick(state, session);
    }
    Ok(())
}

/// Interrupts running prompts whose runner is `mine` (at startup) or whose heartbeat is stale.
pub async fn sweep(state: &Engine, mine: Option<String>) -> Result<()> {
    let stale = now_ms() - LEASE.as_millis() as i64;
    for prompt in db::prompts::orphaned(&state.db, mine.as_deref(), stale).await? {
        let reason = "the server running it stopped mid-turn".to_string();
        interrupt(&state.db, &state.config.agents, &prompt, &reason, 0, true).await?;
        kick(state, prompt.session_id);
    }
    Ok(())
}

/// What one server process asks of the one that runs a session's turn (over
/// [`Db::send_control`]: on PostgreSQL every process sharing the database hears it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Control {
    Stop {
        session: SessionId,
        by: String,
    },
    Steer {
        session: SessionId,
        prompt: PromptId,
    },
    /// The session has work: the server whose host runs its workspace runs it.
    Kick {
        session: SessionId,
    },
}

/// Stops the session's running turn, wherever it runs (this process, or on PostgreSQL any
/// other sharing the database). False when none runs.
pub async fn stop(state: &Engine, session: SessionId, by: &Author) -> Result<bool> {
    let prompt = match stop_here(state, session, &by.name).await? {
        Some(p) => p,
        None if state.db.backend() == db::Backend::Postgres => {
            let Some(running) = db::prompts::running(&state.db, session).await? else {
                return Ok(false);
            };
            // Its runner is another process: it hears this and stops the turn, or finds the
            // request at its next heartbeat if the notification is lost.
            db::prompts::request_stop(&state.db, running.id, &by.name).await?;
            let msg = Control::Stop {
                session,
                by: by.name.clone(),
            };
            state
                .db
                .send_control(&serde_json::to_string(&msg).unwrap_or_default())
                .await?;
            running.id
        }
        None => return Ok(false),
    };
    crate::db::audit::record(
        &state.db,
        now_ms(),
        db::audit::Entry {
            actor_user_id: by.user_id,
            actor_name: &by.name,
            action: "turn.stop",
            target: &session.to_string(),
            detail: serde_json::json!({ "prompt": prompt }),
        },
    )
    .await?;
    Ok(true)
}

/// Stops the session's turn if it runs in this process; its prompt if so.
pub(super) async fn stop_here(
    state: &Engine,
    session: SessionId,
    by: &str,
) -> Result<Option<PromptId>> {
    let Some(turn) = state.turns.running(session) else {
        return Ok(None);
    };
    *turn.stopped_by.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("stopped by {by}"));
    turn.stop.notify_one();
    let host = state.workspaces()?;
    if let Err(e) = WorkspaceAgent::new(&host, turn.wid.as_str(), turn.init_pid)
        .stop_turn(turn.prompt)
        .await
    {
        tracing::warn!(session = %session, error = %e, "asking the agent to stop failed; the server ends the turn");
    }
    Ok(Some(turn.prompt))
}

/// Hands a steering prompt to the running turn, wherever it runs; when there is none (or its
/// agent cannot be steered) the prompt simply waits in the queue.
pub async fn steer(state: &Engine, prompt: &Prompt) {
    if state.turns.running(prompt.session_id).is_some() {
        steer_here(state, prompt).await;
    } else if state.db.backend() == db::Backend::Postgres {
        let msg = Control::Steer {
            session: prompt.session_id,
            prompt: prompt.id,
        };
        if let Err(e) = state
            .db
            .send_control(&serde_json::to_string(&msg).unwrap_or_default())
            .await
        {
            tracing::warn!(session = %prompt.session_id, error = %e, "steering another process's turn failed; the prompt waits in the queue");
        }
    }
    kick(state, prompt.session_id);
}

async fn steer_here(state: &Engine, prompt: &Prompt) {
    let Some(turn) = state.turns.running(prompt.session_id) else {
        return;
    };
    let Ok(host) = state.workspaces() else { return };
    // A steering prompt's page comes as text only (its screenshots stay in the timeline).
    let req = TurnSteer {
        prompt_id: prompt.id,
        text: match &prompt.context {
            Some(c) => page_context::agent_text(&prompt.text, c, page_context::Images::Left),
            None => prompt.text.clone(),
        },
    };
    // Noted before it is sent: the agent may report it delivered before the call returns.
    let noted = |add: bool| {
        let mut s = turn.steered.lock().unwrap_or_else(|e| e.into_inner());
        if add {
            s.insert(prompt.id);
        } else {
            s.remove(&prompt.id);
        }
    };
    noted(true);
    let sent = WorkspaceAgent::new(&host, turn.wid.as_str(), turn.init_pid)
        .steer_turn(turn.prompt, &req)
        .await;
    if !matches!(sent, Ok(true)) {
        noted(false);
    }
    match sent {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(session = %prompt.session_id, "the turn cannot be steered; the prompt waits in the queue")
        }
        Err(e) => {
            tracing::warn!(session = %prompt.session_id, error = %e, "steering failed; the prompt waits in the queue")
        }
    }
}

/// Acts on other processes' control messages for the turns running here, for as long as the
/// server runs.
pub fn listen_control(state: &Engine) {
    let mut rx = state.db.control();
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            let msg = match rx.recv().await {
                Ok(m) => m,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "control messages were missed");
                    continue;
                }
                Err(_) => return,
            };
            match serde_json::from_str::<Control>(&msg) {
                Ok(Control::Stop { session, by }) => {
                    if let Err(e) = stop_here(&state, session, &by).await {
                        tracing::warn!(session = %session, error = %e, "stopping a turn for another process failed");
                    }
                }
                Ok(Control::Kick { session }) => {
                    let here = match (
                        db::sessions::workspace(&state.db, session).await,
                        state.workspaces(),
                    ) {
                        (Ok(Some(row)), Ok(host)) => row.hosted_by(&host.host_id),
                        _ => false,
                    };
                    if here {
                        kick(&state, session);
                    }
                }
                Ok(Control::Steer { session, prompt }) => {
                    if state.turns.running(session).is_some()
                        && let Ok(Some(p)) = db::prompts::get(&state.db, prompt).await
                        && p.session_id == session
                    {
                        steer_here(&state, &p).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a control message this server does not understand")
                }
            }
        }
    });
}
