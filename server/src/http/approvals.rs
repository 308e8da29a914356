//! `/api/sessions/{id}/approvals`: the calls an agent asked a person about, and answering one
//! (drivers and the owner); `/api/mcp/servers`: the remote MCP servers (admins).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::approval::{ActionPolicy, AnswerApproval, Approval, McpServer, PutMcpServer};
use tandem_protocol::live::Role;
use tandem_protocol::*;
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::openapi::{BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(answer_approval))
        .routes(routes!(list_mcp_servers))
        .routes(routes!(put_mcp_server, delete_mcp_server))
        .routes(routes!(get_actions, put_actions))
}

/// Most approvals a session lists.
const MAX_LISTED: i64 = 500;

/// The session's approvals, oldest first (everyone who sees the session).
#[utoipa::path(
    get,
    path = "/sessions/{id}/approvals",
    tag = "sessions",
    operation_id = "list_approvals",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The approvals", body = Vec<Approval>),
        BadRequest,
        Unauthorized,
        NotFound,
    ),
)]
async fn list_approvals(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<Approval>>> {
    crate::permissions::require(&state, id, &user.0, Role::Viewer).await?;
    Ok(Json(
        db::approvals::of_session(&state.db, id, MAX_LISTED).await?,
    ))
}

/// Approves (once, or for the rest of the session) or denies a waiting call; a viewer may not.
#[utoipa::path(
    post,
    path = "/sessions/{id}/approvals/{approval}",
    tag = "sessions",
    operation_id = "answer_approval",
    params(("id" = SessionId, Path), ("approval" = ApprovalId, Path)),
    request_body = AnswerApproval,
    responses(
        (status = 200, description = "The approval as answered", body = Approval),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn answer_approval(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((id, approval)): Path<(SessionId, ApprovalId)>,
    Json(req): Json<AnswerApproval>,
) -> Result<Json<Approval>> {
    let access = crate::permissions::require(&state, id, &user.0, Role::Viewer).await?;
    Ok(Json(
        crate::commands::answer_approval(&state, id, approval, &user.author(), access.role, &req)
            .await?,
    ))
}

fn require_admin(user: &CurrentUser) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden(
            "only admins may configure MCP servers".into(),
        ))
    }
}

/// The remote MCP servers and their policies (admins).
#[utoipa::path(
    get,
    path = "/mcp/servers",
    tag = "admin",
    operation_id = "list_mcp_servers",
    responses(
        (status = 200, description = "The servers", body = Vec<McpServer>),
        Unauthorized,
        Forbidden,
    ),
)]
async fn list_mcp_servers(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<McpServer>>> {
    require_admin(&user)?;
    Ok(Json(crate::mcp::list(&state.db, &state.secrets).await?))
}

/// Creates or replaces a remote MCP server (admins); `secret_value` goes to the secret store.
#[utoipa::path(
    put,
    path = "/mcp/servers/{name}",
    tag = "admin",
    operation_id = "put_mcp_server",
    params(("name" = String, Path)),
    request_body = PutMcpServer,
    responses(
        (status = 200, description = "The server", body = McpServer),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
async fn put_mcp_server(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(name): Path<String>,
    Json(req): Json<PutMcpServer>,
) -> Result<Json<McpServer>> {
    require_admin(&user)?;
    Ok(Json(
        crate::mcp::put(&state.db, &state.secrets, &name, req, &user.0.name).await?,
    ))
}

/// Removes a remote MCP server (admins).
#[utoipa::path(
    delete,
    path = "/mcp/servers/{name}",
    tag = "admin",
    operation_id = "delete_mcp_server",
    params(("name" = String, Path)),
    responses(
        (status = 204, description = "Removed"),
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn delete_mcp_server(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    require_admin(&user)?;
    crate::mcp::delete(&state.db, &name, &user.0.name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The rules for Tandem's own actions the agent takes (`open_pull_request`, `push`,
/// `spawn_sessions`; allowed unless a rule says otherwise) (admins).
#[utoipa::path(
    get,
    path = "/mcp/actions",
    tag = "admin",
    operation_id = "get_action_policy",
    responses(
        (status = 200, description = "The rules", body = ActionPolicy),
        Unauthorized,
        Forbidden,
    ),
)]
async fn get_actions(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<ActionPolicy>> {
    require_admin(&user)?;
    Ok(Json(crate::mcp::actions(&state.db).await?))
}

/// Replaces the rules for Tandem's own actions (admins).
#[utoipa::path(
    put,
    path = "/mcp/actions",
    tag = "admin",
    operation_id = "put_action_policy",
    request_body = ActionPolicy,
    responses(
        (status = 200, description = "The rules as saved", body = ActionPolicy),
        JsonBody,
        Unauthorized,
        Forbidden,
        Invalid,
    ),
)]
async fn put_actions(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<ActionPolicy>,
) -> Result<Json<ActionPolicy>> {
    require_admin(&user)?;
    crate::mcp::put_actions(&state.db, &req, &user.0.name).await?;
    Ok(Json(req))
}
