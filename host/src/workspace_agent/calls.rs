//! What the server asks a workspace's agent, one typed method per route of
//! [`tandem_protocol::agent::routes`]: health, files, git, terminals, the desktop, VS Code and
//! turns. Every answer is parsed as the untrusted input it is.

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tandem_protocol::PromptId;
use tandem_protocol::agent::{
    self, AgentHealth, DesktopInfo, DesktopPage, FileView, GitCommit, GitCommitted, GitStatus,
    PtyInfo, PtyOpen, TurnFrame, TurnStart, TurnSteer, routes,
};

use super::{WorkspaceAgent, ndjson};
use crate::{Error, Result};

/// Frames of a running turn, read as they come ([`ndjson::Frames`]); the last item is the
/// `end` frame or the error that broke the stream.
pub type TurnFrames = ndjson::Frames<TurnFrame>;

fn json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::Internal(e.to_string()))
}

fn parse<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::Internal(format!("the agent's {what}: {e}")))
}

/// Percent-encodes a query value.
fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A file's content is at most [`agent::MAX_FILE_BYTES`].
pub fn check_file_size(content: &str) -> Result<()> {
    if content.len() > agent::MAX_FILE_BYTES {
        return Err(Error::TooLarge(format!(
            "files are at most {} bytes",
            agent::MAX_FILE_BYTES
        )));
    }
    Ok(())
}

fn file_path(path: &str) -> String {
    format!("{}?path={}", routes::FILES, query_value(path))
}

impl WorkspaceAgent<'_> {
    /// The agent's health, once.
    pub async fn health(&self) -> Result<AgentHealth> {
        let body = self
            .expect(
                "the agent's health",
                Method::GET,
                routes::HEALTH,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("health", &body)
    }

    /// Waits until the agent answers its health check.
    pub async fn wait_ready(&self, within: Duration) -> Result<AgentHealth> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.call(Method::GET, routes::HEALTH, None).await {
                // An answer that does not parse is a broken agent: no point waiting for it.
                Ok((StatusCode::OK, body)) => return parse("health", &body),
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

    /// A directory listing or a file of the checkout (the agent confines it to `/workspace`).
    pub async fn read_file(&self, path: &str) -> Result<FileView> {
        let body = self
            .expect(
                "reading a file",
                Method::GET,
                &file_path(path),
                None,
                StatusCode::OK,
            )
            .await?;
        parse("file answer", &body)
    }

    /// Writes a file of the checkout (at most [`agent::MAX_FILE_BYTES`]).
    pub async fn write_file(&self, path: &str, content: String) -> Result<()> {
        self.write_file_if(path, content, None).await
    }

    /// Writes a file only if its content now hashes to `if_sha` (SHA-256, hex); a file changed
    /// meanwhile is [`crate::Error::Conflict`] and is left as it is.
    pub async fn write_file_if(
        &self,
        path: &str,
        content: String,
        if_sha: Option<String>,
    ) -> Result<()> {
        check_file_size(&content)?;
        let body = json(&agent::WriteFile { content, if_sha })?;
        self.expect(
            "writing a file",
            Method::PUT,
            &file_path(path),
            Some(body),
            StatusCode::NO_CONTENT,
        )
        .await
        .map(drop)
    }

    /// The checkout's files: tracked and new (the Files pane's tree).
    pub async fn file_tree(&self) -> Result<agent::FileTree> {
        let body = self
            .expect(
                "listing the files",
                Method::GET,
                routes::FILES_TREE,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("file tree", &body)
    }

    /// Waits (up to `w.wait_ms`) for a file to differ from the content hashed in `w.known`.
    pub async fn watch_file(&self, w: &agent::WatchFile) -> Result<agent::FileNow> {
        let body = self
            .expect(
                "watching a file",
                Method::POST,
                routes::FILES_WATCH,
                Some(json(w)?),
                StatusCode::OK,
            )
            .await?;
        parse("watch answer", &body)
    }

    /// The checkout's branch, HEAD and changed paths.
    pub async fn git_status(&self) -> Result<GitStatus> {
        let body = self
            .expect(
                "git status",
                Method::GET,
                routes::GIT_STATUS,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("git status", &body)
    }

    /// Commits every change in the checkout; a 409 (nothing to commit) is a conflict.
    pub async fn git_commit(&self, req: &GitCommit) -> Result<GitCommitted> {
        let body = self
            .expect(
                "committing",
                Method::POST,
                routes::GIT_COMMIT,
                Some(json(req)?),
                StatusCode::CREATED,
            )
            .await?;
        parse("commit answer", &body)
    }

    /// The workspace's terminals.
    pub async fn ptys(&self) -> Result<Vec<PtyInfo>> {
        let body = self
            .expect(
                "the agent's terminals",
                Method::GET,
                routes::PTYS,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("terminal list", &body)
    }

    /// Opens a terminal.
    pub async fn open_pty(&self, req: &PtyOpen) -> Result<PtyInfo> {
        let (status, answer) = self
            .call(Method::POST, routes::PTYS, Some(json(req)?))
            .await?;
        if status != StatusCode::CREATED {
            return Err(Error::BadRequest(format!(
                "the agent refused the terminal: {}",
                String::from_utf8_lossy(&answer)
            )));
        }
        parse("terminal answer", &answer)
    }

    /// A WebSocket attached to terminal `pty`: binary frames are terminal bytes both ways, text
    /// frames are [`agent::PtyControl`]. The first frame is the scrollback.
    pub async fn attach_pty(
        &self,
        pty: u32,
    ) -> Result<tokio_tungstenite::WebSocketStream<crate::runtime::AgentStream>> {
        self.websocket(
            &routes::with(routes::PTY_ATTACH, pty),
            &format!("terminal {pty}"),
        )
        .await
    }

    /// Starts the desktop (if it is not running) and says where it is.
    pub async fn start_desktop(&self) -> Result<DesktopInfo> {
        let body = self
            .expect(
                "the workspace's desktop did not start",
                Method::POST,
                routes::DESKTOP,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("desktop answer", &body)
    }

    /// The desktop's state and its browser's page.
    pub async fn desktop_page(&self) -> Result<DesktopPage> {
        let body = self
            .expect(
                "the desktop did not answer",
                Method::GET,
                routes::DESKTOP,
                None,
                StatusCode::OK,
            )
            .await?;
        parse("desktop page", &body)
    }

    /// Sends keyboard and pointer input to the desktop.
    pub async fn desktop_input(&self, inputs: &agent::DesktopInputs) -> Result<()> {
        self.expect(
            "the desktop took no input",
            Method::POST,
            routes::DESKTOP_INPUT,
            Some(json(inputs)?),
            StatusCode::NO_CONTENT,
        )
        .await
        .map(drop)
    }

    /// Shows `url` in the desktop's browser.
    pub async fn desktop_open(&self, url: &str) -> Result<()> {
        self.expect(
            "the browser did not open it",
            Method::POST,
            routes::DESKTOP_OPEN,
            Some(json(&agent::DesktopOpen { url: url.into() })?),
            StatusCode::OK,
        )
        .await
        .map(drop)
    }

    /// Starts VS Code in the workspace (a no-op when it runs).
    pub async fn start_code(&self) -> Result<()> {
        self.expect(
            "VS Code did not start",
            Method::POST,
            routes::CODE,
            None,
            StatusCode::NO_CONTENT,
        )
        .await
        .map(drop)
    }

    /// Starts a turn; dropping the receiver closes the stream, which stops it. A 409 (still
    /// busy with the turn before) is a conflict; any other refusal a broken agent.
    pub async fn start_turn(&self, req: &TurnStart) -> Result<TurnFrames> {
        let res = self
            .send(Method::POST, routes::TURNS, Some(json(req)?))
            .await?;
        if res.status() != StatusCode::OK {
            let status = res.status();
            let b = http_body_util::BodyExt::collect(http_body_util::Limited::new(
                res.into_body(),
                super::MAX_ANSWER_BYTES,
            ))
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
            let why = format!(
                "the agent refused the turn ({status}): {}",
                String::from_utf8_lossy(&b)
            );
            return Err(if status == StatusCode::CONFLICT {
                Error::Conflict(why)
            } else {
                Error::Unavailable(why)
            });
        }
        Ok(ndjson::read(res.into_body(), "turn", |f| {
            matches!(f, TurnFrame::End { .. })
        }))
    }

    /// Asks the agent to steer turn `turn`; `Ok(false)` when it cannot (not running, or an
    /// agent without tool boundaries).
    pub async fn steer_turn(&self, turn: PromptId, steer: &TurnSteer) -> Result<bool> {
        let (status, _) = self
            .call(
                Method::POST,
                &routes::with(routes::TURN_STEER, turn),
                Some(json(steer)?),
            )
            .await?;
        Ok(status == StatusCode::ACCEPTED)
    }

    /// Asks the agent to stop turn `turn`; `Ok(false)` when it is not running.
    pub async fn stop_turn(&self, turn: PromptId) -> Result<bool> {
        let (status, _) = self
            .call(Method::POST, &routes::with(routes::TURN_STOP, turn), None)
            .await?;
        Ok(status == StatusCode::ACCEPTED)
    }
}

#[cfg(test)]
mod tests {
    use super::super::conn::refused;
    use super::*;

    #[test]
    fn refusals_keep_the_agents_message_under_its_kind() {
        let body = br#"{"code":"not_found","message":"no such file: a.txt"}"#;
        let e = refused("reading a file", StatusCode::NOT_FOUND, body);
        assert!(
            matches!(&e, Error::NotFound(m) if m == "no such file: a.txt"),
            "{e:?}"
        );
        let e = refused("committing", StatusCode::CONFLICT, b"nothing to commit");
        assert!(
            matches!(&e, Error::Conflict(m) if m == "nothing to commit"),
            "{e:?}"
        );
        // An answer that is not ours is quoted, bounded, under what was asked.
        let long = "x".repeat(10_000);
        // A refusal is quoted bounded.
        let e = refused("reading a file", StatusCode::BAD_REQUEST, long.as_bytes());
        assert!(matches!(&e, Error::BadRequest(m) if m.len() < 400), "{e:?}");
        let e = refused(
            "opening it",
            StatusCode::UNPROCESSABLE_ENTITY,
            b"not a URL it opens",
        );
        assert!(
            matches!(&e, Error::Invalid(m) if m == "not a URL it opens"),
            "{e:?}"
        );
        // The agent failing: what was asked and its status, none of its (untrusted) text.
        let e = refused(
            "git status",
            StatusCode::INTERNAL_SERVER_ERROR,
            b"/var/lib/secret",
        );
        match e {
            Error::Unavailable(m) => {
                assert_eq!(
                    m,
                    "git status: the workspace agent answered 500 Internal Server Error"
                );
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn routes_fill_their_parameter() {
        assert_eq!(routes::with(routes::PTY_ATTACH, 7), "/ptys/7/attach");
        assert_eq!(routes::with(routes::TUNNEL, "code"), "/tunnel/code");
        assert_eq!(routes::with(routes::HEALTH, 1), "/health");
        assert_eq!(file_path("a b/ü"), "/files?path=a%20b/%C3%BC");
    }
}
