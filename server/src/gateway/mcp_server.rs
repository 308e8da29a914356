//! The gateway speaking MCP itself (streamable HTTP at `/mcp`), for agents that take their tools
//! from an MCP configuration (OpenCode): the same tools, policy, approvals, credentials and
//! audit as the builtin agent's calls (`mcp.rs`), each tool named `<server>__<tool>`.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tandem_protocol::agent::McpCall;

use super::Gw;

/// One workspace's MCP endpoint.
#[derive(Clone)]
pub(super) struct Proxy(Gw);

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let offered = super::mcp::offered(&self.0)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let tools = offered
            .into_iter()
            .map(|t| {
                let schema = match t.input_schema {
                    serde_json::Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                Tool::new(
                    format!("{}__{}", t.server, t.tool),
                    format!("[{} MCP server] {}", t.server, t.description),
                    Arc::new(schema),
                )
                .with_annotations(ToolAnnotations::from_raw(
                    None,
                    t.hints.read_only,
                    t.hints.destructive,
                    None,
                    t.hints.open_world,
                ))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((server, tool)) = req.name.split_once("__") else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool {:?}: tools here are named <server>__<tool>",
                    req.name
                ),
                None,
            ));
        };
        let call = McpCall {
            server: server.to_string(),
            tool: tool.to_string(),
            arguments: req
                .arguments
                .map(serde_json::Value::Object)
                .unwrap_or_default(),
        };
        let out = super::mcp::call_one(&self.0, call)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let content = vec![ContentBlock::text(out.output)];
        Ok(if out.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }
}

/// The `/mcp` service of the workspace behind `gw`.
pub(super) fn service(gw: Gw) -> StreamableHttpService<Proxy, LocalSessionManager> {
    // Reached over the workspace's own gateway only: any Host it names is its own.
    let config = StreamableHttpServerConfig::default().with_allowed_hosts([
        "gateway",
        "127.0.0.1",
        "localhost",
    ]);
    StreamableHttpService::new(
        move || Ok(Proxy(gw.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
