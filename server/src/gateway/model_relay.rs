//! What a workspace's model request may ask for. The gateway relays it with the server's key, so
//! it spends the server's account and acts with the provider's reach: the relay parses the body
//! (bounded), pins the model, bounds the answers and their length, and keeps out what would make
//! the provider act outside the workspace (its own web search, file search, code interpreter,
//! computer use; remote images it would fetch; files stored with the account).
//!
//! Per field, refused (400, the agent sees why) where a rewrite would change the answer's shape
//! behind the agent's back (`n`, remote images, stored files, malformed values), rewritten where
//! the agent gets what it needs anyway (the model, a lower token limit, fewer tools, unknown
//! extensions dropped).

use serde_json::{Map, Value};

use crate::{Error, Result};

/// Largest model request the relay reads (a long conversation with images inline).
pub const MAX_MODEL_REQUEST_BYTES: usize = super::MAX_REQUEST_BYTES;

/// Top-level fields of a chat-completions request that are relayed; any other is dropped. A
/// provider's own extensions (a web plugin, live search, stored completions, priority tiers)
/// are not on it: what the relay does not know, it does not pass on.
const RELAYED: &[&str] = &[
    "messages",
    "model",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "user",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "reasoning_effort",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
];

/// Tool types the caller runs itself (the agent, inside its workspace): always relayed. Any
/// other type is a tool the provider runs.
const CALLER_TOOLS: &[&str] = &["function", "custom"];

/// The fields that bound an answer's length.
const TOKEN_LIMITS: &[&str] = &["max_tokens", "max_completion_tokens"];

/// What the admin allows (`[agents]` and the Settings page).
pub struct Policy<'a> {
    /// The configured model: a request naming one not in `allowed_models` gets this one.
    pub model: &'a str,
    pub allowed_models: &'a [String],
    pub max_output_tokens: u32,
    /// Provider-side tool types allowed (`web_search` also lets `web_search_options` through).
    pub provider_tools: &'a [String],
}

impl Policy<'_> {
    fn provider_tool(&self, kind: &str) -> bool {
        self.provider_tools.iter().any(|t| t == kind)
    }
}

/// `body` as it may be relayed, or why it may not be (a 400 that says what to change).
pub fn relayable(body: &[u8], policy: &Policy) -> Result<Vec<u8>> {
    let mut req: Map<String, Value> = match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(bad("the model request is not a JSON object".into())),
        Err(e) => {
            return Err(bad(format!(
                "the model request is not JSON ({e}); the gateway relays OpenAI chat-completions requests"
            )));
        }
    };
    let web_search = policy.provider_tool("web_search");
    req.retain(|k, _| RELAYED.contains(&k.as_str()) || (web_search && k == "web_search_options"));
    let named = req.get("model").and_then(Value::as_str);
    if named.is_none_or(|m| m != policy.model && !policy.allowed_models.iter().any(|a| a == m)) {
        req.insert("model".into(), Value::String(policy.model.into()));
    }
    match req.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(bad(format!(
                "n must be 1 (one answer per model request); this request asked for {n}"
            )));
        }
    }
    for field in TOKEN_LIMITS {
        match req.get(*field) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) if n > u64::from(policy.max_output_tokens) => {
                    req.insert((*field).into(), policy.max_output_tokens.into());
                }
                Some(_) => {}
                None => return Err(bad(format!("{field} must be a whole number, not {v}"))),
            },
        }
    }
    tools(&mut req, policy)?;
    if let Some(messages) = req.get("messages") {
        let Some(messages) = messages.as_array() else {
            return Err(bad("messages must be an array".into()));
        };
        messages.iter().try_for_each(message_parts)?;
    }
    Ok(serde_json::to_vec(&req).expect("a JSON value serializes"))
}

/// Keeps the caller's tools and the provider tools the admin allows; without tools left, the
/// fields about them go too (a provider refuses `tool_choice` without tools).
fn tools(req: &mut Map<String, Value>, policy: &Policy) -> Result<()> {
    let keep = |t: &Value| {
        t["type"]
            .as_str()
            .is_some_and(|k| CALLER_TOOLS.contains(&k) || policy.provider_tool(k))
    };
    if let Some(tools) = req.get_mut("tools") {
        let Some(list) = tools.as_array_mut() else {
            return Err(bad("tools must be an array".into()));
        };
        let offered = list.len();
        list.retain(keep);
        if list.is_empty() && offered > 0 {
            for field in ["tools", "tool_choice", "parallel_tool_calls"] {
                req.remove(field);
            }
        }
    }
    // A choice that names a dropped tool would make the provider refuse the request.
    if req
        .get("tool_choice")
        .is_some_and(|c| c.is_object() && !keep(c))
    {
        req.remove("tool_choice");
    }
    Ok(())
}

/// Refuses content the provider would fetch or read on the workspace's behalf: an image by URL
/// (only inline `data:` images) and a file stored with the account.
fn message_parts(message: &Value) -> Result<()> {
    let Some(parts) = message["content"].as_array() else {
        return Ok(());
    };
    for part in parts {
        let image = match &part["image_url"] {
            Value::String(u) => Some(u.as_str()),
            v => v["url"].as_str(),
        };
        if let Some(url) = image
            && !url
                .get(..5)
                .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
        {
            let shown: String = url.chars().take(100).collect();
            return Err(bad(format!(
                "an image in a model request must be inline (a data: URL), not {shown:?}: the model's provider would fetch it from outside the workspace's egress allow-list"
            )));
        }
        let file = &part["file"];
        for field in ["file_id", "file_url"] {
            if !part[field].is_null() || !file[field].is_null() {
                return Err(bad(format!(
                    "a file in a model request must be inline (file_data), not a {field}: the provider would read it from outside the workspace"
                )));
            }
        }
    }
    Ok(())
}

fn bad(message: String) -> Error {
    Error::BadRequest(message)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{Policy, relayable};

    fn relay(body: Value, provider_tools: &[String]) -> crate::Result<Value> {
        let allowed = ["big-model".to_string()];
        let policy = Policy {
            model: "pinned-1",
            allowed_models: &allowed,
            max_output_tokens: 1000,
            provider_tools,
        };
        relayable(body.to_string().as_bytes(), &policy).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn the_model_is_pinned_or_allow_listed() {
        let msgs = json!([{ "role": "user", "content": "hi" }]);
        let out = relay(json!({ "model": "gpt-pricey", "messages": msgs }), &[]).unwrap();
        assert_eq!(out["model"], "pinned-1");
        assert_eq!(
            relay(json!({ "messages": msgs }), &[]).unwrap()["model"],
            "pinned-1"
        );
        let out = relay(json!({ "model": "big-model", "messages": msgs }), &[]).unwrap();
        assert_eq!(out["model"], "big-model");
    }

    #[test]
    fn n_above_one_is_refused_and_token_limits_are_lowered() {
        let err = relay(json!({ "n": 50 }), &[]).unwrap_err().to_string();
        assert!(err.contains("n must be 1") && err.contains("50"), "{err}");
        assert!(relay(json!({ "n": "2" }), &[]).is_err());
        assert!(relay(json!({ "n": 1 }), &[]).is_ok());
        let out = relay(
            json!({ "max_tokens": 1_000_000, "max_completion_tokens": 10 }),
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                out["max_tokens"].clone(),
                out["max_completion_tokens"].clone()
            ),
            (json!(1000), json!(10))
        );
        assert!(relay(json!({ "max_tokens": -1 }), &[]).is_err());
    }

    #[test]
    fn provider_tools_and_unknown_extensions_are_dropped_unless_allowed() {
        let f =
            json!({ "type": "function", "function": { "name": "run_command", "parameters": {} } });
        let body = json!({
            "tools": [f, { "type": "web_search" }, { "type": "web_search_preview" }, { "type": "file_search" }, { "type": "code_interpreter" }, { "type": "computer_use_preview" }],
            "tool_choice": { "type": "web_search" },
            "web_search_options": {},
            "plugins": [{ "id": "web" }],
            "search_parameters": { "mode": "on" },
            "store": true,
        });
        let out = relay(body.clone(), &[]).unwrap();
        assert_eq!(out["tools"], json!([f]));
        for gone in [
            "tool_choice",
            "web_search_options",
            "plugins",
            "search_parameters",
            "store",
        ] {
            assert!(out.get(gone).is_none(), "{gone}: {out}");
        }
        let out = relay(json!({ "tools": [{ "type": "web_search" }], "tool_choice": "required", "parallel_tool_calls": true }), &[]).unwrap();
        assert_eq!(out, json!({ "model": "pinned-1" }));
        let out = relay(body, &["web_search".into()]).unwrap();
        assert_eq!(out["tools"], json!([f, { "type": "web_search" }]));
        assert!(out.get("web_search_options").is_some());
    }

    #[test]
    fn remote_images_files_and_non_json_are_refused() {
        let part = |p: Value| json!({ "messages": [{ "role": "user", "content": [p] }] });
        let remote = part(
            json!({ "type": "image_url", "image_url": { "url": "https://evil.example/?d=secret" } }),
        );
        assert!(
            relay(remote, &[])
                .unwrap_err()
                .to_string()
                .contains("data: URL")
        );
        let inline = part(
            json!({ "type": "image_url", "image_url": { "url": "data:image/png;base64,AAAA" } }),
        );
        assert!(relay(inline, &[]).is_ok());
        let stored = part(json!({ "type": "file", "file": { "file_id": "file-abc" } }));
        assert!(relay(stored, &[]).is_err());
        let policy = Policy {
            model: "m",
            allowed_models: &[],
            max_output_tokens: 1,
            provider_tools: &[],
        };
        for body in [&b"{not json"[..], b"[1]", b""] {
            let err = relayable(body, &policy).unwrap_err();
            assert!(matches!(err, crate::Error::BadRequest(_)), "{err}");
        }
    }
}
