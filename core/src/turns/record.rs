//! Turning a turn's frames into events: deltas, messages, tool calls and results (cut, with the
//! whole output kept as an artifact), file changes, delivered steering; then the turn's end with
//! its usage and the agent's state to keep. Tool calls and file changes are audited too.

use tandem_protocol::agent::TurnFrame;
use tandem_protocol::limits::{MAX_EVENT_OUTPUT_BYTES, MAX_FRAME_FIELD_BYTES};
use tandem_protocol::*;

use crate::db::{self, Db};
use crate::sessions::bounds::{self, Bound, Room};
use crate::{Result, now_ms};

/// Most bytes of a tool's arguments kept in its audit entry.
const MAX_AUDIT_ARGS_BYTES: usize = 4096;
/// Most frames one turn records: an agent (untrusted) that sends more fills nothing further;
/// the turn's end is still recorded.
pub const MAX_EVENTS_PER_TURN: u32 = 20_000;
/// Most artifact bytes one turn keeps; past it outputs are cut in their event only.
pub const MAX_ARTIFACT_BYTES_PER_TURN: usize = 64 * 1024 * 1024;

/// Longest agent message kept in an event (the rest is in an artifact).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// An artifact id as long as any: an event is measured with it before its artifact is made.
const NO_ARTIFACT: ArtifactId = ArtifactId(uuid::Uuid::nil());
/// Frames recorded on the room read from the store (counted down locally) before it is read
/// again: the session's other writers (its tree's other turns, people) are seen within this many.
const ROOM_REFRESH_FRAMES: u32 = 100;

pub struct Recorder {
    db: Db,
    session: SessionId,
    prompt: PromptId,
    /// Who the agent acts for, in the audit log.
    actor: (Option<UserId>, String),
    /// The agent's state from its last `state` frame, kept with the turn's end.
    state: Option<serde_json::Value>,
    usage: Usage,
    /// This process's runner id (only its own run of the prompt is ended here).
    runner: String,
    /// Cuts the session's code-host credential out of what is recorded.
    credentials: std::sync::Arc<dyn tandem_host::GitCredentials>,
    /// The prompts sent to this turn as steering (each may be reported delivered once).
    steered: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<PromptId>>>,
    /// Frames seen and artifact bytes kept this turn (both bounded).
    frames: u32,
    artifact_bytes: usize,
    /// What the session and its tree may still store, as last read (and counted down since), and
    /// how many frames ago it was read.
    room: Option<Room>,
    room_age: u32,
    /// The session (or its tree) reached its bound for events, or for artifacts, this turn.
    events_full: bool,
    artifacts_full: bool,
    /// Calls this turn that ran a test command (their results count as tests run).
    test_calls: std::collections::HashSet<String>,
}

/// Commands that run a project's tests, as an agent writes them (the first words of a shell
/// command, after any `cd …&&`).
const TEST_COMMANDS: &[&str] = &[
    "cargo test",
    "cargo nextest",
    "cargo xtask test",
    "npm test",
    "npm run test",
    "npx jest",
    "npx vitest",
    "yarn test",
    "pnpm test",
    "pytest",
    "python -m pytest",
    "python3 -m pytest",
    "go test",
    "make test",
    "mvn test",
    "gradle test",
    "./gradlew test",
    "bundle exec rspec",
    "rspec",
    "dotnet test",
    "./test.sh",
    "sh test.sh",
    "bash test.sh",
];

/// Whether a `run_command` call's arguments run tests.
fn runs_tests(name: &str, arguments: &serde_json::Value) -> bool {
    if name != "run_command" && name != "bash" && name != "shell" {
        return false;
    }
    let Some(command) = arguments.get("command").and_then(serde_json::Value::as_str) else {
        return false;
    };
    command.split("&&").chain(command.split(';')).any(|part| {
        let words: Vec<&str> = part.split_whitespace().collect();
        let line = words.join(" ");
        TEST_COMMANDS
            .iter()
            .any(|t| line == *t || line.starts_with(&format!("{t} ")))
    })
}

impl Recorder {
    pub fn new(
        db: Db,
        session: SessionId,
        prompt: &Prompt,
        agent: &AgentSpec,
        runner: &str,
        credentials: std::sync::Arc<dyn tandem_host::GitCredentials>,
        steered: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<PromptId>>>,
    ) -> Self {
        Self {
            db,
            session,
            prompt: prompt.id,
            actor: (
                prompt.author.user_id,
                format!("{} agent for {}", agent.name(), prompt.author.name),
            ),
            state: None,
            usage: Usage::default(),
            runner: runner.to_string(),
            credentials,
            steered,
            frames: 0,
            artifact_bytes: 0,
            room: None,
            room_age: 0,
            events_full: false,
            artifacts_full: false,
            test_calls: Default::default(),
        }
    }

    /// The room as read from the store now.
    async fn read_room(&mut self) -> Result<Room> {
        let room = bounds::room(&self.db, self.session).await?;
        self.room = Some(room);
        self.room_age = 0;
        Ok(room)
    }

    /// Room in the session's and its tree's stored events for `kind` (and takes it): counted
    /// as the bytes the store keeps and counts for it, its JSON. Past the bound the timeline
    /// says so once and the frame is left out.
    async fn event_room(&mut self, kind: &EventKind) -> Result<bool> {
        if self.events_full {
            return Ok(false);
        }
        let bytes = serde_json::to_string(kind).map_or(i64::MAX, |j| j.len() as i64);
        let room = match self.room {
            Some(r) if self.room_age < ROOM_REFRESH_FRAMES && r.fits_events(1, bytes) => r,
            _ => self.read_room().await?,
        };
        if !room.fits_events(1, bytes) {
            self.events_full = true;
            tracing::warn!(session = %self.session, "a turn's frames are left out: the session's stored events reached their bound");
            bounds::note(
                &self.db,
                self.session,
                Bound::Events,
                &room.events_refusal(),
            )
            .await?;
            return Ok(false);
        }
        let mut room = room;
        room.take(1, bytes, 0);
        self.room = Some(room);
        self.room_age += 1;
        Ok(true)
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    async fn append(&self, kind: EventKind) -> Result<()> {
        let mut tx = self.db.begin().await?;
        db::events::append(&mut tx, self.session, now_ms(), kind).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn audit(&self, action: &str, detail: serde_json::Value) -> Result<()> {
        let entry = db::audit::Entry {
            actor_user_id: self.actor.0,
            actor_name: &self.actor.1,
            action,
            target: &self.session.to_string(),
            detail,
        };
        // A failed audit write is logged; it does not interrupt the turn.
        if let Err(e) = db::audit::record(&self.db, now_ms(), entry).await {
            tracing::warn!(session = %self.session, error = %e, "an audit entry could not be written");
        }
        Ok(())
    }

    /// Room for `len` more artifact bytes this turn, and in the session's and its tree's stored
    /// artifacts (and takes it). Past the stored bound the timeline says so once.
    async fn artifact_room(&mut self, len: usize) -> Result<bool> {
        if self.artifacts_full || self.artifact_bytes + len > MAX_ARTIFACT_BYTES_PER_TURN {
            return Ok(false);
        }
        let want = len as i64;
        let room = match self.room {
            Some(r) if r.fits_artifact(want) => r,
            _ => self.read_room().await?,
        };
        if !room.fits_artifact(want) {
            self.artifacts_full = true;
            bounds::note(
                &self.db,
                self.session,
                Bound::Artifacts,
                &room.artifacts_refusal(),
            )
            .await?;
            return Ok(false);
        }
        let mut room = room;
        room.take(0, 0, want);
        self.room = Some(room);
        self.artifact_bytes += len;
        Ok(true)
    }

    /// Keeps `body` whole as an artifact of the session; its id (none past this turn's bound).
    async fn artifact(&mut self, name: &str, body: &str) -> Result<Option<ArtifactId>> {
        if !self.artifact_room(body.len()).await? {
            return Ok(None);
        }
        let info = ArtifactInfo {
            id: ArtifactId(uuid::Uuid::new_v4()),
            session_id: self.session,
            name: name.to_string(),
            content_type: "text/plain; charset=utf-8".into(),
            size: body.len() as i64,
            created_at: Timestamp(now_ms()),
        };
        let mut tx = self.db.begin().await?;
        db::artifacts::insert(&mut tx, &info, body).await?;
        tx.commit().await?;
        Ok(Some(info.id))
    }

    /// Records one frame (not `end`).
    pub async fn frame(&mut self, frame: TurnFrame) -> Result<()> {
        let prompt_id = self.prompt;
        self.frames = self.frames.saturating_add(1);
        if self.frames > MAX_EVENTS_PER_TURN {
            if self.frames == MAX_EVENTS_PER_TURN + 1 {
                tracing::warn!(session = %self.session, "an agent sent more than {MAX_EVENTS_PER_TURN} frames in one turn; the rest are not recorded");
                self.append(EventKind::Error {
                    message: format!(
                        "the agent sent more than {MAX_EVENTS_PER_TURN} events in this turn; the rest of the turn is not recorded"
                    ),
                })
                .await?;
            }
            return Ok(());
        }
        if self.events_full && !matches!(frame, TurnFrame::State { .. }) {
            return Ok(());
        }
        // A tool that printed the session's GitHub token does not get it recorded.
        let frame = match serde_json::to_string(&frame) {
            Ok(json) => match self.credentials.redact(self.session, &json) {
                Some(clean) => serde_json::from_str(&clean).unwrap_or(frame),
                None => frame,
            },
            Err(_) => frame,
        };
        // Each event is measured (its JSON, as stored) against the room before it is written,
        // and before any artifact of its frame is made.
        match cut_fields(frame) {
            TurnFrame::Delta { mut text } => {
                // The whole reply follows as a message; a delta only needs to show progress.
                crate::sessions::workspace::truncate(&mut text, MAX_EVENT_OUTPUT_BYTES);
                let kind = EventKind::AgentDelta { prompt_id, text };
                if self.event_room(&kind).await? {
                    self.append(kind).await?;
                }
                Ok(())
            }
            TurnFrame::Message { text } => {
                let mut cut = text.clone();
                let long = crate::sessions::workspace::truncate(&mut cut, MAX_MESSAGE_BYTES);
                let event = |cut: &str, artifact: Option<ArtifactId>| EventKind::AgentMessage {
                    prompt_id,
                    text: match (long, artifact) {
                        (false, _) => cut.to_string(),
                        (true, Some(id)) => {
                            format!("{cut}\n\n[cut: the whole message is artifact {id}]")
                        }
                        (true, None) => {
                            format!("{cut}\n\n[cut: this turn kept all the artifacts it may]")
                        }
                    },
                };
                // Measured with the longer note (an artifact's id).
                if !self.event_room(&event(&cut, Some(NO_ARTIFACT))).await? {
                    return Ok(());
                }
                let kept = match long {
                    true => self.artifact("agent message", &text).await?,
                    false => None,
                };
                self.append(event(&cut, kept)).await
            }
            TurnFrame::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                if runs_tests(&name, &arguments) && self.test_calls.len() < 10_000 {
                    self.test_calls.insert(call_id.clone());
                }
                let json = arguments.to_string();
                let long = json.len() > MAX_EVENT_OUTPUT_BYTES;
                let event = |artifact: Option<ArtifactId>| EventKind::ToolCall {
                    prompt_id,
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: match (long, artifact) {
                        (false, _) => arguments.clone(),
                        (true, Some(id)) => {
                            serde_json::json!({ "_cut": format!("{} bytes of arguments; whole in artifact {id}", json.len()) })
                        }
                        (true, None) => {
                            serde_json::json!({ "_cut": format!("{} bytes of arguments; not kept (the turn's artifact bound)", json.len()) })
                        }
                    },
                };
                if !self.event_room(&event(Some(NO_ARTIFACT))).await? {
                    return Ok(());
                }
                let kept = match long {
                    true => {
                        self.artifact(&format!("{name} arguments ({call_id})"), &json)
                            .await?
                    }
                    false => None,
                };
                let kind = event(kept);
                let mut args = match &kind {
                    EventKind::ToolCall { arguments, .. } => arguments.to_string(),
                    _ => String::new(),
                };
                crate::sessions::workspace::truncate(&mut args, MAX_AUDIT_ARGS_BYTES);
                self.audit(
                    "agent.tool",
                    serde_json::json!({ "tool": name, "arguments": args }),
                )
                .await?;
                self.append(kind).await
            }
            TurnFrame::ToolResult {
                call_id,
                name,
                output,
                is_error,
                exit_code,
                duration_ms,
            } => {
                if self.test_calls.remove(&call_id) {
                    let passed = !is_error && exit_code == Some(0);
                    db::spend::count_test_run(&self.db, self.session, passed).await?;
                }
                let mut cut = output.clone();
                let truncated =
                    crate::sessions::workspace::truncate(&mut cut, MAX_EVENT_OUTPUT_BYTES);
                let event = |artifact: Option<ArtifactId>| EventKind::ToolResult {
                    prompt_id,
                    call_id: call_id.clone(),
                    name: name.clone(),
                    output: cut.clone(),
                    is_error,
                    exit_code,
                    duration_ms,
                    truncated,
                    artifact,
                };
                if !self.event_room(&event(Some(NO_ARTIFACT))).await? {
                    return Ok(());
                }
                let now = now_ms();
                // Asked before the transaction: saying the bound is reached writes too.
                let keep = truncated && self.artifact_room(output.len()).await?;
                let mut tx = self.db.begin().await?;
                let artifact = if keep {
                    let info = ArtifactInfo {
                        id: ArtifactId(uuid::Uuid::new_v4()),
                        session_id: self.session,
                        name: format!("{name} output ({call_id})"),
                        content_type: "text/plain; charset=utf-8".into(),
                        size: output.len() as i64,
                        created_at: Timestamp(now),
                    };
                    db::artifacts::insert(&mut tx, &info, &output).await?;
                    Some(info.id)
                } else {
                    None
                };
                db::events::append(&mut tx, self.session, now, event(artifact)).await?;
                tx.commit().await?;
                Ok(())
            }
            TurnFrame::FileChanged { path, change } => {
                let kind = EventKind::FileChanged {
                    prompt_id,
                    path: path.clone(),
                    change,
                };
                if !self.event_room(&kind).await? {
                    return Ok(());
                }
                self.audit(
                    "agent.file_change",
                    serde_json::json!({ "path": path, "change": change }),
                )
                .await?;
                self.append(kind).await
            }
            TurnFrame::Steered { prompt_id: steer } => {
                // The agent is untrusted: only a prompt sent to this very turn as steering can
                // be delivered by it (any other would be dropped from the queue unanswered).
                let sent = self
                    .steered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&steer);
                if !sent {
                    tracing::warn!(session = %self.session, prompt = %steer, "the agent reported a prompt delivered that was never sent to it; ignored");
                    return Ok(());
                }
                let Some(p) = db::prompts::get(&self.db, steer)
                    .await?
                    .filter(|p| p.session_id == self.session)
                else {
                    return Ok(());
                };
                let kind = EventKind::SteerDelivered {
                    prompt_id: steer,
                    turn: prompt_id,
                    author: p.author,
                };
                if !self.event_room(&kind).await? {
                    return Ok(());
                }
                let mut tx = self.db.begin().await?;
                if db::prompts::set_state(
                    &mut tx,
                    steer,
                    PromptState::Queued,
                    PromptState::Delivered,
                )
                .await?
                {
                    db::events::append(&mut tx, self.session, now_ms(), kind).await?;
                }
                tx.commit().await?;
                Ok(())
            }
            TurnFrame::State { state } => {
                self.state = Some(state);
                Ok(())
            }
            TurnFrame::End { .. } => Ok(()),
        }
    }

    /// Ends the turn: the prompt's state and usage, the `turn_ended` event and the agent's state,
    /// in one transaction.
    pub async fn end(
        self,
        outcome: TurnOutcome,
        usage: Usage,
        error: Option<String>,
        duration_ms: i64,
    ) -> Result<()> {
        let now = now_ms();
        // The agent's reason is its own (untrusted) text: kept to an output's bound.
        let error = error.map(|mut e| {
            cut(&mut e, MAX_EVENT_OUTPUT_BYTES);
            e
        });
        let to = match outcome {
            TurnOutcome::Completed => PromptState::Done,
            TurnOutcome::Stopped => PromptState::Stopped,
            TurnOutcome::Failed => PromptState::Failed,
            TurnOutcome::Interrupted => PromptState::Interrupted,
        };
        let mut tx = self.db.begin().await?;
        if !db::prompts::finish(&mut tx, self.prompt, Some(&self.runner), to, usage, now).await? {
            return Ok(());
        }
        if let Some(state) = &self.state {
            db::artifacts::set_agent_state(&mut tx, self.session, &state.to_string(), now).await?;
        }
        db::events::append(
            &mut tx,
            self.session,
            now,
            EventKind::TurnEnded {
                prompt_id: self.prompt,
                outcome,
                usage,
                duration_ms,
                error,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Cuts `s` to at most `max` bytes (at a character boundary), ending it with `…` if it was cut.
fn cut(s: &mut String, max: usize) {
    if crate::sessions::workspace::truncate(s, max) {
        crate::sessions::workspace::truncate(s, max - '…'.len_utf8());
        s.push('…');
    }
}

/// The frame with its short strings (a path, a tool's name, a call's id) cut to
/// [`MAX_FRAME_FIELD_BYTES`]: an agent's frame line may be megabytes, and each of these is kept
/// whole in its event and again in the audit log.
fn cut_fields(mut frame: TurnFrame) -> TurnFrame {
    match &mut frame {
        TurnFrame::ToolCall { call_id, name, .. } | TurnFrame::ToolResult { call_id, name, .. } => {
            cut(call_id, MAX_FRAME_FIELD_BYTES);
            cut(name, MAX_FRAME_FIELD_BYTES);
        }
        TurnFrame::FileChanged { path, .. } => cut(path, MAX_FRAME_FIELD_BYTES),
        TurnFrame::Delta { .. }
        | TurnFrame::Message { .. }
        | TurnFrame::Steered { .. }
        | TurnFrame::State { .. }
        | TurnFrame::End { .. } => {}
    }
    frame
}

#[cfg(test)]
mod test_commands {
    use serde_json::json;

    #[test]
    fn test_runs_are_told_from_other_commands() {
        let run = |c: &str| super::runs_tests("run_command", &json!({ "command": c }));
        assert!(run("cargo test -p foo"));
        assert!(run("cd web && npm test"));
        assert!(run("python -m pytest -x tests/"));
        assert!(!run("cargo build"));
        assert!(!run("echo cargo test"));
        assert!(!super::runs_tests(
            "write_file",
            &json!({ "command": "cargo test" })
        ));
    }
}
