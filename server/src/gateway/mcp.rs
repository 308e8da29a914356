//! The remote MCP servers through the gateway: the workspace asks for the tools its session
//! may use and calls them here; the gateway applies the policy (asking the session's drivers
//! where it says `ask`), adds the server's credential from the secret store — it never enters
//! the workspace — calls the server (rmcp's streamable HTTP client), audits the call and
//! answers the result as text. Also the approvals a workspace asks for its own (stdio)
//! servers' tools.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use tandem_protocol::agent::{AskApproval, McpCall, McpOutcome, McpTool};
use tandem_protocol::approval::{ApprovalSubject, Decision, McpServer, ToolAction, ToolHints};

use super::*;
use crate::approvals::policy;

/// How long connecting to a server and listing its tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one tool call may take once allowed.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The gateway's connections to remote MCP servers, one per server and credential.
#[derive(Default)]
pub struct McpClients {
    open: tokio::sync::Mutex<HashMap<String, Open>>,
}

struct Open {
    /// The URL and credential it was opened with: a change opens a new one.
    key: String,
    client: Arc<RunningService<RoleClient, ()>>,
    tools: Vec<rmcp::model::Tool>,
}

impl McpClients {
    /// `server`'s client and tools, opened (and its tools listed) if need be.
    async fn open(
        &self,
        app: &AppState,
        server: &McpServer,
    ) -> Result<(Arc<RunningService<RoleClient, ()>>, Vec<rmcp::model::Tool>)> {
        let token = match &server.secret {
            Some(name) => app.secrets.get(&app.db, name).await?,
            None => None,
        };
        let key = format!(
            "{}\n{}",
            server.url,
            token.as_deref().map(sha_hex).unwrap_or_default()
        );
        let mut open = self.open.lock().await;
        if let Some(o) = open.get(&server.name)
            && o.key == key
            && !o.client.is_transport_closed()
        {
            return Ok((o.client.clone(), o.tools.clone()));
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.clone());
        if let Some(t) = token {
            config = config.auth_header(t);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let unreachable = |e: String| {
            Error::Unavailable(format!(
                "the MCP server {} ({}) could not be reached: {e}",
                server.name, server.url
            ))
        };
        let client = tokio::time::timeout(LIST_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| unreachable("it did not answer in time".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let tools = tokio::time::timeout(LIST_TIMEOUT, client.list_all_tools())
            .await
            .map_err(|_| unreachable("it did not list its tools in time".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let client = Arc::new(client);
        open.insert(
            server.name.clone(),
            Open {
                key,
                client: client.clone(),
                tools: tools.clone(),
            },
        );
        Ok((client, tools))
    }

    /// Forgets `server`'s connection (after a failed call: the next opens a fresh one).
    async fn forget(&self, server: &str) {
        self.open.lock().await.remove(server);
    }
}

fn sha_hex(s: &str) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(s.as_bytes()))
}

fn hints_of(tool: &rmcp::model::Tool) -> ToolHints {
    let a = tool.annotations.as_ref();
    ToolHints {
        read_only: a.and_then(|a| a.read_only_hint),
        destructive: a.and_then(|a| a.destructive_hint),
        open_world: a.and_then(|a| a.open_world_hint),
    }
}

/// The session's repo (`owner/name`) and the servers it gets.
async fn servers(g: &Gw, session: SessionId) -> Result<(String, Vec<McpServer>)> {
    let repo = sessions::get(&g.app.db, session).await?.session.repo_name;
    let servers = crate::mcp::for_repo(&g.app.db, &repo).await?;
    Ok((repo, servers))
}

/// `GET /tandem/mcp/tools`: every tool the session may call (a server that cannot be
/// reached offers none, and says so in the server's log).
pub(super) async fn tools(State(g): State<Gw>) -> Result<Json<Vec<McpTool>>> {
    Ok(Json(offered(&g).await?))
}

/// The tools the session may call, the policy's `deny` left out.
pub(super) async fn offered(g: &Gw) -> Result<Vec<McpTool>> {
    let session = g.session().await?;
    let (repo, servers) = servers(g, session).await?;
    let mut all = Vec::new();
    for server in &servers {
        let tools = match g.app.gateways.mcp.open(&g.app, server).await {
            Ok((_, tools)) => tools,
            Err(e) => {
                tracing::warn!(server = %server.name, error = %e, "an MCP server offers no tools");
                continue;
            }
        };
        for t in tools {
            let hints = hints_of(&t);
            let action = policy::decide(crate::mcp::rules_for(server, &repo), &t.name, hints);
            if action == ToolAction::Deny {
                continue;
            }
            all.push(McpTool {
                server: server.name.clone(),
                tool: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_string(),
                input_schema: serde_json::Value::Object((*t.input_schema).clone()),
                hints,
                action,
            });
        }
    }
    Ok(all)
}

/// `POST /tandem/mcp/call`.
pub(super) async fn call(
    State(g): State<Gw>,
    Json(req): Json<McpCall>,
) -> Result<Json<McpOutcome>> {
    Ok(Json(call_one(&g, req).await?))
}

/// One call under the policy, its credential added.
pub(super) async fn call_one(g: &Gw, req: McpCall) -> Result<McpOutcome> {
    let g = g.clone();
    let session = g.session().await?;
    let (repo, servers) = servers(&g, session).await?;
    let refuse = |output: String| {
        Ok(McpOutcome {
            output,
            is_error: true,
        })
    };
    let Some(server) = servers.iter().find(|s| s.name == req.server) else {
        return refuse(format!(
            "there is no MCP server {:?} for this session",
            req.server
        ));
    };
    let (client, tools) = match g.app.gateways.mcp.open(&g.app, server).await {
        Ok(o) => o,
        Err(e) => return refuse(e.to_string()),
    };
    let Some(tool) = tools.iter().find(|t| t.name == req.tool) else {
        return refuse(format!("{} has no tool {:?}", server.name, req.tool));
    };
    let action = policy::decide(
        crate::mcp::rules_for(server, &repo),
        &tool.name,
        hints_of(tool),
    );
    let subject = ApprovalSubject::Tool {
        server: server.name.clone(),
        tool: req.tool.clone(),
    };
    let t0 = std::time::Instant::now();
    let gate = gate(&g, session, action, subject, &req.arguments).await?;
    if let Some(message) = gate.message.filter(|_| !gate.allowed) {
        audit_call(&g, session, &req, "refused", 0, &message).await?;
        return refuse(message);
    }
    let mut params = CallToolRequestParams::new(req.tool.clone());
    params.arguments = req.arguments.as_object().cloned();
    let result = tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await;
    let outcome = match result {
        Err(_) => McpOutcome {
            output: format!(
                "{} did not answer within {} s",
                server.name,
                CALL_TIMEOUT.as_secs()
            ),
            is_error: true,
        },
        Ok(Err(e)) => {
            g.app.gateways.mcp.forget(&server.name).await;
            McpOutcome {
                output: format!("the call to {} failed: {e}", server.name),
                is_error: true,
            }
        }
        Ok(Ok(r)) => McpOutcome {
            output: text_of(&r),
            is_error: r.is_error.unwrap_or(false),
        },
    };
    let how = if outcome.is_error { "failed" } else { "ok" };
    tracing::info!(server = %server.name, tool = %req.tool, ms = t0.elapsed().as_millis() as u64, outcome = how, "an MCP call");
    audit_call(&g, session, &req, how, outcome.output.len(), "").await?;
    Ok(outcome)
}

/// The policy's answer for one call: at once, or after asking the session's drivers.
async fn gate(
    g: &Gw,
    session: SessionId,
    action: ToolAction,
    subject: ApprovalSubject,
    arguments: &serde_json::Value,
) -> Result<Decision> {
    match action {
        ToolAction::Allow => Ok(Decision {
            allowed: true,
            message: None,
        }),
        ToolAction::Deny => Ok(Decision {
            allowed: false,
            message: Some(format!(
                "denied by the installation's policy: {} is not allowed in this session; do not try it another way",
                subject.describe()
            )),
        }),
        ToolAction::Ask => {
            let timeout = Duration::from_secs(g.app.config.agents.approval_timeout_secs);
            Ok(crate::approvals::ask(&g.app.db, session, subject, arguments, timeout).await?)
        }
    }
}

/// `POST /tandem/approvals`: a tool of a server inside the workspace, by its own hints (it
/// runs in the workspace anyway: this asks people, it is not a boundary).
pub(super) async fn approval(
    State(g): State<Gw>,
    Json(req): Json<AskApproval>,
) -> Result<Json<Decision>> {
    let session = g.session().await?;
    crate::mcp::check_name(&req.server)?;
    if req.tool.is_empty() || req.tool.len() > 128 || req.tool.chars().any(char::is_control) {
        return Err(Error::Invalid(
            "a tool's name is 1 to 128 printable characters".into(),
        ));
    }
    let action = policy::from_hints(req.hints);
    let subject = ApprovalSubject::Tool {
        server: req.server.clone(),
        tool: req.tool.clone(),
    };
    Ok(Json(
        gate(&g, session, action, subject, &req.arguments).await?,
    ))
}

/// A call's result as text: text parts as they are, other parts named.
fn text_of(r: &rmcp::model::CallToolResult) -> String {
    let mut out = String::new();
    for block in &r.content {
        let v = serde_json::to_value(block).unwrap_or_default();
        match v["type"].as_str() {
            Some("text") => out.push_str(v["text"].as_str().unwrap_or_default()),
            Some(other) => out.push_str(&format!(
                "[{other} content{}]",
                v["mimeType"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
            None => {}
        }
        out.push('\n');
    }
    if out.trim().is_empty()
        && let Some(s) = &r.structured_content
    {
        out = s.to_string();
    }
    let max = agent::MAX_TOOL_OUTPUT_BYTES;
    if out.len() > max {
        let mut cut = max;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("\n[cut: the result was larger than the agent may get]");
    }
    out
}

async fn audit_call(
    g: &Gw,
    session: SessionId,
    req: &McpCall,
    outcome: &str,
    result_bytes: usize,
    why: &str,
) -> Result<()> {
    let author = g.author(session).await?;
    db::audit::record(
        &g.app.db,
        crate::now_ms(),
        db::audit::Entry {
            actor_user_id: author.user_id,
            actor_name: &author.name,
            action: "mcp.call",
            target: &format!("session:{session}"),
            detail: serde_json::json!({
                "server": req.server,
                "tool": req.tool,
                "arguments": crate::approvals::redact(&req.arguments),
                "outcome": outcome,
                "result_bytes": result_bytes,
                "why": why,
            }),
        },
    )
    .await?;
    Ok(())
}
