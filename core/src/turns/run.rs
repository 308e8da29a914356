//! One turn: the prompt handed to the workspace's agent, its frames recorded as they come, its
//! end (the agent's, a stop's, a lost lease's), and an interrupted turn's prompt queued again.

use std::sync::Arc;
use std::time::Instant;

use tandem_protocol::agent::{TurnFrame, TurnStart};
use tandem_protocol::*;
use tokio::sync::Notify;

use super::control::stop_here;
use super::{BUSY_BACKOFF, HEARTBEAT, Running, STOP_GRACE, record};
use crate::Engine;
use crate::config::OnInterrupt;
use crate::db::{self, Db};
use crate::page_context;
use crate::workspace_agent::WorkspaceAgent;
use crate::{Error, Result, now_ms};

/// Runs the claimed `prompt` in the session's workspace to its end, and records it.
pub(super) async fn run(
    state: &Engine,
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
        state.hooks.ensure_gateway(state, &wid, init_pid).await?;
        if let Err(e) = state.hooks.before_turn(state, session, &wid).await {
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
            // A pod the cluster took away: the session is queued for a new one before its
            // prompt is queued again, so the prompt waits for that pod instead of failing
            // against the gone one.
            if host.runtime.taken_away(&wid).await {
                crate::sessions::workspace::workspace_died(db, &host, session, &wid).await?;
                crate::supervisor::start_boot(state, session);
            }
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

/// What follows a finished turn before the next one starts ([`crate::hooks::Hooks::after_turn`]:
/// on a GitHub repo, its changes are committed as the prompt's author and pushed to the
/// session's open pull request). A failure is an event on the session, never the turn's.
async fn after_turn(state: &Engine, session: SessionId, prompt: &Prompt) {
    if let Err(e) = state.hooks.after_turn(state, session, prompt).await {
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
async fn beat(state: Engine, session: SessionId, prompt: PromptId, lost: Arc<Notify>) {
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
pub(super) async fn interrupt(
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
