//! Turns: one agent working on one prompt at a time. `POST /turns` starts one and streams its
//! frames; steering prompts join it at its next tool boundary; `stop`, or the server closing the
//! stream, cancels it (the running tool's process group is killed).
//!
//! Every agent (builtin, opencode, command) gets the same [`Ctx`]: a bounded frame channel to
//! the server, the cancellation token and the steering queue.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use tandem_protocol::agent::{TurnFrame, TurnStart, TurnSteer};
use tandem_protocol::{AgentSpec, PromptId, TurnOutcome, Usage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod builtin;
mod changes;
mod command;
mod mcp;
pub mod model;
mod opencode;
mod process;
mod tools;

/// Frames buffered before the agent waits for the server (backpressure, never unbounded).
const FRAME_QUEUE: usize = 256;
/// Steering prompts waiting for a tool boundary.
const STEER_QUEUE: usize = 32;

/// What an agent needs while it works.
pub struct Ctx {
    pub root: PathBuf,
    tx: mpsc::Sender<TurnFrame>,
    pub cancel: CancellationToken,
    steers: Mutex<mpsc::Receiver<TurnSteer>>,
}

impl Ctx {
    /// Sends a frame; false once the server has gone (the turn is then cancelled).
    pub async fn send(&self, frame: TurnFrame) -> bool {
        if self.tx.send(frame).await.is_err() {
            self.cancel.cancel();
            return false;
        }
        true
    }

    /// Steering prompts that arrived since the last call.
    pub fn take_steers(&self) -> Vec<TurnSteer> {
        let mut out = Vec::new();
        if let Ok(mut rx) = self.steers.lock() {
            while let Ok(s) = rx.try_recv() {
                out.push(s);
            }
        }
        out
    }
}

/// How an agent's work ended.
pub struct Ending {
    pub outcome: TurnOutcome,
    pub usage: Usage,
    pub error: Option<String>,
}

impl Ending {
    pub fn new(outcome: TurnOutcome, usage: Usage, error: Option<String>) -> Self {
        Self {
            outcome,
            usage,
            error,
        }
    }
}

struct Current {
    id: PromptId,
    steer: Option<mpsc::Sender<TurnSteer>>,
    cancel: CancellationToken,
}

/// The turn running in this workspace (at most one).
#[derive(Default)]
pub struct Turns {
    current: Mutex<Option<Current>>,
}

/// Why a turn request was refused.
pub enum Refused {
    Busy(PromptId),
    NotRunning,
    CannotSteer,
    QueueFull,
}

impl Turns {
    /// Starts a turn; the body streams its frames and ends with `end`.
    pub fn start(self: &Arc<Self>, root: PathBuf, start: TurnStart) -> Result<Body, Refused> {
        let (tx, rx) = mpsc::channel(FRAME_QUEUE);
        let (steer_tx, steer_rx) = mpsc::channel(STEER_QUEUE);
        let cancel = CancellationToken::new();
        {
            let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = cur.as_ref() {
                return Err(Refused::Busy(c.id));
            }
            // Only the builtin loop has tool boundaries to deliver steering at.
            let steer = matches!(start.agent, AgentSpec::Builtin).then_some(steer_tx);
            *cur = Some(Current {
                id: start.turn_id,
                steer,
                cancel: cancel.clone(),
            });
        }
        let ctx = Arc::new(Ctx {
            root,
            tx,
            cancel: cancel.clone(),
            steers: Mutex::new(steer_rx),
        });
        let turns = self.clone();
        let id = start.turn_id;
        tokio::spawn(async move {
            // However the agent ends (even by a panic), the workspace takes turns again.
            let _free = Finish(turns.clone(), id);
            // With the desktop up, the turn gets a screenshot before and after.
            let desktop = crate::desktop::is_running().await;
            if desktop {
                tools::attach_screenshot("before.png").await;
            }
            // Agents that read files find the prompt's images where the prompt says.
            if !matches!(start.agent, AgentSpec::Builtin) {
                write_images(&start.images).await;
            }
            let ending = match &start.agent {
                AgentSpec::Builtin => builtin::run(&ctx, &start).await,
                AgentSpec::Opencode => opencode::run(&ctx, &start).await,
                AgentSpec::Command { template } => command::run(&ctx, template, &start).await,
                AgentSpec::None => Ending::new(
                    TurnOutcome::Failed,
                    Usage::default(),
                    Some("this session has no agent".into()),
                ),
            };
            if desktop || crate::desktop::is_running().await {
                tools::attach_screenshot("after.png").await;
            }
            // Steering that never reached a boundary goes back to the server to queue.
            let undelivered = ctx.take_steers().into_iter().map(|s| s.prompt_id).collect();
            drop(_free);
            let outcome = if ctx.cancel.is_cancelled() && ending.outcome == TurnOutcome::Completed {
                TurnOutcome::Stopped
            } else {
                ending.outcome
            };
            let _ = ctx
                .tx
                .send(TurnFrame::End {
                    outcome,
                    usage: ending.usage,
                    error: ending.error,
                    undelivered,
                })
                .await;
        });
        // Dropping the body (the server went away) cancels the turn.
        let guard = cancel.drop_guard();
        let lines = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
            let frame = rx.recv().await?;
            let mut line = serde_json::to_vec(&frame).unwrap_or_default();
            line.push(b'\n');
            Some((Ok::<_, std::io::Error>(line), (rx, guard)))
        });
        Ok(Body::from_stream(lines))
    }

    fn finish(&self, id: PromptId) {
        // (Called by `Finish` when a turn's task ends.)
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_some_and(|c| c.id == id) {
            *cur = None;
        }
    }

    /// Queues a steering prompt for turn `id`.
    pub fn steer(&self, id: PromptId, steer: TurnSteer) -> Result<(), Refused> {
        let cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = cur.as_ref().filter(|c| c.id == id) else {
            return Err(Refused::NotRunning);
        };
        let Some(tx) = &c.steer else {
            return Err(Refused::CannotSteer);
        };
        tx.try_send(steer).map_err(|_| Refused::QueueFull)
    }

    /// Stops turn `id`.
    pub fn stop(&self, id: PromptId) -> Result<(), Refused> {
        let cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = cur.as_ref().filter(|c| c.id == id) else {
            return Err(Refused::NotRunning);
        };
        c.cancel.cancel();
        Ok(())
    }
}

/// Frees the turn slot when dropped.
struct Finish(Arc<Turns>, PromptId);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary, saying so at the end.
pub fn cap(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str("\n[output cut]");
    s
}

/// Writes a turn's images into [`tandem_protocol::agent::CONTEXT_DIR`]; a name that is not a
/// plain `name.png` is skipped (the server names them, but the agent checks what it writes).
async fn write_images(images: &[tandem_protocol::agent::TurnImage]) {
    use base64::Engine;
    let dir = std::path::Path::new(tandem_protocol::agent::CONTEXT_DIR);
    for image in images {
        let plain = image.name.ends_with(".png")
            && !image.name.starts_with('.')
            && image
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&image.data) else {
            continue;
        };
        if !plain {
            continue;
        }
        if let Err(e) = tokio::fs::create_dir_all(dir).await {
            eprintln!("making the prompt's image directory: {e}");
            return;
        }
        if let Err(e) = tokio::fs::write(dir.join(&image.name), bytes).await {
            eprintln!("writing the prompt's image {}: {e}", image.name);
        }
    }
}
