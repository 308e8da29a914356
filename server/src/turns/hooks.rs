//! What happens around a turn that is not the turn itself: before it, the workspace's git made
//! ready to push (GitHub); after it, the changes committed as the prompt's author and pushed
//! to the session's pull request. Set in `serve.rs`, so turns know no code host.

use tandem_protocol::{Prompt, SessionId};

use crate::Result;
use crate::state::AppState;

/// The hooks a turn runs (both failures are the session's events, never the turn's).
#[async_trait::async_trait]
pub trait TurnHooks: Send + Sync {
    /// Before a turn of `session` runs in workspace `wid`.
    async fn before_turn(&self, state: &AppState, session: SessionId, wid: &str) -> Result<()>;
    /// After a turn of `session` for `prompt` ended.
    async fn after_turn(&self, state: &AppState, session: SessionId, prompt: &Prompt)
    -> Result<()>;
}

/// No hooks: turns change the workspace and nothing else.
pub struct NoHooks;

#[async_trait::async_trait]
impl TurnHooks for NoHooks {
    async fn before_turn(&self, _: &AppState, _: SessionId, _: &str) -> Result<()> {
        Ok(())
    }
    async fn after_turn(&self, _: &AppState, _: SessionId, _: &Prompt) -> Result<()> {
        Ok(())
    }
}
