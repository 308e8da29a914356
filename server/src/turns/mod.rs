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
use std::time::{Duration, Instant};

use tandem_protocol::agent::{TurnFrame, TurnStart, TurnSteer};
use tandem_protocol::*;
use tokio::sync::Notify;

use crate::config::OnInterrupt;
use crate::db::{self, Db};
use crate::page_context;
use crate::state::AppState;
use crate::workspace_agent::WorkspaceAgent;
use crate::{Error, Result, now_ms};

#[cfg(test)]
mod fuzz_tests;
pub mod hooks;
pub mod record;

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
    /// What runs before and after each turn ([`hooks`]).
    hooks: Arc<dyn hooks::TurnHooks>,
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
    /// Loads (or makes) this server's runner id from `<data dir>/server-id`; `hooks` run
    /// around each turn.
    pub fn load(data_dir: &std::path::Path, hooks: Arc<dyn hooks::TurnHooks>) -> Result<Self> {
        Ok(Self {
            runner: crate::data_dir::server_id(data_dir)?,
            active: Mutex::new(HashMap::new()),
            hooks,
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
pub fn kick(state: &AppState, session: SessionId) {
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

async fn drive(state: AppState, session: SessionId) {
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
async fn next(state: &AppState, session: SessionId) -> Result<bool> {
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

async fn run(
    state: &AppState,
    session: SessionId,
    prompt: Prompt,
    agent: AgentSpec,
    wid: String,
    init_pid: i32,
) -> Result<()> {
    let t0 = Instant::now();
    let db = &state.db;
    let host = state.workspaces()?.clone();
    let kept = db::artifacts::agent_state(db, session)
        .await?
        .and_then(|s| serde_json::from_str(&s).ok());
    let (mut text, mut images) = match &prompt.context {
        Some(c) => {
            let images = page_context::images(db, session, c).await;
            // Agents other than the builtin find the screenshots as files.
            let how = match agent {
                AgentSpec::Builtin => page_context::Images::Attached,
                _ => page_context::Images::Files(tandem_protocol::agent::CONTEXT_DIR),
            };
            (page_context::agent_text(&prompt.text, c, how), images)
        }
        None => (prompt.text.clone(), Vec::new()),
    };
    text.push_str(&crate::prompt_images::note(
        &prompt,
        agent != AgentSpec::Builtin,
    ));
    images.extend(crate::prompt_images::turn_images(db, session, &prompt).await);
    let start = TurnStart {
        turn_id: prompt.id,
        prompt: text,
        author: prompt.author.clone(),
        agent: agent.clone(),
        model: state.settings.model().model,
        state: kept,
        max_steps: state.config.agents.max_steps,
        images,
    };
    let running = Running {
        prompt: prompt.id,
        wid: wid.clone(),
        init_pid,
        stop: Arc::new(Notify::new()),
        stopped_by: Default::default(),
        steered: Default::default(),
    };
    state.turns.set_running(session, Some(running.clone()));
    let mut rec = record::Recorder::new(
        db.clone(),
        session,
        &prompt,
        &agent,
        &state.turns.runner,
        host.credentials.clone(),
        running.steered.clone(),
    );
    let result = async {
        state.gateways.ensure(state, &wid).await?;
        if let Err(e) = state.turns.hooks.before_turn(state, session, &wid).await {
            tracing::warn!(session = %session, error = %e, "preparing the workspace's git failed");
        }
        let mut frames = WorkspaceAgent::new(&host, wid.as_str(), init_pid).start_turn(&start).await?;
        let lease_lost = Arc::new(Notify::new());
        let heartbeat = tokio::spawn(beat(
            state.clone(),
            session,
            prompt.id,
            lease_lost.clone(),
        ));
        let _stop_beating = AbortOnDrop(heartbeat);
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let wait_stop = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                item = frames.recv() => match item {
                    Some(Ok(TurnFrame::End { outcome, usage, error, .. })) => return Ok(Ending::Agent(outcome, usage, error)),
                    Some(Ok(frame)) => rec.frame(frame).await?,
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(Error::Unavailable("the turn's stream ended without an end".into())),
                },
                () = running.stop.notified(), if deadline.is_none() => {
                    deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
                }
                () = wait_stop => return Ok(Ending::StopTimedOut),
                () = lease_lost.notified() => return Ok(Ending::LeaseLost),
            }
        }
    }
    .await;
    state.turns.set_running(session, None);
    let stopped_by = running
        .stopped_by
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let ms = t0.elapsed().as_millis() as i64;
    match result {
        Ok(Ending::Agent(outcome, usage, error)) => {
            let error = error.or_else(|| {
                (outcome == TurnOutcome::Stopped)
                    .then(|| stopped_by.clone())
                    .flatten()
            });
            rec.end(outcome, usage, error, ms).await?;
            after_turn(state, session, &prompt).await;
            Ok(())
        }
        // The agent did not end a stopped turn in time: the server ends it (dropping the
        // stream stops the agent's side).
        Ok(Ending::StopTimedOut) => {
            let usage = rec.usage();
            rec.end(TurnOutcome::Stopped, usage, stopped_by, ms).await?;
            after_turn(state, session, &prompt).await;
            Ok(())
        }
        // Another process took the prompt back (this one's heartbeat lapsed, say a stalled
        // database connection): it queued the prompt again and records that turn's end. This
        // one stops its agent and records nothing more, so the session never has two runs of
        // one prompt going.
        Ok(Ending::LeaseLost) => {
            tracing::warn!(session = %session, prompt = %prompt.id, "another server took this turn's prompt back; stopping the turn here");
            if let Err(e) = WorkspaceAgent::new(&host, wid.as_str(), init_pid)
                .stop_turn(prompt.id)
                .await
            {
                tracing::warn!(session = %session, error = %e, "asking the agent to stop failed");
            }
            Ok(())
        }
        // The agent is still ending the turn before (a stop it took longer than the grace to
        // finish): this one waits its turn again, without counting an attempt.
        Err(Error::Conflict(why)) => {
            tracing::info!(session = %session, "the agent is busy; retrying the prompt: {why}");
            interrupt(
                db,
                &state.config.agents,
                &prompt,
                "the agent was still ending the previous turn",
                ms,
                false,
            )
            .await?;
            tokio::time::sleep(BUSY_BACKOFF).await;
            Ok(())
        }
        Err(e) => {
            tracing::warn!(session = %session, error = %e, "a turn was interrupted");
            interrupt(
                db,
                &state.config.agents,
                &prompt,
                &format!("the workspace went away mid-turn: {e}"),
                ms,
                true,
            )
            .await
        }
    }
}

/// What follows a finished turn before the next one starts ([`hooks::TurnHooks::after_turn`]:
/// on a GitHub repo, its changes are committed as the prompt's author and pushed to the
/// session's open pull request). A failure is an event on the session, never the turn's.
async fn after_turn(state: &AppState, session: SessionId, prompt: &Prompt) {
    if let Err(e) = state.turns.hooks.after_turn(state, session, prompt).await {
        tracing::warn!(session = %session, error = %e, "committing or pushing after a turn failed");
        let message =
            format!("the turn's changes could not be committed or pushed to the pull request: {e}");
        let _ = crate::sessions::workspace::event(&state.db, session, EventKind::Error { message })
            .await;
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a turn's wait ended.
enum Ending {
    /// The agent ended it.
    Agent(TurnOutcome, Usage, Option<String>),
    /// It was stopped and the agent did not end it within [`STOP_GRACE`].
    StopTimedOut,
    /// Its prompt is not this process's to run any more.
    LeaseLost,
}

/// Renews the turn's lease every [`HEARTBEAT`]; tells `lost` when the database says the prompt
/// is no longer this runner's, and stops the turn when a stop was asked through another process.
async fn beat(state: AppState, session: SessionId, prompt: PromptId, lost: Arc<Notify>) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    let mut stopping = false;
    loop {
        tick.tick().await;
        let runner = &state.turns.runner;
        match db::prompts::heartbeat(&state.db, prompt, runner, now_ms()).await {
            Ok(db::prompts::Lease::Held) => {}
            Ok(db::prompts::Lease::StopAsked(by)) if !stopping => {
                stopping = true;
                if let Err(e) = stop_here(&state, session, &by).await {
                    tracing::warn!(session = %session, error = %e, "stopping a turn asked elsewhere failed");
                }
            }
            Ok(db::prompts::Lease::StopAsked(_)) => {}
            Ok(db::prompts::Lease::Lost) => {
                lost.notify_one();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "a turn's heartbeat failed"),
        }
    }
}

/// Ends an interrupted turn: its prompt is queued again (first or last, per the config) unless
/// it has been interrupted too often, when it is left for people to resubmit, loudly.
async fn interrupt(
    db: &Db,
    agents: &crate::config::AgentsConfig,
    prompt: &Prompt,
    reason: &str,
    ms: i64,
    count: bool,
) -> Result<()> {
    let now = now_ms();
    let session = prompt.session_id;
    let mut tx = db.begin().await?;
    let attempts = prompt.attempts + i64::from(count);
    let first = agents.on_interrupt == OnInterrupt::Rerun || !count;
    let requeued = if attempts < agents.max_attempts {
        db::prompts::requeue(&mut tx, prompt.id, first, count).await?
    } else {
        db::prompts::finish(
            &mut tx,
            prompt.id,
            None,
            PromptState::Interrupted,
            Usage::default(),
            now,
        )
        .await?
    };
    if !requeued {
        // Someone else already ended it.
        return Ok(());
    }
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::TurnEnded {
            prompt_id: prompt.id,
            outcome: TurnOutcome::Interrupted,
            usage: Usage::default(),
            duration_ms: ms,
            error: Some(reason.to_string()),
        },
    )
    .await?;
    let kind = if attempts < agents.max_attempts {
        EventKind::PromptRequeued {
            prompt_id: prompt.id,
            first,
            reason: reason.to_string(),
        }
    } else {
        EventKind::Error {
            message: format!(
                "a prompt was interrupted {attempts} times and is not queued again; resubmit it if it is still wanted"
            ),
        }
    };
    db::events::append(&mut tx, session, now, kind).await?;
    tx.commit().await?;
    Ok(())
}

/// After a restart: this runner's turns (and any whose runner went quiet) are interrupted and
/// their prompts queued again; then every live session with a queue is kicked.
pub async fn recover(state: &AppState) -> Result<()> {
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
pub async fn sweep(state: &AppState, mine: Option<String>) -> Result<()> {
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
enum Control {
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
pub async fn stop(state: &AppState, session: SessionId, by: &Author) -> Result<bool> {
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
async fn stop_here(state: &AppState, session: SessionId, by: &str) -> Result<Option<PromptId>> {
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
pub async fn steer(state: &AppState, prompt: &Prompt) {
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

async fn steer_here(state: &AppState, prompt: &Prompt) {
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
pub fn listen_control(state: &AppState) {
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
