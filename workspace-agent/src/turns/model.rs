//! The model, through the server's gateway socket: OpenAI-compatible chat completions, streamed
//! (server-sent events) or whole, with tool calls assembled from their deltas.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tandem_protocol::Usage;
use tandem_protocol::agent::GATEWAY_SOCKET;

/// Most tool calls taken from one reply.
const MAX_TOOL_CALLS: usize = 64;
/// Largest answer read from the model.
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// One tool call the model asked for.
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text, as the model wrote it.
    pub arguments: String,
}

/// One model answer.
#[derive(Default)]
pub struct Reply {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// The gateway socket (overridable for tests of the agent alone).
fn socket() -> String {
    std::env::var("TANDEM_GATEWAY_SOCKET").unwrap_or_else(|_| GATEWAY_SOCKET.to_string())
}

/// Sends one request to the gateway.
async fn send(
    method: hyper::Method,
    path: &str,
    body: Option<&Value>,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let stream = tokio::net::UnixStream::connect(socket())
        .await
        .map_err(|e| format!("the Tandem gateway is not reachable: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("the Tandem gateway: {e}"))?;
    tokio::spawn(conn);
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap_or_default())
        .unwrap_or_default();
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "gateway")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("the Tandem gateway: {e}"))
}

/// A call to Tandem itself through the gateway (`/tandem/...`, scoped to this session): the
/// answer's status and JSON (or its text as a JSON string).
pub async fn tandem(
    method: hyper::Method,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let res = send(method, path, body).await?;
    let status = res.status().as_u16();
    let bytes = http_body_util::Limited::new(res.into_body(), MAX_REPLY_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, v))
}

/// Sends one chat-completions request; `on_delta` sees reply text as it streams.
pub async fn complete(request: &Value, mut on_delta: impl FnMut(&str)) -> Result<Reply, String> {
    let res = send(hyper::Method::POST, "/v1/chat/completions", Some(request)).await?;
    let status = res.status();
    let is_sse = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = res.into_body();
    if !status.is_success() {
        let text = http_body_util::Limited::new(body, 64 * 1024)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(format!(
            "the model answered {status}: {}",
            String::from_utf8_lossy(&text).trim()
        ));
    }
    if !is_sse {
        let whole = http_body_util::Limited::new(body, MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&whole)
            .map_err(|e| format!("the model's answer is not JSON: {e}"))?;
        let reply = whole_reply(&v);
        if !reply.content.is_empty() {
            on_delta(&reply.content);
        }
        return Ok(reply);
    }
    let mut acc = Accumulator::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the model stream broke: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        if total > MAX_REPLY_BYTES {
            return Err("the model's answer is too large".into());
        }
        pending.extend_from_slice(&data);
        while let Some(end) = find_event_end(&pending) {
            let event: Vec<u8> = pending.drain(..end).collect();
            for line in String::from_utf8_lossy(&event).lines() {
                let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                    continue;
                };
                if data == "[DONE]" {
                    return Ok(acc.finish());
                }
                let chunk: Value = serde_json::from_str(data)
                    .map_err(|e| format!("a malformed model event: {e}"))?;
                if let Some(text) = acc.add(&chunk) {
                    on_delta(&text);
                }
            }
        }
    }
    Ok(acc.finish())
}

/// The end of the first complete event (after its blank line), if any.
fn find_event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn usage_of(v: &Value) -> Usage {
    Usage {
        prompt_tokens: v["prompt_tokens"].as_i64().unwrap_or(0),
        completion_tokens: v["completion_tokens"].as_i64().unwrap_or(0),
        requests: 0,
    }
}

fn whole_reply(v: &Value) -> Reply {
    let msg = &v["choices"][0]["message"];
    let tool_calls = msg["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: c["function"]["arguments"]
                        .as_str()
                        .unwrap_or("{}")
                        .to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Reply {
        content: msg["content"].as_str().unwrap_or_default().to_string(),
        tool_calls,
        usage: usage_of(&v["usage"]),
    }
}

/// Folds streamed chunks into a reply.
#[derive(Default)]
struct Accumulator {
    reply: Reply,
}

impl Accumulator {
    /// Adds one chunk; returns its text delta, if any.
    fn add(&mut self, chunk: &Value) -> Option<String> {
        if chunk["usage"].is_object() {
            self.reply.usage = usage_of(&chunk["usage"]);
        }
        let delta = &chunk["choices"][0]["delta"];
        if let Some(calls) = delta["tool_calls"].as_array() {
            for c in calls {
                let index = c["index"]
                    .as_u64()
                    .unwrap_or(self.reply.tool_calls.len() as u64)
                    as usize;
                // A model asks for a handful of calls at once; an absurd index is not an allocation.
                if index >= MAX_TOOL_CALLS {
                    continue;
                }
                while self.reply.tool_calls.len() <= index {
                    self.reply.tool_calls.push(ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                let call = &mut self.reply.tool_calls[index];
                if let Some(id) = c["id"].as_str() {
                    call.id = id.to_string();
                }
                if let Some(name) = c["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                if let Some(args) = c["function"]["arguments"].as_str() {
                    call.arguments.push_str(args);
                }
            }
        }
        let text = delta["content"].as_str().filter(|t| !t.is_empty())?;
        self.reply.content.push_str(text);
        Some(text.to_string())
    }

    fn finish(mut self) -> Reply {
        for (i, c) in self.reply.tool_calls.iter_mut().enumerate() {
            if c.id.is_empty() {
                c.id = format!("call_{i}");
            }
            if c.arguments.trim().is_empty() {
                c.arguments = "{}".into();
            }
        }
        self.reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_deltas_assemble() {
        let mut acc = Accumulator::default();
        acc.add(&serde_json::json!({"choices":[{"delta":{"content":"Hi"}}]}));
        acc.add(&serde_json::json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}));
        acc.add(&serde_json::json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}));
        acc.add(
            &serde_json::json!({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}),
        );
        let r = acc.finish();
        assert_eq!(r.content, "Hi");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, "{\"path\":\"a\"}");
        assert_eq!(r.usage.prompt_tokens, 7);
        assert_eq!(r.usage.completion_tokens, 3);
    }

    #[test]
    fn events_split_on_blank_lines() {
        assert_eq!(find_event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(find_event_end(b"data: a\r\n\r\n"), Some(11));
        assert_eq!(find_event_end(b"data: a\n"), None);
    }
}
