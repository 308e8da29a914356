//! Git smart HTTP at `/{owner}/{repo}.git/…`, served by real `git http-backend` (CGI) behind
//! HTTP Basic auth with an installation token as the password — as github.com serves it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::auth::Caller;
use crate::error::Error;
use crate::state::{Shared, bot_login, level};

/// The largest request body (a push's pack) the fake accepts.
pub(crate) const MAX_REQUEST_BODY: usize = 512 << 20;
/// The largest CGI header block `git http-backend` may write before its body.
const MAX_CGI_HEADERS: usize = 64 << 10;
/// How much of the backend's output goes into one response chunk.
const CHUNK: usize = 64 << 10;

/// `owner`, `repo` (without `.git`) and the rest of a git URL path, if it is one.
fn split_git_path(path: &str) -> Option<(&str, &str, &str)> {
    let (owner, rest) = path.strip_prefix('/')?.split_once('/')?;
    let (repo, rest) = rest.split_once('/')?;
    let repo = repo.strip_suffix(".git")?;
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    (plain(owner) && plain(repo)).then_some((owner, repo, rest))
}

pub(crate) fn is_git_path(path: &str) -> bool {
    split_git_path(path).is_some()
}

/// GitHub's answer to git without (good) credentials; git then asks its credential helper.
pub(crate) fn challenge() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("www-authenticate", "Basic realm=\"GitHub\"")],
        "",
    )
        .into_response()
}

fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        [("content-type", "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// The fallback route: a git request goes to `git http-backend`, anything else is GitHub's 404.
pub(crate) async fn serve(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let Some((owner, repo, rest)) = split_git_path(request.uri().path()) else {
        return Error::NotFound.into_response();
    };
    let full = format!("{owner}/{repo}");
    let pushing = rest == "git-receive-pack"
        || request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "service=git-receive-pack"));
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Anonymous);
    let Caller::Installation { token, .. } = &caller else {
        return challenge();
    };
    {
        let world = shared.world();
        let granted = world
            .token(token)
            .filter(|t| world.repos.contains_key(&full) && t.minted.repos.contains(&full));
        let Some(granted) = granted else {
            return plain(StatusCode::NOT_FOUND, "Repository not found.\n".into());
        };
        let contents = granted
            .minted
            .permissions
            .get("contents")
            .map_or(0, |l| level(l));
        if contents
            < if pushing {
                level("write")
            } else {
                level("read")
            }
        {
            return plain(
                StatusCode::FORBIDDEN,
                format!("Permission to {full}.git denied to {}.\n", bot_login()),
            );
        }
    }
    match backend(&shared, &caller, request).await {
        Ok(response) => response,
        Err(e) => plain(StatusCode::BAD_GATEWAY, format!("git http-backend: {e}\n")),
    }
}

/// Runs one CGI request through `git http-backend` and streams its answer back.
async fn backend(shared: &Shared, caller: &Caller, request: Request) -> std::io::Result<Response> {
    let (parts, body) = request.into_parts();
    // git sends a whole pack (or a gzipped want list) per request; reading it first keeps the
    // CGI plumbing simple, and the limit keeps a runaway client bounded.
    let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BODY).await else {
        return Ok(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large\n".into(),
        ));
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", &shared.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("REMOTE_USER", caller.who())
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_CONFIG_PARAMETERS",
    ] {
        cmd.env_remove(var);
    }
    if parts.method == axum::http::Method::POST || !body.is_empty() {
        cmd.env("CONTENT_LENGTH", body.len().to_string());
    }
    let encoding = header("content-encoding");
    if !encoding.is_empty() {
        cmd.env("HTTP_CONTENT_ENCODING", encoding);
    }
    let protocol = header("git-protocol");
    if !protocol.is_empty() {
        cmd.env("GIT_PROTOCOL", protocol);
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Written from its own task: the backend may answer before it has read everything.
    tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let mut stdout = child.stdout.take().expect("piped stdout");

    let mut head = Vec::new();
    let (headers_end, body_start) = loop {
        if let Some(found) = blank_line(&head) {
            break found;
        }
        if head.len() > MAX_CGI_HEADERS {
            return Err(std::io::Error::other("no end to the CGI headers"));
        }
        let mut chunk = [0u8; 8192];
        let n = stdout.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("exited before its headers ended"));
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let mut response = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(&head[..headers_end]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value
                .split(' ')
                .next()
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(500);
            response = response.status(code);
        } else if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name.trim()),
            HeaderValue::try_from(value),
        ) {
            response = response.header(n, v);
        }
    }
    let first = Bytes::copy_from_slice(&head[body_start..]);
    // The rest of stdout streams out as the body; the child is reaped once it closes.
    let stream = futures::stream::unfold(Some((stdout, child, first)), |state| async move {
        let (mut out, mut child, first) = state?;
        if !first.is_empty() {
            return Some((Ok(first), Some((out, child, Bytes::new()))));
        }
        let mut chunk = vec![0u8; CHUNK];
        match out.read(&mut chunk).await {
            Ok(0) => {
                let _ = child.wait().await;
                None
            }
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(Bytes::from(chunk)), Some((out, child, Bytes::new()))))
            }
            Err(e) => Some((Err::<Bytes, _>(e), None)),
        }
    });
    Ok(response
        .body(Body::from_stream(stream))
        .expect("valid CGI response"))
}

/// Where the CGI header block ends and the body starts (`\r\n\r\n` or `\n\n`).
fn blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_paths_name_owner_repo_and_rest() {
        assert_eq!(
            split_git_path("/acme/widgets.git/info/refs"),
            Some(("acme", "widgets", "info/refs"))
        );
        assert_eq!(
            split_git_path("/acme/widgets.git/git-receive-pack"),
            Some(("acme", "widgets", "git-receive-pack"))
        );
        assert_eq!(split_git_path("/acme/widgets/info/refs"), None);
        assert_eq!(split_git_path("/../x.git/info/refs"), None);
        assert_eq!(split_git_path("/repos/acme/widgets"), None);
    }

    #[test]
    fn cgi_header_block_ends_at_the_first_blank_line() {
        assert_eq!(
            blank_line(b"Status: 200 OK\r\nA: b\r\n\r\nbody\n\n"),
            Some((20, 24))
        );
        assert_eq!(blank_line(b"Status: 200 OK\n\nbody"), Some((14, 16)));
        assert_eq!(blank_line(b"Status: 200 OK\r\n"), None);
    }
}
