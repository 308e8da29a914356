//! The server's side of the workspace agent: what a workspace needs to run it (binary, socket
//! directory, token), and calls to it over the workspace's unix socket.
//!
//! The agent runs inside the workspace, so everything it says is untrusted input. The socket
//! lives in a directory the workspace can write, so a workspace could swap it for a symlink to
//! some host socket: every connection is therefore checked to lead to a process in the
//! workspace's own PID namespace before a request is sent.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use sha2::Sha256;
use tandem_protocol::agent::{self, AgentHealth};

use crate::runtime::Bind;
use crate::snapshots::Workspaces;
use crate::{Error, Result};

#[cfg(test)]
mod fuzz_tests;

/// Largest answer read from an agent.
pub const MAX_ANSWER_BYTES: usize = 2 * agent::MAX_FILE_BYTES;
/// How long one call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The agent key: 32 random bytes in `<data dir>/agent.key`, made on first use.
pub fn load_key(data_dir: &Path) -> Result<Vec<u8>> {
    crate::data_dir::load_or_create_key(&data_dir.join(crate::data_dir::AGENT_KEY))
}

/// The token of workspace `wid`: HMAC-SHA256 of its id under the agent key, so it survives a
/// server restart without being stored.
pub fn token(key: &[u8], wid: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(wid.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host directory bound at the agent's socket directory.
pub fn host_dir(ws: &Workspaces, wid: &str) -> PathBuf {
    crate::runtime::dirs(ws.runtime.as_ref(), wid).agent
}

/// A workspace's init command, environment and binds.
pub type SpecParts = (Vec<String>, Vec<(String, String)>, Vec<Bind>);

/// What a workspace spec needs to run the agent: its init, env and binds.
pub fn spec_parts(ws: &Workspaces, wid: &str) -> Result<SpecParts> {
    let dir = host_dir(ws, wid);
    std::fs::create_dir_all(&dir)?;
    let init = vec![agent::BINARY.to_string(), "serve".into()];
    let env = vec![
        (agent::TOKEN_ENV.to_string(), token(&ws.agent_key, wid)),
        // The checkout's files have other owners and inode numbers in the workspace than where
        // its index was written (the host's checkout, shifted into the workspace's uids; the
        // layers under its own disk): git compares what is stable across both, mtime and
        // size, rather than re-reading every file at the first status.
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("GIT_CONFIG_KEY_0".into(), "core.checkStat".into()),
        ("GIT_CONFIG_VALUE_0".into(), "minimal".into()),
    ];
    let socket_dir = Path::new(agent::SOCKET)
        .parent()
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default();
    let gateway = crate::gateway::host_dir(ws, wid);
    std::fs::create_dir_all(&gateway)?;
    let x11 = crate::desktop::x11_dir(ws, wid);
    std::fs::create_dir_all(&x11)?;
    // Xvfb makes its socket here as root with mode 1777 like /tmp/.X11-unix.
    std::fs::set_permissions(&x11, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    let gateway_dir = Path::new(agent::GATEWAY_SOCKET)
        .parent()
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default();
    let binds = vec![
        Bind {
            host: dir,
            container: socket_dir,
            readonly: false,
        },
        // Read-only: the workspace can use the gateway's socket but not replace it.
        Bind {
            host: gateway,
            container: gateway_dir,
            readonly: true,
        },
        Bind {
            host: ws.agent_bin.clone(),
            container: agent::BINARY.into(),
            readonly: true,
        },
        // The desktop's display socket, where the server's encoder can reach it.
        Bind {
            host: x11.clone(),
            container: "/tmp/.X11-unix".into(),
            readonly: false,
        },
    ];
    let mut binds = binds;
    if let Some((node, dir)) = &ws.code_server {
        binds.push(Bind {
            host: node.clone(),
            container: "/run/tandem/bin/node".into(),
            readonly: true,
        });
        // The whole node_modules: code-server's own dependencies sit beside it (npm hoists them).
        let modules = dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.clone());
        binds.push(Bind {
            host: modules,
            container: "/run/tandem/node_modules".into(),
            readonly: true,
        });
    }
    if let Some(bin) = &ws.opencode_bin {
        binds.push(Bind {
            host: bin.clone(),
            container: agent::OPENCODE_BINARY.into(),
            readonly: true,
        });
    }
    Ok((init, env, binds))
}

fn pid_namespace(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn unreachable(e: &dyn std::fmt::Display) -> Error {
    Error::Unavailable(format!("the workspace agent is not reachable: {e}"))
}

/// A connection to the agent of workspace `wid` (whose init is host PID `init_pid`), checked to
/// lead into that workspace.
pub(crate) async fn connect(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
) -> Result<tokio::net::UnixStream> {
    let socket = host_dir(ws, wid).join(Path::new(agent::SOCKET).file_name().unwrap_or_default());
    let stream = tokio::net::UnixStream::connect(&socket)
        .await
        .map_err(|e| unreachable(&e))?;
    // The peer must live in this workspace's PID namespace (see the module comment).
    let peer = stream
        .peer_cred()
        .map_err(|e| unreachable(&e))?
        .pid()
        .unwrap_or(0);
    let (Some(theirs), Some(ours)) = (pid_namespace(peer), pid_namespace(init_pid)) else {
        return Err(unreachable(&"cannot identify the agent process"));
    };
    if theirs != ours {
        return Err(Error::Forbidden(format!(
            "the agent socket of {wid} does not lead into the workspace"
        )));
    }
    Ok(stream)
}

/// Sends one request; the answer's body is left to the caller.
async fn send(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    method: Method,
    path_and_query: &str,
    body: Option<Vec<u8>>,
) -> Result<hyper::Response<hyper::body::Incoming>> {
    let stream = connect(ws, wid, init_pid).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header("host", "agent")
        .header(
            "authorization",
            format!("Bearer {}", token(&ws.agent_key, wid)),
        )
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| Error::Internal(e.to_string()))?;
    sender.send_request(req).await.map_err(|e| unreachable(&e))
}

/// One request to the agent of workspace `wid`, its whole (bounded) answer.
pub async fn call(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    method: Method,
    path_and_query: &str,
    body: Option<Vec<u8>>,
) -> Result<(StatusCode, Bytes)> {
    let fut = async {
        let res = send(ws, wid, init_pid, method, path_and_query, body).await?;
        let status = res.status();
        let body = http_body_util::Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| Error::Internal(format!("reading the agent's answer: {e}")))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .map_err(|_| Error::Unavailable("the workspace agent did not answer in time".into()))?
}

/// Runs a command through the agent, handing each output frame to `on_frame` as it arrives;
/// returns the final `exit` frame.
pub async fn exec_stream(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    req: &agent::ExecStart,
    mut on_frame: impl FnMut(agent::ExecFrame),
) -> Result<agent::ExecFrame> {
    let body = serde_json::to_vec(req).map_err(|e| Error::Internal(e.to_string()))?;
    let res = send(ws, wid, init_pid, Method::POST, "/exec", Some(body)).await?;
    if res.status() != StatusCode::OK {
        let status = res.status();
        let b = res
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(Error::BadRequest(format!(
            "the agent refused the command ({status}): {}",
            String::from_utf8_lossy(&b)
        )));
    }
    let mut body = res.into_body();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| unreachable(&e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let f: agent::ExecFrame = serde_json::from_slice(&line)
                .map_err(|e| Error::Internal(format!("a malformed frame from the agent: {e}")))?;
            if matches!(f, agent::ExecFrame::Exit { .. }) {
                return Ok(f);
            }
            on_frame(f);
        }
        if pending.len() > MAX_ANSWER_BYTES {
            return Err(Error::Internal("the agent sent an oversized frame".into()));
        }
    }
    Err(unreachable(
        &"the agent closed the stream before the command ended",
    ))
}

/// Opens a terminal in the workspace.
pub async fn open_pty(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    req: &agent::PtyOpen,
) -> Result<agent::PtyInfo> {
    let body = serde_json::to_vec(req).map_err(|e| Error::Internal(e.to_string()))?;
    let (status, answer) = call(ws, wid, init_pid, Method::POST, "/ptys", Some(body)).await?;
    if status != StatusCode::CREATED {
        return Err(Error::BadRequest(format!(
            "the agent refused the terminal: {}",
            String::from_utf8_lossy(&answer)
        )));
    }
    serde_json::from_slice(&answer)
        .map_err(|e| Error::Internal(format!("the agent's terminal answer: {e}")))
}

/// A WebSocket attached to terminal `pty`: binary frames are terminal bytes both ways, text
/// frames are [`agent::PtyControl`]. The first frame is the scrollback.
pub async fn attach_pty(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    pty: u32,
) -> Result<tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let stream = connect(ws, wid, init_pid).await?;
    let mut req = format!("ws://agent/ptys/{pty}/attach")
        .into_client_request()
        .map_err(|e| Error::Internal(e.to_string()))?;
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", token(&ws.agent_key, wid))
            .parse()
            .map_err(|_| Error::Internal("token header".into()))?,
    );
    let (socket, _) = tokio_tungstenite::client_async(req, stream)
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(r)
                if r.status() == StatusCode::NOT_FOUND =>
            {
                Error::NotFound(format!("no terminal {pty}"))
            }
            e => unreachable(&e),
        })?;
    Ok(socket)
}

/// Waits until the agent answers `/health`.
pub async fn wait_ready(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    within: Duration,
) -> Result<AgentHealth> {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    while Instant::now() < deadline {
        match call(ws, wid, init_pid, Method::GET, "/health", None).await {
            Ok((StatusCode::OK, body)) => {
                return serde_json::from_slice(&body)
                    .map_err(|e| Error::Internal(format!("agent health: {e}")));
            }
            Ok((status, _)) => last = format!("answered {status}"),
            Err(e) => last = e.to_string(),
        }
        // The socket appears when the agent has started; the next try is an event away.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(Error::Internal(format!(
        "the workspace agent did not come up: {last}"
    )))
}

/// Frames of a running turn, read as they come; the channel is bounded so a slow store slows
/// the agent, never memory. The last item is the `end` frame or the error that broke the stream.
pub type TurnFrames = tokio::sync::mpsc::Receiver<Result<agent::TurnFrame>>;

/// Starts a turn in the workspace; dropping the receiver closes the stream, which stops it.
pub async fn start_turn(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    req: &agent::TurnStart,
) -> Result<TurnFrames> {
    let body = serde_json::to_vec(req).map_err(|e| Error::Internal(e.to_string()))?;
    let res = send(ws, wid, init_pid, Method::POST, "/turns", Some(body)).await?;
    if res.status() != StatusCode::OK {
        let status = res.status();
        let b = res
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let why = format!(
            "the agent refused the turn ({status}): {}",
            String::from_utf8_lossy(&b)
        );
        // 409: still busy with the turn before; anything else is a broken agent.
        return Err(if status == StatusCode::CONFLICT {
            Error::Conflict(why)
        } else {
            Error::Unavailable(why)
        });
    }
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let mut body = res.into_body();
    tokio::spawn(async move {
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                () = tx.closed() => return,
            };
            let Some(frame) = frame else { break };
            let data = match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
                Err(e) => {
                    let _ = tx.send(Err(unreachable(&e))).await;
                    return;
                }
            };
            pending.extend_from_slice(&data);
            while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                let item = serde_json::from_slice::<agent::TurnFrame>(&line).map_err(|e| {
                    Error::Internal(format!("a malformed turn frame from the agent: {e}"))
                });
                let end = matches!(item, Ok(agent::TurnFrame::End { .. }) | Err(_));
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
            if pending.len() > MAX_ANSWER_BYTES {
                let _ = tx
                    .send(Err(Error::Internal(
                        "the agent sent an oversized turn frame".into(),
                    )))
                    .await;
                return;
            }
        }
        let _ = tx
            .send(Err(unreachable(
                &"the agent closed the turn before it ended",
            )))
            .await;
    });
    Ok(rx)
}

/// Asks the agent to steer (`Some(steer)`) or stop (`None`) turn `turn`. `Ok(false)` when the
/// agent says it cannot (not running, or an agent without tool boundaries).
pub async fn control_turn(
    ws: &Workspaces,
    wid: &str,
    init_pid: i32,
    turn: tandem_protocol::PromptId,
    steer: Option<&agent::TurnSteer>,
) -> Result<bool> {
    let (path, body) = match steer {
        Some(s) => (
            format!("/turns/{turn}/steer"),
            Some(serde_json::to_vec(s).map_err(|e| Error::Internal(e.to_string()))?),
        ),
        None => (format!("/turns/{turn}/stop"), None),
    };
    let (status, _) = call(ws, wid, init_pid, Method::POST, &path, body).await?;
    Ok(status == StatusCode::ACCEPTED)
}
