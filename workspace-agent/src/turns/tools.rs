//! The builtin agent's tools: shell, files, patches, search, git diff, and child sessions
//! (through the gateway). Paths are confined to the checkout like the file API's.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tandem_protocol::agent::{FileView, MAX_TOOL_OUTPUT_BYTES};

use super::{Ctx, process};
use crate::files;

/// Default and largest timeout of `run_command`.
const COMMAND_TIMEOUT_SECS: u64 = 600;
const COMMAND_MAX_TIMEOUT_SECS: u64 = 3600;
/// Most lines `list_files` and `search` return.
const MAX_LINES: usize = 2000;

/// What a tool call gave back to the model.
pub struct Outcome {
    pub output: String,
    pub is_error: bool,
    pub exit_code: Option<i32>,
    pub duration_ms: i64,
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": { "type": "object", "properties": properties, "required": required },
        }
    })
}

/// The tools offered to the model, as OpenAI function definitions.
pub fn definitions() -> Value {
    let s = |d: &str| json!({ "type": "string", "description": d });
    json!([
        tool(
            "run_command",
            "Run a shell command (sh -c) in the repository root and get its exit code and output.",
            json!({ "command": s("the command"), "timeout_secs": { "type": "integer", "description": "kill it after this many seconds (default 600)" } }),
            &["command"]
        ),
        tool(
            "read_file",
            "Read a file (or list a directory) relative to the repository root.",
            json!({ "path": s("relative path") }),
            &["path"]
        ),
        tool(
            "write_file",
            "Create or replace a file relative to the repository root.",
            json!({ "path": s("relative path"), "content": s("the whole new content") }),
            &["path", "content"]
        ),
        tool(
            "edit_file",
            "Replace one exact occurrence of old_text by new_text in a file.",
            json!({ "path": s("relative path"), "old_text": s("text that occurs exactly once"), "new_text": s("its replacement") }),
            &["path", "old_text", "new_text"]
        ),
        tool(
            "apply_patch",
            "Apply a unified diff (git apply) in the repository root.",
            json!({ "patch": s("the unified diff") }),
            &["patch"]
        ),
        tool(
            "list_files",
            "List files under a directory (tracked and untracked, ignoring .gitignore'd ones).",
            json!({ "path": s("relative directory, default the root") }),
            &[]
        ),
        tool(
            "search",
            "Search file contents for a regular expression (grep -E), with line numbers.",
            json!({ "pattern": s("the regular expression"), "path": s("relative directory or file, default the root") }),
            &["pattern"]
        ),
        tool(
            "git_diff",
            "Show every change in the checkout against the commit it started from.",
            json!({}),
            &[]
        ),
        tool(
            "spawn_sessions",
            "Start child sessions working on a prompt in parallel (each gets its own workspace).",
            json!({ "prompt": s("what the children should do"), "variants": { "type": "integer", "description": "how many children (default 1)" },
                    "fork": { "type": "boolean", "description": "start from a copy of this workspace as it is now" } }),
            &["prompt"]
        ),
        tool(
            "session_status",
            "A child session's state, first prompt's state and changed files.",
            json!({ "session_id": s("the child's id") }),
            &["session_id"]
        ),
        tool(
            "send_prompt",
            "Queue a prompt in a child session.",
            json!({ "session_id": s("the child's id"), "text": s("the prompt") }),
            &["session_id", "text"]
        ),
        tool(
            "cancel_session",
            "Stop a child session (its diff is kept).",
            json!({ "session_id": s("the child's id") }),
            &["session_id"]
        ),
        tool(
            "open_pull_request",
            "Commit the session's changes and open (or update) its GitHub pull request; its body is written from the session.",
            json!({ "title": s("the title (default: the session's)"), "draft": { "type": "boolean", "description": "open it as a draft" } }),
            &[]
        ),
        tool(
            "browser_navigate",
            "Open a URL in the workspace's Chromium (on the shared desktop people can watch); says where it landed.",
            json!({ "url": s("the URL, e.g. http://127.0.0.1:3000/ or file:///workspace/index.html") }),
            &["url"],
        ),
        tool(
            "browser_click",
            "Click the first element matching a CSS selector in the browser (real mouse events).",
            json!({ "selector": s("a CSS selector") }),
            &["selector"],
        ),
        tool(
            "browser_type",
            "Type text in the browser: into the element matching the selector (clicked first), else where the focus is.",
            json!({ "text": s("the text"), "selector": s("a CSS selector (optional)") }),
            &["text"],
        ),
        tool(
            "browser_screenshot",
            "Take a PNG screenshot of the browser; it is attached to the session (timeline and pull request).",
            json!({ "name": s("what it shows, e.g. login-after.png") }),
            &[],
        ),
        tool(
            "attach_image",
            "Attach an image file (a screenshot: PNG, JPEG, GIF or WebP, at most 5 MiB) to the session; it shows in the timeline and the pull request.",
            json!({ "path": s("relative path of the image"), "name": s("what it shows, e.g. before-login.png") }),
            &["path"]
        ),
    ])
}

fn ok(output: String) -> (String, bool, Option<i32>) {
    (output, false, None)
}

fn fail(output: impl Into<String>) -> (String, bool, Option<i32>) {
    (output.into(), true, None)
}

/// Whether `name` is one of the builtin tools (an MCP tool may not shadow one).
pub fn is_builtin(name: &str) -> bool {
    definitions()
        .as_array()
        .is_some_and(|all| all.iter().any(|t| t["function"]["name"] == name))
}

fn arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args[key]
        .as_str()
        .ok_or_else(|| format!("missing string argument {key:?}"))
}

/// Runs tool `name` with `args` (already parsed JSON).
pub async fn call(ctx: &Ctx, name: &str, args: &Value) -> Outcome {
    let t0 = Instant::now();
    let (output, is_error, exit_code) = match dispatch(ctx, name, args).await {
        Ok(r) => r,
        Err(e) => fail(e),
    };
    Outcome {
        output: super::cap(output, MAX_TOOL_OUTPUT_BYTES),
        is_error,
        exit_code,
        duration_ms: t0.elapsed().as_millis() as i64,
    }
}

async fn dispatch(
    ctx: &Ctx,
    name: &str,
    args: &Value,
) -> Result<(String, bool, Option<i32>), String> {
    let root = &ctx.root;
    Ok(match name {
        "run_command" => {
            let timeout = args["timeout_secs"].as_u64().unwrap_or(COMMAND_TIMEOUT_SECS).clamp(1, COMMAND_MAX_TIMEOUT_SECS);
            shell(ctx, arg(args, "command")?, &[], Duration::from_secs(timeout)).await?
        }
        "read_file" => match files::read(root, arg(args, "path")?) {
            Ok(FileView::File { content, binary: false, .. }) => ok(content),
            Ok(FileView::File { size, .. }) => fail(format!("a binary file of {size} bytes")),
            Ok(FileView::Dir { entries, .. }) => ok(entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>().join("\n")),
            Err(e) => fail(e.message()),
        },
        "write_file" => {
            let path = arg(args, "path")?;
            let content = arg(args, "content")?;
            match files::write(root, path, content.as_bytes()) {
                Ok(()) => ok(format!("wrote {} bytes to {path}", content.len())),
                Err(e) => fail(e.message()),
            }
        }
        "edit_file" => {
            let path = arg(args, "path")?;
            let (old, new) = (arg(args, "old_text")?, arg(args, "new_text")?);
            let content = match files::read(root, path) {
                Ok(FileView::File { content, binary: false, .. }) => content,
                Ok(_) => return Ok(fail(format!("{path} is not a text file"))),
                Err(e) => return Ok(fail(e.message())),
            };
            match content.matches(old).count() {
                1 => match files::write(root, path, content.replacen(old, new, 1).as_bytes()) {
                    Ok(()) => ok(format!("edited {path}")),
                    Err(e) => fail(e.message()),
                },
                0 => fail(format!("old_text does not occur in {path}")),
                n => fail(format!("old_text occurs {n} times in {path}; include more context")),
            }
        }
        "apply_patch" => {
            let env = [("TANDEM_PATCH".to_string(), arg(args, "patch")?.to_string())];
            shell(ctx, "printf '%s\\n' \"$TANDEM_PATCH\" | git apply --whitespace=nowarn --recount -", &env, Duration::from_secs(60)).await?
        }
        "list_files" => {
            let dir = confined_or_root(ctx, args)?;
            let env = [("TANDEM_DIR".to_string(), dir)];
            lines(shell(ctx, "git ls-files --cached --others --exclude-standard -- \"$TANDEM_DIR\" 2>/dev/null || find \"$TANDEM_DIR\" -type f -not -path '*/.git/*'", &env, Duration::from_secs(60)).await?)?
        }
        "search" => {
            let dir = confined_or_root(ctx, args)?;
            let env = [("TANDEM_DIR".to_string(), dir), ("TANDEM_PATTERN".to_string(), arg(args, "pattern")?.to_string())];
            let (out, _, code) = shell(ctx, "grep -rnIE --exclude-dir=.git -e \"$TANDEM_PATTERN\" -- \"$TANDEM_DIR\"", &env, Duration::from_secs(60)).await?;
            // grep: 1 = no match, which is an answer, not an error.
            match code {
                Some(0) => lines((out, false, code))?,
                Some(1) => ok("no matches".into()),
                _ => fail(out),
            }
        }
        "git_diff" => {
            shell(ctx, "git diff HEAD --stat && git diff HEAD && git ls-files --others --exclude-standard | sed 's/^/new file: /'", &[], Duration::from_secs(60)).await?
        }
        "spawn_sessions" => {
            let body = json!({
                "prompt": arg(args, "prompt")?,
                "variants": args["variants"].as_i64(),
                "fork": args["fork"].as_bool().unwrap_or(false),
            });
            gateway(hyper::Method::POST, "/tandem/children".into(), Some(body)).await?
        }
        "session_status" => gateway(hyper::Method::GET, format!("/tandem/children/{}", id_arg(args)?), None).await?,
        "send_prompt" => {
            let body = json!({ "text": arg(args, "text")? });
            gateway(hyper::Method::POST, format!("/tandem/children/{}/prompts", id_arg(args)?), Some(body)).await?
        }
        "cancel_session" => gateway(hyper::Method::POST, format!("/tandem/children/{}/cancel", id_arg(args)?), None).await?,
        "open_pull_request" => {
            let body = json!({ "title": args["title"].as_str(), "draft": args["draft"].as_bool().unwrap_or(false) });
            gateway(hyper::Method::POST, tandem_protocol::agent::PULL_REQUEST_PATH.into(), Some(body)).await?
        }
        "browser_navigate" => match crate::desktop::navigate(arg(args, "url")?).await {
            Ok(at) => ok(at),
            Err(e) => fail(format!("{e:#}")),
        },
        "browser_click" => match crate::desktop::click(arg(args, "selector")?).await {
            Ok(r) => ok(r),
            Err(e) => fail(format!("{e:#}")),
        },
        "browser_type" => match crate::desktop::type_text(args["selector"].as_str(), arg(args, "text")?).await {
            Ok(r) => ok(r),
            Err(e) => fail(format!("{e:#}")),
        },
        "browser_screenshot" => match crate::desktop::screenshot().await {
            Ok(png) => {
                let name = args["name"].as_str().filter(|n| !n.trim().is_empty()).unwrap_or("screenshot.png");
                attach(name, "image/png", &png).await?
            }
            Err(e) => fail(format!("{e:#}")),
        },
        "attach_image" => {
            let path = files::confined(root, arg(args, "path")?).map_err(|e| e.message().to_string())?;
            let bytes = tokio::fs::read(&path).await.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let Some(content_type) = image_type(&bytes) else { return Ok(fail("not a PNG, JPEG, GIF or WebP image")) };
            if bytes.len() > tandem_protocol::agent::MAX_ATTACHMENT_BYTES {
                return Ok(fail(format!("the image is {} bytes; at most {} may be attached", bytes.len(), tandem_protocol::agent::MAX_ATTACHMENT_BYTES)));
            }
            let name = args["name"].as_str().map(str::to_string).unwrap_or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
            attach(&name, content_type, &bytes).await?
        }
        other => fail(format!("there is no tool {other:?}")),
    })
}

/// Attaches a file to the session through the gateway (an artifact and an `attachment` event).
async fn attach(
    name: &str,
    content_type: &str,
    bytes: &[u8],
) -> Result<(String, bool, Option<i32>), String> {
    let body = json!({ "name": name, "content_type": content_type, "data": base64::engine::general_purpose::STANDARD.encode(bytes) });
    gateway(
        hyper::Method::POST,
        tandem_protocol::agent::ATTACHMENT_PATH.into(),
        Some(body),
    )
    .await
}

/// A screenshot of the desktop's browser attached to the session; failures are only logged
/// (a turn's before/after pictures are a courtesy, never its failure).
pub async fn attach_screenshot(name: &str) {
    match crate::desktop::screenshot().await {
        Ok(png) => {
            if let Err(e) = attach(name, "image/png", &png).await {
                eprintln!("attaching {name}: {e}");
            }
        }
        Err(e) => eprintln!("screenshot {name}: {e:#}"),
    }
}

/// The image type of `bytes`, by their magic number.
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() > 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

fn id_arg(args: &Value) -> Result<String, String> {
    let id = arg(args, "session_id")?;
    if id.len() != 36 || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(format!("{id:?} is not a session id"));
    }
    Ok(id.to_string())
}

fn confined_or_root(ctx: &Ctx, args: &Value) -> Result<String, String> {
    match args["path"].as_str().filter(|p| !p.is_empty() && *p != ".") {
        Some(p) => files::confined(&ctx.root, p)
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| e.message().to_string()),
        None => Ok(ctx.root.to_string_lossy().into_owned()),
    }
}

fn lines(
    (out, is_error, code): (String, bool, Option<i32>),
) -> Result<(String, bool, Option<i32>), String> {
    let total = out.lines().count();
    if total <= MAX_LINES {
        return Ok((out, is_error, code));
    }
    let kept: Vec<&str> = out.lines().take(MAX_LINES).collect();
    Ok((
        format!("{}\n[{} more lines]", kept.join("\n"), total - MAX_LINES),
        is_error,
        code,
    ))
}

async fn shell(
    ctx: &Ctx,
    script: &str,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<(String, bool, Option<i32>), String> {
    let f = process::run(
        &ctx.root,
        script,
        env,
        Some(timeout),
        MAX_TOOL_OUTPUT_BYTES,
        &ctx.cancel,
        |_| {},
    )
    .await?;
    let mut output = f.stdout;
    if !f.stderr.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&f.stderr);
    }
    if f.timed_out {
        output.push_str(&format!("\n[killed after {} s]", timeout.as_secs()));
    }
    if f.cancelled {
        output.push_str("\n[stopped]");
    }
    let is_error = f.code != Some(0);
    Ok((output, is_error, f.code))
}

async fn gateway(
    method: hyper::Method,
    path: String,
    body: Option<Value>,
) -> Result<(String, bool, Option<i32>), String> {
    let (status, v) = super::model::tandem(method, &path, body.as_ref()).await?;
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    Ok((text, !(200..300).contains(&status), None))
}
