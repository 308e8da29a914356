//! The core's hooks ([`tandem_core::hooks::Hooks`]) as this server fills them: GitHub for a
//! person's permission and a turn's pushes, the workspace gateway, the live hubs, the cluster.

use std::collections::HashSet;

use tandem_core::hooks::Hooks;
use tandem_protocol::people::RepoRole;
use tandem_protocol::{Problem, Prompt, SessionId, UserId};

use crate::state::{AppState, WeakState};
use crate::{Engine, Host, now_ms};

/// Holds the state weakly: the state holds the engine, which holds these.
#[derive(Default)]
pub struct ServerHooks {
    app: std::sync::OnceLock<WeakState>,
}

type CoreResult<T> = tandem_core::Result<T>;

impl ServerHooks {
    /// Ties the hooks to the state they serve (once, right after it is made).
    pub fn bind(&self, app: &AppState) {
        let _ = self.app.set(app.downgrade());
    }

    fn app(&self) -> Option<AppState> {
        self.app.get().and_then(WeakState::upgrade)
    }

    /// The state, or an error a turn reports: a server that is stopping runs no gateway, pushes
    /// nothing, and looks up no permission (which would be cached as none).
    fn serving(&self) -> CoreResult<AppState> {
        self.app()
            .ok_or_else(|| tandem_core::Error::Unavailable("the server is stopping".into()))
    }
}

#[async_trait::async_trait]
impl Hooks for ServerHooks {
    async fn code_host_role(
        &self,
        _: &Engine,
        user: UserId,
        owner: &str,
        name: &str,
    ) -> CoreResult<Option<RepoRole>> {
        let app = self.serving()?;
        let Some(gh) = app.github.clone() else {
            return Ok(None);
        };
        Ok(crate::github::permission::of_person(&app, &gh, user, owner, name).await?)
    }

    async fn ensure_gateway(&self, _: &Engine, wid: &str, instance: i32) -> CoreResult<()> {
        let app = self.serving()?;
        Ok(app.gateways.ensure(&app, wid, instance).await?)
    }

    async fn before_turn(&self, _: &Engine, session: SessionId, wid: &str) -> CoreResult<()> {
        let app = self.serving()?;
        // The workspace's own git reaches GitHub through the gateway (once per workspace).
        Ok(crate::github::pr::prepare_session(&app, session, wid).await?)
    }

    async fn after_turn(&self, _: &Engine, session: SessionId, prompt: &Prompt) -> CoreResult<()> {
        let app = self.serving()?;
        Ok(crate::github::pr::after_turn(&app, session, prompt).await?)
    }

    fn link_revoked(&self, session: SessionId, jti: &str) {
        if let Some(app) = self.app() {
            app.hubs.revoke(session, jti);
        }
    }

    fn host_ready(&self, _: &Engine, host: &Host) {
        // Where the other servers forward requests about this host's sessions.
        if let Some(app) = self.app() {
            crate::cluster::register(&app, host.host_id.clone());
        }
    }

    async fn probe_host(&self, engine: &Engine) -> Option<Result<Host, Problem>> {
        let github = self.app().and_then(|a| a.github.clone());
        Some(crate::serve::workspaces(&engine.config, github).await)
    }

    async fn others_run_workspaces(&self, engine: &Engine) -> CoreResult<bool> {
        let since = now_ms() - 3 * crate::cluster::REFRESH.as_millis() as i64;
        Ok(crate::db::servers::any_since(&engine.db, since).await?)
    }

    async fn supervised(&self, _: &Engine, live: &HashSet<String>) {
        let Some(app) = self.app() else {
            return;
        };
        if let Some(gh) = &app.github
            && let Err(e) = crate::github::credentials::revoke_ended(gh).await
        {
            tracing::warn!(error = %e, "revoking ended sessions' GitHub tokens failed");
        }
        app.gateways.retain(live);
        if let Some(gh) = &app.github {
            gh.retain_prepared(live);
        }
    }
}
