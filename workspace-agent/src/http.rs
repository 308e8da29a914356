//! The agent's HTTP API on a unix socket; every route checks the workspace's token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use axum::extract::Path;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tandem_protocol::ApiError;
use tandem_protocol::PromptId;
use tandem_protocol::agent;
use tandem_protocol::agent::{
    AgentHealth, FileQuery, GitCommit, MAX_FILE_BYTES, PtyInfo, PtyOpen, TurnStart, TurnSteer,
    WriteFile, routes,
};

use crate::files;

struct Agent {
    root: PathBuf,
    token: String,
    started: Instant,
    ptys: Arc<crate::pty::Ptys>,
    turns: Arc<crate::turns::Turns>,
    /// The gateway's bridges, where the agent listens on the gateway socket itself.
    bridges: Option<crate::bridge::Bridges>,
}

/// An error answer.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(ApiError {
            code: code.into(),
            message: message.into(),
        }),
    )
        .into_response()
}

/// Serves until the process is killed (the workspace's end).
pub async fn serve(socket: PathBuf, root: PathBuf, token: String) -> Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    let state = Arc::new(Agent {
        root,
        token,
        started: Instant::now(),
        ptys: Default::default(),
        turns: Default::default(),
        bridges: match std::env::var(agent::GATEWAY_BRIDGE_ENV) {
            Ok(v) if v == "1" => {
                Some(crate::bridge::Bridges::spawn().context("listening on the gateway socket")?)
            }
            _ => None,
        },
    });
    crate::forward::spawn();
    if std::env::var(agent::EGRESS_PROXY_ENV).is_ok_and(|v| v == "1") {
        crate::bridge::spawn_egress_proxy()
            .await
            .context("listening for the egress proxy")?;
    }
    let app = Router::new()
        .route(routes::HEALTH, get(health))
        .route(routes::FILES, get(read).put(write))
        .route(routes::FILES_TREE, get(tree))
        .route(routes::FILES_WATCH, post(watch))
        .route(routes::GIT_STATUS, get(git_status))
        .route(routes::GIT_COMMIT, post(git_commit))
        .route(routes::PTYS, get(list_ptys).post(open_pty))
        .route(routes::PTY_ATTACH, get(attach_pty))
        .route(routes::DESKTOP, post(desktop).get(desktop_page))
        .route(routes::CODE, post(code))
        .route(routes::TUNNEL, get(tunnel))
        .route(routes::DESKTOP_INPUT, post(desktop_input))
        .route(routes::DESKTOP_OPEN, post(desktop_open))
        .route(routes::TURNS, post(start_turn))
        .route(routes::TURN_STEER, post(steer_turn))
        .route(routes::TURN_STOP, post(stop_turn))
        .route(routes::GATEWAY_BRIDGE, get(gateway_bridge))
        .route(routes::LAYER, get(crate::layer::serve))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_FILE_BYTES * 2))
        .with_state(state);
    // In a pod the server comes through the API server's port-forward, which arrives on the
    // pod's own loopback: the agent listens there too (the token still guards every request).
    if let Ok(addr) = std::env::var(agent::LISTEN_ENV) {
        let tcp = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        anyhow::ensure!(
            tcp.local_addr()?.ip().is_loopback(),
            "{} must be a loopback address, not {addr}",
            agent::LISTEN_ENV
        );
        let app = app.clone();
        tokio::spawn(async move {
            // Unreachable, the agent is of no use: it ends, and its workspace with it.
            if let Err(e) = axum::serve(tcp, app).await {
                eprintln!("tandem-workspace-agent: serving {addr}: {e}");
                std::process::exit(1);
            }
        });
    }
    axum::serve(listener, app).await?;
    Ok(())
}

async fn auth(State(a): State<Arc<Agent>>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == a.token);
    if ok {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong or missing agent token",
        )
    }
}

async fn gateway_bridge(State(a): State<Arc<Agent>>, req: Request) -> Response {
    crate::bridge::accept(a.bridges.clone(), req)
}

async fn health(State(a): State<Arc<Agent>>) -> Json<AgentHealth> {
    Json(AgentHealth {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_secs: a.started.elapsed().as_secs(),
    })
}

async fn read(State(a): State<Arc<Agent>>, Query(q): Query<FileQuery>) -> Response {
    match files::read(&a.root, &q.path) {
        Ok(view) => Json(view).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn tree(State(a): State<Arc<Agent>>) -> Response {
    match crate::watch::tree(&a.root).await {
        Ok(t) => Json(t).into_response(),
        Err((status, msg)) => error(status, "git", msg),
    }
}

async fn watch(State(a): State<Arc<Agent>>, Json(w): Json<agent::WatchFile>) -> Response {
    match crate::watch::watch(&a.root, w).await {
        Ok(now) => Json(now).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn write(
    State(a): State<Arc<Agent>>,
    Query(q): Query<FileQuery>,
    Json(body): Json<WriteFile>,
) -> Response {
    if let Some(want) = &body.if_sha {
        let now = files::confined(&a.root, &q.path)
            .ok()
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| crate::watch::sha256(&b));
        if now.as_ref() != Some(want) {
            return error(
                StatusCode::CONFLICT,
                "changed",
                format!("{:?} changed since it was read", q.path),
            );
        }
    }
    match files::write(&a.root, &q.path, body.content.as_bytes()) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list_ptys(State(a): State<Arc<Agent>>) -> Json<Vec<PtyInfo>> {
    Json(a.ptys.list())
}

async fn open_pty(State(a): State<Arc<Agent>>, Json(req): Json<PtyOpen>) -> Response {
    match a.ptys.open(&a.root, req) {
        Ok(info) => (StatusCode::CREATED, Json(info)).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, "bad_request", e),
    }
}

async fn attach_pty(
    State(a): State<Arc<Agent>>,
    Path(id): Path<u32>,
    ws: WebSocketUpgrade,
) -> Response {
    match a.ptys.get(id) {
        Some(pty) => ws.on_upgrade(move |socket| pty.attach(socket)),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no terminal {id}"),
        ),
    }
}

async fn git_status(State(a): State<Arc<Agent>>) -> Response {
    match crate::git::status(&a.root).await {
        Ok(st) => Json(st).into_response(),
        Err((status, msg)) => error(status, "git", msg),
    }
}

async fn git_commit(State(a): State<Arc<Agent>>, Json(req): Json<GitCommit>) -> Response {
    match crate::git::commit(&a.root, req).await {
        Ok(c) => (StatusCode::CREATED, Json(c)).into_response(),
        Err((status, msg)) => error(status, "git", msg),
    }
}

fn refused(r: crate::turns::Refused) -> Response {
    use crate::turns::Refused;
    match r {
        Refused::Busy(id) => error(
            StatusCode::CONFLICT,
            "busy",
            format!("turn {id} is running"),
        ),
        Refused::NotRunning => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "that turn is not running",
        ),
        Refused::CannotSteer => error(
            StatusCode::CONFLICT,
            "cannot_steer",
            "this agent cannot be steered mid-turn",
        ),
        Refused::QueueFull => error(
            StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            "too many steering prompts are waiting",
        ),
    }
}

async fn start_turn(State(a): State<Arc<Agent>>, Json(req): Json<TurnStart>) -> Response {
    match a.turns.start(a.root.clone(), req) {
        Ok(body) => ([("content-type", "application/x-ndjson")], body).into_response(),
        Err(r) => refused(r),
    }
}

async fn steer_turn(
    State(a): State<Arc<Agent>>,
    Path(id): Path<PromptId>,
    Json(req): Json<TurnSteer>,
) -> Response {
    match a.turns.steer(id, req) {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(r) => refused(r),
    }
}

async fn stop_turn(State(a): State<Arc<Agent>>, Path(id): Path<PromptId>) -> Response {
    match a.turns.stop(id) {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(r) => refused(r),
    }
}

/// Starts the desktop (display and browser) if it is not running.
async fn desktop() -> Response {
    match crate::desktop::ensure().await {
        Ok(()) => {
            let (width, height) = crate::desktop::size();
            Json(tandem_protocol::agent::DesktopInfo {
                display: crate::desktop::DISPLAY.into(),
                width,
                height,
            })
            .into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")).into_response(),
    }
}

/// Mouse and keyboard into the desktop's display.
async fn desktop_input(Json(req): Json<tandem_protocol::agent::DesktopInputs>) -> Response {
    let run = tokio::task::spawn_blocking(move || {
        crate::xinput::inject(crate::desktop::DISPLAY, &req.events)
    })
    .await;
    match run {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The desktop's state: whether it runs, and the browser's page.
async fn desktop_page() -> Response {
    match crate::desktop::page().await {
        Ok(p) => Json(tandem_protocol::agent::DesktopPage {
            running: p.is_some(),
            url: p.as_ref().map(|p| p.0.clone()),
            title: p.map(|p| p.1),
            stream: None,
        })
        .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")).into_response(),
    }
}

/// Shows a URL in the desktop's browser.
async fn desktop_open(Json(req): Json<tandem_protocol::agent::DesktopOpen>) -> Response {
    match crate::desktop::navigate(&req.url).await {
        Ok(at) => Json(serde_json::json!({ "at": at })).into_response(),
        Err(e) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")).into_response(),
    }
}

/// Starts VS Code (code-server) if it is not running.
async fn code() -> Response {
    match crate::code::ensure().await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")).into_response(),
    }
}

/// A byte tunnel to a service on the workspace's loopback — `code` (code-server), `vnc`
/// (x11vnc) or `vnc-view` (a view-only x11vnc), started first: the connection upgrades
/// (`Upgrade: tandem-tunnel`) and then carries whatever the server speaks to the service.
async fn tunnel(Path(service): Path<String>, req: Request) -> Response {
    let port = match service.as_str() {
        "code" => crate::code::PORT,
        "vnc" | "vnc-view" => match crate::vnc::ensure(service == "vnc-view").await {
            Ok(p) => p,
            Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")).into_response(),
        },
        _ => return (StatusCode::NOT_FOUND, "no such service").into_response(),
    };
    tunnel_to(port, req).await
}

async fn tunnel_to(port: u16, req: Request) -> Response {
    let upstream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("nothing listens on port {port}: {e}"),
            )
                .into_response();
        }
    };
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            let mut upgraded = hyper_util::rt::TokioIo::new(upgraded);
            let mut upstream = upstream;
            let _ = tokio::io::copy_bidirectional(&mut upgraded, &mut upstream).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", "tandem-tunnel")
        .body(axum::body::Body::empty())
        .unwrap_or_default()
}
