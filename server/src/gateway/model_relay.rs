//! What a workspace's model request may ask for. The gateway relays it with the server's key, so
//! it spends the server's account and acts with the provider's reach: the relay parses the body
//! (bounded), pins the model, bounds the answers and their length, speaks for the session tree
//! where the provider keeps an identity, and keeps out what would make the provider act outside
//! the workspace (its own web search, file search, code interpreter, computer use; anything it
//! would fetch or read from elsewhere: a remote image, audio or video, a stored file).
//!
//! Per field, refused (400, the agent sees why) where a rewrite would change the answer's shape
//! or the conversation behind the agent's back (`n`, content parts other than inline text,
//! images, audio and files, malformed values), rewritten where the agent gets what it needs
//! anyway (the model, a token limit, the identity, fewer tools, unknown extensions dropped).
//! Content parts are an allow-list: a part type or key the relay does not know is refused, as
//! a provider may fetch what it names.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tandem_protocol::SessionId;
use tandem_protocol::limits::{MAX_MODEL_CONTENT_PARTS, MAX_MODEL_MESSAGES, MAX_MODEL_TOOLS};

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

/// Fields by which the provider tells one end user (or cache owner) from another: the relay
/// sets them to the session tree's [`identity`], never the workspace's choice.
const IDENTITY_FIELDS: &[&str] = &["user", "safety_identifier", "prompt_cache_key"];

/// What the admin allows (`[agents]` and the Settings page), and who is asking.
pub struct Policy<'a> {
    /// The configured model: a request naming one not in `allowed_models` gets this one.
    pub model: &'a str,
    pub allowed_models: &'a [String],
    /// Most output tokens one request may ask for; a request that names no limit gets it.
    pub max_output_tokens: u32,
    /// Provider-side tool types allowed (`web_search` also lets `web_search_options` through).
    pub provider_tools: &'a [String],
    /// The session tree's [`identity`], for the fields that name an end user.
    pub identity: &'a str,
}

impl Policy<'_> {
    fn provider_tool(&self, kind: &str) -> bool {
        self.provider_tools.iter().any(|t| t == kind)
    }
}

/// What the provider is told stands behind a request from session tree `root`: the same for
/// every session of a tree, unlinkable to its id without it, and never the workspace's choice.
pub fn identity(root: SessionId) -> String {
    let digest = Sha256::digest(format!("tandem model identity {root}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("tandem-{hex}")
}

/// A request as it is relayed, and the model it names (what its tokens are priced at).
#[derive(Debug)]
pub struct Relayed {
    pub body: Vec<u8>,
    pub model: String,
}

/// `body` as it may be relayed, or why it may not be (a 4xx that says what to change). A
/// streamed answer is asked to end with its usage (`stream_options.include_usage`): the
/// gateway counts the tokens the provider reports, never what the workspace says.
pub fn relayable(body: &[u8], policy: &Policy) -> Result<Relayed> {
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
    req.retain(|k, v| {
        !v.is_null() && (RELAYED.contains(&k.as_str()) || (web_search && k == "web_search_options"))
    });
    let named = req.get("model").and_then(Value::as_str);
    if named.is_none_or(|m| m != policy.model && !policy.allowed_models.iter().any(|a| a == m)) {
        req.insert("model".into(), Value::String(policy.model.into()));
    }
    match req.get("n") {
        None => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(bad(format!(
                "n must be 1 (one answer per model request); this request asked for {n}"
            )));
        }
    }
    token_limits(&mut req, policy.max_output_tokens)?;
    for field in IDENTITY_FIELDS {
        if let Some(v) = req.get_mut(*field) {
            *v = Value::String(policy.identity.into());
        }
    }
    tools(&mut req, policy)?;
    if let Some(messages) = req.get("messages") {
        let Some(messages) = messages.as_array() else {
            return Err(bad("messages must be an array".into()));
        };
        if messages.len() > MAX_MODEL_MESSAGES {
            return Err(Error::TooLarge(format!(
                "a model request holds at most {MAX_MODEL_MESSAGES} messages; this one has {}: drop or summarize older ones",
                messages.len()
            )));
        }
        messages.iter().try_for_each(message)?;
    }
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        let options = req
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Map::new()));
        if !options.is_object() {
            *options = Value::Object(Map::new());
        }
        options["include_usage"] = Value::Bool(true);
    }
    let model = req
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(policy.model)
        .to_string();
    Ok(Relayed {
        body: serde_json::to_vec(&req).expect("a JSON value serializes"),
        model,
    })
}

/// Lowers a token limit above `max` to it, and gives a request that names none
/// `max_completion_tokens = max`: every answer's length is bounded.
fn token_limits(req: &mut Map<String, Value>, max: u32) -> Result<()> {
    let mut named = false;
    for field in TOKEN_LIMITS {
        let Some(v) = req.get(*field) else {
            continue;
        };
        named = true;
        match v.as_u64() {
            Some(n) if n > u64::from(max) => {
                req.insert((*field).into(), max.into());
            }
            Some(_) => {}
            None => return Err(bad(format!("{field} must be a whole number, not {v}"))),
        }
    }
    if !named {
        req.insert("max_completion_tokens".into(), max.into());
    }
    Ok(())
}

/// Keeps the caller's tools and the provider tools the admin allows; without tools left, the
/// fields about them go too (a provider refuses `tool_choice` without tools).
fn tools(req: &mut Map<String, Value>, policy: &Policy) -> Result<()> {
    for field in ["tools", "functions"] {
        if let Some(n) = req.get(field).and_then(Value::as_array).map(Vec::len)
            && n > MAX_MODEL_TOOLS
        {
            return Err(Error::TooLarge(format!(
                "a model request offers at most {MAX_MODEL_TOOLS} {field}; this one offers {n}"
            )));
        }
    }
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

/// A message's content: a string, or content parts each of which [`part`] allows.
fn message(message: &Value) -> Result<()> {
    if !message.is_object() {
        return Err(bad(format!(
            "each message must be a JSON object, not {}",
            shape(message)
        )));
    }
    match &message["content"] {
        Value::Null | Value::String(_) => Ok(()),
        Value::Array(parts) if parts.len() > MAX_MODEL_CONTENT_PARTS => {
            Err(Error::TooLarge(format!(
                "a message holds at most {MAX_MODEL_CONTENT_PARTS} content parts; this one has {}",
                parts.len()
            )))
        }
        Value::Array(parts) => parts.iter().try_for_each(part),
        other => Err(bad(format!(
            "a message's content must be a string or an array of content parts, not {}",
            shape(other)
        ))),
    }
}

/// The content parts relayed, each with the keys it may hold: text, a refusal, and images,
/// audio and files carried inline. Anything else (a part by URL, a stored file, a video, a
/// provider's own kind of part, a key the relay does not know) is refused: the provider could
/// fetch or read it from outside the workspace's egress allow-list.
fn part(part: &Value) -> Result<()> {
    let Value::Object(p) = part else {
        return Err(bad(format!(
            "a content part must be a JSON object, not {}",
            shape(part)
        )));
    };
    let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
    let (keys, inner): (&[&str], Option<(&str, &[&str])>) = match kind {
        "text" => (&["type", "text", "cache_control"], None),
        "refusal" => (&["type", "refusal"], None),
        "image_url" => (
            &["type", "image_url"],
            Some(("image_url", &["url", "detail"])),
        ),
        "input_audio" => (
            &["type", "input_audio"],
            Some(("input_audio", &["data", "format"])),
        ),
        "file" => (
            &["type", "file"],
            Some(("file", &["file_data", "filename"])),
        ),
        _ => {
            let shown: String = kind.chars().take(40).collect();
            return Err(bad(format!(
                "a content part of type {shown:?} is not relayed: a model request may hold text, refusal, image_url (a data: URL), input_audio and file (inline file_data) parts only, so the provider never fetches anything from outside the workspace"
            )));
        }
    };
    only(kind, p, keys)?;
    if let Some(cache) = p.get("cache_control") {
        let Some(c) = cache.as_object() else {
            return Err(bad("cache_control must be an object".into()));
        };
        only("cache_control", c, &["type", "ttl"])?;
    }
    let Some((field, inner_keys)) = inner else {
        return Ok(());
    };
    match (field, p.get(field)) {
        // The older shape: the URL itself.
        ("image_url", Some(Value::String(url))) => inline_image(url),
        (_, Some(Value::Object(o))) => {
            only(field, o, inner_keys)?;
            let text = |k: &str| o.get(k).and_then(Value::as_str);
            match field {
                "image_url" => inline_image(text("url").unwrap_or_default()),
                "input_audio" if text("data").is_some_and(is_base64) => Ok(()),
                "input_audio" => Err(bad(
                    "input_audio must carry its audio inline, as base64 data".into(),
                )),
                _ => match text("file_data") {
                    Some(d) if is_data_url(d) || is_base64(d) => Ok(()),
                    _ => Err(bad(
                        "a file in a model request must be inline: file_data as base64 or a data: URL (not a URL, file_id or file_url, which the provider would fetch or read from elsewhere)"
                            .into(),
                    )),
                },
            }
        }
        _ => Err(bad(format!("a {kind} part's {field} must be an object"))),
    }
}

/// Refuses a key of `object` (a `what`) not among `keys`.
fn only(what: &str, object: &Map<String, Value>, keys: &[&str]) -> Result<()> {
    match object.keys().find(|k| !keys.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => {
            let shown: String = k.chars().take(40).collect();
            Err(bad(format!(
                "a {what} in a model request may hold only {keys:?}, not {shown:?}: the relay passes on only what it knows the provider will not fetch"
            )))
        }
    }
}

fn inline_image(url: &str) -> Result<()> {
    if is_data_url(url) {
        return Ok(());
    }
    let shown: String = url.chars().take(100).collect();
    Err(bad(format!(
        "an image in a model request must be inline (a data: URL), not {shown:?}: the model's provider would fetch it from outside the workspace's egress allow-list"
    )))
}

fn is_data_url(s: &str) -> bool {
    s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:"))
}

/// Base64 text only (no URL or identifier could pass: it has no `:` or `.`).
fn is_base64(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n' | b'\r'))
}

/// What kind of JSON value `v` is, for an error message.
fn shape(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn bad(message: String) -> Error {
    Error::BadRequest(message)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{Policy, identity, relayable};
    use crate::Error;

    fn relay(body: Value, provider_tools: &[String]) -> crate::Result<Value> {
        let allowed = ["big-model".to_string()];
        let policy = Policy {
            model: "pinned-1",
            allowed_models: &allowed,
            max_output_tokens: 1000,
            provider_tools,
            identity: "tandem-tree",
        };
        relayable(body.to_string().as_bytes(), &policy)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
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
        assert_eq!(
            out,
            json!({ "model": "pinned-1", "max_completion_tokens": 1000 })
        );
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
            identity: "tandem-tree",
        };
        for body in [&b"{not json"[..], b"[1]", b""] {
            let err = relayable(body, &policy).unwrap_err();
            assert!(matches!(err, crate::Error::BadRequest(_)), "{err}");
        }
    }

    #[test]
    fn a_request_without_a_token_limit_gets_the_servers() {
        let msgs = json!([{ "role": "user", "content": "hi" }]);
        let out = relay(json!({ "messages": msgs, "stream": true }), &[]).unwrap();
        assert_eq!(out["max_completion_tokens"], 1000);
        assert!(out.get("max_tokens").is_none(), "{out}");
        let out = relay(json!({ "messages": msgs, "max_tokens": null }), &[]).unwrap();
        assert_eq!(out["max_completion_tokens"], 1000);
        assert!(out.get("max_tokens").is_none(), "{out}");
        // A limit the request names stays the only one (lowered if need be).
        let out = relay(json!({ "messages": msgs, "max_tokens": 50 }), &[]).unwrap();
        assert_eq!(out["max_tokens"], 50);
        assert!(out.get("max_completion_tokens").is_none(), "{out}");
    }

    fn with_part(p: Value) -> Value {
        json!({ "messages": [{ "role": "user", "content": [p] }] })
    }

    #[test]
    fn only_inline_content_parts_of_known_types_are_relayed() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        for ok in [
            json!({ "type": "text", "text": "hi" }),
            json!({ "type": "text", "text": "hi", "cache_control": { "type": "ephemeral" } }),
            json!({ "type": "refusal", "refusal": "no" }),
            json!({ "type": "image_url", "image_url": { "url": png, "detail": "low" } }),
            json!({ "type": "image_url", "image_url": png }),
            json!({ "type": "input_audio", "input_audio": { "data": "UklGRg==", "format": "wav" } }),
            json!({ "type": "file", "file": { "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf" } }),
            json!({ "type": "file", "file": { "file_data": "JVBERi0=" } }),
        ] {
            relay(with_part(ok.clone()), &[]).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let url = "https://exfil.example/?d=secret";
        let refused = [
            (
                json!({ "type": "video_url", "video_url": { "url": url } }),
                "\"video_url\" is not relayed",
            ),
            (
                json!({ "type": "audio_url", "audio_url": { "url": url } }),
                "\"audio_url\" is not relayed",
            ),
            (
                json!({ "type": "image", "source": { "type": "url", "url": url } }),
                "\"image\" is not relayed",
            ),
            (
                json!({ "type": "document", "source": { "type": "base64", "data": "AA==" } }),
                "\"document\" is not relayed",
            ),
            (
                json!({ "type": "input_image", "image_url": url }),
                "\"input_image\" is not relayed",
            ),
            (json!({ "text": "no type" }), "\"\" is not relayed"),
            (
                json!({ "type": "image_url", "image_url": { "url": url } }),
                "data: URL",
            ),
            (
                json!({ "type": "image_url", "image_url": url }),
                "data: URL",
            ),
            (
                json!({ "type": "image_url", "image_url": { "url": png, "source": { "url": url } } }),
                "not \"source\"",
            ),
            (
                json!({ "type": "image_url", "image_url": { "url": png }, "url": url }),
                "not \"url\"",
            ),
            (
                json!({ "type": "text", "text": "hi", "source": { "url": url } }),
                "not \"source\"",
            ),
            (
                json!({ "type": "text", "text": "hi", "cache_control": { "type": "ephemeral", "url": url } }),
                "not \"url\"",
            ),
            (
                json!({ "type": "input_audio", "input_audio": { "data": url, "format": "wav" } }),
                "inline",
            ),
            (
                json!({ "type": "input_audio", "input_audio": { "url": url } }),
                "not \"url\"",
            ),
            (
                json!({ "type": "file", "file": { "file_id": "file-abc" } }),
                "not \"file_id\"",
            ),
            (
                json!({ "type": "file", "file": { "file_url": url } }),
                "not \"file_url\"",
            ),
            (
                json!({ "type": "file", "file": { "file_data": url } }),
                "must be inline",
            ),
            (
                json!({ "type": "file", "file_id": "file-abc" }),
                "not \"file_id\"",
            ),
            (
                json!({ "type": "file", "file": "file-abc" }),
                "must be an object",
            ),
            (json!("a bare string"), "must be a JSON object"),
        ];
        for (part, why) in refused {
            let err = relay(with_part(part.clone()), &[]).unwrap_err();
            assert!(matches!(err, Error::BadRequest(_)), "{part}: {err}");
            assert!(err.to_string().contains(why), "{part}: {err}");
        }
        for content in [
            json!({ "type": "image", "source": { "type": "url", "url": url } }),
            json!({ "url": url }),
            json!(42),
        ] {
            let body = json!({ "messages": [{ "role": "user", "content": content }] });
            let err = relay(body, &[]).unwrap_err().to_string();
            assert!(
                err.contains("must be a string or an array of content parts"),
                "{content}: {err}"
            );
        }
        let err = relay(json!({ "messages": ["hi"] }), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("each message must be a JSON object"), "{err}");
    }

    #[test]
    fn requests_past_the_shape_caps_are_refused_as_too_large() {
        use tandem_protocol::limits::{
            MAX_MODEL_CONTENT_PARTS, MAX_MODEL_MESSAGES, MAX_MODEL_TOOLS,
        };
        let msg = json!({ "role": "user", "content": "x" });
        let at_cap = json!({ "messages": vec![msg.clone(); MAX_MODEL_MESSAGES] });
        assert!(relay(at_cap, &[]).is_ok());
        let over = json!({ "messages": vec![msg; MAX_MODEL_MESSAGES + 1] });
        let err = relay(over, &[]).unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("at most {MAX_MODEL_MESSAGES} messages")),
            "{err}"
        );
        let text = json!({ "type": "text", "text": "x" });
        let parts = json!({ "messages": [{ "role": "user", "content": vec![text; MAX_MODEL_CONTENT_PARTS + 1] }] });
        let err = relay(parts, &[]).unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err}");
        assert!(err.to_string().contains("content parts"), "{err}");
        let f = json!({ "type": "function", "function": { "name": "f" } });
        for field in ["tools", "functions"] {
            let body = json!({ field: vec![f.clone(); MAX_MODEL_TOOLS + 1] });
            let err = relay(body, &[]).unwrap_err();
            assert!(matches!(err, Error::TooLarge(_)), "{field}: {err}");
            assert!(
                err.to_string()
                    .contains(&format!("at most {MAX_MODEL_TOOLS} {field}")),
                "{err}"
            );
        }
    }

    #[test]
    fn the_provider_sees_the_trees_identity_never_the_workspaces() {
        let body = json!({ "user": "victim@example.com", "safety_identifier": "someone-else", "prompt_cache_key": "their-cache" });
        let out = relay(body, &[]).unwrap();
        for field in ["user", "safety_identifier", "prompt_cache_key"] {
            assert_eq!(out[field], "tandem-tree", "{field}: {out}");
        }
        let out = relay(json!({}), &[]).unwrap();
        assert!(out.get("user").is_none(), "none is added: {out}");
        let (a, b) = (
            tandem_protocol::SessionId(uuid::Uuid::new_v4()),
            tandem_protocol::SessionId(uuid::Uuid::new_v4()),
        );
        assert_eq!(identity(a), identity(a));
        assert_ne!(identity(a), identity(b));
        assert!(
            identity(a).starts_with("tandem-") && identity(a).len() <= 64,
            "{}",
            identity(a)
        );
        assert!(
            !identity(a).contains(&a.to_string()),
            "the id itself is not shown"
        );
    }
}
