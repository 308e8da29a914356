//! MCP tools for the builtin agent, each reaching the model as `<server>__<tool>`:
//! - the remote servers' tools the gateway offers this session (the gateway applies the
//!   policy, asks people where it says `ask` and adds the credentials; nothing of them is here);
//! - the repo's own servers (`tandem.toml` `[[mcp]]`), started here over stdio for the turn;
//!   before each call the gateway is asked ([`APPROVAL_PATH`]), so people see the same card.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tandem_protocol::agent::{
    APPROVAL_PATH, LocalMcp, MAX_TOOL_OUTPUT_BYTES, MCP_CALL_PATH, MCP_TOOLS_PATH, McpOutcome,
    McpTool,
};
use tandem_protocol::approval::{Decision, ToolHints};

use super::{model, tools::Outcome};

/// The most MCP tools offered to the model in one turn.
const MAX_TOOLS: usize = 128;
/// The most servers a repo may run in a workspace.
const MAX_LOCAL_SERVERS: usize = 10;
/// How long a local server may take to start and list its tools.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one call of a local server's tool may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

enum Where {
    Gateway,
    /// Index into [`McpTools::local`].
    Local(usize, ToolHints),
}

/// This turn's MCP tools, by the name the model calls them.
#[derive(Default)]
pub struct McpTools {
    by_name: HashMap<String, (String, String, Where)>,
    /// The gateway's servers: a call of `<server>__<tool>` the model was not offered still goes
    /// to the gateway, which says why not.
    remote: HashSet<String>,
    local: Vec<RunningService<RoleClient, ()>>,
    definitions: Vec<Value>,
    /// What did not start, told to the model once.
    pub problems: Vec<String>,
}

/// A function name the model accepts (`[A-Za-z0-9_-]{1,64}`).
fn function_name(server: &str, tool: &str) -> String {
    let name: String = format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.chars().take(64).collect()
}

/// The repo's `[[mcp]]` entries (none if the file or the table is missing).
fn local_servers(root: &Path) -> Result<Vec<LocalMcp>, String> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        mcp: Vec<LocalMcp>,
    }
    let Ok(text) = std::fs::read_to_string(root.join("tandem.toml")) else {
        return Ok(Vec::new());
    };
    let file: toml::Table = toml::from_str(&text).map_err(|e| format!("tandem.toml: {e}"))?;
    let Some(mcp) = file.get("mcp") else {
        return Ok(Vec::new());
    };
    let parsed: File = toml::Value::Table([("mcp".to_string(), mcp.clone())].into_iter().collect())
        .try_into()
        .map_err(|e| format!("tandem.toml [[mcp]]: {e}"))?;
    Ok(parsed.mcp)
}

impl McpTools {
    /// The gateway's tools and the repo's own servers' (what fails is left out and said in
    /// [`McpTools::problems`]; the turn goes on with the rest).
    pub async fn load(root: &Path) -> Self {
        let mut me = Self::default();
        if Path::new(tandem_protocol::agent::GATEWAY_SOCKET).exists() {
            match model::tandem(hyper::Method::GET, MCP_TOOLS_PATH, None).await {
                Ok((200, v)) => {
                    for t in serde_json::from_value::<Vec<McpTool>>(v).unwrap_or_default() {
                        me.remote.insert(t.server.clone());
                        me.offer(
                            &t.server,
                            &t.tool,
                            &t.description,
                            t.input_schema,
                            Where::Gateway,
                        );
                    }
                }
                Ok((status, v)) => me
                    .problems
                    .push(format!("the gateway listed no MCP tools ({status}): {v}")),
                Err(e) => me
                    .problems
                    .push(format!("the gateway listed no MCP tools: {e}")),
            }
        }
        match local_servers(root) {
            Ok(servers) => {
                for s in servers.into_iter().take(MAX_LOCAL_SERVERS) {
                    if let Err(e) = me.start(root, &s).await {
                        me.problems
                            .push(format!("the MCP server {} did not start: {e}", s.name));
                    }
                }
            }
            Err(e) => me.problems.push(e),
        }
        me
    }

    async fn start(&mut self, root: &Path, s: &LocalMcp) -> Result<(), String> {
        if self.remote.contains(&s.name) {
            return Err("the installation has a server of that name".into());
        }
        let (program, args) = s.command.split_first().ok_or("its command is empty")?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(root)
            .envs(&s.env)
            .kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{program}: {e}"))?;
        let client = tokio::time::timeout(START_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| "it did not answer within 30 s".to_string())?
            .map_err(|e| e.to_string())?;
        let tools = tokio::time::timeout(START_TIMEOUT, client.list_all_tools())
            .await
            .map_err(|_| "it did not list its tools within 30 s".to_string())?
            .map_err(|e| e.to_string())?;
        let index = self.local.len();
        self.local.push(client);
        for t in tools {
            let a = t.annotations.as_ref();
            let hints = ToolHints {
                read_only: a.and_then(|a| a.read_only_hint),
                destructive: a.and_then(|a| a.destructive_hint),
                open_world: a.and_then(|a| a.open_world_hint),
            };
            let schema = Value::Object((*t.input_schema).clone());
            let description = t.description.as_deref().unwrap_or_default().to_string();
            self.offer(
                &s.name,
                &t.name,
                &description,
                schema,
                Where::Local(index, hints),
            );
        }
        Ok(())
    }

    fn offer(&mut self, server: &str, tool: &str, description: &str, schema: Value, at: Where) {
        let name = function_name(server, tool);
        if self.definitions.len() >= MAX_TOOLS
            || self.by_name.contains_key(&name)
            || super::tools::is_builtin(&name)
        {
            return;
        }
        let schema = if schema.is_object() {
            schema
        } else {
            json!({ "type": "object", "properties": {} })
        };
        self.definitions.push(json!({
            "type": "function",
            "function": {
                "name": name,
                "description": format!("[{server} MCP server] {description}"),
                "parameters": schema,
            }
        }));
        self.by_name
            .insert(name, (server.to_string(), tool.to_string(), at));
    }

    pub fn definitions(&self) -> &[Value] {
        &self.definitions
    }

    /// Whether `name` names an MCP server's tool.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
            || name
                .split_once("__")
                .is_some_and(|(server, _)| self.remote.contains(server))
    }

    /// Calls the tool behind `name` (through the gateway, or here after asking it).
    pub async fn call(&self, name: &str, args: &Value) -> Outcome {
        let t0 = Instant::now();
        let (output, is_error) = match self.by_name.get(name) {
            Some((server, tool, Where::Gateway)) => remote(server, tool, args).await,
            Some((server, tool, Where::Local(i, hints))) => {
                local(&self.local[*i], server, tool, args, *hints).await
            }
            None => match name.split_once("__") {
                Some((server, tool)) => remote(server, tool, args).await,
                None => (format!("there is no tool {name:?}"), true),
            },
        };
        Outcome {
            output: super::cap(output, MAX_TOOL_OUTPUT_BYTES),
            is_error,
            exit_code: None,
            duration_ms: t0.elapsed().as_millis() as i64,
        }
    }
}

async fn remote(server: &str, tool: &str, args: &Value) -> (String, bool) {
    let body = json!({ "server": server, "tool": tool, "arguments": args });
    match model::tandem(hyper::Method::POST, MCP_CALL_PATH, Some(&body)).await {
        Ok((200, v)) => match serde_json::from_value::<McpOutcome>(v) {
            Ok(o) => (o.output, o.is_error),
            Err(e) => (format!("the gateway's answer did not parse: {e}"), true),
        },
        Ok((status, v)) => (
            format!("the gateway refused the call ({status}): {v}"),
            true,
        ),
        Err(e) => (format!("the gateway could not be reached: {e}"), true),
    }
}

async fn local(
    client: &RunningService<RoleClient, ()>,
    server: &str,
    tool: &str,
    args: &Value,
    hints: ToolHints,
) -> (String, bool) {
    let ask = json!({ "server": server, "tool": tool, "arguments": args, "hints": hints });
    match model::tandem(hyper::Method::POST, APPROVAL_PATH, Some(&ask)).await {
        Ok((200, v)) => match serde_json::from_value::<Decision>(v) {
            Ok(d) if d.allowed => {}
            Ok(d) => return (d.message.unwrap_or_else(|| "denied".into()), true),
            Err(e) => return (format!("the gateway's answer did not parse: {e}"), true),
        },
        Ok((status, v)) => return (format!("the gateway refused to ask ({status}): {v}"), true),
        Err(e) => {
            return (
                format!("the gateway could not be reached to ask: {e}"),
                true,
            );
        }
    }
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = args.as_object().cloned();
    match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await {
        Err(_) => (
            format!(
                "{server} did not answer within {} s",
                CALL_TIMEOUT.as_secs()
            ),
            true,
        ),
        Ok(Err(e)) => (format!("the call to {server} failed: {e}"), true),
        Ok(Ok(r)) => (text_of(&r), r.is_error.unwrap_or(false)),
    }
}

/// A call's result as text: text parts as they are, other parts named.
pub fn text_of(r: &rmcp::model::CallToolResult) -> String {
    let mut out = String::new();
    for block in &r.content {
        let v = serde_json::to_value(block).unwrap_or_default();
        match v["type"].as_str() {
            Some("text") => out.push_str(v["text"].as_str().unwrap_or_default()),
            Some(other) => out.push_str(&format!("[{other} content]")),
            None => {}
        }
        out.push('\n');
    }
    if out.trim().is_empty()
        && let Some(s) = &r.structured_content
    {
        out = s.to_string();
    }
    out
}
