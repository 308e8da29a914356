//! What the core needs from the surfaces around it, as one trait the composition root fills
//! in. The core names no code host, chat app or HTTP listener: it asks here.

use std::collections::HashSet;

use tandem_protocol::people::RepoRole;
use tandem_protocol::{Problem, Prompt, SessionId, UserId};

use crate::{Engine, Host, Result};

/// Every method has a default that does nothing, so a core without surfaces (a test, a
/// benchmark) runs with [`NoHooks`].
#[async_trait::async_trait]
pub trait Hooks: Send + Sync {
    /// `user`'s permission on the code-host repository `owner/name` (the repo's access mode
    /// asks the code host); `None`: no permission, or no code host here.
    async fn code_host_role(
        &self,
        _engine: &Engine,
        _user: UserId,
        _owner: &str,
        _name: &str,
    ) -> Result<Option<RepoRole>> {
        Ok(None)
    }

    /// Before a turn runs in workspace `wid` (its start `instance`): its gateway (the one way
    /// out to the model and the code host) listens. A failure fails the turn.
    async fn ensure_gateway(&self, _engine: &Engine, _wid: &str, _instance: i32) -> Result<()> {
        Ok(())
    }

    /// Before a turn of `session` runs in workspace `wid`: its git ready to push, where a
    /// code host is configured. A failure is the session's event, never the turn's.
    async fn before_turn(&self, _engine: &Engine, _session: SessionId, _wid: &str) -> Result<()> {
        Ok(())
    }

    /// After `session`'s turn for `prompt` ended (its changes committed and pushed, where a
    /// code host is configured). A failure is the session's event, never the turn's.
    async fn after_turn(
        &self,
        _engine: &Engine,
        _session: SessionId,
        _prompt: &Prompt,
    ) -> Result<()> {
        Ok(())
    }

    /// Share link `jti` of `session` was revoked: everyone who came through it is disconnected.
    fn link_revoked(&self, _session: SessionId, _jti: &str) {}

    /// This host can run workspaces now (at start, or when a later probe found it able).
    fn host_ready(&self, _engine: &Engine, _host: &Host) {}

    /// Builds the workspace host again while the server has none (the runtime may have been
    /// installed since); `None` when this process never builds one.
    async fn probe_host(&self, _engine: &Engine) -> Option<std::result::Result<Host, Problem>> {
        None
    }

    /// Whether another server sharing the database was seen lately (it boots the sessions this
    /// one cannot).
    async fn others_run_workspaces(&self, _engine: &Engine) -> Result<bool> {
        Ok(false)
    }

    /// Once a supervision tick: the workspaces still live here (what surfaces hold per
    /// workspace can be let go for the others).
    async fn supervised(&self, _engine: &Engine, _live: &HashSet<String>) {}
}

/// No surfaces: turns change the workspace and nothing else.
pub struct NoHooks;

impl Hooks for NoHooks {}
