//! A scripted OpenAI-compatible chat-completions server for tests. It answers
//! `POST /v1/chat/completions` with the next reply of its script — streamed as server-sent
//! events when the request asks for `stream`, else as one JSON body — and records every request
//! (headers and body) so a test can assert what the agent sent. It speaks the real wire format
//! over real HTTP, so the code under test cannot tell it from a hosted model.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub text: String,
    /// `(name, arguments)` of each tool call.
    pub tool_calls: Vec<(String, Value)>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Only for a conversation whose first user message contains this (several agents sharing
    /// one script); `None` answers anyone.
    pub for_prompt: Option<String>,
    /// Only for a request with this many assistant messages so far (0 = a turn's first step).
    pub at_step: Option<usize>,
    /// Only for a request that offers tools (`true`) or offers none (`false`).
    pub with_tools: Option<bool>,
    /// Only for a request whose latest user message contains this (a later turn of a
    /// continuing conversation).
    pub last_prompt: Option<String>,
}

impl Reply {
    /// A reply with text only (the agent's turn ends with it).
    pub fn text(text: &str) -> Self {
        Self {
            text: text.into(),
            prompt_tokens: 100,
            completion_tokens: 10,
            ..Default::default()
        }
    }

    /// A reply that calls one tool.
    pub fn tool(name: &str, arguments: Value) -> Self {
        Self {
            tool_calls: vec![(name.into(), arguments)],
            prompt_tokens: 100,
            completion_tokens: 20,
            ..Default::default()
        }
    }

    /// Keeps this reply for conversations that started with a prompt containing `needle`.
    pub fn for_prompt(mut self, needle: &str) -> Self {
        self.for_prompt = Some(needle.into());
        self
    }

    /// Keeps this reply for a request at step `n` of its conversation (`n` assistant messages
    /// so far).
    pub fn at_step(mut self, n: usize) -> Self {
        self.at_step = Some(n);
        self
    }

    /// Keeps this reply for a request whose latest user message contains `needle`.
    pub fn for_last_prompt(mut self, needle: &str) -> Self {
        self.last_prompt = Some(needle.into());
        self
    }

    /// Keeps this reply for requests that offer tools (`true`) or none (`false`).
    pub fn with_tools(mut self, tools: bool) -> Self {
        self.with_tools = Some(tools);
        self
    }

    /// Adds text said before the tool calls.
    pub fn saying(mut self, text: &str) -> Self {
        self.text = text.into();
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    pub body: Value,
}

impl Request {
    /// Every message's `content` text, joined (for "did the model see X" assertions).
    pub fn transcript(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(content_text)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// The messages with role `user`, in order.
    pub fn user_messages(&self) -> Vec<String> {
        self.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["role"] == "user")
                    .filter_map(content_text)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `data:` URLs of the images in user messages (`image_url` parts), in order.
    pub fn images(&self) -> Vec<String> {
        self.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|p| p["type"] == "image_url")
            .filter_map(|p| p["image_url"]["url"].as_str().map(String::from))
            .collect()
    }
}

/// A message's text: its `content` string, or its text parts joined.
fn content_text(m: &Value) -> Option<String> {
    match &m["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    /// Answers requests no scripted reply matches (kept, not used up).
    fallback: Option<Reply>,
    requests: Vec<Request>,
    /// The `Authorization` header of each `GET /v1/models`.
    model_lists: Vec<Option<String>>,
}

#[derive(Clone, Default)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    arrived: Arc<tokio::sync::Notify>,
}

/// A running scripted model on `127.0.0.1`.
pub struct ScriptedModel {
    /// The OpenAI-style base URL (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    shared: Shared,
}

impl ScriptedModel {
    /// Starts serving `script` on a free loopback port.
    pub async fn start(script: Vec<Reply>) -> Self {
        let shared = Shared::default();
        shared.inner.lock().unwrap().script = script.into();
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("bound");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            shared,
        }
    }

    /// Appends replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.inner.lock().unwrap().script.extend(replies);
    }

    /// Answers every request that no scripted reply matches with `reply` (e.g. an agent's
    /// side requests, like titles).
    pub fn fallback(&self, reply: Reply) {
        self.shared.inner.lock().unwrap().fallback = Some(reply);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// The `Authorization` header of every model-list request so far (connection tests).
    pub fn model_lists(&self) -> Vec<Option<String>> {
        self.shared.inner.lock().unwrap().model_lists.clone()
    }

    /// Waits until at least `n` requests have arrived (a test's own timeout bounds it).
    pub async fn wait_requests(&self, n: usize) -> Vec<Request> {
        loop {
            let notified = self.shared.arrived.notified();
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            notified.await;
        }
    }
}

async fn models(State(shared): State<Shared>, headers: HeaderMap) -> Json<Value> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    shared.inner.lock().unwrap().model_lists.push(auth);
    Json(
        json!({ "object": "list", "data": [{ "id": "scripted", "object": "model", "owned_by": "tests" }] }),
    )
}

async fn complete(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let Ok(body) = serde_json::from_str::<Value>(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": { "message": "the body is not JSON" } })),
        )
            .into_response();
    };
    let reply = {
        let mut inner = shared.inner.lock().unwrap();
        let authorization = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let request = Request {
            authorization,
            body: body.clone(),
        };
        let users = request.user_messages();
        let first = users.first().cloned().unwrap_or_default();
        let latest = users.last().cloned().unwrap_or_default();
        let step = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        inner.requests.push(request);
        let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let at = inner.script.iter().position(|r| {
            r.for_prompt
                .as_ref()
                .is_none_or(|n| first.contains(n.as_str()))
                && r.at_step.is_none_or(|s| s == step)
                && r.with_tools.is_none_or(|t| t == tools)
                && r.last_prompt
                    .as_ref()
                    .is_none_or(|n| latest.contains(n.as_str()))
        });
        at.and_then(|i| inner.script.remove(i))
            .or_else(|| inner.fallback.clone())
    };
    shared.arrived.notify_waiters();
    let Some(reply) = reply else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": { "message": "the script has no more replies" } })),
        )
            .into_response();
    };
    let model = body["model"].as_str().unwrap_or("scripted").to_string();
    if body["stream"].as_bool() == Some(true) {
        sse(&model, &reply).into_response()
    } else {
        Json(whole(&model, &reply)).into_response()
    }
}

fn calls(reply: &Reply) -> Vec<Value> {
    reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({ "id": format!("call_{i}"), "type": "function", "function": { "name": name, "arguments": args.to_string() } }))
        .collect()
}

fn usage(reply: &Reply) -> Value {
    json!({ "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens, "total_tokens": reply.prompt_tokens + reply.completion_tokens })
}

fn whole(model: &str, reply: &Reply) -> Value {
    let mut message = json!({ "role": "assistant", "content": reply.text });
    if !reply.tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(calls(reply));
    }
    let finish = if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({ "id": "chatcmpl-scripted", "object": "chat.completion", "model": model,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }], "usage": usage(reply) })
}

/// The reply as OpenAI streams it: text in small pieces, each tool call's arguments in two
/// pieces, a finish chunk, a usage chunk, then `[DONE]`.
fn sse(model: &str, reply: &Reply) -> impl IntoResponse {
    let chunk = |delta: Value, finish: Value| {
        json!({ "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model,
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
    };
    let mut events = vec![chunk(json!({ "role": "assistant" }), Value::Null)];
    let chars: Vec<char> = reply.text.chars().collect();
    for piece in chars.chunks(8) {
        events.push(chunk(
            json!({ "content": piece.iter().collect::<String>() }),
            Value::Null,
        ));
    }
    for (i, (name, args)) in reply.tool_calls.iter().enumerate() {
        let args = args.to_string();
        let mid = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        events.push(chunk(
            json!({ "tool_calls": [{ "index": i, "id": format!("call_{i}"), "type": "function", "function": { "name": name, "arguments": &args[..mid] } }] }),
            Value::Null,
        ));
        events.push(chunk(
            json!({ "tool_calls": [{ "index": i, "function": { "arguments": &args[mid..] } }] }),
            Value::Null,
        ));
    }
    let finish = if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(json!({}), json!(finish)));
    events.push(json!({ "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage(reply) }));
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    (
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        body,
    )
}
