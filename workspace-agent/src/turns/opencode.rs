//! The `opencode` agent: `opencode run --format json`, its one provider pointed at the gateway
//! (through the loopback forwarder), the prompt on standard input. Its JSON lines become frames:
//! text → message, finished tool → call and result, step usage → the turn's usage. Its
//! conversation lives in its own store inside the workspace (`~/.local/share/opencode`); the
//! session id is the state kept between turns, so the next turn continues it (`--session`).

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tandem_protocol::agent::{
    GATEWAY_LOOPBACK, MAX_TOOL_OUTPUT_BYTES, OPENCODE_BINARY as BOUND_BINARY, TurnFrame, TurnStart,
};
use tandem_protocol::{TurnOutcome, Usage};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::changes::Snapshot;
use super::{Ctx, Ending, cap};

/// A turn may run this long.
const TURN_TIMEOUT: Duration = Duration::from_secs(2 * 3600);
/// Longest JSON line read from opencode.
const MAX_LINE_BYTES: usize = 4 * MAX_TOOL_OUTPUT_BYTES;

/// The config: one OpenAI-compatible provider, `tandem`, at the gateway; nothing fetched.
fn config(model: &str) -> String {
    json!({
        "autoupdate": false,
        "share": "disabled",
        "model": format!("tandem/{model}"),
        "small_model": format!("tandem/{model}"),
        "provider": { "tandem": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Tandem",
            "options": { "baseURL": format!("http://{GATEWAY_LOOPBACK}/v1"), "apiKey": "tandem-gateway" },
            "models": { model: { "name": model, "limit": { "context": 128000, "output": 8192 } } },
        } },
        // The company's tools, through the gateway: the same policy and approvals as the builtin
        // agent's, the credentials added there.
        "mcp": { "tandem": {
            "type": "remote",
            "url": format!("http://{GATEWAY_LOOPBACK}{}", tandem_protocol::agent::MCP_SERVER_PATH),
            "enabled": true,
        } },
    })
    .to_string()
}

pub async fn run(ctx: &Ctx, start: &TurnStart) -> Ending {
    let binary = if std::path::Path::new(BOUND_BINARY).exists() {
        BOUND_BINARY
    } else {
        "opencode"
    };
    let mut cmd = tokio::process::Command::new(binary);
    cmd.args([
        "run",
        "--format",
        "json",
        "-m",
        &format!("tandem/{}", start.model),
    ]);
    let previous = start
        .state
        .as_ref()
        .and_then(|s| s["opencode_session"].as_str())
        .map(String::from);
    if let Some(session) = &previous {
        cmd.args(["--session", session]);
    }
    cmd.current_dir(&ctx.root)
        .env("OPENCODE_CONFIG_CONTENT", config(&start.model))
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_PROJECT_CONFIG", "1")
        .env(
            "HOME",
            std::env::var("HOME").unwrap_or_else(|_| "/root".into()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let before = Snapshot::take(&ctx.root).await;
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ending::new(
                TurnOutcome::Failed,
                Usage::default(),
                Some(format!("cannot start opencode ({binary}): {e}")),
            );
        }
    };
    let pgid = child.id().map(|p| Pid::from_raw(p as i32));
    // The prompt goes on standard input: as an argument opencode would quote it.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(start.prompt.as_bytes()).await;
    }
    let stderr = child.stderr.take();
    let stderr_task = tokio::spawn(async move {
        let mut text = String::new();
        if let Some(mut e) = stderr {
            let mut buf = Vec::new();
            let _ = (&mut e).take(64 * 1024).read_to_end(&mut buf).await;
            text = String::from_utf8_lossy(&buf).into_owned();
        }
        text
    });
    let mut state = Parsed {
        session: previous,
        ..Default::default()
    };
    let stdout = child.stdout.take();
    let work = async {
        if let Some(out) = stdout {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.len() > MAX_LINE_BYTES {
                    continue;
                }
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    for frame in state.read(&v) {
                        ctx.send(frame).await;
                    }
                }
            }
        }
        child.wait().await.ok().and_then(|s| s.code())
    };
    let code = tokio::select! {
        r = tokio::time::timeout(TURN_TIMEOUT, work) => r.ok().flatten(),
        () = ctx.cancel.cancelled() => None,
    };
    if let Some(pg) = pgid {
        let _ = killpg(pg, Signal::SIGKILL);
    }
    for (path, change) in before.diff(&Snapshot::take(&ctx.root).await) {
        ctx.send(TurnFrame::FileChanged { path, change }).await;
    }
    if let Some(session) = &state.session {
        ctx.send(TurnFrame::State {
            state: json!({ "opencode_session": session }),
        })
        .await;
    }
    if ctx.cancel.is_cancelled() {
        return Ending::new(TurnOutcome::Stopped, state.usage, None);
    }
    let stderr = stderr_task.await.unwrap_or_default();
    match (code, state.error.take()) {
        (Some(0), None) => Ending::new(TurnOutcome::Completed, state.usage, None),
        (_, Some(e)) => Ending::new(
            TurnOutcome::Failed,
            state.usage,
            Some(format!("opencode: {e}")),
        ),
        (code, None) => {
            let tail: String = stderr
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            Ending::new(
                TurnOutcome::Failed,
                state.usage,
                Some(format!("opencode exited with {code:?}: {}", tail.trim())),
            )
        }
    }
}

/// What the JSON lines said so far.
#[derive(Default)]
struct Parsed {
    session: Option<String>,
    usage: Usage,
    error: Option<String>,
}

impl Parsed {
    /// The frames one line becomes.
    fn read(&mut self, v: &Value) -> Vec<TurnFrame> {
        if let Some(id) = v["sessionID"].as_str() {
            self.session = Some(id.to_string());
        }
        let part = &v["part"];
        match v["type"].as_str() {
            Some("text") => match part["text"].as_str().filter(|t| !t.is_empty()) {
                Some(t) => vec![
                    TurnFrame::Delta {
                        text: t.to_string(),
                    },
                    TurnFrame::Message {
                        text: t.to_string(),
                    },
                ],
                None => vec![],
            },
            Some("tool_use") => {
                let st = &part["state"];
                let call_id = part["callID"].as_str().unwrap_or_default().to_string();
                let name = part["tool"].as_str().unwrap_or("tool").to_string();
                let is_error = st["status"] == "error";
                let output = st["output"]
                    .as_str()
                    .or(st["error"].as_str())
                    .unwrap_or_default()
                    .to_string();
                let duration_ms = st["time"]["end"]
                    .as_i64()
                    .zip(st["time"]["start"].as_i64())
                    .map_or(0, |(e, s)| e - s);
                vec![
                    TurnFrame::ToolCall {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: st["input"].clone(),
                    },
                    TurnFrame::ToolResult {
                        call_id,
                        name,
                        output: cap(output, MAX_TOOL_OUTPUT_BYTES),
                        is_error,
                        exit_code: st["metadata"]["exit"].as_i64().map(|c| c as i32),
                        duration_ms,
                    },
                ]
            }
            Some("step_finish") => {
                let t = &part["tokens"];
                self.usage.add(Usage {
                    prompt_tokens: t["input"].as_i64().unwrap_or(0),
                    completion_tokens: t["output"].as_i64().unwrap_or(0),
                    requests: 1,
                });
                vec![]
            }
            Some("error") => {
                let e = &v["error"];
                self.error = Some(
                    e["data"]["message"]
                        .as_str()
                        .or(e["message"].as_str())
                        .unwrap_or("an error")
                        .to_string(),
                );
                vec![]
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_become_frames_and_usage() {
        let mut p = Parsed::default();
        let tool = serde_json::json!({"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"bash","callID":"call_1",
            "state":{"status":"completed","input":{"command":"echo hi"},"output":"hi\n","metadata":{"exit":0},"time":{"start":10,"end":25}}}});
        let frames = p.read(&tool);
        assert_eq!(p.session.as_deref(), Some("ses_1"));
        assert!(
            matches!(&frames[1], TurnFrame::ToolResult { exit_code: Some(0), duration_ms: 15, output, .. } if output == "hi\n")
        );
        p.read(
            &serde_json::json!({"type":"step_finish","part":{"tokens":{"input":100,"output":7}}}),
        );
        assert_eq!(
            (
                p.usage.prompt_tokens,
                p.usage.completion_tokens,
                p.usage.requests
            ),
            (100, 7, 1)
        );
        let text = p.read(&serde_json::json!({"type":"text","part":{"text":"All done."}}));
        assert!(matches!(&text[1], TurnFrame::Message { text } if text == "All done."));
    }
}
