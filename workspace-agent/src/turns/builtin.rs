//! The builtin agent: a tool-calling loop against the model behind the gateway. Its state is the
//! conversation (without the system prompt), returned after every turn so any workspace can
//! continue it. Steering prompts join the conversation at the next tool boundary.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tandem_protocol::agent::{TurnFrame, TurnStart};
use tandem_protocol::{TurnOutcome, Usage};

use super::changes::Snapshot;
use super::{Ctx, Ending, mcp, model, tools};

/// How often streamed text is sent on (coalescing keeps the event log small).
const DELTA_EVERY: Duration = Duration::from_millis(50);

const SYSTEM: &str = "You are a coding agent working in a git checkout (the current directory, /workspace). \
Use the tools to read, change and test the code. Make the smallest change that does what was asked, \
run the repository's tests when there are any, and finish with a short summary of what you changed.";

/// The conversation kept between turns.
fn messages_of(state: &Option<Value>) -> Vec<Value> {
    state
        .as_ref()
        .and_then(|s| s["messages"].as_array().cloned())
        .unwrap_or_default()
}

pub async fn run(ctx: &Ctx, start: &TurnStart) -> Ending {
    let mut messages = messages_of(&start.state);
    messages.push(json!({ "role": "user", "content": user_content(start) }));
    let mut usage = Usage::default();
    let ending = steps(ctx, start, &mut messages, &mut usage).await;
    ctx.send(TurnFrame::State {
        state: json!({ "messages": without_images(messages) }),
    })
    .await;
    ending
}

/// The prompt as the model gets it: its text, and its images (a page's screenshots) as
/// OpenAI-style `image_url` parts with `data:` URLs.
fn user_content(start: &TurnStart) -> Value {
    if start.images.is_empty() {
        return json!(start.prompt);
    }
    let mut parts = vec![json!({ "type": "text", "text": start.prompt })];
    for image in &start.images {
        parts.push(json!({
            "type": "image_url",
            "image_url": { "url": format!("data:{};base64,{}", image.content_type, image.data) },
        }));
    }
    Value::Array(parts)
}

/// The conversation to keep: images (megabytes each) become a note; the turn that sent them
/// had them, and the session's timeline keeps them.
fn without_images(messages: Vec<Value>) -> Vec<Value> {
    messages
        .into_iter()
        .map(|mut m| {
            if let Some(parts) = m["content"].as_array_mut() {
                for part in parts.iter_mut() {
                    if part["type"] == "image_url" {
                        *part =
                            json!({ "type": "text", "text": "[a screenshot was attached here]" });
                    }
                }
            }
            m
        })
        .collect()
}

async fn steps(
    ctx: &Ctx,
    start: &TurnStart,
    messages: &mut Vec<Value>,
    usage: &mut Usage,
) -> Ending {
    let mcp = mcp::McpTools::load(&ctx.root).await;
    if !mcp.problems.is_empty() {
        ctx.send(TurnFrame::Message {
            text: format!(
                "Some MCP tools are missing this turn: {}",
                mcp.problems.join("; ")
            ),
        })
        .await;
    }
    let mut tools = tools::definitions();
    if let Some(all) = tools.as_array_mut() {
        all.extend(mcp.definitions().iter().cloned());
    }
    for _ in 0..start.max_steps.max(1) {
        let mut request = vec![json!({ "role": "system", "content": SYSTEM })];
        request.extend(messages.iter().cloned());
        let body = json!({
            "model": start.model,
            "messages": request,
            "tools": tools,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        let reply = match ask(ctx, &body).await {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Ending::new(TurnOutcome::Failed, *usage, Some(e)),
            None => return Ending::new(TurnOutcome::Stopped, *usage, None),
        };
        usage.add(Usage {
            requests: 1,
            ..reply.usage
        });
        let mut assistant = json!({ "role": "assistant", "content": reply.content });
        if !reply.tool_calls.is_empty() {
            assistant["tool_calls"] = reply
                .tool_calls
                .iter()
                .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
                .collect();
        }
        messages.push(assistant);
        if !reply.content.is_empty() {
            ctx.send(TurnFrame::Message {
                text: reply.content.clone(),
            })
            .await;
        }
        for call in &reply.tool_calls {
            if ctx.cancel.is_cancelled() {
                // Every call the model made gets an answer, so the conversation stays valid.
                messages.push(json!({ "role": "tool", "tool_call_id": call.id, "content": "[stopped before it ran]" }));
                continue;
            }
            let args: Value = serde_json::from_str(&call.arguments)
                .unwrap_or_else(|_| json!({ "_raw": call.arguments }));
            ctx.send(TurnFrame::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: args.clone(),
            })
            .await;
            let before = Snapshot::take(&ctx.root).await;
            let out = if args.get("_raw").is_some() {
                tools::Outcome {
                    output: "the arguments are not valid JSON".into(),
                    is_error: true,
                    exit_code: None,
                    duration_ms: 0,
                }
            } else if mcp.has(&call.name) {
                // It may wait for a person's approval: a stop must not wait with it.
                tokio::select! {
                    out = mcp.call(&call.name, &args) => out,
                    () = ctx.cancel.cancelled() => tools::Outcome {
                        output: "[stopped while it waited]".into(),
                        is_error: true,
                        exit_code: None,
                        duration_ms: 0,
                    },
                }
            } else {
                tools::call(ctx, &call.name, &args).await
            };
            for (path, change) in before.diff(&Snapshot::take(&ctx.root).await) {
                ctx.send(TurnFrame::FileChanged { path, change }).await;
            }
            ctx.send(TurnFrame::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output: out.output.clone(),
                is_error: out.is_error,
                exit_code: out.exit_code,
                duration_ms: out.duration_ms,
            })
            .await;
            messages
                .push(json!({ "role": "tool", "tool_call_id": call.id, "content": out.output }));
        }
        if ctx.cancel.is_cancelled() {
            return Ending::new(TurnOutcome::Stopped, *usage, None);
        }
        // A tool boundary (or the end of a reply): steering joins here.
        let steers = ctx.take_steers();
        for s in &steers {
            messages.push(json!({ "role": "user", "content": s.text }));
            ctx.send(TurnFrame::Steered {
                prompt_id: s.prompt_id,
            })
            .await;
        }
        if reply.tool_calls.is_empty() && steers.is_empty() {
            return Ending::new(TurnOutcome::Completed, *usage, None);
        }
    }
    Ending::new(
        TurnOutcome::Failed,
        *usage,
        Some(format!(
            "the agent did not finish within {} model requests",
            start.max_steps
        )),
    )
}

/// One model request, streaming its text on; `None` if the turn was stopped meanwhile.
async fn ask(ctx: &Ctx, body: &Value) -> Option<Result<model::Reply, String>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let request = model::complete(body, move |t| {
        let _ = tx.send(t.to_string());
    });
    tokio::pin!(request);
    let mut pending = String::new();
    let mut last = Instant::now();
    let result = loop {
        tokio::select! {
            r = &mut request => break r,
            Some(t) = rx.recv() => {
                pending.push_str(&t);
                if last.elapsed() >= DELTA_EVERY {
                    ctx.send(TurnFrame::Delta { text: std::mem::take(&mut pending) }).await;
                    last = Instant::now();
                }
            }
            () = ctx.cancel.cancelled() => return None,
        }
    };
    while let Ok(t) = rx.try_recv() {
        pending.push_str(&t);
    }
    if !pending.is_empty() {
        ctx.send(TurnFrame::Delta { text: pending }).await;
    }
    Some(result)
}
